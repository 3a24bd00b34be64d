"""A class on one server: share links, exercises with hidden tests, submissions, leaderboards, the teacher's view.

    /share (kernel, source, params[, summary]) → {"ok", "id", "url"}      content-addressed, immutable, kept in SQLite;
                                                                        a few dozen new links a user in 10 minutes
    /open_share (id) → {"ok", "kernel", "source", "params", "summary"}
    /exercises () → [{"name", "title", "statement", "starter", "visible", "timed", "target_ms", ...}]
    /submit (exercise, source, params) → {"ok", "median_ms", "speedup", "rank", ...} or {"ok": false, "error"}
    /leaderboard (exercise) → {"ok", "rows": [{"rank", "student", "median_ms", "speedup", ...}]}
    /teacher_* (..., teacher_password): every submission, one submission's code, CSV, reset a board, import a roster

Who is who: a student's name is the login's user name (Gradio's `request.username`): a roster imported by the
teacher (per-student passwords, stored hashed), the class password (any name), or a reverse proxy's authenticated
user header (`PLAYGROUND_USER_HEADER`, through Gradio's auth_dependency). The teacher logs in as `teacher` with
PLAYGROUND_TEACHER_PASSWORD, or passes that password to the teacher's endpoints.

A submission is graded in two jobs (playground/engine/grading.py): one runs the student's Python only to build the
kernel's TIR for each problem; the other, which runs none of the student's Python, compiles that TIR, verifies it on
the visible and the hidden problems with fresh inputs, times it, and verifies it again. The hidden problems and the
seeds are sent to the jobs, never to the page; what the page gets about a hidden problem is only pass or fail.

This module never imports or runs a user's code: source text goes to run_job, exercise folders are ours.
"""
from __future__ import annotations

import contextvars
import csv
import hashlib
import hmac
import io
import ipaddress
import json
import logging
import math
import os
import re
import secrets
import threading
import time
import tomllib
from dataclasses import dataclass
from pathlib import Path

import gradio as gr

from ..engine.errors import quoted
from ..engine.source import SOURCE_LIMIT
from ..settings import Settings, current
from ..store import ShareError, Store, StoreError, utf8_size

log = logging.getLogger("playground.classroom")
ROOT = Path(__file__).resolve().parents[2]
EXERCISES_DIR = ROOT / "exercises"
TEACHER = "teacher"  # the teacher's user name at the login
# What a login stood on (Classroom.credential): the teacher's password, the class password, or a roster student's
# stored password hash (which starts "scrypt$").
TEACHER_LOGIN, CLASS_LOGIN = "the teacher password", "the class password"
# Set by the login's guard (server.py) around Gradio's login route: the login writes what it stood on there, for the
# session the route then opens.
LOGIN_SEEN: contextvars.ContextVar[dict | None] = contextvars.ContextVar("playground_login_seen", default=None)
ADDRESS_CHARS = 64  # of an address taken from a header: an entry of X-Forwarded-For is anyone's text
NAME_LIMIT = 64  # characters of a user name (the store keeps no longer ones)
BUILD_TIMEOUT = 240.0   # seconds: the student's factory, once per problem (no compile)
GRADE_TIMEOUT = 600.0   # seconds: compile every problem's kernel, verify, time, verify again
NO_GPU = ("This server has no GPU, so it cannot take submissions: each one is verified and timed on a GPU. "
          "Compile works here; submit on the class's GPU server.")


def error(stage: str, message: str, **extra) -> dict:
    """A failed answer in the engine's one error shape."""
    return {"ok": False, "error": {"stage": stage, "message": message, "line": extra.pop("line", None),
                                   "log": extra.pop("log", "")}, **extra}


class Recent:
    """Per key (a user), the times of recent events of one kind (wrong teacher passwords, new share links) within
    `window` seconds; thread-safe, and keys whose events have all aged out are forgotten once there are many."""

    def __init__(self, window: float, clock=time.monotonic):
        self.window, self.clock = window, clock
        self.times: dict[str, list[float]] = {}
        self.lock = threading.Lock()

    def wait(self, key: str, limit: int) -> float | None:
        """Seconds until `key` has fewer than `limit` events in the window again, or None if it has now."""
        with self.lock:
            return self._wait(key, limit, self.clock())

    def _wait(self, key: str, limit: int, now: float) -> float | None:
        recent = [t for t in self.times.get(key, []) if now - t < self.window]
        if recent:
            self.times[key] = recent
        else:
            self.times.pop(key, None)  # a key asked about with nothing in the window takes no room
        return recent[0] + self.window - now if len(recent) >= limit else None

    def take(self, key: str, limit: int) -> float | None:
        """`wait`, and if None, the event counted, in one step: two requests at once cannot both slip under the
        limit."""
        now = self.clock()
        with self.lock:
            wait = self._wait(key, limit, now)
            if wait is None:
                self.times.setdefault(key, []).append(now)
            return wait

    def take_all(self, limits: list[tuple]) -> tuple | None:
        """`take` for several (key, limit) at once: the event counted under every key only if each is under its
        limit, else (seconds to wait, the key that is full) and nothing counted."""
        now = self.clock()
        with self.lock:
            for key, limit in limits:
                if (wait := self._wait(key, limit, now)) is not None:
                    return wait, key
            for key, _ in limits:
                self.times.setdefault(key, []).append(now)
            self._forget_idle(now)
            return None

    def _forget_idle(self, now: float) -> None:
        if len(self.times) > 10000:
            self.times = {k: v for k, v in self.times.items() if v and now - v[-1] < self.window}

    def add(self, key: str) -> None:
        now = self.clock()
        with self.lock:
            self.times.setdefault(key, []).append(now)
            self._forget_idle(now)


def user_name(name) -> str:
    """A user name as the class knows it: runs of white space as one space, none at the ends."""
    return " ".join(str(name or "").split())


def end_sessions_off_the_roster(app, room: "Classroom") -> None:
    """From now on, after each roster import, every login session the roster no longer accepts ends (Gradio's session
    tokens, `app.tokens`, are dropped: the next request of such a page is refused and asks for a login): a name the
    roster does not hold, a session of the class password under any name (the roster's own name too), a session of a
    password the import replaced (Classroom.may_stay)."""
    def revoke():
        hashes = room.store.password_hashes()  # read once for all the sessions (a roster was just imported)
        for token, user in list(getattr(app, "tokens", {}).items()):
            if not room.may_stay(user, room.credential_of(token), hashes):
                app.tokens.pop(token, None)
                room.session_ended(token)
                log.info("ended the session of %r: its login is not the roster's", user)
    room.on_roster.append(revoke)


def resolve_client(peer: str, forwarded_for: list[str], trusted: tuple) -> str:
    """The client's address, the one rule for every limit counted per address: the connection's peer, unless the peer
    is one of the `trusted` proxies (Settings.trusted_proxy_networks); then the right-most address of X-Forwarded-For
    (`forwarded_for`: the header's values) that is not one of them. Each proxy appends the address it got the request
    from, so anything left of that is the client's own claim. (An entry that is no address is returned as it is, cut
    short: it is only a key of the limits.)"""
    if not in_networks(peer, trusted):
        return peer
    entries = [e.strip() for value in forwarded_for for e in str(value).split(",") if e.strip()]
    for entry in reversed(entries):
        if not in_networks(entry, trusted):
            return entry[:ADDRESS_CHARS]
    return entries[0][:ADDRESS_CHARS] if entries else peer


def in_networks(address, networks: tuple) -> bool:
    """Is `address` (an IP, maybe with a port or in brackets) in one of `networks`?"""
    if not networks or not address:
        return False
    text = str(address).strip()
    if text.startswith("[") and "]" in text:
        text = text[1:text.index("]")]
    elif text.count(":") == 1:  # an IPv4 address with a port
        text = text.split(":")[0]
    try:
        ip = ipaddress.ip_address(text)
    except ValueError:
        return False
    return any(ip.version == n.version and ip in n for n in networks)


