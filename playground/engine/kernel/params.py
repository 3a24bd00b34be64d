"""A kernel's parameters: what kind of value each takes, and the one converter every request's values go through.

A value comes as text (the command line's `--set N=4096`) or as JSON (the page, the API: 4096, true, "float16").
`convert` turns it into the parameter's kind or refuses it with a `parameters` error that names the parameter, the
value and what was expected: the same words for the catalogue's kernels and for a file of one's own.
"""
from __future__ import annotations

import inspect
import math
import numbers
import re
from dataclasses import dataclass
from typing import Any

from ..errors import StageError

MISSING = inspect.Parameter.empty
COMMON_DTYPES = ["float16", "bfloat16", "float32"]
DTYPE_NAMES = {"float16", "bfloat16", "float32", "float64", "float", "half", "int8", "uint8", "int16", "int32",
               "int64", "uint32", "bool", "float8_e4m3", "float8_e5m2", "float8_e4m3fn", "float8_e4m3fnuz",
               "float8_e5m2fnuz", "int4", "uint4"}
# The words a switch may be given as, in any case; nothing else is a bool (a 3 or a "maybe" is refused).
BOOL_WORDS = {"true": True, "1": True, "yes": True, "on": True, "false": False, "0": False, "no": False, "off": False}


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
    # Where its value comes from: "default" (the function's own), "autotune" (the first config), "file" (the file's
    # own call of the kernel, or a constant of its script: static.py), None (nowhere: it must be given)
    origin: str | None = None
    where: str | None = None   # for "file": which call or constant ("the call of the kernel in main(), line 30")
    use: str | None = None     # how the kernel uses it: "problem", "tile" or "switch" (static.uses), or None

    @property
    def required(self) -> bool:
        return self.default is MISSING

    def to_json(self) -> dict:
        return {"name": self.name, "kind": self.kind, "required": self.required,
                "default": None if self.required else plain(self.default), "choices": self.choices,
                "source": self.source, "origin": None if self.required else self.origin, "from": self.where,
                "use": self.use}


def plain(value: Any) -> Any:
    """A JSON value for a default: a TileLang dtype object becomes its name."""
    if value is None or isinstance(value, (bool, int, float)):
        return value
    return str(value)


def python_value(value: Any) -> Any:
    """A numpy scalar (an np.int64 from np.arange, say) as the Python value it holds: a size in a preset or a value
    in SPACE goes to JSON (the page, the compile cache's key), which takes only Python's own numbers."""
    item = getattr(value, "item", None)
    return item() if callable(item) and type(value).__module__ == "numpy" else value


def is_dtype(name: str, value: Any) -> bool:
    """Is the argument `name`, whose default is `value`, an element type (by its default's type or value, or by its
    name where it has no default)?"""
    if value is not MISSING and value is not None and type(value).__name__ == "dtype":
        return True
    if isinstance(value, str) and value in DTYPE_NAMES:
        return True
    return name == "dtype" or name.endswith("_dtype") or name.endswith("dtype") and value is MISSING


def kind_of(name: str, annotation: Any, default: Any) -> str:
    """The kind of an argument, from its annotation, else its default: "int", "float", "bool", "dtype", "str" or
    "any" (nothing says)."""
    if is_dtype(name, default):
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


def shown(value: Any, limit: int = 64) -> str:
    """A value someone sent, as Python writes it (so 1.5, '1.5' and None read apart), cut to `limit` characters:
    a value of 100,000 characters echoed back is a flood, not a message."""
    text = repr(value)
    return text if len(text) <= limit else text[:limit - 3] + "..."


def taken_as(name: str, given: Any, value: Any) -> str | None:
    """"causal='no' taken as false": a switch given as a word or a number says which value it became (a typo in
    the other direction would otherwise pass unseen). None where nothing was read into the value."""
    if isinstance(value, bool) and not isinstance(given, bool):
        return f"{name}={shown(given)} taken as {str(value).lower()}"
    return None


def refused(name: str, value: Any, expected: str) -> StageError:
    return StageError("parameters", f"{name}={shown(value)} is not {expected}")


def convert(param: Param, value: Any) -> Any:
    """`value`, from the command line (text) or the page (JSON), as the parameter's kind; a `parameters` error
    naming the parameter, the value and what was expected where it is not one. A float, a bool, null, NaN or a list
    for a size would otherwise reach the compiler."""
    kind, name = param.kind, param.name
    if kind == "dtype":
        text = str(value)
        if not re.fullmatch(r"[a-z][a-z0-9_]*", text):
            raise refused(name, value, "a dtype (float16, bfloat16, float32, ...)")
        if param.default is not MISSING and type(param.default).__name__ == "dtype":
            try:
                return type(param.default)(text)
            except Exception:
                raise refused(name, value, "a dtype TileLang knows") from None
        return text
    if kind == "bool":
        if isinstance(value, bool):
            return value
        if isinstance(value, str) and value.strip().lower() in BOOL_WORDS:
            return BOOL_WORDS[value.strip().lower()]
        raise refused(name, value, "true or false")
    if kind == "int":
        if isinstance(value, str):
            text = value.strip()
            for base in (10, 0):  # decimal first ("010" is ten), then 0x.., 0o.., 0b..
                try:
                    return int(text, base)
                except ValueError:
                    pass
        elif isinstance(value, numbers.Integral) and not isinstance(value, bool):
            return int(value)
        elif isinstance(value, numbers.Real) and not isinstance(value, bool) and math.isfinite(value) \
                and float(value).is_integer():
            return int(value)
        raise refused(name, value, "a whole number")
    if kind == "float":
        number = None
        if isinstance(value, str):
            try:
                number = float(value.strip())
            except ValueError:
                pass
        elif isinstance(value, numbers.Real) and not isinstance(value, bool):
            number = float(value)
        if number is not None and math.isfinite(number):
            return number
        raise refused(name, value, "a finite number")
    if kind == "str":
        if isinstance(value, str):
            return value
        if isinstance(value, numbers.Number):  # a JSON number for a text option: its text, which the option's
            return str(value)                  # list of values then accepts or refuses
        raise refused(name, value, "text")
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
