"""The class on the page and in the API: the page's class section (ClassSection: its components and their wiring)
and thin endpoint functions over the class's rules, which live in playground/course/ (no Gradio there).

    /share (kernel, source, params[, summary]) → {"ok", "id", "url"}      content-addressed, immutable, kept in SQLite;
                                                                        a few dozen new links a user in 10 minutes
    /open_share (id) → {"ok", "kernel", "source", "params", "summary"}
    /exercises () → [{"name", "title", "statement", "starter", "visible", "timed", "target_ms", "deadline", ...}]
    /submit (exercise, source, params) → {"ok", "median_ms", "speedup", "gpu", "sol_percent", "rank", ...} or
                                         {"ok": false, "error"}
    /check (exercise, source, params) → the same grading on the public shapes only, kept nowhere ("checked": true)
    /leaderboard (exercise[, who]) → {"ok", "rows": [{"rank", "student", "kind", "agent", "median_ms", "gpu",
                                                     "sol_percent", "record", ...}]}   who: all, students, agents
    /agent_token (name) → {"ok", "token", ...} (shown once)   /agent_tokens () → yours   /agent_token_revoke (id)
    /announcement () → {"ok", "announcement"}        /board_name (name) → the name shown for you on the boards
    /teacher_* (..., teacher_password): submissions, code, CSV, code export, grades, boards (reset, undo), the roster
                                        (import, list, remove, new password), flags, announcements, extensions,
                                        similarity, progress, re-runs, agents per exercise
"""
from __future__ import annotations

import hashlib
import html
import re
import threading
import time

import gradio as gr

from ..course import Classroom as Course, Exercise, client_address, user_name
# Read here by the server (server.py: what a login stood on, a name's length, the address every per-address limit
# counts) and by the grader's tests (the exercises).
from ..course import (EXERCISES_DIR, LOGIN_SEEN, NAME_LIMIT, NO_GPU, in_networks, load_exercises,  # noqa: F401
                      resolve_client)
from ..settings import current
from . import gateway

ANNOUNCE_EVERY = 60  # seconds between a page's looks for a new announcement


class Classroom(Course):
    """The class's rules (playground/course/room.py) with the page's knowledge: the kernels a share may name, and the
    server's folders taken out of a refusal's paths (gateway.in_users_terms)."""

    def in_users_terms(self, answer, kernel: str):
        from .gateway import in_users_terms
        return in_users_terms(answer, kernel)

    def share_kernels(self) -> list[str]:
        from . import gateway
        from .own_kernel import OWN
        return [*gateway.kernel_names(), OWN]


def end_sessions_off_the_roster(app, room: Classroom) -> None:
    """From now on, after each change of the roster (an import, a student removed, a password reset), every login
    session the roster no longer accepts ends (Gradio's session tokens, `app.tokens`, are dropped: the next request
    of such a page is refused and asks for a login): a name the roster does not hold, a session of the class password
    under any name (the roster's own name too), a session of a password the import replaced (Classroom.may_stay).
    The room also learns the server's sessions, to tell the teacher which ones an import would end first."""
    import logging
    log = logging.getLogger("playground.classroom")

    def revoke():
        hashes = room.store.password_hashes()  # read once for all the sessions
        for token, user in list(getattr(app, "tokens", {}).items()):
            if not room.may_stay(user, room.credential_of(token), hashes):
                app.tokens.pop(token, None)
                room.session_ended(token)
                log.info("ended the session of %r: its login is not the roster's", user)
    room.on_roster.append(revoke)
    room.live_sessions = lambda: dict(getattr(app, "tokens", {}))


class LastingSessions(dict):
    """Gradio's session tokens (`app.tokens`, {token: user}) with the roster's students' sessions kept across a
    restart (Classroom.session_opened keeps them, restore_session takes one back): a token this server has not seen
    is looked for among those kept before it asks the browser for a login. Gradio deletes a token only at a logout,
    which ends all of the user's sessions: the kept ones too; a pop (a roster that no longer accepts it) ends one."""

    def __init__(self, room: Classroom, tokens: dict | None = None):
        super().__init__(tokens or {})
        self.room = room

    def get(self, token, default=None):
        user = super().get(token)
        if user is None and isinstance(token, str) and token:
            user = self.room.restore_session(token)
            if user is not None:
                super().__setitem__(token, user)
        return default if user is None else user

    def __contains__(self, token) -> bool:
        return self.get(token) is not None

    def __getitem__(self, token):
        user = self.get(token)
        if user is None:
            raise KeyError(token)
        return user

    def __delitem__(self, token) -> None:
        user = super().get(token)
        super().__delitem__(token)
        self.room.forget_session(token, everywhere=True, user=user)

    def pop(self, token, *default):
        found = super().pop(token, *default)
        self.room.forget_session(token)
        return found


def keep_sessions_across_restarts(app, room: Classroom) -> None:
    """Where logins are the roster's: the cookie's name kept from one server to the next (Gradio draws it at random
    at each start, and a browser's cookie of the server before would not be read), and the sessions (LastingSessions).
    Before the login's guard reads the cookie's name (server.protect)."""
    if not room.login_needed() or room.settings.user_header:
        return
    app.cookie_id = hashlib.sha256(room.store.secret("session cookie")).hexdigest()[:43]
    app.tokens = LastingSessions(room, getattr(app, "tokens", None))


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