def client_address(request) -> str | None:
    """The client's address of a request (gr.Request, a Starlette request, or an ASGI scope), as every limit per
    address counts it: serve() puts resolve_client's answer in each request's scope (server.PeerAddress); a server
    started without that has the address its connection came from."""
    if request is None:
        return None
    if isinstance(request, dict):
        client = request.get("client")
        host = client[0] if client else None
    else:
        host = getattr(getattr(request, "client", None), "host", None)
    return str(host)[:ADDRESS_CHARS] if host else None


def spreadsheet_safe(value):
    """A student's text as a spreadsheet shows it, not as a formula it would run: a cell starting with = + - @ (or a
    tab or carriage return) gets a leading apostrophe (OWASP's advice for CSV injection)."""
    if isinstance(value, str) and value[:1] in ("=", "+", "-", "@", "\t", "\r"):
        return "'" + value
    return value


# -- exercises --------------------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Exercise:
    """One folder of exercises/: statement.md, starter.py, reference.py, exercise.toml."""
    name: str
    title: str
    statement: str
    starter: str
    reference: str       # reference.py's text: make_inputs, reference, BASELINES, flops, bytes_moved
    factory: str         # the function a submission defines
    dtype: str
    visible: tuple       # problems the students see
    hidden: tuple        # problems they do not
    timed: dict          # the problem the board is timed at (public)
    target_ms: float | None

    @property
    def problems(self) -> list[dict]:
        """What the grader checks, in order: visible, hidden, then the timed problem (checked and timed)."""
        return [dict(p) for p in self.visible] + [dict(p) for p in self.hidden] + [dict(self.timed)]

    def kind(self, index: int) -> str:
        return ("visible" if index < len(self.visible) else "hidden" if index < len(self.visible) + len(self.hidden)
                else "timed")

    def public(self) -> dict:
        """What students may see: never the hidden problems, the reference or a seed."""
        return {"name": self.name, "title": self.title, "statement": self.statement, "starter": self.starter,
                "factory": self.factory, "dtype": self.dtype, "visible": [dict(p) for p in self.visible],
                "timed": dict(self.timed), "target_ms": self.target_ms, "hidden_count": len(self.hidden)}


class ExerciseError(ValueError):
    pass


def load_exercise(folder: Path) -> Exercise:
    folder = Path(folder)
    try:
        config = tomllib.loads((folder / "exercise.toml").read_text())
        statement = (folder / "statement.md").read_text()
        starter = (folder / "starter.py").read_text()
        reference = (folder / "reference.py").read_text()
    except (OSError, tomllib.TOMLDecodeError) as exc:
        raise ExerciseError(f"{folder.name}: {exc}") from None
    missing = [k for k in ("factory", "visible", "hidden", "timed") if k not in config]
    if missing:
        raise ExerciseError(f"{folder.name}/exercise.toml lacks {', '.join(missing)}")
    problems = list(config["visible"]) + list(config["hidden"]) + [config["timed"]]
    names = set(problems[0])
    for p in problems:
        if not isinstance(p, dict) or set(p) != names or not all(isinstance(v, int) and v > 0 for v in p.values()):
            raise ExerciseError(f"{folder.name}: every problem must name the same sizes ({sorted(names)}) as "
                                f"positive integers, not {p}")
    keys = [json.dumps(p, sort_keys=True) for p in problems]
    if len(set(keys)) != len(keys):
        raise ExerciseError(f"{folder.name}: a problem is listed twice (visible, hidden and timed must differ)")
    title = config.get("title") or statement.lstrip("# ").splitlines()[0]
    return Exercise(folder.name, str(title), statement, starter, reference, str(config["factory"]),
                    str(config.get("dtype", "float16")), tuple(config["visible"]), tuple(config["hidden"]),
                    dict(config["timed"]), float(config["target_ms"]) if "target_ms" in config else None)


def load_exercises(folder: Path = EXERCISES_DIR) -> dict[str, Exercise]:
    """Every exercise folder that loads; one that does not is logged and left out (a teacher still writing it)."""
    found = {}
    for sub in sorted(Path(folder).glob("*/exercise.toml")):
        try:
            ex = load_exercise(sub.parent)
        except ExerciseError as exc:
            log.warning("exercise left out: %s", exc)
            continue
        found[ex.name] = ex
    return found


def label(problem: dict) -> str:
    return " × ".join(f"{k}={v}" for k, v in problem.items())


def _fixed_progress(text: str, on_progress):
    """A progress callback that shows `text` whatever the job reports (a job that runs the student's code on hidden
    problems could report them)."""
    if on_progress is None:
        return None
    return lambda _what, fraction: on_progress(text, fraction)


