"""Where the playground keeps what it can reuse, keyed by what it depends on.

- `get`/`put`: this process's own cache folder (`cache_dir`: the command line's; a job's is inside its own folder):
  compile results, the GPU's ceilings.
- `Store`: a folder of JSON entries bounded in bytes, least recently used out, each written whole or not at all (a
  temporary file renamed over), a file that cannot be read back as the entry it should be a miss (and removed),
  never an error. The job layer's compile cache in the server's data folder is one (jobs/result_cache.py).
- `nvcc_key`: what nvcc's output for a generated CUDA text depends on: that text without its `#line` directives,
  nvcc's flags and target, TileLang's version (whose nvcc and headers compile it). An edit that leaves the CUDA as
  it was (a comment, a rename of a Python name, a blank line) has the same key: nvcc and ptxas need not run again.
- `NVCC_FIELDS` / `nvcc_output_ok`: what a kept nvcc output holds, checked wherever one is read.
- `program_of` / `line_mapping`: a Python source as a program, its tokens without comments, blank lines, line breaks
  inside brackets and the spacing between tokens; two sources with the same program differ in how they are laid
  out only, and `line_mapping` says where each line of the one went in the other. Read with `tokenize`, never run.
- `remap_loc`: the PTX's line information (`.loc`, `inlined_at`) moved to the lines of the edited source;
  `moved_lines`: every line of a compile's answer moved so (its line map, its warnings, its PTX).
- `span_mapping`: where each line of one source went in another whose kernel lowers to the same TIR (a docstring, a
  helper's name, the `__main__` block edited), from the spans of the two TIRs' statements taken in one order
  (compile.tir_identity).
"""
from __future__ import annotations

import collections
import hashlib
import io
import json
import os
import re
import threading
import tokenize
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
        value = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    return value if isinstance(value, dict) else None


def put(kind: str, k: str, value: dict) -> None:
    folder = cache_dir() / kind
    folder.mkdir(parents=True, exist_ok=True)
    tmp = folder / f".{k}.{os.getpid()}.{threading.get_ident()}.tmp"
    tmp.write_text(json.dumps(value))
    tmp.replace(folder / f"{k}.json")


# -- a bounded store on disk ---------------------------------------------------------------------------------------
_KEY = re.compile(r"[0-9a-f]{64}")
_KIND = re.compile(r"[a-z][a-z0-9_]{0,31}")


