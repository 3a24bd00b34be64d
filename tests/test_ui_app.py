"""The page's server in-process: the named API endpoints through gradio_client, /health, password login.

Compiles here are real (TileLang on the CPU for sm_90a), kept small (M=N=K=256) so that each takes seconds."""
import json
import time

import httpx
import pytest
from gradio_client import Client

from conftest import has_gpu
from ports import free_port

pytestmark = [pytest.mark.timeout(240),
              pytest.mark.filterwarnings("ignore::pandas.errors.Pandas4Warning")]  # from Gradio's queue
SMALL = {"M": 256, "N": 256, "K": 256}


@pytest.fixture(scope="module")
def server():
    from playground.ui import serve
    demo, app, url = serve("127.0.0.1", free_port(), prevent_thread_lock=True, quiet=True)
    yield url
    demo.close()


@pytest.fixture(scope="module")
def client(server):
    return Client(server, verbose=False)


def gemm_source() -> str:
    from playground.ui import gateway as engine
    return engine.original_source("gemm")


def test_the_api_has_named_compile_run_tune_and_sweep(client):
    endpoints = client.view_api(print_info=False, return_format="dict")["named_endpoints"]
    for name in ("/compile", "/run", "/tune", "/sweep"):
        params = [p["parameter_name"] for p in endpoints[name]["parameters"]]
        assert params == ["kernel", "source", "params"], (name, params)


def test_compile_small_gemm_returns_cuda_with_wgmma(client):
    result = client.predict("gemm", "", SMALL, api_name="/compile")
    assert result["ok"], result.get("error")
    assert "wgmma" in result["cuda"]
    assert result["resources"]["registers"] > 0 and result["resources"]["shared_bytes"] > 0
    assert len(result["line_map"]) == len(result["cuda"].splitlines())
    assert any(isinstance(m, int) for m in result["line_map"])
    assert result["config"]["problem"] == SMALL


def test_compile_of_edited_source_with_params_left_out(client):
    source = gemm_source().replace('accum_dtype = "float32"', 'accum_dtype = "float32"  # edited', 1)
    result = client.predict(kernel="vector_add", api_name="/compile")  # source and params left out
    assert result["ok"], result.get("error")
    result = client.predict("vector_add", "", {"arch": "sm_80"}, api_name="/compile")  # "arch" picks the target
    assert result["ok"] and result["arch"] == "sm_80", result.get("error")
    result = client.predict("gemm", source, {**SMALL, "block_N": 128}, api_name="/compile")
    assert result["ok"], result.get("error")
    assert result["config"]["tile"]["block_N"] == 128


def test_a_compile_from_the_pages_default_controls_gets_the_engines_tile_for_the_size():
    # The page sends no tile parameter left at "auto": for softmax at a size no preset has, the engine picks the
    # tile itself (its rule, or the nearest tuned config), says so, and the page shows what "auto" became.
    from playground.ui import controls as ctl, gateway, views
    c = ctl.controls_for(gateway.describe("softmax"))
    values = {**c.defaults(), "M": "32768", "N": "1024"}
    dtype = values.pop("dtype")
    params = ctl.engine_params(values, dtype)
    assert params == {"M": "32768", "N": "1024", "dtype": dtype}
    result = gateway.call("compile", "softmax", "", params, arch="sm_90a")
    assert result["ok"], result.get("error")
    config = result["config"]
    assert config["picked_by"] in ("rule", "table") and config["set_by_user"] == [], config
    picked = ctl.auto_picks(c, values, config)
    assert set(picked) == {x.name for x in c.tile}
    assert picked["cluster"] == "1"  # 1024-long rows fit one CTA: no cluster
    assert f"tile config: auto → {views.tile_label(config['tile'])}" in views.resources_html(result)


