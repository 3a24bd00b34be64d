"""What a kernel file must declare, and how the engine reads it.

A kernel file (see `kernels/gemm.py`) is a short tutorial that also declares, in one place, everything the playground
needs to compile, check and time it. The names it must define:

    <name>(...)      the kernel factory, named like the file: problem sizes, `dtype` and tile parameters as keyword
                     arguments with defaults; returns a `@T.prim_func` whose parameters are the inputs followed by
                     the outputs
    DTYPES           the element types it supports, the default first
    SPACE            the tunable tile parameters: {name: [values]} (the factory's defaults are the shipped config)
    PRESETS          problem sizes to pick from: {label: {problem parameter: value}}; a preset may also name tile
                     parameters (ones in SPACE or OPTIONS): the config tuned for that size, which becomes the
                     default whenever the problem is that size
    CHECK_SHAPES     problem sizes verification always runs on (ragged ones included), each merged over the
                     problem being run, so that a variant such as `causal` is checked too
    make_inputs(...) seeded random inputs on a device, from the problem sizes, `dtype`, `device` and `generator`
    reference(...)   the exact answer computed by PyTorch in float32 or better, from the inputs
    BASELINES        {label: function of the inputs} timed beside the kernel
    flops(...)       floating-point operations of one call
    bytes_moved(...) the fewest bytes one call must read and write in device memory

and may define OPTIONS ({name: [values]}: choices that are not tuned, such as the epilogue's activation).

Functions are called with just the keyword arguments they name, so `def flops(M, N, K)` is enough.
"""
from __future__ import annotations

import inspect
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from types import ModuleType
from typing import Any, Callable

from . import device
from .errors import StageError
from .source import import_file, write_source

ROOT = Path(__file__).resolve().parents[2]
KERNELS_DIR = ROOT / "kernels"

REQUIRED = ("DTYPES", "SPACE", "PRESETS", "CHECK_SHAPES", "make_inputs", "reference", "BASELINES", "flops",
            "bytes_moved")


def call_with(fn: Callable, *args, **params):
    """Call `fn` with the positional `args` and those of `params` it names (all of them if it takes **kwargs)."""
    sig = inspect.signature(fn)
    if not any(p.kind is p.VAR_KEYWORD for p in sig.parameters.values()):
        params = {k: v for k, v in params.items() if k in sig.parameters}
    return fn(*args, **params)


@dataclass(frozen=True)
class Config:
    """One fully resolved choice of everything a compile depends on, besides the source text and the target."""
    problem: dict[str, Any]
    dtype: str
    tile: dict[str, Any]

    def factory_kwargs(self) -> dict[str, Any]:
        return {**self.problem, "dtype": self.dtype, **self.tile}

    def to_json(self) -> dict:
        return {"problem": dict(self.problem), "dtype": self.dtype, "tile": dict(self.tile)}


