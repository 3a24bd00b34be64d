"""Latency and throughput against problem size, for the kernel and each baseline (the data of a size chart).

Each size is measured the one way (measure.py): compiled (all sizes first, in parallel), verified at that size and,
only if right, timed with every baseline. A size that fails verification has no series: it is never charted.
"""
from __future__ import annotations

from typing import Callable

from .compile import resolve_arch
from .errors import StageError
from .kernel import Config, Kernel, problem_label
from .measure import Measurement, MeasureOptions, Measurer, new_seed, rates


def sweep_problems(kernel: Kernel, config: Config) -> list[dict]:
    """The kernel file's SWEEP sizes if it has them, else its presets; each merged over the current problem."""
    sizes = getattr(kernel.module, "SWEEP", None) or list(kernel.presets.values())
    out = []
    for s in sizes:
        p = {**config.problem, **s}
        if p not in out:
            out.append(p)
    return out


def sweep_row(kernel: Kernel, m: Measurement, ceil: dict | None) -> dict:
    """One size: its verdict if it got that far, its series (kernel and baselines) only if it was timed."""
    c = m.config
    row = {"label": problem_label(c.problem), "problem": c.problem, "flops": kernel.flops(c),
           "bytes": kernel.bytes_moved(c), "error": m.error_text}
    if m.verification:
        row["passed"], row["rel_error"] = m.verified, m.rel_error
    if m.timed:
        row["series"] = {name: {"median_ms": t["median_ms"], "p20_ms": t["p20_ms"], "p80_ms": t["p80_ms"],
                                **rates(kernel, c, t["median_ms"], ceil)}
                         for name, t in m.times.items()}
    return row


def sweep(kernel: Kernel, config: Config, arch: str | None = None, problems: list[dict] | None = None,
          budget_ms: float = 500.0, progress: Callable[[str, float], None] | None = None,
          open_measurer: Callable[[MeasureOptions], Measurer] = Measurer.open) -> dict:
    progress = progress or (lambda *_: None)
    options = MeasureOptions(resolve_arch(arch), new_seed(), baselines=True, check_shapes=False,
                             budget_ms=budget_ms)
    measurer = open_measurer(options)
    configs = [Config(p, config.dtype, config.tile) for p in (problems or sweep_problems(kernel, config))]
    progress(f"compiling {len(configs)} sizes", 0.0)
    measurer.precompile(kernel, configs)
    measurements, rows = [], []
    for i, c in enumerate(configs):
        progress(f"measuring {problem_label(c.problem)}", 0.3 + 0.7 * i / len(configs))
        measurements.append(measurer.measure(kernel, c))
        rows.append(sweep_row(kernel, measurements[-1], measurer.ceilings))
    ok = any(m.timed for m in measurements)
    error = None
    if not ok:
        first = next((m for m in measurements if m.error is not None), None)
        error = StageError(first.error.stage if first else "device", "no size could be timed" + (
            f"; at {problem_label(first.config.problem)}: {first.error.message}" if first else ""))
    return {"ok": ok, "kernel": kernel.name, "config": config.to_json(), "rows": rows, "ceilings": measurer.ceilings,
            "device": measurer.device_info(), "error": error.to_json() if error else None}
