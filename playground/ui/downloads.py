"""The files the page offers for download (the edited source, the generated CUDA, a profile's Nsight Compute report,
the teacher's exports): written here only, where only the server's user can read them, one folder per student, and
removed when they are old or the server stops.

Gradio copies a returned file into its own cache when it answers, so ours is needed only for moments: anything older
than KEEP_SECONDS is removed at the next write, and the whole folder at exit.
"""
from __future__ import annotations

import atexit
import hashlib
import os
import shutil
import tempfile
import threading
import time
from pathlib import Path

KEEP_SECONDS = 600.0

_root: Path | None = None
_lock = threading.Lock()


def root() -> Path:
    """This server's download folder: mode 0700 (mkdtemp), removed at exit."""
    global _root
    with _lock:
        if _root is None or not _root.is_dir():
            _root = Path(tempfile.mkdtemp(prefix="tilelang-playground-downloads-"))
            atexit.register(shutil.rmtree, _root, True)
        return _root


def prune(now: float | None = None) -> None:
    """Remove downloads older than KEEP_SECONDS, and student folders left empty."""
    now = time.time() if now is None else now
    for folder in root().iterdir():
        for f in folder.iterdir():
            try:
                if now - f.stat().st_mtime > KEEP_SECONDS:
                    f.unlink()
            except OSError:
                pass
        try:
            folder.rmdir()  # only if empty
        except OSError:
            pass


def write(student: str | None, filename: str, data: str | bytes | None) -> str:
    """Write a download for `student` (gateway.student_of): text (UTF-8) or bytes; return its path."""
    prune()
    folder = root() / hashlib.sha256((student or "anon").encode()).hexdigest()[:16]
    folder.mkdir(mode=0o700, exist_ok=True)
    name = Path(filename).name  # a name an answer gave (a profile's report) must not leave the folder
    path = folder / (name if name not in ("", ".", "..") else "download")
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "wb") as f:
        f.write(data if isinstance(data, bytes) else (data or "").encode())
    return str(path)