gateway.class_room = classroom  # who may log in under any name: the job queue's key asks the class (gateway.py)


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
    time target, the deadline and late window (yours, where the teacher moved it). The hidden shapes stay on the
    server."""
    return classroom().exercises(user_of(request))


def submit(exercise: str, source: str, params: dict | None = None, request: gr.Request = None) -> dict:
    """Grade a solution: verified on the visible and hidden shapes with fresh inputs, timed, verified again; on the
    board if accepted (needs a GPU server and a login; refused after the exercise's deadline and late window)."""
    return classroom().submit(user_of(request), exercise, source, params, address=client_address(request))


def check(exercise: str, source: str, params: dict | None = None, request: gr.Request = None) -> dict:
    """Check a solution before submitting it: graded as a submission is, on the exercise's visible shapes and its
    timed one only, and kept nowhere (no board, no attempt). Needs a GPU server and a login."""
    return classroom().check(user_of(request), exercise, source, params, address=client_address(request))


def leaderboard(exercise: str, who: str = "all", request: gr.Request = None) -> dict:
    """The exercise's board: per student, the best accepted submission (its share of the speed of light on the GPU
    it ran on, its time, speedup, target met, the GPU and its measurement record), and apart from it their agents'
    best (kind "agent", with the token's name); who: "all", "students" or "agents"."""
    return classroom().leaderboard(exercise, user_of(request), who=who)


def agent_token(name: str, request: gr.Request = None) -> dict:
    """A token for an agent (an MCP client) acting as you, named `name`: {"ok", "token", "id", "name", "hint"}. The
    token is in this answer only: keep it (it is stored hashed, never shown again)."""
    return classroom().make_token(user_of(request), name)


def agent_tokens(request: gr.Request = None) -> dict:
    """Your agents' live tokens: {"ok", "tokens": [{"id", "name", "hint", "created_at", "last_used"}]} (never the
    tokens themselves)."""
    return classroom().tokens_of(user_of(request))


def agent_token_revoke(token_id: int, request: gr.Request = None) -> dict:
    """Revoke one of your tokens (its id): the next call that presents it is refused."""
    return classroom().revoke_token(user_of(request), token_id)


def my_submissions(exercise: str = "", request: gr.Request = None) -> dict:
    """Your own submissions, newest first (of one exercise, or all): what each got, its time and tile parameters."""
    return classroom().my_submissions(user_of(request), exercise)


def my_submission(submission: int, request: gr.Request = None) -> dict:
    """One of your own submissions, with its code and tile parameters."""
    return classroom().my_submission(user_of(request), submission)


def announcement(request: gr.Request = None) -> dict:
    """The teacher's announcement to the class: {"ok", "announcement": {"text", "created_at"} or null}."""
    return {"ok": True, "announcement": classroom().announcement()}


def board_name(name: str = "", request: gr.Request = None) -> dict:
    """The name the boards show for you instead of your own ("" for your own again)."""
    return classroom().set_alias(user_of(request), name)


def _teacher(method: str):
    """A teacher's endpoint: `method` of the Classroom with the caller's login and address, the teacher password
    last."""
    def call(*args, request: gr.Request = None):
        *given, password = args
        return getattr(classroom(), method)(user_of(request), password, *given, address=client_address(request))
    return call


def teacher_submissions(exercise: str = "", teacher_password: str = "", request: gr.Request = None) -> dict:
    """Teacher: every submission (all students, accepted and refused), newest first; "" for every exercise."""
    return _teacher("all_submissions")(exercise, teacher_password, request=request)


def teacher_submissions_of(student: str, exercise: str = "", teacher_password: str = "",
                           request: gr.Request = None) -> dict:
    """Teacher: one student's submissions (their name as the class knows it, any case), newest first; "" for every
    exercise."""
    return _teacher("all_submissions")(exercise, student, teacher_password, request=request)


def teacher_open(submission: int, teacher_password: str = "", request: gr.Request = None) -> dict:
    """Teacher: one submission with its source, what the grader said and its measurement record."""
    return _teacher("open_submission")(submission, teacher_password, request=request)


def teacher_export(exercise: str = "", teacher_password: str = "", request: gr.Request = None) -> dict:
    """Teacher: every submission as CSV text ({"ok", "csv"})."""
    return _teacher("export_csv")(exercise, teacher_password, request=request)


def teacher_export_code(exercise: str = "", teacher_password: str = "", request: gr.Request = None) -> dict:
    """Teacher: every submission with its code, a zip in base64 ({"ok", "files", "zip_b64"}: index.csv, code/*.py)."""
    answer = _teacher("export_code")(exercise, teacher_password, request=request)
    answer.pop("zip", None)
    return answer


def teacher_grades(exercise: str = "", teacher_password: str = "", request: gr.Request = None) -> dict:
    """Teacher: the grades file a gradebook imports ({"ok", "csv", "rows"}: student, score per exercise, total)."""
    return _teacher("grades")(exercise, teacher_password, request=request)


def teacher_reset(exercise: str, teacher_password: str = "", request: gr.Request = None) -> dict:
    """Teacher: empty an exercise's board (the submissions stay in the teacher's list; /teacher_undo_reset takes it
    back)."""
    return _teacher("reset_board")(exercise, teacher_password, request=request)


def teacher_undo_reset(exercise: str, teacher_password: str = "", request: gr.Request = None) -> dict:
    """Teacher: take back the last reset of an exercise's board."""
    return _teacher("undo_reset")(exercise, teacher_password, request=request)


def teacher_roster(roster_csv: str, teacher_password: str = "", request: gr.Request = None) -> dict:
    """Teacher: import a roster (CSV of names); answers each student's new password as CSV, once."""
    return _teacher("import_roster")(roster_csv, teacher_password, request=request)


def teacher_roster_preview(roster_csv: str, teacher_password: str = "", request: gr.Request = None) -> dict:
    """Teacher: what importing the roster would do, first: the logged-in sessions it would end."""
    return _teacher("roster_preview")(roster_csv, teacher_password, request=request)


def teacher_students(teacher_password: str = "", request: gr.Request = None) -> dict:
    """Teacher: the roster as a table: each student, last seen, submissions."""
    return _teacher("roster_list")(teacher_password, request=request)


def teacher_remove(student: str, teacher_password: str = "", request: gr.Request = None) -> dict:
    """Teacher: take a student off the roster (their sessions end; their submissions stay)."""
    return _teacher("remove_student")(student, teacher_password, request=request)


def teacher_new_password(student: str, teacher_password: str = "", request: gr.Request = None) -> dict:
    """Teacher: a new password for one student, answered once."""
    return _teacher("reset_password")(student, teacher_password, request=request)


def teacher_flag(submission: int, reason: str, teacher_password: str = "", request: gr.Request = None) -> dict:
    """Teacher: take a submission off the board and out of the grades, kept, with the reason."""
    return _teacher("flag")(submission, reason, teacher_password, request=request)


def teacher_unflag(submission: int, teacher_password: str = "", request: gr.Request = None) -> dict:
    """Teacher: put a flagged submission back."""
    return _teacher("unflag")(submission, teacher_password, request=request)


def teacher_announce(text: str, teacher_password: str = "", request: gr.Request = None) -> dict:
    """Teacher: an announcement on every student's page ("" takes it down)."""
    return _teacher("announce")(text, teacher_password, request=request)


def teacher_extend(exercise: str, student: str, deadline: str, teacher_password: str = "",
                   request: gr.Request = None) -> dict:
    """Teacher: move an exercise's deadline for one student (ISO 8601; without an offset, UTC)."""
    return _teacher("extend")(exercise, student, deadline, teacher_password, request=request)


def teacher_similarity(exercise: str, teacher_password: str = "", request: gr.Request = None) -> dict:
    """Teacher: pairs of students' submissions ranked by similarity (renaming and reformatting change nothing)."""
    return _teacher("similar")(exercise, teacher_password, request=request)


def teacher_progress(exercise: str, teacher_password: str = "", request: gr.Request = None) -> dict:
    """Teacher: how students got there: time to the first correct submission, speed over time, who is stuck."""
    return _teacher("progress")(exercise, teacher_password, request=request)


def teacher_rerun(submission: int, teacher_password: str = "", request: gr.Request = None) -> dict:
    """Teacher: grade a kept submission again on this server's GPU (the new measurement beside the kept one)."""
    return _teacher("rerun")(submission, teacher_password, request=request)


def teacher_agents(exercise: str, allowed: bool | None = None, teacher_password: str = "",
                   request: gr.Request = None) -> dict:
    """Teacher: allow (true) or forbid (false) agents' submissions on an exercise, and their entries on its board;
    null: as its exercise.toml says."""
    return _teacher("set_agents")(exercise, allowed, teacher_password, request=request)


ENDPOINTS = (share, open_share, exercises, submit, check, my_submissions, my_submission, leaderboard, announcement,
             board_name, agent_token, agent_tokens, agent_token_revoke, teacher_submissions, teacher_submissions_of,
             teacher_open, teacher_export, teacher_export_code, teacher_grades, teacher_reset, teacher_undo_reset,
             teacher_roster, teacher_roster_preview, teacher_students, teacher_remove, teacher_new_password,
             teacher_flag, teacher_unflag, teacher_announce, teacher_extend, teacher_similarity, teacher_progress,
             teacher_rerun, teacher_agents)
ENGINE_ENDPOINTS = (submit, check, teacher_rerun)  # they run jobs
QUERY_KEYS = ("rerun",)  # the page's address keys this section reads (a board's re-run link: ?rerun=ID)


def register(concurrency_limit: int | None, concurrency_id: str) -> None:
    """Add the class's endpoints to the Blocks being built (call inside `with gr.Blocks():`). Submissions and re-runs
    share the engine's concurrency group: they are engine jobs."""
    for fn in ENDPOINTS:
        engine = fn in ENGINE_ENDPOINTS
        gr.api(fn, api_name=fn.__name__, concurrency_limit=concurrency_limit if engine else None,
               concurrency_id=concurrency_id if engine else None)


# -- the page's pieces ---------------------------------------------------------------------------------------------
# The page's class section is ClassSection (below); what comes before it are plain functions: the views of its
# answers (HTML, tables, a figure), and shared_draft and summary_text, which layout.Page's on_load calls (a /?s=ID
# link restores exactly what was shared).
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
    return html.escape(str(text if text is not None else ""))


def share_html(answer: dict) -> str:
    if not answer.get("ok"):
        return f'<div class="pg-share fail">Not shared: {_esc(answer["error"]["message"])}</div>'
    url = answer["url"]
    return (f'<div class="pg-share" id="pg-share-link">Share link (the edited source, the parameters and the last '
            f'result, as they are now): <a href="{_esc(url)}" target="_blank"><code>{_esc(url)}</code></a></div>')


def submission_html(answer: dict, sent: dict | None = None) -> str:
    """A submission's answer; `sent`: the tile parameters the page sent with it (its controls)."""
    checks = "".join(f'<li class="{"ok" if c["passed"] else "fail"}">{"✔" if c["passed"] else "✘"} '
                     f'{_esc(c["problem"])}: {_esc(c.get("message") or "")}</li>' for c in answer.get("checks") or [])
    checks = f"<ul class='pg-checks'>{checks}</ul>" if checks else ""
    with_params = ""
    if sent is not None:
        with_params = (" <small>(sent with " + _esc(", ".join(f"{k}={v}" for k, v in sent.items())) + ")</small>"
                       if sent else " <small>(sent with the factory's own tile parameters)</small>")
    if not answer.get("ok"):
        err = answer.get("error") or {}
        line = f" (line {err['line']})" if err.get("line") else ""
        return (f'<div class="pg-status fail" id="pg-submit-answer"><b>'
                f'{"Check failed" if answer.get("checked") else "Not accepted"}</b>{_esc(line)}: '
                f'{_esc(err.get("message"))}{with_params}{checks}</div>')
    if answer.get("checked"):
        return (f'<div class="pg-status ok" id="pg-submit-answer"><b>Checked</b>: {_esc(answer.get("message"))}.'
                f'{with_params}{checks}</div>')
    speed = (f", {answer['speedup']:.2f}× {_esc(answer['baseline'])}" if answer.get("speedup") else "")
    sol = (f", {answer['sol_percent']:.0f}% of the speed of light on {_esc(answer.get('gpu') or 'its GPU')}"
           if answer.get("sol_percent") else "")
    target = ("" if answer.get("target_ms") is None else
              f" — target {answer['target_ms']:g} ms {'met' if answer.get('met_target') else 'not met yet'}")
    late = " In the late window: its score takes the late penalty." if answer.get("late") else ""
    return (f'<div class="pg-status ok" id="pg-submit-answer"><b>Accepted</b>: {answer["median_ms"]:.4f} ms at '
            f'{_esc(answer["timed_at"])}{sol}{speed}{target}; rank {_esc(answer.get("rank"))} on the board.{late}'
            f'{with_params}{checks}</div>')


def record_text(record: dict | None) -> str:
    """A measurement record in one line: "SM 1980/1980 MHz · memory 2619 MHz · 41 °C · 380 W · throttle: none ·
    driver 580.159.04 · TileLang 0.1.15"."""
    record = record if isinstance(record, dict) else {}
    parts = []
    clocks = record.get("clocks_mhz") if isinstance(record.get("clocks_mhz"), dict) else {}
    if clocks.get("sm"):
        parts.append(f"SM {clocks['sm']:.0f}" + (f"/{clocks['sm_max']:.0f}" if clocks.get("sm_max") else "")
                     + " MHz")
    if clocks.get("memory"):
        parts.append(f"memory {clocks['memory']:.0f} MHz")
    if record.get("temperature_c") is not None:
        parts.append(f"{record['temperature_c']:.0f} °C")
    if record.get("power_w") is not None:
        parts.append(f"{record['power_w']:.0f} W")
    if "throttle_reasons" in record:
        reasons = record.get("throttle_reasons")
        parts.append("throttle: " + (", ".join(map(str, reasons)) if reasons else "none"))
    if record.get("driver"):
        parts.append(f"driver {record['driver']}")
    if record.get("tilelang"):
        parts.append(f"TileLang {record['tilelang']}")
    return " · ".join(parts)


BOARD_COLUMNS = ["rank", "student", "who", "GPU", "% of speed of light", "time (ms)", "speedup", "target met",
                 "attempts", "late", "measured"]


def board_frame(board: dict, teacher: bool = False):
    """The board as a table; the teacher's has a last column of links that re-run each entry."""
    import pandas as pd
    rows = []
    for r in board.get("rows") or []:
        who = f"agent: {r['agent']}" if r.get("agent") else "student"  # (a token's name: a table cell's text)
        row = [r["rank"], r["student"], who, r.get("gpu") or "", None if r.get("sol_percent") is None else
               round(r["sol_percent"], 1), round(r["median_ms"], 4),
               None if r["speedup"] is None else round(r["speedup"], 2),
               "" if board.get("target_ms") is None else "yes" if r.get("met_target") else "no",  # (no target: blank)
               r["attempts"], "late" if r.get("late") else "", record_text(r.get("record"))]
        if teacher:
            row.append(f"[re-run #{int(r['submission'])}](?rerun={int(r['submission'])})")
        rows.append(row)
    return pd.DataFrame(rows, columns=BOARD_COLUMNS + (["re-run"] if teacher else []))


def board_update(board: dict, teacher: bool = False):
    """The board for the table: the frame, and for the teacher its last column read as links (markdown; every other
    cell is text)."""
    if not teacher:
        return board_frame(board)
    types = ["number", "str", "str", "str", "number", "number", "number", "str", "number", "str", "str", "markdown"]
    return gr.update(value=board_frame(board, teacher), datatype=types)


def submissions_frame(answer: dict):
    import pandas as pd
    columns = ["id", "exercise", "student", "agent", "status", "time (ms)", "% of speed of light", "GPU", "late",
               "flag", "message", "submitted (UTC)"]
    rows = [[r["id"], r["exercise"], r["student"], r.get("agent") or "", r["status"],
             None if r["median_ms"] is None else round(r["median_ms"], 4),
             None if r.get("sol_percent") is None else round(r["sol_percent"], 1), r.get("gpu") or "",
             "late" if r.get("late") else "", r.get("flag") or "", (r["message"] or "")[:160],
             time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime(r["created_at"]))] for r in answer.get("rows") or []]
    return pd.DataFrame(rows, columns=columns)


