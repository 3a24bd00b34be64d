"""Autotuning: search a kernel's tile space on this GPU.

Every candidate is compiled first, in parallel on the CPU cores; then, one at a time on the GPU, each that compiled
is verified (a wrong kernel may not win, however fast) and timed. The table keeps every candidate with why it lost.
"""
from __future__ import annotations

import itertools
import random
from dataclasses import dataclass
from typing import Callable

from . import device, parallel_compile as parallel
from .catalogue import Config, Kernel
from .compile import resolve_arch
from .errors import StageError
from .run import Runner, device_error, new_seed, rates
from .timing import Timer

Progress = Callable[[str, float, dict | None], None]  # (what, fraction done, the row just finished)


def candidates(kernel: Kernel, config: Config, max_configs: int | None = None, seed: int = 0) -> list[Config]:
    """The space's configurations (the current one first), sampled down to `max_configs` if the space is larger."""
    space = {k: v for k, v in kernel.space.items() if k in config.tile}
    names = list(space)
    every = [dict(zip(names, values)) for values in itertools.product(*space.values())]
    current = {k: config.tile[k] for k in names}
    rest = [c for c in every if c != current]
    if max_configs is not None and len(rest) > max_configs - 1:
        rest = random.Random(seed).sample(rest, max(0, max_configs - 1))
    return [Config(config.problem, config.dtype, {**config.tile, **c}) for c in [current] + rest]


@dataclass
class TuneResult:
    kernel: str
    config: Config
    rows: list[dict]
    best: dict | None
    device: dict | None

    @property
    def table(self):
        import pandas as pd
        return pd.DataFrame(self.rows)

    def to_json(self) -> dict:
        ok = self.best is not None
        return {"ok": ok, "kernel": self.kernel, "config": self.config.to_json(), "table": self.rows,
                "best": self.best, "device": self.device,
                "error": None if ok else StageError("verify", "no candidate compiled, ran and verified").to_json()}


def tune(kernel: Kernel, config: Config, arch: str | None = None, max_configs: int | None = 32,
         budget_ms: float = 300.0, workers: int | None = None, progress: Progress | None = None) -> TuneResult:
    device.require_gpu()
    arch = resolve_arch(arch)
    progress = progress or (lambda *_: None)
    configs = candidates(kernel, config, max_configs)
    n = len(configs)
    progress(f"compiling {n} candidates", 0.0, None)
    errors = parallel.compile_all(kernel, configs, arch, workers,
                                  on_done=lambda i, total: progress(f"compiled {i}/{total}", 0.5 * i / total, None))
    timer = Timer()
    ceil = device.ceilings(timer)
    seed = new_seed()
    rows = []
    for i, (c, err) in enumerate(zip(configs, errors)):
        row = {**{k: c.tile[k] for k in kernel.space if k in c.tile}, "compiled": err is None, "verified": False,
               "median_ms": None, "tflops": None, "gbps": None, "rel_error": None, "error": None}
        if err is not None:
            row["error"] = f"{err['stage']}: {err['message']}"
        else:
            try:
                runner = Runner(kernel, c, parallel.build_jit(kernel, c, arch), seed)
                verdict = runner.check()
                row["rel_error"] = verdict["rel_error"]
                if verdict["passed"]:
                    row["verified"] = True
                    t = timer.time({"kernel": runner}, budget_ms=budget_ms, min_samples=10)["kernel"]
                    row["median_ms"] = t["median_ms"]
                    row.update({k: v for k, v in rates(kernel, c, t["median_ms"], ceil).items()
                                if k in ("tflops", "gbps")})
                else:
                    row["error"] = f"verify: {verdict['message']}"
            except StageError as e:
                row["error"] = f"{e.stage}: {e.message}"
                if e.stage == "device" and "context is lost" in e.message:
                    rows.append(row)
                    break  # nothing more can run in this process
            except Exception as exc:  # a launch failure (too much shared memory, ...) loses this candidate only
                e = device_error(exc)
                row["error"] = f"{e.stage}: {e.message}"
        rows.append(row)
        progress(f"timed {i + 1}/{n}", 0.5 + 0.5 * (i + 1) / n, row)
    timed = [r for r in rows if r["median_ms"] is not None]
    best = min(timed, key=lambda r: r["median_ms"]) if timed else None
    best_cfg = {k: best[k] for k in kernel.space if k in best} if best else None
    return TuneResult(kernel.name, config, rows,
                      {"tile": best_cfg, "median_ms": best["median_ms"], "tflops": best["tflops"],
                       "gbps": best["gbps"]} if best else None, device.info())
