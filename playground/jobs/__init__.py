"""Jobs: every compile, run, tune or sweep runs in a separate process started for it, never inside the web server.

    from playground.jobs import run_job
    result = run_job("compile", "gemm", source_text, {"block_M": 64}, on_progress=print)

`run_job` blocks until the job ends and returns the engine's JSON (see playground.cli.execute); a job that crashes,
hangs or floods its output ends with an error result, never an exception.
"""
from .runner import run_job

__all__ = ["run_job"]
