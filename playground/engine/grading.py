"""Grading a submission to an exercise in jobs of two kinds, so that the measurement runs none of the student's Python.

    build (runs the student's Python):   the student's factory, called for each problem → each kernel's TIR,
                                         serialized as data (tvm.ir.save_json). The server runs it twice: once for
                                         the public problems (visible and timed), once for the hidden ones, so the
                                         code whose messages the student reads never saw a hidden size
    grade (runs none of it):             that TIR loaded back as data and checked (tir_check.py), compiled with the
                                         grader's own settings, then the engine's one measurement path (measure.py):
                                         verified on every problem with fresh inputs from the exercise's reference,
                                         timed only if all pass (each timed call on poisoned outputs, calls picked at
                                         random checked), and verified again afterwards on new inputs

The grade job holds the exercise's reference and inputs (sent to it by the server, never to the build job), makes
the inputs, poisons the outputs, runs the reference and the timer: the student's code there is GPU code only, so it
cannot patch the reference, the comparison or the timer, and cannot write the job's answer. What it can reach is the
job's GPU memory, so the reference is computed from host copies of the inputs made before the kernel ran, and the
inputs must be unchanged after (measure.Runner). What the build job answers is untrusted (the student's code ran
there and could have written anything): it is only ever TIR, which the grade job checks is a kernel and nothing
else (no settings, no injected source, no host calls) before it compiles it. The grade job's progress names no
problem (`_no_sizes`): the student watches it.

The GPU's ceilings (copy bandwidth, matmul peak) are measured, or read from the cache, before any of the submission
runs; an accepted grade says where it was measured (`device`: the GPU, its clocks, temperature and throttle reasons,
the driver, TileLang) and how close it came to its problem's speed of light there (`sol_percent`: the larger of its
shares of the copy bandwidth and of the matmul peak), so that one board is fair across GPUs.
"""
from __future__ import annotations

import contextlib
import json
import re
import sys
from pathlib import Path

from .errors import StageError, clip, format_exception
from .kernel import Config, load_file, problem_label
from .measure import (MeasureOptions, Measurer, Runner, device_error, new_seed, quiet, rates,
                      verification_failure)
from .source import import_file, write_source

from .tir_check import load_tir  # noqa: F401  (the grade job's kernels, read back as data and checked)


def _prim_func_type():
    from .tir_check import tir_module
    return tir_module().PrimFunc


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
    from playground.engine.tir_check import load_tir
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
                             budget_ms=budget_ms, audit_timed=True)
    timer = Timer()
    progress("measuring this GPU's ceilings", 0.02)
    try:
        ceilings = device.ceilings(timer)  # before any of the submission runs (cached per GPU model and driver)
    except Exception:  # a grade without its share of the speed of light is still a grade
        ceilings = None
    measurer = Measurer(options, timer, ceilings)
    config = Config(problems[timed], dtype, {})
    m = measurer.measure(kernel, config, lambda what, fraction: progress(_no_sizes(what), fraction))
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
    median_ms = times["kernel"]["median_ms"]
    result.update(ok=True, times=times, median_ms=median_ms,
                  baselines={k: v["median_ms"] for k, v in times.items() if k != "kernel"})
    result.update(rates(kernel, config, median_ms, ceilings))  # tflops, gbps, percent_of_copy_bandwidth, _matmul_peak
    shares = [result.get(k) for k in ("percent_of_copy_bandwidth", "percent_of_matmul_peak")]
    result["sol_percent"] = max((x for x in shares if x), default=None)
    result["device"] = measurement_record(measurer, ceilings)
    return result


# NVML's clock event reasons, by bit (nvmlClocksEventReason*). The GPU is idle when the record is read, just after
# the timing, so "idle" is left out: it says nothing of the measurement.
THROTTLE_REASONS = {0x2: "application clocks setting", 0x4: "software power cap", 0x8: "hardware slowdown",
                    0x10: "sync boost", 0x20: "software thermal slowdown", 0x40: "hardware thermal slowdown",
                    0x80: "hardware power brake", 0x100: "display clock setting"}


def throttle_reasons() -> list[str] | None:
    """Why the GPU's clocks are held below their maximum now, as NVML says (names of THROTTLE_REASONS); None where
    NVML cannot say. The GPU is CUDA's device 0 of this job, found by its PCI address (NVML ignores
    CUDA_VISIBLE_DEVICES)."""
    try:
        import pynvml
        import torch
        props = torch.cuda.get_device_properties(0)
        pci = f"{props.pci_domain_id:08x}:{props.pci_bus_id:02x}:{props.pci_device_id:02x}.0".encode()
        pynvml.nvmlInit()
    except Exception:  # no nvidia-ml-py, no driver, a torch without PCI ids
        return None
    try:
        handle = pynvml.nvmlDeviceGetHandleByPciBusId(pci)
        reasons = getattr(pynvml, "nvmlDeviceGetCurrentClocksEventReasons", None) \
            or pynvml.nvmlDeviceGetCurrentClocksThrottleReasons
        mask = int(reasons(handle))
    except Exception:
        return None
    finally:
        with contextlib.suppress(Exception):
            pynvml.nvmlShutdown()
    return [name for bit, name in THROTTLE_REASONS.items() if mask & bit]


def measurement_record(measurer: Measurer, ceilings: dict | None) -> dict:
    """Where and how the grade was measured: the GPU and its clocks, temperature and power now (just after the
    timing), the throttle reasons, the driver, torch, CUDA and TileLang, and the ceilings the share is of."""
    import time
    try:
        import tilelang
        version = getattr(tilelang, "__version__", None)
    except Exception:
        version = None
    return {**measurer.device_info(), "throttle_reasons": throttle_reasons(), "tilelang": version,
            "ceilings": {k: v for k, v in (ceilings or {}).items() if k in ("copy_gbps", "matmul_tflops", "how")},
            "measured_at": time.time()}


def _no_sizes(what: str) -> str:
    """A progress text without the problem it names ("verifying 333×3000" → "verifying"): the student watches the
    progress, and some problems are hidden."""
    return re.split(r"\s+\S*\d", what, maxsplit=1)[0]


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
