"""A class on one server (playground/ui/classroom.py, playground/engine/grading.py): share links, exercises without
their hidden data, per-student logins, the teacher's view, and submissions graded on the GPU.

The endpoints are tested through Gradio's own server and client, with the class's login in front of them."""
from __future__ import annotations

import csv
import io
import json
import re
from pathlib import Path

import pytest
from gradio_client import Client

from playground.course import submitting
from playground.settings import Settings
from playground.store import Store
from playground.ui import classroom as cls
from ports import free_port

pytestmark = [pytest.mark.timeout(600),
              pytest.mark.filterwarnings("ignore::pandas.errors.Pandas4Warning")]  # from Gradio's queue
TEACHER_PW = "teacher-secret"
CLASS_PW = "class-secret"


def room_for(tmp_path, **settings) -> cls.Classroom:
    s = Settings(data_dir=tmp_path / "data", teacher_password=TEACHER_PW, password=CLASS_PW).replace(**settings)
    return cls.Classroom(s)


# -- share links -----------------------------------------------------------------------------------------------------
def test_a_share_round_trips_exactly_and_survives_a_restart(tmp_path):
    room = room_for(tmp_path)
    source = "def gemm(M, N, K):\n    return 'edited ünicode'\n\n\n"
    params = {"M": "1000", "block_M": "64", "dtype": "bfloat16", "arch": "sm_80"}
    shared = room.share("gemm", source, params, {"median_ms": 0.5}, "http://class:7860")
    assert shared["ok"] and shared["url"] == f"http://class:7860/?s={shared['id']}"
    assert len(shared["id"]) >= 10 and shared["id"].isalnum()
    assert room.share("gemm", source, params, {"median_ms": 0.5})["id"] == shared["id"]  # content-addressed
    assert room.share("gemm", source + " ", params, {"median_ms": 0.5})["id"] != shared["id"]
    # the result line is part of the content: another's share of the same code does not show this one's result
    assert room.share("gemm", source, params, {"median_ms": 0.9})["id"] != shared["id"]
    assert room.open_share(room.share("gemm", source, params)["id"])["summary"] is None

    restarted = room_for(tmp_path)
    opened = restarted.open_share(shared["id"])
    assert (opened["kernel"], opened["source"], opened["params"]) == ("gemm", source, params)
    assert opened["summary"] == {"median_ms": 0.5}


def test_new_share_links_are_limited_per_user_and_sharing_the_same_content_again_is_free(tmp_path):
    room = room_for(tmp_path)
    room.SHARES = 3
    made = [room.share("gemm", f"# edit {i}\n", {}, None, who="user:Ada") for i in range(room.SHARES)]
    assert all(m["ok"] for m in made)
    refused = room.share("gemm", "# one more\n", {}, None, who="user:Ada")
    assert not refused["ok"] and refused["error"]["stage"] == "busy"
    assert "share links" in refused["error"]["message"] and "try again in" in refused["error"]["message"]
    assert room.store.share_id_of("gemm", "# one more\n", {}) is None, "nothing was stored"
    again = room.share("gemm", "# edit 0\n", {}, None, who="user:Ada")  # the same content: its link, not a new one
    assert again["ok"] and again["id"] == made[0]["id"]
    assert room.share("gemm", "# one more\n", {}, None, who="user:Grace")["ok"], "another user has their own count"


def test_share_links_made_at_once_never_pass_the_limit_and_idle_names_take_no_room():
    from concurrent.futures import ThreadPoolExecutor
    from playground.course import Recent
    recent = Recent(window=60)
    with ThreadPoolExecutor(16) as pool:
        refused = list(pool.map(lambda _: recent.take("user:Ada", 5), range(64)))
    assert sum(w is None for w in refused) == 5, "exactly the limit got through"
    for i in range(1000):  # names asked about (a teacher endpoint under many logins) with nothing counted
        assert recent.wait(f"user:{i}", 3) is None
    assert list(recent.times) == ["user:Ada"]


def test_the_share_endpoint_counts_against_the_logged_in_name_else_the_address(tmp_path):
    import gradio as gr
    from starlette.requests import Request
    room = cls.install(room_for(tmp_path))
    room.SHARES = 1

    def request(address, username=None):
        scope = {"type": "http", "client": (address, 40000), "headers": [], "method": "POST", "path": "/",
                 "query_string": b""}
        return gr.Request(request=Request(scope), username=username)
    try:
        assert cls.share("gemm", "# a\n", {}, None, request("10.0.0.1", "Ada"))["ok"]
        assert not cls.share("gemm", "# b\n", {}, None, request("10.0.0.2", "Ada"))["ok"], "Ada, from anywhere"
        assert cls.share("gemm", "# b\n", {}, None, request("10.0.0.1", "Grace"))["ok"], "not her classmate"
        assert cls.share("gemm", "# c\n", {}, None, request("10.0.0.3"))["ok"]
        assert not cls.share("gemm", "# d\n", {}, None, request("10.0.0.3"))["ok"], "no login: the address"
    finally:
        cls.install(None)


