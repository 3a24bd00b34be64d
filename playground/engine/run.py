"""The run plan: one configuration, compiled with its full report, verified on its own problem and on the kernel's
check shapes, then (only if every check passed) timed against all its baselines. The work is measure.py's."""
from __future__ import annotations

from typing import Callable

from .compile import resolve_arch
from .kernel import Config, Kernel
from .measure import MeasureOptions, Measurer, Progress, new_seed, quiet, rates


def run(kernel: Kernel, config: Config, arch: str | None = None, seed: int | None = None, graph: bool = False,
        budget_ms: float = 2000.0, progress: Progress = quiet,
        open_measurer: Callable[[MeasureOptions], Measurer] = Measurer.open) -> dict:
    """The compile result plus verification, timing and baselines. A wrong result is an answer (ok False, the
    verdicts and a `verify` error); a failure before or after verification raises its StageError."""
    options = MeasureOptions(resolve_arch(arch), new_seed() if seed is None else seed, baselines=True,
                             check_shapes=True, budget_ms=budget_ms, graph=graph, compile_report=True)
    measurer = open_measurer(options)
    m = measurer.measure(kernel, config, progress)
    if m.error is not None and m.error.stage != "verify":
        raise m.error
    result = {**(m.build or {}), "seed": options.seed, "verification": m.verification,
              # compared with a reference; a kernel without one is run and timed but never called verified
              "verified": m.verified and kernel.has_reference, "verification_note": kernel.verification_note,
              "device": measurer.device_info()}
    if not m.timed:
        result.update(ok=False, error=m.error.to_json())
        return result
    times = dict(m.times)
    kernel_time = times.pop("kernel")
    ceil = measurer.ceilings
    result["timing"] = {**kernel_time, "mode": "cuda-graph" if graph else "events, L2 flushed"}
    result.update(rates(kernel, config, kernel_time["median_ms"], ceil))
    result["baselines"] = {name: {**t, **rates(kernel, config, t["median_ms"], ceil),
                                  "speedup": t["median_ms"] / kernel_time["median_ms"]}
                           for name, t in times.items()}
    result["ceilings"] = ceil
    result["flops"], result["bytes"] = kernel.flops(config), kernel.bytes_moved(config)
    progress("done", 1.0)
    return result
