"""The warm path: compile answers kept by the server, in memory over its data folder, so that what was compiled once
is not compiled again, by anyone, before or after a restart.

Four kinds of entries, each keyed by what it depends on, all in one store (`engine/compile_cache.Store`: the data
folder's `compile-cache/`, bounded by the setting `compile_cache_bytes`, least recently used out, each file written
whole or not at all, a file that is not the entry it should be a miss), with the most recent in memory above it:

- `answer`: a compile's answer, keyed by the raw request (`request_key`): action, kernel name, the source text (the
  built-in file's text when none is sent), the parameters as sent, the target arch, the TileLang version, a
  fingerprint of the engine's own files, the shipped kernels and their tables of tuned configs (a deploy or an edit
  of the engine makes old answers unreachable), and a digest of the users' own table of tuned configs (a parameter
  the request leaves out is picked from it). Shared by everyone: the same text and parameters are one compile for
  the whole class. Two requests that differ only in spelling (`{"block_M": 64}` vs `{"block_M": "64"}`) miss each
  other: a cheap and harmless miss.
- `program`: the same key with the source's program (`compile_cache.program_of`: its tokens, comments, blank lines
  and spacing left out) in place of its text, pointing at an ok answer: an edit that only lays the text out anew is
  answered at once, its line map moved to the new lines. Private to its writer (below).
- `tir`: an ok answer again, by the TIR its kernel lowered from (`tir_key`: the job's digest of its TVMScript and
  config, the arch, TileLang's version, the engine's code), with the spans of that TIR's statements: an edit that
  changes the program but not the TIR (a docstring, the `__main__` block, a Python name the TIR does not keep) is
  answered by its job without lowering, its lines moved by pairing the two TIRs' spans. Private to its writer.
- `nvcc`: nvcc's output (PTX, SASS, ptxas's log, the cubin) for a generated CUDA text (`compile_cache.nvcc_key`),
  handed to a later compile job whose lowering made that very CUDA, which then skips nvcc and ptxas. Private to its
  writer.

Who may be served what (the threat model in README.md says why): an `answer` is whatever the job running that very
source said, so it fools only those who send that source, who would run the same code themselves. A `program`,
`tir` or `nvcc` entry is served for a text other than the one its job ran, so it is served only where its writer is
trusted by the reader: written from a job that ran no user code (the catalogue's kernel unedited: `SHARED`, served
to all), or by the reader's own earlier jobs (`writer_of`); a job that ran no user code reads `SHARED` only, since
what it makes is everyone's. No job writes the store: the server writes it, from what it decided
to keep.

Only JSON answers and nvcc's output are kept here, never anything a job loads and runs on the server. TileLang's own
kernel cache (the .so files it loads) is NOT shared between jobs: each job has a TILELANG_CACHE_DIR inside its own
folder; a cubin handed to a compile job is code that job only describes, never runs (a run compiles for itself).

Cached: successful compiles and the user errors a compile deterministically gives (python, definition, parameters,
tilelang, nvcc, resources). Never: timeouts, busy, internal errors, device errors, or anything from run/tune/sweep (a
run is a fresh measurement by definition).
"""
from __future__ import annotations

import collections
import functools
import hashlib
import importlib.metadata
import json
import threading
from pathlib import Path

from ..engine.compile_cache import Store, line_mapping, moved_lines, nvcc_output_ok, program_of

ROOT = Path(__file__).resolve().parents[2]
CACHEABLE_STAGES = {None, "python", "definition", "parameters", "tilelang", "nvcc", "resources"}
BUDGET_BYTES = 512 * 2**20  # in memory: a compile answer (CUDA, PTX, host code) is 0.1-3 MiB: a few hundred answers
FOLDER = "compile-cache"  # in the server's data folder
SHARED = "shared"  # the writer of entries made from jobs that ran no user code: served to everyone
CUT = "... (cut at "  # what job.bound_answer writes into a text it cut: such a text is never kept as nvcc's output


@functools.lru_cache(maxsize=1)
def tilelang_version() -> str:
    """(read once: the installed TileLang changes only with a restart, and the metadata's lookup is slow)"""
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


def source_text(kernel: str, source: str | None) -> str | None:
    """The text a request compiles: its source, else the catalogue's file of that name."""
    builtin = ROOT / "kernels" / f"{Path(kernel).name}.py"
    if source is None and builtin.is_file():
        return builtin.read_text()
    return source


def request_key(action: str, kernel: str, source: str | None, params: dict, arch: str, options: dict,
                tuned_digest: str = "") -> str:
    """`tuned_digest`: the server's table of the users' tuned configs for this kernel (runner._tuned_digest), which
    decides the tile a request leaves out: a tuning run that lands a new config makes the kernel's answers compiled
    before it unreachable."""
    blob = json.dumps([action, kernel, source_text(kernel, source), params, arch, options, tilelang_version(),
                       engine_fingerprint(), tuned_digest], sort_keys=True, default=str)
    return hashlib.sha256(blob.encode()).hexdigest()


