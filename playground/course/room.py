"""The class on one server: its state (the store, the jobs) and its rules, for the page and the API to call.

Who is who: a student's name is the login's user name: a roster imported by the teacher (per-student passwords,
stored hashed), the class password (any name), or a reverse proxy's authenticated user header
(`PLAYGROUND_USER_HEADER`). The teacher logs in as `teacher` with PLAYGROUND_TEACHER_PASSWORD, or passes that
password to the teacher's actions.

A submission is graded in two jobs (playground/engine/grading.py): one runs the student's Python only to build the
kernel's TIR for each problem; the other, which runs none of the student's Python, compiles that TIR, verifies it on
the visible and the hidden problems with fresh inputs, times it, and verifies it again, and records the GPU it ran
on and its speed as a share of the speed of light there. The hidden problems and the seeds are sent to the jobs,
never to the page; what the page gets about a hidden problem is only pass or fail.

Nothing here imports or runs a user's code: source text goes to run_job, exercise folders are ours. No Gradio here:
playground/ui/classroom.py is the page over it.
"""
from __future__ import annotations

import base64
import contextlib
import hashlib
import hmac
import logging
import math
import os
import re
import threading
import time
from pathlib import Path

from ..engine.errors import StageError, quoted
from ..engine.source import SOURCE_LIMIT
from ..settings import Settings, current
from ..store import ShareError, Store, StoreError, utf8_size
from . import agents as tokens, boards, exports, roster as rosters, similarity, submitting, trajectories
from .access import (CLASS_LOGIN, LOGIN_SEEN, NAME_LIMIT, TEACHER, TEACHER_LOGIN, Recent, TeacherGate, error,
                     plain_text, user_name)
from .exercises import Exercise, ExerciseError, iso, label, load_exercises, parse_time, time_text

log = logging.getLogger("playground.classroom")
ANNOUNCEMENT_LIMIT = 2000  # characters of an announcement
REASON_LIMIT = 500  # characters of a flag's reason


def _fixed_progress(text: str, on_progress):
    """A progress callback that shows `text` whatever the job reports (a job that runs the student's code on hidden
    problems could report them)."""
    if on_progress is None:
        return None
    return lambda _what, fraction: on_progress(text, fraction)


def _seed() -> int:
    return int.from_bytes(os.urandom(4), "little")


def session_digest(token: str) -> str:
    """What the database keeps of a login session's token (0005_sessions.sql): its SHA-256."""
    return hashlib.sha256(str(token).encode()).hexdigest()


def _submission_id(value) -> int | None:
    try:
        n = int(value)
    except (TypeError, ValueError, OverflowError):
        return None
    return n if 0 < n < 2 ** 63 else None  # (SQLite's integers stop at 2**63)