def test_a_share_links_result_reads_as_a_sentence_and_junk_figures_are_left_out():
    run = {"action": "run", "ok": True, "passed": True, "median_ms": 0.0701, "tflops": None, "gbps": 3812.4,
           "registers": 40, "label": "softmax", "error": ""}
    assert cls.summary_text(run) == "their last run: verified, 70.1 µs, 3812 GB/s, 40 registers a thread"
    failed = {"action": "compile", "ok": False, "error": "python: SyntaxError at line 3"}
    assert cls.summary_text(failed) == "their last compile failed (python: SyntaxError at line 3)"
    forged = {"action": "run", "ok": True, "median_ms": "fast", "tflops": [1], "gbps": True, "registers": -1}
    assert cls.summary_text(forged) == "their last run: ok"  # sent to /share by anyone: never raises
    huge = {"action": "run", "ok": True, "median_ms": 10 ** 400, "gbps": float("nan"), "registers": float("inf")}
    assert cls.summary_text(huge) == "their last run: ok"
    assert cls.summary_text(None) == cls.summary_text({}) == ""


def test_unknown_or_oversized_shares_get_a_clear_message(tmp_path):
    room = room_for(tmp_path)
    for bad in ("nosuchid00", "../../etc/passwd", ""):
        answer = room.open_share(bad)
        assert not answer["ok"] and "no shared kernel" in answer["error"]["message"]
    big = room.share("gemm", "x" * (300 * 1024), {})
    assert not big["ok"] and "at most 256 KiB" in big["error"]["message"]
    assert "plain JSON" in room.share("gemm", "", {"f": object()})["error"]["message"]
    assert "plain JSON" in room.share("gemm", "", {}, {"median_ms": 1e400})["error"]["message"]  # not "internal"
    assert "no kernel named '../../etc/passwd'" in room.share("../../etc/passwd", "", {})["error"]["message"]


# -- exercises -----------------------------------------------------------------------------------------------------------
def test_the_shipped_exercises_load_with_statement_starter_and_hidden_shapes():
    found = cls.load_exercises()
    assert {"vector_add", "tiled_gemm", "softmax"} <= set(found)
    for ex in found.values():
        assert ex.statement.startswith("# ") and f"def {ex.factory}(" in ex.starter
        assert ex.hidden and ex.visible and ex.target_ms
        assert not set(map(json.dumps, ex.hidden)) & set(map(json.dumps, ex.visible))


def test_the_exercise_listing_carries_no_hidden_shape_reference_or_seed(tmp_path):
    room = room_for(tmp_path)
    listing = room.exercises()
    text = json.dumps(listing)
    for ex in cls.load_exercises().values():
        item = next(i for i in listing if i["name"] == ex.name)
        assert {"name", "title", "statement", "starter"} <= set(item)
        assert item["hidden_count"] == len(ex.hidden)
        for problem in ex.hidden:
            assert json.dumps(problem) not in text
            assert not any(re.search(rf'"{k}": {v}\b', json.dumps(item)) for k, v in problem.items()
                           if v not in [p.get(k) for p in ex.visible] + [ex.timed.get(k)])
    assert "reference" not in text and "seed" not in text


def test_a_refusal_at_a_hidden_shape_names_no_size():
    ex = cls.load_exercises()["vector_add"]
    hidden = len(ex.visible)  # the first hidden problem
    refusal = submitting.refusal(ex, {"stage": "verify", "message": f"wrong result at {ex.hidden[0]['N']}: x",
                                          "line": 3, "log": f"N={ex.hidden[0]['N']}"}, hidden, "not accepted")
    assert refusal["hidden"] and "hidden shape" in refusal["error"]["message"]
    assert str(ex.hidden[0]["N"]) not in json.dumps(refusal)
    visible = submitting.refusal(ex, {"stage": "verify", "message": "relative error 1 over the limit"}, 0, "no")
    assert str(ex.visible[0]["N"]) in visible["error"]["message"]
    checks = submitting.checks(ex, [{"problem": i, "passed": i != hidden, "rel_error": 0.5, "message": "m"}
                                        for i in range(len(ex.problems))])
    assert [c["problem"] for c in checks if c["problem"].startswith("hidden")] == \
        [f"hidden shape {k + 1}" for k in range(len(ex.hidden))]
    assert not any(re.search(rf"\b{p['N']}\b", json.dumps(checks)) for p in ex.hidden)