# -- the class ---------------------------------------------------------------------------------------------------
class Classroom:
    """The class's server-side state and rules. `run_job` and `has_gpu` are the job layer's; `store` is made from
    the settings' data folder on first use."""

    def __init__(self, settings: Settings | None = None, store: Store | None = None, run_job=None, has_gpu=None,
                 exercises_dir: Path = EXERCISES_DIR, class_password: str | None = None):
        self.settings = settings or current()
        self._store = store
        self._store_lock = threading.Lock()
        self._run_job = run_job
        self._has_gpu = has_gpu
        self.exercises_dir = Path(exercises_dir)
        self.class_password = class_password if class_password is not None else self.settings.password
        self._submitting: set[str] = set()
        self._submitting_lock = threading.Lock()
        self._teacher_misses = Recent(self.TEACHER_WINDOW)  # who gave a wrong teacher password (and from where)
        self._shares = Recent(self.SHARE_WINDOW)  # who made new share links (and from where)
        self.on_roster: list = []  # called after a roster import (serve(): end the sessions it no longer accepts)
        self._sessions: dict[str, str] = {}  # Gradio's session token → what its login stood on (credential)
        self._sessions_lock = threading.Lock()

    @property
    def store(self) -> Store:
        with self._store_lock:
            if self._store is None:
                self._store = Store(self.settings.data_dir)
            return self._store

    def run_job(self, *args, **kwargs) -> dict:
        if self._run_job is None:
            from playground.jobs import run_job
            self._run_job = run_job
        return self._run_job(*args, **kwargs)

    def has_gpu(self) -> bool:
        if self._has_gpu is None:
            from playground.jobs import health
            return bool(health().get("gpus"))
        return bool(self._has_gpu())

    def exercises_by_name(self) -> dict[str, Exercise]:
        return load_exercises(self.exercises_dir)  # read each time: a teacher adds a folder without a restart

    # -- share links ------------------------------------------------------------------------------------------------
    SHARES, SHARE_WINDOW = 30, 600.0  # new share links one user (a login, else an address) may make in the window
    SHARES_PER_ADDRESS = 200  # and one address in all, where the class password lets anyone take any name

    def share(self, kernel: str, source: str, params: dict | None, summary: dict | None = None,
              base_url: str = "", who: str = "anon", address: str | None = None) -> dict:
        """A share link for the content; `who` (gateway.student_of) is held to SHARES new links a window, and
        where names are free (the class password, no roster) so is their `address` (client_address), to
        SHARES_PER_ADDRESS: else each new name would be a new quota. Shares are kept for good, so a script looping
        over /share would fill the server's disk: a link whose content is stored already adds nothing and does not
        count."""
        from . import gateway
        from .own_kernel import OWN
        known = [*gateway.kernel_names(), OWN]
        if kernel not in known:  # a link would open another kernel than it names
            return error("parameters", f"no kernel named {quoted(kernel)} to share; one of {', '.join(known)}")
        try:
            share_id = self.store.share_id_of(kernel, source or "", params or {}, summary)
            if share_id is None:
                if (refused := self._count_share(who, address)) is not None:
                    return refused
                share_id = self.store.put_share(kernel, source or "", params or {}, summary)
        except ShareError as exc:
            return error("parameters", str(exc))
        except StoreError as exc:
            log.exception("share failed")
            return error("internal", f"the share could not be stored: {exc}")
        return {"ok": True, "id": share_id, "url": f"{base_url.rstrip('/')}/?s={share_id}"}

    def _count_share(self, who: str, address: str | None = None) -> dict | None:
        """Count a new share of `who` (and of their address where names are free), or the refusal when one of them
        has made its most in the window."""
        limits = [(who, self.SHARES)]
        if address and who.startswith("user:") and who.lower() != f"user:{TEACHER}" and self.names_are_free():
            limits.append((("address", address), self.SHARES_PER_ADDRESS))
        full = self._shares.take_all(limits)
        if full is None:
            return None
        wait, key = full
        again = (f"try again in {max(1, math.ceil(wait))} s (a link to the same code and result as before needs no "
                 "new one)")
        if key == who:
            return error("busy", f"{self.SHARES} new share links in {self.SHARE_WINDOW / 60:g} minutes is the most "
                                 f"one person may make: {again}")
        return error("busy", f"{self.SHARES_PER_ADDRESS} new share links in {self.SHARE_WINDOW / 60:g} minutes is "
                             f"the most that may come from this address under the class password: {again}")

    def names_are_free(self) -> bool:
        """Can one person log in under any name they like (the class password, no roster, no proxy's header)?"""
        return bool(self.class_password) and not self.settings.user_header and not self.has_roster()

    def open_share(self, share_id: str) -> dict:
        found = self.store.get_share(share_id)
        if found is None:
            return error("parameters", f"no shared kernel has the id {quoted(share_id, 40)}: check the link (ids "
                                       "are 10 or more letters and digits)")
        return {"ok": True, **found}

    # -- exercises and submissions ----------------------------------------------------------------------------------
    def exercises(self) -> list[dict]:
        return [ex.public() for ex in self.exercises_by_name().values()]

    def submit(self, student: str | None, exercise: str, source: str, params: dict | None,
               on_progress=None) -> dict:
        """Verify (visible and hidden problems, fresh inputs), time, verify again; record; answer."""
        if not student:
            return error("permission", "submitting needs to know who you are, and this server has no login: the "
                                       "teacher sets a class password or imports a roster (README, Teaching a class)")
        ex = self.exercises_by_name().get(str(exercise or ""))
        if ex is None and not exercise:
            return error("parameters", "pick an exercise first; the exercises are "
                                       f"{', '.join(self.exercises_by_name()) or 'none'}")
        if ex is None:
            return error("parameters", f"no exercise named {quoted(exercise)}; the exercises are "
                                       f"{', '.join(self.exercises_by_name()) or 'none'}")
        if not isinstance(source, str) or not source.strip():
            return error("parameters", "the submission is empty: put your kernel in the editor")
        size = utf8_size(source)
        if size is None:
            return error("parameters", "the submission is not valid text: it holds a character UTF-8 cannot write "
                                       "(a lone surrogate)")
        if size > SOURCE_LIMIT:  # bytes, as stored
            return error("parameters", f"the submission is over {SOURCE_LIMIT // 1024} KiB")
        tile, bad = self._tile_params(ex, params)
        if bad:
            return error("parameters", bad)
        if not self.has_gpu():
            return error("device", NO_GPU)
        with self._submitting_lock:
            if student in self._submitting:
                return error("busy", "your previous submission is still being graded: wait for its answer")
            self._submitting.add(student)
        try:
            return self._grade(student, ex, source, tile, on_progress)
        finally:
            with self._submitting_lock:
                self._submitting.discard(student)

    @staticmethod
    def _tile_params(ex: Exercise, params) -> tuple[dict, str | None]:
        if params is not None and not isinstance(params, dict):
            return {}, f"params must be an object of NAME: VALUE, not {type(params).__name__}"
        params = dict(params or {})
        params.pop("arch", None)
        fixed = [k for k in params if k in ex.timed or k == "dtype"]
        if fixed:
            return {}, (f"{', '.join(fixed)} {'is' if len(fixed) == 1 else 'are'} set by the exercise; params are "
                        f"your kernel's tile parameters only")
        for k, v in params.items():
            if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]{0,63}", str(k)) or not isinstance(v, (int, float, bool, str)):
                return {}, f"parameter {quoted(k)}: a tile parameter is a name and a number, flag or word"
            if isinstance(v, str):  # the page's controls send text: numbers become numbers
                try:
                    params[k] = json.loads(v) if re.fullmatch(r"-?\d+(\.\d+)?|true|false", v) else v
                except ValueError:
                    pass
        return params, None

    def _grade(self, student: str, ex: Exercise, source: str, tile: dict, on_progress) -> dict:
        problems = ex.problems
        timed = len(problems) - 1
        session = f"student:{student}"
        # Two build jobs: the public problems (visible and timed), then the hidden ones. The student's code that
        # builds a public problem never sees a hidden size, so nothing it says (an exception's message, a printed
        # line, a TIR shaped to fail with a message) can carry one back. The hidden job's failures are told as
        # "a hidden shape", and its progress as a fixed text.
        tir: list = [None] * len(problems)
        hidden = [i for i in range(len(problems)) if ex.kind(i) == "hidden"]
        public = [i for i in range(len(problems)) if i not in hidden]
        for indices in (public, hidden):
            if not indices:
                continue
            secret = indices is hidden
            built = self.run_job("build_submission", f"exercise:{ex.name}", source,
                                 {"factory": ex.factory, "problems": [problems[i] for i in indices], "dtype": ex.dtype,
                                  "tile": tile}, session=session, timeout=BUILD_TIMEOUT,
                                 on_progress=(_fixed_progress("building your kernel at the hidden shapes",
                                                              on_progress) if secret else on_progress))
            if (built.get("error") or {}).get("stage") == "busy":
                return error("busy", built["error"]["message"])
            texts = built.get("tir")
            if not built.get("ok") or not isinstance(texts, list) or len(texts) != len(indices) \
                    or not all(isinstance(t, str) for t in texts):
                err = dict(built.get("error") or {"stage": "internal", "message": "no answer from the build",
                                                  "line": None, "log": ""})
                match = re.match(r"problem (\d+): (.*)", str(err.get("message") or ""), re.S)
                at = int(match.group(1)) if match else None
                failed = indices[at] if at is not None and 0 <= at < len(indices) else (indices[0] if secret
                                                                                         else None)
                if match:
                    err["message"] = match.group(2)
                answer = self._refusal(ex, err, failed, "building your kernel failed")
                return self._record(student, ex, source, tile, answer)
            for i, text in zip(indices, texts):
                tir[i] = text
        graded = self.run_job("grade", f"exercise:{ex.name}", None,
                              {"factory": ex.factory, "reference": ex.reference, "tir": tir, "problems": problems,
                               "timed": timed, "dtype": ex.dtype, "seed": _seed(), "recheck_seed": _seed()},
                              session=session, timeout=GRADE_TIMEOUT, on_progress=on_progress)
        if (graded.get("error") or {}).get("stage") == "busy":
            return error("busy", graded["error"]["message"])
        checks = self._checks(ex, graded.get("verification") or [])
        if not graded.get("ok"):
            answer = self._refusal(ex, graded.get("error"), graded.get("failed_problem"),
                                   "your kernel was not accepted")
            answer["checks"] = checks
            return self._record(student, ex, source, tile, answer)
        baselines = graded.get("baselines") or {}
        baseline_name = next(iter(baselines), None)
        baseline_ms = baselines.get(baseline_name)
        median_ms = float(graded["median_ms"])
        answer = {"ok": True, "exercise": ex.name, "student": student, "median_ms": median_ms,
                  "baseline": baseline_name, "baseline_ms": baseline_ms,
                  "speedup": (baseline_ms / median_ms) if baseline_ms else None, "target_ms": ex.target_ms,
                  "met_target": ex.target_ms is not None and median_ms <= ex.target_ms,
                  "timed_at": label(ex.timed), "checks": checks,
                  "message": f"accepted: verified on {len(ex.visible)} visible and {len(ex.hidden)} hidden shapes "
                             f"and again after timing; {median_ms:.4f} ms at {label(ex.timed)}"}
        answer = self._record(student, ex, source, tile, answer, times=graded.get("times"))
        if answer.get("ok"):
            board = self.store.leaderboard(ex.name)
            answer["rank"] = next((r["rank"] for r in board if r["student"] == student), None)
        return answer

    @staticmethod
    def _checks(ex: Exercise, verification: list[dict]) -> list[dict]:
        """The verdicts as a student may see them: a hidden problem by number only, pass or fail, no sizes."""
        out, hidden_seen = [], 0
        for v in verification:
            kind = ex.kind(int(v.get("problem", -1))) if isinstance(v.get("problem"), int) else "hidden"
            if kind == "hidden":
                hidden_seen += 1
                out.append({"problem": f"hidden shape {hidden_seen}", "passed": bool(v.get("passed")),
                            "message": "ok" if v.get("passed") else "wrong result"})
            else:
                out.append({"problem": label(ex.problems[v["problem"]]), "passed": bool(v.get("passed")),
                            "rel_error": v.get("rel_error"), "message": v.get("message")})
        return out

    @staticmethod
    def _refusal(ex: Exercise, err: dict | None, failed: int | None, what: str) -> dict:
        """The refusal a student sees: the engine's message for a visible problem, a plain one for a hidden one."""
        # The paths are taken out here, not from the jobs' whole answers: the TIR the grader gets stays as built.
        from .gateway import in_users_terms
        err = in_users_terms(dict(err or {"stage": "internal", "message": "no answer from the grader", "line": None,
                                          "log": ""}), ex.factory)  # the student's file: vector_add.py
        message = str(err.get("message") or "")
        match = re.match(r"problem (\d+): (.*)", message, re.S)  # the build job names the problem it failed at
        if match:
            failed, message = int(match.group(1)), match.group(2)
        if failed is not None and 0 <= failed < len(ex.problems) and ex.kind(failed) == "hidden":
            kinds = {"verify": "gives a wrong result", "tilelang": "does not compile", "nvcc": "does not compile",
                     "device": "fails on the GPU", "python": "raises an exception", "timeout": "runs too long"}
            text = (f"{what}: it passes the visible shapes but {kinds.get(err.get('stage'), 'fails')} at a hidden "
                    f"shape. Check sizes that are not multiples of your tiles, and tiny or odd sizes.")
            return error(err.get("stage") or "verify", text, hidden=True)
        where = f" (at {label(ex.problems[failed])})" if failed is not None and 0 <= failed < len(ex.problems) \
            and f"{label(ex.problems[failed])}" not in message else ""
        return error(err.get("stage") or "internal", f"{what}{where}: {message}", line=err.get("line"),
                     log=err.get("log") or "", hidden=False)

    def _record(self, student: str, ex: Exercise, source: str, tile: dict, answer: dict,
                times: dict | None = None) -> dict:
        """Keep the submission (accepted or refused) for the board and the teacher."""
        detail = {"checks": answer.get("checks"), "times": times,
                  "error": (answer.get("error") or {}).get("message")}
        try:
            answer["submission"] = self.store.add_submission(
                ex.name, student, source, tile, accepted=bool(answer.get("ok")),
                median_ms=answer.get("median_ms") if answer.get("ok") else None,
                baseline_ms=answer.get("baseline_ms") if answer.get("ok") else None,
                message=answer.get("message") or (answer.get("error") or {}).get("message", ""), detail=detail)
        except StoreError as exc:
            log.exception("recording a submission failed")
            return error("internal", f"the submission was graded but could not be recorded: {exc}")
        return answer

    def leaderboard(self, exercise: str) -> dict:
        ex = self.exercises_by_name().get(str(exercise or ""))
        if ex is None:
            return error("parameters", f"no exercise named {quoted(exercise)}")
        rows = self.store.leaderboard(ex.name)
        for r in rows:
            r["met_target"] = ex.target_ms is not None and r["median_ms"] <= ex.target_ms
        return {"ok": True, "exercise": ex.name, "timed_at": label(ex.timed), "target_ms": ex.target_ms,
                "rows": rows}

    # -- who is who ---------------------------------------------------------------------------------------------------
    def login(self, username: str, password: str) -> bool:
        """Gradio's auth: the teacher with the teacher password; a student of the roster with their own password;
        without a roster, any other name with the class password. What it stood on goes to LOGIN_SEEN, where the
        login's guard set one (the session it opens is then known: may_stay)."""
        credential = self.credential(username, password)
        seen = LOGIN_SEEN.get()
        if seen is not None:
            seen["credential"] = credential
        return credential is not None

    async def login_in_a_thread(self, username: str, password: str) -> bool:
        """`login` for Gradio's login route, in a worker thread: a roster's password hash (about 50 ms, and as long
        for a name off the roster) must not hold the server's event loop, and every page with it, while it runs.
        (The thread runs in a copy of this context: what the login stood on still reaches LOGIN_SEEN's holder.)"""
        import asyncio
        return await asyncio.to_thread(self.login, username, password)

    def credential(self, username: str, password: str) -> str | None:
        """What a login with these stands on: TEACHER_LOGIN, CLASS_LOGIN, the roster's stored hash for the name; None
        when refused. A name not on the roster costs the same password hash as one on it (its timing tells nothing)."""
        name = user_name(username)
        given = str(password or "").encode()
        if len(name) > NAME_LIMIT or not name.isprintable():  # (zero-width and control characters: a look-alike name)
            return None
        if name.lower() == TEACHER:
            teacher = self.settings.teacher_password
            return TEACHER_LOGIN if teacher and hmac.compare_digest(given, teacher.encode()) else None
        if self.has_roster():
            return self.store.student_credential(name, str(password or ""))
        if self.class_password and name and hmac.compare_digest(given, self.class_password.encode()):
            return CLASS_LOGIN
        return None

    def standing_of(self, username: str) -> str:
        """What a login as `username` stands on now, for the device cookies that logins hand out (server.py): a
        digest of the teacher password or of the class password, or the roster's stored hash for the name ("" for a
        name off the roster). It changes when that password does."""
        name = user_name(username)
        if name.lower() == TEACHER:
            return "teacher:" + hashlib.sha256((self.settings.teacher_password or "").encode()).hexdigest()
        if self.has_roster():
            return self.store.password_hash_of(name) or ""
        return "class:" + hashlib.sha256((self.class_password or "").encode()).hexdigest()

    def may_stay(self, username: str | None, credential: str | None = None,
                 hashes: dict[str, str] | None = None) -> bool:
        """May a session logged in as `username`, whose login stood on `credential` (None: not seen), go on? The
        teacher's, yes (only the teacher password logs in as 'teacher'). With a roster (`hashes`: its {name: stored
        hash}, when already read), only a session opened with the password the roster holds for that name now: not
        one of the class password, whatever name it took (the roster's own names too), nor one of a password a later
        import replaced. Without a roster, any."""
        name = user_name(username)
        if name.lower() == TEACHER:
            return True
        if hashes is None:
            hashes = self.store.password_hashes() if self.has_roster() else None
        if not hashes:
            return True
        return credential is not None and credential == hashes.get(name)

    def session_opened(self, app, token: str, username: str, credential: str | None) -> None:
        """The login's guard saw Gradio open session `token` for `username` on `credential`: kept for a later roster
        import, and ended at once if the roster no longer accepts it (a roster imported while this login was
        checked)."""
        with self._sessions_lock:
            self._sessions[token] = credential
            if len(self._sessions) > 10000:  # sessions Gradio has ended (a logout) are forgotten
                tokens = getattr(app, "tokens", {})
                self._sessions = {t: c for t, c in self._sessions.items() if t in tokens}
        if not self.may_stay(username, credential):
            getattr(app, "tokens", {}).pop(token, None)
            self.session_ended(token)

    def credential_of(self, token: str) -> str | None:
        with self._sessions_lock:
            return self._sessions.get(token)

    def session_ended(self, token: str) -> None:
        with self._sessions_lock:
            self._sessions.pop(token, None)

    def login_needed(self) -> bool:
        """Is there anything to log in with (else the page is open, as without a class password before)? A roster
        is only looked for in a database that exists: a server without class settings creates none at start."""
        if self.class_password or self.settings.teacher_password:
            return True
        return self.has_roster()

    def has_roster(self) -> bool:
        """Has the teacher imported a roster? (Looked for only in a database that exists: a server without class
        settings creates none.)"""
        from ..store.db import FILE_NAME
        return (Path(self.settings.data_dir) / FILE_NAME).exists() and self.store.has_roster()

    def gradio_auth(self) -> tuple:
        """(auth, auth_dependency) for Gradio's launch: a reverse proxy's user header when PLAYGROUND_USER_HEADER
        is set (the proxy has authenticated the user; the server must be reachable through it only), else our
        login when there is anything to log in with, else none."""
        header = self.settings.user_header
        if header:
            def proxy_user(request) -> str | None:
                return user_name(request.headers.get(header.lower()))[:NAME_LIMIT] or None
            return None, proxy_user
        return (self.login_in_a_thread if self.login_needed() else None), None

    def login_message(self) -> str:
        """The login page's line (serve() sets it again after each roster import)."""
        if self.has_roster():
            return ("TileLang Playground: a roster is in force. Log in with your name as your teacher wrote it and "
                    "your own password, the one your teacher gave you (not the class password, which no longer "
                    "works). The teacher: 'teacher'.")
        return ("TileLang Playground: your name and the class password, or your own password once your teacher has "
                "given you one (the teacher: 'teacher').")

    def is_teacher(self, username: str | None, teacher_password: str | None = None) -> bool:
        teacher = self.settings.teacher_password
        if not teacher:
            return False
        if user_name(username).lower() == TEACHER and not self.settings.user_header:
            return True  # logged in as the teacher (the login checked the password)
        return bool(teacher_password) and hmac.compare_digest(str(teacher_password).encode(), teacher.encode())

    def shows_teacher_view(self, username: str | None) -> bool:
        """Is the page's Teacher section for this user? Not for a student logged in under their own name (its
        actions refuse them); yes for the teacher, and wherever the teacher might be anyone: no login (the teacher
        types the password there), or a proxy's user header (a header never makes the teacher: the password does)."""
        if not self.settings.teacher_password:
            return False
        name = user_name(username)
        return not name or bool(self.settings.user_header) or name.lower() == TEACHER

    # -- the teacher's view ---------------------------------------------------------------------------------------------
    TEACHER_TRIES, TEACHER_WINDOW = 5, 600.0  # wrong teacher passwords a student may give in the window
    TEACHER_TRIES_ADDRESS = 30  # and one address in all: one student under many names (the class password) meets it

    def _teacher_only(self, username, teacher_password, address: str | None = None) -> dict | None:
        if not self.settings.teacher_password:
            return error("permission", "the teacher's view is off: set PLAYGROUND_TEACHER_PASSWORD")
        if self.is_teacher(username, None):  # logged in as the teacher
            return None
        # A student giving the teacher password: guesses are limited per student, and per address (`address`:
        # client_address), since the class password lets one student log in under any number of names. They are
        # not counted for all users together: students could then deny the teacher, who types the password here
        # from elsewhere; and the teacher's own login as 'teacher' never meets either limit.
        who = user_name(username)[:NAME_LIMIT] or f"someone at {address or 'an unknown address'}"  # (no login)
        where = ("address", address or "unknown")  # (a tuple: never equal to a user's name)
        if (wait := self._teacher_misses.wait(who, self.TEACHER_TRIES)) is not None:
            return error("permission", f"too many wrong teacher passwords from {who}: try again in "
                                       f"{math.ceil(wait)} s")
        if (wait := self._teacher_misses.wait(where, self.TEACHER_TRIES_ADDRESS)) is not None:
            return error("permission", f"too many wrong teacher passwords from this address: try again in "
                                       f"{math.ceil(wait)} s (the teacher may log in as '{TEACHER}')")
        if not self.is_teacher(None, teacher_password):
            if teacher_password:
                self._teacher_misses.add(who)
                self._teacher_misses.add(where)
                log.warning("a wrong teacher password from %r at %s", who, address)
            return error("permission", "only the teacher may do this: log in as 'teacher' or give the teacher "
                                       "password")
        return None

    def import_roster(self, username, teacher_password, roster_csv: str, address: str | None = None) -> dict:
        """A CSV of names (a `name` column, else the first column) → a new password for each, stored hashed; the
        passwords are in the answer only, for the teacher to hand out."""
        if (refused := self._teacher_only(username, teacher_password, address)) is not None:
            return refused
        rows = list(csv.reader(io.StringIO(str(roster_csv or ""))))
        if rows and any(c.strip().lower() == "name" for c in rows[0]):
            col = [c.strip().lower() for c in rows[0]].index("name")
            rows = rows[1:]
        else:
            col = 0
        names = []
        for r in rows:
            if len(r) > col and r[col].strip():
                name = user_name(r[col])
                if name.lower() == TEACHER:
                    return error("parameters", "'teacher' is the teacher's user name; rename that student")
                if name not in names:
                    names.append(name)
        if not names:
            return error("parameters", "the roster has no names: one name a line, or a CSV with a 'name' column")
        passwords = {n: secrets.token_urlsafe(8) for n in names}
        try:
            self.store.add_students(passwords)
        except (StoreError, ValueError) as exc:
            return error("parameters", f"the roster was not imported: {exc}")
        for hook in self.on_roster:
            try:
                hook()
            except Exception:
                log.exception("after the roster import")
        out = io.StringIO()
        writer = csv.writer(out)
        writer.writerow(["name", "password"])
        writer.writerows(passwords.items())
        return {"ok": True, "students": len(passwords), "csv": out.getvalue()}

    def all_submissions(self, username, teacher_password, exercise: str = "", address: str | None = None) -> dict:
        if (refused := self._teacher_only(username, teacher_password, address)) is not None:
            return refused
        return {"ok": True, "rows": self.store.submissions(exercise or None)}

    def open_submission(self, username, teacher_password, submission_id, address: str | None = None) -> dict:
        if (refused := self._teacher_only(username, teacher_password, address)) is not None:
            return refused
        try:
            found = self.store.submission(int(submission_id))
        except (TypeError, ValueError, OverflowError):  # (SQLite's integers stop at 2**63)
            found = None
        if found is None:
            if submission_id in (None, ""):
                return error("parameters", "give the number of a submission (the # column of the list)")
            return error("parameters", f"no submission number {submission_id!r}")
        return {"ok": True, **found}

    def export_csv(self, username, teacher_password, exercise: str = "", address: str | None = None) -> dict:
        if (refused := self._teacher_only(username, teacher_password, address)) is not None:
            return refused
        out = io.StringIO()
        fields = ["id", "exercise", "student", "status", "median_ms", "baseline_ms", "speedup", "message",
                  "submitted_at"]
        writer = csv.DictWriter(out, fields, extrasaction="ignore")
        writer.writeheader()
        for row in self.store.submissions(exercise or None):
            row = {k: spreadsheet_safe(v) for k, v in row.items()}
            writer.writerow({**row, "submitted_at": time.strftime("%Y-%m-%d %H:%M:%S",
                                                                  time.gmtime(row["created_at"]))})
        return {"ok": True, "csv": out.getvalue()}

    def reset_board(self, username, teacher_password, exercise: str, address: str | None = None) -> dict:
        if (refused := self._teacher_only(username, teacher_password, address)) is not None:
            return refused
        if exercise not in self.exercises_by_name():
            return error("parameters", f"no exercise named {quoted(exercise)}")
        self.store.reset_board(exercise)
        return {"ok": True, "exercise": exercise, "rows": []}


