"""Time a list of configurations of the catalogue's kernels against each kernel's baselines, on the GPU this runs on,
through the engine's one measurement path (compiled in parallel, verified at the timed size, then timed interleaved
with the baselines, L2 flushed before each sample). For trying tile choices before a rule takes one.

    .venv/bin/python tools/trial.py plan.json [--out bench/trial.json] [--budget-ms 300]

plan.json is a list of [kernel, request] pairs; a request is what `python -m playground run` takes as parameters
(problem sizes, dtype, any tile parameter or option; left out: the engine's pick), plus "_graph": true to time as
CUDA-graph replays (launch-bound sizes). For example:

    [["gemm", {"M": 128, "N": 8192, "K": 8192, "dtype": "bfloat16"}],
     ["gemm", {"M": 128, "N": 8192, "K": 8192, "dtype": "bfloat16", "num_stages": 8}]]

The record (device, date, commit, copy bandwidth, then a row a configuration: the tile it ran, whether it verified,
its time and each baseline's) goes to --out; a table is printed last.
"""
from __future__ import annotations

import argparse
import dataclasses
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("plan", type=Path)
    ap.add_argument("--out", type=Path, default=ROOT / "bench" / "trial.json")
    ap.add_argument("--budget-ms", type=float, default=300.0)
    args = ap.parse_args()

    from playground.engine.bench import run_stamp
    from playground.engine.compile import resolve_arch
    from playground.engine.errors import StageError
    from playground.engine.kernel import load
    from playground.engine.measure import MeasureOptions, Measurer, new_seed, rates

    plan = json.loads(args.plan.read_text())
    graphs = [bool(request.pop("_graph", False)) for _, request in plan]
    options = MeasureOptions(resolve_arch(None), new_seed(), baselines=True, check_shapes=False,
                             budget_ms=args.budget_ms)
    try:
        measurer = Measurer.open(options, fresh_ceilings=True)
    except StageError as err:
        print(err.message, file=sys.stderr)
        return 1
    ceil = measurer.ceilings
    kernels = {name: load(name) for name in dict.fromkeys(name for name, _ in plan)}
    configs = [kernels[name].resolve(request) for name, request in plan]
    for name, kernel in kernels.items():  # everything compiled first, in parallel
        mine = [i for i, (n, _) in enumerate(plan) if n == name]
        for i, error in zip(mine, measurer.precompile(kernel, [configs[i] for i in mine])):
            if error:
                print(f"compile error {plan[i]}: {error.message[:300]}", flush=True)
    rows = []
    for (name, request), config, graph in zip(plan, configs, graphs):
        m = measurer.measure(kernels[name], config, options=dataclasses.replace(options, graph=graph))
        row = {"kernel": name, "request": request, "tile": config.tile, "picked_by": config.picked_by,
               "timing": "graph" if graph else "events", "verified": m.verified, "rel_error": m.rel_error,
               "error": m.error_text}
        if m.timed:
            row["ms"] = m.times["kernel"]["median_ms"]
            row["baselines_ms"] = {k: v["median_ms"] for k, v in m.times.items() if k != "kernel"}
            row["of_copy"] = rates(kernels[name], config, row["ms"], ceil)["gbps"] / ceil["copy_gbps"]
        rows.append(row)
        print(json.dumps(row), flush=True)
    record = {"what": "configurations timed against their kernels' baselines (tools/trial.py)",
              **run_stamp(measurer), "rows": rows}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(record, indent=1) + "\n")
    print()
    for r in rows:
        label = f"{r['kernel'][:13]:13} {json.dumps(r['request'], ensure_ascii=False)[:72]:72}"
        if "ms" not in r:
            print(f"{label} {r['error']}"[:200])
            continue
        ratios = "  ".join(f"{k[:26]} {v / r['ms']:.3f}×" for k, v in r["baselines_ms"].items())
        print(f"{label} {r['ms'] * 1000:9.1f} µs  {r['of_copy']:.2f} of copy  {ratios}")
    return 0


if __name__ == "__main__":  # (guarded: the parallel compile starts processes that import this file)
    sys.exit(main())
