"""Grading a submission to an exercise, in two jobs, so that the measurement runs none of the student's Python.

    build (runs the student's Python):   the student's factory, called for each problem to check and for the timed
                                         one → each kernel's TIR, serialized as data (tvm.ir.save_json)
    grade (runs none of it):             that TIR loaded back as data (tvm.ir.load_json), compiled, then the engine's
                                         one measurement path (measure.py): verified on every problem with fresh
                                         inputs from the exercise's reference, timed only if all pass, and verified
                                         again afterwards on new inputs

The grade job holds the exercise's reference and inputs (sent to it by the server, never to the build job), makes
the inputs, poisons the outputs, runs the reference and the timer: the student's code there is GPU code only, so it
cannot patch the reference, the comparison or the timer, and cannot write the job's answer. What the build job
answers is untrusted (the student's code ran there and could have written anything): it is only ever TIR, which
the grade job checks is a PrimFunc calling nothing outside the kernel before it compiles it.
"""
from __future__ import annotations

import contextlib
import json
import sys
from pathlib import Path

from .catalogue import Config, load_file
from .errors import StageError, clip, format_exception
from .measure import (MeasureOptions, Measurer, Runner, device_error, new_seed, problem_label, quiet,
                      verification_failure)
from .source import import_file, write_source

TIR_LIMIT = 4 * 1024 * 1024  # bytes of TIR JSON per kernel: the shipped GEMM's is ~100 KB
# Calls out of the kernel. Packed functions and LLVM intrinsics are refused anywhere; an extern call only on the host
# side (outside the kernel's thread-bound loops), where it would run on the CPU of the grading process. Inside the
# kernel an extern call is a CUDA device function (`__threadfence_block`), which nvcc resolves on the device only.
# (Op names without their namespace: "tir." or, in the TVM TileLang 0.1.15 ships, "tirx.")
PACKED_CALLS = ("call_packed", "call_cpacked", "tvm_call_packed", "tvm_call_cpacked", "call_llvm_intrin",
                "call_llvm_pure_intrin", "tvm_call_packed_lowered", "tvm_call_cpacked_lowered",
                "tvm_call_trace_packed")
EXTERN_CALLS = ("call_extern", "call_pure_extern")


def _tir():
    """TVM's TIR module: `tvm.tirx` in the TVM TileLang 0.1.15 ships, `tvm.tir` before."""
    import tilelang  # noqa: F401  (TileLang puts its TVM on the path)
    import tvm
    return getattr(tvm, "tirx", None) or tvm.tir


def _prim_func_type():
    return _tir().PrimFunc


# -- the build job ------------------------------------------------------------------------------------------------
def build(source: str, factory: str, problems: list[dict], dtype: str, tile: dict, workdir: str | None) -> dict:
    """Call the student's `factory` for each problem; {"ok", "tir": [JSON text per problem]} or a StageError whose
    message starts "problem I:" (which problem, so the server can tell a visible one from a hidden one)."""
    prim_func = _prim_func_type()
    import tvm
    root = Path(workdir or ".") / "submission"
    module = import_file(write_source(source, factory, root))
    fn = getattr(module, factory, None)
    if not callable(fn):
        raise StageError("definition", f"the submission must define the function {factory}(...)")
    out = []
    for i, problem in enumerate(problems):
        try:
            with contextlib.redirect_stdout(sys.stderr):
                func = fn(**problem, dtype=dtype, **tile)
        except TypeError as exc:
            raise StageError("parameters", f"problem {i}: {factory}(...) does not take these arguments: {exc}")
        except StageError:
            raise
        except Exception as exc:
            from .errors import user_line_from_traceback
            raise StageError("python", f"problem {i}: {type(exc).__name__}: {exc}"[:500],
                             user_line_from_traceback(exc, str(module.__file__)), clip(format_exception(exc)))
        if not isinstance(func, prim_func):
            raise StageError("definition", f"problem {i}: {factory}(...) must return a @T.prim_func (a TileLang "
                                           f"kernel), not {type(func).__name__}")
        out.append(tvm.ir.save_json(func))
    return {"ok": True, "tir": out}


# -- the grade job ------------------------------------------------------------------------------------------------
def load_tir(text: str):
    """A PrimFunc from TIR JSON (data: nothing runs), refused unless it is one and calls nothing out of the kernel."""
    prim_func = _prim_func_type()
    import tvm
    if not isinstance(text, str) or len(text) > TIR_LIMIT:
        raise StageError("definition", f"a kernel's TIR must be text of at most {TIR_LIMIT // 2**20} MiB")
    try:
        func = tvm.ir.load_json(text)
    except Exception as exc:
        raise StageError("definition", f"the kernel's TIR could not be read: {type(exc).__name__}") from None
    if not isinstance(func, prim_func):
        raise StageError("definition", f"the kernel is a {type(func).__name__}, not a PrimFunc")
    tir = _tir()
    on_device: set[int] = set()  # the calls inside a thread-bound loop (blockIdx / threadIdx): device code

    def mark_device(node):
        if isinstance(node, tir.For) and node.kind == tir.ForKind.THREAD_BINDING:
            tir.stmt_functor.post_order_visit(
                node.body, lambda n: on_device.add(hash(n)) if isinstance(n, tir.Call) else None)
    tir.stmt_functor.post_order_visit(func.body, mark_device)
    found = []

    def visit(node):
        if isinstance(node, tir.Call) and isinstance(node.op, tvm.ir.Op):
            name = node.op.name.split(".", 1)[-1]
            if name in PACKED_CALLS or (name in EXTERN_CALLS and hash(node) not in on_device):
                found.append(name)
    tir.stmt_functor.post_order_visit(func.body, visit)
    if found:
        raise StageError("definition", f"the kernel calls out of itself on the host ({', '.join(sorted(set(found)))})"
                                       "; a submission must be TileLang code only")
    return func