def test_broken_source_returns_the_error_with_stage_and_line(client):
    lines = gemm_source().splitlines()
    index = next(i for i, line in enumerate(lines) if "tiles(A, B, C, block, None)" in line)  # the shipped schedule
    lines[index] = lines[index].replace("block, None", "blockx, None")
    result = client.predict("gemm", "\n".join(lines) + "\n", SMALL, api_name="/compile")
    assert not result["ok"]
    err = result["error"]
    assert err["stage"] in ("tilelang", "python"), err
    assert err["line"] == index + 1, err
    assert "blockx" in err["message"]


def test_a_syntax_error_points_at_its_line(client):
    source = gemm_source().replace("    accum_dtype = ", "    accum_dtype = = ", 1)
    line = next(i + 1 for i, text in enumerate(source.splitlines()) if "= =" in text)
    result = client.predict("gemm", source, None, api_name="/compile")
    assert result["error"]["stage"] == "python" and result["error"]["line"] == line


def test_bad_parameter_is_a_parameters_error(client):
    result = client.predict("gemm", "", {"block_M": "lots"}, api_name="/compile")
    assert result["error"]["stage"] == "parameters"


@pytest.mark.skipif(has_gpu(), reason="this machine has a GPU: run would succeed")
def test_run_and_tune_without_gpu_return_the_device_error(client):
    for name in ("/run", "/tune", "/sweep"):
        result = client.predict("gemm", "", SMALL, api_name=name)
        assert not result["ok"]
        assert result["error"]["stage"] == "device"
        assert "GPU" in result["error"]["message"]


def test_health_answers_json(server):
    r = httpx.get(server.rstrip("/") + "/health", timeout=30)
    assert r.status_code == 200
    body = r.json()
    assert body["ok"] is True and "gpu" in body and "queue" in body and "sandbox" in body


def test_password_login_guards_the_page_but_not_health():
    from playground.ui import serve
    demo, app, url = serve("127.0.0.1", free_port(), password="class-pw", prevent_thread_lock=True, quiet=True)
    try:
        base = url.rstrip("/")
        assert httpx.get(base + "/health", timeout=30).status_code == 200
        assert httpx.get(base + "/config", timeout=30).status_code in (401, 403)
        with pytest.raises(Exception):
            Client(url, auth=("student", "wrong"), verbose=False)
        client = Client(url, auth=("any-name", "class-pw"), verbose=False)
        assert "/compile" in client.view_api(print_info=False, return_format="dict")["named_endpoints"]
    finally:
        demo.close()


@pytest.mark.parametrize("how", ["SIGTERM", "SIGINT inherited as ignored",
                                 "SIGTERM while starting", "SIGINT while starting"])
def test_app_shuts_down_cleanly_when_stopped(how, tmp_path):
    # `docker stop` sends SIGTERM; a server started from a script's background job inherits SIGINT ignored. Either
    # way the app must close as on Ctrl-C, so the job layer stops its workers and removes its folders; and so it must
    # when the signal lands while the page is still being built, before Gradio's own wait has taken over.
    import os
    import signal
    import sys
    from conftest import ROOT
    sys.path.insert(0, str(ROOT / "tests" / "load"))
    from load_test import start_app, wait_health
    from playground.jobs.sandbox import server_jobs_dir
    port = free_port()
    log = tmp_path / "app.log"
    app = start_app(port, log, ignore_sigint="SIGINT" in how)
    try:
        if "starting" in how:
            deadline = time.monotonic() + 60
            while "TileLang Playground on" not in log.read_text() and time.monotonic() < deadline:
                time.sleep(0.05)
        else:
            wait_health(port, timeout=120)
        app.send_signal(signal.SIGTERM if how.startswith("SIGTERM") else signal.SIGINT)
        assert app.wait(timeout=45) == 0, log.read_text()[-2000:]
        jobs_dir = server_jobs_dir(app.pid)
        assert not jobs_dir.exists(), sorted(str(p) for p in jobs_dir.rglob("*"))[:10]
    finally:
        if app.poll() is None:
            os.killpg(app.pid, signal.SIGKILL)
            app.wait()


