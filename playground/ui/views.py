"""Engine JSON → HTML and tables for the page. Pure functions: no Gradio, no engine calls."""
from __future__ import annotations

import html
import math
import re

import pandas as pd

from .highlight import snippet_html

STAGE_HELP = {
    "python": "the file does not import",
    "definition": "the file lacks something the playground needs",
    "parameters": "a parameter value is not accepted",
    "resources": "the configuration needs more than the GPU has (shared memory, registers, threads)",
    "tilelang": "TileLang could not build or lower the kernel",
    "nvcc": "the generated CUDA did not compile",
    "timeout": "a step ran past its time limit",
    "device": "the GPU",
    "verify": "the kernel ran but its output is wrong",
    "busy": "the server is full right now",
    "internal": "a bug in the playground itself",
}


def esc(value) -> str:
    return html.escape(str(value))


def fmt_bytes(n) -> str:
    if n is None:
        return "–"
    n = int(n)
    if n >= 1024:
        return f"{n / 1024:.1f} KiB".replace(".0 KiB", " KiB")
    return f"{n} B"


def fmt_num(x, digits: int = 3) -> str:
    if x is None or (isinstance(x, float) and not math.isfinite(x)):
        return "–"
    if isinstance(x, int):
        return str(x)
    if x == 0:
        return "0"
    if abs(x) >= 1000 or abs(x) < 1e-3:
        return f"{x:.{digits - 1}e}" if abs(x) < 1e-3 else f"{x:,.0f}"
    return f"{x:.{digits}g}"


def fmt_ms(x) -> str:
    if x is None:
        return "–"
    return f"{x * 1000:.1f} µs" if x < 0.1 else f"{x:.3f} ms"


def dims(v) -> str:
    """"32 × 16", "384": a launch shape without its trailing ones."""
    if isinstance(v, (list, tuple)):
        v = list(v)
        while len(v) > 1 and v[-1] == 1:
            v.pop()
        return " × ".join(str(x) for x in v)
    return "–" if v is None else str(v)


def table(headers: list[str], rows: list[list[str]], cls: str = "") -> str:
    """An HTML table; cells are trusted HTML (escape before)."""
    head = "".join(f"<th>{h}</th>" for h in headers)
    body = "".join("<tr>" + "".join(f"<td>{c}</td>" for c in row) + "</tr>" for row in rows)
    return f'<table class="pg-table {cls}"><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>'


def placeholder(text: str) -> str:
    return f'<div class="pg-placeholder">{esc(text)}</div>'


# -- the class's board ---------------------------------------------------------------------------------------------
BOARD_PICK = "Pick an exercise in the Exercise section to see its leaderboard."


def board_note_html(exercise: str | None, board: dict | None) -> str:
    """The line over the leaderboard: what to do when no exercise is picked (an empty table alone says nothing),
    why there is no board, or whose board it is."""
    if not exercise:
        return placeholder(BOARD_PICK)
    board = board or {}
    if not board.get("ok"):
        message = (board.get("error") or {}).get("message") or "no board"
        return f'<div class="pg-status fail">{esc(message)}</div>'
    rows = board.get("rows") or []
    if not rows:
        return placeholder(f"No accepted submission on the board of {exercise} yet.")
    timed = f", timed at {board['timed_at']}" if board.get("timed_at") else ""
    return (f'<div class="pg-status idle">{len(rows)} {"student" if len(rows) == 1 else "students"} on the board '
            f'of {esc(exercise)}{esc(timed)}.</div>')


