"""The one path from a configuration to a measurement: compile, verify, and only if verified, time.

run, tune, sweep and bench are plans over this path: they choose the configurations and the options (which
baselines, which problems to verify on, how long to time) and turn `Measurement`s into their tables. None of them
compiles, verifies or times on its own.

- compile: the full report (CUDA, PTX, SASS, resources) for a run; otherwise through TileLang's cache, which a plan
  fills first by compiling all its configurations in parallel (`Measurer.precompile`).
- verify: fresh seeded inputs, outputs poisoned with NaN, the kernel file's reference (see verify.py); at the
  configuration's own problem and, when the options ask, at the kernel's CHECK_SHAPES.
- time: the kernel and its baselines interleaved with one Timer (CUDA events, L2 flushed, median; see timing.py).

A configuration that fails verification never reaches the timer: `measure` returns before it, and a `Measurement`
cannot even be made with times unless it passed verification.
"""
from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass, field
from typing import Callable

from . import device, parallel_compile as parallel
from .compile import build
from .errors import StageError, clip, format_exception
from .kernel import Config, Kernel, call_with, problem_label, static_shape
from .verify import compare, poisoned, refill, torch_dtype, unchecked

Progress = Callable[[str, float], None]  # (what is happening, fraction of this measurement done)


def quiet(_: str, __: float) -> None:
    pass


def new_seed() -> int:
    return int.from_bytes(os.urandom(4), "little")


# -- failures on the GPU ------------------------------------------------------------------------------------------
CUDA_FAILURE = re.compile(r"(CUDA error[^\n]*|an illegal memory access[^\n]*|misaligned address[^\n]*|"
                          r"out of memory[^\n]*|unspecified launch failure[^\n]*)", re.I)
# CUDA's sticky errors: after one, every later call in the process fails with it, so nothing more can be measured
# there. A refused launch (too many resources, invalid argument) or an out-of-memory leaves the context usable.
STICKY_FAILURE = re.compile(r"illegal memory access|misaligned address|unspecified launch failure|"
                            r"illegal instruction|device-side assert|hardware stack error|launch timed out|"
                            r"uncorrectable ECC|context is destroyed", re.I)


class DeviceError(StageError):
    """The GPU failed while running the kernel. `context_lost` is True after one of CUDA's sticky errors: every later
    GPU call in this process would fail too, so a plan stops measuring and a job must start a new process.

    The flag is an attribute, not a field: the JSON shape of a StageError stays {"stage","message","line","log"}."""

    def __init__(self, message: str, log: str = "", context_lost: bool = False):
        super().__init__("device", message, None, log)
        self.context_lost = context_lost


def device_error(exc: BaseException) -> DeviceError:
    """What an exception raised while the GPU ran the kernel (or a baseline) means to the user."""
    text = str(exc)
    cuda = CUDA_FAILURE.search(text)
    message = cuda.group(1) if cuda else f"{type(exc).__name__}: {text.splitlines()[0] if text else ''}"
    log = clip(format_exception(exc))
    if "out of memory" in message.lower():
        return DeviceError(f"the GPU ran out of memory: {message}", log)
    lost = bool(STICKY_FAILURE.search(text))
    return DeviceError(f"the kernel failed on the GPU: {message}"
                       + (" (the CUDA context is lost; start a new job)" if lost else ""), log, context_lost=lost)


def unexpected_error(exc: BaseException) -> StageError:
    """An exception outside the kernel's own launch (making inputs, the reference): the GPU's if it names a CUDA
    failure, else a bug, reported as such."""
    if isinstance(exc, MemoryError) or "OutOfMemoryError" in type(exc).__name__ or CUDA_FAILURE.search(str(exc)):
        return device_error(exc)
    return StageError("internal", f"{type(exc).__name__}: {exc}"[:500], None, clip(format_exception(exc)))


# -- what to measure and what came of it --------------------------------------------------------------------------
@dataclass(frozen=True)
class MeasureOptions:
    """How a plan measures each of its configurations."""
    arch: str                              # the compile target, e.g. sm_90a
    seed: int                              # of the random inputs; a plan draws a fresh one (new_seed) per call
    baselines: bool | tuple[str, ...] = True  # time these of the kernel's BASELINES beside it (True: all of them)
    bench_baselines: bool = False          # may `baselines` name the kernel's BENCH_BASELINES (the benchmark's)
    check_shapes: bool = True              # verify on the kernel's CHECK_SHAPES too, not only the config's problem
    budget_ms: float = 2000.0              # timing budget for the kernel and its baselines together
    graph: bool = False                    # time CUDA-graph replays (for kernels of a few microseconds)
    compile_report: bool = False           # compile afresh with the full report (CUDA, PTX, SASS, resources)
    audit_timed: bool = False              # check the outputs of timed calls picked at random (the grader's)