def program_key(action: str, kernel: str, source: str | None, params: dict, arch: str, options: dict,
                tuned_digest: str = "") -> str | None:
    """request_key with the source's program in place of its text (None where it cannot be tokenized)."""
    text = source_text(kernel, source)
    program = program_of(text) if isinstance(text, str) else None
    if program is None:
        return None
    blob = json.dumps(["program", action, kernel, program[0], params, arch, options, tilelang_version(),
                       engine_fingerprint(), tuned_digest], sort_keys=True, default=str)
    return hashlib.sha256(blob.encode()).hexdigest()


def tir_key(digest: str, arch: str) -> str:
    """The key of an answer kept for a lowered TIR: the job's digest of it (engine/compile.tir_identity: its
    TVMScript and config), the arch the server asked for, TileLang's version and the engine's own code."""
    blob = json.dumps(["tir", digest, arch, tilelang_version(), engine_fingerprint()])
    return hashlib.sha256(blob.encode()).hexdigest()


def answer_digest(answer: dict) -> str:
    """A digest of the answer as the store gives it back (JSON: a tuple a list, a number key a string)."""
    plain = json.loads(json.dumps(answer, default=str))
    return hashlib.sha256(json.dumps(plain, sort_keys=True).encode()).hexdigest()


def writer_of(session) -> str | None:
    """Whose private entries a request reads and writes: the student the job limits count (the login's name, else
    the client's address), with the address where one person may log in under any name (a class password without a
    roster: `queue.Student.address`); None for a caller who is nobody in particular (no private entries)."""
    text = str(session or "")
    if not text or text == "anon":
        return None
    address = getattr(session, "address", None)
    return f"{text}@{address}" if address else text


def cacheable(action: str, result: dict) -> bool:
    if action != "compile" or not isinstance(result, dict):
        return False
    err = result.get("error")
    return (result.get("ok") and err is None) or (not result.get("ok") and isinstance(err, dict)
                                                    and err.get("stage") in CACHEABLE_STAGES)


def laid_out(result: dict) -> bool:
    """May this answer serve another layout of its program? An ok compile whose lines are all in fields that are
    moved (line map, warnings' lines, the PTX's line information): not one whose messages quote lines."""
    return (isinstance(result, dict) and result.get("ok") is True and result.get("error") is None
            and all(isinstance(w, dict) and w.get("stage") == "resources" for w in result.get("warnings") or []))


def relaid(answer: dict, old_source: str, new_source: str) -> dict | None:
    """`answer` (of `old_source`) for `new_source`, the same program laid out anew: its line map, its warnings'
    lines and the PTX's line information moved to the new lines. None if they are not one program."""
    old, new = program_of(old_source), program_of(new_source)
    if old is None or new is None or old[0] != new[0]:
        return None
    return moved_lines(answer, line_mapping(old[1], new[1], old_source.count("\n") + 1))


def nvcc_entry(result: dict, lowered: dict | None, made: dict | None) -> dict | None:
    """What to keep of nvcc's output from a compile job's answer: its PTX, SASS and ptxas's log, the cubin it said
    nvcc made, the user's line of each CUDA line it sent (to move the PTX's lines for another layout). None unless
    the job compiled ok, ran nvcc itself, and nothing of it was cut."""
    if not (laid_out(result) and isinstance(lowered, dict) and isinstance(made, dict)) or result.get("nvcc_reused"):
        return None
    entry = {"ptx": result.get("ptx"), "sass": result.get("sass"), "ptxas_log": result.get("ptxas_log"),
             "cubin_b64": made.get("cubin_b64"), "user_lines": lowered.get("user_lines"),
             "source_file": result.get("source_file")}
    if not (nvcc_output_ok(entry) and isinstance(entry["source_file"], str)) or not entry["cubin_b64"]:
        return None
    if any(CUT in entry[k] for k in ("ptx", "sass", "ptxas_log")) or CUT in str(lowered.get("cuda", "")):
        return None
    return entry


def _scoped(writer: str, key: str) -> str:
    """An entry's name in the store: private to `writer` (SHARED: everyone's)."""
    return hashlib.sha256(f"{writer}\n{key}".encode()).hexdigest()