# -- compile ----------------------------------------------------------------------------------------------------
def resources_html(result: dict | None) -> str:
    """Registers, shared memory, spills, threads, grid and block of a compiled kernel, with warnings."""
    r = (result or {}).get("resources")
    if not r:
        return placeholder("Compile to see registers, shared memory and spills.")
    spills = r.get("spill_bytes") or 0
    regs = r.get("registers")
    # per thread: registers; per block: shared memory, threads; spills: local-memory traffic ptxas had to add
    cells = [
        ("Registers", esc(regs if regs is not None else "–"),
         "warn" if isinstance(regs, int) and regs >= 255 else ""),
        ("Shared memory", esc(fmt_bytes(r.get("shared_bytes"))) + (
            f'<small>{esc(fmt_bytes(r.get("static_shared_bytes")))} static + '
            f'{esc(fmt_bytes(r.get("dynamic_shared_bytes")))} dynamic</small>' if r.get("dynamic_shared_bytes")
            else ""), ""),
        ("Spills", esc(fmt_bytes(spills)) + (
            f'<small>{esc(r.get("spill_stores", 0))} B stores, {esc(r.get("spill_loads", 0))} B loads</small>'
            if spills else ""), "bad" if spills else "good"),
        ("Threads", esc(r.get("threads", "–")), ""),
        ("Grid", esc(dims(r.get("grid"))), ""),
        ("Block", esc(dims(r.get("block"))), ""),
    ]
    if r.get("stack_bytes"):
        cells.append(("Stack frame", esc(fmt_bytes(r["stack_bytes"])), "warn"))
    mix = dict(r.get("sass_mix") or {})
    total = mix.pop("instructions", None)
    if total:
        shown = [f"{n} {name}" for name, n in mix.items() if n and name != "FP32 math"][:3]
        cells.append(("SASS", esc(total) + (f"<small>{esc(' · '.join(shown))}</small>" if shown else ""), ""))
    titles = {"Registers": "registers per thread (ptxas); 255 is the most a thread can have",
              "Shared memory": "shared memory per block", "Spills": "bytes spilled to local memory (slow)",
              "Threads": "threads per block", "Grid": "blocks launched", "Block": "block shape",
              "SASS": "machine instructions in the kernel (each counted once, loops or not): "
                      + ", ".join(f"{name} {n}" for name, n in mix.items())}
    items = "".join(f'<div class="pg-stat {c}" title="{esc(titles.get(k, k))}"><span class="k">{k}</span>'
                    f'<span class="v">{v}</span></div>' for k, v, c in cells)
    meta = []
    if result.get("arch"):
        meta.append(f"target {esc(result['arch'])}")
    meta += [f"tile config: {esc(choice)}"] if (choice := tile_choice_text(result.get("config"))) else []
    meta += [esc(note) for note in (result.get("config") or {}).get("notes") or []]  # "causal='no' taken as false"
    if result.get("compile_seconds") is not None:  # (the status line says the same time: compile_time_text)
        meta.append(f"from the cache (compiling it took {result['compile_seconds']:.2f} s)" if result.get("cached")
                    else f"compiled in {result['compile_seconds']:.2f} s")
    if result.get("tilelang_version"):
        meta.append(f"TileLang {esc(result['tilelang_version'])}")
    warnings = "".join(f'<div class="pg-param-warn">{esc(w.get("message", ""))}</div>'
                       for w in result.get("warnings") or [] if isinstance(w, dict) and w.get("message"))
    return (f'<div class="pg-resources">{items}</div>{warnings}'
            f'<div class="pg-meta">{" · ".join(meta)}</div>')


def tile_choice_text(config: dict | None) -> str:
    """What the engine made of the tile parameters a request left out ("auto" on the page), and why: "auto →
    block_M=64, block_N=128, threads=128 (by the rule in the kernel's file (pick_config))"; "set by you" where the
    request set every one. "" for an answer without a config."""
    config = config or {}
    tile, why = config.get("tile") or {}, config.get("why") or ""
    if not tile:
        return why
    by_user = set(config.get("set_by_user") or (tile if config.get("picked_by") == "user" else ()))
    picked = {k: v for k, v in tile.items() if k not in by_user}
    if not picked:
        return why or "set by you"
    return f"auto → {tile_label(picked)}" + (f" ({why})" if why else "")