def _seed() -> int:
    return int.from_bytes(os.urandom(4), "little")


# -- the named API endpoints ---------------------------------------------------------------------------------------
_classroom: Classroom | None = None
_classroom_lock = threading.Lock()


def classroom() -> Classroom:
    """The server's Classroom, made from this process's settings on first use (`install` sets another)."""
    global _classroom
    with _classroom_lock:
        if _classroom is None:
            _classroom = Classroom(current())
        return _classroom


def install(room: Classroom) -> Classroom:
    """Make `room` the one the endpoints and the page use (the server at start-up, with its settings)."""
    global _classroom
    with _classroom_lock:
        _classroom = room
    return room


def user_of(request) -> str | None:
    """The logged-in user's name (Gradio sets it from the login, or from the proxy header's auth_dependency)."""
    name = getattr(request, "username", None) if request is not None else None
    return user_name(name) or None


def base_url_of(request) -> str:
    """This page's address as the browser sees it (a proxy's forwarded host and scheme win), for absolute links."""
    headers = getattr(request, "headers", None) or {}
    host = headers.get("x-forwarded-host") or headers.get("host")
    if not host:
        return ""
    scheme = headers.get("x-forwarded-proto") or "http"
    return f"{scheme}://{host}"


def share(kernel: str, source: str = "", params: dict | None = None, summary: dict | None = None,
          request: gr.Request = None) -> dict:
    """Store the kernel, its edited source and parameters (and a result summary) under a short immutable id;
    {"ok", "id", "url"} where url opens the page with all of it restored (/?s=ID)."""
    from .gateway import student_of
    return classroom().share(kernel, source, params, summary, base_url_of(request), who=student_of(request),
                             address=client_address(request))


