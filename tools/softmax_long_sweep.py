"""Which cluster and block size a long softmax row wants: kernels/softmax_long.py timed over a grid of (CTAs a row,
threads a CTA) beside torch.softmax, on the GPU this runs on, through the engine's one measurement path (compiled in
parallel, verified at the timed size, then timed interleaved with the baseline, L2 flushed before each sample).

    .venv/bin/python tools/softmax_long_sweep.py [--columns 50257 128256] [--rows 4096] [--dtype bfloat16]
                                                 [--out bench/softmax-long-h200.json]

Why a grid and not only the powers of two the rule used to take: a row of N columns is cut into `cluster` slices of
about N / cluster values, each held by `threads` threads in whole 16-byte vectors, so a thread holds
⌈slice / (threads · vector)⌉ vectors and the last ones of a slice sit idle. At 50257 bf16 columns over 4 CTAs of 256
threads, 12 % of the vector slots are empty and every thread still waits for 7 loads; over 5 CTAs, 2 % and 5 loads.
A candidate is kept when a thread holds between 2 and 10 vectors (a second load in flight; registers for at most
80 fp32 values). The record says, for each row length, each candidate's time, its share of the copy bandwidth
measured in the same run, its speed against torch.softmax, and the rule's pick (kernels/softmax.py: pick_config).
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

COLUMNS = [32768, 50257, 65536, 100000, 128256, 151936, 262144]
CLUSTERS = [2, 3, 4, 5, 6, 8, 16]
THREADS = [128, 256, 512]


def vectors_a_thread(N: int, dtype: str, cluster: int, threads: int) -> int:
    vector = 16 // (4 if dtype == "float32" else 2)
    row_vectors = N // vector if N % vector == 0 else (N - 1) // vector + 2  # as softmax_long.py counts them
    per_cta = -(-row_vectors // cluster)
    return -(-per_cta // threads)


def candidates(N: int, dtype: str, clusters=CLUSTERS, threads_=THREADS) -> list[tuple[int, int]]:
    vector = 16 // (4 if dtype == "float32" else 2)
    return [(c, t) for c in clusters for t in threads_
            if 2 <= vectors_a_thread(N, dtype, c, t) and vectors_a_thread(N, dtype, c, t) * vector <= 80]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--columns", type=int, nargs="+", default=COLUMNS)
    ap.add_argument("--rows", type=int, default=4096)
    ap.add_argument("--dtype", default="bfloat16")
    ap.add_argument("--clusters", type=int, nargs="+", default=CLUSTERS, help="CTAs a row to try")
    ap.add_argument("--threads", type=int, nargs="+", default=THREADS, help="threads a CTA to try")
    ap.add_argument("--budget-ms", type=float, default=600.0)
    ap.add_argument("--out", type=Path, default=ROOT / "bench" / "softmax-long-h200.json")
    args = ap.parse_args()

    from kernels.softmax import pick_config
    from playground.engine.bench import run_stamp
    from playground.engine.compile import resolve_arch
    from playground.engine.kernel import Config, load
    from playground.engine.measure import MeasureOptions, Measurer, new_seed, rates

    kernel = load("softmax")
    options = MeasureOptions(resolve_arch(None), new_seed(), baselines=True, check_shapes=False,
                             budget_ms=args.budget_ms)
    measurer = Measurer.open(options, fresh_ceilings=True)
    ceil, gpu = measurer.ceilings, measurer.device_info()
    plan = []
    for N in args.columns:
        rule = pick_config(N, args.dtype)
        grid = candidates(N, args.dtype, args.clusters, args.threads)
        if (rule["cluster"], rule["threads"]) not in grid:
            grid.append((rule["cluster"], rule["threads"]))
        for cluster, threads in grid:
            tile = {"rows_per_block": 1, "num_stages": 2, "threads": threads, "cluster": cluster}
            plan.append((N, (cluster, threads) == (rule["cluster"], rule["threads"]),
                         Config({"M": args.rows, "N": N}, args.dtype, tile, choice="rule")))
    print(f"{gpu['name']}: copy {ceil['copy_gbps']:.0f} GB/s; compiling {len(plan)} configs", flush=True)
    for error, (N, _, config) in zip(measurer.precompile(kernel, [c for _, _, c in plan]), plan):
        if error:
            print(f"compile error N={N} {config.tile}: {error.message[:300]}", flush=True)
    rows = []
    for N, picked, config in plan:
        m = measurer.measure(kernel, config)
        row = {"N": N, "M": args.rows, "dtype": args.dtype, "cluster": config.tile["cluster"],
               "threads": config.tile["threads"],
               "vectors_a_thread": vectors_a_thread(N, args.dtype, config.tile["cluster"], config.tile["threads"]),
               "rule_pick": picked, "verified": m.verified, "rel_error": m.rel_error, "error": m.error_text}
        if m.timed:
            ms, torch_ms = m.times["kernel"]["median_ms"], m.times["torch.softmax"]["median_ms"]
            gbps = rates(kernel, config, ms, ceil)["gbps"]
            row.update(ms=ms, torch_ms=torch_ms, vs_torch=torch_ms / ms, of_copy=gbps / ceil["copy_gbps"],
                       torch_of_copy=rates(kernel, config, torch_ms, ceil)["gbps"] / ceil["copy_gbps"])
        rows.append(row)
        print(json.dumps(row), flush=True)
    record = {"what": "kernels/softmax_long.py over (CTAs a row, threads a CTA), beside torch.softmax, "
                      "verified at the timed size (tools/softmax_long_sweep.py)",
              **run_stamp(measurer), "rows": rows}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(record, indent=1) + "\n")
    print(f"\n{'N':>7} {'CTAs':>4} {'thr':>4} {'vec':>3} {'ms':>8} {'of copy':>7} {'x torch':>7}  rule")
    for N in args.columns:
        mine = [r for r in rows if r["N"] == N]
        best = max((r for r in mine if "ms" in r), key=lambda r: r["vs_torch"], default=None)
        for r in mine:
            if "ms" not in r:
                print(f"{N:>7} {r['cluster']:>4} {r['threads']:>4} {r['vectors_a_thread']:>3}  {r['error']}"[:150])
                continue
            print(f"{N:>7} {r['cluster']:>4} {r['threads']:>4} {r['vectors_a_thread']:>3} {r['ms']:8.4f} "
                  f"{r['of_copy']:7.3f} {r['vs_torch']:7.3f}  {'pick' if r['rule_pick'] else ''}"
                  f"{' BEST' if r is best else ''}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