# -- errors -----------------------------------------------------------------------------------------------------
def with_own_file_hint(result: dict, kernel: str) -> dict:
    """A shipped kernel's compile whose source defines no kernel of that name (a file of one's own pasted over the
    shipped one): the answer with what to do instead, said in its message."""
    err = result.get("error") or {}
    if err.get("stage") != "parameters" or not str(err.get("message") or "").startswith(
            f"the file has no kernel {kernel!r}"):
        return result
    hint = (f". The editor holds a file of your own in place of {kernel}'s: to compile it, press New kernel (it "
            f"starts a kernel of your own) and paste it there; Reset brings back {kernel}'s file")
    return {**result, "error": {**err, "message": err["message"] + hint}}


def error_html(error: dict | None, source: str | None = None) -> str:
    """The stage, the short message and, where known, the user's line quoted from the source with its neighbours."""
    if not error:
        return ""
    stage = error.get("stage") or "internal"
    line = error.get("line")
    parts = [f'<div class="pg-error-box stage-{esc(stage)}">',
             f'<div class="pg-error-head"><span class="pg-badge">{esc(stage)}</span>'
             f'<span class="pg-stage-help">{esc(STAGE_HELP.get(stage, ""))}</span>']
    if line:
        parts.append(f'<span class="pg-error-line">line {esc(line)}</span>')
    parts.append("</div>")
    parts.append(f'<div class="pg-error-msg">{esc(error.get("message") or "")}</div>')
    useful = useful_log_lines(error)
    if useful:
        parts.append('<div class="pg-error-useful"><div class="k">From the log:</div><pre>'
                     + esc("\n".join(useful)) + "</pre></div>")
    if line and source:
        lines = source.splitlines()
        if 0 < line <= len(lines):
            parts.append(f'<div class="pg-error-where">Line {esc(line)} of your kernel: '
                         f'<code>{esc(lines[line - 1].strip())}</code></div>')
            parts.append(snippet_html(source, line))
    parts.append("</div>")
    return "".join(parts)


# Lines of a TileLang/TVM log that explain an error: what failed and on what (shapes, buffers, the operation),
# not the C++ backtrace frames or Python's traceback plumbing around them.
_USEFUL = re.compile(r"(Error|error:|Check failed|shape|Shape|buffer|Buffer|expect|mismatch|T\.\w+\(|"
                     r"\bdtype\b|out of|exceed|too (large|many)|not (supported|divisible)|must )")
_NOISE = re.compile(r"^\s*(File \"|Traceback|\d+: |\[bt\]|at |During handling|The above exception|-{4}|raise\b)|"
                    r"^\s*\^+\s*$|site-packages|tvm::|ffi::|0x[0-9a-f]{6,}")


def useful_log_lines(error: dict | None, limit: int = 8) -> list[str]:
    """Up to `limit` lines of the error's log that say what went wrong (a shape, a buffer, a check) and are not in
    its message already; none for stages whose message is the whole story."""
    error = error or {}
    if error.get("stage") not in ("tilelang", "nvcc", "resources", "internal"):
        return []
    message = error.get("message") or ""
    seen, out = set(message.splitlines()), []
    for raw in (error.get("log") or "").splitlines():
        line = raw.strip()
        if not line or len(line) > 300 or line in seen or line in message or _NOISE.search(raw):
            continue
        if _USEFUL.search(line):
            seen.add(line)
            out.append(line)
    return out[-limit:]  # the cause is nearest the end of a trace


def ran_on_text(result: dict | None) -> str:
    """" · ran on gpu-node-2, GPU 1 (sm_90a)": where a job on a Ray cluster ran (its `ran_on`); "" on one server."""
    where = (result or {}).get("ran_on") or {}
    host = where.get("hostname") or where.get("node")
    if not host:
        return ""
    gpu = where.get("gpu")
    return f" · ran on {host}" + (f", GPU {gpu}" if gpu is not None else "") + (
        f" ({where['arch']})" if where.get("arch") else "")


READY = "Ready. Edit the kernel or its parameters, then Compile (Ctrl+Enter) or Run (Ctrl+Shift+Enter)."


