"""Checks of what a kernel file declares, each refusal a `definition` error at the line that declares it.

A shipped kernel's file must have the whole contract (contract.REQUIRED and its factory). In a file of one's own
every declaration is optional, but those it makes must fit the kernel: SPACE, OPTIONS, PRESETS and CHECK_SHAPES name
only its parameters, and every preset gives each size the source has no default for; otherwise a typo (block_k for
block_K) would be dropped without a word and a preset would run with a size left over.
"""
from __future__ import annotations

import ast
from types import ModuleType

from ..errors import StageError
from .contract import REQUIRED
from .params import Param


def has_contract(module: ModuleType, name: str) -> bool:
    """Does the module declare the whole contract, with `name` its factory (a shipped kernel or a copy of one)?"""
    return callable(getattr(module, name, None)) and all(hasattr(module, n) for n in REQUIRED)


def check_contract(name: str, module: ModuleType) -> None:
    """A shipped kernel's file declares every name of the contract and its factory is a function."""
    missing = [n for n in (name,) + REQUIRED if not hasattr(module, n)]
    if missing:
        raise StageError("definition", f"the kernel file must define {', '.join(missing)} "
                                       f"(see the original {name}.py)")
    if not callable(getattr(module, name)):
        raise StageError("definition", f"{name} must be the kernel factory function")


def declared_name(module: ModuleType, *names: str) -> str | None:
    """The first of `names` (SPACE, space) the module defines, or None."""
    return next((n for n in names if hasattr(module, n)), None)


def check_declared(module: ModuleType, source: str, kernel: str, params: list[Param],
                   others: set[str] | None = None) -> None:
    """The declarations of a file of one's own name only the parameters of its kernel `kernel` (`params`).
    In a file of several kernels the declarations may be another kernel's (kernels/gemm.py's SPACE is gemm's, not
    gemm_pipelined's): `others` is then the parameters the file's other kernels take, a name is refused only if no
    kernel of the file takes it, and presets are not checked for missing sizes. None: the declarations are this
    kernel's own (the file's one kernel, or the one named like the file)."""
    by_name = {p.name for p in params} | (others or set())
    known = ", ".join(p.name for p in params) or "none (its shapes are fixed)"
    if others is not None:
        known = f"{known} (nor does any other kernel of the file)"

    def refuse(message: str, *path) -> None:
        raise StageError("definition", message, declaration_line(source, *path))

    for names, what in ((("SPACE", "space"), "tile parameter"), (("OPTIONS", "options"), "option")):
        decl = declared_name(module, *names)
        value = getattr(module, decl, None) if decl else None
        if not value:
            continue
        if not isinstance(value, dict) or not all(hasattr(v, "__iter__") and not isinstance(v, (str, bytes, dict))
                                                  for v in value.values()):
            refuse(f"{decl} must be a dict of {what} name → list of values, like {{\"block\": [64, 128]}}", decl)
        for name in value:
            if name not in by_name:
                refuse(f"{decl} names {name!r}, which {kernel} does not take; its parameters: {known}", decl, name)
    decl = declared_name(module, "PRESETS", "presets")
    presets = getattr(module, decl, None) if decl else None
    if presets:
        if not isinstance(presets, dict) or not all(isinstance(v, dict) for v in presets.values()):
            refuse(f"{decl} must be a dict of label → sizes, like {{\"4096²\": dict(M=4096, N=4096)}}", decl)
        required = [p.name for p in params if p.required and p.name != "dtype"]
        for label, sizes in presets.items():
            for name in sizes:
                if name not in by_name:
                    refuse(f"preset {label!r} gives {name!r}, which {kernel} does not take; its parameters: "
                           f"{known}", decl, label, name)
            missing = [n for n in required if n not in sizes] if others is None else []
            if missing:
                them = "it" if len(missing) == 1 else "them"
                refuse(f"preset {label!r} gives no {', '.join(missing)}, and the source has no default for {them}: "
                       f"add {them} to the preset", decl, label)
    decl = declared_name(module, "CHECK_SHAPES", "check_shapes")
    shapes = getattr(module, decl, None) if decl else None
    if shapes:
        if not isinstance(shapes, (list, tuple)) or not all(isinstance(v, dict) for v in shapes):
            refuse(f"{decl} must be a list of sizes, like [dict(M=33)]", decl)
        for i, shape in enumerate(shapes):
            for name in shape:
                if name not in by_name:
                    refuse(f"{decl} gives {name!r}, which {kernel} does not take; its parameters: {known}",
                           decl, i, name)


def declaration_line(source: str, name: str, *path) -> int | None:
    """The line of the top-level `name = ...` in the source, or of the key (a dict's or dict(...)'s) or item that
    `path` leads to inside it, as deep as the literal goes."""
    try:
        tree = ast.parse(source)
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
