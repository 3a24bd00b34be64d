"""A term of a graded class in a real browser (Debian's chromium driven by playwright, as tests/test_browser.py): the
teacher and two students on one server, logged in through the login page.

The teacher imports a roster (warned first of the session it ends), posts an announcement, and the students work on
an exercise with a deadline: its starter's own controls, a compile and a run, submissions before the deadline, one
after it (refused), one after the teacher moved the deadline for that student. The teacher then reads the roster,
the board, flags a submission, compares the submissions (the similarity view), reads how the students got there
(the trajectories), and takes the grades file and the code export.

On a machine without a GPU a submission cannot be graded: the class is told there is a GPU (`has_gpu`), so each
submission runs its real build job and is refused by the grade job; refused submissions are submissions too. The
views that need accepted submissions (the board, the grades) get them through the store, marked SEEDED below."""
import csv
import io
import os
import shutil
import time
import zipfile
from pathlib import Path

import pytest

from conftest import ROOT, choose, launch_browser, need_browser, sending, settle, slot, type_value, wait_idle, watch
from ports import free_port

pytestmark = [pytest.mark.browser, pytest.mark.timeout(1200),
              pytest.mark.filterwarnings("ignore::pandas.errors.Pandas4Warning")]
TEACHER_PW = "teacher-secret"
CLASS_PW = "class-secret"
ARTIFACTS = Path(__file__).resolve().parent / "artifacts"
TITLE = "Vector add at memory speed (vector_add)"
# One line each, so the editor's auto-indent changes nothing: Grace's is Ada's renamed and reformatted.
ADAS_HELPER = "def ada_blocks(total, width): return (total + width - 1) // width * 3 + max(total % width, 5) - 2"
GRACES_HELPER = "def g(n,  w):  return (n+w-1)//w*3+max(n%w, 5)-2"


def write_exercise(folder: Path, deadline: float) -> None:
    """exercises/vector_add as shipped, with a deadline and a late window."""
    toml = (ROOT / "exercises" / "vector_add" / "exercise.toml").read_text()
    stamp = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(deadline))
    (folder / "exercise.toml").write_text(toml + f"deadline = {stamp}\nlate_hours = 1\nlate_penalty = 0.5\n")


@pytest.fixture(scope="module")
def term(tmp_path_factory):
    need_browser()
    if os.environ.get("PLAYGROUND_URL"):
        pytest.skip("needs a class server of its own")
    from playground.settings import Settings
    from playground.ui import classroom as cls, server
    from playground.ui.gateway import start_jobs
    from playground.ui.layout import build_demo
    tmp = tmp_path_factory.mktemp("term")
    folder = tmp / "exercises" / "vector_add"
    shutil.copytree(ROOT / "exercises" / "vector_add", folder)
    write_exercise(folder, time.time() + 3600)
    settings = Settings(data_dir=tmp / "data", teacher_password=TEACHER_PW, password=CLASS_PW)
    # has_gpu: the class believes a GPU is here, so submissions go on to their real jobs (the grade job refuses)
    room = cls.install(cls.Classroom(settings, has_gpu=lambda: True, exercises_dir=tmp / "exercises"))
    demo = build_demo(settings)
    demo.queue(max_size=settings.ui_queue, default_concurrency_limit=None)
    app, local, _ = demo.launch(server_name="127.0.0.1", server_port=free_port(), auth=room.login_in_a_thread,
                                auth_message=room.login_message(), prevent_thread_lock=True, quiet=True,
                                ssr_mode=False)
    server.protect(demo, app, room)
    start_jobs(settings)
    from playwright.sync_api import sync_playwright
    with sync_playwright() as p:
        browser = launch_browser(p)
        yield {"url": local, "room": room, "folder": folder, "browser": browser}
        browser.close()
    demo.close()
    cls.install(None)


def wait_text(page, selector: str, text: str, present: bool = True, timeout: float = 90) -> None:
    """Until the element at `selector` shows `text` (or, `present` False, no longer does)."""
    page.wait_for_function("([sel, text, present]) => { const e = document.querySelector(sel);"
                           " return !!e && e.innerText.includes(text) === present; }", arg=[selector, text, present],
                           timeout=timeout * 1000)


def logged_in(browser, url: str, name: str, password: str):
    context = browser.new_context(viewport={"width": 1500, "height": 1000}, accept_downloads=True)
    page = watch(context.new_page())
    page.set_default_timeout(90_000)
    log_in(page, url, name, password)
    return page