@dataclass
class Measurement:
    """What came of measuring one configuration: how far it got (compiled, verified, timed) or the `StageError`
    that stopped it."""
    config: Config
    compiled: bool = False
    verification: list[dict] = field(default_factory=list)  # one verdict per problem checked (verify.compare's)
    times: dict[str, dict] | None = None  # {"kernel": timing.summarize(...), baseline name: ...}, if timed
    error: StageError | None = None
    build: dict | None = None  # the compile report, when the options asked for it

    def __post_init__(self):
        if self.times is not None and (not self.verified or self.error is not None):
            raise ValueError("a configuration that did not pass verification cannot be timed")

    @property
    def verified(self) -> bool:
        return self.compiled and bool(self.verification) and all(v["passed"] for v in self.verification)

    @property
    def timed(self) -> bool:
        return self.times is not None

    @property
    def stage(self) -> str:
        """The last stage passed: "timed", "verified", "compiled", or "none"."""
        return ("timed" if self.timed else "verified" if self.verified else "compiled" if self.compiled
                else "none")

    @property
    def context_lost(self) -> bool:
        return isinstance(self.error, DeviceError) and self.error.context_lost

    @property
    def rel_error(self) -> float | None:
        """The worst relative error over the problems checked (None if one had none: wrong shape, NaN)."""
        errors = [v.get("rel_error") for v in self.verification]
        return None if not errors or None in errors else max(errors)

    @property
    def error_text(self) -> str | None:
        """"stage: message", the form a table's error column takes."""
        return f"{self.error.stage}: {self.error.message}" if self.error is not None else None