class Store:
    """JSON entries in `folder`/<kind>/<key>.json, `budget` bytes in all, the least recently used removed first.

    An entry is written to a temporary file and renamed over its name, so a reader sees the whole entry or none;
    each file holds its kind and key beside the value, so a file that is cut, changed or put under another name is
    told apart from an entry and read as a miss (and removed). Recency is the file's modification time (touched on
    each read), so it outlives a restart. The folder is the server's own (0700): jobs never see it.

    `seed`: a folder of entries made ahead of time, read-only (the image's, made at its build from the shipped
    kernels): an entry missing here is looked up there, checked as any entry is, and copied here."""

    ENTRY_FORMAT = 1

    def __init__(self, folder: Path, budget: int, seed: Path | None = None):
        self.folder = Path(folder)
        self.seed = Path(seed) if seed is not None else None
        self.budget = max(0, int(budget))
        self.lock = threading.Lock()
        self.index: collections.OrderedDict[str, int] = collections.OrderedDict()  # "kind/key" → bytes, oldest first
        self.used = 0
        self.hits = self.misses = self.writes = self.corrupt = self.seeded = 0
        self._scan()

    def _scan(self) -> None:
        found = []
        try:
            kinds = [d for d in self.folder.iterdir() if d.is_dir() and _KIND.fullmatch(d.name)]
        except OSError:
            kinds = []
        for folder in kinds:
            try:
                files = list(os.scandir(folder))
            except OSError:
                continue
            for f in files:
                try:
                    if f.name.endswith(".tmp"):  # a write that a stop cut short
                        os.unlink(f.path)
                    elif f.name.endswith(".json") and _KEY.fullmatch(f.name[:-5]):
                        st = f.stat()
                        found.append((st.st_mtime, f"{folder.name}/{f.name[:-5]}", st.st_size))
                except OSError:
                    continue
        with self.lock:
            for _, name, size in sorted(found):
                self.index[name] = size
                self.used += size
            self._evict()

    def _path(self, kind: str, key: str) -> Path:
        if not (_KIND.fullmatch(kind) and _KEY.fullmatch(key)):
            raise ValueError(f"not a cache entry's name: {kind!r}/{key!r}")
        return self.folder / kind / f"{key}.json"

    def _evict(self) -> None:
        """(with the lock held) Remove the least recently used entries until the store fits its budget."""
        while self.used > self.budget and self.index:
            name, size = self.index.popitem(last=False)
            self.used -= size
            try:
                os.unlink(self.folder / f"{name}.json")
            except OSError:
                pass

    def _forget(self, name: str, remove: bool) -> None:
        with self.lock:
            size = self.index.pop(name, None)
            if size is not None:
                self.used -= size
        if remove:
            try:
                os.unlink(self.folder / f"{name}.json")
            except OSError:
                pass

    def get(self, kind: str, key: str) -> dict | None:
        """The entry's value, or None: absent, unreadable, or not the entry its name says (then it is removed)."""
        path, name = self._path(kind, key), f"{kind}/{key}"
        try:
            data = path.read_bytes()
        except OSError:
            self._forget(name, remove=False)
            value = self._from_seed(kind, key)
            with self.lock:
                if value is None:
                    self.misses += 1
                else:
                    self.hits += 1
                    self.seeded += 1
            return value
        entry = self._entry(data, kind, key)
        if entry is None:
            self._forget(name, remove=True)
            with self.lock:
                self.misses += 1
                self.corrupt += 1
            return None
        try:
            os.utime(path)
        except OSError:
            pass
        with self.lock:
            self.hits += 1
            if name in self.index:
                self.index.move_to_end(name)
            else:  # written by another process since the scan
                self.index[name] = len(data)
                self.used += len(data)
                self._evict()
        return entry["value"]

    def _entry(self, data: bytes, kind: str, key: str) -> dict | None:
        """The file's entry, if it is the entry of this kind and key (a cut, changed or renamed file is not)."""
        try:
            entry = json.loads(data)
        except (ValueError, RecursionError, UnicodeDecodeError):
            return None
        ok = (isinstance(entry, dict) and entry.get("format") == self.ENTRY_FORMAT and entry.get("kind") == kind
              and entry.get("key") == key and isinstance(entry.get("value"), dict))
        return entry if ok else None

    def _from_seed(self, kind: str, key: str) -> dict | None:
        """The seed's entry for kind/key, copied into this store; None where the seed has none (or not a whole one)."""
        if self.seed is None:
            return None
        try:
            data = (self.seed / kind / f"{key}.json").read_bytes()
        except OSError:
            return None
        entry = self._entry(data, kind, key)
        if entry is None:
            return None
        self.put(kind, key, entry["value"])
        return entry["value"]

    def put(self, kind: str, key: str, value: dict) -> bool:
        """Keep `value` (False: larger than half the budget, or the disk refused it)."""
        path, name = self._path(kind, key), f"{kind}/{key}"
        data = json.dumps({"format": self.ENTRY_FORMAT, "kind": kind, "key": key, "value": value}).encode()
        if len(data) > self.budget // 2:
            return False
        tmp = path.with_name(f".{key}.{os.getpid()}.{threading.get_ident()}.tmp")
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            os.chmod(self.folder, 0o700)
            with open(tmp, "wb") as f:
                f.write(data)
                f.flush()
                os.fsync(f.fileno())
            os.replace(tmp, path)
        except OSError:
            try:
                os.unlink(tmp)
            except OSError:
                pass
            return False
        with self.lock:
            old = self.index.pop(name, None)
            if old is not None:
                self.used -= old
            self.index[name] = len(data)
            self.used += len(data)
            self.writes += 1
            self._evict()
        return True

    def clear(self) -> None:
        """Remove every entry (those another process wrote into the folder too)."""
        with self.lock:
            self.index, self.used = collections.OrderedDict(), 0
            for path in self.folder.glob("*/*.json"):
                if _KIND.fullmatch(path.parent.name) and _KEY.fullmatch(path.stem):
                    try:
                        os.unlink(path)
                    except OSError:
                        pass

    def snapshot(self) -> dict:
        with self.lock:
            return {"entries": len(self.index), "bytes": self.used, "budget": self.budget, "hits": self.hits,
                    "misses": self.misses, "writes": self.writes, "corrupt": self.corrupt, "seeded": self.seeded}


