"""What the class keeps: share links, the roster, submissions and leaderboards, over one `Database`.

Everything here is plain data in and out (dicts, str); nothing here runs or imports a user's code.
"""
from __future__ import annotations

import base64
import hashlib
import hmac
import json
import os
import time

from ..engine.source import SOURCE_LIMIT  # a share holds what a job may run
from .db import Database, StoreError

# -- share links ---------------------------------------------------------------------------------------------------
SHARE_PARAMS_LIMIT = 16 * 1024    # bytes of JSON
SHARE_SUMMARY_LIMIT = 16 * 1024
SHARE_ID_LENGTH = 10              # base32 characters: 50 bits, a collision only after ~10^7 shares (then longer)


class ShareError(ValueError):
    """A share that cannot be stored or found, with a message for the user."""


def _canonical(obj, strict: bool = False) -> str:
    """`strict`: refuse NaN and infinities (what a caller of /share sends is checked as JSON, which has neither)."""
    return json.dumps(obj, sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=not strict)


def share_digest(kernel: str, source: str, params: dict, summary: dict | None = None) -> str:
    """The content address of a share: the same kernel, source, parameters and result summary always get the same
    id. (The summary is part of it: else the first share of some code would fix the result line that every later
    share of that code shows, whoever wrote it and however old.)"""
    content = {"kernel": kernel, "source": source, "params": params}
    if summary is not None:  # (shares without one keep the ids they had before summaries counted)
        content["summary"] = summary
    text = _canonical(content)
    digest = hashlib.sha256(text.encode()).digest()
    return base64.b32encode(digest).decode().rstrip("=").lower()


def utf8_size(text: str) -> int | None:
    """Bytes of `text` in UTF-8, as the database keeps it; None for text UTF-8 cannot hold (a lone surrogate)."""
    try:
        return len(text.encode("utf-8"))
    except UnicodeEncodeError:
        return None


def check_share(kernel, source, params, summary) -> tuple[str, str, dict, dict | None]:
    if not isinstance(kernel, str) or not kernel.strip() or len(kernel) > 64:
        raise ShareError("a share needs a kernel name (at most 64 characters)")
    if not isinstance(source, str):
        raise ShareError("the source must be text")
    size = utf8_size(source)
    if size is None:
        raise ShareError("the source is not valid text: it holds a character UTF-8 cannot write (a lone surrogate)")
    if size > SOURCE_LIMIT:  # bytes, as stored: 256 Ki characters of 4 bytes each are 1 MiB
        raise ShareError(f"the source is {size // 1024} KiB; a share holds at most {SOURCE_LIMIT // 1024} KiB")
    if params is None:
        params = {}
    if not isinstance(params, dict):
        raise ShareError("params must be an object of NAME: VALUE")
    try:
        params_json = _canonical(params, strict=True)
        summary_json = None if summary is None else _canonical(summary, strict=True)
    except (TypeError, ValueError) as exc:
        raise ShareError(f"params and the result summary must be plain JSON values: {exc}") from None
    if len(params_json.encode()) > SHARE_PARAMS_LIMIT:
        raise ShareError(f"the parameters are over {SHARE_PARAMS_LIMIT // 1024} KiB of JSON")
    if summary_json is not None and len(summary_json.encode()) > SHARE_SUMMARY_LIMIT:
        raise ShareError(f"the result summary is over {SHARE_SUMMARY_LIMIT // 1024} KiB of JSON")
    return kernel.strip(), source, params, summary


# -- passwords -------------------------------------------------------------------------------------------------------
SCRYPT = {"n": 2**14, "r": 8, "p": 1}  # RFC 7914's interactive-login figure: ~50 ms, 16 MiB


def hash_password(password: str) -> str:
    """"scrypt$n$r$p$salt$hash" (hex), from hashlib.scrypt with a random 16-byte salt."""
    salt = os.urandom(16)
    digest = hashlib.scrypt(password.encode(), salt=salt, dklen=32, **SCRYPT)
    return f"scrypt${SCRYPT['n']}${SCRYPT['r']}${SCRYPT['p']}${salt.hex()}${digest.hex()}"


def verify_password(password: str, stored: str) -> bool:
    try:
        kind, n, r, p, salt, digest = stored.split("$")
        if kind != "scrypt":
            return False
        given = hashlib.scrypt(str(password).encode(), salt=bytes.fromhex(salt), n=int(n), r=int(r), p=int(p),
                               dklen=len(bytes.fromhex(digest)))
    except (ValueError, TypeError):
        return False
    return hmac.compare_digest(given, bytes.fromhex(digest))


_NOBODYS_HASH: list[str] = []  # made on first use: a hash no password was given for