# -- the stages ---------------------------------------------------------------------------------------------------
class Runner:
    """Inputs, poisoned outputs and the call of one compiled kernel at one problem size.

    What the kernel can reach is the GPU memory of this process: its own buffers, and, through a stray index, any
    other allocation of the process. So what judges it is kept where it cannot write: the inputs are copied to the
    host before the kernel first runs (`made`), the reference is computed from those copies after the kernel ran,
    into new memory, and the inputs on the GPU must still equal the copies afterwards. A kernel that overwrites its
    inputs (and its output to match) is refused, not verified against a reference of its own making."""

    def __init__(self, kernel: Kernel, config: Config, jit, seed: int):
        import torch
        self.kernel, self.config, self.jit = kernel, config, jit
        # What the reference and the baselines may depend on (kernel.run_params): never the tile sizes.
        self.params = kernel.run_params(config)
        gen = torch.Generator(device="cuda").manual_seed(seed)
        func = jit.prim_func
        self.inputs = kernel.make_inputs(self.params, func, "cuda", gen)
        self.made = tuple(x.detach().to("cpu", copy=True) if isinstance(x, torch.Tensor) else x
                          for x in self.inputs)
        self._expected: tuple | None = None
        params = [func.buffer_map[p] for p in func.params if p in func.buffer_map]
        outs = kernel.output_positions(func, len(self.inputs))
        if not outs or len(params) - len(outs) != len(self.inputs):
            raise StageError("definition", f"{len(self.inputs)} inputs were made but the kernel has {len(params)} "
                                           f"buffers, of which {len(outs)} are outputs")
        # (a dynamic shape's outputs at the problem's values of its T.symbolic sizes)
        self.outputs = [poisoned(static_shape(params[i], self.params), torch_dtype(str(params[i].dtype)), "cuda")
                        for i in outs]
        given = iter(self.inputs)
        self.args = [self.outputs[outs.index(i)] if i in outs else next(given) for i in range(len(params))]
        self.input_names = [params[i].name for i in range(len(params)) if i not in outs]

    def __call__(self):
        self.jit(*self.args)

    def poison(self) -> None:
        """Fill the outputs with NaN again (the largest integer's negative for integers), so that a call that
        writes nothing leaves them wrong."""
        for out in self.outputs:
            refill(out)

    def expected(self) -> tuple:
        """The reference's outputs, on the host: computed once, from the copies of the inputs made before the kernel
        first ran, on a GPU copy of them made after."""
        import torch
        if self._expected is None:
            inputs = tuple(x.to("cuda") if isinstance(x, torch.Tensor) else x for x in self.made)
            ref = self.kernel.reference(inputs, self.params)
            refs = tuple(ref) if isinstance(ref, (tuple, list)) else (ref,)
            if len(refs) != len(self.outputs):
                raise StageError("definition", f"reference returned {len(refs)} tensors for {len(self.outputs)} "
                                               "outputs")
            self._expected = tuple(r.detach().to("cpu") if isinstance(r, torch.Tensor) else r for r in refs)
            del inputs, ref, refs
        return self._expected

    def changed_input(self) -> str | None:
        """The name of the first input the kernel wrote (compared bit for bit with its copy), else None."""
        import torch
        for name, now, made in zip(self.input_names, self.inputs, self.made):
            if isinstance(now, torch.Tensor) and not _same_bits(now, made.to(now.device)):
                return name
        return None

    def verdict(self) -> dict:
        """The outputs as they are now against the reference: the worst output's verdict (and the inputs unchanged)."""
        import torch
        if not self.kernel.has_reference:  # run and checked for unwritten elements only: said so, never "verified"
            verdicts = [unchecked(o, self.kernel.verification_note) for o in self.outputs]
        else:
            verdicts = [compare(o, r.to(o.device) if isinstance(r, torch.Tensor) else r,
                                str(o.dtype).removeprefix("torch.")) for o, r in zip(self.outputs, self.expected())]
        changed = self.changed_input()
        if changed is not None:
            verdicts.append({"passed": False, "verified": True, "criterion": "inputs", "rel_error": None,
                             "max_abs_error": None, "mismatches": None, "first_mismatches": [], "nonfinite": None,
                             "elements": None, "message": f"the kernel wrote its input {changed}: a kernel may "
                                                          "write its outputs only"})
        # A written input comes first: it is the cause, and the outputs' error follows from it.
        worst = max(verdicts, key=lambda v: (not v["passed"], v["criterion"] == "inputs", v["rel_error"] or 0))
        return {"shape": self.config.problem, "label": problem_label(self.config.problem), **worst,
                "outputs": verdicts if len(verdicts) > 1 else None}

    def check(self) -> dict:
        """Run once on the poisoned outputs and compare with the reference."""
        import torch
        try:
            self()
            torch.cuda.synchronize()
        except Exception as exc:
            raise device_error(exc) from None
        return self.verdict()

    def audit(self) -> None:
        """After a timed call: its outputs must be the reference's and its inputs untouched, else a `verify`
        error. (The timer calls this after calls it picks at random: a kernel that skips work on some timed calls,
        or computes only when a check could be looking, is caught.)"""
        v = self.verdict()
        if not v["passed"]:
            raise StageError("verify", f"at {v['label']}: a timed call did not compute its output: {v['message']}")

    def baselines(self, which: bool | tuple[str, ...] = True,
                  bench: bool = False) -> dict[str, Callable[[], object]]:
        """The baselines to time, each a call on this runner's inputs: `which` of the kernel's BASELINES (True:
        all), or of its BENCH_BASELINES too when `bench`, where they must be named."""
        functions = self.kernel.baseline_functions(bench)
        return {name: (lambda fn=functions[name]: call_with(fn, *self.inputs, **self.params))
                for name in baseline_names(self.kernel, which, bench)}


def _same_bits(a, b) -> bool:
    """Equal bit for bit (NaN included): the tensors' bytes compared."""
    import torch
    if a.shape != b.shape or a.dtype != b.dtype:
        return False
    return torch.equal(a.contiguous().view(-1).view(torch.uint8), b.contiguous().view(-1).view(torch.uint8))


def baseline_names(kernel: Kernel, which: bool | tuple[str, ...], bench: bool = False) -> list[str]:
    """The names MeasureOptions' `baselines` (and `bench_baselines`) pick: True, every one of the kernel's
    BASELINES; a tuple, those it names, of its BENCH_BASELINES too when `bench`."""
    return [n for n in kernel.baseline_functions(bench)
            if (which is True and n in kernel.baselines) or (isinstance(which, tuple) and n in which)]


def compile_stage(kernel: Kernel, config: Config, options: MeasureOptions,
                  progress: Progress = quiet) -> tuple[object, dict | None]:
    """The runnable kernel, and the full compile report if the options ask for one (its stages, lowering, nvcc and
    ptxas, reported in the first 30% of the measurement)."""
    if options.compile_report:
        built = build(kernel, config, options.arch, progress=lambda what, fraction: progress(what, 0.3 * fraction))
        return built.jit, built.result
    return parallel.build_jit(kernel, config, options.arch), None


