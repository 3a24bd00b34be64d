"""What a kernel file of the catalogue declares: the contract, and the Kernel that reads it.

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

and may define OPTIONS ({name: [values]}: choices that are not tuned, such as the epilogue's activation),
`pick_config(...)` (the tile parameters for a problem no one set or tuned them for: the kernel's rule, each line
saying why) and `shape_class(...)` (which problems a tuned config carries over to); config_choice.py says how they,
the presets and the tables of tuned configs in kernels/tuned/ make the config a request gets. Also optional:
`check_options(...)` (refuses option combinations no schedule implements), TIED ({(names): [value tuples that go
together]}: of tied parameters, those a request leaves out follow those it sets) and BENCH_BASELINES (like BASELINES,
but timed by the benchmark only: too slow to set up for every run).

Any other TileLang file is a kernel too (inferred.py): a `@tilelang.jit` function, a function returning a
`@T.prim_func` or a module-level `@T.prim_func`; for it every name above is optional and inferred where missing.

Functions are called with just the keyword arguments they name, so `def flops(M, N, K)` is enough.
"""
from __future__ import annotations

import inspect
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from types import ModuleType
from typing import Any, Callable

from .. import config_choice, device
from ..errors import StageError, quoted
from .buffers import buffers_of
from .params import MISSING, Param, convert, kind_of
from .words import KERNELS_DIR, Config, call_with, problem_label

REQUIRED = ("DTYPES", "SPACE", "PRESETS", "CHECK_SHAPES", "make_inputs", "reference", "BASELINES", "flops",
            "bytes_moved")


