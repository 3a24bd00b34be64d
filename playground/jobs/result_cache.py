"""The warm path: compile answers kept in the server, keyed by the raw request, so a repeated edit costs no process.

The key is made from what the request says, never from what importing the user's code would say (the server must
not import it): action, kernel name, the source text (the built-in file's text when none is sent), the parameters
as sent, the target arch, the TileLang version, a fingerprint of the engine's own files, the shipped kernels and
their tables of tuned configs (a deploy or an edit of the engine makes old answers unreachable), and a digest of the
users' own table of tuned configs (a parameter the request leaves out is picked from it). Two requests that differ only in
spelling (`{"block_M": 64}` vs `{"block_M": "64"}`) miss each other: a cheap and harmless miss.

Only JSON answers are kept here, never compiled code. TileLang's own kernel cache (the .so files it loads) is NOT
shared between jobs at all: each job has a TILELANG_CACHE_DIR inside its own folder. Per browser session would save
the recompiles of a repeated "run", but a shared writable .so cache is code that the next job loads; per job is the
only layout where nothing one job wrote is ever loaded by another, and pre-started workers (which exist before the
session they will serve is known) can be sandboxed with a fixed folder. What a repeated compile needs comes from
here; a run recompiles (its compile is a few seconds beside the timing).

Cached: successful compiles and the user errors a compile deterministically gives (python, definition, parameters,
tilelang, nvcc). Never: timeouts, busy, internal errors, device errors, or anything from run/tune/sweep (a run is a
fresh measurement by definition).
"""
from __future__ import annotations

import collections
import hashlib
import importlib.metadata
import json
import threading
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
CACHEABLE_STAGES = {None, "python", "definition", "parameters", "tilelang", "nvcc"}
BUDGET_BYTES = 512 * 2**20  # a compile answer (CUDA, PTX, host code) is 0.1-3 MiB: a few hundred answers


def tilelang_version() -> str:
    try:
        return importlib.metadata.version("tilelang")
    except importlib.metadata.PackageNotFoundError:
        return "?"


_fingerprint: str | None = None


def engine_fingerprint() -> str:
    global _fingerprint
    if _fingerprint is None:
        h = hashlib.sha256()
        # The engine's code and the shipped kernels' modules (a kernel file may import its neighbours).
        # The shipped tables of tuned configs (kernels/tuned/) decide the tile a request leaves out, as the code does.
        for path in [*sorted((ROOT / "playground" / "engine").glob("*.py")), *sorted((ROOT / "kernels").glob("*.py")),
                     *sorted((ROOT / "kernels" / "tuned").glob("*.json"))]:
            h.update(path.name.encode() + path.read_bytes())
        _fingerprint = h.hexdigest()[:16]
    return _fingerprint


def request_key(action: str, kernel: str, source: str | None, params: dict, arch: str, options: dict,
                tuned_digest: str = "") -> str:
    """`tuned_digest`: the server's table of the users' tuned configs for this kernel (runner._tuned_digest), which
    decides the tile a request leaves out: a tuning run that lands a new config makes the kernel's answers compiled
    before it unreachable."""
    builtin = ROOT / "kernels" / f"{Path(kernel).name}.py"
    if source is None and builtin.is_file():
        source = builtin.read_text()
    blob = json.dumps([action, kernel, source, params, arch, options, tilelang_version(), engine_fingerprint(),
                       tuned_digest], sort_keys=True, default=str)
    return hashlib.sha256(blob.encode()).hexdigest()


def cacheable(action: str, result: dict) -> bool:
    if action != "compile" or not isinstance(result, dict):
        return False
    err = result.get("error")
    return (result.get("ok") and err is None) or (not result.get("ok") and isinstance(err, dict)
                                                    and err.get("stage") in CACHEABLE_STAGES)


class ResultCache:
    """A least-recently-used dict of answers, bounded by their size as JSON."""

    def __init__(self, budget: int = BUDGET_BYTES):
        self.budget, self.used = budget, 0
        self.items: collections.OrderedDict[str, tuple[str, int]] = collections.OrderedDict()
        self.lock = threading.Lock()
        self.hits = self.misses = 0

    def get(self, key: str) -> dict | None:
        with self.lock:
            item = self.items.get(key)
            if item is None:
                self.misses += 1
                return None
            self.items.move_to_end(key)
            self.hits += 1
        return json.loads(item[0])  # a fresh copy: callers may change what they get

    def put(self, key: str, result: dict) -> None:
        text = json.dumps(result)
        if len(text) > self.budget // 4:
            return
        with self.lock:
            if key in self.items:
                self.used -= self.items.pop(key)[1]
            self.items[key] = (text, len(text))
            self.used += len(text)
            while self.used > self.budget:
                _, (_, size) = self.items.popitem(last=False)
                self.used -= size

    def clear(self) -> None:
        with self.lock:
            self.items.clear()
            self.used = 0

    def snapshot(self) -> dict:
        with self.lock:
            return {"entries": len(self.items), "bytes": self.used, "hits": self.hits, "misses": self.misses}