def status_html(action: str, result: dict | None, waited: float | None = None) -> str:
    """A one-line summary of the last action, above the panes. `waited`: the seconds the user waited for it (what a
    cached compile reports, rather than how long the compile it reuses once took)."""
    if not result:
        return f'<div class="pg-status idle">{READY}</div>'
    kernel = esc(result.get("kernel", ""))
    if not result.get("ok"):
        err = result.get("error") or {}
        where = f" at line {err['line']}" if err.get("line") else ""
        return (f'<div class="pg-status fail">✗ {esc(action)} of {kernel} failed{esc(where)}: '
                f'<b>{esc(err.get("stage", "?"))}</b> — {esc(first_sentence(err.get("message", "")))}'
                f'{esc(ran_on_text(result))}</div>')
    if action == "compile":
        text = f"✓ compiled {kernel} for {esc(result.get('arch', ''))}" + compile_time_text(result, waited)
    elif action == "run":
        t = result.get("timing") or {}
        text = f"✓ {kernel} verified and timed: {esc(fmt_ms(t.get('median_ms')))}"
        if result.get("verified") is False:  # no reference in the file: never a green check (issue 18)
            return (f'<div class="pg-status warn">{kernel} timed, not verified: {esc(fmt_ms(t.get("median_ms")))}'
                    f' — {esc(first_sentence(result.get("verification_note") or "the file has no reference"))}</div>')
        if result.get("tflops") is not None:
            text += f", {result['tflops']:.1f} TFLOP/s, {result.get('gbps', 0):.0f} GB/s"
    elif action == "tune":
        best = result.get("best") or {}
        text = (f"✓ tuned {kernel}: best {esc(tile_label(best.get('tile') or {}))} at "
                f"{esc(fmt_ms(best.get('median_ms')))}")
    else:
        text = f"✓ {esc(action)} of {kernel} done"
    return f'<div class="pg-status ok">{text}{esc(ran_on_text(result))}</div>'


def compile_time_text(result: dict, waited: float | None = None) -> str:
    """The compile's one time, the engine's (`compile_seconds`: what the resources line says too), and apart from
    it what the answer waited for besides (the queue, a worker, importing the file): " in 5.96 s (answered after
    13.1 s: 7.1 s waiting in the queue and loading the kernel)". From the cache, the wait and what the compile it
    reuses took: " in 0.04 s (from the cache; compiling it took 5.96 s)"."""
    t = result.get("compile_seconds")
    if result.get("cached"):
        return (f" in {waited:.2f} s" if waited is not None else "") + " (from the cache" + (
            f"; compiling it took {t:.2f} s" if t is not None else "") + ")"
    if t is None:
        return f", answered in {waited:.2f} s" if waited is not None else ""
    rest = (waited - t) if waited is not None else 0
    return f" in {t:.2f} s" + (f" (answered after {waited:.1f} s: {rest:.1f} s waiting in the queue and loading "
                               "the kernel)" if rest >= 0.5 else "")


def first_sentence(text: str, limit: int = 240) -> str:
    lines = str(text or "").strip().splitlines()  # (a message of white space alone has no first line)
    text = lines[0] if lines else ""
    return text if len(text) <= limit else text[:limit - 1] + "…"


def banner_html(health: dict | None) -> str:
    """One notice for the whole page: no GPU (compile still works), sandbox off, or nothing."""
    if not health:
        return ""
    notes = []
    if not health.get("gpu"):
        notes.append("<b>No CUDA GPU on this server:</b> Compile works fully (CUDA, PTX, SASS, registers, shared "
                     "memory); Run, Autotune and Sweep need a GPU.")
    sandbox = health.get("sandbox")
    if sandbox in ("none", False) or (isinstance(sandbox, dict) and sandbox.get("enabled") is False):
        why = health.get("sandbox_why") or (sandbox.get("warning") if isinstance(sandbox, dict) else "")
        notes.append("<b>Jobs are not sandboxed on this server</b>" + (f": {esc(why)}" if why else "."))
    if not notes:
        gpu = health.get("gpu")
        return f'<div class="pg-banner good">GPU: {esc(gpu)}</div>' if gpu else ""
    return '<div class="pg-banner">' + "<br>".join(notes) + "</div>"


