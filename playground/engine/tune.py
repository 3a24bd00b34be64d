"""Autotuning: search a kernel's tile space on this GPU.

Every candidate is compiled first, in parallel on the CPU cores; then, one at a time on the GPU, each that compiled
is measured (measure.py): verified at the problem being tuned (a wrong kernel may not win, however fast) and, only
if right, timed. The table keeps every candidate with why it lost; only timed candidates, all verified, are ranked.
A candidate that compiled into the very kernel of one measured before it (the same CUDA and launch: a parameter the
schedule ignores at this size) is not run again; its line carries that one's result and says which it is.
"""
from __future__ import annotations

import itertools
import random
from dataclasses import dataclass
from typing import Callable

from .compile import resolve_arch
from .errors import StageError
from .kernel import Config, Kernel, problem_label
from .measure import Measurement, MeasureOptions, Measurer, new_seed, rates

Progress = Callable[[str, float, dict | None], None]  # (what, fraction done, the row just finished)


DEFAULT_MAX_CONFIGS = 32  # candidates a tuning run measures unless asked otherwise


def space_size(kernel: Kernel, config: Config) -> int:
    """How many candidates the whole search would have."""
    return len(candidates(kernel, config, None))


def candidates(kernel: Kernel, config: Config, max_configs: int | None = None, seed: int = 0) -> list[Config]:
    """The space's configurations (the current one first), sampled down to `max_configs` if the space is larger."""
    space = {k: v for k, v in kernel.space.items() if k in config.tile}
    names = list(space)
    listed = kernel.tune_configs()  # an @autotune's configs: those, not every combination of their values
    every = ([{k: v for k, v in c.items() if k in names} for c in listed] if listed is not None
             else [dict(zip(names, values)) for values in itertools.product(*space.values())])
    current = {k: config.tile[k] for k in names}
    rest = [c for c in every if c != current]
    if max_configs is not None and len(rest) > max_configs - 1:
        rest = random.Random(seed).sample(rest, max(0, max_configs - 1))
    # A candidate the kernel refuses beside an option the engine picked (gemm: split K beside the rule's multicast)
    # is tried with that option at its default; one it refuses beside what the user set is left out.
    tiles = (kernel.without_refused_options({**config.tile, **c}, keep=config.set_by_user) for c in [current] + rest)
    return [Config(config.problem, config.dtype, tile) for tile in tiles if tile is not None]


@dataclass
class TuneResult:
    kernel: str
    config: Config
    rows: list[dict]
    best: dict | None
    device: dict | None
    error: StageError | None = None  # why there is no best

    @property
    def table(self):
        import pandas as pd
        return pd.DataFrame(self.rows)

    def to_json(self) -> dict:
        ok = self.best is not None
        return {"ok": ok, "kernel": self.kernel, "config": self.config.to_json(), "table": self.rows,
                "best": self.best, "device": self.device,
                "error": None if ok else (self.error or StageError("verify", NONE_VERIFIED)).to_json()}


NONE_VERIFIED = "no candidate compiled, ran and verified"


def failure(measurements: list[Measurement]) -> StageError:
    """Why no candidate won, told by the stage that stopped them all where it was one and the same (every one
    failed to compile: the first's error, with its line; the GPU was lost), else that none verified."""
    errors = [m.error for m in measurements]
    stages = {e.stage for e in errors if e is not None}
    if errors and None not in errors and len(stages) == 1 and stages != {"verify"}:
        first = errors[0]
        return StageError(first.stage, f"no candidate could be measured; the first: {first.message}", first.line,
                          first.log)
    return StageError("verify", NONE_VERIFIED)


def tune_row(kernel: Kernel, m: Measurement) -> dict:
    """One line of the table: the candidate's tile, how far it got, its time if it was timed, why it lost if not."""
    row = {**{k: m.config.tile[k] for k in kernel.space if k in m.config.tile}, "compiled": m.compiled,
           "verified": m.verified, "median_ms": None, "tflops": None, "gbps": None, "rel_error": m.rel_error,
           "error": m.error_text}
    if m.timed:
        row["median_ms"] = m.times["kernel"]["median_ms"]
        row.update({k: v for k, v in rates(kernel, m.config, row["median_ms"], None).items()
                    if k in ("tflops", "gbps")})
    return row


def twin_row(kernel: Kernel, config: Config, measured_row: dict, twin: Config) -> dict:
    """The line of a candidate that compiled into the very kernel of one measured before it (a parameter this
    schedule ignores at this size): that one's result, and which it is, so that the table shows the parameter
    made no difference instead of timing the same kernel twice."""
    differs = [k for k in kernel.space if k in config.tile and config.tile[k] != twin.tile[k]]
    return {**measured_row, **{k: config.tile[k] for k in kernel.space if k in config.tile},
            "same_kernel_as": ", ".join(f"{k}={twin.tile[k]}" for k in differs)}