def mine_frame(answer: dict):
    """A student's own submissions (Classroom.my_submissions) as the Exercise section's table."""
    import pandas as pd
    columns = ["#", "exercise", "submitted (UTC)", "result", "time (ms)", "speedup", "late", "tile parameters"]
    rows = [[r["id"], r["exercise"], _utc(r["created_at"]),
             r["status"] + (" (off the board)" if r.get("off_board") else ""),
             None if r["median_ms"] is None else round(r["median_ms"], 4),
             None if r.get("speedup") is None else round(r["speedup"], 2), "late" if r.get("late") else "",
             ", ".join(f"{k}={v}" for k, v in (r.get("params") or {}).items())] for r in answer.get("rows") or []]
    return pd.DataFrame(rows, columns=columns)


def _utc(when) -> str:
    return "" if when is None else time.strftime("%Y-%m-%d %H:%M", time.gmtime(when))


def roster_frame(answer: dict):
    import pandas as pd
    columns = ["student", "on the roster", "name on the boards", "last seen (UTC)", "submissions", "accepted",
               "compiles and runs"]
    rows = [[r["student"], "removed" if r["removed"] else "yes" if r["on_roster"] else "no", r.get("alias") or "",
             _utc(r["last_seen"]), r["submissions"], r["accepted"], r["activity"]] for r in answer.get("rows") or []]
    return pd.DataFrame(rows, columns=columns)


def pairs_frame(answer: dict):
    import pandas as pd
    columns = ["rank", "student A", "#A", "student B", "#B", "similarity", "contained"]
    rows = [[p["rank"], p["student_a"], p["a"], p["student_b"], p["b"], f"{100 * p['similarity']:.0f}%",
             f"{100 * p['contained']:.0f}%"] for p in answer.get("pairs") or []]
    return pd.DataFrame(rows, columns=columns)


def progress_html(answer: dict) -> str:
    """Per exercise: the time to the first correct submission, and who is stuck (their last error)."""
    students = answer.get("students") or []
    if not students:
        from .views import placeholder
        return placeholder("Nobody has compiled, run or submitted anything on this exercise yet.")
    median = answer.get("median_minutes_to_correct")
    head = (f"<p>{len(students)} student{'s' if len(students) != 1 else ''} worked on {_esc(answer['exercise'])}; "
            + (f"the median time to a first correct submission is {median:.0f} min." if median is not None else
               "nobody has a correct submission yet.") + "</p>")
    rows = []
    for s in students:
        wait = "" if s["minutes_to_correct"] is None else f"{s['minutes_to_correct']:.0f} min"
        best = "" if s["best_sol_percent"] is None else f"{s['best_sol_percent']:.1f}%"
        last = s["last_error"] or {}
        error_text = f"{last.get('stage') or ''}: {last.get('message') or ''}" if last else ""
        rows.append(f"<tr><td>{_esc(s['student'])}</td><td>{_esc(s['events'])}</td><td>{_esc(s['errors'])}</td>"
                    f"<td>{wait}</td><td>{best}</td><td>{'stuck' if s['stuck'] else ''}</td>"
                    f"<td>{_esc(error_text)}</td></tr>")
    stuck = answer.get("stuck") or []
    note = (f'<p class="pg-status fail">Stuck (many errors in a row, nothing accepted): {_esc(", ".join(stuck))}</p>'
            if stuck else "")
    return (f'<div id="pg-progress-summary">{head}{note}<table class="pg-table"><thead><tr><th>student</th>'
            "<th>compiles, runs, submissions</th><th>errors</th><th>to the first correct</th>"
            "<th>best share of the speed of light</th><th></th><th>last error</th></tr></thead><tbody>"
            + "".join(rows) + "</tbody></table></div>")


def trajectory_figure(answer: dict):
    """A line per student of their speed over time: the share of the speed of light of each timed run and accepted
    submission (the time in ms where no share was measured), or None when nothing was timed."""
    import plotly.graph_objects as go
    lines = [s for s in answer.get("students") or [] if s.get("points")]
    if not lines:
        return None
    share = any(p.get("sol_percent") for s in lines for p in s["points"])
    fig = go.Figure()
    for s in lines:
        points = [p for p in s["points"] if (p.get("sol_percent") if share else p.get("median_ms"))]
        fig.add_trace(go.Scatter(
            x=[time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime(p["time"])) for p in points],
            y=[p["sol_percent"] if share else p["median_ms"] for p in points], mode="lines+markers",
            name=html.escape(s.get("shown_as") or s["student"]), text=[p["kind"] for p in points],  # (plotly reads
            # a few tags in a trace's name: a student's name is text)
            hovertemplate="%{text}: %{y:.1f}<extra>%{fullData.name}</extra>"))
    fig.update_layout(xaxis_title="time (UTC)", yaxis_title="% of the speed of light" if share else "time (ms)",
                      height=360, margin=dict(l=40, r=20, t=30, b=40), legend=dict(orientation="h"))
    return fig


def who_html(user: str | None, logout: bool = True) -> str:
    """The page header's note of who is logged in, with a link to log out (none behind a proxy's login: the proxy
    logs its users out); nothing without a login."""
    if not user:
        return ""
    link = ' · <a href="logout">Log out</a>' if logout else ""
    return (f'<div class="pg-who" style="text-align: right; font-size: 0.9rem">Logged in as <b>{_esc(user)}</b>'
            f'{link}</div>')