# -- run: correctness and speed ----------------------------------------------------------------------------------
def verification_frame(result: dict | None) -> pd.DataFrame:
    rows = []
    for v in (result or {}).get("verification") or []:
        first = v.get("first_mismatches") or []
        rows.append({
            "shape": v.get("label") or str(v.get("shape")),
            "result": "FAIL" if not v.get("passed") else "not verified" if v.get("verified") is False else "pass",
            "rel error": v.get("rel_error"),
            "limit": v.get("limit"),
            "max abs error": v.get("max_abs_error"),
            "mismatches": v.get("mismatches"),
            "first mismatching indices": ", ".join(str(tuple(i)) for i in first[:4]),
            "message": v.get("message", ""),
        })
    return pd.DataFrame(rows, columns=["shape", "result", "rel error", "limit", "max abs error", "mismatches",
                                       "first mismatching indices", "message"])


def verification_html(result: dict | None) -> str:
    """Per shape: pass/fail, relative and max abs error, mismatches and the first mismatching indices."""
    frame = verification_frame(result)
    if frame.empty:
        err = (result or {}).get("error") or {}
        if err:
            return placeholder(f"No verification: {err.get('stage')}: {first_sentence(err.get('message', ''))}")
        return placeholder("Run the kernel to check it against the PyTorch reference on several shapes "
                           "(ragged ones included).")
    rows = []
    for _, r in frame.iterrows():
        ok = r["result"] == "pass"
        pill = ('<span class="pg-pill">timed, not verified</span>' if r["result"] == "not verified" else
                f'<span class="pg-pill {"good" if ok else "bad"}">{"✓ pass" if ok else "✗ FAIL"}</span>')
        rows.append([
            esc(r["shape"]),
            pill,
            esc(fmt_num(r["rel error"])) + (f' <small>/ {esc(fmt_num(r["limit"]))}</small>'
                                             if r["limit"] is not None and not pd.isna(r["limit"]) else ""),
            esc(fmt_num(r["max abs error"])),
            esc("" if r["mismatches"] is None or pd.isna(r["mismatches"]) else int(r["mismatches"])),
            f'<code>{esc(r["first mismatching indices"])}</code>' if r["first mismatching indices"] else "",
            "" if ok else esc(r["message"]),
        ])
    passed = (frame["result"] == "pass").sum()
    if (frame["result"] == "not verified").any() and not (frame["result"] == "FAIL").any():
        note = (result or {}).get("verification_note") or "the file has no reference(*inputs) to compare with"
        head = (f'<div class="pg-verdict warn">Timed, not verified: {esc(first_sentence(note))}</div>')
        return head + table(["shape", "result", "rel error / limit", "max abs error", "mismatches",
                             "first mismatching indices", "why"], rows, "pg-verify")
    head = (f'<div class="pg-verdict {"good" if passed == len(frame) else "bad"}">{passed} of {len(frame)} shapes '
            f'pass against the PyTorch reference</div>')
    return head + table(["shape", "result", "rel error / limit", "max abs error", "mismatches",
                         "first mismatching indices", "why"], rows, "pg-verify")