def test_an_exercise_starter_without_a_reference_is_said_to_be_verified_by_check_where_the_class_has_exercises():
    # The starter in the editor said "a run is timed, not verified", as if nothing would ever verify it.
    from playground.ui import own_kernel
    alone = own_kernel.note_html({"ok": True, "verified": False}, {})
    assert "not verified" in alone and "Check" not in alone
    in_class = own_kernel.note_html({"ok": True, "verified": False}, {}, exercises=True)
    assert "Check and Submit verify it against the exercise's reference" in in_class


def test_a_keystroke_in_the_editor_waits_for_no_compile_and_holds_no_compiles_slot():
    # Every handler of the editor's input ran in the engine's concurrency group once: with the class's compiles
    # filling its slots, a student's typing queued behind them, and each keystroke took a compile's slot while it ran.
    from playground.ui.layout import Page
    page = Page()
    demo = page.build()
    on_typing = [f for f in demo.fns.values() if f.fn is not None
                 and any(tuple(t) == (page.editor._id, "input") for t in f.targets)]
    assert len(on_typing) >= 2, "the draft's handler and the own kernel's re-reading of a paste"
    engine = [f.name for f in on_typing if f.concurrency_id == "engine"]
    assert not engine, f"handlers of each keystroke in the engine's group: {engine}"
    compile_fns = [f for f in demo.fns.values() if any(t[0] == page.compile_btn._id for t in f.targets)]
    assert any(f.concurrency_id == "engine" for f in compile_fns), "the group this test tells apart is still there"


def test_a_kernel_switch_is_one_event_that_reads_none_of_the_previous_kernels_controls():
    # `input` on a dropdown fired twice per choice, and a switch that read the previous kernel's controls had them
    # checked against the new kernel's choices ("Value: True is not in the list of choices"); the browser test walks
    # the kernels for real, this pins the wiring.
    from playground.ui.layout import Page
    page = Page()
    demo = page.build()
    on_kernel = [f for f in demo.fns.values() if any(target[0] == page.kernel._id for target in f.targets)]
    # besides the switch, Gradio's own no-op that cancels the tab's running jobs (a late compile of the kernel before
    # must not land on the new one)
    cancelling = [f for f in on_kernel if f.fn is None]
    assert len(cancelling) == 1 and len(getattr(cancelling[0], "cancels", None) or []) >= 2
    switches = [f for f in on_kernel if f.fn is not None]
    assert [[event for _, event in f.targets] for f in switches] == [["select"]]
    read = {c._id for c in switches[0].inputs}
    assert {page.kernel._id, page.arch._id} <= read
    assert not read & {c._id for c in (*page.p_slots, *page.t_slots, page.dtype, page.preset)}  # none of the old
    assert all(s.allow_custom_value for s in page.p_slots + page.t_slots)  # no stale value can fail a check
    outputs = {c._id for c in switches[0].outputs}
    assert {s._id for s in page.p_slots + page.t_slots} <= outputs and page.params_note._id in outputs


@pytest.mark.parametrize("header, user, shown", [
    (None, "Ada", False),           # a student, logged in through the page's own login
    (None, "teacher", True),        # the teacher, logged in
    (None, None, True),             # no login: whoever is the teacher types the password there
    ("X-Forwarded-User", "Ada", True),  # behind a proxy a name never makes the teacher: the password does
])
def test_the_teacher_section_shows_only_where_the_teacher_may_be_looking(tmp_path, header, user, shown):
    import gradio as gr
    from starlette.requests import Request
    from playground.settings import Settings
    from playground.ui import classroom
    from playground.ui.layout import Page
    classroom.install(classroom.Classroom(Settings(data_dir=tmp_path, teacher_password="teacher-pw",
                                                   user_header=header)))
    try:
        page = Page()
        demo = page.build()
        assert page.course.teacher.visible is False, "hidden until the page knows who looks"
        on_load = [f for f in demo.fns.values() if any(event == "load" for _, event in f.targets)
                   and page.course.teacher in f.outputs]
        assert len(on_load) == 1
        scope = {"type": "http", "client": ("10.0.0.1", 40000), "headers": [], "method": "GET", "path": "/",
                 "query_string": b""}
        update = on_load[0].fn(gr.Request(request=Request(scope), username=user))
        assert update.get("visible") is shown
    finally:
        classroom.install(None)