# -- what nvcc's output depends on --------------------------------------------------------------------------------
NVCC_FORMAT = 2  # bump when the shape of a kept nvcc output changes (2: user_lines in place of the line map)
NVCC_FIELDS = {"ptx": str, "sass": str, "ptxas_log": str, "cubin_b64": str, "user_lines": list}


def nvcc_output_ok(entry) -> bool:
    """Is `entry` nvcc's output as kept: its PTX, SASS, ptxas's log and cubin as text, and for each CUDA line the
    user's line nvcc counted it as (engine/compile.nvcc_user_lines: an int, or None)?"""
    return (isinstance(entry, dict) and all(isinstance(entry.get(k), t) for k, t in NVCC_FIELDS.items())
            and all(n is None or type(n) is int for n in entry["user_lines"]))


def nvcc_key(cuda: str, nvcc: dict, tilelang_version: str) -> str:
    """The key of nvcc's output for the CUDA text `cuda` (its `#line` directives taken out), compiled with `nvcc`
    ({"format", "arch", "options"}: what TileLang handed nvcc, the job's temporary folders left out)."""
    blob = json.dumps(["nvcc", NVCC_FORMAT, cuda, nvcc, tilelang_version], sort_keys=True, default=str)
    return hashlib.sha256(blob.encode()).hexdigest()


# -- a source as a program -------------------------------------------------------------------------------------------
_LAYOUT = {tokenize.COMMENT, tokenize.NL, tokenize.ENCODING, tokenize.ENDMARKER}
_STRUCTURE = {tokenize.INDENT, tokenize.DEDENT, tokenize.NEWLINE}  # their text is spacing: only their place counts


def program_of(source: str) -> tuple[str, list[tuple[int, int]]] | None:
    """(a digest of the source's tokens, where each token starts) or None where Python cannot tokenize it.

    Comments, blank lines, line breaks inside brackets, the spacing between tokens and the depth of indentation are
    left out; every other token counts with its text. Two sources with one digest are one program laid out two
    ways (a docstring, a string or a name that changed is another program)."""
    tokens, starts = [], []
    try:
        for t in tokenize.generate_tokens(io.StringIO(source).readline):
            if t.type in _LAYOUT:
                continue
            tokens.append([t.type, "" if t.type in _STRUCTURE else t.string])
            starts.append(t.start)
    except (tokenize.TokenError, SyntaxError, ValueError, RecursionError, MemoryError):
        return None
    return hashlib.sha256(json.dumps(tokens).encode()).hexdigest(), starts


def line_mapping(old: list[tuple[int, int]], new: list[tuple[int, int]], lines: int = 0) -> dict[int, int]:
    """{a line of the old source: its line in the new one}, from the starts of the same program's tokens in each (a
    line goes where its first token went). A line without a token (a comment, a blank line: TileLang's spans name
    one at times) goes with the next line that has one, keeping its distance; `lines`: the old source's count."""
    out: dict[int, int] = {}
    for (old_line, _), (new_line, _) in zip(old, new):
        out.setdefault(old_line, new_line)
    anchor = None
    for line in range(max([lines, *out]) if out else 0, 0, -1):
        if line in out:
            anchor = line
        elif anchor is not None:
            out[line] = max(1, out[anchor] - (anchor - line))
        elif out:  # after the last token: from the last line that has one
            last = max(out)
            out[line] = out[last] + (line - last)
    return out


_PTX_FILE = re.compile(r'^\s*\.file\s+(\d+)\s+"([^"]*)"', re.M)
_PTX_LOC = re.compile(r"(\.loc\s+|inlined_at\s+)(\d+)(\s+)(\d+)")


