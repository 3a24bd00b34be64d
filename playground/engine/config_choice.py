"""Which tile config a problem gets when the request does not set one, and why.

A student changes the sizes first, so the config the engine picks by itself must suit any size, not only the
presets. For the tile parameters a request leaves out, the sources are tried in this order, each one's values laid
over the next one's:

    "user"     the values the request sets: always win
    "preset"   the problem is exactly a preset's that carries a config tuned for that size (kernels/<name>.py PRESETS)
    "table"    the nearest tuned config of the same shape class on this GPU model: the user's own tuning runs
               (`tune` stores its best verified config, `remember`) and the table shipped beside the kernels
               (kernels/tuned/<gpu>.json); reported as "tuned for 4096×4096 on NVIDIA H200"
    "rule"     the kernel file's `pick_config(problem, dtype)`: a few lines, each saying why
    "default"  the factory's defaults

(A user's own tuning run at exactly a preset's size beats the preset's config: it was measured on this GPU.) The
user's runs are kept in `tuned-configs.json` in the data folder (settings.data_dir).

Nearest: the distance between two problems is the Euclidean distance of their sizes in log2 (so 2048 is as far from
4096 as 4096 from 8192), taken only between problems of the same shape class (the kernel file's
`shape_class(problem, dtype)`: long rows or short; head dim, causal or not, and the schedule the rule runs it on;
else the problem's switches).
A tuned config is reused up to `MAX_DISTANCE` away; further, what it was tuned for says less than the rule's reasons.

Without a visible GPU (a compile-only server, a compile job) the tables of `REFERENCE_GPU` are read: the GPU the
kernels' defaults are written for, as the factory's `num_sms` is.
"""
from __future__ import annotations

import contextlib
import json
import math
import os
import re
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

TUNED_DIR = Path(__file__).resolve().parents[2] / "kernels" / "tuned"
USER_TABLE = "tuned-configs.json"  # in the data folder (settings.data_dir)
REFERENCE_GPU = "NVIDIA H200"
MAX_DISTANCE = 3.0  # log2 units: one size 8× off, or three sizes each about 2× off
SOURCES = ("user", "preset", "table", "rule", "default")


@dataclass(frozen=True)
class Choice:
    """The tile parameters the engine picked for what the request left out, and where they came from."""
    tile: dict[str, Any]
    picked_by: str                   # "preset", "table", "rule" or "default"
    tuned_at: dict | None = None     # for "table" and "preset": the problem the config was tuned for ...
    gpu: str | None = None           # ... and on which GPU model (the Config says "4096×32768 on NVIDIA H200")


# -- the GPU model ------------------------------------------------------------------------------------------------
def visible_gpu() -> str | None:
    """The name of the first GPU this process can see (NVML, no CUDA context), or None."""
    from ..settings import current
    if current().no_gpu:
        return None
    from . import gpus
    try:
        return gpus.first_gpu_name()
    except Exception:  # no driver, no NVML: a compile-only machine
        return None


def gpu_model() -> str:
    """The GPU model whose tuned configs apply here: the GPU present, else REFERENCE_GPU."""
    return visible_gpu() or REFERENCE_GPU


def table_file_name(gpu: str) -> str:
    """"NVIDIA H200" -> "h200.json": the model without the vendor, lower case, one word."""
    model = re.sub(r"^nvidia\s+", "", gpu.strip(), flags=re.I)
    return re.sub(r"[^a-z0-9]+", "-", model.lower()).strip("-") + ".json"


# -- distance -------------------------------------------------------------------------------------------------------
def sizes(problem: dict) -> dict[str, int]:
    return {k: v for k, v in problem.items() if isinstance(v, int) and not isinstance(v, bool) and v > 0}


def switches(problem: dict) -> dict:
    """The problem's values that are not sizes: causal, ..."""
    numbers = sizes(problem)
    return {k: v for k, v in problem.items() if k not in numbers}


def distance(a: dict, b: dict) -> float:
    """Euclidean distance of the two problems' sizes in log2; infinite if they do not have the same sizes."""
    sa, sb = sizes(a), sizes(b)
    if set(sa) != set(sb):
        return math.inf
    return math.sqrt(sum((math.log2(sa[k]) - math.log2(sb[k])) ** 2 for k in sa))


def shape_class(kernel, problem: dict, dtype: str) -> str:
    """The kernel file's `shape_class(problem, dtype)` if it has one, else the problem's switches (causal, ...)."""
    declared = kernel.declared_shape_class(problem, dtype)
    if declared is not None:
        return declared
    return ", ".join(f"{k}={v}" for k, v in sorted(switches(problem).items()))


# -- the tables ------------------------------------------------------------------------------------------------------
def _read(path: Path) -> list[dict]:
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return []
    entries = data.get("entries") if isinstance(data, dict) else None
    return [e for e in entries or [] if isinstance(e, dict) and isinstance(e.get("problem"), dict)
            and isinstance(e.get("tile"), dict) and isinstance(e.get("kernel"), str)]


def shipped_entries(gpu: str) -> list[dict]:
    """The table shipped beside the kernels for this GPU model (kernels/tuned/<model>.json), each entry with its gpu."""
    path = TUNED_DIR / table_file_name(gpu)
    return [{**e, "gpu": gpu, "origin": "shipped"} for e in _read(path)]


def user_table_path() -> Path:
    from ..settings import current
    return Path(current().data_dir) / USER_TABLE


