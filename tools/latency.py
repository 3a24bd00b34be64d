"""How live a compile feels: time to the CUDA on screen and to the whole answer, through the page's way to the job
layer (ui/gateway.call, what the Compile button calls), recorded in bench/latency.json.

    .venv/bin/python tools/latency.py [--kernels vector_add gemm] [--repeats 3] [--out bench/latency.json]
                                      [--load-before bench/load.json --load-after bench/load-live.json ...]

For each shipped kernel at the page's first request (its default sizes, every tile on auto), and for a kernel of
one's own (kernels/vector_add.py's text as a user's file: kernel ""), each repeat measures:

- cold:          the compile cache emptied first: a compile nobody made before (a job: lowering, nvcc, ptxas).
- warm:          the same request by another student: answered from the cache.
- restart:       the same request after the job layer was shut down and started again: from the cache on disk.
- comment edit:  a comment added (the same program laid out anew): answered from the cache, its lines moved.
- code edit:     a line of code that changes the program and not the kernel's TIR (`_note_<n> = 0` at the end):
                 a job, which builds the TIR, finds an answer kept for it and lowers nothing (only its lines are
                 moved). (An edit that changes the TIR but not the CUDA lowers and skips nvcc and ptxas instead:
                 tests/test_jobs_cache.py has both.)
Each is timed to the CUDA on screen (the job's partial answer; an answer from the cache brings it at once) and to
the whole answer. Then what no GPU can launch, timed to its refusal (`refusals`): a kernel of one's own with 2 MiB
tiles, vector_add with 4096 threads a block, gemm with four stages of 256 × 256 × 128 tiles (each tile fits, the
pipeline does not). The server's own settings, a compile cache in a fresh folder, no pre-warm. The 30-student load
test (tests/load/load_test.py) is run apart; its files given here are copied into the record as they are.
"""
from __future__ import annotations

import argparse
import datetime
import json
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from playground import jobs  # noqa: E402
from playground.jobs import runner  # noqa: E402
from playground.settings import current, usable_cores  # noqa: E402
from playground.ui import gateway  # noqa: E402

OWN = "own (vector_add.py as a user's file)"
KINDS = ("cold", "warm", "restart", "comment_edit", "code_edit")


def page_requests(kernels: list[str]) -> list[tuple[str, str, str | None, dict]]:
    """(label, kernel, source, params): each shipped kernel as a fresh page asks for it, and one of one's own."""
    first = dict(gateway.prewarm_requests())
    out = [(k, k, None, first[k]) for k in kernels if k in first]
    own = (ROOT / "kernels" / "vector_add.py").read_text()
    out.append((OWN, "", own, dict(first["vector_add"])))
    return out


def timed(kernel: str, source: str | None, params: dict, session: str) -> dict:
    """One compile through the page's gateway: seconds to the CUDA (the partial answer, else the answer) and to the
    answer, and how it was answered."""
    start = time.perf_counter()
    cuda_at: list[float] = []
    result = gateway.call("compile", kernel, source, params, session=session,
                          on_partial=lambda _p: cuda_at.append(time.perf_counter() - start))
    total = time.perf_counter() - start
    if not result.get("ok"):
        raise SystemExit(f"{kernel or OWN}: the compile failed: {(result.get('error') or {}).get('message')}")
    return {"cuda_s": cuda_at[0] if cuda_at else total, "answer_s": total, "cached": bool(result.get("cached")),
            "nvcc_reused": bool(result.get("nvcc_reused")), "lowering_reused": bool(result.get("lowering_reused"))}


def settle(timeout: float = 120) -> None:
    """Until every spare worker is ready (a cold compile then measures the compile, not a worker's start)."""
    deadline = time.monotonic() + timeout
    while not runner.state().backend.idle() and time.monotonic() < deadline:
        time.sleep(0.2)
    time.sleep(1.0)


# A kernel of one's own whose tiles alone are 2 MiB each (the limits' tests use it too)
HUGE_TILES = (ROOT / "tests" / "own_kernels" / "huge_tiles.py").read_text()
REFUSALS = [
    ("own kernel, 2 MiB tiles", "", HUGE_TILES, {}),
    ("vector_add, 4096 threads", "vector_add", None, {"threads": 4096}),
    ("gemm, 4 stages of 256x256x128", "gemm", None, {"block_M": 256, "block_N": 256, "block_K": 128,
                                                      "num_stages": 4, "warp_specialized": False}),
]