GENERATED = '''

# ---- added by the grader: the kernels built from the submission, one per problem (TIR read back as data) --------
import json as _json
import pathlib as _pathlib

DTYPES = [{dtype!r}]
SPACE = {{}}
PRESETS = {{"timed": {timed!r}}}
CHECK_SHAPES = {checks!r}
_TIR = _json.loads((_pathlib.Path(__file__).parent / "tir.json").read_text())


def {factory}(**kw):
    from playground.engine.grading import load_tir
    key = _json.dumps({{k: kw[k] for k in PRESETS["timed"]}}, sort_keys=True)
    return load_tir(_TIR[key])
'''


def grading_kernel(factory: str, reference: str, tir: list[str], problems: list[dict], timed: int, dtype: str,
                   root: Path):
    """A kernel file the engine can measure: the exercise's reference (make_inputs, reference, BASELINES, flops,
    bytes_moved) plus a factory that returns the submitted kernel of each problem."""
    if len(tir) != len(problems):
        raise StageError("internal", f"{len(tir)} kernels for {len(problems)} problems")
    by_problem = {json.dumps(p, sort_keys=True): t for p, t in zip(problems, tir)}
    for text in tir:
        load_tir(text)  # refuse a bad one before anything is compiled
    checks = [p for i, p in enumerate(problems) if i != timed]
    text = reference + GENERATED.format(dtype=dtype, timed=problems[timed], checks=checks, factory=factory)
    path = write_source(text, factory, root)
    (path.parent / "tir.json").write_text(json.dumps(by_problem))
    return load_file(factory, path)


def grade(factory: str, reference: str, tir: list[str], problems: list[dict], timed: int, dtype: str, arch: str,
          seed: int | None, recheck_seed: int | None, workdir: str | None, budget_ms: float = 1000.0,
          progress=quiet) -> dict:
    """Verify every problem (fresh inputs), time the timed one against the reference's baselines, verify it again
    on new inputs. {"ok", "verification": [per problem], "times", "recheck", "error"}."""
    from . import device
    from .compile import resolve_arch
    from .timing import Timer
    arch = resolve_arch(arch)
    kernel = grading_kernel(factory, reference, tir, problems, timed, dtype, Path(workdir or ".") / "grading")
    device.require_gpu()
    options = MeasureOptions(arch, new_seed() if seed is None else int(seed), baselines=True, check_shapes=True,
                             budget_ms=budget_ms)
    measurer = Measurer(options, Timer(), None)
    config = Config(problems[timed], dtype, {})
    m = measurer.measure(kernel, config, progress)
    order = [p for i, p in enumerate(problems) if i != timed] + [problems[timed]]  # verify_stage's order
    verification = [{**v, "problem": problems.index(p)} for v, p in zip(m.verification, order)]
    result = {"ok": False, "verification": verification, "seed": options.seed}
    if m.error is not None:
        result["error"] = m.error.to_json()
        result["failed_problem"] = _failed_problem(m.error.message, problems, verification)
        return result
    progress("verifying again on new inputs", 0.95)
    try:
        from .parallel_compile import build_jit
        recheck = Runner(kernel, config, build_jit(kernel, config, arch),
                         new_seed() if recheck_seed is None else int(recheck_seed)).check()
    except StageError as err:
        return {**result, "error": err.to_json(), "failed_problem": timed}
    except Exception as exc:
        return {**result, "error": device_error(exc).to_json(), "failed_problem": timed}
    result["recheck"] = {**recheck, "problem": timed}
    if not recheck["passed"]:
        err = verification_failure([recheck])
        return {**result, "error": StageError("verify", "after timing, on new inputs: " + err.message).to_json(),
                "failed_problem": timed}
    times = dict(m.times)
    result.update(ok=True, times=times, median_ms=times["kernel"]["median_ms"],
                  baselines={k: v["median_ms"] for k, v in times.items() if k != "kernel"})
    return result


def _failed_problem(message: str, problems: list[dict], verification: list[dict]) -> int | None:
    """Which problem an error came from: the first failed verdict, else the problem named by "at LABEL:"."""
    for v in verification:
        if not v.get("passed"):
            return v["problem"]
    for i, p in enumerate(problems):
        if message.startswith(f"at {problem_label(p)}:"):
            return i
    return None


# -- as a job -----------------------------------------------------------------------------------------------------
def execute(action: str, source: str | None, params: dict, arch: str | None, workdir: str | None,
            progress=None) -> dict:
    """The two job actions: "build_submission" (params: factory, problems, dtype, tile) and "grade" (params:
    factory, reference, tir, problems, timed, dtype, seed, recheck_seed)."""
    progress = progress or quiet
    p = params
    if action == "build_submission":
        if not isinstance(source, str) or not source.strip():
            raise StageError("parameters", "the submission is empty")
        progress("building the kernel for each problem", 0.1)
        return build(source, str(p["factory"]), list(p["problems"]), str(p["dtype"]), dict(p.get("tile") or {}),
                     workdir)
    if action == "grade":
        return grade(str(p["factory"]), str(p["reference"]), list(p["tir"]), list(p["problems"]), int(p["timed"]),
                     str(p["dtype"]), arch, p.get("seed"), p.get("recheck_seed"), workdir,
                     float(p.get("budget_ms", 1000.0)), progress)
    raise StageError("parameters", f"unknown action {action!r}")