def test_submit_checks_who_what_and_whether_there_is_a_gpu(tmp_path):
    room = cls.Classroom(Settings(data_dir=tmp_path), has_gpu=lambda: False)
    starter = cls.load_exercises()["vector_add"].starter
    assert room.submit(None, "vector_add", starter, {})["error"]["stage"] == "permission"
    assert "no exercise named" in room.submit("ada", "nope", starter, {})["error"]["message"]
    assert "set by the exercise" in room.submit("ada", "vector_add", starter, {"N": 5})["error"]["message"]
    no_gpu = room.submit("ada", "vector_add", starter, {"block_N": "2048"})
    assert no_gpu["error"] == {"stage": "device", "message": cls.NO_GPU, "line": None, "log": ""}
    assert room.store.submissions() == []  # nothing graded, nothing recorded


def test_a_check_grades_the_public_shapes_only_keeps_nothing_and_names_them_in_the_exercises_terms(tmp_path):
    # The jobs' side, answered here: the build of the public problems, and a grade that fails at the last problem
    # it was given (the timed one, N = 67108864, which is the exercise's last problem too, after the hidden ones).
    # What the jobs were sent and what the student is told are what is checked.
    ex = cls.load_exercises()["vector_add"]
    sent = []

    def jobs(action, kernel, source, params, **kw):
        sent.append((action, params["problems"]))
        if action == "build_submission":
            return {"ok": True, "tir": ["(tir)"] * len(params["problems"])}
        last = len(params["problems"]) - 1
        verification = [{"problem": i, "passed": i != last, "rel_error": 0.0 if i != last else 1.0,
                         "message": "ok" if i != last else "wrong result"} for i in range(len(params["problems"]))]
        return {"ok": False, "verification": verification, "failed_problem": last,
                "error": {"stage": "verify", "message": "max error 1.0", "line": None, "log": ""}}
    room = cls.Classroom(Settings(data_dir=tmp_path), run_job=jobs, has_gpu=lambda: True)
    answer = room.check("Ada", "vector_add", ex.starter, {})
    public = [dict(p) for p in ex.visible] + [dict(ex.timed)]
    assert [problems for _, problems in sent] == [public, public], "no hidden shape is built or graded"
    assert not answer["ok"] and answer["checked"] and answer["error"]["stage"] == "verify"
    assert answer["error"]["message"].startswith(f"the check failed (at {cls_label(ex.timed)})"), answer
    assert not answer["hidden"], "the timed shape is no hidden one"
    assert [c["problem"] for c in answer["checks"]] == [cls_label(p) for p in public]
    assert [c["passed"] for c in answer["checks"]] == [True, True, False]
    assert room.store.submissions() == [] and room.leaderboard("vector_add")["rows"] == []  # nothing kept
    # a check never holds a submission up (nor the other way round): each kind is one at a time on its own
    with room._one_grading("Ada", "check"):
        assert room.check("Ada", "vector_add", ex.starter, {})["error"]["stage"] == "busy"
        assert room.submit("Ada", "vector_add", ex.starter, {})["error"]["stage"] == "verify"
    refused = room.check(None, "vector_add", ex.starter, {})
    assert refused["error"]["stage"] == "permission" and refused["checked"], "every answer says it was a check"
    no_gpu = cls.Classroom(Settings(data_dir=tmp_path / "b"), has_gpu=lambda: False).check(
        "Ada", "vector_add", ex.starter, {})
    assert no_gpu["error"]["stage"] == "device" and "cannot check a solution" in no_gpu["error"]["message"]


def cls_label(problem: dict) -> str:
    from playground.course.exercises import label
    return label(problem)


# -- who is who, and the teacher's view ---------------------------------------------------------------------------------
def test_logins_teacher_roster_and_class_password(tmp_path):
    room = room_for(tmp_path)
    assert room.login("teacher", TEACHER_PW) and not room.login("teacher", CLASS_PW)
    assert room.login("anyone", CLASS_PW) and not room.login("anyone", "guess")  # no roster yet: the class password
    roster = room.import_roster("teacher", "", "name,email\nAda Lovelace,a@x\nGrace Hopper,g@x\n")
    passwords = {r["name"]: r["password"] for r in csv.DictReader(io.StringIO(roster["csv"]))}
    assert set(passwords) == {"Ada Lovelace", "Grace Hopper"}
    assert room.login("Ada Lovelace", passwords["Ada Lovelace"])
    assert not room.login("Ada Lovelace", passwords["Grace Hopper"])
    assert not room.login("anyone", CLASS_PW)  # with a roster, only its students
    stored = Store(tmp_path / "data").db.query("SELECT password_hash FROM students")
    assert not any(pw in r[0] for r in stored for pw in passwords.values())
    assert not room.import_roster("Ada Lovelace", "", "Mallory")["ok"]


