"""Jobs: every compile, run, tune or sweep runs in a sandboxed process started for it, never inside the web server.

    from playground.jobs import run_job, health
    result = run_job("compile", "gemm", source_text, {"block_M": 64}, session=request.session_hash,
                     on_progress=lambda what, fraction: ...)

`run_job` blocks until the job ends and returns the engine's JSON (see engine.actions.execute); a job that crashes,
hangs, floods its output or is turned away by the queue ends with an error answer (stage "timeout", "busy",
"internal", ...), never an exception. `health()` says whether jobs are sandboxed, what GPU there is and how full the
queue is.

The parts, each small: sandbox.py (bwrap, folder, environment), limits.py (how the bounds are applied; their values are
settings, playground/settings.py), worker.py (the process),
job.py (one worker from start to removal), pool.py (pre-started workers), queue.py (CPU slots, the GPU lock, limits
per session), result_cache.py (compile answers), runner.py (run_job, health), backend.py (the one interface of where
jobs run: local_backend.py on this machine, ray_backend.py on a Ray cluster), hardware.py (GPUs via NVML).
"""
from .runner import health, run_job, shutdown, start, stop

__all__ = ["run_job", "health", "start", "shutdown", "stop"]