def log_in(page, url: str, name: str, password: str) -> None:
    page.goto(url, wait_until="domcontentloaded")
    page.wait_for_selector("input[type=password]")
    page.fill("input[type=text]", name)
    page.fill("input[type=password]", password)
    sending(page, lambda: page.keyboard.press("Enter"))  # the login, then what the page's load sends
    page.wait_for_selector("#pg-editor .cm-content")
    wait_idle(page)


SENDS_ON_OPEN = {"pg-exercise", "pg-agents"}  # sections whose opening asks the server (the exercise list anew)


def open_section(page, elem_id: str) -> None:
    """Open a closed accordion (a click on an open one would close it), and wait for what its opening sends."""
    section = page.locator(f"#{elem_id}")
    if not section.locator(".label-wrap.open").count():
        def opener():
            section.locator(".label-wrap").first.click()
        if elem_id in SENDS_ON_OPEN:
            sending(page, opener)
        else:
            opener()
        section.locator(".label-wrap.open").first.wait_for()


def teacher_tab(page, name: str) -> None:
    from playwright.sync_api import expect
    tab = page.locator("#pg-teacher-tabs").get_by_role("tab", name=name)
    tab.click()
    expect(tab).to_have_attribute("aria-selected", "true")


def teacher_note(page, after: str = "") -> str:
    """The teacher's note once it has changed from `after`."""
    page.wait_for_function("(before) => { const e = document.querySelector('#pg-teacher-note .pg-status');"
                           " return e && !e.closest('.pending') && e.innerText.trim() && e.innerText !== before; }",
                           arg=after)
    return page.inner_text("#pg-teacher-note .pg-status")


def click_and_note(page, selector: str) -> str:
    status = page.locator("#pg-teacher-note .pg-status")
    before = status.inner_text() if status.count() else ""
    page.click(selector)
    return teacher_note(page, before)


def table_text(page, selector: str) -> str:
    return page.locator(selector).inner_text()


def set_textbox(page, elem_id: str, text: str) -> None:
    box = page.locator(f"#{elem_id} textarea, #{elem_id} input").first
    box.fill(text)
    box.dispatch_event("input")


def submit(page, button: str = "#pg-submit") -> str:
    """Submit (or Check: `button`) and the answer, once it is a new one."""
    before = page.inner_text("#pg-submit-out")
    page.click(button)
    page.wait_for_function("(before) => { const e = document.querySelector('#pg-submit-answer');"
                           " return e && e.innerText !== before; }", arg=before, timeout=400_000)
    return page.inner_text("#pg-submit-answer")


def the_starter(page) -> None:
    open_section(page, "pg-exercise")
    choose(page, page.locator("#pg-exercise-pick"), TITLE)
    wait_text(page, "#pg-exercise-statement", "Due ")
    sending(page, lambda: page.click("#pg-exercise-starter"))
    page.wait_for_function("() => document.querySelector('#pg-editor .cm-line').innerText.startsWith('\"\"\"Vector add')",
                           timeout=180_000)
    wait_idle(page, 180)


def type_first_line(page, text: str) -> None:
    page.click("#pg-editor .cm-content")
    page.keyboard.press("Control+Home")
    page.keyboard.press("Enter")  # an empty first line (the editor indents a new line after a colon) ...
    page.keyboard.press("ArrowUp")
    page.keyboard.type(text)  # ... then the text on it


def download(page, selector: str) -> bytes:
    """The file the teacher's download box offers now, fetched with the page's own cookies."""
    link = page.locator(f"{selector} a[href]").first
    link.wait_for()
    return page.request.get(link.get_attribute("href")).body()


