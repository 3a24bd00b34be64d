"""`python -m playground bench --all`: every shipped kernel against its baselines and the GPU's ceilings, in one run.

Each target of the shipped-kernel issue is a row. A kernel and all its baselines are measured the one way
(measure.py): verified at the row's problem, then timed together, interleaved, with the same timer (CUDA events, L2
flushed, median); the copy bandwidth that the memory-bound targets are judged against is measured in the same run.
The kernels run at the config the engine picks for each row's problem when none is set (config_choice.py: the
preset's, the nearest tuned one, the kernel file's rule), what a student starts from; each row says which
(`picked_by`). A row that fails to load, compile, verify or run carries its error and is never met.
"""
from __future__ import annotations

import argparse
import dataclasses
import datetime
import functools
import json
import subprocess
import sys
from pathlib import Path
from typing import Callable

from .compile import resolve_arch
from .errors import StageError
from .kernel import ROOT, Config, Kernel, load, problem_label
from .measure import Measurement, MeasureOptions, Measurer, new_seed, rates

BENCH_DIR = ROOT / "bench"


def _fa(seq, dim, causal, batch=8, heads=32, group_size=1):
    return dict(batch=batch, heads=heads, seq_len=seq, dim=dim, causal=causal, group_size=group_size)


def _gemm(M, N, K):
    return dict(M=M, N=N, K=K)


# The GEMM grid: squares, LLM projections (Llama-3-8B's MLP up 4096 → 14336 and down, a 1024-wide KV projection),
# tall-skinny outputs, and sizes off the 128 grid.
GEMM_SQUARES = [_gemm(s, s, s) for s in (1024, 2048, 3072, 4096, 6144, 8192)]
GEMM_LLM = [_gemm(4096, 14336, 4096), _gemm(4096, 4096, 14336), _gemm(8192, 1024, 8192), _gemm(8192, 8192, 1024),
            _gemm(16384, 4096, 4096), _gemm(2048, 11008, 4096)]