def tune(kernel: Kernel, config: Config, arch: str | None = None, max_configs: int | None = DEFAULT_MAX_CONFIGS,
         budget_ms: float = 300.0, workers: int | None = None, progress: Progress | None = None,
         open_measurer: Callable[[MeasureOptions], Measurer] = Measurer.open) -> TuneResult:
    progress = progress or (lambda *_: None)
    options = MeasureOptions(resolve_arch(arch), new_seed(), baselines=False, check_shapes=False,
                             budget_ms=budget_ms)
    measurer = open_measurer(options)
    configs = candidates(kernel, config, max_configs)
    n = len(configs)
    progress(f"compiling {n} candidates", 0.0, None)
    measurer.precompile(kernel, configs, workers,
                        on_done=lambda i, total: progress(f"compiled {i}/{total}", 0.5 * i / total, None))
    rows = []
    measurements, measured_rows = [], []  # of the candidates run on the GPU, in order
    for i, c in enumerate(configs):
        j = measurer.same_kernel(kernel, c, [m.config for m in measurements])
        if j is not None:  # the same CUDA as one measured already: its result, not a second run of the GPU
            rows.append(twin_row(kernel, c, measured_rows[j], measurements[j].config))
        else:
            measurements.append(measurer.measure(kernel, c))
            measured_rows.append(tune_row(kernel, measurements[-1]))
            rows.append(measured_rows[-1])
        progress(f"measured {i + 1}/{n}", 0.5 + 0.5 * (i + 1) / n, rows[-1])
    timed = [(m, row) for m, row in zip(measurements, measured_rows) if m.timed]  # timed implies verified
    if not timed:
        return TuneResult(kernel.name, config, rows, None, measurer.device_info(), failure(measurements))
    best, best_row = min(timed, key=lambda mr: mr[0].times["kernel"]["median_ms"])
    best_tile = {k: best.config.tile[k] for k in kernel.space if k in best.config.tile}
    info = measurer.device_info()
    return TuneResult(kernel.name, config, rows,
                      {"tile": best_tile, "median_ms": best_row["median_ms"], "tflops": best_row["tflops"],
                       "gbps": best_row["gbps"],
                       "stored": store_best(kernel, config, best_tile, best_row["median_ms"], info, n)}, info)


def store_best(kernel: Kernel, config: Config, tile: dict, median_ms: float, info: dict | None,
               searched: int | None = None) -> dict:
    """Keep a shipped kernel's best verified tile (the SPACE values searched) in the user's table of tuned configs,
    so that the next request for this problem, or the nearest one of its shape class, on this GPU model starts from
    it (config_choice.py). Kept only what a search found that everyone may start from: a shipped kernel unedited (an
    edited copy or one's own kernel is not the kernel the table's configs are for), from the engine's own starting
    config (no value set by the request: the entry holds the searched values only, and an option set by hand would
    not travel with them), over `searched` candidates, at least the default search's (a run of one candidate is
    a measurement, not a search). On a server, whose table a class shares, the job layer then keeps the run in
    the server's table only if it beat the one stored for that problem (jobs/runner.py, `remember(keep_faster)`).
    Says where it went, or why it was not stored."""
    from . import config_choice
    from .kernel import builtin_names, builtin_path
    if kernel.name not in builtin_names() or kernel.path != builtin_path(kernel.name).resolve():
        return {"ok": False, "why": "only the shipped kernels' tuning runs are kept"}
    if config.set_by_user:
        return {"ok": False, "why": f"not kept: {', '.join(config.set_by_user)} set by you (a run kept for others "
                                    "starts from the engine's own config)"}
    if searched is not None and searched < min(space_size(kernel, config), DEFAULT_MAX_CONFIGS):
        return {"ok": False, "why": f"not kept: {searched} candidates are fewer than a search measures "
                                    f"({DEFAULT_MAX_CONFIGS}, or the whole space if smaller)"}
    # named as the lookups name it (NVML), so that the next request on this GPU finds it
    gpu = config_choice.visible_gpu() or (info or {}).get("name") or config_choice.gpu_model()
    # What was searched (SPACE): not an OPTION such as the epilogue's activation, a choice of what to compute.
    try:
        path = config_choice.remember(kernel.name, dict(config.problem), config.dtype, tile, gpu, median_ms)
    except OSError as exc:
        return {"ok": False, "why": f"the table of tuned configs cannot be written: {exc}"}
    # Where it went is named by the table's file name only: a server's folders are nobody's business.
    return {"ok": True, "table": path.name, "gpu": gpu, "kernel": kernel.name, "problem": dict(config.problem),
            "dtype": config.dtype, "tile": tile, "median_ms": median_ms,
            "tuned_for": f"{problem_label(config.problem)} on {gpu}"}