def speed_html(result: dict | None) -> str:
    """The kernel's median time with p20–p80, TFLOP/s, GB/s, % of the measured ceilings, speedup per baseline."""
    t = (result or {}).get("timing")
    if not t:
        err = (result or {}).get("error") or {}
        if err:
            return placeholder(f"Not timed: {err.get('stage')}: {first_sentence(err.get('message', ''))}")
        return placeholder("Run the kernel to time it against its baselines.")
    cards = [
        ("Kernel time", fmt_ms(t.get("median_ms")),
         f"p20–p80 {fmt_ms(t.get('p20_ms'))} – {fmt_ms(t.get('p80_ms'))}"),
        ("Throughput", f"{result.get('tflops', 0):.1f} TFLOP/s", f"{result.get('gbps', 0):,.0f} GB/s"),
    ]
    mm, bw = result.get("percent_of_matmul_peak"), result.get("percent_of_copy_bandwidth")
    if mm is not None or bw is not None:
        sub = []
        if mm is not None:
            sub.append("matmul = cuBLAS at 8192³")  # so a smaller, luckier shape past 100% reads right
        if bw is not None:
            sub.append(f"{bw:.0f}% copy bandwidth")
        cards.append(("Of this GPU's measured ceilings", f"{mm:.0f}% matmul" if mm is not None else "–",
                      " · ".join(sub)))
    out = ['<div class="pg-cards">']
    for k, v, sub in cards:
        out.append(f'<div class="pg-card"><div class="k">{esc(k)}</div><div class="v">{esc(v)}</div>'
                   f'<div class="sub">{esc(sub)}</div></div>')
    out.append("</div>")
    rows = [["<b>this kernel</b>", esc(fmt_ms(t.get("median_ms"))),
             esc(f"{fmt_ms(t.get('p20_ms'))} – {fmt_ms(t.get('p80_ms'))}"),
             esc(f"{result.get('tflops', 0):.1f}"), esc(f"{result.get('gbps', 0):,.0f}"), "1.00×"]]
    for name, b in (result.get("baselines") or {}).items():
        speedup = b.get("speedup")
        cls = "good" if speedup and speedup >= 1 else "bad"
        rows.append([esc(name), esc(fmt_ms(b.get("median_ms"))),
                     esc(f"{fmt_ms(b.get('p20_ms'))} – {fmt_ms(b.get('p80_ms'))}"),
                     esc(f"{b.get('tflops', 0):.1f}"), esc(f"{b.get('gbps', 0):,.0f}"),
                     f'<span class="pg-pill {cls}">{esc(f"{speedup:.2f}×") if speedup else "–"}</span>'])
    out.append(table(["", "median", "p20 – p80", "TFLOP/s", "GB/s", "kernel's speed-up over it"], rows,
                     "pg-speed"))
    notes = []
    if t.get("mode"):
        notes.append(f"timing: {esc(t['mode'])}, {esc(t.get('samples', '?'))} samples")
    dev = result.get("device") or {}
    if dev.get("name"):
        clocks = (dev.get("clocks_mhz") or {}).get("sm")
        notes.append(esc(dev["name"]) + (f" at {clocks:.0f} MHz" if clocks else ""))
    ceil = result.get("ceilings") or {}
    if ceil.get("copy_gbps"):
        mm_ceil = ceil.get("matmul_tflops") or {}
        notes.append("ceilings: copy " + esc(f"{ceil['copy_gbps']:,.0f} GB/s") + ", matmul (cuBLAS, 8192³) " +
                     esc(", ".join(f"{k} {v:.0f} TFLOP/s" for k, v in mm_ceil.items())))
    if notes:
        out.append(f'<div class="pg-meta">{" · ".join(notes)}</div>')
    return "".join(out)


# -- tune -------------------------------------------------------------------------------------------------------
def tile_label(tile: dict) -> str:
    return ", ".join(f"{k}={v}" for k, v in tile.items())


# A tuning table's row: the candidate's tile parameters, then these (engine/tune.py, tune_row and twin_row).
TUNE_RESULT_KEYS = ("compiled", "verified", "median_ms", "tflops", "gbps", "rel_error", "error", "same_kernel_as")


def tune_frame(result: dict | None) -> pd.DataFrame:
    """The configurations tried, fastest verified first, then those that lost and why."""
    rows = (result or {}).get("table") or []
    if not rows:
        return pd.DataFrame()
    out = []
    for r in rows:
        row = {k: v for k, v in r.items() if k not in TUNE_RESULT_KEYS}
        row["result"] = "✓ verified" if r.get("verified") else f"✗ {r.get('error') or 'failed'}"
        if r.get("same_kernel_as") is not None:  # tune.twin_row: one kernel, measured once
            row["result"] += f" (the same kernel as {r['same_kernel_as']}: measured once)"
        row["median ms"] = _round(r.get("median_ms"), 4)
        row["TFLOP/s"] = _round(r.get("tflops"), 1)
        row["GB/s"] = _round(r.get("gbps"), 0)
        row["rel error"] = float(f"{r['rel_error']:.3g}") if r.get("rel_error") is not None else None
        out.append(row)
    frame = pd.DataFrame(out)
    order = frame["median ms"].isna()
    # stable: a kernel measured once stays above the candidates that compiled into it (tune.twin_row)
    return (frame.assign(_o=order).sort_values(["_o", "median ms"], kind="stable").drop(columns="_o")
            .reset_index(drop=True))