def test_only_the_teacher_sees_code_lists_exports_and_resets(tmp_path):
    room = room_for(tmp_path)
    room.store.add_submission("vector_add", "Ada", "ADA'S SECRET KERNEL", {}, accepted=True, median_ms=0.2,
                              baseline_ms=0.1)
    for user, pw in (("Grace", ""), ("Grace", CLASS_PW), (None, "wrong")):
        for answer in (room.all_submissions(user, pw), room.open_submission(user, pw, 1),
                       room.export_csv(user, pw), room.reset_board(user, pw, "vector_add")):
            assert answer["error"]["stage"] == "permission" and "SECRET" not in json.dumps(answer)
    board = room.leaderboard("vector_add")
    assert board["rows"][0]["student"] == "Ada" and "SECRET" not in json.dumps(board)
    assert board["rows"][0]["speedup"] == pytest.approx(0.5)
    assert room.open_submission("teacher", "", 1)["source"] == "ADA'S SECRET KERNEL"
    assert room.open_submission(None, TEACHER_PW, 1)["ok"]
    assert "Ada" in room.export_csv(None, TEACHER_PW)["csv"]
    assert room.reset_board("teacher", "", "vector_add")["ok"] and room.leaderboard("vector_add")["rows"] == []
    off = cls.Classroom(Settings(data_dir=tmp_path / "off"))
    assert "PLAYGROUND_TEACHER_PASSWORD" in off.all_submissions("teacher", "")["error"]["message"]


def test_wrong_types_from_an_http_caller_get_a_plain_message(tmp_path):
    room = room_for(tmp_path)
    assert "no submission number" in room.open_submission("teacher", "", 10 ** 30)["error"]["message"]
    assert "give the number of a submission" in room.open_submission("teacher", "", None)["error"]["message"]
    for params in ([1, 2], "abc"):
        answer = room.submit("Ada", "vector_add", "x = 1", params)
        assert answer["error"]["stage"] == "parameters" and "params must be an object" in answer["error"]["message"]
    assert "pick an exercise first" in room.submit("Ada", None, "x = 1", {})["error"]["message"]
    from playground.ui import api
    answer = api.call("compile", "vector_add", "", [1, 2], None)
    assert answer["error"]["stage"] == "parameters" and "params must be an object" in answer["error"]["message"]


def test_login_names_are_short_and_printable_and_the_csv_runs_no_formula(tmp_path):
    room = room_for(tmp_path)
    assert room.login("Ada", CLASS_PW)
    assert not room.login("x" * 65, CLASS_PW)  # longer than a submission can record
    assert not room.login("teacher\u200b", CLASS_PW)  # a look-alike of the teacher on the board
    room.store.add_submission("vector_add", "=HYPERLINK(\"http://x\")", "k", {}, accepted=True, median_ms=0.2,
                              baseline_ms=0.1)
    text = room.export_csv("teacher", "")["csv"]
    assert "'=HYPERLINK" in text and ",=HYPERLINK" not in text


def test_guessing_the_teacher_password_stops_after_a_few_tries_for_that_student_only(tmp_path):
    room = room_for(tmp_path)
    for guess in range(room.TEACHER_TRIES):
        assert "only the teacher" in room.all_submissions("Mallory", f"guess-{guess}")["error"]["message"]
    refused = room.all_submissions("Mallory", TEACHER_PW)  # even the right one, now: the guesses are over
    assert not refused.get("ok") and "too many wrong teacher passwords" in refused["error"]["message"]
    assert room.all_submissions("Grace", TEACHER_PW)["ok"]  # nobody else is slowed down
    assert room.all_submissions("teacher", "")["ok"]  # nor the teacher, logged in


# -- logins behind one address (a school's NAT or proxy) ---------------------------------------------------------------
def test_one_students_failed_logins_do_not_lock_out_classmates_behind_the_same_address():
    from playground.ui.server import LoginThrottle as T
    throttle = T(clock=lambda: 1000.0)
    for _ in range(T.LIMIT):
        throttle.admit("10.1.2.3", "Ada")
    assert throttle.admit("10.1.2.3", "Ada")[1] is not None, "Ada, past her limit, waits"
    delay, retry_after, _, _ = throttle.admit("10.1.2.3", "Grace")
    assert (delay, retry_after) == (0.0, None), "Grace, behind the same address, logs in at once"


def test_a_guesser_rotating_names_from_one_address_meets_the_address_ceiling():
    from playground.ui.server import LoginThrottle as T
    throttle = T(clock=lambda: 1000.0)
    assert T.ADDRESS_LIMIT >= 4 * T.LIMIT, "the ceiling leaves room for a class's typos"
    answers = [throttle.admit("10.1.2.3", f"name-{i}") for i in range(T.ADDRESS_LIMIT)]
    assert all(a[1] is None for a in answers), "no name of them is past its own limit"
    refused = throttle.admit("10.1.2.3", "yet-another-name")
    assert refused[1] is not None and refused[3] == "address"
    assert throttle.admit("10.9.9.9", "yet-another-name")[1] is None, "another address is not held back"