def refusals() -> dict:
    """Seconds from the click to the refusal of each of REFUSALS, its stage and the start of its message."""
    out = {}
    for label, kernel, source, params in REFUSALS:
        settle()
        start = time.perf_counter()
        result = gateway.call("compile", kernel, source, params, session=f"user:refused-{uuid.uuid4().hex[:8]}")
        error = result.get("error") or {}
        out[label] = {"seconds": round(time.perf_counter() - start, 3), "ok": bool(result.get("ok")),
                      "stage": error.get("stage"), "line": error.get("line"), "message": (error.get("message") or "")[:200]}
        print(label, json.dumps(out[label]), flush=True)
    return out


def measure(requests, repeats: int, settings) -> dict:
    figures: dict = {}
    for label, kernel, source, params in requests:
        rows: dict[str, list[dict]] = {k: [] for k in KINDS}
        base = source if source is not None else gateway.original_source(kernel)
        for r in range(repeats):
            tag = uuid.uuid4().hex[:8]
            runner.state().cache.clear()
            settle()
            rows["cold"].append(timed(kernel, source, params, f"user:cold-{tag}"))
            rows["warm"].append(timed(kernel, source, params, f"user:warm-{tag}"))
            jobs.shutdown()
            runner.state(settings)
            jobs.start(settings)
            settle()
            rows["restart"].append(timed(kernel, source, params, f"user:restart-{tag}"))
            # An edit is the same student's who compiled the cold one (a user's own kernel's entries are theirs).
            who = "user:cold-" + tag if kernel == "" else f"user:edit-{tag}"
            rows["comment_edit"].append(timed(kernel, "# my notes\n" + base, params, who))
            rows["code_edit"].append(timed(kernel, base + f"\n_note_{r} = 0\n", params, who))
        figures[label] = {kind: summary(rows[kind]) for kind in KINDS}
        print(label, json.dumps({k: (v["cuda_s"]["p50"], v["answer_s"]["p50"]) for k, v in figures[label].items()}),
              flush=True)
    return figures


def summary(rows: list[dict]) -> dict:
    def stats(values: list[float]) -> dict:
        values = sorted(values)
        p95 = values[min(len(values) - 1, round(0.95 * (len(values) - 1)))]
        return {"p50": round(statistics.median(values), 3), "p95": round(p95, 3), "max": round(values[-1], 3)}
    return {"cuda_s": stats([r["cuda_s"] for r in rows]), "answer_s": stats([r["answer_s"] for r in rows]),
            "n": len(rows), "from_cache": sum(r["cached"] for r in rows),
            "nvcc_skipped": sum(r["nvcc_reused"] for r in rows),
            "lowering_skipped": sum(r["lowering_reused"] for r in rows)}


def load_figures(path: Path | None) -> dict | None:
    if path is None or not path.exists():
        return None
    data = json.loads(path.read_text())
    return {"file": str(path.relative_to(ROOT) if path.is_relative_to(ROOT) else path), "commit": data.get("commit"),
            "date": data.get("date"), "requests": data.get("requests"), "failed": data.get("failed"),
            "cold_latency_s": data.get("cold_latency_s"), "cached_latency_s": data.get("cached_latency_s"),
            "edit": data.get("edit"), "note": data.get("note")}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--kernels", nargs="+",
                        default=["vector_add", "gemm", "softmax", "gemm_epilogue", "flash_attention"])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--out", type=Path, default=ROOT / "bench" / "latency.json")
    parser.add_argument("--load-before", type=Path, help="a load test's record before (tests/load/load_test.py)")
    parser.add_argument("--load-after", type=Path, nargs="*", default=[], help="load test records after")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="latency-") as data:
        settings = current().replace(data_dir=Path(data), prewarm=False)
        runner.state(settings)
        jobs.start(settings)
        try:
            figures = measure(page_requests(args.kernels), args.repeats, settings)
            refused = refusals()
            health = jobs.health()
        finally:
            jobs.shutdown()
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True,
                            text=True).stdout.strip()
    record = {"date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"), "commit": commit,
              "machine": {"cores": usable_cores(), "gpu": health.get("gpu"), "sandbox": health.get("sandbox"),
                          "tilelang": health.get("tilelang"), "cpu_slots": health["queue"]["cpu"]["slots"]},
              "how": __doc__.strip().splitlines(), "figures": figures, "refusals": refused,
              "load_test": {"before": load_figures(args.load_before), "after": [load_figures(p) for p in args.load_after]}}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(record, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