def test_the_board_button_with_no_exercise_picked_says_to_pick_one():
    from playground.ui.layout import Page
    page = Page()
    demo = page.build()
    on_board = [f for f in demo.fns.values() if any(target[0] == page.course.board_btn._id for target in f.targets)]
    assert len(on_board) == 1 and page.course.board_note in on_board[0].outputs
    frame, note = on_board[0].fn(None)
    assert frame.empty and "Pick an exercise" in note


def test_submit_sends_the_tile_parameters_the_page_controls_hold():
    # No box of its own: a student who tuned with the controls submits what they tuned (the answer names it).
    from playground.ui import controls as ctl, gateway
    from playground.ui.layout import Page
    page = Page()
    demo = page.build()
    on_submit = [f for f in demo.fns.values() if any(target[0] == page.course.submit_btn._id for target in f.targets)]
    assert len(on_submit) == 1 and set(page.t_slots) <= set(on_submit[0].inputs)
    tile = [c.name for c in ctl.controls_for(gateway.describe("vector_add")).tile]
    data = {c: None for c in on_submit[0].inputs}
    data.update({page.kernel: "vector_add", page.editor: "x = 1", page.course.exercise: "vector_add",
                 page.t_slots[tile.index("block_N")]: "2048"})
    answer = on_submit[0].fn(data, None)
    assert set(answer) <= set(on_submit[0].outputs)
    said = answer[page.course.submit_answer]
    assert "sent with block_N=2048" in said and "who you are" in said


def test_edits_of_a_shipped_kernel_come_back_after_a_switch_and_reset_gives_the_original():
    from playground.ui import gateway
    from playground.ui.layout import Page
    page = Page()
    page.build()
    original = gateway.original_source("gemm")
    mine = "# my tiling idea\n" + original

    def switch(to, editor, shown, edited):
        return page.on_kernel({page.kernel: to, page.arch: None, page.editor: editor, page.own_kernel.own: None,
                               page.own_kernel.own_draft: None, page.shown: shown, page.edited: edited}, None)
    away = switch("softmax", mine, "gemm", {})
    assert away[page.editor] == gateway.original_source("softmax") and away[page.shown] == "softmax"
    assert away[page.edited] == {"gemm": mine}, "the gemm edits are kept when softmax takes the editor"
    back = switch("gemm", away[page.editor], "softmax", away[page.edited])
    assert back[page.editor] == mine and "edits of gemm are back" in back[page.status]
    assert back[page.edited] == {"gemm": mine}
    data = {c: None for c in page.setup} | {page.kernel: "gemm", page.editor: mine, page.shown: "gemm",
                                            page.edited: back[page.edited]}
    reset = page.on_reset(data, None)
    assert reset[page.editor] == original and reset[page.edited] == {}, "Reset asks the edits away"
    unchanged = switch("softmax", original, "gemm", {"gemm": mine})
    assert unchanged[page.edited] == {}, "a kernel left at its original text has no edits to keep"


def test_a_draft_holding_only_the_defaults_is_not_announced_as_restored():
    from playground.ui import gateway, views
    from playground.ui import controls as ctl
    from playground.ui.layout import Page
    page = Page()
    page.build()
    c = ctl.controls_for(gateway.describe("gemm"))
    plain = {"kernel": "gemm", "source": gateway.original_source("gemm"), "values": c.defaults(),
             "dtype": c.dtype, "arch": "auto", "tile_auto": True}
    data = {comp: None for comp in page.setup} | {page.draft: plain}
    assert views.READY in page.on_load(data, None)[page.status]
    changed = {**plain, "values": {**c.defaults(), "M": "2048"}}
    assert "Restored your draft of gemm" in page.on_load({**data, page.draft: changed}, None)[page.status]


