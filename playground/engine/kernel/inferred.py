"""Any TileLang file as a kernel: the forms people write, with the catalogue's contract as optional extras.

The forms a file may define its kernel in (several in one file: the request names one, as `entry`):

- a `@tilelang.jit` function. Lazy style (it returns an inner `@T.prim_func`): its arguments are the parameters.
  Eager style (`T.const("M, N")`, tensor annotations in the body, `T.empty` outputs): the non-tensor arguments and
  the `T.const` names are. The decorator's `out_idx` and `pass_configs` are honoured; an `@autotune` over it gives
  the tuning space (its configs) and, where an argument has no default, the first config's value.
- a plain function returning a `@T.prim_func` (the catalogue's kernels are of this form).
- a module-level `@T.prim_func` with fixed shapes: no parameters.

An argument without a default must be given. What the catalogue's contract declares (DTYPES, SPACE, PRESETS,
CHECK_SHAPES, make_inputs, reference, BASELINES, flops, bytes_moved, OPTIONS) is used where the file has it and
inferred where it has not: inputs from the prim_func's buffers (seeded random numbers, never zeros), outputs from
`out_idx` (else the buffers after the inputs the reference takes, else the last buffer), bytes moved from the buffer
sizes. Without a `reference(*inputs)` a run is timed and said to be not verified. How a file is imported, and when
it is read with the whole contract instead, is loader.py's.
"""
from __future__ import annotations

import ast
import inspect
import re
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from types import ModuleType
from typing import Any, Callable

from ..errors import StageError, quoted
from .buffers import buffer_bytes, buffers_of, inputs_from_buffers
from .contract import Kernel
from .declarations import check_declared, declared_name
from .params import COMMON_DTYPES, MISSING, Param, convert, kind_of, plain, python_value, taken_as
from .static import FileValues, file_values, function_node, uses
from .words import Config, call_with

ACCEPTED_FORMS = ("a @tilelang.jit function (its arguments are the kernel's parameters), "
                  "a function returning a @T.prim_func, or a module-level @T.prim_func with fixed shapes")
# The names a request may use to pick one of several kernels in a file (not passed to the kernel).
ENTRY_KEYS = ("entry", "kernel")
# Module-level names of the contract: never taken for a kernel.
CONTRACT_NAMES = {"reference", "make_inputs", "flops", "bytes_moved", "baselines", "main", "ref_program"}
# `M = T.symbolic("M")` / `T.dynamic("M, N")`: a dynamic shape, its names those the TIR vars carry
SYMBOLIC_CALL = re.compile(r"T\.(?:symbolic|dynamic)\(\s*[\"']([^\"']+)[\"']")


# -- the kernels in a module ------------------------------------------------------------------------------------
@dataclass
class Entry:
    """One kernel a file defines: its name, its form and how to get its prim_func."""
    name: str
    form: str                 # "jit", "autotune", "factory" or "prim_func"
    obj: Any                  # the module attribute
    line: int | None = None   # where it is defined
    module: ModuleType | None = None  # the file's module

    @property
    def jit(self):
        """The JITImpl behind a @tilelang.jit (or @autotune over one), else None."""
        if self.form == "autotune":
            return self.obj.jit_impl
        return self.obj if self.form == "jit" else None

    @property
    def function(self) -> Callable | None:
        """The user's Python function (for its signature and source)."""
        jit = self.jit
        if jit is not None:
            return getattr(jit.func, "orig_func", jit.func)
        if self.form == "factory":
            return self.obj
        return getattr(self.obj, "orig_func", None)


def _tilelang_types():
    from tilelang.autotuner.tuner import AutoTuneImpl
    from tilelang.jit import JITImpl
    from tvm.tirx import PrimFunc
    return JITImpl, AutoTuneImpl, PrimFunc


def _defined_in(fn: Callable | None, path: Path) -> bool:
    code = getattr(fn, "__code__", None)
    if code is None:
        return True
    try:
        return Path(code.co_filename).resolve() == path
    except OSError:
        return False


