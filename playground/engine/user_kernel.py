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
sizes. Without a `reference(*inputs)` a run is timed and said to be not verified.

Code under `if __name__ == "__main__":` is not run: the file is imported under another module name. Code outside
functions is; where it fails after the kernels are defined (a script that needs a GPU the compile server lacks,
say), the kernels defined before it are used and the failure is reported as a warning.
"""
from __future__ import annotations

import ast
import inspect
import re
import sys
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from types import ModuleType
from typing import Any, Callable

from .catalogue import Config, Kernel, call_with
from .errors import StageError, clip, first_line, format_exception, quoted, user_line_from_traceback

ACCEPTED_FORMS = ("a @tilelang.jit function (its arguments are the kernel's parameters), "
                  "a function returning a @T.prim_func, or a module-level @T.prim_func with fixed shapes")
# The names a request may use to pick one of several kernels in a file (not passed to the kernel).
ENTRY_KEYS = ("entry", "kernel")
# Module-level names of the contract: never taken for a kernel.
CONTRACT_NAMES = {"reference", "make_inputs", "flops", "bytes_moved", "baselines", "main", "ref_program"}
COMMON_DTYPES = ["float16", "bfloat16", "float32"]
DTYPE_NAMES = {"float16", "bfloat16", "float32", "float64", "float", "half", "int8", "uint8", "int16", "int32",
               "int64", "uint32", "bool", "float8_e4m3", "float8_e5m2", "float8_e4m3fn", "float8_e4m3fnuz",
               "float8_e5m2fnuz", "int4", "uint4"}
MISSING = inspect.Parameter.empty
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


def find_entries(module: ModuleType, path: Path) -> dict[str, Entry]:
    """The kernels `module` (the file at `path`) defines, in the file's order. A function named like the file is
    one whatever its body (the catalogue's convention: it may choose between schedules)."""
    JITImpl, AutoTuneImpl, PrimFunc = _tilelang_types()
    found: dict[str, Entry] = {}
    for name, obj in list(vars(module).items()):
        if name.startswith("_") or name in CONTRACT_NAMES:
            continue
        if isinstance(obj, AutoTuneImpl):
            entry = Entry(name, "autotune", obj)
        elif isinstance(obj, JITImpl):
            entry = Entry(name, "jit", obj)
        elif isinstance(obj, PrimFunc):
            entry = Entry(name, "prim_func", obj)
        elif inspect.isfunction(obj) and _defined_in(obj, path) and (name == path.stem or _returns_prim_func(obj)):
            entry = Entry(name, "factory", obj)
        else:
            continue
        fn = entry.function
        if not _defined_in(fn, path):
            continue  # imported from a helper module or TileLang itself
        entry.line = getattr(getattr(fn, "__code__", None), "co_firstlineno", None)
        found[name] = entry
    return dict(sorted(found.items(), key=lambda kv: kv[1].line or 0))


def choose_entry(entries: dict[str, Entry], wanted: str | None, stem: str) -> Entry:
    if not entries:
        raise StageError("definition", f"no kernel found in the file; write {ACCEPTED_FORMS}")
    if wanted:
        if wanted not in entries:
            raise StageError("parameters", f"the file has no kernel {wanted!r}; its kernels: {', '.join(entries)}")
        return entries[wanted]
    if len(entries) == 1:
        return next(iter(entries.values()))
    if stem in entries:  # the catalogue's convention: the factory is named like the file
        return entries[stem]
    raise StageError("parameters", f"the file defines {len(entries)} kernels: {', '.join(entries)}; pick one "
                                   f"with entry=NAME (--set entry={next(iter(entries))})")


# -- parameters --------------------------------------------------------------------------------------------------
@dataclass
class Param:
    """One argument of the kernel, as the page shows it."""
    name: str
    kind: str                  # "int", "float", "bool", "dtype", "str" or "any"
    default: Any = MISSING
    choices: list | None = None
    # "argument", "T.const" (an eager kernel's shape), "T.symbolic" (a dynamic shape: a size to make inputs of,
    # never passed to the function) or "autotune" (default from configs)
    source: str = "argument"

    @property
    def required(self) -> bool:
        return self.default is MISSING

    def to_json(self) -> dict:
        return {"name": self.name, "kind": self.kind, "required": self.required,
                "default": None if self.required else _plain(self.default), "choices": self.choices,
                "source": self.source}


def _plain(value: Any) -> Any:
    """A JSON value for a default: a TileLang dtype object becomes its name."""
    if value is None or isinstance(value, (bool, int, float)):
        return value
    return str(value)


def _python(value: Any) -> Any:
    """A numpy scalar (an np.int64 from np.arange, say) as the Python value it holds: a size in a preset or a value
    in SPACE goes to JSON (the page, the compile cache's key), which takes only Python's own numbers."""
    item = getattr(value, "item", None)
    return item() if callable(item) and type(value).__module__ == "numpy" else value


def _is_dtype(name: str, value: Any) -> bool:
    if value is not MISSING and value is not None and type(value).__name__ == "dtype":
        return True
    if isinstance(value, str) and value in DTYPE_NAMES:
        return True
    return name == "dtype" or name.endswith("_dtype") or name.endswith("dtype") and value is MISSING


def _kind(name: str, annotation: Any, default: Any) -> str:
    if _is_dtype(name, default):
        return "dtype"
    for t, kind in ((bool, "bool"), (int, "int"), (float, "float"), (str, "str")):
        if annotation is t or annotation == t.__name__:
            return kind
    if default is MISSING or default is None:
        return "any"
    for t, kind in ((bool, "bool"), (int, "int"), (float, "float"), (str, "str")):
        if isinstance(default, t):
            return kind
    return "any"


def convert(param: Param, value: Any) -> Any:
    """A value from the command line (text) or the page (JSON) as the argument's type; a `parameters` error if it
    is not one."""
    kind, name = param.kind, param.name
    if kind == "dtype":
        text = str(value)
        if not re.fullmatch(r"[a-z][a-z0-9_]*", text):
            raise StageError("parameters", f"{name}={value!r} is not a dtype (float16, bfloat16, float32, ...)")
        if param.default is not MISSING and type(param.default).__name__ == "dtype":
            try:
                return type(param.default)(text)
            except Exception:
                raise StageError("parameters", f"{name}={value!r} is not a dtype TileLang knows") from None
        return text
    if kind == "bool":
        if isinstance(value, bool):
            return value
        if isinstance(value, str) and value.lower() in ("1", "true", "yes", "on", "0", "false", "no", "off"):
            return value.lower() in ("1", "true", "yes", "on")
        raise StageError("parameters", f"{name}={value!r} is not a bool (true or false)")
    if kind == "int":
        if isinstance(value, bool) or isinstance(value, float) and not value.is_integer():
            raise StageError("parameters", f"{name}={value!r} is not an int")
        try:
            return int(value) if not isinstance(value, str) else int(value.strip(), 0)
        except (TypeError, ValueError):
            raise StageError("parameters", f"{name}={value!r} is not an int") from None
    if kind == "float":
        try:
            return float(value)
        except (TypeError, ValueError):
            raise StageError("parameters", f"{name}={value!r} is not a number") from None
    if kind == "str":
        return str(value)
    # "any": no annotation, no default. Text that reads as a number or a bool is taken as one.
    if isinstance(value, str):
        text = value.strip()
        for parse in (lambda t: int(t, 0), float):
            try:
                return parse(text)
            except ValueError:
                pass
        if text.lower() in ("true", "false"):
            return text.lower() == "true"
    return value


# -- the kernel ------------------------------------------------------------------------------------------------
@dataclass
class UserKernel(Kernel):
    """A kernel from any TileLang file. `name` is the kernel's entry (the function's name)."""
    entry: Entry = None
    entries: dict[str, Entry] = field(default_factory=dict)
    import_warning: dict | None = None  # top-level code that failed after the kernels were defined

    # -- the declarations, each optional -------------------------------------------------------------------------
    def _declared(self, *names: str, default: Any = None) -> Any:
        for n in names:
            if hasattr(self.module, n):
                return getattr(self.module, n)
        return default

    def check_declarations(self) -> None:
        """SPACE, OPTIONS, PRESETS and CHECK_SHAPES name only the kernel's parameters, and every preset gives each
        size the source has no default for: a `definition` error at the line that does not, where otherwise a typo
        (block_k for block_K) would be dropped without a word and a preset would run with a size left over.
        In a file of several kernels the declarations may be another kernel's (kernels/gemm.py's SPACE is gemm's,
        not gemm_pipelined's): there a name is refused only if no kernel of the file takes it, and presets are
        checked for missing sizes only for the one kernel or the one named like the file."""
        by_name = set(self._params_by_name)
        known = ", ".join(by_name) or "none (its shapes are fixed)"
        owner = len(self.entries) <= 1 or self.name == self.path.stem
        if not owner:
            for name, entry in self.entries.items():
                try:
                    by_name |= set(UserKernel(name, self.module, self.path, self.source, entry=entry)._params_by_name)
                except Exception:  # a kernel that cannot be read is refused when it is picked, not here
                    pass
            known = f"{known} (nor does any other kernel of the file)"

        def refuse(message: str, *path) -> None:
            raise StageError("definition", message, self._declaration_line(*path))

        for names, what in ((("SPACE", "space"), "tile parameter"), (("OPTIONS", "options"), "option")):
            decl = next((n for n in names if hasattr(self.module, n)), None)
            value = getattr(self.module, decl, None) if decl else None
            if not value:
                continue
            if not isinstance(value, dict) or not all(hasattr(v, "__iter__") and not isinstance(v, (str, bytes, dict))
                                                      for v in value.values()):
                refuse(f"{decl} must be a dict of {what} name → list of values, like {{\"block\": [64, 128]}}", decl)
            for name in value:
                if name not in by_name:
                    refuse(f"{decl} names {name!r}, which {self.name} does not take; its parameters: {known}",
                           decl, name)
        decl = next((n for n in ("PRESETS", "presets") if hasattr(self.module, n)), None)
        presets = getattr(self.module, decl, None) if decl else None
        if presets:
            if not isinstance(presets, dict) or not all(isinstance(v, dict) for v in presets.values()):
                refuse(f"{decl} must be a dict of label → sizes, like {{\"4096²\": dict(M=4096, N=4096)}}", decl)
            required = [p.name for p in self.parameters if p.required and p.name != "dtype"]
            for label, sizes in presets.items():
                for name in sizes:
                    if name not in by_name:
                        refuse(f"preset {label!r} gives {name!r}, which {self.name} does not take; its parameters: "
                               f"{known}", decl, label, name)
                missing = [n for n in required if n not in sizes] if owner else []
                if missing:
                    refuse(f"preset {label!r} gives no {', '.join(missing)}, and the source has no default for "
                           f"{'it' if len(missing) == 1 else 'them'}: add {'it' if len(missing) == 1 else 'them'} "
                           f"to the preset", decl, label)
        decl = next((n for n in ("CHECK_SHAPES", "check_shapes") if hasattr(self.module, n)), None)
        shapes = getattr(self.module, decl, None) if decl else None
        if shapes:
            if not isinstance(shapes, (list, tuple)) or not all(isinstance(v, dict) for v in shapes):
                refuse(f"{decl} must be a list of sizes, like [dict(M=33)]", decl)
            for i, shape in enumerate(shapes):
                for name in shape:
                    if name not in by_name:
                        refuse(f"{decl} gives {name!r}, which {self.name} does not take; its parameters: {known}",
                               decl, i, name)

    def _declaration_line(self, name: str, *path) -> int | None:
        """The line of the top-level `name = ...` in the source, or of the key (a dict's or dict(...)'s) or item
        that `path` leads to inside it, as deep as the literal goes."""
        try:
            tree = ast.parse(self.source)
        except SyntaxError:
            return None
        node = None
        for stmt in tree.body:
            targets = stmt.targets if isinstance(stmt, ast.Assign) else [stmt.target] if isinstance(
                stmt, ast.AnnAssign) else []
            if any(isinstance(t, ast.Name) and t.id == name for t in targets):
                node = stmt.value
                line = stmt.lineno
        if node is None:
            return None
        for step in path:
            found = None
            if isinstance(node, ast.Dict):
                found = next(((k, v) for k, v in zip(node.keys, node.values)
                              if isinstance(k, ast.Constant) and k.value == step), None)
            elif isinstance(node, ast.Call) and getattr(node.func, "id", None) == "dict":
                found = next(((kw, kw.value) for kw in node.keywords if kw.arg == step), None)
            elif isinstance(node, (ast.List, ast.Tuple)) and isinstance(step, int) and step < len(node.elts):
                found = (node.elts[step], node.elts[step])
            if found is None:
                break
            line, node = found[0].lineno, found[1]
        return line

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
            out.append(Param(p.name, _kind(p.name, p.annotation, default), default))
        return out

    @cached_property
    def parameters(self) -> list[Param]:
        """The kernel's arguments: the function's (tensors left out) and, for an eager @tilelang.jit, its T.const
        shapes. Defaults from the function, else from the first @autotune config; choices for dtypes and
        booleans."""
        params = self._signature_params()
        configs = self.autotune_configs or []
        for p in params:
            if (p.required or p.default is None) and configs and p.name in configs[0]:
                p.default, p.source = configs[0][p.name], "autotune"
                if p.kind == "any":
                    p.kind = _kind(p.name, MISSING, p.default)
            if p.kind == "dtype":
                dtypes = [str(d) for d in self._declared("DTYPES", default=[])] if p.name == "dtype" else []
                choices = dtypes or list(COMMON_DTYPES)
                if not p.required and str(p.default) not in choices:
                    choices.insert(0, str(p.default))
                p.choices = choices
            elif p.kind == "bool":
                p.choices = [False, True]
        known = {p.name for p in params}
        for name in self.const_names:
            if name not in known:
                params.append(Param(name, "int", MISSING, source="T.const"))
                known.add(name)
        for name in self.symbolic_names:
            if name not in known:
                params.append(Param(name, "int", MISSING, source="T.symbolic"))
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
            return {k: [_python(x) for x in v] for k, v in declared.items()}
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
            return {k: [_python(x) for x in v] for k, v in declared.items()}
        return {p.name: list(p.choices) for p in self.parameters
                if p.choices and p.name != "dtype" and p.name not in self.problem_names}

    @property
    def _presets_declared(self) -> dict:
        return {label: {k: _python(v) for k, v in sizes.items()}
                for label, sizes in dict(self._declared("PRESETS", "presets", default={}) or {}).items()}

    @property
    def baselines(self) -> dict[str, Callable]:
        return dict(self._declared("BASELINES", "baselines", default={}) or {})

    @property
    def check_shapes(self) -> list[dict]:
        return [{k: _python(v) for k, v in dict(s).items()}
                for s in self._declared("CHECK_SHAPES", "check_shapes", default=[]) or []]

    @cached_property
    def factory_defaults(self) -> dict[str, Any]:
        return {p.name: p.default for p in self.parameters if not p.required}

    @cached_property
    def defaults(self) -> dict[str, Any]:
        found = dict(self.factory_defaults)
        if "num_sms" in found:
            from . import device
            if sms := device.sm_count():
                found["num_sms"] = sms
        return found

    @property
    def problem_names(self) -> list[str]:
        """Sizes: the presets' and check shapes' names, the T.const shapes and every int argument without a
        default (a tuned one, from @autotune, is a tile parameter)."""
        names: list[str] = []
        for shape in list(self.presets.values()) + self.check_shapes:
            names += [n for n in shape if n not in names]
        for p in self.parameters:
            if p.name not in names and p.name != "dtype" and (p.required or p.source == "T.const"):
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
            example = " ".join(f"--set {n}=…" for n in missing)
            raise StageError("parameters", f"{self.name} needs a value for {', '.join(missing)} (no default in the "
                                           f"source): give {'it' if len(missing) == 1 else 'them'} ({example})")
        dtype = ""
        if "dtype" in by_name:
            p = by_name["dtype"]
            dtype = str(given.get("dtype", p.default if not p.required else (p.choices or COMMON_DTYPES)[0]))
        tuned = self.tuned_tile(problem) | {n: v for n, v in given.items() if n in self.tile_names}
        tile = {n: tuned[n] if n in tuned else self.defaults[n] for n in self.tile_names if n in tuned or
                n in self.defaults}
        missing = [n for n in self.tile_names if n not in tile]
        if missing:
            raise StageError("parameters", f"{self.name} needs a value for {', '.join(missing)} (no default in the "
                                           f"source)")
        for name, allowed in self.options.items():
            if name in tile and tile[name] not in allowed and str(tile[name]) not in map(str, allowed):
                raise StageError("parameters", f"{name} must be one of {allowed}, not {tile[name]!r}")
        # No rule and no table for a kernel of one's own: picked_by "default", or "user" where the request set a value
        return Config(problem, dtype, tile, set_by_user=tuple(n for n in given if n in self.tile_names))

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
            from .verify import torch_dtype
            made = call_with(self.module.make_inputs, **{**params, "dtype": torch_dtype(params["dtype"])
                                                         if params.get("dtype") else None},
                             device=device, generator=generator)
            return tuple(made) if isinstance(made, (tuple, list)) else (made,)
        outputs = set(self.output_positions(func))
        return tuple(random_tensor(b, device, generator, params) for i, b in enumerate(buffers_of(func))
                     if i not in outputs)

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

    def check_problems(self, problem: dict) -> list[dict]:
        out = []
        for shape in self.check_shapes + [{}]:
            p = {**problem, **shape}
            if p not in out:
                out.append(p)
        return out

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

    def describe(self) -> dict:
        return {
            "name": self.name,
            "entry": self.name,
            "entries": [{"name": e.name, "form": e.form, "line": e.line} for e in self.entries.values()],
            "form": self.entry.form,
            "line": self.entry.line,
            "description": self.description,
            "file": str(self.path),
            "parameters": [p.to_json() for p in self.parameters],
            "required": [p.name for p in self.parameters if p.required],
            "dtypes": self.dtypes,
            "problem": self.problem_names,
            "defaults": {k: _plain(v) for k, v in self.defaults.items()},
            "space": self.space,
            "tune_configs": self.tune_configs(),
            "options": {k: [_plain(v) for v in vs] for k, vs in self.options.items()},
            "presets": self.presets,
            "tuned": self.tuned,
            "check_shapes": self.check_shapes,
            "baselines": list(self.baselines),
            "out_idx": self.out_idx,
            "pass_configs": {k: _plain(v) for k, v in self.pass_configs.items()},
            "compile_flags": self.compile_flags,
            "verified": self.has_reference,
            "verification_note": self.verification_note,
            "warnings": [self.import_warning] if self.import_warning else [],
        }


# -- buffers and inputs ------------------------------------------------------------------------------------------
def buffers_of(func) -> list:
    return [func.buffer_map[p] for p in func.params if p in func.buffer_map]


def concrete(expr, sizes: dict | None = None) -> int | None:
    """An extent as an int: a dynamic shape's (`T.symbolic`) at the values `sizes` gives its names; None where a
    name has no value."""
    try:
        return int(expr)
    except (TypeError, ValueError):
        pass
    from tvm import arith, tirx
    found = {}
    tirx.stmt_functor.post_order_visit(expr, lambda node: found.setdefault(node.name, node)
                                       if isinstance(node, tirx.Var) else None)
    values = {}
    for name, var in found.items():
        value = (sizes or {}).get(name)
        if value is not None and not isinstance(value, bool):
            try:
                values[var] = tirx.IntImm(var.dtype, int(value))
            except (TypeError, ValueError):
                pass
    try:
        return int(arith.Analyzer().simplify(tirx.stmt_functor.substitute(expr, values)))
    except (TypeError, ValueError):
        return None


def static_shape(buffer, sizes: dict | None = None) -> list[int]:
    """The buffer's shape, a dynamic one at `sizes` (the problem's values of its T.symbolic names)."""
    shape = [concrete(s, sizes) for s in buffer.shape]
    if None in shape:
        raise StageError("definition", f"buffer {buffer.name} has the symbolic shape {list(buffer.shape)} and no "
                                       "value was given for its sizes; give them as parameters (or make_inputs in "
                                       "the file can make inputs for it)")
    return shape


def buffer_bytes(buffer, sizes: dict | None = None) -> int:
    n = 1
    for s in static_shape(buffer, sizes):
        n *= s
    bits = getattr(buffer.dtype, "bits", None) or 8 * _torch_dtype(str(buffer.dtype)).itemsize
    lanes = getattr(buffer.dtype, "lanes", 1) or 1
    return n * bits * lanes // 8


def _torch_dtype(name: str):
    from .verify import torch_dtype
    try:
        return torch_dtype(name)
    except AttributeError:
        raise StageError("definition", f"no PyTorch type for the buffer type {name}; make_inputs in the file can "
                                       "make inputs for it") from None


def random_tensor(buffer, device: str, generator, sizes: dict | None = None):
    """Seeded random values for one input buffer: normal floats (never zeros), small integers."""
    import torch
    shape, dtype = static_shape(buffer, sizes), _torch_dtype(str(buffer.dtype))
    if dtype == torch.bool:
        return torch.randint(0, 2, shape, device=device, generator=generator).bool()
    if dtype.is_floating_point:
        return torch.randn(shape, device=device, generator=generator).to(dtype)
    low, high = (-8, 8) if dtype in (torch.int8, torch.int16) else (0, 16)
    return torch.randint(low, high, shape, device=device, generator=generator, dtype=dtype)


# -- loading -----------------------------------------------------------------------------------------------------
def import_user_module(path: Path) -> tuple[ModuleType, dict | None]:
    """Import the file with its folder on sys.path (so helper modules beside it import). Top-level code that fails
    after the kernels are defined gives a warning, not an error: the kernels defined above it are used."""
    from .source import exec_module_file, import_failed, text_hash
    path = Path(path).resolve()
    folder = str(path.parent)
    if folder not in sys.path:
        sys.path.insert(0, folder)
    module_name = f"playground_user_{path.stem}_{text_hash(str(path))}"
    module, exc = exec_module_file(path, module_name)
    if exc is not None:
        line = user_line_from_traceback(exc, str(path))
        message = first_line(f"{type(exc).__name__}: {exc}")
        if find_entries(module, path):
            return module, {"stage": "python", "line": line,
                            "message": f"the code outside functions stopped at line {line}: {message}; the "
                                       f"kernels defined above it are used (a script belongs under "
                                       f"`if __name__ == \"__main__\":`, which is not run here)"}
        sys.modules.pop(module_name, None)
        raise import_failed(exc, path)
    return module, None


def load_user_file(path: Path, entry: str | None = None) -> UserKernel:
    """The kernel `entry` (or the only one, or the one named like the file) of the TileLang file at `path`."""
    from .source import read_source
    path = Path(path).resolve()
    read_source(path)  # the size cap and UTF-8, checked before any of it runs
    module, warning = import_user_module(path)
    return load_user_module(module, path, entry, warning)


def load_user_module(module: ModuleType, path: Path, entry: str | None = None,
                     warning: dict | None = None) -> Kernel:
    """The kernel `entry` of an imported file. A file with the catalogue's whole contract, its factory named like
    the file (a copy of a shipped kernel), is read as the catalogue reads its own."""
    from .catalogue import REQUIRED
    path = Path(path).resolve()
    stem = path.stem
    if entry in (None, stem) and callable(getattr(module, stem, None)) and all(hasattr(module, n) for n in REQUIRED):
        kernel = Kernel(stem, module, path, path.read_text())
        kernel.import_warning = warning
        return kernel
    entries = find_entries(module, path)
    chosen = choose_entry(entries, entry, path.stem)
    kernel = UserKernel(chosen.name, module, path, path.read_text(), entry=chosen, entries=entries,
                        import_warning=warning)
    kernel.check_declarations()
    return kernel


def entry_from(params: dict | None) -> str | None:
    """The kernel a request picks among several in a file (`entry` or `kernel` in its parameters)."""
    for key in ENTRY_KEYS:
        value = (params or {}).get(key)
        if value:
            return str(value)
    return None