def test_over_http_a_name_past_its_limit_is_refused_while_a_classmate_logs_in():
    """Through Gradio's POST /login: the throttle reads the name from the form (multipart, as the login page sends
    it, or URL-encoded) and hands the form on to the login unchanged."""
    import gradio as gr
    import httpx
    from playground.ui.server import LoginThrottle, throttle_logins

    class Quick(LoginThrottle):
        FREE, LIMIT, ADDRESS_LIMIT = 3, 3, 100
    with gr.Blocks() as demo:
        gr.Markdown("class")
    app, url, _ = demo.launch(server_name="127.0.0.1", server_port=free_port(), auth=lambda u, p: p == CLASS_PW,
                              prevent_thread_lock=True, quiet=True)
    throttle_logins(app, Quick())
    try:
        login = url.rstrip("/") + "/login"
        for i in range(Quick.LIMIT):
            wrong = httpx.post(login, files={"username": (None, "Ada"), "password": (None, f"typo-{i}")}, timeout=30)
            assert wrong.status_code == 400, wrong.text
        ada = httpx.post(login, data={"username": "Ada", "password": CLASS_PW}, timeout=30)
        assert ada.status_code == 429 and "for this name" in ada.json()["detail"]
        grace = httpx.post(login, data={"username": "Grace", "password": CLASS_PW}, timeout=30)
        assert grace.status_code == 200, grace.text
    finally:
        demo.close()


@pytest.fixture(scope="module")
def class_server(tmp_path_factory):
    """The class's endpoints in Gradio's server, behind the class's login."""
    import gradio as gr
    room = cls.install(room_for(tmp_path_factory.mktemp("class")))
    room.store.add_submission("softmax", "Ada", "ADA'S SECRET KERNEL", {}, accepted=True, median_ms=0.1)
    with gr.Blocks() as demo:
        cls.register(4, "engine")
    demo.queue()
    _, url, _ = demo.launch(server_name="127.0.0.1", server_port=free_port(), auth=room.login,
                            prevent_thread_lock=True, quiet=True)
    yield url
    demo.close()
    cls.install(None)


def test_a_roster_import_ends_the_sessions_of_names_not_on_it(tmp_path):
    import gradio as gr
    room = cls.install(room_for(tmp_path))
    try:
        with gr.Blocks() as demo:
            cls.register(4, "engine")
        demo.queue()
        app, url, _ = demo.launch(server_name="127.0.0.1", server_port=free_port(), auth=room.login,
                                  prevent_thread_lock=True, quiet=True)
        cls.end_sessions_off_the_roster(app, room)  # as serve() does
        mallory = Client(url, auth=("Mallory", CLASS_PW), verbose=False)  # before any roster: the class password
        assert mallory.predict("", api_name="/leaderboard") is not None
        teacher = Client(url, auth=("teacher", TEACHER_PW), verbose=False)
        assert teacher.predict("Ada Lovelace\n", "", api_name="/teacher_roster")["ok"]
        assert set(app.tokens.values()) == {"teacher"}  # Mallory's session ended; the teacher's goes on
        with pytest.raises(Exception):
            mallory.predict("", api_name="/leaderboard")
        demo.close()
    finally:
        cls.install(None)


def test_the_endpoints_share_list_and_separate_teacher_from_student(class_server):
    student = Client(class_server, auth=("Grace", CLASS_PW), verbose=False)
    shared = student.predict("softmax", "# my edit\n", {"threads": "256"}, None, api_name="/share")
    assert shared["ok"] and shared["url"].endswith(f"/?s={shared['id']}")
    opened = Client(class_server, auth=("Other", CLASS_PW), verbose=False).predict(shared["id"],
                                                                                    api_name="/open_share")
    assert (opened["kernel"], opened["source"], opened["params"]) == ("softmax", "# my edit\n", {"threads": "256"})
    assert {e["name"] for e in student.predict(api_name="/exercises")} >= {"vector_add", "tiled_gemm", "softmax"}
    assert student.predict("softmax", api_name="/leaderboard")["rows"][0]["student"] == "Ada"
    refused = student.predict("", "", api_name="/teacher_submissions")
    assert refused["error"]["stage"] == "permission" and "SECRET" not in json.dumps(refused)
    teacher = Client(class_server, auth=("teacher", TEACHER_PW), verbose=False)
    rows = teacher.predict("", "", api_name="/teacher_submissions")["rows"]
    assert rows[0]["student"] == "Ada"
    assert teacher.predict(rows[0]["id"], "", api_name="/teacher_open")["source"] == "ADA'S SECRET KERNEL"
    assert student.predict(rows[0]["id"], api_name="/my_submission")["ok"] is False  # Ada's, asked by Grace
    assert "ADA'S SECRET" not in json.dumps(student.predict("", api_name="/my_submissions"))
    assert teacher.predict("ada", "", "", api_name="/teacher_submissions_of")["rows"][0]["id"] == rows[0]["id"]
    with pytest.raises(Exception):
        Client(class_server, auth=("teacher", CLASS_PW), verbose=False)  # the class password is not the teacher's