def _round(x, digits: int):
    return None if x is None else round(float(x), digits)


def tune_summary_html(result: dict | None) -> str:
    if not result:
        return placeholder("Autotune compiles every configuration of the kernel's space (in parallel on the CPU), "
                           "verifies each on the GPU and times those that pass.")
    if not result.get("ok"):
        err = result.get("error") or {}
        return placeholder(f"Autotune failed: {err.get('stage')}: {first_sentence(err.get('message', ''))}")
    best = result.get("best") or {}
    rows = result.get("table") or []
    verified = sum(1 for r in rows if r.get("verified"))
    twins = sum(1 for r in rows if r.get("same_kernel_as") is not None)
    same = f", {twins} the same kernel as another" if twins else ""
    return (f'<div class="pg-verdict good">Best of {len(rows)} tried ({verified} verified{same}): '
            f'<code>{esc(tile_label(best.get("tile") or {}))}</code> — {esc(fmt_ms(best.get("median_ms")))}'
            + (f', {best["tflops"]:.1f} TFLOP/s' if best.get("tflops") else "") + "</div>")


# -- sweep ------------------------------------------------------------------------------------------------------
def sweep_frame(result: dict | None) -> pd.DataFrame:
    """One row per size and series (the kernel, each baseline): time with p20/p80, TFLOP/s, GB/s."""
    out = []
    for row in (result or {}).get("rows") or []:
        for name, s in (row.get("series") or {}).items():
            out.append({"size": row.get("label"), "series": "this kernel" if name == "kernel" else name,
                        "median ms": _round(s.get("median_ms"), 4), "p20 ms": _round(s.get("p20_ms"), 4),
                        "p80 ms": _round(s.get("p80_ms"), 4), "TFLOP/s": _round(s.get("tflops"), 1),
                        "GB/s": _round(s.get("gbps"), 0),
                        "verified": "" if name != "kernel" else ("✓" if row.get("passed") else "✗")})
        if not row.get("series"):
            out.append({"size": row.get("label"), "series": "—", "verified": f"✗ {row.get('error') or ''}"})
    return pd.DataFrame(out)


def share_query(kernel: str, values: dict, defaults: dict) -> str:
    """`kernel=gemm&block_M=64`: the kernel and the parameters that differ from its defaults, for a link."""
    from urllib.parse import urlencode
    q = {"kernel": kernel}
    for k, v in values.items():
        if v is None or v == "":
            continue
        if k in defaults and str(defaults[k]) == str(v):
            continue
        q[k] = v
    return urlencode(q)


# -- progress ---------------------------------------------------------------------------------------------------
def _ordinal(n: int) -> str:
    return f"{n}{'th' if 10 <= n % 100 <= 20 else {1: 'st', 2: 'nd', 3: 'rd'}.get(n % 10, 'th')}"


def progress_stage(what: str) -> str:
    """The stage a job's progress message belongs to, as the page names it: "queued 2nd", "lowering", "nvcc",
    "verifying", "timing", ... (messages of one stage share its name, so their time adds up)."""
    what = (what or "").strip()
    low = what.lower()
    m = re.match(r"queued: (\d+) jobs? ahead", low)
    if m:
        return f"queued {_ordinal(int(m.group(1)) + 1)}"
    for key, name in (("cached", "from the cache"), ("same compile is running", "waiting for the same compile"),
                      ("starting", "starting a worker"), ("importing", "importing the file"), ("lowering", "lowering"), ("nvcc", "nvcc"),
                      ("ptxas", "ptxas"), ("more shapes", "compiling the check shapes"), ("verif", "verifying"),
                      ("timing", "timing"), ("measur", "measuring"), ("compiled", "compiling candidates"),
                      ("compiling", "compiling"), ("done", "done")):
        if key in low:
            return name
    return what[:60] or "working"