def verify_stage(kernel: Kernel, config: Config, options: MeasureOptions, jit, progress: Progress) -> list[dict]:
    """The verdict at `config`'s own problem and, if the options ask, at each of the kernel's check problems (those
    compiled in parallel through TileLang's cache). Raises the StageError of a check problem that fails to compile
    or run."""
    problems = kernel.check_problems(config.problem) if options.check_shapes else [config.problem]
    others = [Config(p, config.dtype, config.tile) for p in problems if p != config.problem]
    if others:
        progress(f"compiling {len(others)} more shapes for verification", 0.3)
    errors = [done["error"] for done in parallel.compile_all(kernel, others, options.arch)]
    verdicts = []
    for i, (c, err) in enumerate(zip(others + [config], errors + [None])):
        progress(f"verifying {problem_label(c.problem)}", 0.4 + 0.3 * i / len(others + [config]))
        if err is not None:
            raise StageError(**{**err, "message": f"at {problem_label(c.problem)}: {err['message']}"})
        c_jit = jit if c is config else parallel.build_jit(kernel, c, options.arch)
        try:
            verdicts.append(Runner(kernel, c, c_jit, options.seed).check())
        except StageError as err:  # said where: a grader tells a hidden problem's failure apart by it
            err.message = f"at {problem_label(c.problem)}: {err.message}"
            err.args = (err.message,)
            raise
    return verdicts


def verification_failure(verification: list[dict]) -> StageError:
    """The first failing check: its shape and compare's message, which names the criterion that failed."""
    v = next(v for v in verification if not v["passed"])
    return StageError("verify", f"wrong result at {v['label']} ({json.dumps(v['shape'])}): {v['message']}")


def time_stage(kernel: Kernel, config: Config, options: MeasureOptions, jit, timer) -> dict[str, dict]:
    """The kernel and the chosen baselines, timed together, interleaved, on fresh inputs and outputs. Each timed
    call of the kernel starts from poisoned outputs; with `audit_timed`, calls picked at random are checked against
    the reference after they ran, and the inputs after the last."""
    runner = Runner(kernel, config, jit, options.seed)
    times = timer.time({"kernel": runner, **runner.baselines(options.baselines, options.bench_baselines)},
                       budget_ms=options.budget_ms, graph=options.graph, prepare={"kernel": runner.poison},
                       audit={"kernel": runner.audit} if options.audit_timed else None)
    changed = runner.changed_input()
    if changed is not None:
        raise StageError("verify", f"at {problem_label(config.problem)}: while timed, the kernel wrote its input "
                                   f"{changed}: a kernel may write its outputs only")
    return times


def measure(kernel: Kernel, config: Config, options: MeasureOptions, timer, compile_error: StageError | None = None,
            progress: Progress = quiet) -> Measurement:
    """Compile, verify and, only if every verdict passed, time one configuration. Never raises a StageError: a
    failure at any stage is the Measurement's `error`. `compile_error`: what a parallel precompile reported for
    this configuration, so that a configuration that failed there is not compiled again."""
    if compile_error is not None:
        return Measurement(config, error=compile_error)
    progress("compiling", 0.0)
    try:
        jit, report = compile_stage(kernel, config, options, progress)
    except StageError as err:
        return Measurement(config, error=err)
    try:
        verification = verify_stage(kernel, config, options, jit, progress)
    except StageError as err:
        return Measurement(config, compiled=True, error=err, build=report)
    except Exception as exc:
        return Measurement(config, compiled=True, error=unexpected_error(exc), build=report)
    if not all(v["passed"] for v in verification):
        return Measurement(config, True, verification, error=verification_failure(verification), build=report)
    progress("timing against the baselines" if options.baselines else "timing", 0.75)
    try:
        times = time_stage(kernel, config, options, jit, timer)
    except StageError as err:
        return Measurement(config, True, verification, error=err, build=report)
    except Exception as exc:  # the kernel or a baseline failed on the GPU: a refused launch, a fault
        return Measurement(config, True, verification, error=device_error(exc), build=report)
    return Measurement(config, True, verification, times, build=report)


MeasureFn = Callable[..., Measurement]  # measure's signature