def announcement_html(found: dict | None) -> str:
    """The teacher's announcement, as text (escaped, its lines kept)."""
    if not found:
        return ""
    text = "<br>".join(_esc(line) for line in str(found["text"]).splitlines())
    return (f'<div class="pg-status idle" id="pg-announcement-text" style="border-left: 4px solid #d29922">'
            f'<b>From your teacher</b> <small>({_esc(_utc(found["created_at"]))} UTC)</small>: {text}</div>')


def statement_md(ex: Exercise | None, extension: float | None = None) -> str:
    if ex is None:
        return "Pick an exercise to see what to write."
    due = ex.deadline_text(extension)
    return (ex.statement + (f"\n\n**{due}**" if due else "")
            + f"\n\n*Hidden shapes: {len(ex.hidden)}, with fresh random inputs at each submission.*")


def _status(kind: str, text: str) -> str:
    return f'<div class="pg-status {kind}">{_esc(text)}</div>'


def _failed(answer: dict) -> str:
    return _status("fail", (answer.get("error") or {}).get("message") or "failed")


# -- what the section's components and handlers read --------------------------------------------------------------
def exercise_choices() -> list[tuple[str, str]]:
    return [(f"{ex['title']} ({ex['name']})", ex["name"]) for ex in classroom().exercises()]


MCP_PATH = "/gradio_api/mcp"  # where Gradio mounts its MCP routes (gradio/routes.py: API_PREFIX + "/mcp")


def mcp_url(request) -> str:
    """The MCP endpoint's address as the browser sees this page."""
    return f"{base_url_of(request) or 'http://SERVER:7860'}{MCP_PATH}/"


def mcp_config(url: str, token: bool) -> str:
    """The mcp.json snippet an MCP client (Claude Code, Cursor, VS Code) takes, for this server."""
    import json
    server = {"type": "http", "url": url}
    if token:
        server["headers"] = {"Authorization": "Bearer YOUR-TOKEN"}
    return json.dumps({"mcpServers": {"tilelang-playground": server}}, indent=2)


def tokens_html(answer: dict) -> str:
    """A user's live tokens as a table (each name is the user's text: escaped); never the tokens themselves."""
    found = answer.get("tokens") or []
    if not answer.get("ok"):
        return _failed(answer)
    if not found:
        from .views import placeholder
        return placeholder("No live token: make one to connect an agent.")
    rows = "".join(f"<tr><td>#{int(t['id'])}</td><td>{_esc(t['name'])}</td><td><code>{_esc(t['hint'])}</code></td>"
                   f"<td>{_esc(_utc(t['created_at']))}</td><td>{_esc(_utc(t.get('last_used')) or 'never')}</td></tr>"
                   for t in found)
    return ('<table class="pg-table" id="pg-agent-tokens"><thead><tr><th>id</th><th>name</th><th>starts</th>'
            "<th>made (UTC)</th><th>last used (UTC)</th></tr></thead><tbody>" + rows + "</tbody></table>")


def _write_download(filename: str, data: bytes | str) -> str:
    """A teacher's download (a CSV, a zip), written as the page writes every download."""
    from . import downloads
    return downloads.write("teacher", filename, data)


def record_html(answer: dict) -> str:
    """What a submission ran on: the GPU, its share of the speed of light there, its measurement record."""
    record = answer.get("record") if isinstance(answer.get("record"), dict) else {}
    if not record and not answer.get("gpu"):
        return ""
    sol = answer.get("sol_percent")
    ceil = record.get("ceilings") if isinstance(record.get("ceilings"), dict) else {}
    bound = (f" (copy {ceil['copy_gbps']:.0f} GB/s measured there)" if isinstance(ceil.get("copy_gbps"), (int, float))
             else "")
    return (f'<div class="pg-status idle" id="pg-record">Ran on <b>{_esc(answer.get("gpu") or record.get("name"))}'
            f'</b>' + (f", {sol:.1f}% of the speed of light{_esc(bound)}" if sol else "")
            + f": {_esc(record_text(record))}</div>")


