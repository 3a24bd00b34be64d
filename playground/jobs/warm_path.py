"""Measure the warm and cold paths of a compile through run_job and record them in bench/warm_path.json.

    python -m playground.jobs.warm_path [--kernels vector_add gemm] [--out bench/warm_path.json]

- cold (spare):  a source never compiled, a pre-started worker ready: what a student waits after an edit.
- cold (fresh):  the same with no spare, a worker started for the request: what pre-starting saves.
- warm:          the same request again, answered from the server's result cache.
- overhead:      cold end-to-end time minus the compile time the engine itself measured inside the job.
Each source gets a unique comment so that neither cache can serve the cold runs.
"""
from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import statistics
import subprocess
import time
import uuid
from pathlib import Path

from ..settings import usable_cores
from . import runner
from .job import Job
from .runner import run_job

ROOT = Path(__file__).resolve().parents[2]
SMALL = {"gemm": {"M": 256, "N": 256, "K": 256}, "gemm_epilogue": {"M": 256, "N": 256, "K": 256}}


def _settle(timeout: float = 120) -> None:
    deadline = time.monotonic() + timeout
    while not runner.state().backend.idle() and time.monotonic() < deadline:
        time.sleep(0.2)
    time.sleep(1.0)  # let the last imports' page cache and CPU settle


def _fresh_source(kernel: str) -> str:
    return (ROOT / "kernels" / f"{kernel}.py").read_text() + f"\n# measure {uuid.uuid4().hex}\n"


def _timed(kernel: str, source: str) -> tuple[float, dict]:
    start = time.perf_counter()
    result = run_job("compile", kernel, source, SMALL.get(kernel, {}), session=f"measure-{uuid.uuid4().hex[:6]}")
    return time.perf_counter() - start, result


def measure(kernels: list[str], repeats: int) -> dict:
    st = runner.state()
    figures: dict = {}
    for kernel in kernels:
        rows = {"cold_spare_s": [], "compile_s": [], "overhead_s": [], "warm_s": [], "cold_fresh_s": []}
        for _ in range(repeats):
            _settle()
            source = _fresh_source(kernel)
            cold, result = _timed(kernel, source)
            assert result.get("ok"), result.get("error")
            rows["cold_spare_s"].append(cold)
            rows["compile_s"].append(result["compile_seconds"])
            rows["overhead_s"].append(cold - result["compile_seconds"])
            warm, again = _timed(kernel, source)
            assert again.get("cached"), "the repeat was not served from the cache"
            rows["warm_s"].append(warm)
        # No spare: empty the pool for one request.
        _settle()
        pool = st.pools[("cpu", None)]
        size, pool.size = pool.size, 0
        for job in list(pool.spares):
            pool.spares.remove(job)
            job.close()
        for _ in range(repeats):
            cold, result = _timed(kernel, _fresh_source(kernel))
            assert result.get("ok"), result.get("error")
            rows["cold_fresh_s"].append(cold)
        pool.size = size
        pool.fill_later()
        figures[kernel] = {k: {"median": round(statistics.median(v), 3), "min": round(min(v), 3),
                               "max": round(max(v), 3), "n": len(v)} for k, v in rows.items()}
    # What a spare costs to start: sandbox + imports, until it says ready.
    starts = []
    for _ in range(repeats):
        _settle()
        t = time.perf_counter()
        job = Job(False)
        job.wait_ready(120)
        starts.append(time.perf_counter() - t)
        job.close()
    figures["worker_start_to_ready_s"] = {"median": round(statistics.median(starts), 3), "n": len(starts)}
    return figures


def machine() -> dict:
    try:
        cpu = next(ln.split(":", 1)[1].strip() for ln in open("/proc/cpuinfo") if ln.startswith("model name"))
    except (OSError, StopIteration):
        cpu = platform.processor()
    mem = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30
    h = runner.health()
    return {"cpu": cpu, "cores": usable_cores(), "memory_gib": round(mem, 1), "gpu": h.get("gpu"),
            "sandbox": h.get("sandbox"), "sandbox_why": h.get("sandbox_why"), "python": platform.python_version(),
            "tilelang": h.get("tilelang"), "cpu_slots": h["queue"]["cpu"]["slots"],
            "spares": h["spares"]["cpu"]["size"]}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--kernels", nargs="+", default=["vector_add", "gemm", "softmax"])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--out", type=Path, default=ROOT / "bench" / "warm_path.json")
    args = parser.parse_args()
    runner.start()
    figures = measure(args.kernels, args.repeats)
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True,
                            text=True).stdout.strip()
    record = {"date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
              "commit": commit, "machine": machine(), "how": __doc__.strip().splitlines()[2:], "figures": figures}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(record, indent=1) + "\n")
    print(json.dumps(figures, indent=1))
    runner.shutdown()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