# -- the grader's two halves, on the CPU -------------------------------------------------------------------------------
def test_the_build_job_runs_the_submission_in_the_sandbox_and_answers_tir(tmp_path):
    """The first half of grading, through the job layer: the student's factory called for every problem."""
    from playground.jobs import run_job
    ex = cls.load_exercises()["vector_add"]
    built = run_job("build_submission", "exercise:vector_add", ex.starter,
                    {"factory": ex.factory, "problems": ex.problems, "dtype": ex.dtype, "tile": {"block_N": 512}},
                    timeout=180)
    assert built["ok"], built.get("error")
    assert len(built["tir"]) == len(ex.problems)
    from playground.engine.grading import load_tir
    funcs = [load_tir(t) for t in built["tir"]]
    assert [int(f.buffer_map[f.params[0]].shape[0]) for f in funcs] == [p["N"] for p in ex.problems]

    not_a_kernel = ex.starter + "\n\ndef vector_add(N, dtype='float16', **_):\n    return lambda a, b: a + b\n"
    refused = run_job("build_submission", "exercise:vector_add", not_a_kernel,
                      {"factory": ex.factory, "problems": ex.problems, "dtype": ex.dtype, "tile": {}}, timeout=180)
    assert not refused["ok"] and "must return a @T.prim_func" in refused["error"]["message"]


# The build job runs the student's Python, which can find the job's answer pipe (/proc/self/fd) and write an answer
# of its own before the real one. What it may say there is only ever TIR to be graded: a grade comes from the grade
# job, which runs none of the student's Python.
FORGES_ITS_ANSWER = """
import json as _json, os as _os
_others = {_os.readlink(f"/proc/self/fd/{fd}") for fd in (0, 1, 2)}
for _fd in sorted(int(n) for n in _os.listdir("/proc/self/fd")):
    try:
        _target = _os.readlink(f"/proc/self/fd/{_fd}")
    except OSError:
        continue
    if _target.startswith("pipe:") and _target not in _others:
        _forged = {"ok": True, "tir": TIR, "median_ms": 1e-06, "speedup": 1000.0, "times": {"kernel": {"median_ms": 1e-06}},
                   "verification": [{"passed": True, "problem": i} for i in range(8)], "baselines": {"torch": 1.0}}
        _os.write(_fd, (_json.dumps({"result": _forged}) + "\\n").encode())
"""


@pytest.mark.parametrize("tir", ["[]", "['x'] * 8"], ids=["no-tir", "junk-tir"])
def test_a_submission_that_forges_its_build_jobs_answer_never_gets_a_grade(tmp_path, tir):
    from playground.jobs import run_job as real
    ex = cls.load_exercises()["vector_add"]
    called = []

    def run_job(action, *args, **kwargs):
        answer = real(action, *args, **kwargs)
        called.append((action, answer))
        return answer
    # has_gpu: on a CPU machine too the submission goes on to its jobs (the grade job then answers that it has none)
    room = cls.Classroom(Settings(data_dir=tmp_path / "data", teacher_password=TEACHER_PW), run_job=run_job,
                         has_gpu=lambda: True)
    forger = ex.starter.replace("import tilelang.language as T\n",
                                "import tilelang.language as T\n" + FORGES_ITS_ANSWER.replace("TIR", tir), 1)
    answer = room.submit("Mallory", "vector_add", forger, {})
    built = called[0][1]
    assert called[0][0] == "build_submission" and built.get("median_ms") == 1e-06, "the forgery did not reach the pipe"
    assert not answer["ok"] and "median_ms" not in answer
    assert [a for a, _ in called] in (["build_submission"], ["build_submission", "grade"])
    if len(called) == 2:  # the junk TIR went on to the grade job, which answers for itself
        assert called[1][1].get("median_ms") is None
    assert room.leaderboard("vector_add")["rows"] == []
    assert {r["student"]: r["status"] for r in room.all_submissions("teacher", TEACHER_PW)["rows"]} == {"Mallory": "refused"}


