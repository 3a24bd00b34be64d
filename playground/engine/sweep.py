"""Latency and throughput against problem size, for the kernel and each baseline (the data of a size chart)."""
from __future__ import annotations

from typing import Callable

from . import device, parallel_compile as parallel
from .catalogue import Config, Kernel
from .compile import resolve_arch
from .errors import StageError
from .run import Runner, device_error, new_seed, problem_label, rates
from .timing import Timer


def sweep_problems(kernel: Kernel, config: Config) -> list[dict]:
    """The kernel file's SWEEP sizes if it has them, else its presets; each merged over the current problem."""
    sizes = getattr(kernel.module, "SWEEP", None) or list(kernel.presets.values())
    out = []
    for s in sizes:
        p = {**config.problem, **s}
        if p not in out:
            out.append(p)
    return out


def sweep(kernel: Kernel, config: Config, arch: str | None = None, problems: list[dict] | None = None,
          budget_ms: float = 500.0, progress: Callable[[str, float], None] | None = None) -> dict:
    device.require_gpu()
    arch = resolve_arch(arch)
    progress = progress or (lambda *_: None)
    configs = [Config(p, config.dtype, config.tile) for p in (problems or sweep_problems(kernel, config))]
    progress(f"compiling {len(configs)} sizes", 0.0)
    errors = parallel.compile_all(kernel, configs, arch)
    timer = Timer()
    ceil = device.ceilings(timer)
    seed = new_seed()
    rows = []
    for i, (c, err) in enumerate(zip(configs, errors)):
        progress(f"timing {problem_label(c.problem)}", 0.3 + 0.7 * i / len(configs))
        row = {"label": problem_label(c.problem), "problem": c.problem, "flops": kernel.flops(c),
               "bytes": kernel.bytes_moved(c), "error": None}
        if err is not None:
            row["error"] = f"{err['stage']}: {err['message']}"
            rows.append(row)
            continue
        try:
            runner = Runner(kernel, c, parallel.build_jit(kernel, c, arch), seed)
            verdict = runner.check()
            row["passed"], row["rel_error"] = verdict["passed"], verdict["rel_error"]
            times = timer.time({"kernel": runner, **runner.baselines()}, budget_ms=budget_ms)
        except StageError as e:
            row["error"] = f"{e.stage}: {e.message}"
            rows.append(row)
            continue
        except Exception as exc:
            row["error"] = device_error(exc).message
            rows.append(row)
            continue
        row["series"] = {name: {"median_ms": t["median_ms"], "p20_ms": t["p20_ms"], "p80_ms": t["p80_ms"],
                                **rates(kernel, c, t["median_ms"], ceil)}
                         for name, t in times.items()}
        rows.append(row)
    ok = any("series" in r for r in rows)
    return {"ok": ok, "kernel": kernel.name, "config": config.to_json(), "rows": rows, "ceilings": ceil,
            "device": device.info(),
            "error": None if ok else StageError("device", "no size could be timed").to_json()}