def _returns_prim_func(fn: Callable) -> bool:
    """Does `fn`'s body define a `@T.prim_func` (TileLang's own test for a lazy-style kernel factory)?"""
    try:
        from tilelang.language.eager.ast import has_internal_prim_func
        return has_internal_prim_func(fn)
    except Exception:
        try:
            return "prim_func" in inspect.getsource(fn)
        except (OSError, TypeError):
            return False


def _declared_names(module: ModuleType) -> set[str]:
    """The parameters the file's declarations name: SPACE's, OPTIONS' and the presets' sizes."""
    names: set[str] = set()
    for decl in ("SPACE", "OPTIONS"):
        value = getattr(module, decl, None)
        names |= set(value) if isinstance(value, dict) else set()
    presets = getattr(module, "PRESETS", None)
    for sizes in (presets.values() if isinstance(presets, dict) else []):
        names |= set(sizes) if isinstance(sizes, dict) else set()
    return names


def _takes_the_declared(module: ModuleType, fn: Callable) -> bool:
    """Is `fn` the factory the file's declarations are of (it takes every name of a SPACE, and of OPTIONS and
    PRESETS)? A copy of a shipped kernel sent as text is kernel.py, and its factory (gemm, which calls
    gemm_pipelined or gemm_warp_specialized) is named like no file."""
    declared, space = _declared_names(module), getattr(module, "SPACE", None)
    if not isinstance(space, dict) or not space:  # (a file of sizes only: flops(M, N) takes them all too)
        return False
    try:
        return declared <= set(inspect.signature(fn).parameters)
    except (TypeError, ValueError):
        return False


def find_entries(module: ModuleType, path: Path) -> dict[str, Entry]:
    """The kernels `module` (the file at `path`) defines, in the file's order. A function named like the file is
    one whatever its body (the catalogue's convention: it may choose between schedules)."""
    JITImpl, AutoTuneImpl, PrimFunc = _tilelang_types()
    found: dict[str, Entry] = {}
    private: dict[str, Entry] = {}  # `_layernorm_fwd`: a file whose kernels are all private still has kernels
    for name, obj in list(vars(module).items()):
        if name.startswith("__") or name in CONTRACT_NAMES:
            continue
        if isinstance(obj, AutoTuneImpl):
            entry = Entry(name, "autotune", obj)
        elif isinstance(obj, JITImpl):
            entry = Entry(name, "jit", obj)
        elif isinstance(obj, PrimFunc):
            entry = Entry(name, "prim_func", obj)
        elif inspect.isfunction(obj) and _defined_in(obj, path) and (name == path.stem or _returns_prim_func(obj)
                                                                    or _takes_the_declared(module, obj)):
            entry = Entry(name, "factory", obj)
        else:
            continue
        entry.module = module
        fn = entry.function
        if not _defined_in(fn, path):
            continue  # imported from a helper module or TileLang itself
        entry.line = getattr(getattr(fn, "__code__", None), "co_firstlineno", None)
        (private if name.startswith("_") else found)[name] = entry
    return dict(sorted((found or private).items(), key=lambda kv: kv[1].line or 0))


def argument_names(entry: Entry) -> list[str]:
    """The entry's function's arguments in order, tensors included (what a call's positions bind to)."""
    fn = entry.function
    if fn is None or entry.form == "prim_func":
        return []
    try:
        return [p.name for p in inspect.signature(fn).parameters.values()
                if p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)]
    except (TypeError, ValueError):
        return []


def read_file_values(source: str, entries: dict[str, Entry], name: str) -> FileValues:
    """static.file_values for the kernel `name` of a file whose kernels are `entries`."""
    kernels = {n: argument_names(e) for n, e in entries.items() if e.form != "prim_func"}
    return file_values(source, kernels, name) if kernels else FileValues()