# -- the section ---------------------------------------------------------------------------------------------------
class ClassSection:
    """The class on the page, a section of layout.Page (page.course), like Gradio's ChatInterface: its components
    are attributes of this object, made by its builders, which the page calls where each part stands: build_who
    (under the title: who is logged in, and the announcement), build_share (under the editor), build_exercise (top
    of the right column: the statement beside the editor), build_class (below the results: the board, the agents'
    tokens and the teacher's view); `wire` gives them their events, and the page calls note_activity after each
    compile and run. The page's own components (the editor, the status, the draft, ...) are read through
    `self.page`, a kernel of one's own's through `self.page.own_kernel`."""

    def __init__(self, page):
        self.page = page

    @staticmethod
    def offers_exercises() -> bool:
        """Does the class have exercises (read from their folder now: one added shows without a restart)?"""
        return bool(classroom().exercises_by_name())

    def build_who(self) -> None:
        """Under the page's title: who is logged in, and the teacher's announcement (filled on load, wire)."""
        self.who = gr.HTML("", elem_id="pg-who", visible=False)
        self.announcement = gr.HTML("", elem_id="pg-announcement", visible=False)

    def build_share(self) -> None:
        with gr.Row(elem_id="pg-share-row"):
            self.share_btn = gr.Button("Share", size="sm", scale=0, min_width=90, elem_id="pg-share-btn")
            self.share_link = gr.HTML("", elem_id="pg-share-out")
        # Opening a share link replaces the draft the browser kept: an edited one is offered here first, so no one's own
        # code is lost to a classmate's link.
        self.kept_draft = gr.DownloadButton("Your draft before this link", visible=False, size="sm",
                                            elem_id="pg-kept-draft")

    def build_exercise(self) -> None:
        with gr.Accordion("Exercise", open=False, elem_id="pg-exercise") as self.exercise_section:
            with gr.Row():
                self.exercise = gr.Dropdown(exercise_choices(), value=None, label="Exercise", scale=3,
                                            elem_id="pg-exercise-pick")
                self.starter_btn = gr.Button("Put the starter in the editor", size="sm", scale=1,
                                             elem_id="pg-exercise-starter")
            self.statement = gr.Markdown("Pick an exercise to see what to write.", elem_id="pg-exercise-statement")
            with gr.Row():
                gr.HTML('<div class="pg-params-note">Check grades the editor\'s text on the visible shapes and the '
                        'timed one, and keeps nothing; Submit grades it on the hidden shapes too and puts it on the '
                        'board. Both send the tile parameters set in the controls (those left at auto: your '
                        'factory\'s own defaults).</div>')
                self.check_btn = gr.Button("Check", scale=0, min_width=100, elem_id="pg-check")
                self.submit_btn = gr.Button("Submit", variant="primary", scale=0, min_width=120, elem_id="pg-submit")
            self.submit_answer = gr.HTML("", elem_id="pg-submit-out")
            with gr.Accordion("Your submissions", open=False, elem_id="pg-mine") as self.mine_section:
                self.mine_rows = gr.Dataframe(mine_frame({}), interactive=False, wrap=True, max_height=260,
                                              elem_id="pg-mine-rows")
                with gr.Row():
                    self.mine_id = gr.Number(None, label="Submission #", precision=0, scale=1, elem_id="pg-mine-id")
                    self.mine_load = gr.Button("Put its code and tile parameters in the editor", size="sm", scale=2,
                                               elem_id="pg-mine-load")

    def build_agents(self) -> None:
        """Agents (MCP): how to connect an MCP client, and the user's tokens: made (shown once), listed, revoked."""
        with gr.Accordion("Agents (MCP)", open=False, elem_id="pg-agents") as self.agents_section:
            self.agents_intro = gr.Markdown("", elem_id="pg-agents-intro")
            self.agents_config = gr.Code("", language="json", label="mcp.json for an MCP client", interactive=False,
                                         elem_id="pg-agents-config")
            with gr.Group(visible=False) as self.agents_tokens:
                with gr.Row():
                    self.token_name = gr.Textbox("", label="A name for the token (which agent it is for)",
                                                 max_length=40, scale=3, elem_id="pg-token-name")
                    self.token_btn = gr.Button("Make a token", size="sm", scale=1, elem_id="pg-token-make")
                self.token_out = gr.Code("", language=None, label="Your new token: copy it now, it is not shown again",
                                         interactive=False, visible=False, elem_id="pg-token-out")
                self.token_list = gr.HTML("", elem_id="pg-token-list")
                with gr.Row():
                    self.token_id = gr.Number(None, label="Token id", precision=0, scale=1, elem_id="pg-token-id")
                    self.token_revoke = gr.Button("Revoke it", size="sm", variant="stop", scale=1,
                                                  elem_id="pg-token-revoke")
            self.token_note = gr.HTML("", elem_id="pg-token-note")

    def build_class(self) -> None:
        with gr.Accordion("Leaderboard", open=False, elem_id="pg-board"):
            with gr.Row():
                self.board_btn = gr.Button("Show the board of the exercise picked", size="sm", scale=2,
                                           elem_id="pg-board-btn")
                self.board_who = gr.Radio([("everyone", "all"), ("students", "students"), ("agents", "agents")],
                                          value="all", show_label=False, scale=1, elem_id="pg-board-who")
            self.board_note = gr.HTML("", elem_id="pg-board-note")
            self.board = gr.Dataframe(board_frame({}), interactive=False, wrap=True, elem_id="pg-board-table")
            with gr.Row():
                self.alias = gr.Textbox("", label="Your name on the boards (empty: your own)", max_length=24, scale=3,
                                        elem_id="pg-alias")
                self.alias_btn = gr.Button("Show me under this name", size="sm", scale=1, elem_id="pg-alias-btn")
            self.alias_note = gr.HTML("", elem_id="pg-alias-note")
        self.build_agents()
        if not classroom().settings.teacher_password:
            self.teacher = None
            return
        # Hidden until the page knows who looks at it (wire: shows_teacher_view, on load): a student never sees it.
        with gr.Accordion("Teacher", open=False, visible=False, elem_id="pg-teacher") as self.teacher:
            with gr.Row():
                self.teacher_pw = gr.Textbox("", label="Teacher password (not needed when logged in as teacher)",
                                             type="password", scale=2)
                self.teacher_ex = gr.Dropdown([("every exercise", "")] + exercise_choices(),
                                              value="", label="Exercise", scale=1, elem_id="pg-teacher-ex")
            # the folder the exercises come from, and those left out of it, with why (students never see them)
            self.teacher_exercises = gr.HTML("", elem_id="pg-teacher-exercises")
            self.teacher_note = gr.HTML("", elem_id="pg-teacher-note")
            # Files are made on the click, then offered here (a DownloadButton hands out the file it held before the
            # click: each export came one click late, the first none at all).
            self.teacher_csv_file = gr.File(label="Download", visible=False, interactive=False,
                                            elem_id="pg-teacher-csv")
            with gr.Tabs(elem_id="pg-teacher-tabs") as self.teacher_tabs:
                with gr.Tab("Submissions", id="t-submissions"):
                    with gr.Row():
                        self.teacher_student = gr.Textbox("", label="Of one student (empty: everyone)",
                                                          max_length=64, scale=2, elem_id="pg-teacher-student")
                        self.teacher_list = gr.Button("List submissions", size="sm", elem_id="pg-teacher-list")
                        self.teacher_csv = gr.Button("Export CSV", size="sm", elem_id="pg-teacher-export")
                        self.teacher_code_zip = gr.Button("Export every submission with its code (zip)", size="sm",
                                                          elem_id="pg-teacher-code")
                        self.teacher_grades = gr.Button("Grades file (CSV for the gradebook)", size="sm",
                                                        elem_id="pg-teacher-grades")
                    self.teacher_rows = gr.Dataframe(submissions_frame({}), interactive=False, wrap=True,
                                                     max_height=360, elem_id="pg-teacher-rows")
                    with gr.Row():
                        self.teacher_id = gr.Number(None, label="Submission id", precision=0, scale=1,
                                                    elem_id="pg-teacher-id")
                        self.teacher_open = gr.Button("Open its code", size="sm", scale=1, elem_id="pg-teacher-open")
                        self.teacher_rerun = gr.Button("Re-run it on this GPU", size="sm", scale=1,
                                                       elem_id="pg-teacher-rerun")
                    with gr.Row():
                        self.flag_reason = gr.Textbox("", label="Why it is flagged (kept with it)", max_length=500,
                                                      scale=3, elem_id="pg-flag-reason")
                        self.flag_btn = gr.Button("Flag: off the board, kept", size="sm", scale=1, elem_id="pg-flag")
                        self.unflag_btn = gr.Button("Unflag", size="sm", scale=1, elem_id="pg-unflag")
                    self.teacher_record = gr.HTML("", elem_id="pg-teacher-record")
                    self.teacher_code = gr.Code("", language="python", label="Submission", interactive=False)
                with gr.Tab("Roster", id="t-roster"):
                    self.roster_list_btn = gr.Button("Show the roster", size="sm", elem_id="pg-roster-list")
                    self.roster_rows = gr.Dataframe(roster_frame({}), interactive=False, wrap=True, max_height=360,
                                                    elem_id="pg-roster-table")
                    with gr.Row():
                        self.roster_name = gr.Textbox("", label="Student (as on the roster)", scale=2,
                                                      elem_id="pg-roster-name")
                        self.remove_btn = gr.Button("Remove from the roster", size="sm", variant="stop", scale=1,
                                                    elem_id="pg-roster-remove")
                        self.new_pw_btn = gr.Button("Give a new password", size="sm", scale=1,
                                                    elem_id="pg-roster-newpw")
                    self.roster = gr.Textbox("", label="Roster: one name a line, or a CSV with a 'name' (or "
                                                       "'Student') column",
                                             lines=4, elem_id="pg-roster-text")
                    self.roster_btn = gr.Button("Import the roster and make passwords…", size="sm",
                                                elem_id="pg-roster-import")
                    self.roster_confirm = gr.Button("Yes, import it", size="sm", variant="stop", visible=False,
                                                    elem_id="pg-roster-confirm")
                    self.roster_out = gr.Code("", language=None, label="Passwords to hand out (shown once)",
                                              interactive=False, elem_id="pg-roster-out")
                with gr.Tab("Board and deadlines", id="t-board"):
                    with gr.Row():
                        self.teacher_reset = gr.Button("Reset this exercise's board…", size="sm", variant="stop",
                                                       elem_id="pg-board-reset")
                        self.reset_confirm = gr.Button("Yes, reset it", size="sm", variant="stop", visible=False,
                                                       elem_id="pg-board-reset-confirm")
                        self.reset_undo = gr.Button("Undo the last reset", size="sm", visible=False,
                                                    elem_id="pg-board-reset-undo")
                    with gr.Row():
                        self.extend_student = gr.Textbox("", label="Student", scale=2, elem_id="pg-extend-student")
                        self.extend_until = gr.Textbox("", label="New deadline (YYYY-MM-DD HH:MM, UTC; empty: back "
                                                                 "to the exercise's)", scale=2,
                                                       elem_id="pg-extend-until")
                        self.extend_btn = gr.Button("Move the deadline for this student", size="sm", scale=1,
                                                    elem_id="pg-extend")
                    with gr.Row():
                        self.agents_switch = gr.Radio([("as its exercise.toml says", "default"), ("allowed", "allowed"),
                                                       ("forbidden", "forbidden")], value="default", scale=2,
                                                      label="Agents (MCP clients with a student's token) on this "
                                                            "exercise", elem_id="pg-agents-switch")
                        self.agents_switch_btn = gr.Button("Set it for this exercise", size="sm", scale=1,
                                                           elem_id="pg-agents-switch-set")
                with gr.Tab("Announcement", id="t-announce"):
                    self.announce_text = gr.Textbox("", label="Shown at the top of every student's page", lines=2,
                                                    max_length=2000, elem_id="pg-announce-text")
                    with gr.Row():
                        self.announce_btn = gr.Button("Post it", size="sm", elem_id="pg-announce")
                        self.announce_clear = gr.Button("Take it down", size="sm", elem_id="pg-announce-clear")
                with gr.Tab("Similarity", id="t-similar"):
                    self.similar_btn = gr.Button("Compare this exercise's submissions", size="sm",
                                                 elem_id="pg-similar")
                    self.similar_rows = gr.Dataframe(pairs_frame({}), interactive=False, wrap=True, max_height=300,
                                                     elem_id="pg-similar-table")
                    with gr.Row():
                        self.pair_rank = gr.Number(None, label="Pair (rank)", precision=0, scale=1,
                                                   elem_id="pg-pair-rank")
                        self.pair_btn = gr.Button("Show both codes side by side", size="sm", scale=1,
                                                  elem_id="pg-pair-show")
                    self.pairs = gr.State(None)
                    self.pair_view = gr.HTML("", elem_id="pg-pair-view")
                with gr.Tab("Progress", id="t-progress"):
                    self.progress_btn = gr.Button("How the students got there on this exercise", size="sm",
                                                  elem_id="pg-progress")
                    self.progress_plot = gr.Plot(label="Speed over time", visible=False, elem_id="pg-progress-plot")
                    self.progress_out = gr.HTML("", elem_id="pg-progress-out")

    def _controls_of(self, data: dict, request) -> tuple[dict, dict]:
        """The tile parameters the page's controls hold now ({name: value}, those left at auto out), and the control
        updates where the controls had to be read again (a kernel of one's own whose text changed since)."""
        from . import controls as ctl
        from .gateway import student_of
        own_kernel = self.page.own_kernel
        out = {}
        if own_kernel.is_own(data) and own_kernel.stale(data):
            described, out = own_kernel.refresh(data, student_of(request))
            if not described.get("ok"):
                return {}, {}
        _, _, c, values, _, _ = self.page.read(data)
        problem = {x.name for x in c.problem}
        return {x.name: values[x.name] for x in c.tile if x.name not in problem and x.name != "dtype"
                and values.get(x.name) not in (None, "", ctl.AUTO_TILE)}, out

    def note_activity(self, data: dict, action: str, result: dict, request) -> None:
        """After a compile or run: kept for the teacher's view of how students got there, when an exercise is picked."""
        try:
            classroom().note_activity(user_of(request), data.get(self.exercise), action, result)
        except Exception:  # the student's answer must not fail for the class's notes
            import logging
            logging.getLogger("playground.classroom").exception("a compile or run was not noted")

    def wire(self, demo) -> None:
        """The section's events (call at the end of Page.wire: the starter sets all the page shows, page.everything,
        and cancels the page's engine jobs, page.jobs)."""
        from . import views
        page = self.page
        light = dict(api_visibility="private", concurrency_limit=None)
        engine = dict(api_visibility="private", concurrency_limit=page.settings.ui_concurrency, concurrency_id="engine")

        def on_share(data: dict, request: gr.Request):
            kernel, source, c, values, dtype, arch = page.read(data)
            from . import controls as ctl
            params = {**ctl.engine_params(values, dtype), **({"arch": arch} if arch else {})}
            last = (data[page.history] or [None])[-1]
            summary = {k: last.get(k) for k in SUMMARY_KEYS} if isinstance(last, dict) else None
            return share_html(share(kernel, source, params, summary, request))
        self.share_btn.click(on_share, page.setup | {page.history}, self.share_link, **light)

        def keep_draft(draft, request: gr.Request):
            """On a share link's load: the browser's own draft (read as the page loads, before the link's content
            replaces it), offered as a download when it was edited and differs from what was shared."""
            share_id = (dict(request.query_params) if request is not None else {}).get("s")
            if not share_id or not isinstance(draft, dict) or not isinstance(draft.get("source"), str):
                return gr.update(visible=False)
            from . import gateway
            from .common import offer_kept
            from .own_kernel import OWN
            kernel = str(draft.get("kernel") or "kernel")
            shared = classroom().store.get_share(share_id)
            if gateway.is_original(kernel, draft["source"]) or (shared and shared["source"] == draft["source"]):
                return gr.update(visible=False)
            own = kernel == OWN
            return offer_kept(request, "my-kernel" if own else kernel, "-my-draft.py", draft["source"],
                              f"Your {'own kernel' if own else f'own {kernel} draft'}, replaced by this link: "
                              "download it")
        demo.load(keep_draft, page.draft, self.kept_draft, **light)

        def logged_in(request: gr.Request):
            html_ = who_html(user_of(request), logout=not classroom().settings.user_header)
            return gr.update(value=html_, visible=bool(html_))  # (no login: no line at all)
        demo.load(logged_in, None, self.who, **light)

        def show_announcement():
            text = announcement_html(classroom().announcement())
            return gr.update(value=text, visible=bool(text))
        demo.load(show_announcement, None, self.announcement, **light)
        gr.Timer(ANNOUNCE_EVERY).tick(show_announcement, None, self.announcement, show_progress="hidden", **light)

        teacher_ex = [self.teacher_ex] if self.teacher is not None else []

        def refresh_exercises(picked, *teacher_picked):
            """The exercise lists as exercises/ holds them now (on load, and as the Exercise section opens): a folder
            the teacher added shows without a restart."""
            choices = exercise_choices()
            names = [n for _, n in choices]
            out = [gr.update(choices=choices, value=picked if picked in names else None)]
            if teacher_ex:
                out.append(gr.update(choices=[("every exercise", "")] + choices,
                                     value=teacher_picked[0] if teacher_picked and teacher_picked[0] in names else ""))
            return tuple(out) if len(out) > 1 else out[0]
        demo.load(refresh_exercises, [self.exercise, *teacher_ex], [self.exercise, *teacher_ex], **light)
        self.exercise_section.expand(refresh_exercises, [self.exercise, *teacher_ex], [self.exercise, *teacher_ex],
                                     **light)

        def on_exercise(name, request: gr.Request):
            ex = classroom().exercises_by_name().get(name or "")
            return statement_md(ex, classroom().extension_of(ex, user_of(request)) if ex else None)
        self.exercise.change(on_exercise, self.exercise, self.statement, **light)

        def into_editor(data: dict, request: gr.Request, ex, source: str, tile: dict, status: str,
                        what: str = "the starter") -> dict:
            """`source` in the editor as a kernel of one's own, for exercise `ex`: its controls read from it (the
            student's factory), the problem sizes set to the exercise's first visible shape, the dtype to its own and
            the tile parameters to `tile`. The text it replaces, if edited, is offered as a download."""
            from . import gateway
            from .gateway import student_of
            from .own_kernel import OWN
            from .common import offer_kept
            own_kernel = page.own_kernel
            before, kernel_before = data[page.editor] or "", data[page.kernel]
            kept = gr.update(visible=False)
            if before.strip() and before != source and not gateway.is_original(kernel_before, before):
                kept = offer_kept(request, "my-kernel" if kernel_before == OWN else kernel_before,
                                  f"-before-{what.replace(' ', '-').replace('#', '')}.py", before,
                                  f"Your text before {what}: download it")
            leaving = page.keep_leaving(data)  # edits of a shipped kernel, kept for when the student goes back to it
            data[own_kernel.entry] = None
            out = own_kernel.show(data, source, request, status)
            _, source, c, values, dtype, arch = own_kernel.read(data)
            given = {k: str(v) for k, v in {**(ex.visible[0] if ex.visible else ex.timed), **tile}.items()
                     if k in values}
            if given or ex.dtype in c.dtypes:
                values = {**values, **given}
                dtype = ex.dtype if ex.dtype in c.dtypes else dtype
                out.update(own_kernel.control_outputs(c, values, dtype, data[own_kernel.own]))
                out.update(page.draft_and_links(OWN, source, c, values, dtype, arch, student_of(request)))
                out[page.share] = ""
            out.update(leaving)
            out[self.kept_draft] = kept
            return {k: v for k, v in out.items() if k is not None}

        def on_starter(data: dict, request: gr.Request, progress=gr.Progress()):
            """The exercise's starter in the editor (into_editor)."""
            ex = classroom().exercises_by_name().get(data[self.exercise] or "")
            if ex is None:
                return {page.status: '<div class="pg-status idle">Pick an exercise first.</div>'}
            progress(None, desc="reading the starter's parameters")
            status = (f'<div class="pg-status idle">The starter of {views.esc(ex.title)} is in the editor, its '
                      f'parameters read from {views.esc(ex.factory)}(...): compile it, then make it faster and '
                      'Submit.</div>')
            return into_editor(data, request, ex, ex.starter, {}, status)
        self.starter_btn.click(on_starter, page.setup | {self.exercise, page.shown, page.edited,
                                                         page.own_kernel.own_draft},
                               page.everything | {self.kept_draft}, cancels=page.jobs, show_progress_on=[page.status],
                               **engine)  # a late answer of the kernel before must not land on it

        def mine(name, request: gr.Request):
            answer = classroom().my_submissions(user_of(request), name or "")
            return mine_frame(answer if answer.get("ok") else {})
        self.mine_section.expand(mine, self.exercise, self.mine_rows, **light)
        self.exercise.change(mine, self.exercise, self.mine_rows, **light)

        def on_mine(data: dict, request: gr.Request):
            """One of the student's own submissions back in the editor, its tile parameters in the controls, its
            exercise picked (so that Check and Submit go to it)."""
            answer = classroom().my_submission(user_of(request), data[self.mine_id])
            if not answer.get("ok"):
                return {page.status: _failed(answer)}
            ex = classroom().exercises_by_name().get(answer["exercise"])
            if ex is None:
                return {page.status: _status("fail", f"submission #{answer['id']} is of {answer['exercise']}, which "
                                                     "this class no longer offers")}
            status = _status("idle", f"Your submission #{answer['id']} ({answer['status']}) is in the editor, with "
                                     "the tile parameters it was sent with.")
            out = into_editor(data, request, ex, answer["source"], answer.get("params") or {}, status,
                              f"submission {answer['id']}")
            out[self.exercise] = ex.name
            out[self.statement] = statement_md(ex, classroom().extension_of(ex, user_of(request)))
            return out
        self.mine_load.click(on_mine, page.setup | {self.mine_id, page.shown, page.edited, page.own_kernel.own_draft},
                             page.everything | {self.kept_draft, self.exercise, self.statement}, cancels=page.jobs,
                             show_progress_on=[page.status], **engine)

        def reporter(progress):
            def report(what, fraction):
                try:
                    progress(None if fraction is None else float(fraction), desc=str(what))
                except Exception:
                    pass
            return report

        def on_check(data: dict, request: gr.Request, progress=gr.Progress()):
            sent, out = self._controls_of(data, request)
            answer = classroom().check(user_of(request), data[self.exercise], data[page.editor] or "", sent,
                                       reporter(progress), address=client_address(request))
            out[self.submit_answer] = submission_html(answer, sent)
            return out
        self.check_btn.click(on_check, page.setup | {self.exercise},
                             {self.submit_answer, *page.own_kernel.outputs()}, show_progress_on=[self.submit_answer],
                             **engine)

        def on_submit(data: dict, request: gr.Request, progress=gr.Progress()):
            name = data[self.exercise]
            sent, out = self._controls_of(data, request)
            answer = classroom().submit(user_of(request), name, data[page.editor] or "", sent, reporter(progress),
                                        address=client_address(request))
            out[self.submit_answer] = submission_html(answer, sent)
            out[self.mine_rows] = mine(name, request)
            board = classroom().leaderboard(name, user_of(request)) if name else {}
            if board.get("ok"):
                out[self.board] = board_update(board, classroom().is_teacher(user_of(request)))
                out[self.board_note] = views.board_note_html(name, board)
            return out
        self.submit_btn.click(on_submit, page.setup | {self.exercise},
                              {self.submit_answer, self.mine_rows, self.board, self.board_note,
                               *page.own_kernel.outputs()},
                              show_progress_on=[self.submit_answer], **engine)

        def on_board(name, who="all", request: gr.Request = None):
            board = classroom().leaderboard(name, user_of(request), who=who or "all") if name else {}
            teacher = classroom().is_teacher(user_of(request))
            return board_update(board if board.get("ok") else {}, teacher), views.board_note_html(name, board)
        self.board_btn.click(on_board, [self.exercise, self.board_who], [self.board, self.board_note], **light)
        self.board_who.change(on_board, [self.exercise, self.board_who], [self.board, self.board_note], **light)

        self.wire_agents(light)

        def on_alias(text, request: gr.Request):
            answer = classroom().set_alias(user_of(request), text)
            return _status("ok", answer["message"]) if answer.get("ok") else _failed(answer)
        self.alias_btn.click(on_alias, self.alias, self.alias_note, **light)

        if self.teacher is not None:
            self.wire_teacher(demo, light, engine)

    def wire_agents(self, light: dict) -> None:
        """The Agents (MCP) section's events: what to connect to, the user's tokens made, listed and revoked."""
        def shown(request: gr.Request):
            room = classroom()
            url = mcp_url(request)
            need = room.agents_need_token()
            who = user_of(request)
            if not need:
                intro = (f"An agent (an MCP client) can use this playground's tools (list, describe, compile, run, "
                         f"tune, profile, memcheck, lowering, share, submit, leaderboard) at `{url}`. This server has "
                         "no login, so no token is needed.")
            else:
                intro = (f"An agent (an MCP client) can use this playground's tools at `{url}` with a token of yours: "
                         "it acts as you, with your limits (its jobs share your place in the queue), and what it "
                         "submits is on the boards as your agent's, never as your own work."
                         + ("" if who else " Log in to make one."))
            listed = tokens_html(room.tokens_of(who)) if need and who else ""
            return (intro, mcp_config(url, need), gr.update(visible=bool(need and who)), listed)
        self.agents_section.expand(shown, None, [self.agents_intro, self.agents_config, self.agents_tokens,
                                                 self.token_list], **light)

        def made(name, request: gr.Request):
            answer = classroom().make_token(user_of(request), name)
            listed = tokens_html(classroom().tokens_of(user_of(request)))
            if not answer.get("ok"):
                return _failed(answer), gr.update(value="", visible=False), listed, gr.update()
            return (_status("ok", answer["message"]), gr.update(value=answer["token"], visible=True), listed, "")
        self.token_btn.click(made, self.token_name, [self.token_note, self.token_out, self.token_list, self.token_name],
                             **light)

        def revoked(token_id, request: gr.Request):
            answer = classroom().revoke_token(user_of(request), token_id)
            listed = tokens_html(classroom().tokens_of(user_of(request)))
            note = _status("ok", answer["message"]) if answer.get("ok") else _failed(answer)
            return note, listed, gr.update(value="", visible=False)
        self.token_revoke.click(revoked, self.token_id, [self.token_note, self.token_list, self.token_out], **light)

    def wire_teacher(self, demo, light: dict, engine: dict) -> None:
        """The Teacher section's events: each a thin call of the Classroom with the page's login and the password."""
        def rerun_of(request) -> str | None:
            """The submission of a board's re-run link (?rerun=ID), for the teacher."""
            sid = (dict(request.query_params) if request is not None else {}).get("rerun", "")
            return sid if sid.isdigit() and len(sid) < 19 and classroom().shows_teacher_view(user_of(request)) else None

        def teacher_view(request: gr.Request):
            shown = classroom().shows_teacher_view(user_of(request))
            return gr.update(visible=shown, **({"open": True} if rerun_of(request) else {}))
        demo.load(teacher_view, None, self.teacher, **light)
        # the last export's file belongs to the tab that made it: another tab does not offer it
        self.teacher_tabs.select(lambda: gr.update(visible=False), None, self.teacher_csv_file, **light)

        def exercises_note(pw, request: gr.Request):
            answer = act("left_out_exercises", pw, request=request)
            if not answer.get("ok"):
                return ""
            count = len(answer["exercises"])
            said = (f"{count} exercise{'' if count == 1 else 's'} from {answer['folder']} "
                    "(PLAYGROUND_EXERCISES), read again at each look.")
            if not answer["left_out"]:
                return _status("idle", said)
            return _status("warn", said + " Left out, so students do not see them: " +
                           "; ".join(answer["left_out"]) + ".")
        demo.load(exercises_note, [self.teacher_pw], self.teacher_exercises, **light)
        self.teacher.expand(exercises_note, [self.teacher_pw], self.teacher_exercises, **light)

        def rerun_link(request: gr.Request):
            """A board's re-run link opens the teacher's view on that submission."""
            sid = rerun_of(request)
            if sid is None:
                return gr.update(), gr.update()
            return int(sid), _status("idle", f"Submission #{sid} from the board: Open its code, or Re-run it on this "
                                             "GPU.")
        demo.load(rerun_link, None, [self.teacher_id, self.teacher_note], **light)

        def act(method: str, *args, request=None, **kwargs) -> dict:
            return getattr(classroom(), method)(user_of(request), *args, address=client_address(request), **kwargs)

        def listed(pw, ex, student, request: gr.Request):
            answer = act("all_submissions", pw, ex, student, request=request)
            if not answer.get("ok"):
                return _failed(answer), submissions_frame({})
            whose = f" of {answer['student']}" if answer.get("student") else ""
            return _status("ok", f"{len(answer['rows'])} submissions{whose}."), submissions_frame(answer)
        self.teacher_list.click(listed, [self.teacher_pw, self.teacher_ex, self.teacher_student],
                                [self.teacher_note, self.teacher_rows], **light)

        def opened(pw, sid, request: gr.Request):
            answer = act("open_submission", pw, sid, request=request)
            if not answer.get("ok"):
                return _failed(answer), "", ""
            flag = f" Flagged: {answer['flag']}." if answer.get("flag") else ""
            late = " In the late window." if answer.get("late") else ""
            note = _status("ok", f"#{answer['id']} by {answer['student']}, {answer['status']}: {answer['message']}"
                                 f"{late}{flag}")
            return note, record_html(answer), answer["source"]
        self.teacher_open.click(opened, [self.teacher_pw, self.teacher_id],
                                [self.teacher_note, self.teacher_record, self.teacher_code], **light)

        def rerun(pw, sid, request: gr.Request, progress=gr.Progress()):
            def report(what, fraction):
                try:
                    progress(None if fraction is None else float(fraction), desc=str(what))
                except Exception:
                    pass
            answer = act("rerun", pw, sid, request=request, on_progress=report)
            kept = answer.get("rerun_of") or {}
            if not answer.get("ok"):
                return _failed(answer), record_html(kept) if kept else ""
            return (_status("ok", f"Re-run of #{kept.get('id')}: {answer['median_ms']:.4f} ms on "
                                  f"{answer.get('gpu') or 'this GPU'}" + (f", {answer['sol_percent']:.0f}% of the "
                                                                           "speed of light" if answer.get("sol_percent")
                                                                           else "")
                                  + (f" (kept: {kept['median_ms']:.4f} ms on {kept.get('gpu') or 'its GPU'})"
                                     if kept.get("median_ms") else "")), record_html(answer))
        self.teacher_rerun.click(rerun, [self.teacher_pw, self.teacher_id], [self.teacher_note, self.teacher_record],
                                 show_progress_on=[self.teacher_note], **engine)

        def flagged(pw, sid, reason, request: gr.Request):
            answer = act("flag", pw, sid, reason, request=request)
            if not answer.get("ok"):
                return _failed(answer)
            return _status("ok", f"#{answer['submission']} is flagged ({answer['reason']}): off the board and out of "
                                 "the grades, kept in your list.")
        self.flag_btn.click(flagged, [self.teacher_pw, self.teacher_id, self.flag_reason], self.teacher_note, **light)

        def unflagged(pw, sid, request: gr.Request):
            answer = act("unflag", pw, sid, request=request)
            return _status("ok", f"#{answer['submission']} is back.") if answer.get("ok") else _failed(answer)
        self.unflag_btn.click(unflagged, [self.teacher_pw, self.teacher_id], self.teacher_note, **light)

        def offer(filename: str, data, note: str):
            return _status("ok", note), gr.update(value=_write_download(filename, data), visible=True, label=filename)

        def no_file(answer):
            return _failed(answer), gr.update(value=None, visible=False)

        def which(ex) -> str:
            return re.sub(r"[^A-Za-z0-9_-]", "", ex or "") or "all"

        def exported(pw, ex, request: gr.Request):
            answer = act("export_csv", pw, ex, request=request)
            if not answer.get("ok"):
                return no_file(answer)
            name = f"submissions-{which(ex)}.csv"
            return offer(name, answer["csv"], f"{name} is ready: download it below.")
        self.teacher_csv.click(exported, [self.teacher_pw, self.teacher_ex], [self.teacher_note, self.teacher_csv_file],
                               **light)

        def code_zip(pw, ex, request: gr.Request):
            answer = act("export_code", pw, ex, request=request)
            if not answer.get("ok"):
                return no_file(answer)
            name = f"submissions-{which(ex)}-code.zip"
            return offer(name, answer["zip"], f"{name}: {answer['files']} submissions with their code "
                                                       "(index.csv and code/), below.")
        self.teacher_code_zip.click(code_zip, [self.teacher_pw, self.teacher_ex],
                                    [self.teacher_note, self.teacher_csv_file], **light)

        def graded(pw, ex, request: gr.Request):
            answer = act("grades", pw, ex, request=request)
            if not answer.get("ok"):
                return no_file(answer)
            name = f"grades-{which(ex)}.csv"
            return offer(name, answer["csv"], f"{name}: {len(answer['rows'])} students, a score per "
                                                       "exercise: import it into the gradebook (below).")
        self.teacher_grades.click(graded, [self.teacher_pw, self.teacher_ex],
                                  [self.teacher_note, self.teacher_csv_file], **light)

        def roster_listed(pw, request: gr.Request):
            answer = act("roster_list", pw, request=request)
            if not answer.get("ok"):
                return _failed(answer), roster_frame({})
            on = sum(r["on_roster"] for r in answer["rows"])
            return (_status("ok", f"{on} on the roster, {len(answer['rows'])} names in all." if answer["roster"] else
                            f"No roster: {len(answer['rows'])} name{'' if len(answer['rows']) == 1 else 's'} "
                            "seen at work with the class password (a compile, a run, a check or a submission)."),
                    roster_frame(answer))
        self.roster_list_btn.click(roster_listed, self.teacher_pw, [self.teacher_note, self.roster_rows], **light)

        def removed(pw, name, request: gr.Request):
            answer = act("remove_student", pw, name, request=request)
            return _status("ok", answer["message"]) if answer.get("ok") else _failed(answer)
        self.remove_btn.click(removed, [self.teacher_pw, self.roster_name], self.teacher_note, **light)

        def new_password(pw, name, request: gr.Request):
            answer = act("reset_password", pw, name, request=request)
            if not answer.get("ok"):
                return _failed(answer), ""
            return (_status("ok", f"{answer['student']} has a new password (below, shown once); their sessions on the "
                                  "old one ended."), answer["csv"])
        self.new_pw_btn.click(new_password, [self.teacher_pw, self.roster_name], [self.teacher_note, self.roster_out],
                              **light)

        def roster_check(pw, text, request: gr.Request):
            answer = act("roster_preview", pw, text, request=request)
            if not answer.get("ok"):
                return _failed(answer), gr.update(visible=False)
            kind = "fail" if answer["ending"] else "idle"
            return _status(kind, answer["message"] + " Import it?"), gr.update(visible=True)
        self.roster_btn.click(roster_check, [self.teacher_pw, self.roster], [self.teacher_note, self.roster_confirm],
                              **light)

        def roster_import(pw, text, request: gr.Request):
            answer = act("import_roster", pw, text, request=request)
            if not answer.get("ok"):
                return _failed(answer), "", gr.update(visible=False)
            n = answer["students"]
            return (_status("ok", f"{n} student{'' if n == 1 else 's'} imported; hand each their password."),
                    answer["csv"], gr.update(visible=False))
        self.roster_confirm.click(roster_import, [self.teacher_pw, self.roster],
                                  [self.teacher_note, self.roster_out, self.roster_confirm], **light)

        def reset_check(pw, ex, request: gr.Request):
            if not ex:
                return _status("fail", "Pick the exercise whose board to reset."), gr.update(visible=False)
            answer = act("board_preview", pw, ex, request=request)
            if not answer.get("ok"):
                return _failed(answer), gr.update(visible=False)
            return _status("fail", answer["message"] + " Reset it?"), gr.update(visible=True)
        self.teacher_reset.click(reset_check, [self.teacher_pw, self.teacher_ex],
                                 [self.teacher_note, self.reset_confirm], **light)

        def reset(pw, ex, request: gr.Request):
            answer = act("reset_board", pw, ex, request=request)
            if not answer.get("ok"):
                return _failed(answer), gr.update(visible=False), gr.update(visible=False)
            return (_status("ok", f"The board of {ex} is empty again ({answer['hidden']} entries hidden)."),
                    gr.update(visible=False), gr.update(visible=True))
        self.reset_confirm.click(reset, [self.teacher_pw, self.teacher_ex],
                                 [self.teacher_note, self.reset_confirm, self.reset_undo], **light)

        def undo(pw, ex, request: gr.Request):
            answer = act("undo_reset", pw, ex, request=request)
            if not answer.get("ok"):
                return _failed(answer), gr.update()
            return (_status("ok", f"The board of {answer['exercise']} is back ({answer['entries']} entries)."),
                    gr.update(visible=False))
        self.reset_undo.click(undo, [self.teacher_pw, self.teacher_ex], [self.teacher_note, self.reset_undo], **light)

        def extended(pw, ex, student, until, request: gr.Request):
            answer = act("extend", pw, ex, student, until, request=request)
            return _status("ok", answer["message"]) if answer.get("ok") else _failed(answer)
        self.extend_btn.click(extended, [self.teacher_pw, self.teacher_ex, self.extend_student, self.extend_until],
                              self.teacher_note, **light)

        def agents_set(pw, ex, choice, request: gr.Request):
            if not ex:
                return _status("fail", "Pick the exercise whose agents to allow or forbid.")
            allowed = {"allowed": True, "forbidden": False}.get(choice)
            answer = act("set_agents", pw, ex, allowed, request=request)
            return _status("ok", answer["message"] + ".") if answer.get("ok") else _failed(answer)
        self.agents_switch_btn.click(agents_set, [self.teacher_pw, self.teacher_ex, self.agents_switch],
                                     self.teacher_note, **light)

        def announced(pw, text, request: gr.Request):
            answer = act("announce", pw, text, request=request)
            if not answer.get("ok"):
                return _failed(answer), gr.update()
            shown = announcement_html(answer["announcement"])
            return (_status("ok", "Posted: every page shows it (open pages within a minute)." if shown else
                            "Taken down."), gr.update(value=shown, visible=bool(shown)))
        self.announce_btn.click(announced, [self.teacher_pw, self.announce_text],
                                [self.teacher_note, self.announcement], **light)

        def taken_down(pw, request: gr.Request):
            return announced(pw, "", request)
        self.announce_clear.click(taken_down, self.teacher_pw, [self.teacher_note, self.announcement], **light)

        def similar(pw, ex, request: gr.Request):
            answer = act("similar", pw, ex, request=request)
            if not answer.get("ok"):
                return _failed(answer), pairs_frame({}), None
            n = len(answer["pairs"])
            return (_status("ok", f"{answer['submissions']} submissions of {answer['exercise']}: {n} pair"
                                  f"{'' if n == 1 else 's'} of students share code beyond the starter, most alike "
                                  "first."), pairs_frame(answer), answer["pairs"])
        self.similar_btn.click(similar, [self.teacher_pw, self.teacher_ex],
                               [self.teacher_note, self.similar_rows, self.pairs], **light)

        def pair(pw, pairs, rank, request: gr.Request):
            found = next((p for p in pairs or [] if p["rank"] == rank), None)
            if found is None:
                return _status("fail", "Compare first, then give the rank of a pair."), ""
            answer = act("side_by_side", pw, found["a"], found["b"], request=request)
            if not answer.get("ok"):
                return _failed(answer), ""
            return (_status("ok", f"#{found['a']} ({found['student_a']}) and #{found['b']} ({found['student_b']}): "
                                  f"{100 * found['similarity']:.0f}% alike."),
                    f'<div class="pg-diff-view" style="overflow-x: auto">{answer["html"]}</div>')
        self.pair_btn.click(pair, [self.teacher_pw, self.pairs, self.pair_rank], [self.teacher_note, self.pair_view],
                            **light)

        def progressed(pw, ex, request: gr.Request):
            answer = act("progress", pw, ex, request=request)
            if not answer.get("ok"):
                return _failed(answer), gr.update(visible=False), ""
            figure = trajectory_figure(answer)
            return (_status("ok", f"How the students got there on {answer['exercise']}."),
                    gr.update(value=figure, visible=figure is not None), progress_html(answer))
        self.progress_btn.click(progressed, [self.teacher_pw, self.teacher_ex],
                                [self.teacher_note, self.progress_plot, self.progress_out], **light)