def rates(kernel: Kernel, config: Config, median_ms: float, ceil: dict | None) -> dict:
    """TFLOP/s and GB/s at `median_ms`, and their share of this GPU's measured ceilings when given."""
    flops, nbytes = kernel.flops(config), kernel.bytes_moved(config)  # a user's kernel may not count its FLOPs
    tflops = flops / (median_ms * 1e9) if flops is not None else None
    gbps = nbytes / (median_ms * 1e6)
    out = {"tflops": tflops, "gbps": gbps}
    if ceil:
        mm = device.matmul_ceiling(ceil, config.dtype)
        out["percent_of_copy_bandwidth"] = 100 * gbps / ceil["copy_gbps"]
        out["percent_of_matmul_peak"] = 100 * tflops / mm if mm and tflops is not None else None
    return out


# -- the GPU a plan measures on -----------------------------------------------------------------------------------
class Measurer:
    """What a plan's measurements share: the options, one timer (its L2-flush buffer), this GPU's measured ceilings,
    the compile errors of the parallel precompile, and whether the CUDA context was lost (after which nothing more
    is measured in this process: each later configuration gets a DeviceError saying so).

    `Measurer.open` is the real one, on this GPU. The parts are arguments so that a plan's own logic (what it
    ranks, charts, counts as met) can be tested with another measurement function in place of `measure`."""

    def __init__(self, options: MeasureOptions, timer, ceilings: dict | None, measure: MeasureFn = measure,
                 compile_all: Callable[..., list[dict]] | None = None,
                 device_info: Callable[[], dict] | None = None):
        self.options, self.timer, self.ceilings = options, timer, ceilings
        self.measure_fn = measure
        self.compile_all = compile_all or parallel.compile_all
        self.device_info = device_info or device.info  # read when asked: the clocks of the moment
        self.compile_errors: dict[tuple[str, str], StageError] = {}
        self.identities: dict[tuple[str, str], str] = {}  # what each precompiled config runs (kernel_identity)
        self.lost_at: str | None = None

    @classmethod
    def open(cls, options: MeasureOptions, fresh_ceilings: bool = False) -> Measurer:
        """On this GPU (a `device` StageError without one); the ceilings cached per GPU unless `fresh_ceilings`."""
        from .timing import Timer
        device.require_gpu()
        timer = Timer()
        return cls(options, timer, device.measure_ceilings(timer) if fresh_ceilings else device.ceilings(timer))

    @staticmethod
    def _key(kernel: Kernel, config: Config) -> tuple[str, str]:
        return str(kernel.path), json.dumps(config.to_json(), sort_keys=True)

    def precompile(self, kernel: Kernel, configs: list[Config], workers: int | None = None,
                   on_done: Callable[[int, int], None] | None = None) -> list[StageError | None]:
        """Compile `configs` in parallel into TileLang's cache; a failure is remembered and becomes the error of that
        configuration's measurement, and what each compiled into is remembered for `same_kernel`."""
        done = self.compile_all(kernel, configs, self.options.arch, workers, on_done)
        errors = [StageError(**d["error"]) if d["error"] else None for d in done]
        for c, d, e in zip(configs, done, errors):
            if e is not None:
                self.compile_errors[self._key(kernel, c)] = e
            elif d.get("identity"):
                self.identities[self._key(kernel, c)] = d["identity"]
        return errors

    def same_kernel(self, kernel: Kernel, config: Config, others: list[Config]) -> int | None:
        """The index of the first of `others` that compiled into the very kernel `config` did (the same CUDA, the
        same launch), if the precompile saw both; else None."""
        mine = self.identities.get(self._key(kernel, config))
        if mine is None:
            return None
        return next((i for i, o in enumerate(others) if self.identities.get(self._key(kernel, o)) == mine), None)

    def measure(self, kernel: Kernel, config: Config, progress: Progress = quiet,
                options: MeasureOptions | None = None) -> Measurement:
        """`options`: this measurement's own (a bench row timed as CUDA-graph replays), else the plan's."""
        if self.lost_at is not None:
            return Measurement(config, error=DeviceError(
                f"not measured: the CUDA context was lost at {self.lost_at}; start a new job", context_lost=True))
        m = self.measure_fn(kernel, config, options or self.options, self.timer,
                            self.compile_errors.get(self._key(kernel, config)), progress)
        if m.context_lost:
            self.lost_at = f"{kernel.name} {problem_label(config.problem)}"
        import torch
        torch.cuda.empty_cache()  # each configuration starts from the same free memory (a no-op before CUDA starts)
        return m