def progress_text(stages: list[tuple[str, float]], now: float, detail: str = "") -> str:
    """Each stage met so far with the seconds spent in it, the current one last: "queued 1st 0.2 s ✓ · lowering
    3.1 s ✓ · nvcc 4.0 s …". `stages` are (name, the time it began), in order; `detail` is the current message."""
    parts = []
    for i, (name, began) in enumerate(stages):
        end = stages[i + 1][1] if i + 1 < len(stages) else now
        current = i + 1 == len(stages)
        parts.append(f"{name} {max(0.0, end - began):.1f} s" + (" …" if current else " ✓"))
    text = " · ".join(parts)
    if detail and stages and detail.lower() != stages[-1][0].lower() and not detail.lower().startswith("queued"):
        text += f" ({detail})"
    return text


# -- notes beside the parameters and the code ----------------------------------------------------------------------
def stale_note(entry: str | None) -> str:
    """The banner over generated code that no longer matches the source: the last compile failed."""
    return (f'<div class="pg-stale">Stale: the last compile failed, so this is the code of the last good compile'
            f'{" (" + esc(entry) + ")" if entry else ""}, not of the source on the left.</div>')


def edited_note(compiled_setup: str | None, setup: str) -> str:
    """Over the generated code when the source or the controls changed since it was compiled (`*_setup`: what a
    compile was asked, as Page.setup_key writes it); "" when they match or nothing was compiled."""
    if not compiled_setup or compiled_setup == setup:
        return ""
    return ('<div class="pg-edited">Edited since this code was compiled: Compile (Ctrl+Enter) to see the code of '
            'the source and parameters you have now.</div>')


def params_note_html(error: dict | None, named: list[str], outside: dict[str, str]) -> str:
    """Beside the parameter controls: a resource error and the controls it names, and each value outside the
    kernel's tuned space or one the compile will refuse (controls.outside_space)."""
    parts = []
    if error and error.get("stage") == "resources":
        names = ", ".join(f"<code>{esc(n)}</code>" for n in named)
        parts.append(f'<div class="pg-param-error"><b>Too big for the GPU</b>{": " + names if names else ""} — '
                     f'{esc(error.get("message") or "")}</div>')
    if outside:
        parts.append('<div class="pg-param-warn">Check these values: '
                     + "; ".join(f"<code>{esc(k)}</code> {esc(v)}" for k, v in outside.items()) + "</div>")
    return "".join(parts)


def action_error_html(action: str, result: dict | None) -> str:
    """An error where the user looks for that action's result (the sweep's tab, the autotuner's): stage, message."""
    err = (result or {}).get("error") or {}
    if not err:
        return ""
    return (f'<div class="pg-error-box stage-{esc(err.get("stage"))}"><div class="pg-error-head">'
            f'<span class="pg-badge">{esc(err.get("stage") or "error")}</span><span class="pg-stage-help">'
            f'{esc(action)} failed: {esc(STAGE_HELP.get(err.get("stage"), ""))}</span></div>'
            f'<div class="pg-error-msg">{esc(err.get("message") or "")}</div></div>')


def param_help_html(items: list[tuple[str, str]]) -> str:
    """What each parameter does, folded under the controls; the page's script also puts each text on its control
    as a tooltip (data-param names the control)."""
    if not items:
        return ""
    rows = "".join(f'<li data-param="{esc(name)}" data-help="{esc(text)}"><code>{esc(name)}</code> '
                   f'{esc(text.split(": ", 1)[-1])}</li>' for name, text in items)
    return f'<details class="pg-param-help"><summary>What these parameters do</summary><ul>{rows}</ul></details>'