def open_share(share_id: str, request: gr.Request = None) -> dict:
    """What a share link holds: {"ok", "kernel", "source", "params", "summary"}."""
    return classroom().open_share(share_id)


def exercises(request: gr.Request = None) -> list[dict]:
    """The exercises: name, title, statement (Markdown), starter code, the visible shapes, the timed shape, the
    time target. The hidden shapes stay on the server."""
    return classroom().exercises()


def submit(exercise: str, source: str, params: dict | None = None, request: gr.Request = None) -> dict:
    """Grade a solution: verified on the visible and hidden shapes with fresh inputs, timed, verified again; on the
    board if accepted (needs a GPU server and a login)."""
    return classroom().submit(user_of(request), exercise, source, params)


def leaderboard(exercise: str, request: gr.Request = None) -> dict:
    """The exercise's board: per student, the best accepted time, its speedup over the baseline, target met."""
    return classroom().leaderboard(exercise)


def teacher_submissions(exercise: str = "", teacher_password: str = "", request: gr.Request = None) -> dict:
    """Teacher: every submission (all students, accepted and refused), newest first; "" for every exercise."""
    return classroom().all_submissions(user_of(request), teacher_password, exercise, address=client_address(request))


def teacher_open(submission: int, teacher_password: str = "", request: gr.Request = None) -> dict:
    """Teacher: one submission with its source and what the grader said."""
    return classroom().open_submission(user_of(request), teacher_password, submission, address=client_address(request))