def choose_entry(entries: dict[str, Entry], wanted: str | None, stem: str,
                 first_called: str | None = None) -> tuple[Entry, str]:
    """The kernel a request gets, and why: the one it names, the file's only one, the one named like the file (the
    catalogue's convention), the one the file's own script calls first (static.py: TileLang's rms_norm.py runs
    rms_norm, not rms_norm_splitk). Where none of these decides, the first, and why is "ambiguous": its describe
    lists them all, and anything else is refused with several_kernels."""
    if not entries:
        raise StageError("definition", f"no kernel found in the file; write {ACCEPTED_FORMS}")
    if wanted:
        if wanted not in entries:
            raise StageError("parameters", f"the file has no kernel {wanted!r}; its kernels: {', '.join(entries)}")
        return entries[wanted], "asked"
    if len(entries) == 1:
        return next(iter(entries.values())), "only"
    if stem in entries:
        return entries[stem], "named like the file"
    declared = [e for e in entries.values() if e.form == "factory" and _takes_the_declared(e.module, e.obj)]
    if len(declared) == 1:
        return declared[0], "the one the file's declarations (SPACE, PRESETS) are of"
    if first_called in entries:
        return entries[first_called], "the file's own code calls it first"
    return next(iter(entries.values())), "ambiguous"


def several_kernels(entries: dict[str, Entry]) -> StageError:
    listed = ", ".join(f"{n} (line {e.line})" if e.line else n for n, e in entries.items())
    return StageError("parameters", f"the file defines {len(entries)} kernels: {listed}; name the one to use as "
                                    f"entry (--set entry={next(iter(entries))})")


def entry_from(params: dict | None) -> str | None:
    """The kernel a request picks among several in a file (`entry` or `kernel` in its parameters)."""
    for key in ENTRY_KEYS:
        value = (params or {}).get(key)
        if value:
            return str(value)
    return None


