"""The run step: verify a compiled kernel on several shapes, then time it against its baselines on this GPU."""
from __future__ import annotations

import os
import re
from typing import Callable

from . import device, parallel_compile as parallel
from .catalogue import Config, Kernel, call_with
from .compile import build, resolve_arch
from .errors import StageError, clip, format_exception
from .timing import Timer
from .verify import compare, poisoned, torch_dtype

Progress = Callable[[str, float], None]  # (what is happening, fraction done)


def _quiet(_: str, __: float) -> None:
    pass


def problem_label(problem: dict) -> str:
    """"4096×4096×4096", "8×32×4096×128 causal": the numbers in the file's order, then the switches that are on."""
    numbers = [str(v) for v in problem.values() if isinstance(v, int) and not isinstance(v, bool)]
    flags = [k for k, v in problem.items() if v is True]
    others = [str(v) for v in problem.values() if isinstance(v, str)]
    return " ".join(["×".join(numbers)] + flags + others)


def device_error(exc: BaseException) -> StageError:
    text = str(exc)
    cuda = re.search(r"(CUDA error[^\n]*|an illegal memory access[^\n]*|misaligned address[^\n]*|"
                     r"out of memory[^\n]*|unspecified launch failure[^\n]*)", text, re.I)
    message = cuda.group(1) if cuda else f"{type(exc).__name__}: {text.splitlines()[0] if text else ''}"
    if "out of memory" in message.lower():
        return StageError("device", f"the GPU ran out of memory: {message}", None, clip(format_exception(exc)))
    lost = bool(cuda)
    return StageError("device", f"the kernel failed on the GPU: {message}"
                      + (" (the CUDA context is lost; start a new job)" if lost else ""), None,
                      clip(format_exception(exc)))


def new_seed() -> int:
    return int.from_bytes(os.urandom(4), "little")


class Runner:
    """Inputs, poisoned outputs and the call of one compiled kernel at one problem size."""

    def __init__(self, kernel: Kernel, config: Config, jit, seed: int):
        import torch
        self.kernel, self.config, self.jit = kernel, config, jit
        # What the reference and the baselines may depend on: the problem, the dtype and the kernel's OPTIONS
        # (an epilogue's activation, say), never its tile sizes.
        self.params = {**config.problem, **{k: v for k, v in config.tile.items() if k in kernel.options},
                       "dtype": config.dtype}
        gen = torch.Generator(device="cuda").manual_seed(seed)
        made = call_with(kernel.module.make_inputs, **{**self.params, "dtype": torch_dtype(config.dtype)},
                         device="cuda", generator=gen)
        self.inputs = tuple(made) if isinstance(made, (tuple, list)) else (made,)
        func = jit.prim_func
        params = [func.buffer_map[p] for p in func.params if p in func.buffer_map]
        if len(params) <= len(self.inputs):
            raise StageError("definition", f"make_inputs returned {len(self.inputs)} tensors but the kernel has "
                                           f"{len(params)} buffers; the buffers after the inputs are the outputs")
        self.outputs = [poisoned([int(s) for s in b.shape], torch_dtype(str(b.dtype)), "cuda")
                        for b in params[len(self.inputs):]]

    def __call__(self):
        self.jit(*self.inputs, *self.outputs)

    def check(self) -> dict:
        import torch
        try:
            self()
            torch.cuda.synchronize()
        except Exception as exc:
            raise device_error(exc) from None
        ref = call_with(self.kernel.module.reference, *self.inputs, **self.params)
        refs = tuple(ref) if isinstance(ref, (tuple, list)) else (ref,)
        if len(refs) != len(self.outputs):
            raise StageError("definition", f"reference returned {len(refs)} tensors for {len(self.outputs)} outputs")
        verdicts = [compare(o, r, str(o.dtype).removeprefix("torch.")) for o, r in zip(self.outputs, refs)]
        worst = max(verdicts, key=lambda v: (not v["passed"], v["rel_error"] or 0))
        return {"shape": self.config.problem, "label": problem_label(self.config.problem), **worst,
                "outputs": verdicts if len(verdicts) > 1 else None}

    def baselines(self) -> dict[str, Callable[[], object]]:
        return {name: (lambda fn=fn: call_with(fn, *self.inputs, **self.params))
                for name, fn in self.kernel.baselines.items()}