def teacher_export(exercise: str = "", teacher_password: str = "", request: gr.Request = None) -> dict:
    """Teacher: every submission as CSV text ({"ok", "csv"})."""
    return classroom().export_csv(user_of(request), teacher_password, exercise, address=client_address(request))


def teacher_reset(exercise: str, teacher_password: str = "", request: gr.Request = None) -> dict:
    """Teacher: empty an exercise's board (the submissions stay in the teacher's list)."""
    return classroom().reset_board(user_of(request), teacher_password, exercise, address=client_address(request))


def teacher_roster(roster_csv: str, teacher_password: str = "", request: gr.Request = None) -> dict:
    """Teacher: import a roster (CSV of names); answers each student's new password as CSV, once."""
    return classroom().import_roster(user_of(request), teacher_password, roster_csv, address=client_address(request))


ENDPOINTS = (share, open_share, exercises, submit, leaderboard, teacher_submissions, teacher_open, teacher_export,
             teacher_reset, teacher_roster)


def register(concurrency_limit: int | None, concurrency_id: str) -> None:
    """Add the class's endpoints to the Blocks being built (call inside `with gr.Blocks():`). Submissions share the
    engine's concurrency group: they are engine jobs."""
    for fn in ENDPOINTS:
        engine = fn is submit
        gr.api(fn, api_name=fn.__name__, concurrency_limit=concurrency_limit if engine else None,
               concurrency_id=concurrency_id if engine else None)


# -- the page's pieces ---------------------------------------------------------------------------------------------
# layout.Page calls: build_share (under the editor), build_exercise (top of the right column: the statement beside
# the editor), build_class (below the results: the board and the teacher's view), wire (their events), and
# shared_draft in its on_load (a /?s=ID link restores exactly what was shared).
SUMMARY_KEYS = ("action", "ok", "label", "passed", "median_ms", "tflops", "gbps", "registers", "error")


def shared_draft(share_id: str | None) -> tuple[dict | None, str | None]:
    """A share link's content as the page's draft ({"kernel", "source", "values", "dtype", "arch"}), or a note
    saying why there is none (an unknown id). (None, None) without a link."""
    if not share_id:
        return None, None
    found = classroom().open_share(share_id)
    if not found.get("ok"):
        return None, found["error"]["message"]
    params = dict(found.get("params") or {})
    dtype, arch = params.pop("dtype", None), params.pop("arch", None)
    return {"kernel": found["kernel"], "source": found["source"], "values": params, "dtype": dtype,
            "arch": arch or "auto", "shared": found["id"], "summary": found.get("summary")}, None


def summary_text(summary: dict | None) -> str:
    """The result a share link carries, in a sentence: "their last run: verified, 70.1 µs, 3812 GB/s"."""
    if not isinstance(summary, dict) or not summary.get("action"):
        return ""
    from .views import fmt_ms

    def number(key):  # what /share was sent is anyone's: a figure that is not a plain number is left out
        value = summary.get(key)
        if not isinstance(value, (int, float)) or isinstance(value, bool):
            return None
        try:
            return value if 0 < float(value) < 1e12 else None  # (float(10**400) overflows; nan fails both)
        except OverflowError:
            return None

    what = f"their last {str(summary['action'])[:20]}"
    if not summary.get("ok"):
        return f"{what} failed ({str(summary.get('error') or 'no reason given')[:120]})"
    parts = []
    if summary.get("passed") is not None:
        parts.append("verified" if summary["passed"] else "wrong results")
    if number("median_ms"):
        parts.append(fmt_ms(number("median_ms")))
        if number("tflops"):
            parts.append(f"{number('tflops'):.1f} TFLOP/s")
        if number("gbps"):
            parts.append(f"{number('gbps'):.0f} GB/s")
    if number("registers"):
        parts.append(f"{number('registers')} registers a thread")
    return f"{what}: " + (", ".join(parts) if parts else "ok")