# -- the kernel ------------------------------------------------------------------------------------------------
@dataclass
class UserKernel(Kernel):
    """A kernel from any TileLang file. `name` is the kernel's entry (the function's name)."""
    entry: Entry = None
    entries: dict[str, Entry] = field(default_factory=dict)
    picked: str = "only"   # why this entry (choose_entry): "ambiguous" where the file did not say which

    # -- the declarations, each optional -------------------------------------------------------------------------
    def _declared(self, *names: str, default: Any = None) -> Any:
        """The module's value of the first of `names` it defines (SPACE or space), else `default`."""
        decl = declared_name(self.module, *names)
        return getattr(self.module, decl) if decl else default

    def check_declarations(self) -> None:
        """SPACE, OPTIONS, PRESETS and CHECK_SHAPES name only the kernel's parameters (declarations.py). In a file
        of several kernels they may be another kernel's, unless this is the one named like the file."""
        owner = len(self.entries) <= 1 or self.name == self.path.stem
        others = None
        if not owner:
            others = set()
            for name, entry in self.entries.items():
                try:
                    others |= set(UserKernel(name, self.module, self.path, self.source, entry=entry)._params_by_name)
                except Exception:  # a kernel that cannot be read is refused when it is picked, not here
                    pass
        check_declared(self.module, self.source, self.name, self.parameters, others)

    @property
    def factory(self) -> Callable:
        return self.prim_func_of

    @cached_property
    def autotune_configs(self) -> list[dict] | None:
        """The @autotune decorator's configs, as a list of dicts (a callable's, called with the defaults)."""
        if self.entry.form != "autotune":
            return None
        configs = self.entry.obj.configs
        if callable(configs):
            try:
                configs = call_with(configs, **{p.name: p.default for p in self._signature_params()
                                                if not p.required})
            except Exception:
                return None
        configs = [dict(c) for c in configs or [] if isinstance(c, dict)]
        return configs or None

    def _signature_params(self) -> list[Param]:
        fn = self.entry.function
        if fn is None or self.entry.form == "prim_func":
            return []
        tensors = set(getattr(getattr(self.entry.jit, "func", None), "tensor_args", {}) or {})
        out = []
        for p in inspect.signature(fn).parameters.values():
            if p.name in tensors or p.kind in (p.VAR_POSITIONAL, p.VAR_KEYWORD):
                continue
            default = p.default
            out.append(Param(p.name, kind_of(p.name, p.annotation, default), default,
                             origin=None if default is MISSING else "default"))
        return out

    @cached_property
    def file_values(self) -> FileValues:
        """What the file's own code gives the parameters (static.py): its calls of the kernel, its script."""
        return read_file_values(self.source, self.entries or {self.name: self.entry}, self.name)

    @cached_property
    def uses(self) -> dict[str, str]:
        """How the kernel's body uses each parameter: "problem", "tile" or "switch" (static.uses)."""
        try:
            fn = function_node(ast.parse(self.source), self.name)
        except SyntaxError:
            return {}
        return uses(fn, [p.name for p in self._signature_params()] + self.const_names + self.symbolic_names)

    def _from_file(self, p: Param) -> None:
        """The file's value for `p`, where its own call of the kernel gives one (over the function's default: the
        file runs it so), or where nothing else does and a constant of its script is named like it."""
        found = self.file_values.found.get(p.name)
        if found is None or (found.how != "call" and not p.required):
            return
        if p.kind == "dtype" and not isinstance(found.value, str):
            return
        try:
            value = convert(p, found.value) if p.kind != "any" else found.value
        except StageError:
            return  # (a value of another kind than the function's default: not this parameter's)
        p.default, p.origin, p.where = value, "file", found.describe(p.name)
        if p.kind == "any":
            p.kind = kind_of(p.name, MISSING, value)

    @cached_property
    def parameters(self) -> list[Param]:
        """The kernel's arguments: the function's (tensors left out) and, for an eager @tilelang.jit, its T.const
        shapes (and T.symbolic sizes). Values from the file's own call of the kernel, else the function's defaults,
        else the first @autotune config, else a constant of the file's script named like it (static.py); choices for
        dtypes and booleans; how each is used (static.uses), which also tells a switch without a default."""
        params = self._signature_params()
        known = {p.name for p in params}
        for name in self.const_names:
            if name not in known:
                params.append(Param(name, "int", MISSING, source="T.const"))
                known.add(name)
        for name in self.symbolic_names:
            if name not in known:
                params.append(Param(name, "int", MISSING, source="T.symbolic"))
                known.add(name)
        configs = self.autotune_configs or []
        for p in params:
            p.use = self.uses.get(p.name)
            if p.kind == "any" and p.use == "switch":
                p.kind = "bool"
            if (p.required or p.default is None) and configs and p.name in configs[0]:
                p.default, p.source, p.origin = configs[0][p.name], "autotune", "autotune"
                if p.kind == "any":
                    p.kind = kind_of(p.name, MISSING, p.default)
            self._from_file(p)
            if p.kind == "dtype":
                dtypes = [str(d) for d in self._declared("DTYPES", default=[])] if p.name == "dtype" else []
                choices = dtypes or list(COMMON_DTYPES)
                if not p.required and str(p.default) not in choices:
                    choices.insert(0, str(p.default))
                p.choices = choices
            elif p.kind == "bool":
                p.choices = [False, True]
        return params

    @cached_property
    def symbolic_names(self) -> list[str]:
        """The sizes of a dynamic shape (`T.symbolic("M")`, `T.dynamic("M, N")`) in the entry's function or at the
        file's top level: the kernel compiles for any value, but its inputs are made at one, so each is a problem
        size the page asks for."""
        own = ""
        fn = self.entry.function
        try:
            own = inspect.getsource(fn) if fn is not None else ""
        except (OSError, TypeError):
            pass
        top: list[tuple[str, set[str]]] = []  # (a top-level statement, the Python names it assigns)
        try:
            for node in ast.parse(self.source).body:
                if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                    assigned = {n.id for n in ast.walk(node)
                                if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store)}
                    top.append((ast.get_source_segment(self.source, node) or "", assigned))
        except SyntaxError:
            pass
        names: list[str] = []
        for text, assigned, shared in [(own, set(), False)] + [(t, a, True) for t, a in top]:
            for m in SYMBOLIC_CALL.finditer(text):
                for n in re.split(r"[\s,]+", m.group(1).strip()):
                    # a size declared at the top of the file is this kernel's only if its source uses it: by the
                    # size's name, or by the Python name it is kept in (`rows = T.symbolic("M")`, then `rows`)
                    used = not shared or not own or any(re.search(rf"\b{re.escape(u)}\b", own)
                                                        for u in {n} | assigned)
                    if n and n not in names and used:
                        names.append(n)
        return names

    @cached_property
    def const_names(self) -> list[str]:
        """The T.const shape names of an eager @tilelang.jit kernel, in the order the source declares them."""
        jit = self.entry.jit
        if jit is None:
            return []
        fn = self.entry.function
        try:
            text = inspect.getsource(fn)
        except (OSError, TypeError):
            return []
        names = []
        for m in re.finditer(r"T\.const\(\s*[\"']([^\"']+)[\"']", text):
            names += [n for n in re.split(r"[\s,]+", m.group(1).strip()) if n and n not in names]
        return names

    @property
    def _params_by_name(self) -> dict[str, Param]:
        return {p.name: p for p in self.parameters}

    @property
    def has_dtype(self) -> bool:
        return "dtype" in self._params_by_name

    @property
    def dtypes(self) -> list[str]:
        p = self._params_by_name.get("dtype")
        return list(p.choices) if p is not None else []

    @property
    def space(self) -> dict[str, list]:
        declared = self._declared("SPACE", "space")
        if declared:
            return {k: [python_value(x) for x in v] for k, v in declared.items()}
        space: dict[str, list] = {}
        for c in self.autotune_configs or []:
            for k, v in c.items():
                if k in self._params_by_name and v not in space.setdefault(k, []):
                    space[k].append(v)
        return space

    def tune_configs(self) -> list[dict] | None:
        """The @autotune configs as the tuning candidates (not every combination of their values)."""
        if self._declared("SPACE", "space"):
            return None
        names = set(self._params_by_name)
        listed = [{k: v for k, v in c.items() if k in names} for c in self.autotune_configs or []]
        return listed or None

    @property
    def options(self) -> dict[str, list]:
        declared = self._declared("OPTIONS", "options")
        if declared:
            return {k: [python_value(x) for x in v] for k, v in declared.items()}
        return {p.name: list(p.choices) for p in self.parameters
                if p.choices and p.name != "dtype" and p.name not in self.problem_names}

    @property
    def _presets_declared(self) -> dict:
        return {label: {k: python_value(v) for k, v in sizes.items()}
                for label, sizes in dict(self._declared("PRESETS", "presets", default={}) or {}).items()}

    @property
    def baselines(self) -> dict[str, Callable]:
        return dict(self._declared("BASELINES", "baselines", default={}) or {})

    @property
    def check_shapes(self) -> list[dict]:
        return [{k: python_value(v) for k, v in dict(s).items()}
                for s in self._declared("CHECK_SHAPES", "check_shapes", default=[]) or []]

    @cached_property
    def factory_defaults(self) -> dict[str, Any]:
        return {p.name: p.default for p in self.parameters if not p.required}

    @property
    def problem_names(self) -> list[str]:
        """Sizes: the presets' and check shapes' names, the T.const and T.symbolic shapes, and the arguments the
        kernel uses in a tensor's shape (static.uses). An argument used as a tile (a block's extent, a grid
        divisor, threads, stages) or as a switch is not one, whatever its place; one the kernel's body does not
        show the use of is a size where the function gives it no default and it is no switch (a tuned one, from
        @autotune, is a tile parameter)."""
        names: list[str] = []
        for shape in list(self.presets.values()) + self.check_shapes:
            names += [n for n in shape if n not in names]
        for p in self.parameters:
            if p.name in names or p.name == "dtype" or p.kind == "dtype":
                continue
            if p.source in ("T.const", "T.symbolic") or p.use == "problem":
                names.append(p.name)
            elif p.use is None and p.origin in (None, "file") and p.kind in ("int", "any"):
                names.append(p.name)
        return names

    @property
    def tile_names(self) -> list[str]:
        return [p.name for p in self.parameters if p.name not in self.problem_names and p.name != "dtype"]

    @property
    def description(self) -> str:
        fn = self.entry.function
        doc = inspect.getdoc(fn) if fn is not None else None
        doc = doc or inspect.getdoc(self.module) or ""
        return doc.split("\n\n")[0].replace("\n", " ")

    # -- a request's values → a Config -----------------------------------------------------------------------------
    def resolve(self, values: dict[str, Any]) -> Config:
        if self.picked == "ambiguous":
            raise several_kernels(self.entries)
        values = {k: v for k, v in dict(values).items() if k not in ENTRY_KEYS or k in self._params_by_name}
        by_name = self._params_by_name
        problem: dict[str, Any] = {}
        label = values.pop("preset", None)
        if label is not None:
            if label not in self.presets:
                raise StageError("parameters", f"unknown preset {label!r}; presets: {', '.join(self.presets) or 'none'}")
            problem.update(self.presets[label])
        unknown = [n for n in values if n not in by_name]
        if unknown:
            known = ", ".join(by_name) or "none (its shapes are fixed)"
            raise StageError("parameters",
                             f"{self.name} has no parameter {quoted(unknown[0])}; its parameters: {known}")
        given = {n: convert(by_name[n], v) for n, v in values.items()}
        for n in self.problem_names:
            if n in given:
                problem[n] = given[n]
            elif n not in problem and n in self.factory_defaults:
                problem[n] = self.factory_defaults[n]
        missing = [n for n in self.problem_names if n not in problem and n in by_name]
        if missing:
            raise self.needs(missing)
        dtype = ""
        if "dtype" in by_name:
            p = by_name["dtype"]
            dtype = str(given.get("dtype", p.default if not p.required else (p.choices or COMMON_DTYPES)[0]))
        tuned = self.tuned_tile(problem) | {n: v for n, v in given.items() if n in self.tile_names}
        tile = {n: tuned[n] if n in tuned else self.defaults[n] for n in self.tile_names if n in tuned or
                n in self.defaults}
        missing = [n for n in self.tile_names if n not in tile]
        if missing:
            raise self.needs(missing)
        for name, allowed in self.options.items():
            if name in tile and tile[name] not in allowed and str(tile[name]) not in map(str, allowed):
                raise StageError("parameters", f"{name} must be one of {allowed}, not {tile[name]!r}")
        # No rule and no table for a kernel of one's own: what the request left out is the file's (its own call of
        # the kernel: "file") or the function's defaults ("default"); "user" where the request set a tile value
        left = [n for n in self.tile_names if n not in given]
        choice = "file" if any(by_name[n].origin == "file" for n in left if n in by_name) else "default"
        notes = tuple(note for n, v in values.items() if (note := taken_as(n, v, given[n])))
        return Config(problem, dtype, tile, choice, set_by_user=tuple(n for n in given if n in self.tile_names),
                      notes=notes)

    def needs(self, missing: list[str]) -> StageError:
        """The refusal of a request that leaves out what neither the function nor the file's code gives a value."""
        example = " ".join(f"--set {n}=…" for n in missing)
        them = "it" if len(missing) == 1 else "them"
        return StageError("parameters", f"{self.name} needs a value for {', '.join(missing)}: neither its definition "
                                        f"nor the file's own code (a call of it, its __main__ block) gives one; give "
                                        f"{them} ({example})")

    def call_kwargs(self, config: Config) -> dict[str, Any]:
        by_name = self._params_by_name
        kwargs = {**config.problem, **config.tile}
        if "dtype" in by_name:
            kwargs["dtype"] = convert(by_name["dtype"], config.dtype)
        # Values kept in a Config are plain (JSON); dtypes go back to the kind the source's default is. A dynamic
        # shape's size is not the function's argument: it only sizes the inputs.
        return {k: convert(by_name[k], v) if by_name[k].kind == "dtype" else v
                for k, v in kwargs.items() if k in by_name and by_name[k].source != "T.symbolic"}

    # -- the prim_func ---------------------------------------------------------------------------------------------
    def prim_func_of(self, **kwargs):
        """The entry's prim_func for these arguments."""
        _, _, PrimFunc = _tilelang_types()
        entry = self.entry
        if entry.form == "prim_func":
            return entry.obj
        jit = entry.jit
        if jit is not None:
            jit.initialize_jit_mode(**kwargs)
            func = jit.get_tir(**kwargs)
        else:
            func = entry.obj(**kwargs)
            if not isinstance(func, PrimFunc) and isinstance(getattr(func, "prim_func", None), PrimFunc):
                func = func.prim_func  # a factory that compiled it already (returns a JITKernel)
        if not isinstance(func, PrimFunc):
            raise StageError("definition", f"{entry.name}(...) returned {type(func).__name__}, not a @T.prim_func",
                             entry.line)
        return func

    def prim_func(self, config: Config):
        return self.prim_func_of(**self.call_kwargs(config))

    @property
    def out_idx(self) -> list[int] | None:
        jit = self.entry.jit
        idx = getattr(jit, "out_idx", None) if jit is not None else None
        if idx is None:
            idx = self._declared("OUT_IDX", "out_idx")
        if idx is None:
            return None
        return [int(i) for i in (idx if isinstance(idx, (list, tuple)) else [idx])]

    @property
    def pass_configs(self) -> dict:
        jit = self.entry.jit
        return dict(getattr(jit, "pass_configs", None) or {}) if jit is not None else {}

    @property
    def compile_flags(self) -> list[str]:
        flags = getattr(self.entry.jit, "compile_flags", None) if self.entry.jit is not None else None
        return [flags] if isinstance(flags, str) else list(flags or [])

    # -- inputs, outputs and the reference -------------------------------------------------------------------------
    @property
    def has_reference(self) -> bool:
        return callable(getattr(self.module, "reference", None))

    @property
    def verification_note(self) -> str | None:
        if self.has_reference:
            return None
        hint = (" (it has ref_program: `reference = ref_program` turns it on if it returns the outputs)"
                if callable(getattr(self.module, "ref_program", None)) else "")
        return ("not verified: the file has no reference(*inputs) to compare the outputs with" + hint +
                "; the kernel was run on NaN-filled outputs and checked only for unwritten or non-finite elements")

    def _reference_arity(self) -> int | None:
        """How many positional inputs the reference takes (its arguments not named like a parameter)."""
        if not self.has_reference:
            return None
        try:
            sig = inspect.signature(self.module.reference)
        except (TypeError, ValueError):
            return None
        names = set(self._params_by_name) | {"dtype"}
        if any(p.kind is p.VAR_POSITIONAL for p in sig.parameters.values()):
            return None
        return sum(1 for p in sig.parameters.values()
                   if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD) and p.name not in names)

    def output_positions(self, func, n_inputs: int | None = None) -> list[int]:
        """The positions of the output buffers among the prim_func's buffer parameters."""
        n = len(buffers_of(func))
        attrs = func.attrs or {}
        key = next((k for k in ("playground_out_idx", "tilelang_out_idx") if k in attrs), None)
        idx = [int(i) for i in attrs[key]] if key else self.out_idx
        if idx is not None:
            return sorted({int(i) % n for i in idx})
        if n_inputs is None and hasattr(self.module, "make_inputs"):
            return []  # decided by what make_inputs returns
        arity = n_inputs if n_inputs is not None else self._reference_arity()
        if arity is not None and 0 <= arity < n:
            return list(range(arity, n))
        return [n - 1]

    def make_inputs(self, params: dict, func, device: str, generator) -> tuple:
        if hasattr(self.module, "make_inputs"):
            return self.inputs_made_by_file(params, device, generator)
        return inputs_from_buffers(func, self.output_positions(func), device, generator, params)

    def run_params(self, config: Config) -> dict:
        return {**config.problem, **config.tile, "dtype": config.dtype}

    # -- the figures ---------------------------------------------------------------------------------------------
    def flops(self, config: Config) -> float | None:
        fn = self._declared("flops")
        return float(call_with(fn, **self.run_params(config))) if callable(fn) else None

    def bytes_moved(self, config: Config) -> float:
        fn = self._declared("bytes_moved")
        if callable(fn):
            return float(call_with(fn, **self.run_params(config)))
        return float(sum(buffer_bytes(b, self.run_params(config)) for b in buffers_of(self.prim_func(config))))

    @property
    def fingerprint(self) -> str:
        """What a compile depends on besides the parameters: this file and the helper modules beside it."""
        texts = [self.source]
        for helper in sorted(self.path.parent.glob("*.py")):
            if helper != self.path:
                try:
                    texts.append(helper.name + helper.read_text(errors="replace"))
                except OSError:
                    pass
        return "\n".join(texts)

    def entries_json(self) -> list[dict]:
        """Each kernel of the file: its name, form, line, parameters and those it needs given (a kernel that cannot
        be read says why instead)."""
        out = []
        for name, e in (self.entries or {self.name: self.entry}).items():
            item = {"name": name, "form": e.form, "line": e.line}
            try:
                k = self if name == self.name else UserKernel(name, self.module, self.path, self.source, entry=e,
                                                               entries=self.entries)
                item["parameters"] = [p.name for p in k.parameters]
                item["required"] = [p.name for p in k.parameters if p.required]
            except Exception as exc:
                item["parameters"], item["error"] = [], f"{type(exc).__name__}: {exc}"[:300]
            out.append(item)
        return out

    def describe(self) -> dict:
        warnings = [self.import_warning] if self.import_warning else []
        if self.picked == "ambiguous":
            warnings.append({"stage": "parameters", "line": None, "message": several_kernels(self.entries).message})
        return {
            "name": self.name,
            "entry": self.name,
            "entries": self.entries_json(),
            "picked": self.picked,
            "entry_needed": self.picked == "ambiguous",
            "form": self.entry.form,
            "line": self.entry.line,
            "description": self.description,
            "file": str(self.path),
            "parameters": [p.to_json() for p in self.parameters],
            "required": [p.name for p in self.parameters if p.required],
            "dtypes": self.dtypes,
            "problem": self.problem_names,
            "defaults": {k: plain(v) for k, v in self.defaults.items()},
            "space": self.space,
            "tune_configs": self.tune_configs(),
            "options": {k: [plain(v) for v in vs] for k, vs in self.options.items()},
            "presets": self.presets,
            "tuned": self.tuned,
            "check_shapes": self.check_shapes,
            "baselines": list(self.baselines),
            "out_idx": self.out_idx,
            "pass_configs": {k: plain(v) for k, v in self.pass_configs.items()},
            "compile_flags": self.compile_flags,
            "verified": self.has_reference,
            "verification_note": self.verification_note,
            "from_file": {p.name: {"value": plain(p.default), "from": p.where} for p in self.parameters
                          if p.origin == "file"},
            "warnings": warnings,
        }