GEMM_SKINNY = [_gemm(16384, 256, 4096), _gemm(256, 16384, 4096), _gemm(128, 8192, 8192), _gemm(65536, 512, 512)]
GEMM_OFF_GRID = [_gemm(4000, 4000, 4000), _gemm(5120, 3000, 2047), _gemm(3000, 5000, 1000), _gemm(1000, 1000, 1000)]
# Softmax rows from 512 to 65536 long, 2^26 elements each (128 MiB in fp16).
SOFTMAX_ROWS = [dict(M=2**26 // n, N=n) for n in (512, 1024, 2048, 4096, 8192, 16384, 32768, 65536)]
# A language model's softmax: 4096 rows (tokens) of a vocabulary, 32768 to 262144 columns, the ragged sizes of
# GPT-2 (50257), Llama 3 (128256) and Qwen2 (151936) among them; 4096 rows fill the GPU for torch's block a row too.
SOFTMAX_VOCAB = [dict(M=4096, N=n) for n in (32768, 50257, 65536, 128256, 131072, 151936, 262144)]
# The fused epilogue: square, an LLM's MLP up-projection and a 1024-wide KV projection.
EPILOGUE_SHAPES = [_gemm(4096, 4096, 4096), _gemm(8192, 8192, 8192), _gemm(4096, 14336, 4096),
                   _gemm(8192, 1024, 8192)]
# FlashAttention at 32768 query tokens a head group (batch × seq_len), 512 to 16384 tokens long.
FA_128 = [_fa(s, 128, c, batch=32768 // s) for s in (512, 1024, 2048, 4096, 8192, 16384) for c in (False, True)]

# (kernel, dtype, problem, baseline: a label fragment of one of the kernel's BASELINES or BENCH_BASELINES or "copy",
# target ratio[, timing]). timing "graph": the kernel and its baseline each timed as CUDA-graph replays of back-to-back
# calls (timing.py), for kernels of a few microseconds, whose time one launch at a time would be mostly launch
# overhead. A target of None: a row shown for comparison, judged against no target (met is None).
TARGETS = [
    *[("gemm", dt, p, "matmul", 1.00) for dt in ("float16", "bfloat16")
      for p in GEMM_SQUARES + GEMM_LLM + GEMM_SKINNY + GEMM_OFF_GRID],
    *[("gemm_epilogue", "float16", p, b, t) for p in EPILOGUE_SHAPES
      for b, t in (("torch: act(a @ b + bias)", 1.20), ("linear", 1.10), ("torch.compile", None))],
    # GEMM + bias + GELU at an LLM MLP's up-projection (the activation is a parameter like the sizes)
    *[("gemm_epilogue", "bfloat16", {**_gemm(4096, 11008, 4096), "activation": "gelu"}, b, t)
      for b, t in (("torch: act(a @ b + bias)", 1.20), ("linear", 1.10), ("torch.compile", None))],
    # memory-bound: 85 % of the copy bandwidth from rows of 1024 up, 1.3× torch everywhere
    *[("softmax", "float16", p, b, t) for p in SOFTMAX_ROWS
      for b, t in (("copy", 0.85), ("softmax", 1.30)) if not (b == "copy" and p["N"] < 1024)],
    *[("softmax", "bfloat16", p, b, t) for p in SOFTMAX_ROWS if p["N"] in (1024, 4096, 32768)
      for b, t in (("copy", 0.85), ("softmax", 1.30))],
    *[("softmax", dt, p, b, t) for dt in ("bfloat16", "float16") for p in SOFTMAX_VOCAB
      for b, t in (("copy", 0.85), ("softmax", 1.30))],
    *[("vector_add", dt, dict(N=n), "copy", 0.90) for dt in ("float16", "bfloat16") for n in (2**24, 2**28)],
    ("vector_add", "float16", dict(N=2**24), "add", 1.00),
    ("vector_add", "float16", dict(N=2**20), "add", 1.00, "graph"),  # 2 MiB a vector: ~3 µs, a launch's order
    # SDPA (cuDNN's attention on Hopper): 1.05× at head dim 128, 1.0× at 64 and 256
    *[("flash_attention", "float16", p, "SDPA", 1.05) for p in FA_128],
    *[("flash_attention", "bfloat16", p, "SDPA", 1.05) for p in FA_128 if p["seq_len"] in (4096, 16384)],
    *[("flash_attention", dt, p, "SDPA", 1.00) for dt in ("float16", "bfloat16") for c in (False, True)
      for p in (_fa(2048, 64, c, batch=16, heads=16), _fa(8192, 64, c, batch=4))],
    *[("flash_attention", "bfloat16", _fa(4096, 256, c, batch=4, heads=16), "SDPA", 1.00) for c in (False, True)],
    # grouped-query attention against SDPA on the expanded heads: Llama 3 8B (32 heads on 8) and 70B (64 on 8)
    *[("flash_attention", dt, _fa(4096, 128, c, group_size=4), "SDPA", 1.00) for dt in ("float16", "bfloat16")
      for c in (False, True)],
    *[("flash_attention", "bfloat16", _fa(8192, 128, c, batch=2, heads=64, group_size=8), "SDPA", 1.00)
      for c in (False, True)],
]


def timing_of(target: tuple) -> str:
    """"graph" or "events" (one launch per sample, CUDA events around it)."""
    timing = target[5] if len(target) > 5 else "events"
    if timing not in ("events", "graph"):
        raise ValueError(f"{target[:3]}: timing {timing!r} is neither 'events' nor 'graph'")
    return timing


def git_commit() -> str | None:
    try:
        return subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True,
                              timeout=10).stdout.strip() or None
    except OSError:
        return None


def run_stamp(measurer: Measurer, commit: str | None = None) -> dict:
    """What every benchmark record says of its run: the GPU, its driver and clocks, torch, when, at which commit,
    and the copy bandwidth measured in the same run (the ratios' ceiling)."""
    gpu = measurer.device_info()
    return {"device": gpu["name"], "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
            "commit": commit or git_commit(), "clocks_mhz": gpu.get("clocks_mhz"), "driver": gpu.get("driver"),
            "torch": gpu.get("torch"), "copy_gbps": measurer.ceilings["copy_gbps"]}


def pick_baseline(kernel, fragment: str) -> str:
    """The one name among the kernel's baselines, the benchmark's own included, that contains `fragment`."""
    every = kernel.baseline_functions(bench=True)
    names = [n for n in every if fragment.lower() in n.lower()]
    if len(names) != 1:
        raise KeyError(f"{kernel.name}: baseline fragment {fragment!r} matches {names} of {list(every)}")
    return names[0]


def bench_row(m: Measurement, kernel: Kernel | None, dtype: str, problem: dict, fragment: str,
              target: float | None, ceil: dict) -> dict:
    """One target's row: the ratio against its baseline if the kernel was timed (so verified), else the error.
    `kernel` is None when the kernel file did not load. A row without a target is shown, never met nor missed."""
    baseline = ("device-to-device copy (same run)" if fragment == "copy" else
                pick_baseline(kernel, fragment) if kernel is not None else fragment)
    row = {"dtype": dtype, "shape": problem_label(problem), "problem": problem, "config": m.config.tile or None,
           "picked_by": m.config.picked_by, "tuned_for": m.config.tuned_for, "verified": m.verified,
           "rel_error": m.rel_error, "median_ms": None, "p20_ms": None, "p80_ms": None, "tflops": None, "gbps": None,
           "target": target, "baseline": baseline, "baseline_median_ms": None, "baseline_p20_ms": None,
           "baseline_p80_ms": None, "ratio": None,
           "met": False if target is not None else None,
           "error": m.error_text}
    if not m.timed:
        return row
    kt = m.times["kernel"]
    speed = rates(kernel, m.config, kt["median_ms"], None)
    row.update(median_ms=kt["median_ms"], p20_ms=kt["p20_ms"], p80_ms=kt["p80_ms"], tflops=speed["tflops"],
               gbps=speed["gbps"])
    if fragment == "copy":
        row.update(baseline_gbps=ceil["copy_gbps"], ratio=speed["gbps"] / ceil["copy_gbps"])
    else:
        bt = m.times[row["baseline"]]  # its spread too: a baseline slow in one run shows as such, not as a win
        row.update(baseline_median_ms=bt["median_ms"], baseline_p20_ms=bt["p20_ms"], baseline_p80_ms=bt["p80_ms"],
                   ratio=bt["median_ms"] / kt["median_ms"])
    if target is not None:
        row["met"] = bool(m.verified and row["ratio"] >= target)
    return row


def bench(targets=TARGETS, budget_ms: float = 1500.0, commit: str | None = None, log=print,
          open_measurer: Callable[[MeasureOptions], Measurer] = functools.partial(Measurer.open,
                                                                                   fresh_ceilings=True)) -> list[dict]:
    options = MeasureOptions(resolve_arch(None), new_seed(), baselines=True, check_shapes=False, budget_ms=budget_ms)
    measurer = open_measurer(options)
    ceil = measurer.ceilings
    stamp = run_stamp(measurer, commit)
    log(f"{stamp['device']}: copy {ceil['copy_gbps']:.0f} GB/s, cuBLAS {ceil['matmul_tflops']}")
    kernels, load_errors = {}, {}
    for name in dict.fromkeys(t[0] for t in targets):
        try:
            kernels[name] = load(name)
        except StageError as err:
            load_errors[name] = err
            continue
        for t in targets:  # a target naming no single baseline is a mistake in TARGETS: say so before measuring
            if t[0] == name and t[3] != "copy":
                pick_baseline(kernels[name], t[3])

    def bench_only(t) -> str | None:  # the BENCH_BASELINES name a target is judged against, if it is one
        k = kernels.get(t[0])
        name = pick_baseline(k, t[3]) if k is not None and t[3] != "copy" else None
        return name if k is not None and name in k.bench_baselines else None

    # One measurement per (kernel, dtype, problem, timing); several targets may share it. A benchmark-only baseline
    # (torch.compile) is measured apart, so that where it does not run the other rows of its problem still do.
    groups: dict[tuple, list] = {}
    for t in targets:
        key = (t[0], t[1], json.dumps(t[2], sort_keys=True), timing_of(t), bench_only(t))
        groups.setdefault(key, []).append(t[:5])
    configs = {}
    failed = {key: load_errors[key[0]] for key in groups if key[0] in load_errors}  # becomes its rows' error
    for key in groups:
        if key[0] in kernels:
            try:
                configs[key] = kernels[key[0]].resolve({**json.loads(key[2]), "dtype": key[1]})
            except StageError as err:
                failed[key] = err
    for name, k in kernels.items():  # compile everything first, in parallel
        for e in measurer.precompile(k, [c for key, c in configs.items() if key[0] == name]):
            if e:
                log(f"compile error in {name}: {e.message}")
    rows = []
    for key, group in groups.items():
        k = kernels.get(key[0])
        own = dataclasses.replace(options, graph=key[3] == "graph")
        if key[4]:  # the kernel and that one baseline only
            own = dataclasses.replace(own, baselines=(key[4],), bench_baselines=True)
        m = (Measurement(Config(json.loads(key[2]), key[1], {}), error=failed[key]) if key in failed else
             measurer.measure(k, configs[key], options=own))
        for name, dtype, problem, fragment, target in group:
            row = {"kernel": name, **bench_row(m, k, dtype, problem, fragment, target, ceil), "timing": key[3],
                   **stamp}
            rows.append(row)
            verdict, judged = ("SHOW", "no target") if target is None else (
                "MET " if row["met"] else "MISS", f"target {target:.2f}")
            if row["error"]:
                log(f"FAIL {name:15} {dtype:8} {row['shape']:24} vs {row['baseline'][:34]:34} {row['error']}")
            else:
                log(f"{verdict} {name:15} {dtype:8} {row['shape']:24} "
                    f"vs {row['baseline'][:34]:34} ratio {row['ratio']:.3f} ({judged})  "
                    f"{row['median_ms']:.4f} ms  {row['tflops']:6.1f} TFLOP/s {row['gbps']:6.0f} GB/s  "
                    f"(config: {row['picked_by']})")
    return rows


def chart(rows: list[dict], path: Path) -> bool:
    """A bar per target: the ratio achieved against the target line. Needs matplotlib (present on the GPU image)."""
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return False
    short = {"float16": "fp16", "bfloat16": "bf16", "float32": "fp32"}
    labels = [f"{r['kernel']} {short.get(r['dtype'], r['dtype'])} {r['shape']}\nvs {r['baseline'][:28]}" for r in rows]
    fig, ax = plt.subplots(figsize=(12, 0.42 * len(rows) + 1.5))
    y = range(len(rows))
    colors = ["#9e9e9e" if r["met"] is None else "#2e7d32" if r["met"] else "#c62828" for r in rows]
    ax.barh(y, [r["ratio"] or 0 for r in rows], color=colors)  # grey: shown for comparison, no target
    judged = [(i, r["target"]) for i, r in zip(y, rows) if r["target"] is not None]
    ax.scatter([t for _, t in judged], [i for i, _ in judged], marker="|", s=300, color="black", label="target",
               zorder=3)
    ax.set_yticks(list(y), labels, fontsize=7)
    ax.invert_yaxis()
    ax.set_xlabel("ratio (baseline time ÷ kernel time, or achieved ÷ copy bandwidth)")
    ax.set_title(f"TileLang Playground kernels on {rows[0]['device']} ({rows[0]['date'][:10]}, {rows[0]['commit']})")
    ax.legend(loc="lower right")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    return True


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--all", action="store_true", help="every target (the default)")
    p.add_argument("--kernel", action="append", help="only these kernels")
    p.add_argument("--out", type=Path, default=BENCH_DIR / "h200.json")
    p.add_argument("--chart", type=Path, help="chart image (default: beside --out, .png)")
    p.add_argument("--commit", help="the commit measured (default: git rev-parse HEAD)")
    p.add_argument("--budget-ms", type=float, default=1500.0)


def main(args: argparse.Namespace) -> int:
    targets = [t for t in TARGETS if not args.kernel or t[0] in args.kernel]
    try:
        rows = bench(targets, args.budget_ms, args.commit, log=lambda s: print(s, file=sys.stderr, flush=True))
    except StageError as err:
        print(f"error [{err.stage}]: {err.message}", file=sys.stderr)
        return 1
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(rows, indent=1) + "\n")
    chart(rows, args.chart or args.out.with_suffix(".png"))
    text, failed = summary(rows)
    print(f"{text}; results in {args.out}")
    return 1 if failed else 0


def summary(rows: list[dict]) -> tuple[str, int]:
    """"56/107 targets met, ..." and how many judged rows failed. A comparison row (no target) that failed, such
    as torch.compile where Triton cannot build, is told but fails no run."""
    judged = [r for r in rows if r["target"] is not None]
    met = sum(bool(r["met"]) for r in judged)
    failed = sum(bool(r["error"]) for r in judged)
    shown_failed = sum(bool(r["error"]) for r in rows if r["target"] is None)
    return (f"{met}/{len(judged)} targets met" + (f", {failed} failed (see their error)" if failed else "")
            + (f"; {shown_failed} comparison rows failed" if shown_failed else "")), failed