def _esc(text) -> str:
    import html
    return html.escape(str(text if text is not None else ""))


def share_html(answer: dict) -> str:
    if not answer.get("ok"):
        return f'<div class="pg-share fail">Not shared: {_esc(answer["error"]["message"])}</div>'
    url = answer["url"]
    return (f'<div class="pg-share" id="pg-share-link">Share link (the edited source, the parameters and the last '
            f'result, as they are now): <a href="{_esc(url)}" target="_blank"><code>{_esc(url)}</code></a></div>')


def submission_html(answer: dict) -> str:
    checks = "".join(f'<li class="{"ok" if c["passed"] else "fail"}">{"✔" if c["passed"] else "✘"} '
                     f'{_esc(c["problem"])}: {_esc(c.get("message") or "")}</li>' for c in answer.get("checks") or [])
    checks = f"<ul class='pg-checks'>{checks}</ul>" if checks else ""
    if not answer.get("ok"):
        err = answer.get("error") or {}
        line = f" (line {err['line']})" if err.get("line") else ""
        return (f'<div class="pg-status fail" id="pg-submit-answer"><b>Not accepted</b>{_esc(line)}: '
                f'{_esc(err.get("message"))}{checks}</div>')
    speed = (f", {answer['speedup']:.2f}× {_esc(answer['baseline'])}" if answer.get("speedup") else "")
    target = ("" if answer.get("target_ms") is None else
              f" — target {answer['target_ms']:g} ms {'met' if answer.get('met_target') else 'not met yet'}")
    return (f'<div class="pg-status ok" id="pg-submit-answer"><b>Accepted</b>: {answer["median_ms"]:.4f} ms at '
            f'{_esc(answer["timed_at"])}{speed}{target}; rank {answer.get("rank")} on the board.{checks}</div>')


def board_frame(board: dict):
    import pandas as pd
    columns = ["rank", "student", "time (ms)", "speedup", "target met", "attempts"]
    rows = [[r["rank"], r["student"], round(r["median_ms"], 4),
             None if r["speedup"] is None else round(r["speedup"], 2),
             "" if board.get("target_ms") is None else "yes" if r.get("met_target") else "no",  # (no target: blank)
             r["attempts"]] for r in (board.get("rows") or [])]
    return pd.DataFrame(rows, columns=columns)


def submissions_frame(answer: dict):
    import pandas as pd
    columns = ["id", "exercise", "student", "status", "time (ms)", "speedup", "message", "submitted (UTC)"]
    rows = [[r["id"], r["exercise"], r["student"], r["status"],
             None if r["median_ms"] is None else round(r["median_ms"], 4),
             None if r["speedup"] is None else round(r["speedup"], 2), (r["message"] or "")[:160],
             time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime(r["created_at"]))] for r in answer.get("rows") or []]
    return pd.DataFrame(rows, columns=columns)


def who_html(user: str | None, logout: bool = True) -> str:
    """The page header's note of who is logged in, with a link to log out (none behind a proxy's login: the proxy
    logs its users out); nothing without a login."""
    if not user:
        return ""
    link = ' · <a href="logout">Log out</a>' if logout else ""
    return (f'<div class="pg-who" style="text-align: right; font-size: 0.9rem">Logged in as <b>{_esc(user)}</b>'
            f'{link}</div>')


def build_who(page) -> None:
    """Under the page's title: who is logged in (filled on load, wire)."""
    page.who = gr.HTML("", elem_id="pg-who", visible=False)


def build_share(page) -> None:
    with gr.Row(elem_id="pg-share-row"):
        page.share_btn = gr.Button("Share", size="sm", scale=0, min_width=90, elem_id="pg-share-btn")
        page.share_link = gr.HTML("", elem_id="pg-share-out")
    # Opening a share link replaces the draft the browser kept: an edited one is offered here first, so no one's own
    # code is lost to a classmate's link.
    page.kept_draft = gr.DownloadButton("Your draft before this link", visible=False, size="sm",
                                        elem_id="pg-kept-draft")


def build_exercise(page) -> None:
    names = [(f"{ex['title']} ({ex['name']})", ex["name"]) for ex in classroom().exercises()]
    with gr.Accordion("Exercise", open=False, elem_id="pg-exercise"):
        with gr.Row():
            page.exercise = gr.Dropdown(names, value=None, label="Exercise", scale=3, elem_id="pg-exercise-pick")
            page.starter_btn = gr.Button("Put the starter in the editor", size="sm", scale=1,
                                         elem_id="pg-exercise-starter")
        page.statement = gr.Markdown("Pick an exercise to see what to write.", elem_id="pg-exercise-statement")
        with gr.Row():
            page.submit_params = gr.Textbox("{}", label="Your tile parameters (JSON)", scale=3, lines=1,
                                            elem_id="pg-submit-params")
            page.submit_btn = gr.Button("Submit", variant="primary", scale=1, elem_id="pg-submit")
        page.submit_answer = gr.HTML("", elem_id="pg-submit-out")


def build_class(page) -> None:
    with gr.Accordion("Leaderboard", open=False, elem_id="pg-board"):
        page.board_btn = gr.Button("Show the board of the exercise picked", size="sm", elem_id="pg-board-btn")
        page.board_note = gr.HTML("", elem_id="pg-board-note")
        page.board = gr.Dataframe(board_frame({}), interactive=False, wrap=True, elem_id="pg-board-table")
    if not classroom().settings.teacher_password:
        page.teacher = None
        return
    # Hidden until the page knows who looks at it (wire: shows_teacher_view, on load): a student never sees it.
    with gr.Accordion("Teacher", open=False, visible=False, elem_id="pg-teacher") as page.teacher:
        with gr.Row():
            page.teacher_pw = gr.Textbox("", label="Teacher password (not needed when logged in as teacher)",
                                         type="password", scale=2)
            page.teacher_ex = gr.Dropdown([("every exercise", "")] + [(e["name"], e["name"])
                                                                       for e in classroom().exercises()],
                                          value="", label="Exercise", scale=1)
        with gr.Row():
            page.teacher_list = gr.Button("List submissions", size="sm")
            page.teacher_csv = gr.Button("Export CSV", size="sm")
            page.teacher_reset = gr.Button("Reset this exercise's board", size="sm", variant="stop")
        page.teacher_note = gr.HTML("")
        # The CSV is made on the click, then offered here (a DownloadButton hands out the file it held before the
        # click: each export came one click late, the first none at all).
        page.teacher_csv_file = gr.File(label="Submissions (CSV)", visible=False, interactive=False,
                                        elem_id="pg-teacher-csv")
        page.teacher_rows = gr.Dataframe(submissions_frame({}), interactive=False, wrap=True, max_height=360)
        with gr.Row():
            page.teacher_id = gr.Number(None, label="Submission id", precision=0, scale=1)
            page.teacher_open = gr.Button("Open its code", size="sm", scale=1)
        page.teacher_code = gr.Code("", language="python", label="Submission", interactive=False)
        page.roster = gr.Textbox("", label="Roster: one name a line, or a CSV with a 'name' column", lines=4)
        page.roster_btn = gr.Button("Import the roster and make passwords", size="sm")
        page.roster_out = gr.Code("", language=None, label="Passwords to hand out (shown once)", interactive=False)