def rates(kernel: Kernel, config: Config, median_ms: float, ceil: dict | None) -> dict:
    flops, nbytes = kernel.flops(config), kernel.bytes_moved(config)
    tflops = flops / (median_ms * 1e9)
    gbps = nbytes / (median_ms * 1e6)
    out = {"tflops": tflops, "gbps": gbps}
    if ceil:
        mm = device.matmul_ceiling(ceil, config.dtype)
        out["percent_of_copy_bandwidth"] = 100 * gbps / ceil["copy_gbps"]
        out["percent_of_matmul_peak"] = 100 * tflops / mm if mm else None
    return out


def verify_all(kernel: Kernel, config: Config, arch: str, main_jit, seed: int, progress: Progress) -> list[dict]:
    """Verify on every check problem (compiled in parallel through TileLang's cache) and on `config`'s own."""
    problems = kernel.check_problems(config.problem)
    others = [Config(p, config.dtype, config.tile) for p in problems if p != config.problem]
    progress(f"compiling {len(others)} more shapes for verification", 0.3)
    errors = parallel.compile_all(kernel, others, arch)
    results = []
    for i, (c, err) in enumerate(zip(others + [config], errors + [None])):
        progress(f"verifying {problem_label(c.problem)}", 0.4 + 0.3 * i / len(problems))
        if err is not None:
            raise StageError(**{**err, "message": f"at {problem_label(c.problem)}: {err['message']}"})
        jit = main_jit if c is config else parallel.build_jit(kernel, c, arch)
        results.append(Runner(kernel, c, jit, seed).check())
    return results


def run(kernel: Kernel, config: Config, arch: str | None = None, seed: int | None = None, graph: bool = False,
        budget_ms: float = 2000.0, progress: Progress = _quiet) -> dict:
    """Compile, verify and time. The result is the compile result plus verification, timing and baselines."""
    device.require_gpu()
    arch = resolve_arch(arch)
    seed = new_seed() if seed is None else seed
    progress("compiling", 0.0)
    built = build(kernel, config, arch)
    result = {**built.result, "seed": seed}
    verification = verify_all(kernel, config, arch, built.jit, seed, progress)
    result["verification"] = verification
    failed = [v for v in verification if not v["passed"]]
    result["device"] = device.info()
    if failed:
        v = failed[0]
        where = f" first at index {v['first_mismatches'][0]}" if v["first_mismatches"] else ""
        result.update(ok=False, error=StageError(
            "verify", f"wrong result at {v['label']}: {v['message']}; {v['mismatches']} of {v['elements']} elements "
                      f"differ{where}").to_json())
        return result
    progress("timing against the baselines", 0.75)
    try:
        timer = Timer()
        runner = Runner(kernel, config, built.jit, seed)
        times = timer.time({"kernel": runner, **runner.baselines()}, budget_ms=budget_ms, graph=graph)
        ceil = device.ceilings(timer)
    except StageError:
        raise
    except Exception as exc:
        raise device_error(exc) from None
    kernel_time = times.pop("kernel")
    result["timing"] = {**kernel_time, "mode": "cuda-graph" if graph else "events, L2 flushed"}
    result.update(rates(kernel, config, kernel_time["median_ms"], ceil))
    result["baselines"] = {name: {**t, **rates(kernel, config, t["median_ms"], ceil),
                                  "speedup": t["median_ms"] / kernel_time["median_ms"]}
                           for name, t in times.items()}
    result["ceilings"] = ceil
    result["flops"], result["bytes"] = kernel.flops(config), kernel.bytes_moved(config)
    progress("done", 1.0)
    return result