def test_a_term_as_a_teacher_and_two_students(term):
    url, room, browser = term["url"], term["room"], term["browser"]
    ARTIFACTS.mkdir(exist_ok=True)

    # -- the roster: Ada came in with the class password; the import warns it ends her session, then does -------
    ada = logged_in(browser, url, "Ada", CLASS_PW)
    teacher = logged_in(browser, url, "teacher", TEACHER_PW)
    open_section(teacher, "pg-teacher")
    teacher_tab(teacher, "Roster")
    set_textbox(teacher, "pg-roster-text", "name\nAda\nGrace\n")
    warning = click_and_note(teacher, "#pg-roster-import")
    assert "2 names from the column 'name': Ada, Grace (2 new" in warning, warning
    assert "ends 1 logged-in session; Ada: they log in again" in warning, warning
    assert room.store.students() == [], "nothing imported before the teacher confirms"
    teacher.click("#pg-roster-confirm")
    wait_text(teacher, "#pg-roster-out", "Grace")
    passwords = {r["name"]: r["password"] for r in
                 csv.DictReader(io.StringIO(teacher.locator("#pg-roster-out .cm-content").inner_text()))}
    assert set(passwords) == {"Ada", "Grace"}
    ada.reload(wait_until="domcontentloaded")
    ada.wait_for_selector("input[type=password]")  # her class-password session ended: the login page
    assert "own password" in ada.inner_text("body")
    log_in(ada, url, "Ada", passwords["Ada"])
    grace = logged_in(browser, url, "Grace", passwords["Grace"])

    # -- an announcement on every student's page (text, never markup) ------------------------------------------
    teacher_tab(teacher, "Announcement")
    set_textbox(teacher, "pg-announce-text", "Lab 1 is due soon <b>not bold</b>")
    assert "Posted" in click_and_note(teacher, "#pg-announce")
    for student in (ada, grace):
        student.reload(wait_until="domcontentloaded")
        student.wait_for_selector("#pg-announcement-text")
        assert "Lab 1 is due soon <b>not bold</b>" in student.inner_text("#pg-announcement-text")
        assert student.locator("#pg-announcement-text b", has_text="not bold").count() == 0
        wait_idle(student)

    # -- a folder the teacher adds shows in the open page's picker as its section opens (no restart, no reload) -
    open_section(ada, "pg-exercise")
    ada.locator("#pg-exercise .label-wrap").first.click()  # closed again
    ada.locator("#pg-exercise .label-wrap.open").wait_for(state="detached")
    shutil.copytree(ROOT / "exercises" / "softmax", term["folder"].parent / "softmax")
    open_section(ada, "pg-exercise")  # (its opening reads the exercises anew)
    ada.locator("#pg-exercise-pick input").click()
    new_one = ada.get_by_role("option", name="Row softmax in one pass (softmax)")
    new_one.wait_for()
    ada.click("#pg-exercise-statement")  # (the list closed, the picker left)
    new_one.wait_for(state="hidden")

    # -- Ada: the starter with its own controls; a compile and a run kept for the teacher; a submission ---------
    the_starter(ada)
    assert ada.locator("#pg-kernel input").input_value() == "✎ my kernel"
    assert "Due " in ada.inner_text("#pg-exercise-statement")
    assert slot(ada, "N (required)").locator("input").input_value() == "1048576"  # the first visible shape
    for name in ("block_N", "threads"):  # the starter's own tile parameters, and no others
        assert slot(ada, name).count() == 1, name
    assert slot(ada, "num_stages").count() == 0
    type_first_line(ada, ADAS_HELPER)
    type_value(ada, slot(ada, "block_N"), "2048")  # (a value typed into the control: what Submit sends)
    sending(ada, lambda: ada.locator("#pg-compile").click())
    assert "compiled" in wait_idle(ada, 240)
    sending(ada, lambda: ada.locator("#pg-run").click())
    wait_idle(ada, 240)  # (no GPU here: the run is refused, and kept as an error)
    checked = submit(ada, "#pg-check")  # (no GPU here: the check is refused, and nothing of it is kept)
    assert "Check failed" in checked and "sent with block_N=2048" in checked, checked
    assert room.store.submissions("vector_add") == []
    answer = submit(ada)
    assert "Not accepted" in answer and "sent with block_N=2048" in answer, answer  # (refused by the grade job)

    # -- Grace: the same helper renamed and reformatted, before the deadline -----------------------------------
    the_starter(grace)
    type_first_line(grace, GRACES_HELPER)
    assert "Not accepted" in submit(grace)
    subs = {s["student"]: s for s in room.store.submissions("vector_add", with_source=True)}
    assert subs["Ada"]["params"] == {"block_N": 2048} and "ada_blocks" in subs["Ada"]["source"]

    # -- Ada: her submission back in the editor from her own list, with the tile parameter it was sent with --------
    type_value(ada, slot(ada, "block_N"), "1024")
    open_section(ada, "pg-mine")
    wait_text(ada, "#pg-mine-rows", "block_N=2048")
    assert "GRACE" not in table_text(ada, "#pg-mine-rows").upper()
    set_textbox(ada, "pg-mine-id", str(subs["Ada"]["id"]))
    sending(ada, lambda: ada.click("#pg-mine-load"))
    wait_text(ada, "#pg-status", f"Your submission #{subs['Ada']['id']}")
    assert "ada_blocks" in ada.inner_text("#pg-editor .cm-content")
    assert slot(ada, "block_N").locator("input").input_value() == "2048"

    # -- the deadline passes (and its late window): Grace is refused, until the teacher moves it for her --------
    write_exercise(term["folder"], time.time() - 2 * 3600)
    closed = submit(grace)
    assert "closed at" in closed and "no longer taken" in closed, closed
    teacher_tab(teacher, "Board and deadlines")
    choose(teacher, teacher.locator("#pg-teacher-ex"), TITLE, sends=False)
    set_textbox(teacher, "pg-extend-student", "Grace")
    set_textbox(teacher, "pg-extend-until", time.strftime("%Y-%m-%d %H:%M", time.gmtime(time.time() + 3600)))
    assert "Grace's deadline of vector_add is now" in click_and_note(teacher, "#pg-extend")
    grace.reload(wait_until="domcontentloaded")
    grace.wait_for_selector("#pg-editor .cm-content")
    open_section(grace, "pg-exercise")
    choose(grace, grace.locator("#pg-exercise-pick"), TITLE)
    wait_text(grace, "#pg-exercise-statement", "moved for you")
    after = submit(grace)
    assert "Not accepted" in after and "closed" not in after, after  # past the deadline check, to the grader
    statuses = [(s["student"], s["status"], "closed at" in s["message"]) for s in room.store.submissions()]
    assert statuses.count(("Grace", "refused", True)) == 1 and len(statuses) == 4, statuses

    # -- SEEDED: accepted submissions, as the grader on a GPU would record them (none can be graded here) --------
    seeded_ada = room.store.add_submission(
        "vector_add", "Ada", subs["Ada"]["source"], {"block_N": 2048}, accepted=True, median_ms=0.11, baseline_ms=0.2,
        message="accepted (SEEDED)", gpu="NVIDIA H100 80GB HBM3", sol_percent=81.5,
        record={"name": "NVIDIA H100 80GB HBM3", "clocks_mhz": {"sm": 1980, "memory": 2619, "sm_max": 1980},
                "temperature_c": 41, "throttle_reasons": [], "driver": "580.159.04", "tilelang": "0.1.15"})
    seeded_grace = room.store.add_submission(
        "vector_add", "Grace", subs["Grace"]["source"], {}, accepted=True, median_ms=0.09, baseline_ms=0.2,
        message="accepted (SEEDED)", gpu="NVIDIA H200", sol_percent=77.0, record={"name": "NVIDIA H200"})

    # -- the board: GPU and share of the speed of light, a name chosen by the student ---------------------------
    open_section(ada, "pg-board")
    settle(ada)  # (what the page had under way first: the click below must land on a settled section)
    set_textbox(ada, "pg-alias", "Speedy A")
    sending(ada, lambda: ada.click("#pg-alias-btn"))
    wait_text(ada, "#pg-alias-note", "Speedy A")
    ada.click("#pg-board-btn")
    wait_text(ada, "#pg-board-table", "H200")
    board = table_text(ada, "#pg-board-table")
    assert "Speedy A" in board and "81.5" in board and "NVIDIA H100 80GB HBM3" in board and "1980" in board, board
    assert board.index("Speedy A") < board.index("Grace"), "ranked by the share of the speed of light, not the time"

    # -- the teacher's board: who chose which name, and a link per entry that opens it to re-run ---------------
    open_section(teacher, "pg-board")
    open_section(teacher, "pg-exercise")
    choose(teacher, teacher.locator("#pg-exercise-pick"), TITLE)
    teacher.click("#pg-board-btn")
    wait_text(teacher, "#pg-board-table", "Speedy A (Ada)")
    link = teacher.locator(f"#pg-board-table a[href='?rerun={seeded_ada}']")
    assert link.count() >= 1, table_text(teacher, "#pg-board-table")  # (the table draws a cell twice)
    teacher.goto(url + f"?rerun={seeded_ada}", wait_until="domcontentloaded")
    teacher.wait_for_selector("#pg-editor .cm-content")
    wait_text(teacher, "#pg-teacher-note", "from the board")  # (the link opens the section)
    assert teacher.locator("#pg-teacher-id input").input_value() == str(seeded_ada)
    # (the reload left it at every exercise)
    choose(teacher, teacher.locator("#pg-teacher-ex"), TITLE, sends=False)

    # -- the teacher: the roster table, then a flagged submission (off the board, kept, its reason) -------------
    teacher_tab(teacher, "Roster")
    assert "2 on the roster" in click_and_note(teacher, "#pg-roster-list")
    roster = table_text(teacher, "#pg-roster-table")
    assert "Ada" in roster and "Grace" in roster and "Speedy A" in roster, roster
    teacher_tab(teacher, "Submissions")
    teacher.locator("#pg-teacher-id input").fill(str(seeded_grace))
    set_textbox(teacher, "pg-flag-reason", "<i>copied</i> from Ada")
    assert "is flagged" in click_and_note(teacher, "#pg-flag")
    assert "6 submissions" in click_and_note(teacher, "#pg-teacher-list")
    listed = table_text(teacher, "#pg-teacher-rows")
    assert "<i>copied</i> from Ada" in listed, listed  # the reason as text
    ada.click("#pg-board-btn")
    wait_text(ada, "#pg-board-table", "H200", present=False)
    teacher.locator("#pg-teacher-id input").fill(str(seeded_ada))
    assert "81.5% of the speed of light" in click_and_note(teacher, "#pg-teacher-open") or \
        "81.5% of the speed of light" in teacher.inner_text("#pg-teacher-record")
    assert "TileLang 0.1.15" in teacher.inner_text("#pg-teacher-record")

    # -- similarity: the two helpers, one renamed and reformatted, side by side ---------------------------------
    teacher_tab(teacher, "Similarity")
    assert "pair" in click_and_note(teacher, "#pg-similar")
    pairs = table_text(teacher, "#pg-similar-table")
    assert "Ada" in pairs and "Grace" in pairs, pairs
    teacher.locator("#pg-pair-rank input").fill("1")
    assert "alike" in click_and_note(teacher, "#pg-pair-show")
    side = teacher.inner_text("#pg-pair-view").replace("\xa0", " ")  # (difflib keeps spaces as &nbsp;)
    assert "ada_blocks" in side and "def g(n," in side, side[:500]

    # -- trajectories: each student's compiles, runs and submissions; speed over time; time to correct -----------
    teacher_tab(teacher, "Progress")
    assert "got there" in click_and_note(teacher, "#pg-progress")
    teacher.wait_for_selector("#pg-progress-plot .js-plotly-plot")
    summary = teacher.inner_text("#pg-progress-summary")
    assert "Ada" in summary and "Grace" in summary and "first correct submission" in summary, summary
    kinds = {(a["student"], a["action"], a["ok"]) for a in room.store.activity("vector_add")}
    assert {("Ada", "compile", True), ("Ada", "run", False)} <= kinds, kinds

    # -- the grades file and the code export ---------------------------------------------------------------------
    teacher_tab(teacher, "Submissions")
    assert "grades-vector_add.csv" in click_and_note(teacher, "#pg-teacher-grades")
    grades = list(csv.DictReader(io.StringIO(download(teacher, "#pg-teacher-csv").decode())))
    assert {(r["student"], float(r["score"])) for r in grades} == {("Ada", 10.0), ("Grace", 0.0)}, grades
    assert "code.zip" in click_and_note(teacher, "#pg-teacher-code")
    with zipfile.ZipFile(io.BytesIO(download(teacher, "#pg-teacher-csv"))) as z:
        index = list(csv.DictReader(io.StringIO(z.read("index.csv").decode())))
        assert len(index) == 6 and all(z.read(r["file"]).decode() for r in index)
        assert any("ada_blocks" in z.read(r["file"]).decode() for r in index if r["student"] == "Ada")
        assert any(r["flag"] == "<i>copied</i> from Ada" for r in index)

    # -- a board reset asks first, and can be undone --------------------------------------------------------------
    teacher_tab(teacher, "Board and deadlines")
    teacher.locator("#pg-teacher-csv").wait_for(state="hidden")  # the export's file stays with its tab
    assert "hides its 1 entry" in click_and_note(teacher, "#pg-board-reset")
    assert room.leaderboard("vector_add")["rows"], "nothing reset before the teacher confirms"
    assert "empty again" in click_and_note(teacher, "#pg-board-reset-confirm")
    assert room.leaderboard("vector_add")["rows"] == []
    assert "is back (1 entries)" in click_and_note(teacher, "#pg-board-reset-undo")
    teacher.screenshot(path=str(ARTIFACTS / "course_teacher.png"), full_page=True)
    ada.screenshot(path=str(ARTIFACTS / "course_student.png"), full_page=True)
    for page in (ada, grace, teacher):
        page.context.close()
