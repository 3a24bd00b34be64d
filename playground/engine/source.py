"""Turn kernel source text into an imported module.

TileLang's `@T.prim_func` reads the source of the function it decorates with `inspect`, so text run through `exec`
fails ("could not get source code"). We therefore write the text to a real file and import that file. The file's
path is derived from the text's hash, so the same text always lands at the same path: the `#line` directives in the
generated CUDA (and so TileLang's own kernel cache key) stay the same from one job to the next.
"""
from __future__ import annotations

import hashlib
import importlib.util
import sys
from pathlib import Path
from types import ModuleType

from .errors import StageError, clip, first_line, format_exception, user_line_from_traceback


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


def import_file(path: Path, module_name: str | None = None) -> ModuleType:
    """Import a kernel file as a fresh module; a failure is a `python` StageError at the user's line."""
    path = Path(path).resolve()
    module_name = module_name or f"playground_user_{path.stem}_{text_hash(str(path))}"
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
        raise StageError("python", f"SyntaxError: {exc.msg}", exc.lineno, clip(format_exception(exc))) from None
    except (Exception, SystemExit) as exc:
        sys.modules.pop(module_name, None)
        line = user_line_from_traceback(exc, str(path))
        message = first_line(f"{type(exc).__name__}: {exc}")
        raise StageError("python", f"importing the kernel failed: {message}", line,
                         clip(format_exception(exc))) from None
    return module


def load_text(text: str, name: str, root: Path) -> ModuleType:
    return import_file(write_source(text, name, root))