@dataclass
class Kernel:
    name: str
    module: ModuleType
    path: Path
    source: str
    import_warning: dict | None = None  # top-level code that failed after the kernels were defined (a copy's)

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
    def _presets_declared(self) -> dict:
        """PRESETS as the kernel file wrote it: sizes and, for some, the tile tuned for them."""
        return self.module.PRESETS

    @property
    def presets(self) -> dict[str, dict]:
        """{label: problem sizes}: the sizes part of each preset."""
        return {k: self._split(p)[0] for k, p in self._presets_declared.items()}

    @property
    def tuned(self) -> dict[str, dict]:
        """{label: tile parameters}: the presets that carry a config tuned for their size."""
        return {k: tile for k, p in self._presets_declared.items() if (tile := self._split(p)[1])}

    def tuned_tile(self, problem: dict) -> dict:
        """The tile parameters tuned for exactly this problem (from its preset), or {}."""
        for preset in self._presets_declared.values():
            sizes, tile = self._split(preset)
            if tile and all(problem.get(n) == v for n, v in sizes.items()):
                return tile
        return {}

    @property
    def baselines(self) -> dict[str, Callable]:
        return dict(self.module.BASELINES)

    @property
    def bench_baselines(self) -> dict[str, Callable]:
        """Baselines only the benchmark times (BENCH_BASELINES): too slow to set up for every run, such as a
        torch.compile that compiles for tens of seconds the first time it meets a shape."""
        return dict(getattr(self.module, "BENCH_BASELINES", {}))

    def baseline_functions(self, bench: bool = False) -> dict[str, Callable]:
        """{name: function}: the BASELINES, with the BENCH_BASELINES too when `bench`."""
        return {**self.baselines, **(self.bench_baselines if bench else {})}

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

    # -- the file's rules for a config it is not told (config_choice.py asks the kernel, never its module) --------
    def rule(self, problem: dict, dtype: str, num_sms: int) -> dict | None:
        """The tile parameters the file's `pick_config` gives this problem, or None where the file has no rule."""
        pick = getattr(self.module, "pick_config", None)
        if not callable(pick):
            return None
        return dict(call_with(pick, problem=problem, dtype=dtype, num_sms=num_sms, **problem) or {})

    def declared_shape_class(self, problem: dict, dtype: str) -> str | None:
        """The file's `shape_class(problem, dtype)`: which problems a tuned config carries over to; None where the
        file has none."""
        classify = getattr(self.module, "shape_class", None)
        return str(call_with(classify, problem=problem, dtype=dtype, **problem)) if callable(classify) else None

    # -- what the engine asks of every kernel (a file of one's own answers these its own way: inferred.py) -------
    def prim_func(self, config: Config):
        """The @T.prim_func at `config`."""
        return self.factory(**config.factory_kwargs())

    out_idx = None             # the output buffers' positions, where the kernel says (@tilelang.jit(out_idx=...))
    has_reference = True
    verification_note = None   # why a result is not verified, where it cannot be

    @property
    def pass_configs(self) -> dict:
        return {}

    @property
    def compile_flags(self) -> list[str]:
        return []

    @property
    def check_shapes(self) -> list[dict]:
        return list(self.module.CHECK_SHAPES)

    @property
    def fingerprint(self) -> str:
        """The text a compile depends on besides the parameters (the compile cache's key): this file and the shipped
        modules a kernel file may import (flash_attention's Hopper schedules, gemm's main loop for the epilogue), so
        an edit to one of those is never answered from the cache."""
        shared = [f"{p.name}\n{p.read_text()}" for p in sorted(KERNELS_DIR.glob("*.py")) if p.resolve() != self.path]
        return "\n".join([self.source, *shared])

    def tune_configs(self) -> list[dict] | None:
        """An explicit list of tile configs to tune over, or None for every combination of SPACE."""
        return None

    def run_params(self, config: Config) -> dict:
        """What the reference and the baselines may depend on: the problem, the dtype and the OPTIONS (an
        epilogue's activation, say), never the tile sizes."""
        return {**config.problem, **{k: v for k, v in config.tile.items() if k in self.options},
                "dtype": config.dtype}

    def make_inputs(self, params: dict, func, device: str, generator) -> tuple:
        return self.inputs_made_by_file(params, device, generator)

    def inputs_made_by_file(self, params: dict, device: str, generator) -> tuple:
        """The file's `make_inputs` called at `params` (its dtype as PyTorch's type), as a tuple."""
        from ..verify import torch_dtype
        dtype = torch_dtype(params["dtype"]) if params.get("dtype") else None
        made = call_with(self.module.make_inputs, **{**params, "dtype": dtype}, device=device, generator=generator)
        return tuple(made) if isinstance(made, (tuple, list)) else (made,)

    def output_positions(self, func, n_inputs: int | None = None) -> list[int]:
        """The positions of the output buffers among the prim_func's buffers: those after the inputs."""
        return list(range(n_inputs, len(buffers_of(func)))) if n_inputs is not None else []

    def reference(self, inputs: tuple, params: dict):
        return call_with(self.module.reference, *inputs, **params)

    # -- turning user choices into a Config ------------------------------------------------------------------
    def parameter(self, name: str, like: Any) -> Param:
        """The factory's argument `name` as a Param, of the kind of `like` (its default, or a preset's value)."""
        return Param(name, kind_of(name, MISSING, like), MISSING if like is None else like)

    def resolve(self, values: dict[str, Any]) -> Config:
        """Merge `values` (a preset label under "preset", problem sizes, "dtype", tile parameters; each converted to
        its parameter's kind, params.convert) over the defaults. Unknown names and values are `parameters` errors."""
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
                like = problem.get(name, self.factory_defaults.get(name))
                problem[name] = convert(self.parameter(name, like), value)
            elif name in self.tile_names:
                tile_values[name] = convert(self.parameter(name, self.factory_defaults[name]), value)
            else:
                known = self.problem_names + ["dtype"] + self.tile_names
                raise StageError("parameters",
                                 f"{self.name} has no parameter {quoted(name)}; it has {', '.join(known)}")
        missing = [n for n in self.problem_names if n not in problem]
        if missing:
            raise StageError("parameters", f"no value for {', '.join(missing)}")
        # What was asked for, else what config_choice picks for this problem on this GPU model: the preset's tuned
        # config, the nearest tuned one of the same shape class, the kernel file's rule, or the defaults.
        # (Only when the request leaves something out: the defaults ask the GPU present for its SM count.)
        choice = (config_choice.choose(self, problem, dtype) if set(self.tile_names) - set(tile_values) else
                  config_choice.Choice({}, "user"))
        tile = {n: tile_values[n] if n in tile_values else choice.tile[n] for n in self.tile_names}
        accepted = (self.without_refused_options(tile, keep=tile_values) if choice.picked_by in ("rule", "table")
                    else tile)
        if accepted is None:
            # The rule's or the table's config, with the values the user set laid over it (or a table's entry laid
            # over the rule: a tuned split K beside the rule's multicast), is a combination the kernel refuses
            # (flash_attention: pingpong from the head-dim-64 rule with the user's overlap=False). What the user
            # set wins: first the options no one set go back to the factory's defaults (gemm's tile stays beside
            # the user's warp_specialized=False, without the rule's multicast); if that is still refused, every
            # value not set falls back to the defaults. A preset's tuned config is what the user picked by name:
            # flipping one of its options there is refused with the kernel's message.
            choice = config_choice.Choice({n: self.defaults[n] for n in self.tile_names if n in self.defaults},
                                          "default")
            accepted = {n: tile_values[n] if n in tile_values else choice.tile[n] for n in self.tile_names}
        tile = accepted
        changed = {n: v for n, v in self.follow_user(tile, tile_values).items() if tile[n] != v}
        tile.update(changed)
        notes = ()
        if changed:  # said in the answer: a stage count the user sets may bring another tile, the one that holds it
            leaders = ", ".join(f"{n}={tile_values[n]}" for n in tile_values if n in self._tied_names())
            notes = (f"{', '.join(f'{n}={v}' for n, v in changed.items())}: they go with {leaders}",)
        for name, allowed in self.options.items():
            if name in tile and tile[name] not in allowed:
                raise StageError("parameters", f"{name} must be one of {allowed}, not {tile[name]!r}")
        tuned_for = (f"{problem_label(choice.tuned_at)} on {choice.gpu}" if choice.tuned_at is not None else None)
        return Config(problem, dtype, tile, choice.picked_by, tuned_for, tuple(tile_values), notes=notes)

    def _tied_names(self) -> set[str]:
        return {n for names in getattr(self.module, "TIED", {}) for n in names}

    def follow_user(self, tile: dict, given: dict) -> dict:
        """The kernel file's TIED parameters ({names: the value tuples that go together}, flash_attention's block_M
        and threads): those the user left to the engine follow those they set, never the other way round."""
        out = {}
        for names, together in getattr(self.module, "TIED", {}).items():
            set_by_user = [i for i, n in enumerate(names) if n in given]
            if not set_by_user or len(set_by_user) == len(names):
                continue
            def followed(t):
                return {n: t[i] for i, n in enumerate(names) if n not in given and n in tile}
            # (never a tuple the kernel's check_options refuses beside the rest: gemm's split K beside multicast)
            fits = [t for t in together if all(t[i] == given[names[i]] for i in set_by_user)
                    and self._consistent({**tile, **followed(t)})]
            if fits:  # (a value outside the ties is the user's to try: the rest stays as picked)
                # Of those, the one that keeps most of what was picked (gemm: the rule's 128 × 192 tile stays
                # when the user sets its block_M = 128 again, rather than the first tuple's 128 × 256).
                out.update(followed(max(fits, key=lambda t: sum(t[i] == tile.get(n) for i, n in enumerate(names)))))
        return out

    def without_refused_options(self, tile: dict, keep) -> dict | None:
        """`tile` where the kernel's check_options takes it; else `tile` with its OPTIONS not named in `keep` (what
        the user set) back to the factory's defaults, where that is taken; else None."""
        if self._consistent(tile):
            return tile
        plain = {**tile, **{n: self.defaults[n] for n in self.options if n not in keep and n in tile}}
        return plain if self._consistent(plain) else None

    def _consistent(self, tile: dict) -> bool:
        """Whether the kernel file's own `check_options` (where it has one) accepts this combination of options."""
        check = getattr(self.module, "check_options", None)
        if not callable(check):
            return True
        try:
            call_with(check, **tile)
        except ValueError:
            return False
        return True

    def check_problems(self, problem: dict) -> list[dict]:
        """The problems verification runs on: each CHECK_SHAPES entry merged over `problem`, then `problem` itself."""
        out = []
        for shape in list(self.check_shapes) + [{}]:
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
