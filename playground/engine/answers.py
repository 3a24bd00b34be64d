"""The answers every layer passes on, typed once: what each action answers, and the one way a failed answer is made.

An answer is JSON from where it is made to where it is read: the engine writes it in a job's process, the job layer
reads it from a pipe (or from a Ray node), keeps compiles in its cache and hands it to the page, which shows it and
gives it to scripts through its API (README: "The command line", "The page's API"). So the shapes are TypedDicts:
the plain dicts json.loads gives back, with their keys written down here and nowhere else. This module and errors.py
are the bottom of the engine: every layer above imports them, and they import nothing else of the playground.

    failed(StageError("busy", "the queue is full: try again in 5 s"), "compile", "gemm")
    # {"ok": False, "kernel": "gemm", "action": "compile",
    #  "error": {"stage": "busy", "message": "the queue is full: try again in 5 s", "line": None, "log": ""}}
"""
from __future__ import annotations

from typing import Literal, NotRequired, TypedDict

from .errors import ErrorJSON, StageError

NAME_ECHO = 100  # characters of a kernel's name an answer echoes: a name sent by anyone, no longer than names are


class Answer(TypedDict, total=False):
    """What every action's answer has, and what the job layer adds on its way to the page."""
    ok: bool                   # the action did what was asked (a compile compiled, a run verified and was timed)
    kernel: str
    action: str
    error: ErrorJSON | None    # why not ok (StageError's JSON); None when ok
    cached: bool               # a compile answered from the server's result cache (jobs/result_cache.py)
    job_seconds: float         # in the job layer, from asking for a slot to the answer (the queue's wait too)
    ran_on: dict               # on a Ray cluster: {"node", "hostname", "gpu", "arch", "slot", "pid", "started",
    #                            "finished"} (jobs/ray_backend.py)
    retried: str               # on a Ray cluster: the GPU worker that stopped mid-job, the job run again elsewhere


class FailedAnswer(TypedDict):
    """An answer that is nothing but its error (made by `failed`); the answers of a class's actions (course/) are
    about no kernel and carry neither kernel nor action."""
    ok: Literal[False]
    kernel: NotRequired[str]
    action: NotRequired[str]
    error: ErrorJSON


class CompileAnswer(Answer, total=False):
    """engine/compile.py: the generated code, its resources and the CUDA → source line map."""
    config: dict               # the resolved config (kernel.Config.to_json: "problem", "dtype", "tile", ...)
    arch: str
    tilelang_version: str
    source_file: str           # the file name the user's lines are numbered in
    cuda: str
    host: str
    ptx: str
    ptxas_log: str
    sass: str
    resources: dict            # {"registers", "shared_bytes", "spill_bytes", "sass_mix", "threads", ...}
    line_map: list             # per CUDA line, the user's line it came from (or None)
    line_origins: list | None  # CUDA lines made by a module the file imports, as "file.py:N"
    origin_lines: dict | None  # {"file.py:N": that line's text}
    compile_seconds: float
    nvcc_reused: bool          # nvcc's output kept for this very CUDA: nvcc and ptxas did not run
    lowering_reused: bool      # an answer kept for this very TIR, its lines moved: nothing was lowered or compiled
    warnings: list[dict]       # what will be slow: [{"stage": "resources", "message", "line"}]


class Rates(TypedDict, total=False):
    """How fast, against this GPU's measured ceilings (engine/measure.py's rates)."""
    tflops: float | None
    gbps: float | None
    percent_of_copy_bandwidth: float | None
    percent_of_matmul_peak: float | None


class RunAnswer(CompileAnswer, Rates, total=False):
    """engine/run.py: the compile, verified on several shapes, then timed against the baselines."""
    seed: int
    verification: list[dict]   # per shape checked: {"shape", "label", "passed", "rel_error", "message", ...}
    verified: bool             # compared with a reference (a kernel without one is run and timed, never verified)
    verification_note: str | None
    device: dict               # the GPU, its clocks and driver, as measured
    timing: dict               # {"median_ms", "p20_ms", "p80_ms", ..., "mode"}
    baselines: dict            # {name: {"median_ms", the rates, "speedup"}}
    ceilings: dict | None      # this GPU's measured copy bandwidth and matmul rate
    flops: int
    bytes: int


class TuneAnswer(Answer, total=False):
    """engine/tune.py: configs measured over the kernel's tile space, the best and whether the server kept it."""
    config: dict
    table: list[dict]          # per config measured: its tile, "compiled", "verified", "median_ms", "error"
    best: dict
    device: dict


class SweepAnswer(Answer, total=False):
    """engine/sweep.py: the kernel and its baselines against problem size."""
    config: dict
    rows: list[dict]
    ceilings: dict | None
    device: dict


class BuildAnswer(Answer, total=False):
    """engine/grading.py's build_submission: the student's factory called for each problem, as TIR."""
    tir: list[str]             # one kernel's TIR (JSON text) per problem


class GradeAnswer(Answer, Rates, total=False):
    """engine/grading.py's grade: every problem verified, the timed one timed and verified again on new inputs."""
    seed: int
    verification: list[dict]   # per problem, "problem" its index
    failed_problem: int        # the problem the error came from
    recheck: dict              # the timed problem verified after timing, on new inputs
    times: dict                # {"kernel": {...}, baseline: {...}}
    median_ms: float
    baselines: dict            # {name: median_ms}
    sol_percent: float | None  # the larger share of this GPU's ceilings
    device: dict               # the measurement's record: GPU, clocks, throttle reasons


def failed(error: StageError, action: str | None = None, kernel: str | None = None, **more) -> FailedAnswer:
    """The one failed answer: {"ok": False, "kernel", "action", "error": the error's JSON, **more}. `kernel` is
    echoed no longer than NAME_ECHO characters; a class's answers (course/) give neither kernel nor action."""
    answer: dict = {"ok": False}
    if kernel is not None:
        answer["kernel"] = kernel[:NAME_ECHO] if isinstance(kernel, str) else kernel
    if action is not None:
        answer["action"] = action
    answer["error"] = error.to_json()
    answer.update(more)
    return answer  # type: ignore[return-value]  (the keys above are FailedAnswer's)