class ResultCache:
    """Entries in memory (a least-recently-used dict bounded by their size as JSON) over the disk's Store (the
    server's data folder; none when `folder` is None: memory only)."""

    def __init__(self, folder: Path | None = None, disk_budget: int = 0, budget: int = BUDGET_BYTES,
                 seed: Path | None = None):
        self.budget, self.used = budget, 0
        self.items: collections.OrderedDict[tuple[str, str], tuple[str, int]] = collections.OrderedDict()
        self.lock = threading.Lock()
        self.hits = self.misses = 0
        self.served = collections.Counter()  # answers served, by how: answer, program, nvcc
        self.disk = Store(folder, disk_budget, seed) if folder is not None and disk_budget > 0 else None

    # -- the two levels ---------------------------------------------------------------------------------------------
    def _get(self, kind: str, key: str) -> dict | None:
        with self.lock:
            item = self.items.get((kind, key))
            if item is not None:
                self.items.move_to_end((kind, key))
        if item is not None:
            return json.loads(item[0])  # a fresh copy: callers may change what they get
        value = self.disk.get(kind, key) if self.disk is not None else None
        if value is not None:
            self._remember(kind, key, json.dumps(value))
        return value

    def _remember(self, kind: str, key: str, text: str) -> None:
        if len(text) > self.budget // 4:
            return
        with self.lock:
            old = self.items.pop((kind, key), None)
            if old is not None:
                self.used -= old[1]
            self.items[(kind, key)] = (text, len(text))
            self.used += len(text)
            while self.used > self.budget:
                _, (_, size) = self.items.popitem(last=False)
                self.used -= size

    def _put(self, kind: str, key: str, value: dict) -> None:
        self._remember(kind, key, json.dumps(value))
        if self.disk is not None:
            self.disk.put(kind, key, value)

    # -- answers ------------------------------------------------------------------------------------------------------
    def get(self, key: str) -> dict | None:
        hit = self._get("answer", key)
        with self.lock:
            if hit is None:
                self.misses += 1
            else:
                self.hits += 1
                self.served["answer"] += 1
        return hit

    def put(self, key: str, result: dict) -> None:
        self._put("answer", key, result)

    # -- entries that point at an answer (programs, TIRs) ----------------------------------------------------------
    def _pointing(self, kind: str, key: str, readers: list[str], field: str, field_type: type):
        """For each of `readers` in turn (SHARED first), its entry of `kind` for `key` that points at an answer which
        may serve another layout (laid_out), with `field` of `field_type` beside: (entry, answer)."""
        for reader in readers:
            entry = self._get(kind, _scoped(reader, key))
            if not (isinstance(entry, dict) and isinstance(entry.get("answer"), str)
                    and isinstance(entry.get(field), field_type)):
                continue
            answer = self._get("answer", entry["answer"])
            if laid_out(answer):
                yield entry, answer

    # -- programs -------------------------------------------------------------------------------------------------
    def get_program(self, pkey: str, readers: list[str], source: str) -> dict | None:
        """The answer of the same program laid out another way, written by one of `readers` (SHARED first), with
        its lines moved to `source`'s; None if there is none."""
        for entry, answer in self._pointing("program", pkey, readers, "source", str):
            moved = relaid(answer, entry["source"], source)
            if moved is not None:
                with self.lock:
                    self.hits += 1
                    self.served["program"] += 1
                return moved
        return None

    def put_program(self, pkey: str, writer: str, answer_key: str, source: str) -> None:
        self._put("program", _scoped(writer, pkey), {"answer": answer_key, "source": source})

    # -- lowered TIRs ---------------------------------------------------------------------------------------------
    def get_tir(self, tkey: str, readers: list[str]) -> dict | None:
        """{"answer", "spans"}: an ok answer kept for the same TIR by one of `readers` (SHARED first), and the spans
        of the TIR it was lowered from (the job that asks moves its lines: engine/compile._lowered_before)."""
        for entry, answer in self._pointing("tir", tkey, readers, "spans", list):
            # the answer key is everyone's (the request's): only the very answer the entry's writer kept will do
            if entry.get("digest") == answer_digest(answer):
                with self.lock:
                    self.served["tir"] += 1
                return {"answer": answer, "spans": entry["spans"]}
        return None

    def put_tir(self, tkey: str, writer: str, answer_key: str, answer: dict, spans: list) -> None:
        self._put("tir", _scoped(writer, tkey), {"answer": answer_key, "digest": answer_digest(answer),
                                                 "spans": spans})

    # -- nvcc's outputs ---------------------------------------------------------------------------------------------
    def get_nvcc(self, nkey: str, readers: list[str]) -> dict | None:
        for reader in readers:
            entry = self._get("nvcc", _scoped(reader, nkey))
            if nvcc_output_ok(entry) and isinstance(entry.get("source_file"), str):
                with self.lock:
                    self.served["nvcc"] += 1
                return entry
        return None

    def put_nvcc(self, nkey: str, writer: str, entry: dict) -> None:
        self._put("nvcc", _scoped(writer, nkey), entry)

    # -- the whole ------------------------------------------------------------------------------------------------
    def clear(self) -> None:
        with self.lock:
            self.items.clear()
            self.used = 0
        if self.disk is not None:
            self.disk.clear()

    def snapshot(self) -> dict:
        with self.lock:
            out = {"entries": len(self.items), "bytes": self.used, "hits": self.hits, "misses": self.misses,
                   "served": dict(self.served)}
        out["disk"] = self.disk.snapshot() if self.disk is not None else None
        return out
