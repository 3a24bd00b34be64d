"""`python -m playground bench --all`: every shipped kernel against its baselines and the GPU's ceilings, in one run.

Each target of the shipped-kernel issue is a row. A kernel and all its baselines are timed together, interleaved,
with the same timer (CUDA events, L2 flushed, median); the copy bandwidth that the memory-bound targets are judged
against is measured in the same run. The kernels run at their catalogue defaults: what a student starts from.
"""
from __future__ import annotations

import argparse
import datetime
import json
import subprocess
import sys
from pathlib import Path

from .catalogue import ROOT, Config, load
from .run import Runner, new_seed, problem_label, rates

BENCH_DIR = ROOT / "bench"


def _fa(seq, dim, causal, batch=8, heads=32):
    return dict(batch=batch, heads=heads, seq_len=seq, dim=dim, causal=causal)


# (kernel, dtype, problem, baseline: a label fragment of one of the kernel's BASELINES or "copy", target ratio)
TARGETS = [
    *[("gemm", dt, dict(M=s, N=s, K=s), "matmul", 1.00) for dt in ("float16", "bfloat16") for s in (4096, 8192)],
    *[("gemm", dt, dict(M=8192, N=8192, K=1024), "matmul", 1.00) for dt in ("float16", "bfloat16")],
    ("gemm_epilogue", "float16", dict(M=4096, N=4096, K=4096), "a @ b + bias", 1.10),
    ("gemm_epilogue", "float16", dict(M=4096, N=4096, K=4096), "linear", 1.00),
    ("gemm_epilogue", "float16", dict(M=8192, N=8192, K=8192), "a @ b + bias", 1.05),
    ("gemm_epilogue", "float16", dict(M=8192, N=8192, K=8192), "linear", 1.00),
    *[("softmax", "float16", p, b, t) for p in (dict(M=16384, N=4096), dict(M=4096, N=32768))
      for b, t in (("copy", 0.90), ("softmax", 1.00))],
    ("vector_add", "float16", dict(N=2**28), "copy", 0.90),
    *[("flash_attention", dt, _fa(4096, 128, c), "SDPA", 1.00) for dt in ("float16", "bfloat16") for c in (False, True)],
    *[("flash_attention", "float16", _fa(8192, 64, c, batch=4), "SDPA", 1.00) for c in (False, True)],
]


def git_commit() -> str | None:
    try:
        return subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True,
                              timeout=10).stdout.strip() or None
    except OSError:
        return None


def pick_baseline(kernel, fragment: str) -> str:
    names = [n for n in kernel.baselines if fragment.lower() in n.lower()]
    if len(names) != 1:
        raise KeyError(f"{kernel.name}: baseline fragment {fragment!r} matches {names} of {list(kernel.baselines)}")
    return names[0]


def bench(targets=TARGETS, budget_ms: float = 1500.0, commit: str | None = None, log=print) -> list[dict]:
    import torch
    from . import device, parallel_compile as parallel
    from .timing import Timer

    device.require_gpu()
    timer = Timer()
    ceil = device.measure_ceilings(timer)
    gpu = device.info()
    log(f"{gpu['name']}: copy {ceil['copy_gbps']:.0f} GB/s, cuBLAS {ceil['matmul_tflops']}")
    stamp = {"device": gpu["name"], "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
             "commit": commit or git_commit(), "clocks_mhz": gpu["clocks_mhz"], "driver": gpu["driver"],
             "torch": gpu["torch"], "copy_gbps": ceil["copy_gbps"]}
    # One problem per (kernel, dtype, problem); several targets may share it.
    groups: dict[tuple, list] = {}
    for t in targets:
        groups.setdefault((t[0], t[1], json.dumps(t[2], sort_keys=True)), []).append(t)
    kernels = {name: load(name) for name in {t[0] for t in targets}}
    configs = {key: kernels[key[0]].resolve({**json.loads(key[2]), "dtype": key[1]}) for key in groups}
    for name, k in kernels.items():  # compile everything first, in parallel
        errors = parallel.compile_all(k, [c for key, c in configs.items() if key[0] == name])
        for e in errors:
            if e:
                log(f"compile error in {name}: {e['message']}")
    rows = []
    seed = new_seed()
    for key, group in groups.items():
        k, cfg = kernels[key[0]], configs[key]
        runner = Runner(k, cfg, parallel.build_jit(k, cfg, None), seed)
        verdict = runner.check()
        times = timer.time({"kernel": runner, **runner.baselines()}, budget_ms=budget_ms)
        kt = times["kernel"]["median_ms"]
        speed = rates(k, cfg, kt, None)
        gbps, tflops = speed["gbps"], speed["tflops"]
        for _, dtype, problem, fragment, target in group:
            row = {"kernel": k.name, "dtype": dtype, "shape": problem_label(problem), "problem": problem,
                   "config": cfg.tile, "verified": verdict["passed"], "rel_error": verdict["rel_error"],
                   "median_ms": kt, "p20_ms": times["kernel"]["p20_ms"], "p80_ms": times["kernel"]["p80_ms"],
                   "tflops": tflops, "gbps": gbps, "target": target}
            if fragment == "copy":
                row.update(baseline="device-to-device copy (same run)", baseline_median_ms=None,
                           baseline_gbps=ceil["copy_gbps"], ratio=gbps / ceil["copy_gbps"])
            else:
                name = pick_baseline(k, fragment)
                bt = times[name]["median_ms"]
                row.update(baseline=name, baseline_median_ms=bt, ratio=bt / kt)
            row["met"] = bool(row["verified"] and row["ratio"] >= target)
            rows.append({**row, **stamp})
            log(f"{'MET ' if row['met'] else 'MISS'} {k.name:15} {dtype:8} {row['shape']:24} vs {row['baseline'][:34]:34} "
                f"ratio {row['ratio']:.3f} (target {target:.2f})  {kt:.4f} ms  {tflops:6.1f} TFLOP/s {gbps:6.0f} GB/s")
        del runner
        torch.cuda.empty_cache()
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
    ax.barh(y, [r["ratio"] for r in rows], color=["#2e7d32" if r["met"] else "#c62828" for r in rows])
    ax.scatter([r["target"] for r in rows], y, marker="|", s=300, color="black", label="target", zorder=3)
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
    from .errors import StageError
    targets = [t for t in TARGETS if not args.kernel or t[0] in args.kernel]
    try:
        rows = bench(targets, args.budget_ms, args.commit, log=lambda s: print(s, file=sys.stderr, flush=True))
    except StageError as err:
        print(f"error [{err.stage}]: {err.message}", file=sys.stderr)
        return 1
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(rows, indent=1) + "\n")
    chart(rows, args.chart or args.out.with_suffix(".png"))
    met = sum(r["met"] for r in rows)
    print(f"{met}/{len(rows)} targets met; results in {args.out}")
    return 0
