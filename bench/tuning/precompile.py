"""Build many kernels at once before a tuning script times them: device minutes are scarce, compiles are not.

TileLang's lowering holds the GIL and nvcc is a child process, so the builds run in forked processes, one per core;
each leaves its kernel in TileLang's cache, and the script's own `tilelang.compile` of the same function then loads
it from there in milliseconds. A build that fails here fails again, with its message, where the script builds it.
"""
import multiprocessing
import os
from concurrent.futures import ProcessPoolExecutor


def _build(job):
    build, args, kwargs = job
    try:
        build(*args, **kwargs)
        return None
    except Exception as exc:  # reported where the script builds it again
        return f"{args} {kwargs}: {str(exc).splitlines()[-1][:200] if str(exc) else type(exc).__name__}"


def precompile(jobs, workers=None):
    """jobs: (build, args, kwargs) triples; build must be a module-level function (it is called in a child)."""
    workers = workers or max(1, min(len(jobs), os.cpu_count() or 1))
    with ProcessPoolExecutor(workers, mp_context=multiprocessing.get_context("fork")) as pool:
        failed = [f for f in pool.map(_build, jobs) if f]
    print(f"precompiled {len(jobs) - len(failed)} of {len(jobs)} kernels with {workers} processes", flush=True)
    for f in failed:
        print("  build failed:", f, flush=True)