class Classroom:
    """The class's server-side state and rules. `run_job` and `has_gpu` are the job layer's; `store` is made from
    the settings' data folder on first use; `clock` gives the time deadlines are judged at."""

    def __init__(self, settings: Settings | None = None, store: Store | None = None, run_job=None, has_gpu=None,
                 exercises_dir: Path | None = None, class_password: str | None = None, clock=time.time):
        self.settings = settings or current()
        self._store = store
        self._store_lock = threading.Lock()
        self._run_job = run_job
        self._has_gpu = has_gpu
        self.exercises_dir = Path(exercises_dir or self.settings.exercises_dir)
        self.class_password = class_password if class_password is not None else self.settings.password
        self.clock = clock
        self._grading: dict[str, set[str]] = {"submission": set(), "check": set()}  # students with one being graded
        self._grading_lock = threading.Lock()
        self.gate = TeacherGate(self.settings.teacher_password, self.settings.user_header, log)
        self._shares = Recent(self.SHARE_WINDOW)  # who made new share links (and from where)
        self._late = Recent(self.LATE_WINDOW)  # submissions recorded after an exercise closed, per student
        self._aliases = Recent(self.ALIAS_WINDOW)  # names chosen for the boards, per student
        self._seen: dict[str, float] = {}  # when each student was last written as seen (at most once a minute)
        self.on_roster: list = []  # called after a roster changes (serve(): end the sessions it no longer accepts)
        self.live_sessions = lambda: {}  # {session token: user} of the server (serve() sets it: app.tokens)
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

    def in_users_terms(self, answer, kernel: str):
        """An answer with the server's folders taken out of its paths (the page's Classroom does it: gateway)."""
        return answer

    def share_kernels(self) -> list[str]:
        """The kernels a share link may name."""
        from playground.engine.kernel import builtin_names
        return builtin_names()

    def exercises_by_name(self) -> dict[str, Exercise]:
        return load_exercises(self.exercises_dir)  # read each time: a teacher adds a folder without a restart

    def left_out_exercises(self, username, teacher_password, address: str | None = None) -> dict:
        """The exercise folders that do not load, and why (their students never see them): for the teacher."""
        if (refused := self._teacher_only(username, teacher_password, address)) is not None:
            return refused
        why: list[str] = []
        found = load_exercises(self.exercises_dir, why)
        return {"ok": True, "folder": str(self.exercises_dir), "exercises": sorted(found), "left_out": why}

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
        known = self.share_kernels()
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
    LATE, LATE_WINDOW = 10, 600.0  # submissions after an exercise closed kept per student in the window

    def exercises(self, student: str | None = None) -> list[dict]:
        """Every exercise as students see it; with `student`, their own deadline where the teacher moved it."""
        out = []
        for ex in self.exercises_by_name().values():
            item = ex.public()
            extension = self.extension_of(ex, student)
            if extension is not None:
                due, late_until = ex.due(extension)
                item.update(deadline=iso(due), late_until=iso(late_until) if ex.late_hours > 0 else None,
                            extended=True)
            item["deadline_text"] = ex.deadline_text(extension)
            out.append(item)
        return out

    def extension_of(self, ex: Exercise, student: str | None) -> float | None:
        """`student`'s own deadline of `ex`, where the teacher moved it."""
        if not student or ex.deadline is None:
            return None
        try:
            return self.store.extension(ex.name, student)
        except StoreError:
            log.exception("an extension could not be read")
            return None

    def submit(self, student: str | None, exercise: str, source: str, params: dict | None,
               on_progress=None, agent: dict | None = None, address: str | None = None) -> dict:
        """Verify (visible and hidden problems, fresh inputs), time, verify again; record; answer. A submission
        after the exercise's deadline and late window (the student's own, where the teacher moved it) is refused
        before anything runs, and kept for the teacher. `agent`: the token an agent submits with (agent_of's
        answer): the submission is the student's, marked as their agent's, and refused where the exercise takes no
        agents; it waits for the student's own (one submission of a student's at a time).
        `address`: the client's, which the job queue counts too where one person may log in under any name."""
        ex, tile, refused = self._solution(student, exercise, source, params, "submit", agent)
        if refused is not None:
            return refused
        self.seen(student)
        extension = self.extension_of(ex, student)
        standing = ex.standing(self.clock(), extension)
        if standing == "closed":
            return self._closed(student, ex, source, tile, extension, agent)
        if not self.has_gpu():
            return error("device", submitting.NO_GPU)
        with self._one_grading(student, "submission") as busy:
            if busy is not None:
                return busy
            answer = self._grade(student, ex, source, tile, on_progress, address=address)
            answer = self._record(student, ex, source, tile, answer, late=standing == "late", agent=agent)
            if answer.get("ok"):
                board = self.store.leaderboard(ex.name)
                answer["rank"] = next((r["rank"] for r in board if r["student"] == student
                                       and bool(r["agent"]) == bool(agent)), None)
            return answer

    def check(self, student: str | None, exercise: str, source: str, params: dict | None,
              on_progress=None, agent: dict | None = None, address: str | None = None) -> dict:
        """A submission's grading on the exercise's public problems only (the visible shapes and the timed one),
        kept nowhere: no board, no attempt, no deadline. The student learns whether their kernel is right where
        they can see the shapes, and its time at the timed one, before they submit. An agent's check is refused
        where the exercise takes no agents, as its submission would be. One check of a student's at a time, apart
        from their submissions: a check never holds a submission up. Every answer says `"checked": true`."""
        return {**self._check(student, exercise, source, params, on_progress, agent, address), "checked": True}

    def _check(self, student, exercise, source, params, on_progress, agent, address) -> dict:
        ex, tile, refused = self._solution(student, exercise, source, params, "check", agent)
        if refused is not None:
            return refused
        self.seen(student)
        if not self.has_gpu():
            return error("device", submitting.NO_GPU_TO_CHECK)
        log.info("%s checks %s%s", student, ex.name, f" (agent #{agent['id']})" if agent else "")
        with self._one_grading(student, "check") as busy:
            if busy is not None:
                return busy
            answer = self._grade(student, ex, source, tile, on_progress, public_only=True, address=address)
        answer.pop("unrecorded", None)
        answer.pop("times", None)
        if answer.get("ok"):
            answer["message"] = (f"right on the {len(ex.visible)} visible shape{'' if len(ex.visible) == 1 else 's'}"
                                 f" and at {label(ex.timed)}: {answer['median_ms']:.4f} ms there. No submission is "
                                 "kept: Submit checks the hidden shapes too and puts it on the board")
        return answer

    def _solution(self, student: str | None, exercise: str, source: str, params: dict | None, verb: str,
                  agent: dict | None) -> tuple[Exercise | None, dict | None, dict | None]:
        """(the exercise, the tile parameters, None) for a solution sent to `verb` ("submit", "check") by the
        student or their `agent`, or (None, None, why not)."""
        if not student:
            doing = {"submit": "submitting", "check": "checking"}.get(verb, verb)
            return None, None, error("permission", f"{doing} needs to know who you are, and this server has no "
                                                   "login: the teacher sets a class password or imports a roster "
                                                   "(README, Teaching a class)")
        ex = self.exercises_by_name().get(str(exercise or ""))
        if ex is None and not exercise:
            return None, None, error("parameters", "pick an exercise first; the exercises are "
                                                   f"{', '.join(self.exercises_by_name()) or 'none'}")
        if ex is None:
            return None, None, error("parameters", f"no exercise named {quoted(exercise)}; the exercises are "
                                                   f"{', '.join(self.exercises_by_name()) or 'none'}")
        if not isinstance(source, str) or not source.strip():
            return None, None, error("parameters", "the solution is empty: put your kernel in the editor")
        size = utf8_size(source)
        if size is None:
            return None, None, error("parameters", "the solution is not valid text: it holds a character UTF-8 "
                                                   "cannot write (a lone surrogate)")
        if size > SOURCE_LIMIT:  # bytes, as stored
            return None, None, error("parameters", f"the solution is over {SOURCE_LIMIT // 1024} KiB")
        tile, bad = submitting.tile_params(ex, params)
        if bad:
            return None, None, error("parameters", bad)
        if agent and not self.agents_allowed(ex):
            return None, None, error("permission", f"{ex.title} takes no agents: the teacher has forbidden them "
                                                   f"({verb} it yourself, on the page)")
        return ex, tile, None

    @contextlib.contextmanager
    def _one_grading(self, student: str, kind: str):
        """One grading of each `kind` ("submission", "check") of a student's at a time: yields None, or the refusal
        to answer."""
        with self._grading_lock:
            busy = student in self._grading[kind]
            if not busy:
                self._grading[kind].add(student)
        if busy:
            yield error("busy", f"your previous {kind} is still being graded: wait for its answer")
            return
        try:
            yield None
        finally:
            with self._grading_lock:
                self._grading[kind].discard(student)

    def _closed(self, student: str, ex: Exercise, source: str, tile: dict, extension: float | None,
                agent: dict | None = None) -> dict:
        deadline, late_until = ex.due(extension)
        until = late_until if ex.late_hours > 0 else deadline
        answer = error("deadline", f"{ex.title} closed at {time_text(until, ex.zone)}"
                                   + (" (the deadline the teacher moved for you)" if extension is not None else "")
                                   + ": submissions are no longer taken. Ask your teacher if you need more time.")
        if self._late.take(student, self.LATE) is None:  # (a script submitting in a loop fills no disk)
            return self._record(student, ex, source, tile, answer, agent=agent)
        return answer

    def _grade(self, student: str, ex: Exercise, source: str, tile: dict, on_progress,
               public_only: bool = False, address: str | None = None) -> dict:
        """Build and grade: the answer (accepted with its time, GPU and record, or the refusal), nothing kept.
        `public_only`: the visible problems and the timed one, no hidden one (a check). The jobs count against the
        student, and where one person may log in under any name (the class password), against `address` too."""
        which = [i for i in range(len(ex.problems)) if not (public_only and ex.kind(i) == "hidden")]
        problems = [ex.problems[i] for i in which]  # (the timed problem is the last, of these as of all)
        timed = len(problems) - 1
        session = f"student:{student}"
        if address and self.names_are_free():
            from playground.jobs.queue import Student  # (the job layer's key for a student and their address)
            session = Student(session, address)
        # Two build jobs: the public problems (visible and timed), then the hidden ones. The student's code that
        # builds a public problem never sees a hidden size, so nothing it says (an exception's message, a printed
        # line, a TIR shaped to fail with a message) can carry one back. The hidden job's failures are told as
        # "a hidden shape", and its progress as a fixed text.
        tir: list = [None] * len(problems)
        hidden = [j for j, i in enumerate(which) if ex.kind(i) == "hidden"]
        public = [i for i in range(len(problems)) if i not in hidden]
        for indices in (public, hidden):
            if not indices:
                continue
            secret = indices is hidden
            built = self.run_job("build_submission", f"exercise:{ex.name}", source,
                                 {"factory": ex.factory, "problems": [problems[i] for i in indices], "dtype": ex.dtype,
                                  "tile": tile}, session=session, timeout=submitting.BUILD_TIMEOUT,
                                 on_progress=(_fixed_progress("building your kernel at the hidden shapes",
                                                              on_progress) if secret else on_progress))
            if (built.get("error") or {}).get("stage") == "busy":
                return error("busy", built["error"]["message"], unrecorded=True)
            texts = built.get("tir")
            if not built.get("ok") or not isinstance(texts, list) or len(texts) != len(indices) \
                    or not all(isinstance(t, str) for t in texts):
                err = dict(built.get("error") or StageError("internal", "no answer from the build").to_json())
                match = re.match(r"problem (\d+): (.*)", str(err.get("message") or ""), re.S)
                at = int(match.group(1)) if match else None
                failed = indices[at] if at is not None and 0 <= at < len(indices) else (indices[0] if secret
                                                                                         else None)
                if match:
                    err["message"] = match.group(2)
                # The paths are taken out here, not from the jobs' whole answers: the TIR the grader gets stays as
                # built. (The student's file: vector_add.py.)
                return submitting.refusal(ex, self.in_users_terms(err, ex.factory),
                                          None if failed is None else which[failed], "building your kernel failed")
            for i, text in zip(indices, texts):
                tir[i] = text
        graded = self.run_job("grade", f"exercise:{ex.name}", None,
                              {"factory": ex.factory, "reference": ex.reference, "tir": tir, "problems": problems,
                               "timed": timed, "dtype": ex.dtype, "seed": _seed(), "recheck_seed": _seed()},
                              session=session, timeout=submitting.GRADE_TIMEOUT, on_progress=on_progress)
        if (graded.get("error") or {}).get("stage") == "busy":
            return error("busy", graded["error"]["message"], unrecorded=True)
        # (the grade job numbers the problems it was given: back to the exercise's numbers)
        verification = [{**v, "problem": which[v["problem"]]} if isinstance(v.get("problem"), int)
                        and 0 <= v["problem"] < len(which) else v for v in graded.get("verification") or []]
        checks = submitting.checks(ex, verification)
        if not graded.get("ok"):
            err = graded.get("error")
            failed = graded.get("failed_problem")
            failed = which[failed] if isinstance(failed, int) and 0 <= failed < len(which) else None
            answer = submitting.refusal(ex, self.in_users_terms(err, ex.factory) if err else None, failed,
                                        "your kernel was not accepted" if not public_only else "the check failed")
            answer["checks"] = checks
            return answer
        answer = submitting.accepted_answer(ex, student, graded, checks)
        answer["times"] = graded.get("times")
        return answer

    def _record(self, student: str, ex: Exercise, source: str, tile: dict, answer: dict, late: bool = False,
                agent: dict | None = None) -> dict:
        """Keep the submission (accepted or refused) for the board and the teacher; a `busy` answer graded
        nothing and is not kept."""
        if answer.pop("unrecorded", False):
            return answer
        times = answer.pop("times", None)
        accepted = bool(answer.get("ok"))
        detail = {"checks": answer.get("checks"), "times": times,
                  "error": (answer.get("error") or {}).get("message"),
                  "stage": (answer.get("error") or {}).get("stage")}
        if accepted and late:
            answer["late"] = True
            answer["message"] += (f"; in the late window: scored {100 * ex.late_penalty:g}% less"
                                  if ex.late_penalty else "; in the late window")
        try:
            answer["submission"] = self.store.add_submission(
                ex.name, student, source, tile, accepted=accepted,
                median_ms=answer.get("median_ms") if accepted else None,
                baseline_ms=answer.get("baseline_ms") if accepted else None,
                message=answer.get("message") or (answer.get("error") or {}).get("message", ""), detail=detail,
                gpu=answer.get("gpu") if accepted else None,
                sol_percent=answer.get("sol_percent") if accepted else None,
                record=answer.get("record") if accepted else None, late=accepted and late, agent=agent)
            if agent:
                answer["agent"] = agent["name"]
        except StoreError as exc:
            log.exception("recording a submission failed")
            return error("internal", f"the submission was graded but could not be recorded: {exc}")
        return answer

    MINE_SHOWN = ("id", "exercise", "status", "median_ms", "speedup", "sol_percent", "gpu", "late", "message",
                  "created_at", "params", "agent")

    def my_submissions(self, student: str | None, exercise: str = "") -> dict:
        """A student's own submissions, newest first (of one exercise, or all): what each answered, as Submit said
        it. A flagged one says it is off the board, not the teacher's reason (the teacher tells it, if at all)."""
        name = user_name(student)
        if not name:
            return error("permission", "log in to see your submissions")
        rows = self.store.submissions(exercise or None, student=name)
        return {"ok": True, "student": name,
                "rows": [{**{k: r.get(k) for k in self.MINE_SHOWN}, "off_board": bool(r.get("flag"))} for r in rows]}

    def my_submission(self, student: str | None, submission_id) -> dict:
        """One of the student's own submissions with its code and tile parameters (to put back in the editor). Not
        where the class password takes any name: there a name is no one's own, and its code would be anyone's."""
        if self.names_are_free():
            return error("permission", "with the class password any name logs in, so a submission's code is shown "
                                       "to no one but the teacher; your teacher can give you a password of your own")
        name, sid = user_name(student), _submission_id(submission_id)
        found = self.store.submission(sid) if name and sid is not None else None
        if found is None or found["student"] != name:  # (another's is "not yours" as much as a missing one)
            return error("parameters", f"you have no submission number {submission_id!r}")
        return {"ok": True, **{k: found.get(k) for k in self.MINE_SHOWN}, "source": found["source"]}

    def leaderboard(self, exercise: str, viewer: str | None = None, teacher_password: str | None = None,
                    who: str = "all") -> dict:
        """The exercise's board; the teacher (`viewer`, or the password) sees who chose which name, and a link that
        re-runs each entry. A student's own work and their agents' are entries apart, told apart (`kind`); `who`:
        "all", "students" or "agents". Where the exercise takes no agents, their entries are off the board (kept)."""
        ex = self.exercises_by_name().get(str(exercise or ""))
        if ex is None:
            return error("parameters", f"no exercise named {quoted(exercise)}")
        if who not in boards.WHO:
            return error("parameters", f"who is one of {', '.join(boards.WHO)}, not {quoted(str(who), 20)}")
        allowed = self.agents_allowed(ex)
        answer = boards.board(ex, self.store.leaderboard(ex.name, agents=allowed),
                              teacher=self.is_teacher(viewer, teacher_password), who=who)
        answer["agents_allowed"] = allowed
        return answer

    # -- what students do -------------------------------------------------------------------------------------------
    ALIASES, ALIAS_WINDOW = 10, 600.0  # names a student may choose for the boards in the window

    def set_alias(self, student: str | None, alias) -> dict:
        """The name `student` shows on the boards instead of their own ("" for their own again)."""
        name = user_name(student)
        if not name or name.lower() == TEACHER:
            return error("permission", "choosing a name for the boards needs a student's login")
        if not isinstance(alias, str):
            return error("parameters", "a name on the boards is text")
        if (wait := self._aliases.take(name, self.ALIASES)) is not None:
            return error("busy", f"{self.ALIASES} names in {self.ALIAS_WINDOW / 60:g} minutes is enough: try again "
                                 f"in {math.ceil(wait)} s")
        others = {r["student"] for r in self.store.roster()}
        if name not in others:  # (the class password takes any name: names that never worked here keep nothing)
            return error("permission", "a name for the boards is for a student of the class: compile, run or submit "
                                       "something on an exercise first")
        shown = {a for s, a in self.store.aliases().items() if s != name}
        text, why = boards.check_alias(alias, name, others, shown)
        if why:
            return error("parameters", why)
        try:
            self.store.set_alias(name, text or None)
        except StoreError:
            return error("parameters", f"another student shows {quoted(text)} already: choose another name")
        return {"ok": True, "alias": text or None,
                "message": f"the boards show you as {text}" if text else "the boards show your own name"}

    def seen(self, student: str | None) -> None:
        """`student` did something now (kept for the roster's "last seen", at most once a minute)."""
        name = user_name(student)
        now = self.clock()
        if not name or len(name) > NAME_LIMIT or now - self._seen.get(name, 0.0) < 60:
            return
        self._seen[name] = now
        if len(self._seen) > 10000:
            self._seen = {k: v for k, v in self._seen.items() if now - v < 60}
        try:
            self.store.touch(name, now)
        except (StoreError, ValueError):
            log.exception("could not note that %r was seen", name)

    def note_activity(self, student: str | None, exercise: str | None, action: str, result: dict) -> None:
        """Keep a compile or run `student` did while working on `exercise` (the page's picked exercise): when, ok,
        the error's stage, and its speed where it was timed. Nothing for a user without a login or an exercise
        that is not one."""
        name = user_name(student)
        if not name or name.lower() == TEACHER or action not in ("compile", "run") or not isinstance(result, dict):
            return
        self.seen(name)  # (on the roster's last seen also without an exercise picked)
        if str(exercise or "") not in self.exercises_by_name():
            return
        err = result.get("error") if isinstance(result.get("error"), dict) else {}
        timing = result.get("timing") if isinstance(result.get("timing"), dict) else {}
        try:
            self.store.add_activity(str(exercise), name, action, bool(result.get("ok")), err.get("stage"),
                                    str(err.get("message") or ""), submitting.positive(timing.get("median_ms")),
                                    submitting.speed_of_light(result), when=self.clock())
        except (StoreError, ValueError):
            log.exception("could not keep %r's %s", name, action)

    def announcement(self) -> dict | None:
        try:
            return self.store.announcement()
        except StoreError:
            log.exception("the announcement could not be read")
            return None

    # -- agents: tokens for MCP clients, and the exercises that take agents --------------------------------------------
    TOKENS = tokens.TOKENS  # live tokens one user may hold

    def agents_need_token(self) -> bool:
        """Must an MCP client present a token? Wherever the page asks for a login (a class password, a roster, a
        teacher password, a proxy's user header); a personal server without one needs none."""
        return self.login_needed() or bool(self.settings.user_header)

    def may_act(self, username: str | None) -> bool:
        """May `username` act on this server now, as a token made by them acts for them? The teacher while a teacher
        password is set; with a roster, only a student on it now (not one removed, nor a name off a roster imported
        since); without one, any name while the class password (or a proxy's header) is in force."""
        name = user_name(username)
        if not name or len(name) > NAME_LIMIT:
            return False
        if name.lower() == TEACHER and not self.settings.user_header:
            return bool(self.settings.teacher_password)
        if self.settings.user_header:  # (the proxy vouches for the name; a student the teacher removed is out)
            return name not in self.store.removed_students()
        if self.has_roster():
            return self.store.password_hash_of(name) is not None
        return bool(self.class_password) or not self.login_needed()

    def make_token(self, username: str | None, name) -> dict:
        """A new token for `username`'s agent, named `name`: {"ok", "token", "id", "name", "hint", "message"}. The
        token is in this answer only (the store keeps its digest): shown once."""
        who = user_name(username)
        if not self.agents_need_token():
            return error("parameters", "this server has no login, so an MCP client needs no token: connect it to "
                                       "/gradio_api/mcp/ as it is")
        if not who:
            return error("permission", "log in first: a token acts as the user who made it")
        if not self.may_act(who):
            return error("permission", f"{who} may not log in here now, so cannot make a token")
        text, why = tokens.check_name(name)
        if why:
            return error("parameters", why)
        token, selector, digest = tokens.new_token()
        try:
            token_id = self.store.add_agent_token(who, text, selector, digest, self.TOKENS)
        except (StoreError, ValueError) as exc:
            return error("internal", f"the token was not made: {exc}")
        if token_id is None:
            return error("busy", f"{self.TOKENS} live tokens is the most one user may hold: revoke one first")
        log.info("%s made agent token #%d (%r)", who, token_id, text)
        return {"ok": True, "token": token, "id": token_id, "name": text, "hint": f"{tokens.PREFIX}{selector[:6]}…",
                "message": f"Token #{token_id} ({text}) acts as {who}. Copy it now: it is not shown again."}

    def tokens_of(self, username: str | None) -> dict:
        """`username`'s live tokens: {"ok", "tokens": [{"id", "name", "hint", "created_at", "last_used"}]}."""
        who = user_name(username)
        if not who:
            return error("permission", "log in first: tokens are each user's own")
        return {"ok": True, "tokens": [tokens.listed(r) for r in self.store.agent_tokens(who)]}

    def revoke_token(self, username: str | None, token_id) -> dict:
        """Revoke one of `username`'s tokens: the next call that presents it is refused."""
        who = user_name(username)
        if not who:
            return error("permission", "log in first: tokens are each user's own")
        number = _submission_id(token_id)
        if number is None or not self.store.revoke_agent_token(number, who):
            return error("parameters", f"you have no live token number {quoted(str(token_id), 20)}")
        log.info("%s revoked agent token #%d", who, number)
        return {"ok": True, "id": number, "message": f"Token #{number} is revoked: it no longer works."}

    def agent_of(self, token) -> dict | None:
        """Who a token acts as, {"id", "name", "student"}, or None: refused for a token that is malformed, unknown,
        revoked, or whose student may no longer act here (may_act). The check runs in constant time over the
        verifier; the token is never logged."""
        parsed = tokens.parse(token)
        if parsed is None:
            return None
        selector, verifier = parsed
        try:
            row = self.store.agent_token(selector)
        except StoreError:
            log.exception("an agent token could not be read")
            return None
        if not tokens.matches(verifier, row["digest"] if row else None) or not self.may_act(row["student"]):
            return None
        now = self.clock()
        if now - (row.get("last_used") or 0) >= 60:  # (written at most once a minute)
            try:
                self.store.agent_token_used(row["id"], now)
            except StoreError:
                log.exception("could not note that agent token #%d was used", row["id"])
        return {"id": row["id"], "name": row["name"], "student": row["student"]}

    def agents_allowed(self, ex: Exercise) -> bool:
        """Does `ex` take agents' submissions (and show them on its board)? The teacher's switch where set, else
        its exercise.toml's `agents` (true unless it says false)."""
        try:
            switched = self.store.exercise_agents().get(ex.name)
        except StoreError:
            log.exception("the agents' switch could not be read")
            switched = None
        return ex.agents if switched is None else switched

    def set_agents(self, username, teacher_password, exercise: str, allowed, address: str | None = None) -> dict:
        """Teacher: allow (True) or forbid (False) agents on `exercise`; None: back to its exercise.toml's."""
        if (refused := self._teacher_only(username, teacher_password, address)) is not None:
            return refused
        ex, bad = self._exercise(exercise)
        if bad:
            return bad
        if allowed is not None and not isinstance(allowed, bool):
            return error("parameters", "allowed is true, false or null (the exercise's own setting)")
        self.store.set_exercise_agents(ex.name, allowed)
        now = self.agents_allowed(ex)
        return {"ok": True, "exercise": ex.name, "agents_allowed": now,
                "message": f"{ex.name}: agents are {'allowed' if now else 'forbidden'}"
                           + (" (as its exercise.toml says)" if allowed is None else "")}

    # -- who is who ---------------------------------------------------------------------------------------------------
    def login(self, username: str, password: str) -> bool:
        """Gradio's auth: the teacher with the teacher password; a student of the roster with their own password;
        without a roster, any other name with the class password. What it stood on goes to LOGIN_SEEN, where the
        login's guard set one (the session it opens is then known: may_stay)."""
        credential = self.credential(username, password)
        seen = LOGIN_SEEN.get()
        if seen is not None:
            seen["credential"] = credential
        if credential not in (None, TEACHER_LOGIN, CLASS_LOGIN):  # a roster's student (any name takes the class
            self.seen(username)                                    # password: those are seen when they work)
        return credential is not None

    async def login_in_a_thread(self, username: str, password: str) -> bool:
        """`login` for Gradio's login route, in a worker thread: a roster's password hash (about 50 ms, and as long
        for a name off the roster) must not hold the server's event loop, and every page with it, while it runs.
        (The thread runs in a copy of this context: what the login stood on still reaches LOGIN_SEEN's holder.)"""
        import asyncio
        return await asyncio.to_thread(self.login, username, password)

    def credential(self, username: str, password: str) -> str | None:
        """What a login with these stands on: TEACHER_LOGIN, CLASS_LOGIN, the roster's stored hash for the name; None
        when refused. A name not on the roster (or removed from it) costs the same password hash as one on it (its
        timing tells nothing)."""
        name = user_name(username)
        given = str(password or "").encode()
        if len(name) > NAME_LIMIT or not name.isprintable():  # (zero-width and control characters: a look-alike name)
            return None
        # Only the name as the class spells it: the session keeps the name as typed, and "Ada  Lovelace" or
        # "Ada\tLovelace" (each the roster's "Ada Lovelace" once folded) would each be a student of its own to
        # whatever counts by the session's name, each with a cap and a quota of their own.
        if str(username or "").strip() != name:
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
        import replaced, nor one of a student removed since. Without a roster, any."""
        name = user_name(username)
        if name.lower() == TEACHER:
            return True
        if hashes is None:
            if not self.has_roster():
                return True
            hashes = self.store.password_hashes()
        elif not hashes and not self.has_roster():
            return True
        return credential is not None and credential == hashes.get(name)

    def session_opened(self, app, token: str, username: str, credential: str | None) -> None:
        """The login's guard saw Gradio open session `token` for `username` on `credential`: kept for a later roster
        import, and ended at once if the roster no longer accepts it (a roster imported while this login was
        checked); else kept in the database too, so that a restart of the server does not end it (restore_session)."""
        with self._sessions_lock:
            self._sessions[token] = credential
            if len(self._sessions) > 10000:  # sessions Gradio has ended (a logout) are forgotten
                held = set(dict.keys(getattr(app, "tokens", {})))  # (those in memory: no kept one looked up here)
                self._sessions = {t: c for t, c in self._sessions.items() if t in held}
        if not self.may_stay(username, credential):
            getattr(app, "tokens", {}).pop(token, None)
            self.session_ended(token)
            return
        if credential in (None, TEACHER_LOGIN, CLASS_LOGIN):  # (0005_sessions.sql says why those are not kept)
            return
        if not dict.__contains__(getattr(app, "tokens", {}), token):  # logged out already
            return
        try:
            self.store.keep_session(session_digest(token), username, credential,
                                    older_than=time.time() - self.SESSION_DAYS * 86400)
        except (StoreError, ValueError):
            log.exception("a login session could not be kept for a restart (it lasts until one)")

    SESSION_DAYS = 14  # a session kept across restarts lasts this long, then its student logs in again

    def restore_session(self, token: str) -> str | None:
        """The user of a roster's student's session a server before this one opened (its token from the browser's
        cookie), where it may go on: kept less than SESSION_DAYS ago, and the roster still holds the password it
        stood on (may_stay: not given anew, the student not removed). None otherwise (the browser asks for a
        login)."""
        if not token or not isinstance(token, str) or len(token) > 200:
            return None
        digest = session_digest(token)
        try:
            row = self.store.kept_session(digest)
            if row is None:
                return None
            user = row["user"]
            if (time.time() - row["created_at"] > self.SESSION_DAYS * 86400 or not self.has_roster() or
                    user_name(user).lower() == TEACHER or
                    not self.may_stay(user, row["credential"])):
                self.store.forget_session(digest)
                return None
        except StoreError:
            log.exception("a kept login session could not be read")
            return None
        with self._sessions_lock:
            self._sessions[token] = row["credential"]
        return user

    def forget_session(self, token: str, everywhere: bool = False, user: str | None = None) -> None:
        """A session ended (a logout, a roster that no longer accepts it): not kept for a restart either;
        `everywhere`: every kept session of `user` (Gradio's logout ends all of a user's sessions)."""
        self.session_ended(token)
        try:
            if everywhere and user:
                self.store.forget_sessions_of(user)
            elif token:
                self.store.forget_session(session_digest(token))
        except (StoreError, ValueError):
            log.exception("a kept login session could not be forgotten")

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
            return ("TileLang Playground: a roster is in force. Log in with your name as your teacher wrote it (one "
                    "plain space between words) and your own password, the one your teacher gave you (not the "
                    "class password, which no longer works). The teacher: 'teacher'.")
        return ("TileLang Playground: your name (one plain space between words) and the class password, or your own "
                "password once your teacher has given you one (the teacher: 'teacher').")

    # -- the teacher's view -------------------------------------------------------------------------------------------
    TEACHER_TRIES, TEACHER_WINDOW = TeacherGate.TRIES, TeacherGate.WINDOW
    TEACHER_TRIES_ADDRESS = TeacherGate.TRIES_ADDRESS

    def is_teacher(self, username: str | None, teacher_password: str | None = None) -> bool:
        return self.gate.is_teacher(username, teacher_password)

    def shows_teacher_view(self, username: str | None) -> bool:
        return self.gate.shows_view(username)

    def _teacher_only(self, username, teacher_password, address: str | None = None) -> dict | None:
        return self.gate.refusal(username, teacher_password, address)

    def _exercise(self, exercise) -> tuple[Exercise | None, dict | None]:
        ex = self.exercises_by_name().get(str(exercise or ""))
        if ex is None:
            return None, error("parameters", f"no exercise named {quoted(exercise)}" if exercise else
                               "pick an exercise first")
        return ex, None

    def _roster_changed(self) -> None:
        for hook in self.on_roster:
            try:
                hook()
            except Exception:
                log.exception("after the roster changed")

    def roster_preview(self, username, teacher_password, roster_csv: str, address: str | None = None) -> dict:
        """What importing `roster_csv` would do, before it does: the names, and the logged-in sessions it would end
        (every session of the class password, of a name off the roster, of a name the import gives a new
        password)."""
        if (refused := self._teacher_only(username, teacher_password, address)) is not None:
            return refused
        names, why, where = rosters.read(roster_csv)
        if why:
            return error("parameters", why)
        hashes = self.store.password_hashes()
        sessions = dict(self.live_sessions() or {})
        with self._sessions_lock:
            credentials = {t: self._sessions.get(t) for t in sessions}
        ending = rosters.sessions_ending(sessions, credentials, hashes, set(names))
        new = [n for n in names if n not in hashes]
        listed = set(names)
        again = sorted({n for n in ending if n in listed})  # log in again with the password the import gives them
        off = sorted({n for n in ending if n not in listed})  # no password at all: they can no longer log in

        def some(who: list[str]) -> str:
            return ", ".join(who[:12]) + (", ..." if len(who) > 12 else "")
        told = [f"{some(again)}: they log in again with the password the import gives them"] if again else []
        if off:
            told.append(f"{some(off)}: not on this roster, so they get no password and can no longer log in "
                        "(add them to the list to keep them)")
        return {"ok": True, "students": len(names), "new": len(new), "replaced": len(names) - len(new),
                "ending": ending, "not_on_roster": off, "names": names, "read_from": where,
                "message": (f"{len(names)} name{'' if len(names) == 1 else 's'} from {where}: {some(names)} "
                            f"({len(new)} new, {len(names) - len(new)} given a new password). The import ends "
                            f"{len(ending)} logged-in session{'' if len(ending) == 1 else 's'}"
                            + ("; " + "; ".join(told) if told else "") + ".")}

    def import_roster(self, username, teacher_password, roster_csv: str, address: str | None = None) -> dict:
        """A CSV of names (roster.read: a column of names, else the first column) → a new password for each,
        stored hashed; the passwords are in the answer only, for the teacher to hand out."""
        if (refused := self._teacher_only(username, teacher_password, address)) is not None:
            return refused
        names, why = rosters.names_in(roster_csv)
        if why:
            return error("parameters", why)
        passwords = rosters.new_passwords(names)
        try:
            self.store.add_students(passwords)
        except (StoreError, ValueError) as exc:
            return error("parameters", f"the roster was not imported: {exc}")
        self._roster_changed()
        return {"ok": True, "students": len(passwords), "csv": rosters.passwords_csv(passwords)}

    def roster_list(self, username, teacher_password, address: str | None = None) -> dict:
        """The roster as a table: each name the class knows, on the roster or not, last seen, submissions."""
        if (refused := self._teacher_only(username, teacher_password, address)) is not None:
            return refused
        return {"ok": True, "rows": self.store.roster(), "roster": self.has_roster()}

    def remove_student(self, username, teacher_password, student: str, address: str | None = None) -> dict:
        """Take a student off the roster: their sessions end, their login is refused, they are left off the boards
        and the grades; their submissions stay in the teacher's list. Importing the name again brings them back."""
        if (refused := self._teacher_only(username, teacher_password, address)) is not None:
            return refused
        name, bad = self._student_named(student, roster_only=True)
        if bad:
            return bad
        try:
            removed = self.store.remove_student(name)
        except (StoreError, ValueError) as exc:
            return error("parameters", f"not removed: {exc}")
        if not removed:
            return error("parameters", f"no student named {quoted(name)} on the roster")
        self._roster_changed()
        return {"ok": True, "student": name, "message": f"{name} is off the roster: their sessions ended, their "
                                                        "submissions stay in your list"}

    def reset_password(self, username, teacher_password, student: str, address: str | None = None) -> dict:
        """A new password for one student (shown once, in the answer); their sessions on the old one end."""
        if (refused := self._teacher_only(username, teacher_password, address)) is not None:
            return refused
        name, bad = self._student_named(student, roster_only=True)
        if bad:
            return bad
        password = rosters.new_passwords([name])[name]
        try:
            done = self.store.set_password(name, password)
        except (StoreError, ValueError) as exc:
            return error("parameters", f"not changed: {exc}")
        if not done:
            return error("parameters", f"no student named {quoted(name)} on the roster")
        self._roster_changed()
        return {"ok": True, "student": name, "password": password, "csv": rosters.passwords_csv({name: password})}

    def all_submissions(self, username, teacher_password, exercise: str = "", student: str = "",
                        address: str | None = None) -> dict:
        """Every submission, newest first; of one exercise, of one student (a name the class knows, any case)."""
        if (refused := self._teacher_only(username, teacher_password, address)) is not None:
            return refused
        name = None
        if user_name(student):
            name, bad = self._student_named(student)
            if bad:
                return bad
        return {"ok": True, "student": name, "rows": self.store.submissions(exercise or None, student=name)}

    def open_submission(self, username, teacher_password, submission_id, address: str | None = None) -> dict:
        if (refused := self._teacher_only(username, teacher_password, address)) is not None:
            return refused
        sid = _submission_id(submission_id)
        found = None if sid is None else self.store.submission(sid)
        if found is None:
            if submission_id in (None, ""):
                return error("parameters", "give the number of a submission (the # column of the list)")
            return error("parameters", f"no submission number {submission_id!r}")
        return {"ok": True, **found}

    def rerun(self, username, teacher_password, submission_id, address: str | None = None,
              on_progress=None) -> dict:
        """Grade a kept submission again, as it was sent, on the GPU here now: the new measurement beside the kept
        one (nothing new is kept)."""
        found = self.open_submission(username, teacher_password, submission_id, address)
        if not found.get("ok"):
            return found
        ex = self.exercises_by_name().get(found["exercise"])
        if ex is None:
            return error("parameters", f"the exercise {quoted(found['exercise'])} is gone from exercises/")
        if not self.has_gpu():
            return error("device", submitting.NO_GPU)
        answer = self._grade(found["student"], ex, found["source"], found["params"], on_progress)
        answer.pop("unrecorded", None)
        answer.pop("times", None)
        answer["rerun_of"] = {k: found.get(k) for k in ("id", "student", "median_ms", "gpu", "sol_percent", "record")}
        return answer

    def export_csv(self, username, teacher_password, exercise: str = "", address: str | None = None) -> dict:
        if (refused := self._teacher_only(username, teacher_password, address)) is not None:
            return refused
        return {"ok": True, "csv": exports.submissions_csv(self.store.submissions(exercise or None))}

    def export_code(self, username, teacher_password, exercise: str = "", address: str | None = None) -> dict:
        """Every submission with its code, as a zip (index.csv and code/*.py): {"ok", "zip_b64", "files"}."""
        if (refused := self._teacher_only(username, teacher_password, address)) is not None:
            return refused
        subs = self.store.submissions(exercise or None, with_source=True)
        data = exports.code_zip(subs)
        return {"ok": True, "files": len(subs), "zip": data, "zip_b64": base64.b64encode(data).decode()}

    def grades(self, username, teacher_password, exercise: str = "", address: str | None = None) -> dict:
        """The grades file: a CSV of student and score (per exercise and total, or one exercise's), for a
        gradebook's import."""
        if (refused := self._teacher_only(username, teacher_password, address)) is not None:
            return refused
        everything = self.exercises_by_name()
        if exercise:
            ex, bad = self._exercise(exercise)
            if bad:
                return bad
            chosen = {ex.name: ex}
        else:
            chosen = everything
        subs = [s for s in self.store.submissions() if s["exercise"] in chosen]
        rows = exports.grades(chosen, subs, self.store.students(), self.store.removed_students())
        return {"ok": True, "rows": rows, "csv": exports.grades_csv(chosen, rows)}

    def board_preview(self, username, teacher_password, exercise: str, address: str | None = None) -> dict:
        """What a reset of `exercise`'s board would hide, before it does."""
        if (refused := self._teacher_only(username, teacher_password, address)) is not None:
            return refused
        ex, bad = self._exercise(exercise)
        if bad:
            return bad
        n = len(self.store.leaderboard(ex.name))
        return {"ok": True, "exercise": ex.name, "entries": n,
                "message": f"Resetting the board of {ex.name} hides its {n} entr{'y' if n == 1 else 'ies'} (the "
                           "submissions stay in your list, and Undo brings them back)."}

    def reset_board(self, username, teacher_password, exercise: str, address: str | None = None) -> dict:
        if (refused := self._teacher_only(username, teacher_password, address)) is not None:
            return refused
        if exercise not in self.exercises_by_name():
            return error("parameters", f"no exercise named {quoted(exercise)}")
        hidden = len(self.store.leaderboard(exercise))
        self.store.reset_board(exercise)
        return {"ok": True, "exercise": exercise, "rows": [], "hidden": hidden}

    def undo_reset(self, username, teacher_password, exercise: str, address: str | None = None) -> dict:
        """Take back the last reset of an exercise's board: its entries are back."""
        if (refused := self._teacher_only(username, teacher_password, address)) is not None:
            return refused
        ex, bad = self._exercise(exercise)
        if bad:
            return bad
        if not self.store.undo_reset(ex.name):
            return error("parameters", f"the board of {ex.name} was never reset")
        return {"ok": True, "exercise": ex.name, "entries": len(self.store.leaderboard(ex.name))}

    def flag(self, username, teacher_password, submission_id, reason: str, address: str | None = None) -> dict:
        """Take a submission off the board and out of the grades, kept, with the reason."""
        if (refused := self._teacher_only(username, teacher_password, address)) is not None:
            return refused
        sid = _submission_id(submission_id)
        reason = plain_text(reason, REASON_LIMIT)
        if not reason:
            return error("parameters", "say why the submission is flagged (the reason is kept with it)")
        if sid is None or not self.store.flag(sid, reason):
            return error("parameters", f"no submission number {submission_id!r}")
        return {"ok": True, "submission": sid, "reason": reason}

    def unflag(self, username, teacher_password, submission_id, address: str | None = None) -> dict:
        if (refused := self._teacher_only(username, teacher_password, address)) is not None:
            return refused
        sid = _submission_id(submission_id)
        if sid is None or not self.store.unflag(sid):
            return error("parameters", f"submission {submission_id!r} is not flagged")
        return {"ok": True, "submission": sid}

    def announce(self, username, teacher_password, text: str, address: str | None = None) -> dict:
        """Put `text` on every student's page ("" takes it down)."""
        if (refused := self._teacher_only(username, teacher_password, address)) is not None:
            return refused
        text = plain_text(text, ANNOUNCEMENT_LIMIT)
        self.store.announce(text)
        return {"ok": True, "announcement": self.store.announcement()}

    def extend(self, username, teacher_password, exercise: str, student: str, deadline: str,
               address: str | None = None) -> dict:
        """Move `exercise`'s deadline later for one student (the late window follows it); an empty `deadline` puts
        them back on the exercise's. The answer lists every deadline moved on the exercise."""
        if (refused := self._teacher_only(username, teacher_password, address)) is not None:
            return refused
        ex, bad = self._exercise(exercise)
        if bad:
            return bad
        own_deadline = ex.due()[0]
        if own_deadline is None:
            return error("parameters", f"{ex.name} has no deadline to move (exercise.toml: deadline = ...)")
        name, bad = self._student_named(student)
        if bad:
            return bad
        if not str(deadline or "").strip():
            done = self.store.unextend(ex.name, name)
            said = (f"{name} is back on the exercise's deadline, {time_text(own_deadline)}" if done else
                    f"{name}'s deadline of {ex.name} was not moved: nothing to take back")
            when = None
        else:
            try:
                when = parse_time(deadline, "the new deadline")
            except ExerciseError as exc:
                return error("parameters", str(exc))
            if when <= own_deadline:  # (a date typed in the past, or a zone mistaken, would lock the student out)
                return error("parameters", f"{time_text(when)} is not after the exercise's deadline "
                                           f"({time_text(own_deadline)}): an extension moves a deadline later. "
                                           f"To put {name} back on the exercise's, leave the date empty.")
            self.store.extend(ex.name, name, when)
            said = f"{name}'s deadline of {ex.name} is now {time_text(when)} (the class's: {time_text(own_deadline)})"
        moved = self.store.extensions(ex.name)
        listed = "; ".join(f"{who}, {time_text(t)}" for who, t in sorted(moved.items()))
        return {"ok": True, "exercise": ex.name, "student": name, "deadline": when,
                "extensions": {who: iso(t) for who, t in sorted(moved.items())},
                "message": said + (f". Moved on {ex.name}: {listed}." if moved else
                                   f". No deadline of {ex.name} is moved now.")}

    def _student_named(self, typed, roster_only: bool = False) -> tuple[str | None, dict | None]:
        """The student the teacher means by a name typed by hand: the name as the class spells it, found with case
        ignored where that is one name only, among the roster (without a roster, among the names that logged in).
        A name the class does not know is refused, not acted on: a deadline moved for a typo helps nobody."""
        name = user_name(typed)
        if not name or len(name) > NAME_LIMIT:
            return None, error("parameters", "give the student's name as they log in")
        on_roster = self.has_roster() or roster_only
        known = list(self.store.password_hashes()) if on_roster else [r["student"] for r in self.store.roster()]
        if name in known:
            return name, None
        folded = [k for k in known if k.casefold() == name.casefold()]
        if len(folded) == 1:
            return folded[0], None
        return None, error("parameters", f"no student named {quoted(name)} " + (
            "on the roster" if on_roster else
            "has logged in yet (with the class password, a name is known from its first login)"))

    def similar(self, username, teacher_password, exercise: str, address: str | None = None) -> dict:
        """Pairs of students' submissions of `exercise` ranked by similarity (similarity.py: renaming and
        reformatting change nothing; the starter counts for nobody)."""
        if (refused := self._teacher_only(username, teacher_password, address)) is not None:
            return refused
        ex, bad = self._exercise(exercise)
        if bad:
            return bad
        subs = self.store.submissions(ex.name, with_source=True)
        return {"ok": True, "exercise": ex.name, "submissions": len(subs),
                "pairs": similarity.pairs(subs, base=ex.starter)}

    def side_by_side(self, username, teacher_password, first, second, address: str | None = None) -> dict:
        """Two submissions' code side by side (HTML, escaped)."""
        a = self.open_submission(username, teacher_password, first, address)
        if not a.get("ok"):
            return a
        b = self.open_submission(username, teacher_password, second, address)
        if not b.get("ok"):
            return b
        return {"ok": True, "a": a["id"], "b": b["id"],
                "html": similarity.side_by_side(a["source"], b["source"], f"#{a['id']} {a['student']}",
                                                f"#{b['id']} {b['student']}")}

    def progress(self, username, teacher_password, exercise: str, address: str | None = None) -> dict:
        """How the students got there on `exercise` (trajectories.py): time to the first correct submission, each
        one's speed over time, and who is stuck."""
        if (refused := self._teacher_only(username, teacher_password, address)) is not None:
            return refused
        ex, bad = self._exercise(exercise)
        if bad:
            return bad
        own = [s for s in self.store.submissions(ex.name) if not s.get("agent")]  # (how students got there)
        found = trajectories.trajectories(self.store.activity(ex.name), own,
                                          self.store.aliases())
        return {"ok": True, "exercise": ex.name, **found}