def test_a_refused_submission_names_the_students_file_not_the_servers_folders(tmp_path):
    from conftest import ROOT
    ex = cls.load_exercises()["vector_add"]
    room = cls.Classroom(Settings(data_dir=tmp_path / "data", teacher_password=TEACHER_PW), has_gpu=lambda: True)
    where = ex.starter.replace("import tilelang.language as T\n",
                               "import tilelang.language as T\nraise RuntimeError('I am ' + __file__)\n", 1)
    answer = room.submit("Ada", "vector_add", where, {})
    assert not answer["ok"] and "I am vector_add.py" in answer["error"]["message"], answer["error"]
    text = json.dumps(answer)
    assert f"{ROOT}/" not in text and "/job/" not in text and "/src/" not in text, text[:2000]


def test_the_grader_refuses_tir_that_calls_out_of_the_kernel():
    import tilelang  # noqa: F401
    import tilelang.language as T
    import tvm
    from playground.engine.errors import StageError
    from playground.engine.grading import load_tir

    @T.prim_func
    def escapes(A: T.Tensor((4,), "float32")):
        T.evaluate(T.call_extern("int32", "system", "touch_pwned"))

    with pytest.raises(StageError, match="calls out of itself"):
        load_tir(tvm.ir.save_json(escapes))
    with pytest.raises(StageError, match="not a PrimFunc"):
        load_tir(tvm.ir.save_json(tvm.runtime.convert([1, 2])))


# -- on a GPU: submissions graded and put on the board ------------------------------------------------------------------
WRONG_AT_RAGGED = '''
import tilelang.language as T


def vector_add(N, dtype="float16", block_N=1024, threads=256):
    # Wrong on purpose: the last, partial block is only handled when it is the only block (N < block_N).
    @T.prim_func
    def main(A: T.Tensor((N,), dtype), B: T.Tensor((N,), dtype), C: T.Tensor((N,), dtype)):
        with T.Kernel(T.ceildiv(N, block_N), threads=threads) as bx:
            for i in T.Parallel(block_N):
                if N < block_N:
                    if i < N:
                        C[i] = A[i] + B[i]
                elif bx * block_N + i < N // block_N * block_N:
                    C[bx * block_N + i] = A[bx * block_N + i] + B[bx * block_N + i]

    return main
'''

# Patches the grader's reference and comparison from the submission's Python, and writes nothing: in the process
# that ran it, every check would pass. The grader runs none of this Python, so the outputs stay NaN and it fails.
PATCHES_THE_REFERENCE = '''
import sys
import tilelang.language as T

for name, module in list(sys.modules.items()):
    if name.startswith("playground") and hasattr(module, "compare"):
        module.compare = lambda *a, **k: {"passed": True, "rel_error": 0.0, "message": "ok"}
    if hasattr(module, "reference") and hasattr(module, "make_inputs"):
        module.reference = lambda *inputs, **_: inputs[0]


def vector_add(N, dtype="float16", block_N=1024, threads=256):
    @T.prim_func
    def main(A: T.Tensor((N,), dtype), B: T.Tensor((N,), dtype), C: T.Tensor((N,), dtype)):
        with T.Kernel(T.ceildiv(N, block_N), threads=threads) as bx:
            for i in T.Parallel(block_N):
                if bx * block_N + i < N:
                    C[bx * block_N + i] = A[bx * block_N + i]  # the first input copied: what a patched check wants

    return main
'''


@pytest.mark.gpu
def test_on_a_gpu_correct_lands_on_the_board_wrong_and_cheating_are_refused(tmp_path, record_property):
    room = cls.Classroom(Settings(data_dir=tmp_path, teacher_password=TEACHER_PW))
    ex = cls.load_exercises()["vector_add"]

    good = room.submit("Ada", "vector_add", ex.starter, {"block_N": "2048", "threads": "256"})
    record_property("correct submission", json.dumps({k: good.get(k) for k in
                                                     ("ok", "median_ms", "baseline", "speedup", "rank", "message")}))
    assert good["ok"], good.get("error")
    assert good["median_ms"] > 0 and good["rank"] == 1
    assert all(c["passed"] for c in good["checks"]) and len(good["checks"]) == len(ex.problems)
    board = room.leaderboard("vector_add")["rows"]
    assert [(r["student"], r["submission"]) for r in board] == [("Ada", good["submission"])]

    wrong = room.submit("Grace", "vector_add", WRONG_AT_RAGGED, {})
    record_property("wrong at a hidden shape", json.dumps(wrong.get("error")))
    assert not wrong["ok"] and wrong["hidden"]
    assert "passes the visible shapes but gives a wrong result at a hidden shape" in wrong["error"]["message"]
    assert all(c["passed"] for c in wrong["checks"] if not c["problem"].startswith("hidden"))
    assert not any(re.search(rf"\b{p['N']}\b", json.dumps(wrong)) for p in ex.hidden)

    cheat = room.submit("Mallory", "vector_add", PATCHES_THE_REFERENCE, {})
    record_property("patched reference", json.dumps(cheat.get("error")))
    assert not cheat["ok"] and cheat["error"]["stage"] == "verify"
    assert [r["student"] for r in room.leaderboard("vector_add")["rows"]] == ["Ada"]
    statuses = {r["student"]: r["status"] for r in room.all_submissions("teacher", "")["rows"]}
    assert statuses == {"Ada": "accepted", "Grace": "refused", "Mallory": "refused"}


