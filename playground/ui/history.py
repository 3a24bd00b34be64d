"""The session's history: one entry per compile or run, kept in a gr.State as a list of plain dicts.

Pure functions: each returns a new list, so Gradio sees a new value and nothing is shared between sessions.
"""
from __future__ import annotations

import time

import pandas as pd

LIMIT = 40  # entries kept per session (each holds its CUDA text for Compare)


def short_config(config: dict | None, defaults: dict | None = None) -> str:
    """"4096×4096×4096 fp16 · block_M=64, num_stages=2": the problem, the dtype and the tile values, each named.
    Given the kernel's `defaults` ({name: value as text}), only the tile values that differ from them are named
    ("default tile" when none does): a label must tell two runs apart at a glance."""
    if not config:
        return ""
    problem = "×".join(str(v) for v in (config.get("problem") or {}).values()
                       if isinstance(v, (int, float, str)) and not isinstance(v, bool) and str(v) not in ("True", "False"))
    flags = " ".join(k for k, v in (config.get("problem") or {}).items() if str(v) == "True")
    dtype = {"float16": "fp16", "bfloat16": "bf16", "float32": "fp32"}.get(config.get("dtype"), config.get("dtype"))
    tile = {k: v for k, v in (config.get("tile") or {}).items()
            if defaults is None or str(v) != str(defaults.get(k))}
    named = ", ".join(f"{k}={v}" for k, v in tile.items())
    if defaults is not None and not named and config.get("tile"):
        named = "default tile"
    return " ".join(p for p in (problem, flags, dtype) if p) + (f" · {named}" if named else "")


def add(history: list[dict] | None, action: str, kernel: str, result: dict, source_edited: bool,
        config: dict | None = None, defaults: dict | None = None) -> list[dict]:
    """The history with `result` appended. `config` ({"problem", "dtype", "tile"}) stands in for the result's own
    where the job failed before it resolved one (a source that does not import); `defaults` (the kernel's default
    values) lets the label name only what differs from them."""
    history = list(history or [])
    n = (history[-1]["n"] + 1) if history else 1
    timing = result.get("timing") or {}
    err = result.get("error") or {}
    res = result.get("resources") or {}
    verification = result.get("verification") or []
    entry = {
        "n": n,
        "time": time.strftime("%H:%M:%S"),
        "action": action,
        "kernel": kernel,
        "config": result.get("config") or config,
        "label": short_config(result.get("config") or config, defaults),
        "edited": source_edited,
        "ok": bool(result.get("ok")),
        "error": f"{err.get('stage')}: {err.get('message', '')[:120]}" if err else "",
        "registers": res.get("registers"),
        "shared_bytes": res.get("shared_bytes"),
        "spill_bytes": res.get("spill_bytes"),
        "passed": all(v.get("passed") for v in verification) if verification else None,
        "verified": result.get("verified"),  # False: a file without a reference, run and timed only
        "median_ms": timing.get("median_ms"),
        "tflops": result.get("tflops") if timing else None,
        "gbps": result.get("gbps") if timing else None,
        "cuda": result.get("cuda") or "",
    }
    history.append(entry)
    return history[-LIMIT:]


def frame(history: list[dict] | None) -> pd.DataFrame:
    """The history as the page's table, newest first."""
    cols = ["#", "time", "action", "kernel · config", "source", "result", "regs", "smem KiB", "spills B",
            "median ms", "TFLOP/s", "GB/s"]
    rows = []
    for h in reversed(history or []):
        result = ("ok" if h["ok"] else h["error"] or "failed")
        if h.get("passed") is False:
            result = "wrong result"
        elif h["ok"] and h.get("verified") is False:
            result = "timed, not verified"
        rows.append([h["n"], h["time"], h["action"], f'{h["kernel"]} {h["label"]}'.strip(),
                     "edited" if h["edited"] else "original",
                     result, h.get("registers"),
                     round(h["shared_bytes"] / 1024, 1) if h.get("shared_bytes") is not None else None,
                     h.get("spill_bytes"),
                     round(h["median_ms"], 4) if h.get("median_ms") is not None else None,
                     round(h["tflops"], 1) if h.get("tflops") is not None else None,
                     round(h["gbps"], 0) if h.get("gbps") is not None else None])
    return pd.DataFrame(rows, columns=cols)


def choices(history: list[dict] | None) -> list[tuple[str, int]]:
    """Dropdown choices for Compare: the entries that have CUDA, newest first."""
    return [(f"#{h['n']} {h['action']} {h['kernel']} {h['label']}" + ("" if h["ok"] else " (failed)"), h["n"])
            for h in reversed(history or []) if h.get("cuda")]


def find(history: list[dict] | None, n) -> dict | None:
    for h in history or []:
        if str(h["n"]) == str(n):
            return h
    return None
