"""Where the playground keeps what it can reuse: edited sources and compile results, keyed by what they depend on."""
from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

from ..settings import current as current_settings

FORMAT = 1  # bump when the shape of a cached compile result changes


def cache_dir() -> Path:
    """The `cache_dir` setting of this process (a job's worker installs its job's own folder)."""
    path = current_settings().cache_dir
    path.mkdir(parents=True, exist_ok=True)
    return path


def _engine_version() -> str:
    """A hash of the engine's own code that shapes a cached result, so an upgrade never serves a stale line map."""
    here = Path(__file__).resolve().parent
    text = "".join((here / name).read_text() for name in ("compile.py", "compile_cache.py"))
    return hashlib.sha256(text.encode()).hexdigest()[:12]


ENGINE_VERSION = _engine_version()


def key(*parts) -> str:
    """A stable hash of JSON-able parts (source text, parameters, target, versions) and of the engine's code."""
    blob = json.dumps([FORMAT, ENGINE_VERSION, *parts], sort_keys=True, default=str)
    return hashlib.sha256(blob.encode()).hexdigest()


def get(kind: str, k: str) -> dict | None:
    path = cache_dir() / kind / f"{k}.json"
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None


def put(kind: str, k: str, value: dict) -> None:
    folder = cache_dir() / kind
    folder.mkdir(parents=True, exist_ok=True)
    tmp = folder / f".{k}.{os.getpid()}.tmp"
    tmp.write_text(json.dumps(value))
    tmp.replace(folder / f"{k}.json")