@dataclass
class Kernel:
    name: str
    module: ModuleType
    path: Path
    source: str

    # -- what the file declares -----------------------------------------------------------------------------
    @property
    def factory(self) -> Callable:
        return getattr(self.module, self.name)

    @property
    def dtypes(self) -> list[str]:
        return list(self.module.DTYPES)

    @property
    def space(self) -> dict[str, list]:
        return {k: list(v) for k, v in self.module.SPACE.items()}

    @property
    def options(self) -> dict[str, list]:
        return {k: list(v) for k, v in getattr(self.module, "OPTIONS", {}).items()}

    def _split(self, preset: dict) -> tuple[dict, dict]:
        """A preset's problem sizes, and the tile parameters (names in SPACE or OPTIONS) tuned for them."""
        tile_names = set(self.space) | set(self.options)
        return ({n: v for n, v in preset.items() if n not in tile_names},
                {n: v for n, v in preset.items() if n in tile_names})

    @property
    def presets(self) -> dict[str, dict]:
        """{label: problem sizes}: the sizes part of each preset."""
        return {k: self._split(p)[0] for k, p in self.module.PRESETS.items()}

    @property
    def tuned(self) -> dict[str, dict]:
        """{label: tile parameters}: the presets that carry a config tuned for their size."""
        return {k: tile for k, p in self.module.PRESETS.items() if (tile := self._split(p)[1])}

    def tuned_tile(self, problem: dict) -> dict:
        """The tile parameters tuned for exactly this problem (from its preset), or {}."""
        for preset in self.module.PRESETS.values():
            sizes, tile = self._split(preset)
            if tile and all(problem.get(n) == v for n, v in sizes.items()):
                return tile
        return {}

    @property
    def baselines(self) -> dict[str, Callable]:
        return dict(self.module.BASELINES)

    @cached_property
    def factory_defaults(self) -> dict[str, Any]:
        return {n: p.default for n, p in inspect.signature(self.factory).parameters.items()
                if p.default is not inspect.Parameter.empty}

    @cached_property
    def defaults(self) -> dict[str, Any]:
        """The factory's defaults, with a persistent schedule's `num_sms` (one block per SM) set to the GPU present.
        The factory's value, written for the H200, stands without a GPU; on a GPU with fewer SMs its blocks beyond
        the SM count would wait a whole round. Asking the GPU costs a child process, so `resolve` reads this only
        for what a request leaves out."""
        found = dict(self.factory_defaults)
        if "num_sms" in found and (sms := device.sm_count()):
            found["num_sms"] = sms
        return found

    @property
    def problem_names(self) -> list[str]:
        names: list[str] = []
        for preset in self.presets.values():
            names += [n for n in preset if n not in names]
        return names

    @property
    def tile_names(self) -> list[str]:
        return [n for n in self.factory_defaults if n not in self.problem_names and n != "dtype"]

    @property
    def description(self) -> str:
        doc = inspect.getdoc(self.module) or ""
        return doc.split("\n\n")[0].replace("\n", " ")

    def default_config(self) -> Config:
        return self.resolve({})

    # -- turning user choices into a Config ------------------------------------------------------------------
    def resolve(self, values: dict[str, Any]) -> Config:
        """Merge `values` (a preset label under "preset", problem sizes, "dtype", tile parameters; strings are
        converted by the type of the default) over the defaults. Unknown names and values are `parameters` errors."""
        values = dict(values)
        problem = {n: self.factory_defaults[n] for n in self.problem_names if n in self.factory_defaults}
        label = values.pop("preset", None)
        if label is not None:
            if label not in self.presets:
                raise StageError("parameters", f"unknown preset {label!r}; presets: {', '.join(self.presets)}")
            problem.update(self.presets[label])
        dtype = str(values.pop("dtype", self.factory_defaults.get("dtype", self.dtypes[0])))
        if dtype not in self.dtypes:
            raise StageError("parameters", f"dtype {dtype!r} is not one of {self.dtypes}")
        tile_values = {}
        for name, value in values.items():
            if name in self.problem_names:
                problem[name] = _convert(name, value, problem.get(name, self.factory_defaults.get(name)))
            elif name in self.tile_names:
                tile_values[name] = _convert(name, value, self.factory_defaults[name])
            else:
                known = self.problem_names + ["dtype"] + self.tile_names
                raise StageError("parameters", f"{self.name} has no parameter {name!r}; it has {', '.join(known)}")
        missing = [n for n in self.problem_names if n not in problem]
        if missing:
            raise StageError("parameters", f"no value for {', '.join(missing)}")
        # What was asked for, else what was tuned for this size, else the defaults.
        given = self.tuned_tile(problem) | tile_values
        tile = {n: given[n] if n in given else self.defaults[n] for n in self.tile_names}
        for name, allowed in self.options.items():
            if name in tile and tile[name] not in allowed:
                raise StageError("parameters", f"{name} must be one of {allowed}, not {tile[name]!r}")
        return Config(problem, dtype, tile)

    def check_problems(self, problem: dict) -> list[dict]:
        """The problems verification runs on: each CHECK_SHAPES entry merged over `problem`, then `problem` itself."""
        out = []
        for shape in list(self.module.CHECK_SHAPES) + [{}]:
            p = {**problem, **shape}
            if p not in out:
                out.append(p)
        return out

    # -- the derived figures --------------------------------------------------------------------------------
    def flops(self, config: Config) -> float:
        return float(call_with(self.module.flops, **config.problem, dtype=config.dtype))

    def bytes_moved(self, config: Config) -> float:
        return float(call_with(self.module.bytes_moved, **config.problem, dtype=config.dtype))

    def describe(self) -> dict:
        """The kernel as the catalogue lists it (`python -m playground list --json`)."""
        return {
            "name": self.name,
            "description": self.description,
            "file": str(self.path),
            "dtypes": self.dtypes,
            "problem": self.problem_names,
            "defaults": {k: v for k, v in self.defaults.items()},
            "space": self.space,
            "options": self.options,
            "presets": self.presets,
            "tuned": self.tuned,
            "check_shapes": list(self.module.CHECK_SHAPES),
            "baselines": list(self.baselines),
        }


def _convert(name: str, value: Any, like: Any) -> Any:
    if not isinstance(value, str) or isinstance(like, str) or like is None:
        return value
    try:
        if isinstance(like, bool):
            if value.lower() in ("1", "true", "yes", "on"):
                return True
            if value.lower() in ("0", "false", "no", "off"):
                return False
            raise ValueError(value)
        return type(like)(value)
    except ValueError:
        raise StageError("parameters", f"{name}={value!r} is not a {type(like).__name__}") from None


def _check_declarations(name: str, module: ModuleType, path: Path) -> None:
    missing = [n for n in (name,) + REQUIRED if not hasattr(module, n)]
    if missing:
        raise StageError("definition", f"the kernel file must define {', '.join(missing)} "
                                       f"(see the original {name}.py)")
    if not callable(getattr(module, name)):
        raise StageError("definition", f"{name} must be the kernel factory function")


def builtin_names() -> list[str]:
    from kernels import CATALOGUE
    return list(CATALOGUE)


def builtin_path(name: str) -> Path:
    if name not in builtin_names():
        raise StageError("parameters", f"no kernel named {name!r}; the catalogue has {', '.join(builtin_names())}")
    return KERNELS_DIR / f"{name}.py"


def builtin_source(name: str) -> str:
    return builtin_path(name).read_text()


def load(name: str, source: str | None = None, workdir: Path | None = None) -> Kernel:
    """The kernel `name`, from the catalogue's file or from edited `source` text (written under `workdir`)."""
    builtin = builtin_path(name)
    if source is None or source == builtin.read_text():
        return load_file(name, builtin)
    from .compile_cache import cache_dir
    return load_file(name, write_source(source, name, Path(workdir) if workdir else cache_dir() / "sources"))


def load_file(name: str, path: Path) -> Kernel:
    """The kernel `name` from the file at `path` (the catalogue's own file, or an edited copy written earlier)."""
    path = Path(path).resolve()
    is_builtin = path == builtin_path(name).resolve()
    module = import_file(path, f"kernels.{name}" if is_builtin else None)
    _check_declarations(name, module, path)
    return Kernel(name, module, path, path.read_text())