def test_a_boards_rerun_link_is_the_class_sections_not_an_unknown_kernel_value():
    import gradio as gr
    from starlette.requests import Request
    from playground.ui import views
    from playground.ui.layout import Page
    page = Page()
    page.build()
    data = {comp: None for comp in page.setup} | {page.draft: None}

    def status(query: bytes) -> str:
        scope = {"type": "http", "client": ("10.0.0.1", 40000), "headers": [], "method": "GET", "path": "/",
                 "query_string": query}
        return page.on_load(data, gr.Request(request=Request(scope)))[page.status]
    # the teacher's re-run link: the board's, said nothing of here
    assert views.READY in status(b"rerun=12") and "unknown" not in status(b"rerun=12")
    assert "ignored unknown parameters: bogus" in status(b"rerun=12&bogus=1")


def test_new_kernel_over_ones_own_edited_kernel_offers_the_text_it_replaces():
    from playground.ui import own_kernel
    from playground.ui.layout import Page
    page = Page()
    page.build()
    section = page.own_kernel
    data = {c: None for c in page.setup} | {page.kernel: own_kernel.OWN, page.editor: "# my own work\n",
                                            section.new_from: own_kernel.TEMPLATE, section.own_draft: None,
                                            page.shown: own_kernel.OWN, page.edited: {}}
    assert section.replaced(data, None)["visible"]
    assert section.replaced({**data, page.editor: own_kernel.template_source()}, None)["visible"] is False
    assert section.replaced({**data, page.kernel: "gemm"}, None)["visible"] is False


def test_describe_and_compile_name_the_users_file_never_the_servers_folders(client):
    from conftest import ROOT
    from playground.ui.own_kernel import template_source

    def server_paths(answer) -> list[str]:
        text = json.dumps(answer)
        return [p for p in (f"{ROOT}/", "/job/", "/src/", "site-packages") if p in text]
    own = template_source() + "\nraise RuntimeError('I am ' + __file__)\n"
    described = client.predict("", own, None, api_name="/describe")
    assert described["ok"] and described["file"] == "your kernel"
    assert any("I am your kernel" in w["message"] for w in described["warnings"]), described["warnings"]
    assert server_paths(described) == []
    shipped = client.predict("gemm", "", None, api_name="/describe")
    assert shipped["ok"] and shipped["file"] == "kernels/gemm.py" and server_paths(shipped) == []
    assert gemm_source().count("import tilelang.language as T\n") == 1
    broken = gemm_source().replace("import tilelang.language as T\n",
                                   "import tilelang.language as T\nraise RuntimeError('I am ' + __file__)\n")
    compiled = client.predict("gemm", broken, SMALL, api_name="/compile")
    assert not compiled["ok"] and "I am gemm.py" in compiled["error"]["message"], compiled["error"]
    assert 'File "gemm.py", line' in compiled["error"]["log"] and server_paths(compiled) == []


def test_the_compile_button_shows_the_cuda_when_lowering_ends_and_the_rest_when_it_comes():
    # CUDA first: the handler yields the generated CUDA (with its line map) the moment the job's lowering ends, with
    # the PTX and SASS said to be coming; then the whole answer. A code edit that no cache can answer (a new name for
    # a buffer: another TIR and another CUDA): a real job that lowers and runs nvcc.
    import uuid
    from playground.ui import gateway
    from playground.ui.layout import Page
    page = Page()
    demo = page.build()
    on_compile = [f for f in demo.fns.values() if any(target[0] == page.compile_btn._id for target in f.targets)]
    assert len(on_compile) == 1
    data = {c: None for c in on_compile[0].inputs}
    source = gateway.original_source("vector_add").replace("A_local", f"A_{uuid.uuid4().hex[:12]}")
    data.update({page.kernel: "vector_add", page.editor: source, page.dtype: "float16"})
    steps = list(on_compile[0].fn(data, None))
    assert len(steps) >= 2, "one answer only: the CUDA did not come first"
    first, last = steps[0], steps[-1]
    assert "nvcc is compiling this CUDA" in str(first[page.ptx]) and "__global__" in str(first[page.cuda])
    assert page.status not in first or "compiled" not in str(first.get(page.status))
    assert "compiled vector_add" in str(last[page.status]) and ".version" in str(last[page.ptx])