def wire(page, demo) -> None:
    from . import views
    light = dict(api_visibility="private", concurrency_limit=None)

    def on_share(data: dict, request: gr.Request):
        kernel, source, c, values, dtype, arch = page.read(data)
        from . import controls as ctl
        params = {**ctl.engine_params(values, dtype), **({"arch": arch} if arch else {})}
        last = (data[page.history] or [None])[-1]
        summary = {k: last.get(k) for k in SUMMARY_KEYS} if isinstance(last, dict) else None
        return share_html(share(kernel, source, params, summary, request))
    page.share_btn.click(on_share, page.setup | {page.history}, page.share_link, **light)

    def keep_draft(draft, request: gr.Request):
        """On a share link's load: the browser's own draft (read as the page loads, before the link's content
        replaces it), offered as a download when it was edited and differs from what was shared."""
        share_id = (dict(request.query_params) if request is not None else {}).get("s")
        if not share_id or not isinstance(draft, dict) or not isinstance(draft.get("source"), str):
            return gr.update(visible=False)
        from . import gateway
        from .layout import offer_kept
        kernel = str(draft.get("kernel") or "kernel")
        shared = classroom().store.get_share(share_id)
        if gateway.is_original(kernel, draft["source"]) or (shared and shared["source"] == draft["source"]):
            return gr.update(visible=False)
        return offer_kept(request, kernel, "-my-draft.py", draft["source"],
                          f"Your own {kernel} draft, replaced by this link: download it")
    demo.load(keep_draft, page.draft, page.kept_draft, **light)

    def logged_in(request: gr.Request):
        html = who_html(user_of(request), logout=not classroom().settings.user_header)
        return gr.update(value=html, visible=bool(html))  # (no login: no line at all)
    if getattr(page, "who", None) is not None:
        demo.load(logged_in, None, page.who, **light)

    def on_exercise(name):
        ex = classroom().exercises_by_name().get(name or "")
        if ex is None:
            return "Pick an exercise to see what to write."
        return ex.statement + f"\n\n*Hidden shapes: {len(ex.hidden)}, with fresh random inputs at each submission.*"
    page.exercise.change(on_exercise, page.exercise, page.statement, **light)

    def on_starter(data: dict, request: gr.Request):
        """The starter in the editor as the source of the kernel it defines, with that kernel's controls: the page
        compiles the editor as the kernel picked, and a gemm starter read as vector_add has no kernel to build.
        The text it replaces, if edited, is offered as a download."""
        from . import gateway
        from .layout import offer_kept
        ex = classroom().exercises_by_name().get(data[page.exercise] or "")
        if ex is None:
            return {page.status: '<div class="pg-status idle">Pick an exercise first.</div>'}
        before, kernel_before = data[page.editor] or "", data[page.kernel]
        kept = gr.update(visible=False)
        if before.strip() and before != ex.starter and not gateway.is_original(kernel_before, before):
            kept = offer_kept(request, kernel_before, "-before-the-starter.py", before,
                              "Your text before the starter: download it")
        status = (f'<div class="pg-status idle">The starter of {views.esc(ex.title)} is in the editor, as '
                  f'{views.esc(ex.factory)}: compile it, then make it faster and Submit.</div>')
        if ex.factory not in page.names:  # a kernel of the teacher's own: the text alone
            return {page.editor: ex.starter, page.status: status, page.kept_draft: kept}
        return {**page.switch_to(ex.factory, ex.starter, data, request, status, ex.dtype), page.kept_draft: kept}
    page.starter_btn.click(on_starter, page.setup | {page.exercise, page.shown, page.edited},
                           page.everything | {page.kept_draft},
                           cancels=page.jobs, **light)  # a late answer of the kernel before must not land on it

    def on_submit(name, source, params_text, request: gr.Request, progress=gr.Progress()):
        try:
            params = json.loads(params_text or "{}")
        except ValueError as exc:
            return submission_html(error("parameters", f"the tile parameters are not JSON: {exc}")), gr.update(), \
                gr.update()
        if not isinstance(params, dict):
            return submission_html(error("parameters", 'tile parameters are an object: {"block_N": 2048}')), \
                gr.update(), gr.update()

        def report(what, fraction):
            try:
                progress(None if fraction is None else float(fraction), desc=str(what))
            except Exception:
                pass
        answer = classroom().submit(user_of(request), name, source, params, report)
        board = classroom().leaderboard(name) if name else {}
        if not board.get("ok"):
            return submission_html(answer), gr.update(), gr.update()
        return submission_html(answer), board_frame(board), views.board_note_html(name, board)
    page.submit_btn.click(on_submit, [page.exercise, page.editor, page.submit_params],
                          [page.submit_answer, page.board, page.board_note], api_visibility="private",
                          concurrency_limit=page.settings.ui_concurrency, concurrency_id="engine",
                          show_progress_on=[page.submit_answer])

    def on_board(name):
        board = classroom().leaderboard(name) if name else {}
        return board_frame(board if board.get("ok") else {}), views.board_note_html(name, board)
    page.board_btn.click(on_board, page.exercise, [page.board, page.board_note], **light)

    if page.teacher is None:
        return

    def teacher_view(request: gr.Request):
        return gr.update(visible=classroom().shows_teacher_view(user_of(request)))
    demo.load(teacher_view, None, page.teacher, **light)

    def teacher_list(pw, ex, request: gr.Request):
        answer = classroom().all_submissions(user_of(request), pw, ex, address=client_address(request))
        if not answer.get("ok"):
            return f'<div class="pg-status fail">{_esc(answer["error"]["message"])}</div>', submissions_frame({})
        return f'<div class="pg-status ok">{len(answer["rows"])} submissions.</div>', submissions_frame(answer)
    page.teacher_list.click(teacher_list, [page.teacher_pw, page.teacher_ex],
                            [page.teacher_note, page.teacher_rows], **light)

    def teacher_open(pw, sid, request: gr.Request):
        answer = classroom().open_submission(user_of(request), pw, sid, address=client_address(request))
        if not answer.get("ok"):
            return f'<div class="pg-status fail">{_esc(answer["error"]["message"])}</div>', ""
        return (f'<div class="pg-status ok">#{answer["id"]} by {_esc(answer["student"])}, {answer["status"]}: '
                f'{_esc(answer["message"])}</div>', answer["source"])
    page.teacher_open.click(teacher_open, [page.teacher_pw, page.teacher_id], [page.teacher_note, page.teacher_code],
                            **light)

    def teacher_csv(pw, ex, request: gr.Request):
        answer = classroom().export_csv(user_of(request), pw, ex, address=client_address(request))
        if not answer.get("ok"):
            return (f'<div class="pg-status fail">{_esc(answer["error"]["message"])}</div>',
                    gr.update(value=None, visible=False))
        from .layout import download_path
        name = f"submissions-{re.sub(r'[^A-Za-z0-9_-]', '', ex or '') or 'all'}.csv"
        return (f'<div class="pg-status ok">{_esc(name)} is ready: download it below.</div>',
                gr.update(value=download_path("teacher", name, answer["csv"]), visible=True))
    page.teacher_csv.click(teacher_csv, [page.teacher_pw, page.teacher_ex],
                           [page.teacher_note, page.teacher_csv_file], **light)

    def teacher_reset(pw, ex, request: gr.Request):
        if not ex:
            return '<div class="pg-status fail">Pick the exercise whose board to reset.</div>'
        answer = classroom().reset_board(user_of(request), pw, ex, address=client_address(request))
        return (f'<div class="pg-status ok">The board of {_esc(ex)} is empty again.</div>' if answer.get("ok") else
                f'<div class="pg-status fail">{_esc(answer["error"]["message"])}</div>')
    page.teacher_reset.click(teacher_reset, [page.teacher_pw, page.teacher_ex], page.teacher_note, **light)

    def roster(pw, text, request: gr.Request):
        answer = classroom().import_roster(user_of(request), pw, text, address=client_address(request))
        if not answer.get("ok"):
            return f'<div class="pg-status fail">{_esc(answer["error"]["message"])}</div>', ""
        n = answer["students"]
        return (f'<div class="pg-status ok">{n} student{"" if n == 1 else "s"} imported; hand each their password.'
                f'</div>', answer["csv"])
    page.roster_btn.click(roster, [page.teacher_pw, page.roster], [page.teacher_note, page.roster_out], **light)
