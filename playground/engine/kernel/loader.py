"""Loading a kernel: from the catalogue's name, a path, or source text, to a Kernel.

Which kind of kernel a file is gets decided in one place, `kernel_of`: a file with the catalogue's whole contract
(contract.py), its factory named like the file, is read as the catalogue reads its own (a `Kernel`); any other
TileLang file is a `UserKernel` (inferred.py), its kernel the entry asked for.

Code under `if __name__ == "__main__":` is not run: a file is imported under another module name. Code outside
functions is; where it fails after the kernels are defined (a script that needs a GPU the compile server lacks,
say), the kernels defined before it are used and the failure is reported as a warning.
"""
from __future__ import annotations

import ast
import os
import sys
from pathlib import Path
from types import ModuleType

from ..errors import StageError, clip, first_line, format_exception, quoted, user_line_from_traceback
from ..source import (check_text, exec_module_file, import_failed, import_file, read_source, text_hash, write_source,
                      write_sources)
from .contract import Kernel
from .declarations import check_contract, has_contract
from .inferred import UserKernel, choose_entry, find_entries, read_file_values
from .words import CATALOGUE_FILE, KERNELS_DIR


# -- the catalogue: its names and their files ---------------------------------------------------------------------
def builtin_names() -> list[str]:
    """The catalogue's kernel names, in its order (the literal CATALOGUE list of kernels/__init__.py)."""
    for node in ast.parse(CATALOGUE_FILE.read_text()).body:
        targets = node.targets if isinstance(node, ast.Assign) else [node.target] if isinstance(
            node, ast.AnnAssign) else []
        if any(isinstance(t, ast.Name) and t.id == "CATALOGUE" for t in targets) and node.value is not None:
            return [str(name) for name in ast.literal_eval(node.value)]
    raise StageError("internal", f"{CATALOGUE_FILE} has no CATALOGUE list of the kernels' names")


def builtin_path(name: str) -> Path:
    """The catalogue kernel's own file; a `parameters` error for a name the catalogue does not have."""
    names = builtin_names()
    if name not in names:
        raise StageError("parameters", f"no kernel named {quoted(name)}; the catalogue has {', '.join(names)}")
    return KERNELS_DIR / f"{name}.py"


def builtin_source(name: str) -> str:
    return builtin_path(name).read_text()


def is_builtin_file(name: str, path: Path) -> bool:
    """Is `path` the catalogue's own file of the kernel `name` (not an edited copy, not another file)?"""
    return name in builtin_names() and Path(path).resolve() == (KERNELS_DIR / f"{name}.py").resolve()


def is_path(name: str) -> bool:
    """Does the command line's kernel argument name a file rather than a catalogue kernel?"""
    return bool(name) and (name.endswith(".py") or "/" in name or os.sep in name)


def load(name: str, source: str | dict[str, str] | None = None, workdir: Path | None = None,
         entry: str | None = None) -> Kernel:
    """A kernel from one of:
    - `name` of the catalogue, its own file (`source` None) or an edited copy (`source` text);
    - `name` a path to any TileLang file (the command line), `source` None;
    - `source` text (or {file name: text} for a kernel with helper modules, the kernel's file first) with `name`
      "" or the kernel's name: written under `workdir` and loaded.
    `entry` picks one of several kernels in a file."""
    builtins = builtin_names()
    if source is None:
        if name in builtins:
            return load_file(name, builtin_path(name))
        if is_path(name):
            path = Path(name)
            if not path.is_file():
                raise StageError("parameters", f"no file {name}")
            return load_user_file(path, entry)
        raise StageError("parameters", f"no kernel named {quoted(name)}; the catalogue has {', '.join(builtins)}; "
                                       "or give the path of a TileLang file, or its source")
    root = Path(workdir) if workdir else sources_dir()
    if isinstance(source, dict):
        files = {str(k): v for k, v in source.items()}
        if not all(isinstance(v, str) for v in files.values()):
            raise StageError("parameters", "each source file must be text")
        folder = write_sources(files, root)
        return load_user_file(folder / next(iter(files)), entry or (name or None))
    if not isinstance(source, str):
        raise StageError("parameters", "the source must be text")
    check_text(source)
    if name in builtins:
        if source == builtin_path(name).read_text():
            return load_file(name, builtin_path(name))
        return load_file(name, write_source(source, name, root), entry)
    stem = name if name.isidentifier() else "kernel"
    return load_user_file(write_source(source, stem, root), entry or (name or None))


