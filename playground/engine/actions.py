"""The engine's one entry: an action on a kernel, answered as JSON. The command line (cli.py) and a job's worker
(jobs/worker.py) both call `execute`; neither adds to what it does.

    execute("compile", "gemm", None, {"block_M": 64}, "sm_90a")   # {"ok", "kernel", "cuda", ..., "error"}

The actions: describe, compile, run, tune, sweep, ir, profile, memcheck, and an exercise's build_submission and
grade. A user's mistake is never raised: it is the answer's `error` (errors.StageError's JSON).
"""
from __future__ import annotations

import contextlib
import math
import signal
import sys

from .answers import Answer, failed
from .errors import StageError, clip, format_exception


def jsonable(obj):
    """`obj` with every non-finite float as None (JSON has no NaN), every key text."""
    if isinstance(obj, float) and not math.isfinite(obj):
        return None
    if isinstance(obj, dict):
        return {str(k): jsonable(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [jsonable(v) for v in obj]
    return obj


@contextlib.contextmanager
def time_limit(seconds: float | None):
    """Raise a `timeout` StageError in Python code that runs past `seconds` (nvcc gets the same limit). A job
    runner still kills the whole process group from outside: a signal cannot interrupt a blocking C call."""
    if not seconds:
        yield
        return
    from ..settings import tell_tilelang_compile_timeout
    tell_tilelang_compile_timeout(seconds)

    def expire(*_):
        raise StageError("timeout", f"the job ran past its {seconds:g} s limit")
    old = signal.signal(signal.SIGALRM, expire)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old)


def execute(action: str, kernel_name: str, source: str | None = None, params: dict | None = None,
            arch: str | None = None, workdir: str | None = None, **options) -> Answer:
    """One engine call as JSON: what the command line prints and what a job returns. Never raises for user errors.
    Each action's module is imported when that action is asked for: a call loads only what it uses."""
    from . import ranges
    from .kernel import entry_from, load
    resolved: dict = {}  # the config once resolved, which a failed answer carries too: the page shows what was asked
    try:
        with contextlib.redirect_stdout(sys.stderr):  # a print() in the user's code must not corrupt our JSON
            ranges.check_source(source)
            ranges.check_arch(arch)
            if action in ("build_submission", "grade"):  # an exercise's submission: no catalogue kernel
                from .grading import execute as grading_execute
                graded = grading_execute(action, source, params or {}, arch, workdir, options.get("progress"))
                return jsonable({"kernel": kernel_name, **graded, "action": action})
            if source is not None and options.get("progress"):  # a loop at its top level shows up as this stage
                options["progress"]("importing: running the file's top level", 0.02)
            # kernel_name: a catalogue kernel, a file's path, or "" with the source; `entry` picks among several
            kernel = load(kernel_name, source, workdir, entry=entry_from(params))
            if action == "describe":  # the parameters the page builds its controls from
                return jsonable({"ok": True, "action": action, "kernel": kernel.name, **kernel.describe(),
                                 "error": None})
            config = kernel.resolve(params or {})
            ranges.check_config(kernel, config)
            resolved["config"] = config.to_json()
            if action == "compile":
                from .compile import compile_kernel
                result = compile_kernel(kernel, config, arch, progress=options.get("progress"),
                                        server_cache=options.get("server_cache"))
            elif action == "run":
                from .run import run
                result = run(kernel, config, arch, seed=options.get("seed"), graph=options.get("graph", False),
                             progress=options.get("progress") or (lambda *_: None))
            elif action == "tune":
                from .tune import DEFAULT_MAX_CONFIGS, tune
                result = tune(kernel, config, arch, max_configs=options.get("max_configs", DEFAULT_MAX_CONFIGS),
                              progress=options.get("progress")).to_json()
            elif action == "ir":
                from .ir import lower_passes
                result = lower_passes(kernel, config, arch)
            elif action in ("profile", "memcheck"):
                from . import profile
                run = profile.profile if action == "profile" else profile.memcheck
                result = run(kernel, config, arch, workdir, timeout=options.get("timeout"),
                             progress=options.get("progress") or (lambda *_: None))
            elif action == "sweep":
                from .sweep import sweep
                result = sweep(kernel, config, arch, progress=options.get("progress"))
            else:
                raise StageError("parameters", f"unknown action {action!r}")
    except StageError as err:
        error = err
    except MemoryError as exc:
        error = StageError("device", "the job ran out of memory", None, clip(format_exception(exc)))
    except Exception as exc:
        if is_gpu_failure(exc):  # torch.OutOfMemoryError, a CUDA error outside the run step's own handler
            from .measure import device_error
            error = device_error(exc)
        else:
            error = StageError("internal", f"{type(exc).__name__}: {exc}"[:500], None, clip(format_exception(exc)))
    else:
        result["action"] = action
        return jsonable(result)
    return jsonable(failed(error, action, kernel_name, **resolved))


def is_gpu_failure(exc: BaseException) -> bool:
    """Is `exc` the GPU's (out of memory, a CUDA error), so a `device` error rather than a bug of the engine?"""
    text = f"{type(exc).__name__}: {exc}"
    return "OutOfMemoryError" in text or "CUDA error" in text or "CUDA out of memory" in text
