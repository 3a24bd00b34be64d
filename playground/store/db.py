"""The class's database: one SQLite file in the data folder, opened in WAL mode, its schema versioned.

- WAL (write-ahead log): readers never wait for the writer and the writer never waits for readers; writers take
  turns, each waiting up to `BUSY_TIMEOUT_MS` for the one before it (students submitting at once queue for a few
  milliseconds, they do not get "database is locked").
- One connection per thread (and per process: a connection is never carried across a fork), so the server's worker
  threads never share a cursor; each write is one transaction (`with self.transaction()`).
- Migrations are the numbered SQL files in migrations/ (0001_initial.sql, 0002_...). `schema_version` records the
  last one applied; opening the database applies the ones after it, inside one `BEGIN IMMEDIATE` transaction, so
  two processes opening a new database at once apply them once.
- Rows are checked by the database itself (CHECK constraints, json_valid): a row the code would misread cannot be
  written, even by a bug, and a refused write raises `StoreError` with the constraint that refused it.
"""
from __future__ import annotations

import contextlib
import os
import re
import sqlite3
import threading
import time
from pathlib import Path

MIGRATIONS = Path(__file__).resolve().parent / "migrations"
FILE_NAME = "playground.sqlite3"
BUSY_TIMEOUT_MS = 15000


class StoreError(Exception):
    """A write the database refused (a CHECK constraint, a duplicate) or a database it cannot open."""


def backup(data_dir: str | os.PathLike, dest: str | os.PathLike) -> Path:
    """A consistent copy of the class's database, taken while the server runs, in one new file at `dest` (0600: it
    holds the password hashes and the server's keys). Copying the file itself is not one: in WAL mode the recent
    writes are in the -wal file beside it until a checkpoint. SQLite's online backup copies the pages as one read
    transaction sees them, and writers go on meanwhile. The database is opened read-only (no migration of a newer
    version runs under an older server), and `dest` may be neither in the data folder nor a file that exists."""
    source, dest = Path(data_dir) / FILE_NAME, Path(dest)
    if not source.is_file():
        raise StoreError(f"no class database in {data_dir}: nothing to back up")
    if dest.resolve().parent == source.resolve().parent:
        raise StoreError(f"the backup must go outside the data folder {source.parent} (a file there, its -wal "
                         "included, is the database's own)")
    if dest.exists():
        raise StoreError(f"{dest} exists: name a new file (a backup never overwrites one)")
    tmp = dest.with_name(dest.name + ".part")
    try:
        dest.parent.mkdir(parents=True, exist_ok=True)
        os.close(os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600))
        out = sqlite3.connect(tmp)
        try:
            with contextlib.closing(sqlite3.connect(f"{source.resolve().as_uri()}?mode=ro", uri=True)) as live:
                live.execute(f"PRAGMA busy_timeout = {BUSY_TIMEOUT_MS}")
                live.backup(out)
            out.execute("PRAGMA journal_mode = DELETE")  # one file, readable without the server's -wal
        finally:
            out.close()
        os.replace(tmp, dest)  # a backup interrupted half-way never stands in for a whole one
    except (OSError, sqlite3.DatabaseError) as exc:
        with contextlib.suppress(OSError):
            tmp.unlink()
        raise StoreError(f"the backup to {dest} failed: {exc}") from None
    return dest


def migrations() -> list[tuple[int, Path]]:
    """[(version, file)] in order, from the files named NNNN_what.sql."""
    found = []
    for path in MIGRATIONS.glob("*.sql"):
        match = re.fullmatch(r"(\d{4})_[a-z0-9_]+\.sql", path.name)
        if match:
            found.append((int(match.group(1)), path))
    found.sort()
    if [v for v, _ in found] != list(range(1, len(found) + 1)):
        raise StoreError(f"migrations must be numbered 0001, 0002, ... without gaps: {[p.name for _, p in found]}")
    return found