def nobodys_hash() -> str:
    """A stored-password hash of the same cost as a student's, for a name not on the roster: checking a password
    against it takes as long as against a real one, so the login's timing does not tell who is on the roster."""
    if not _NOBODYS_HASH:
        _NOBODYS_HASH.append(hash_password(os.urandom(16).hex()))
    return _NOBODYS_HASH[0]


def clean_name(name) -> str:
    name = " ".join(str(name or "").split())
    if not name or len(name) > 64:
        raise ValueError(f"a student's name must be 1 to 64 characters, not {name!r}")
    return name


class Store:
    """The class's data in the SQLite database under `data_dir`."""

    def __init__(self, data_dir):
        self.db = Database(data_dir)

    def close(self) -> None:
        self.db.close()

    # -- shares ---------------------------------------------------------------------------------------------------
    def put_share(self, kernel: str, source: str, params: dict | None, summary: dict | None = None) -> str:
        """Store a share (once: the id is the content's address) and return its id."""
        return self._share(kernel, source, params, summary, store=True)

    def share_id_of(self, kernel: str, source: str, params: dict | None, summary: dict | None = None) -> str | None:
        """The id of a share already stored with exactly this content, else None (nothing is stored)."""
        return self._share(kernel, source, params, summary, store=False)

    def _share(self, kernel, source, params, summary, store: bool) -> str | None:
        kernel, source, params, summary = check_share(kernel, source, params, summary)
        digest = share_digest(kernel, source, params, summary)
        params_json, summary_json = _canonical(params), None if summary is None else _canonical(summary)
        for length in range(SHARE_ID_LENGTH, len(digest) + 1, 4):
            share_id = digest[:length]
            with self.db.transaction() if store else self.db.reading() as conn:  # (a look: no lock)
                row = conn.execute("SELECT kernel, source, params, summary FROM shares WHERE id = ?",
                                   (share_id,)).fetchone()
                if row is None:
                    if not store:
                        return None
                    conn.execute("INSERT INTO shares (id, kernel, source, params, summary, created_at) "
                                 "VALUES (?, ?, ?, ?, ?, ?)",
                                 (share_id, kernel, source, params_json, summary_json, time.time()))
                    return share_id
                if (row["kernel"], row["source"], row["params"], row["summary"]) == (kernel, source, params_json,
                                                                                    summary_json):
                    return share_id  # immutable: the same content, the same share
            # another content has this prefix: take a longer one
        raise StoreError("no free share id")  # 52 characters of SHA-256 all taken: not in this universe

    def get_share(self, share_id: str) -> dict | None:
        share_id = str(share_id or "").strip()
        if not share_id.isalnum() or not 8 <= len(share_id) <= 32:
            return None
        row = self.db.one("SELECT * FROM shares WHERE id = ?", (share_id.lower(),))
        if row is None:
            return None
        return {"id": row["id"], "kernel": row["kernel"], "source": row["source"],
                "params": json.loads(row["params"]),
                "summary": None if row["summary"] is None else json.loads(row["summary"]),
                "created_at": row["created_at"]}

    # -- the roster -----------------------------------------------------------------------------------------------
    def add_students(self, passwords: dict[str, str]) -> None:
        """Add (or give a new password to) each student of {name: password}; the passwords are stored hashed."""
        rows = [(clean_name(name), hash_password(pw), time.time()) for name, pw in passwords.items()]
        with self.db.transaction() as conn:
            conn.executemany("INSERT INTO students (name, password_hash, created_at) VALUES (?, ?, ?) "
                             "ON CONFLICT (name) DO UPDATE SET password_hash = excluded.password_hash", rows)

    def students(self) -> list[str]:
        return [r["name"] for r in self.db.query("SELECT name FROM students ORDER BY name")]

    def has_roster(self) -> bool:
        return self.db.one("SELECT 1 FROM students LIMIT 1") is not None

    def check_student(self, name: str, password: str) -> bool:
        return self.student_credential(name, password) is not None

    def student_credential(self, name: str, password: str) -> str | None:
        """The stored hash `password` matched for the roster's `name` (what a session opened with it stands on: a
        new import replaces it), else None. A name not on the roster costs the same hash check."""
        stored = self.password_hash_of(name)
        matched = verify_password(password, stored or nobodys_hash())
        return stored if matched and stored is not None else None

    def password_hash_of(self, name: str) -> str | None:
        row = self.db.one("SELECT password_hash FROM students WHERE name = ?", (" ".join(str(name or "").split()),))
        return None if row is None else row["password_hash"]

    def password_hashes(self) -> dict[str, str]:
        """{name: stored hash} of the whole roster."""
        return {r["name"]: r["password_hash"] for r in self.db.query("SELECT name, password_hash FROM students")}

    # -- the server's own keys ------------------------------------------------------------------------------------
    def secret(self, name: str) -> bytes:
        """The 32-byte key kept under `name`, made (at random) the first time it is asked for."""
        row = self.db.one("SELECT value FROM secrets WHERE name = ?", (name,))
        if row is None:
            with self.db.transaction() as conn:  # two processes at once: the first one's key is everyone's
                conn.execute("INSERT INTO secrets (name, value, created_at) VALUES (?, ?, ?) ON CONFLICT (name) "
                             "DO NOTHING", (name, os.urandom(32), time.time()))
            row = self.db.one("SELECT value FROM secrets WHERE name = ?", (name,))
        return bytes(row["value"])

    # -- submissions ------------------------------------------------------------------------------------------------
    def add_submission(self, exercise: str, student: str, source: str, params: dict, *, accepted: bool,
                       median_ms: float | None = None, baseline_ms: float | None = None, message: str = "",
                       detail: dict | None = None) -> int:
        with self.db.transaction() as conn:
            cur = conn.execute(
                "INSERT INTO submissions (exercise, student, source, params, status, median_ms, baseline_ms, "
                "message, detail, created_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                (exercise, student, source, _canonical(params or {}), "accepted" if accepted else "refused",
                 median_ms, baseline_ms, message, _canonical(detail or {}), time.time()))
            return int(cur.lastrowid)

    @staticmethod
    def _submission(row, with_source: bool) -> dict:
        out = {k: row[k] for k in ("id", "exercise", "student", "status", "median_ms", "baseline_ms", "message",
                                   "created_at")}
        out["params"] = json.loads(row["params"])
        out["speedup"] = (row["baseline_ms"] / row["median_ms"]) if row["median_ms"] and row["baseline_ms"] else None
        if with_source:
            out["source"] = row["source"]
            out["detail"] = json.loads(row["detail"])
        return out

    def submissions(self, exercise: str | None = None, student: str | None = None) -> list[dict]:
        """Every submission (newest first), without the source: the teacher's list, or one student's own."""
        sql, args = "SELECT * FROM submissions WHERE 1", []
        if exercise:
            sql, args = sql + " AND exercise = ?", args + [exercise]
        if student:
            sql, args = sql + " AND student = ?", args + [student]
        return [self._submission(r, False) for r in self.db.query(sql + " ORDER BY id DESC", tuple(args))]

    def submission(self, submission_id: int) -> dict | None:
        row = self.db.one("SELECT * FROM submissions WHERE id = ?", (int(submission_id),))
        return None if row is None else self._submission(row, True)

    # -- boards -----------------------------------------------------------------------------------------------------
    def reset_board(self, exercise: str) -> int:
        """Hide every submission so far from the exercise's board (they stay in the teacher's list)."""
        with self.db.transaction() as conn:
            last = conn.execute("SELECT coalesce(max(id), 0) FROM submissions").fetchone()[0]
            conn.execute("INSERT INTO board_resets (exercise, after_id, created_at) VALUES (?, ?, ?)",
                         (exercise, int(last), time.time()))
            return int(last)

    def leaderboard(self, exercise: str) -> list[dict]:
        """Per student, the fastest accepted submission since the last reset, fastest first."""
        rows = self.db.query(
            """WITH since AS (SELECT coalesce(max(after_id), 0) AS after_id FROM board_resets WHERE exercise = ?),
                    ranked AS (SELECT s.*, row_number() OVER (PARTITION BY student ORDER BY median_ms, id) AS nth
                               FROM submissions s, since
                               WHERE s.exercise = ? AND s.status = 'accepted' AND s.id > since.after_id),
                    tries AS (SELECT student, count(*) AS n FROM submissions s, since
                              WHERE s.exercise = ? AND s.id > since.after_id GROUP BY student)
               SELECT ranked.*, tries.n AS attempts FROM ranked JOIN tries USING (student)
               WHERE nth = 1 ORDER BY median_ms, id""", (exercise, exercise, exercise))
        board = []
        for rank, r in enumerate(rows, 1):
            board.append({"rank": rank, "student": r["student"], "median_ms": r["median_ms"],
                          "baseline_ms": r["baseline_ms"],
                          "speedup": r["baseline_ms"] / r["median_ms"] if r["baseline_ms"] else None,
                          "submission": r["id"], "attempts": r["attempts"], "submitted_at": r["created_at"]})
        return board


__all__ = ["Store", "StoreError", "ShareError", "hash_password", "verify_password", "share_digest", "utf8_size"]