@pytest.mark.gpu
def test_on_a_gpu_a_check_grades_the_public_shapes_and_keeps_nothing(tmp_path, record_property):
    room = cls.Classroom(Settings(data_dir=tmp_path))
    ex = cls.load_exercises()["vector_add"]
    good = room.check("Ada", "vector_add", ex.starter, {"block_N": "2048", "threads": "256"})
    record_property("check of the starter", json.dumps({k: good.get(k) for k in ("ok", "median_ms", "message")}))
    assert good["ok"] and good["checked"], good.get("error")
    assert [c["passed"] for c in good["checks"]] == [True] * (len(ex.visible) + 1)  # the visible and the timed
    assert not any(c["problem"].startswith("hidden") for c in good["checks"])
    # wrong only at a hidden shape: a check cannot tell, which is what Submit is for
    assert room.check("Grace", "vector_add", WRONG_AT_RAGGED, {})["ok"]
    assert room.store.submissions() == [] and room.leaderboard("vector_add")["rows"] == []


@pytest.mark.gpu
@pytest.mark.parametrize("name", ["tiled_gemm", "softmax"])
def test_on_a_gpu_the_shipped_starters_are_accepted(tmp_path, name, record_property):
    room = cls.Classroom(Settings(data_dir=tmp_path))
    answer = room.submit("Ada", name, cls.load_exercises()[name].starter, {})
    record_property(f"{name} starter", json.dumps({k: answer.get(k) for k in
                                                   ("ok", "median_ms", "baseline", "speedup", "error")}))
    assert answer["ok"], answer.get("error")
    assert answer["speedup"] > 0


def test_exercise_folders_are_complete():
    for folder in sorted(Path(cls.EXERCISES_DIR).iterdir()):
        if folder.is_dir() and not folder.name.startswith(("_", ".")):
            assert {"statement.md", "starter.py", "reference.py", "exercise.toml"} <= {p.name for p in
                                                                                    folder.iterdir()}, folder


def test_behind_a_proxy_the_user_header_names_the_student(tmp_path):
    """PLAYGROUND_USER_HEADER: Gradio's auth_dependency takes the student's name from the proxy's header."""
    import gradio as gr
    import httpx
    room = cls.install(cls.Classroom(Settings(data_dir=tmp_path, user_header="X-Forwarded-User",
                                              teacher_password=TEACHER_PW), has_gpu=lambda: False))
    auth, dependency = room.gradio_auth()
    assert auth is None and dependency is not None
    with gr.Blocks() as demo:
        cls.register(4, "engine")
    demo.queue()
    _, url, _ = demo.launch(server_name="127.0.0.1", server_port=free_port(), auth_dependency=dependency,
                            prevent_thread_lock=True, quiet=True)
    try:
        assert httpx.get(url, timeout=30).status_code in (401, 403)  # no header: nobody
        ada = Client(url, headers={"X-Forwarded-User": "Ada  Lovelace"}, verbose=False)
        answer = ada.predict("vector_add", "def vector_add(N, dtype): pass", {}, api_name="/submit")
        assert answer["error"]["stage"] == "device"  # past the identity check: the name came from the header
        assert room.login("Ada", "anything") is False  # no password login in this mode
        named_teacher = Client(url, headers={"X-Forwarded-User": "teacher"}, verbose=False)
        refused = named_teacher.predict("", "", api_name="/teacher_submissions")
        assert refused["error"]["stage"] == "permission"  # a header never makes anyone the teacher ...
        assert named_teacher.predict("", TEACHER_PW, api_name="/teacher_submissions")["ok"]  # ... the password does
    finally:
        demo.close()
        cls.install(None)


def test_the_board_says_no_where_a_target_was_missed_and_nothing_without_a_target():
    rows = [{"rank": 1, "student": "Ada", "median_ms": 1.0, "speedup": 1.2, "met_target": True, "attempts": 2},
            {"rank": 2, "student": "Bob", "median_ms": 3.0, "speedup": 0.4, "met_target": False, "attempts": 1}]
    assert list(cls.board_frame({"rows": rows, "target_ms": 2.0})["target met"]) == ["yes", "no"]
    assert list(cls.board_frame({"rows": rows, "target_ms": None})["target met"]) == ["", ""]