class Database:
    """The SQLite file at `data_dir/playground.sqlite3`, created and migrated on first open."""

    def __init__(self, data_dir: str | os.PathLike):
        self.data_dir = Path(data_dir)
        self.path = self.data_dir / FILE_NAME
        self._local = threading.local()
        try:
            self.data_dir.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise StoreError(f"cannot create the data folder {self.data_dir}: {exc}") from None
        self.migrate()

    # -- connections --------------------------------------------------------------------------------------------
    def _connect(self) -> sqlite3.Connection:
        try:
            conn = sqlite3.connect(self.path, timeout=BUSY_TIMEOUT_MS / 1000, isolation_level=None,
                                   check_same_thread=True)
            conn.row_factory = sqlite3.Row
            conn.execute(f"PRAGMA busy_timeout = {BUSY_TIMEOUT_MS}")
            mode = _set_wal(conn)
            if str(mode).lower() != "wal":
                raise StoreError(f"{self.path} could not be put in WAL mode (it is in {mode} mode)")
            conn.execute("PRAGMA synchronous = NORMAL")  # with WAL: durable at each checkpoint, never corrupt
            conn.execute("PRAGMA foreign_keys = ON")
        except sqlite3.DatabaseError as exc:
            raise StoreError(f"cannot open the database {self.path}: {exc}") from None
        return conn

    @property
    def conn(self) -> sqlite3.Connection:
        """This thread's connection (a new one in a forked child: SQLite connections must not cross a fork)."""
        local = self._local
        if getattr(local, "conn", None) is None or local.pid != os.getpid():
            local.conn, local.pid = self._connect(), os.getpid()
        return local.conn

    def close(self) -> None:
        """Close this thread's connection (others close when their threads end)."""
        conn = getattr(self._local, "conn", None)
        if conn is not None and self._local.pid == os.getpid():
            conn.close()
        self._local.conn = None

    @contextlib.contextmanager
    def transaction(self):
        """One write transaction: BEGIN IMMEDIATE takes the write lock up front (waiting for it, not failing
        half-way); a refused row rolls everything back and raises StoreError."""
        conn = self.conn
        try:
            conn.execute("BEGIN IMMEDIATE")
        except sqlite3.DatabaseError as exc:  # the lock not had within the busy timeout, a read-only file
            raise StoreError(f"the database {self.path.name} cannot be written now: {exc}") from None
        try:
            yield conn
        except sqlite3.IntegrityError as exc:
            _rollback(conn)
            raise StoreError(f"the database refused the row: {exc}") from None
        except sqlite3.DatabaseError as exc:  # a full disk, an I/O error
            _rollback(conn)
            raise StoreError(f"the database {self.path.name} could not be written: {exc}") from None
        except BaseException:
            _rollback(conn)
            raise
        else:
            try:
                conn.execute("COMMIT")
            except sqlite3.DatabaseError as exc:
                _rollback(conn)
                raise StoreError(f"the database {self.path.name} could not be written: {exc}") from None

    @contextlib.contextmanager
    def reading(self):
        """This thread's connection for reads (no lock: WAL readers never wait); a failed read raises StoreError."""
        try:
            yield self.conn
        except sqlite3.DatabaseError as exc:
            raise StoreError(f"the database {self.path.name} cannot be read: {exc}") from None

    def query(self, sql: str, args: tuple = ()) -> list[sqlite3.Row]:
        with self.reading() as conn:
            return conn.execute(sql, args).fetchall()

    def one(self, sql: str, args: tuple = ()) -> sqlite3.Row | None:
        with self.reading() as conn:
            return conn.execute(sql, args).fetchone()

    # -- migrations ---------------------------------------------------------------------------------------------
    def version(self) -> int:
        row = self.conn.execute("SELECT max(version) FROM schema_version").fetchone()
        return int(row[0] or 0)

    def migrate(self) -> int:
        """Apply the migrations newer than the database; returns the version it is at."""
        conn = self.conn
        conn.execute("CREATE TABLE IF NOT EXISTS schema_version (version INTEGER PRIMARY KEY, applied_at REAL NOT NULL)")
        wanted = migrations()
        if self.version() >= len(wanted):
            if self.version() > len(wanted):
                raise StoreError(f"{self.path} is at schema version {self.version()}, newer than this code "
                                 f"({len(wanted)}): run the newer version of the playground")
            return self.version()
        conn.execute("BEGIN IMMEDIATE")  # another process may be migrating the same file right now
        try:
            current = self.version()
            for version, path in wanted[current:]:
                for statement in _statements(path.read_text()):
                    conn.execute(statement)
                conn.execute("INSERT INTO schema_version (version, applied_at) VALUES (?, ?)", (version, time.time()))
        except BaseException:
            conn.execute("ROLLBACK")
            raise
        conn.execute("COMMIT")
        return self.version()


def _rollback(conn: sqlite3.Connection) -> None:
    """Undo the open transaction, if SQLite has not already (it rolls back by itself after some errors, and a
    ROLLBACK then would raise and hide the error that matters)."""
    if conn.in_transaction:
        with contextlib.suppress(sqlite3.DatabaseError):
            conn.execute("ROLLBACK")


def _set_wal(conn: sqlite3.Connection) -> str:
    """Put the file in WAL mode; returns the mode it is in. Switching a new file to WAL takes an exclusive lock and
    SQLite answers "database is locked" at once, without waiting on the busy timeout, when another process is
    opening the same new file at that moment (students' first submissions to a fresh server): wait and retry,
    up to the busy timeout like every other lock."""
    deadline = time.monotonic() + BUSY_TIMEOUT_MS / 1000
    delay = 0.005
    while True:
        try:
            return str(conn.execute("PRAGMA journal_mode = WAL").fetchone()[0])
        except sqlite3.OperationalError as exc:
            if "locked" not in str(exc) and "busy" not in str(exc) or time.monotonic() > deadline:
                raise
            time.sleep(delay)
            delay = min(delay * 2, 0.2)


def _statements(script: str) -> list[str]:
    """A migration's statements, one by one (executescript would COMMIT our transaction)."""
    out, current = [], []
    for line in script.splitlines():
        if line.strip().startswith("--"):
            continue
        current.append(line)
        if sqlite3.complete_statement("\n".join(current)):
            out.append("\n".join(current).strip())
            current = []
    if "\n".join(current).strip():
        raise StoreError("a migration ends in an incomplete statement")
    return [s for s in out if s.rstrip(";").strip()]