def user_entries(gpu: str) -> list[dict]:
    """The user's own tuning runs on this GPU model."""
    return [{**e, "origin": "user"} for e in _read(user_table_path()) if e.get("gpu") == gpu]


def nearest(kernel, problem: dict, dtype: str, gpu: str | None = None) -> tuple[dict, float] | None:
    """The tuned entry of the same kernel and shape class on this GPU model nearest to `problem`, with its distance,
    if one lies within MAX_DISTANCE. Only entries whose elements are as wide as `dtype`'s count (a bfloat16 run
    serves float16, a float32 one does not: its tile was chosen for twice the bytes). Of two as near, one of the
    very dtype wins, then the user's own run over the shipped table."""
    gpu = gpu or gpu_model()
    wanted = shape_class(kernel, problem, dtype)
    # An entry written before the kernel had one of its problem parameters (flash_attention's group_size) was
    # tuned at that parameter's default.
    defaults = {n: v for n, v in kernel.factory_defaults.items() if n in problem}
    best = None
    for entry in user_entries(gpu) + shipped_entries(gpu):
        p = entry["problem"] = {**defaults, **entry["problem"]}
        if entry["kernel"] != kernel.name or switches(p) != switches(problem):  # causal or not, ...
            continue
        if shape_class(kernel, p, entry.get("dtype", dtype)) != wanted:
            continue
        if element_bits(entry.get("dtype") or dtype) != element_bits(dtype):
            continue
        d = distance(problem, p)
        rank = (d, (entry.get("dtype") or dtype) != dtype)
        if d <= MAX_DISTANCE and (best is None or rank < best_rank):
            best, best_rank = (entry, d), rank
    return best


def element_bits(dtype: str) -> int | None:
    """The width of a dtype's elements, from its name: float16 and bfloat16 16, float8_e4m3fn 8, float32 32."""
    match = re.search(r"\d+", str(dtype))
    return int(match.group()) if match else None


def remember(kernel_name: str, problem: dict, dtype: str, tile: dict, gpu: str, median_ms: float | None = None,
             path: Path | None = None, keep_faster: bool = False) -> Path:
    """Store a tuning run's best verified config in the user's table (replacing one for the same kernel, problem,
    dtype and GPU; with `keep_faster`, a table shared by a class, only if this run was faster). The file is written
    whole to a temporary file and renamed, under a lock, so two tuning runs finishing at once both land and a reader
    never sees half a file."""
    path = Path(path or user_table_path())
    path.parent.mkdir(parents=True, exist_ok=True)
    with _locked(path.with_suffix(".lock")):
        entries = _read(path)

        def same_run(e: dict) -> bool:
            return (e.get("kernel"), e.get("problem"), e.get("dtype"), e.get("gpu")) == (kernel_name, problem, dtype,
                                                                                        gpu)
        if keep_faster and median_ms is not None and any(
                same_run(e) and isinstance(e.get("median_ms"), (int, float)) and e["median_ms"] <= median_ms
                for e in entries):
            return path
        entries = [e for e in entries if not same_run(e)]
        entries.append({"kernel": kernel_name, "dtype": dtype, "problem": problem, "tile": tile, "gpu": gpu,
                        "median_ms": median_ms, "tuned_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())})
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".tuned-", suffix=".json")
        try:
            with os.fdopen(fd, "w") as f:
                json.dump({"entries": entries}, f, indent=1)
            os.replace(tmp, path)
        except BaseException:
            with contextlib.suppress(OSError):  # a full disk: no half-written file left beside the table
                os.unlink(tmp)
            raise
    return path


@contextlib.contextmanager
def _locked(lock_path: Path):
    import fcntl
    with open(lock_path, "a") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


# -- the choice ------------------------------------------------------------------------------------------------------
def choose(kernel, problem: dict, dtype: str, gpu: str | None = None) -> Choice:
    """The tile parameters for what a request leaves out (the factory defaults, then the rule, then the nearest
    tuned config, then the preset's, each laid over the one before), and the source of the last layer present.
    The kernel is read through what it answers (tile_names, defaults, rule, declared_shape_class, tuned_tile), never
    imported: the kernel model's contract calls this module, so it stays below the kernel package."""
    names = kernel.tile_names
    tile = {n: kernel.defaults[n] for n in names if n in kernel.defaults}
    picked_by = "default"
    sms = kernel.defaults.get("num_sms") or 132  # the GPU present (kernel.contract.Kernel.defaults)
    picked = kernel.rule(problem, dtype, sms)
    if picked is not None:
        tile.update({k: v for k, v in picked.items() if k in names})
        picked_by = "rule"
    gpu = gpu or gpu_model()
    found = nearest(kernel, problem, dtype, gpu)
    preset = kernel.tuned_tile(problem)
    # A preset's own tuning stands at its size, unless the user tuned exactly this size on this GPU themselves.
    own_run_here = found is not None and found[0]["origin"] == "user" and found[1] == 0
    if preset and not own_run_here:
        tile.update(preset)
        return Choice(tile, "preset", dict(problem), REFERENCE_GPU)
    if found is not None:
        entry = found[0]
        tile.update({k: v for k, v in entry["tile"].items() if k in names and k != "num_sms"})
        return Choice(tile, "table", entry["problem"], entry["gpu"])
    return Choice(tile, picked_by)