def remap_loc(ptx: str, user_file: str, mapping: dict[int, int]) -> str:
    """`ptx` with the line of each `.loc` and `inlined_at` in the file named like `user_file` moved by `mapping`
    (the PTX's line information, as nvcc wrote it from the CUDA's `#line` directives)."""
    name = os.path.basename(user_file)
    files = {m.group(1) for m in _PTX_FILE.finditer(ptx)
             if m.group(2) == user_file or os.path.basename(m.group(2)) == name}
    if not files or not mapping:
        return ptx

    def move(m: re.Match) -> str:
        if m.group(2) not in files:
            return m.group(0)
        line = int(m.group(4))
        return f"{m.group(1)}{m.group(2)}{m.group(3)}{mapping.get(line, line)}"
    return _PTX_LOC.sub(move, ptx)


def moved_lines(answer: dict, moved: dict[int, int]) -> dict:
    """`answer` with each of its lines in the user's file moved by `moved` (old line → new line, through its `get`:
    a mapping may place lines it does not name): its line map, its warnings' lines and the PTX's line information
    (a line `moved.get` does not place: None in the line map and the warnings, kept in the PTX)."""
    out = dict(answer)
    out["line_map"] = [moved.get(n) if isinstance(n, int) else n for n in answer.get("line_map") or []]
    out["warnings"] = [{**w, "line": moved.get(w["line"])} if isinstance(w, dict) and isinstance(w.get("line"), int)
                       else w for w in answer.get("warnings") or []]
    if isinstance(answer.get("ptx"), str) and isinstance(answer.get("source_file"), str):
        out["ptx"] = remap_loc(answer["ptx"], answer["source_file"], moved)
    return out


def answer_lines(answer: dict) -> set[int]:
    """The lines of the user's file an answer names where the page shows them: its line map and its warnings."""
    return ({n for n in answer.get("line_map") or [] if type(n) is int}
            | {w["line"] for w in answer.get("warnings") or [] if isinstance(w, dict) and type(w.get("line")) is int})


def renamed_file(ptx, old_file: str, new_file: str):
    """`ptx` with its `.file` entry for `old_file` naming `new_file` (the PTX of one job's file, for another's)."""
    if not isinstance(ptx, str) or old_file == new_file:
        return ptx
    return _PTX_FILE.sub(lambda m: m.group(0).replace(f'"{old_file}"', json.dumps(new_file))
                         if m.group(2) == old_file else m.group(0), ptx)


class SpanMoves(dict):
    """{old line: new line} of the lines two TIRs' spans pair; `get` of a line no span names goes with the next paired
    line after it, keeping its distance (after the last one: with the last), as line_mapping moves a line without a
    token. (Used only for the PTX's line information, which at times names a line no statement starts on, an
    `else:`: every line of the line map and the warnings must be paired, compile._lowered_before.)"""

    def get(self, line, default=None):
        if line in self:
            return self[line]
        if not isinstance(line, int):
            return default
        if not self:  # no statement of the user's file: nothing of it to move
            return line
        after = [n for n in self if n > line]
        if after:
            n = min(after)
            return max(1, self[n] - (n - line))
        n = max(self)
        return self[n] + (line - n)


def span_mapping(old: list, new: list) -> SpanMoves | None:
    """{a line of the old source: its line in the new one} from the spans of two TIRs that are one TIR
    (compile.tir_identity: [file, line] per statement and buffer, file "" for the user's own, None where TileLang
    kept no span), or None where they cannot be paired: another count, another file, a kernel module's line that
    moved (its quoted lines would be stale), or one old line that went to two new ones (a line split in two)."""
    if not (isinstance(old, list) and isinstance(new, list)) or len(old) != len(new):
        return None
    out = SpanMoves()
    for a, b in zip(old, new):
        if a is None or b is None:
            if a is not b:
                return None
            continue
        if not (isinstance(a, list) and isinstance(b, list) and len(a) == len(b) == 2 and a[0] == b[0]
                and type(a[1]) is int and type(b[1]) is int):
            return None
        if a[0] != "":
            if a[1] != b[1]:
                return None
            continue
        if out.setdefault(a[1], b[1]) != b[1]:
            return None
    return out