def test_the_page_sends_no_telemetry_to_gradio():
    """Gradio reports usage to its servers unless the Blocks say not to: the playground phones nowhere."""
    from playground.ui.layout import build_demo
    assert build_demo().analytics_enabled is False


def test_a_share_link_of_a_kernel_of_ones_own_opens_it_as_ones_own(server):
    import gradio as gr
    from starlette.requests import Request
    from playground.ui import classroom
    from playground.ui.layout import Page
    from playground.ui.own_kernel import OWN, template_source
    source = template_source().replace('"""', '"""Shared from a kernel of my own.\n', 1)
    made = classroom.classroom().share(OWN, source, {"M": 256, "N": 256, "K": 256, "dtype": "float16",
                                                     "arch": "sm_90a"})
    assert made["ok"], made
    page = Page()
    page.build()
    data = {comp: None for comp in page.setup} | {page.draft: None}
    scope = {"type": "http", "client": ("10.0.0.1", 40000), "headers": [], "method": "GET", "path": "/",
             "query_string": f"s={made['id']}".encode()}
    out = page.on_load(data, gr.Request(request=Request(scope)))
    assert "Opened the shared kernel" in out[page.status] and "as your own kernel" in out[page.status], \
        out[page.status]
    assert out[page.kernel] == OWN and out[page.editor] == source
    assert out[page.draft]["kernel"] == OWN and out[page.draft]["source"] == source  # the browser keeps it so
    assert out[page.draft]["values"]["M"] == "256"
    assert out[page.arch] == "sm_90a" and out[page.draft]["arch"] == "sm_90a", "the link's target too"


def test_no_event_of_a_keystroke_writes_the_status_line():
    """Gradio marks each output of an event pending while it runs; a keystroke's events, fired again and again while
    typing, left the status line's tracker pending after the compile that followed had answered (a spinner that
    never ends). The status line belongs to the engine's actions and the kernel switches."""
    from playground.ui.layout import Page
    page = Page()
    demo = page.build()
    typed = [fn for fn in demo.fns.values() if (page.editor._id, "input") in [tuple(t) for t in fn.targets]]
    assert len(typed) >= 2, "the edit's handlers: the draft and one's own kernel's paste"
    assert all(page.status not in fn.outputs for fn in typed), [fn.name for fn in typed if page.status in fn.outputs]


def test_a_file_pasted_over_ones_own_kernel_gets_its_controls_without_a_compile(server):
    from test_user_kernels import ELEMENTWISE
    from playground.ui import own_kernel
    from playground.ui.layout import Page
    template = own_kernel.template_source()
    assert own_kernel.mostly_new(template, ELEMENTWISE) and not own_kernel.mostly_new(template, template + "# x\n")
    page = Page()
    page.build()
    section = page.own_kernel
    data = {c: None for c in page.setup} | {page.kernel: own_kernel.OWN, page.editor: template}
    section.refresh(data, "paster", fresh=True)  # the template's controls, as New kernel left them
    assert (data[section.own] or {}).get("source") == template
    typed = section.on_replaced_text({**data, page.editor: template.replace("def ", "def  ", 1)}, None)
    assert typed == {}, "an edit of a few lines waits for the next compile"
    pasted = section.on_replaced_text({**data, page.editor: ELEMENTWISE}, None)
    assert "elementwise_add" in pasted[page.params_note] and page.status not in pasted, pasted.get(page.params_note)
    labels = [u.get("label") for slot in page.p_slots + page.t_slots if isinstance(u := pasted.get(slot), dict)
              and u.get("visible")]
    assert any(label and label.startswith("block_M") for label in labels), labels
