"""Turn kernel source text into an imported module.

TileLang's `@T.prim_func` reads the source of the function it decorates with `inspect`, so text run through `exec`
fails ("could not get source code"). We therefore write the text to a real file and import that file. The file's
path is derived from the text's hash, so the same text always lands at the same path: the `#line` directives in the
generated CUDA (and so TileLang's own kernel cache key) stay the same from one job to the next.
"""
from __future__ import annotations

import hashlib
import importlib.util
import re
import sys
from pathlib import Path
from types import ModuleType

from .errors import StageError, clip, first_line, format_exception, user_line_from_traceback


SOURCE_LIMIT = 256 * 1024  # bytes of one kernel file: a kernel is a few KiB; more is a paste gone wrong


def check_text(text: str, what: str = "the source") -> str:
    """A `python` StageError for source text over the size cap or holding a NUL (what a binary file pasted has)."""
    if len(text.encode("utf-8", "surrogatepass")) > SOURCE_LIMIT:
        raise StageError("python", f"{what} is {len(text.encode('utf-8', 'surrogatepass')) // 1024} KiB, over the "
                                   f"{SOURCE_LIMIT // 1024} KiB a kernel file may have")
    if "\0" in text:
        line = text[:text.index("\0")].count("\n") + 1
        raise StageError("python", f"{what} holds a NUL character at line {line}: it is not a text file", line)
    return text


def decode(data: bytes, what: str = "the file") -> str:
    """UTF-8 text from bytes, or a `python` StageError naming the first byte that is not UTF-8 and its line."""
    if len(data) > SOURCE_LIMIT:
        raise StageError("python", f"{what} is {len(data) // 1024} KiB, over the {SOURCE_LIMIT // 1024} KiB a kernel "
                                   "file may have")
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = data[:exc.start].count(b"\n") + 1
        raise StageError("python", f"{what} is not UTF-8 text: byte 0x{data[exc.start]:02x} at line {line} "
                                   "(save it as UTF-8)", line) from None
    return check_text(text, what)


def read_source(path: Path) -> str:
    """The text of a kernel file, checked: under the size cap, UTF-8."""
    try:
        data = Path(path).read_bytes()
    except OSError as exc:
        raise StageError("parameters", f"cannot read {path}: {exc.strerror or exc}") from None
    return decode(data, Path(path).name)


def text_hash(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def write_source(text: str, name: str, root: Path) -> Path:
    """Write `text` to `root/<hash>/<name>.py` (once) and return the path."""
    path = Path(root) / text_hash(text) / f"{name}.py"
    if not path.exists() or path.read_text() != text:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(".tmp")
        tmp.write_text(text)
        tmp.replace(path)
    return path


def write_sources(files: dict[str, str], root: Path) -> Path:
    """A small multi-file kernel: every file written to one folder (named by the hash of them all), which is put on
    sys.path when the first file, the kernel, is imported. Returns the folder."""
    if not files:
        raise StageError("python", "no source files")
    for name, text in files.items():
        if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*\.py", str(name)):
            raise StageError("parameters", f"{name!r} is not a Python module file name (like helper.py)")
        check_text(text, name)
    folder = Path(root) / text_hash("\0".join(f"{n}\0{t}" for n, t in files.items()))
    folder.mkdir(parents=True, exist_ok=True)
    for name, text in files.items():
        path = folder / name
        if not path.exists() or path.read_text() != text:
            tmp = path.with_suffix(".tmp")
            tmp.write_text(text)
            tmp.replace(path)
    return folder


def exec_module_file(path: Path, module_name: str) -> tuple[ModuleType, BaseException | None]:
    """Run the file as the module `module_name`: the module, and the exception its top-level code raised (None when
    it ran through; the module is then still in sys.modules for the caller to keep or drop). A syntax error, or the
    job's time limit firing while the user's code ran, is a `python` StageError at the user's line."""
    spec = importlib.util.spec_from_file_location(module_name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[module_name] = module  # dataclasses and TileLang look modules up by name while importing
    try:
        spec.loader.exec_module(module)
    except StageError as exc:  # the job's time limit fired while the user's code ran: say where it was
        sys.modules.pop(module_name, None)
        exc.line = exc.line or user_line_from_traceback(exc, str(path))
        raise
    except SyntaxError as exc:
        sys.modules.pop(module_name, None)
        line = max(1, exc.lineno) if exc.lineno is not None else None  # (an unknown coding: line 0 in Python)
        raise StageError("python", f"SyntaxError: {exc.msg}", line, clip(format_exception(exc))) from None
    except BaseException as exc:  # SystemExit, KeyboardInterrupt, a class of the user's own: all the user's error
        return module, exc
    return module, None


def import_failed(exc: BaseException, path: Path) -> StageError:
    """The `python` StageError for top-level code of the file at `path` that raised `exc`, at the user's line."""
    message = first_line(f"{type(exc).__name__}: {exc}")
    return StageError("python", f"importing the kernel failed: {message}", user_line_from_traceback(exc, str(path)),
                      clip(format_exception(exc)))


def import_file(path: Path, module_name: str | None = None) -> ModuleType:
    """Import a kernel file as a fresh module; a failure is a `python` StageError at the user's line."""
    path = Path(path).resolve()
    module_name = module_name or f"playground_user_{path.stem}_{text_hash(str(path))}"
    module, exc = exec_module_file(path, module_name)
    if exc is not None:
        sys.modules.pop(module_name, None)
        raise import_failed(exc, path)
    return module


def load_text(text: str, name: str, root: Path) -> ModuleType:
    return import_file(write_source(text, name, root))