def sources_dir() -> Path:
    """Where source text sent without a folder of its own is written: the cache folder's sources/."""
    from ..compile_cache import cache_dir
    return cache_dir() / "sources"


def load_file(name: str, path: Path, entry: str | None = None) -> Kernel:
    """The kernel `name` from the file at `path`: the catalogue's own file (which must have the whole contract), an
    edited copy of one, or any other TileLang file (whose kernel `entry`, else `name`, is used)."""
    path = Path(path).resolve()
    if is_builtin_file(name, path):
        module = import_file(path, f"kernels.{name}")
        check_contract(name, module)
        return Kernel(name, module, path, path.read_text())
    module, warning = import_user_module(path)
    return kernel_of(module, path, entry or name or None, warning)


def load_user_file(path: Path, entry: str | None = None) -> Kernel:
    """The kernel `entry` (or the only one, or the one named like the file) of the TileLang file at `path`."""
    path = Path(path).resolve()
    read_source(path)  # the size cap and UTF-8, checked before any of it runs
    module, warning = import_user_module(path)
    return kernel_of(module, path, entry, warning)


def kernel_of(module: ModuleType, path: Path, entry: str | None = None, warning: dict | None = None) -> Kernel:
    """The kernel `entry` of an imported file, and the one decision of its kind: with the catalogue's whole contract
    and its factory named like the file (a copy of a shipped kernel), the entry asked none or that factory, it is a
    Kernel read as the catalogue reads its own; otherwise a UserKernel, its declarations checked."""
    path = Path(path).resolve()
    stem = path.stem
    if entry in (None, stem) and has_contract(module, stem):
        return Kernel(stem, module, path, path.read_text(), import_warning=warning)
    entries = find_entries(module, path)
    source = path.read_text()
    # (which kernel the file's own script calls first: read only where the request and the file name do not say)
    first = (read_file_values(source, entries, next(iter(entries))).first_called
             if len(entries) > 1 and entry not in entries and stem not in entries else None)
    chosen, why = choose_entry(entries, entry, stem, first)
    kernel = UserKernel(chosen.name, module, path, source, import_warning=warning, entry=chosen,
                        entries=entries, picked=why)
    kernel.check_declarations()
    return kernel


def import_user_module(path: Path) -> tuple[ModuleType, dict | None]:
    """Import the file with its folder on sys.path (so helper modules beside it import). Top-level code that fails
    after the kernels are defined gives a warning, not an error: the kernels defined above it are used."""
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
        raise missing_module(exc, path) or import_failed(exc, path)
    return module, None


# A module's import name → the package that installs it, where the two differ
PACKAGES = {"sklearn": "scikit-learn", "cv2": "opencv-python", "yaml": "pyyaml", "PIL": "pillow",
            "flash_attn": "flash-attn", "triton": "triton", "fla": "flash-linear-attention"}


def missing_module(exc: BaseException, path: Path) -> StageError | None:
    """A file importing a module this server lacks: which package to install, at the line of the import."""
    if not isinstance(exc, ModuleNotFoundError) or not exc.name:
        return None
    top = exc.name.split(".")[0]
    package = PACKAGES.get(top, top.replace("_", "-"))
    return StageError("python", f"the file imports {exc.name}, which is not installed on this server: it comes "
                                f"with the package {package} (pip install {package}; on a class server, ask for it "
                                "to be added to requirements.txt)", user_line_from_traceback(exc, str(path)),
                      clip(format_exception(exc)))
