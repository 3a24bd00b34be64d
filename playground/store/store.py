"""What the class keeps: share links, the roster, submissions and leaderboards, flags, announcements, deadline
extensions and each student's compiles and runs on an exercise, over one `Database`.

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
        with self.db.transaction() as conn:  # (a removed student imported again is back on the roster)
            conn.executemany("INSERT INTO students (name, password_hash, created_at) VALUES (?, ?, ?) "
                             "ON CONFLICT (name) DO UPDATE SET password_hash = excluded.password_hash, "
                             "removed_at = NULL", rows)

    def students(self) -> list[str]:
        """The names on the roster now (removed students left out)."""
        return [r["name"] for r in self.db.query("SELECT name FROM students WHERE removed_at IS NULL ORDER BY name")]

    def has_roster(self) -> bool:
        """Has a roster ever been imported? (Removing every student leaves it in force: the class password never
        comes back by itself.)"""
        return self.db.one("SELECT 1 FROM students LIMIT 1") is not None

    def remove_student(self, name: str) -> bool:
        """Take `name` off the roster: their login is refused and they are left off the boards and the grades; their
        submissions stay. False if the roster has no such student."""
        with self.db.transaction() as conn:
            cur = conn.execute("UPDATE students SET removed_at = ? WHERE name = ? AND removed_at IS NULL",
                               (time.time(), clean_name(name)))
            return cur.rowcount == 1

    def removed_students(self) -> set[str]:
        return {r["name"] for r in self.db.query("SELECT name FROM students WHERE removed_at IS NOT NULL")}

    def set_password(self, name: str, password: str) -> bool:
        """A new password for one student of the roster (stored hashed); False if there is no such student."""
        with self.db.transaction() as conn:
            cur = conn.execute("UPDATE students SET password_hash = ? WHERE name = ? AND removed_at IS NULL",
                               (hash_password(password), clean_name(name)))
            return cur.rowcount == 1

    def roster(self) -> list[dict]:
        """Every name the class knows (the roster's, and any other that logged in, submitted or worked on an
        exercise), with when it was last seen, its submissions and accepted ones, whether it is on the roster."""
        rows = self.db.query(
            """WITH names AS (SELECT name FROM students UNION SELECT student FROM seen
                              UNION SELECT student FROM submissions UNION SELECT student FROM activity),
                    subs AS (SELECT student, count(*) AS n, sum(status = 'accepted') AS accepted,
                                    max(created_at) AS last FROM submissions GROUP BY student),
                    acts AS (SELECT student, count(*) AS n, max(created_at) AS last FROM activity GROUP BY student)
               SELECT names.name, st.created_at AS added_at, st.removed_at, seen.last_seen,
                      coalesce(subs.n, 0) AS submissions, coalesce(subs.accepted, 0) AS accepted,
                      coalesce(acts.n, 0) AS activity, subs.last AS last_submission, acts.last AS last_activity,
                      a.alias
               FROM names LEFT JOIN students st ON st.name = names.name LEFT JOIN seen ON seen.student = names.name
                    LEFT JOIN subs ON subs.student = names.name LEFT JOIN acts ON acts.student = names.name
                    LEFT JOIN aliases a ON a.student = names.name
               ORDER BY names.name""")
        out = []
        for r in rows:
            times = [t for t in (r["last_seen"], r["last_submission"], r["last_activity"]) if t is not None]
            out.append({"student": r["name"], "on_roster": r["added_at"] is not None and r["removed_at"] is None,
                        "removed": r["removed_at"] is not None, "last_seen": max(times) if times else None,
                        "submissions": r["submissions"], "accepted": r["accepted"], "activity": r["activity"],
                        "alias": r["alias"]})
        return out

    def touch(self, student: str, when: float | None = None) -> None:
        """`student` was seen now (a login, a compile, a run, a submission)."""
        with self.db.transaction() as conn:
            conn.execute("INSERT INTO seen (student, last_seen) VALUES (?, ?) ON CONFLICT (student) DO UPDATE SET "
                         "last_seen = max(last_seen, excluded.last_seen)", (clean_name(student), when or time.time()))

    # -- the names students show on the boards --------------------------------------------------------------------
    def set_alias(self, student: str, alias: str | None) -> None:
        """Show `alias` on the boards for `student` (None: their own name again). A name another student shows
        already raises StoreError (the database's UNIQUE, without case)."""
        with self.db.transaction() as conn:
            conn.execute("DELETE FROM aliases WHERE student = ?", (clean_name(student),))
            if alias:
                conn.execute("INSERT INTO aliases (student, alias, created_at) VALUES (?, ?, ?)",
                             (clean_name(student), alias, time.time()))

    def aliases(self) -> dict[str, str]:
        return {r["student"]: r["alias"] for r in self.db.query("SELECT student, alias FROM aliases")}

    def alias_of(self, student: str) -> str | None:
        row = self.db.one("SELECT alias FROM aliases WHERE student = ?", (student,))
        return None if row is None else row["alias"]

    def check_student(self, name: str, password: str) -> bool:
        return self.student_credential(name, password) is not None

    def student_credential(self, name: str, password: str) -> str | None:
        """The stored hash `password` matched for the roster's `name` (what a session opened with it stands on: a
        new import replaces it), else None. A name not on the roster costs the same hash check."""
        stored = self.password_hash_of(name)
        matched = verify_password(password, stored or nobodys_hash())
        return stored if matched and stored is not None else None

    def password_hash_of(self, name: str) -> str | None:
        row = self.db.one("SELECT password_hash FROM students WHERE name = ? AND removed_at IS NULL",
                          (" ".join(str(name or "").split()),))
        return None if row is None else row["password_hash"]

    def password_hashes(self) -> dict[str, str]:
        """{name: stored hash} of the whole roster (a removed student has none: their login is refused)."""
        return {r["name"]: r["password_hash"]
                for r in self.db.query("SELECT name, password_hash FROM students WHERE removed_at IS NULL")}

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

    # -- login sessions kept across restarts (0005_sessions.sql) ---------------------------------------------------
    SESSIONS_PER_USER = 8  # a student's newest (their browsers); an older one logs in again after a restart

    def keep_session(self, digest: str, user: str, credential: str, older_than: float) -> None:
        """Keep one session; a student's beyond their newest SESSIONS_PER_USER, and any opened before `older_than`,
        go (each student's logins push out only their own: both deletes walk an index)."""
        name = clean_name(user)
        with self.db.transaction() as conn:
            conn.execute("INSERT OR REPLACE INTO sessions (digest, user, credential, created_at) VALUES (?, ?, ?, ?)",
                         (digest, name, credential, time.time()))
            conn.execute("DELETE FROM sessions WHERE user = ? AND created_at < (SELECT created_at FROM sessions "
                         "WHERE user = ? ORDER BY created_at DESC LIMIT 1 OFFSET ?)",
                         (name, name, self.SESSIONS_PER_USER - 1))
            conn.execute("DELETE FROM sessions WHERE created_at < ?", (older_than,))

    def kept_session(self, digest: str) -> dict | None:
        row = self.db.one("SELECT user, credential, created_at FROM sessions WHERE digest = ?", (digest,))
        return dict(row) if row is not None else None

    def forget_session(self, digest: str) -> None:
        with self.db.transaction() as conn:
            conn.execute("DELETE FROM sessions WHERE digest = ?", (digest,))

    def forget_sessions_of(self, user: str) -> None:
        with self.db.transaction() as conn:
            conn.execute("DELETE FROM sessions WHERE user = ?", (clean_name(user),))

    # -- submissions ------------------------------------------------------------------------------------------------
    def add_submission(self, exercise: str, student: str, source: str, params: dict, *, accepted: bool,
                       median_ms: float | None = None, baseline_ms: float | None = None, message: str = "",
                       detail: dict | None = None, gpu: str | None = None, sol_percent: float | None = None,
                       record: dict | None = None, late: bool = False, when: float | None = None,
                       agent: dict | None = None) -> int:
        """Keep a submission; `when` (seconds since the epoch) is now unless given; `agent`: the token an agent
        submitted it with ({"id", "name"}: agent_of's answer), None for a person's."""
        token, name = (None, None) if not agent else (int(agent["id"]), str(agent["name"]))
        with self.db.transaction() as conn:
            cur = conn.execute(
                "INSERT INTO submissions (exercise, student, source, params, status, median_ms, baseline_ms, "
                "message, detail, gpu, sol_percent, record, late, created_at, agent_token, agent) "
                "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                (exercise, student, source, _canonical(params or {}), "accepted" if accepted else "refused",
                 median_ms, baseline_ms, message, _canonical(detail or {}), gpu, sol_percent,
                 _canonical(record or {}), int(bool(late)), time.time() if when is None else float(when), token,
                 name))
            return int(cur.lastrowid)

    @staticmethod
    def _submission(row, with_source: bool) -> dict:
        out = {k: row[k] for k in ("id", "exercise", "student", "status", "median_ms", "baseline_ms", "message",
                                   "created_at", "gpu", "sol_percent")}
        out["late"] = bool(row["late"])
        out["agent"] = row["agent"]  # the token's name where an agent submitted it, else None
        out["flag"] = row["flag"]  # the teacher's reason, where the submission is flagged
        out["params"] = json.loads(row["params"])
        out["speedup"] = (row["baseline_ms"] / row["median_ms"]) if row["median_ms"] and row["baseline_ms"] else None
        if with_source:
            out["source"] = row["source"]
            out["detail"] = json.loads(row["detail"])
            out["record"] = json.loads(row["record"])
        return out

    _SUBMISSIONS = "SELECT s.*, f.reason AS flag FROM submissions s LEFT JOIN flags f ON f.submission = s.id WHERE 1"

    def submissions(self, exercise: str | None = None, student: str | None = None,
                    with_source: bool = False) -> list[dict]:
        """Every submission (newest first), without the source unless asked: the teacher's list, or one student's
        own."""
        sql, args = self._SUBMISSIONS, []
        if exercise:
            sql, args = sql + " AND s.exercise = ?", args + [exercise]
        if student:
            sql, args = sql + " AND s.student = ?", args + [student]
        return [self._submission(r, with_source) for r in self.db.query(sql + " ORDER BY s.id DESC", tuple(args))]

    def submission(self, submission_id: int) -> dict | None:
        row = self.db.one(self._SUBMISSIONS + " AND s.id = ?", (int(submission_id),))
        return None if row is None else self._submission(row, True)

    # -- flags ------------------------------------------------------------------------------------------------------
    def flag(self, submission_id: int, reason: str) -> bool:
        """Take a submission off the board and out of the grades, kept, with the teacher's `reason` (flagging it
        again replaces the reason); False if there is no such submission."""
        with self.db.transaction() as conn:
            if conn.execute("SELECT 1 FROM submissions WHERE id = ?", (int(submission_id),)).fetchone() is None:
                return False
            conn.execute("INSERT INTO flags (submission, reason, created_at) VALUES (?, ?, ?) ON CONFLICT "
                         "(submission) DO UPDATE SET reason = excluded.reason, created_at = excluded.created_at",
                         (int(submission_id), reason, time.time()))
            return True

    def unflag(self, submission_id: int) -> bool:
        with self.db.transaction() as conn:
            return conn.execute("DELETE FROM flags WHERE submission = ?", (int(submission_id),)).rowcount == 1

    # -- announcements ----------------------------------------------------------------------------------------------
    def announce(self, text: str) -> int:
        """Post `text` on every page ("" takes the announcement down); its id."""
        with self.db.transaction() as conn:
            return int(conn.execute("INSERT INTO announcements (text, created_at) VALUES (?, ?)",
                                    (text, time.time())).lastrowid)

    def announcement(self) -> dict | None:
        """The announcement in force: {"id", "text", "created_at"}, or None."""
        row = self.db.one("SELECT * FROM announcements ORDER BY id DESC LIMIT 1")
        if row is None or not row["text"]:
            return None
        return {"id": row["id"], "text": row["text"], "created_at": row["created_at"]}

    # -- deadlines moved for one student ------------------------------------------------------------------------------
    def extend(self, exercise: str, student: str, deadline: float) -> None:
        with self.db.transaction() as conn:
            conn.execute("INSERT INTO extensions (exercise, student, deadline, created_at) VALUES (?, ?, ?, ?) "
                         "ON CONFLICT (exercise, student) DO UPDATE SET deadline = excluded.deadline, "
                         "created_at = excluded.created_at", (exercise, clean_name(student), float(deadline),
                                                              time.time()))

    def unextend(self, exercise: str, student: str) -> bool:
        """`student` back on the exercise's own deadline; False if theirs was not moved."""
        with self.db.transaction() as conn:
            return conn.execute("DELETE FROM extensions WHERE exercise = ? AND student = ?",
                                (exercise, clean_name(student))).rowcount == 1

    def extension(self, exercise: str, student: str) -> float | None:
        row = self.db.one("SELECT deadline FROM extensions WHERE exercise = ? AND student = ?", (exercise, student))
        return None if row is None else float(row["deadline"])

    def extensions(self, exercise: str) -> dict[str, float]:
        return {r["student"]: float(r["deadline"]) for r in
                self.db.query("SELECT student, deadline FROM extensions WHERE exercise = ?", (exercise,))}

    # -- what students did on an exercise ---------------------------------------------------------------------------
    def add_activity(self, exercise: str, student: str, action: str, ok: bool, stage: str | None = None,
                     message: str = "", median_ms: float | None = None, sol_percent: float | None = None,
                     when: float | None = None) -> int:
        with self.db.transaction() as conn:
            return int(conn.execute(
                "INSERT INTO activity (exercise, student, action, ok, stage, message, median_ms, sol_percent, "
                "created_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
                (exercise, clean_name(student), action, int(bool(ok)), (stage or None) and str(stage)[:32],
                 str(message or "")[:300], median_ms, sol_percent,
                 time.time() if when is None else float(when))).lastrowid)

    def activity(self, exercise: str) -> list[dict]:
        """Every compile and run on `exercise`, oldest first."""
        return [dict(r) | {"ok": bool(r["ok"])} for r in self.db.query(
            "SELECT * FROM activity WHERE exercise = ? ORDER BY created_at, id", (exercise,))]

    # -- boards -----------------------------------------------------------------------------------------------------
    def reset_board(self, exercise: str) -> int:
        """Hide every submission so far from the exercise's board (they stay in the teacher's list)."""
        with self.db.transaction() as conn:
            last = conn.execute("SELECT coalesce(max(id), 0) FROM submissions").fetchone()[0]
            conn.execute("INSERT INTO board_resets (exercise, after_id, created_at) VALUES (?, ?, ?)",
                         (exercise, int(last), time.time()))
            return int(last)

    def undo_reset(self, exercise: str) -> bool:
        """Take back the exercise's last board reset (its entries come back); False if it has none."""
        with self.db.transaction() as conn:
            return conn.execute("DELETE FROM board_resets WHERE rowid = (SELECT max(rowid) FROM board_resets "
                                "WHERE exercise = ?)", (exercise,)).rowcount == 1

    def leaderboard(self, exercise: str, agents: bool = True) -> list[dict]:
        """Per student, the best accepted submission since the last reset, best first: the highest share of the
        speed of light where the grader measured it (a share is fair between GPUs), then the fastest. A student's
        own work and their agents' are two entries (`agent`: the name of the token the agent's best came with, None
        for the student's own); `agents` False leaves agents' off. Flagged submissions and removed students are left
        off; `student` is the student's own name, `alias` the name they chose to show."""
        rows = self.db.query(
            """WITH since AS (SELECT coalesce(max(after_id), 0) AS after_id FROM board_resets WHERE exercise = ?),
                    ranked AS (SELECT s.*, s.agent_token IS NOT NULL AS by_agent,
                                      row_number() OVER (PARTITION BY student, s.agent_token IS NOT NULL
                                                         ORDER BY sol_percent IS NULL, sol_percent DESC, median_ms,
                                                                  id) AS nth
                               FROM submissions s, since
                               WHERE s.exercise = ? AND s.status = 'accepted' AND s.id > since.after_id
                                     AND (? OR s.agent_token IS NULL)
                                     AND s.id NOT IN (SELECT submission FROM flags)
                                     AND s.student NOT IN (SELECT name FROM students WHERE removed_at IS NOT NULL)),
                    tries AS (SELECT student, agent_token IS NOT NULL AS by_agent, count(*) AS n
                              FROM submissions s, since
                              WHERE s.exercise = ? AND s.id > since.after_id GROUP BY student, by_agent)
               SELECT ranked.*, tries.n AS attempts, a.alias FROM ranked JOIN tries USING (student, by_agent)
                    LEFT JOIN aliases a ON a.student = ranked.student
               WHERE nth = 1 ORDER BY sol_percent IS NULL, sol_percent DESC, median_ms, id""",
            (exercise, exercise, int(bool(agents)), exercise))
        board = []
        for rank, r in enumerate(rows, 1):
            board.append({"rank": rank, "student": r["student"], "alias": r["alias"], "agent": r["agent"],
                          "median_ms": r["median_ms"], "baseline_ms": r["baseline_ms"],
                          "speedup": r["baseline_ms"] / r["median_ms"] if r["baseline_ms"] else None,
                          "gpu": r["gpu"], "sol_percent": r["sol_percent"], "late": bool(r["late"]),
                          "record": json.loads(r["record"]), "submission": r["id"], "attempts": r["attempts"],
                          "submitted_at": r["created_at"]})
        return board

    # -- agents: the tokens MCP clients present, and which exercises take agents -------------------------------------
    def add_agent_token(self, student: str, name: str, selector: str, digest: str, limit: int) -> int | None:
        """Keep a new token of `student` (its selector and its verifier's SHA-256, never the token); None when the
        student holds `limit` live tokens already (counted and added in one transaction: two at once cannot both
        slip under it)."""
        with self.db.transaction() as conn:
            live = conn.execute("SELECT count(*) FROM agent_tokens WHERE student = ? AND revoked_at IS NULL",
                                (clean_name(student),)).fetchone()[0]
            if live >= limit:
                return None
            return int(conn.execute(
                "INSERT INTO agent_tokens (student, name, selector, digest, created_at) VALUES (?, ?, ?, ?, ?)",
                (clean_name(student), name, selector, digest, time.time())).lastrowid)

    def agent_token(self, selector: str) -> dict | None:
        """The live token row of `selector` with its digest (for the check), or None."""
        row = self.db.one("SELECT * FROM agent_tokens WHERE selector = ? AND revoked_at IS NULL", (str(selector),))
        return None if row is None else dict(row)

    def agent_tokens(self, student: str | None = None, revoked: bool = False) -> list[dict]:
        """Tokens (newest first), one student's or everyone's, without their digests: {"id", "student", "name",
        "selector", "created_at", "last_used", "revoked_at"}."""
        sql, args = ("SELECT id, student, name, selector, created_at, last_used, revoked_at FROM agent_tokens "
                     "WHERE 1"), []
        if student is not None:
            sql, args = sql + " AND student = ?", args + [student]
        if not revoked:
            sql += " AND revoked_at IS NULL"
        return [dict(r) for r in self.db.query(sql + " ORDER BY id DESC", tuple(args))]

    def revoke_agent_token(self, token_id: int, student: str | None = None) -> bool:
        """Revoke a live token (`student`'s only, where given); False if there is none such."""
        sql, args = "UPDATE agent_tokens SET revoked_at = ? WHERE id = ? AND revoked_at IS NULL", [time.time(),
                                                                                                   int(token_id)]
        if student is not None:
            sql, args = sql + " AND student = ?", args + [student]
        with self.db.transaction() as conn:
            return conn.execute(sql, tuple(args)).rowcount == 1

    def agent_token_used(self, token_id: int, when: float | None = None) -> None:
        with self.db.transaction() as conn:
            conn.execute("UPDATE agent_tokens SET last_used = max(coalesce(last_used, 0), ?) WHERE id = ?",
                         (time.time() if when is None else float(when), int(token_id)))

    def set_exercise_agents(self, exercise: str, allowed: bool | None) -> None:
        """The teacher's switch of agents on `exercise` (None: back to its exercise.toml's)."""
        with self.db.transaction() as conn:
            conn.execute("DELETE FROM exercise_agents WHERE exercise = ?", (exercise,))
            if allowed is not None:
                conn.execute("INSERT INTO exercise_agents (exercise, allowed, created_at) VALUES (?, ?, ?)",
                             (exercise, int(bool(allowed)), time.time()))

    def exercise_agents(self) -> dict[str, bool]:
        """{exercise: allowed} where the teacher set the switch."""
        return {r["exercise"]: bool(r["allowed"]) for r in self.db.query("SELECT * FROM exercise_agents")}

__all__ = ["Store", "StoreError", "ShareError", "hash_password", "verify_password", "share_digest", "utf8_size"]
