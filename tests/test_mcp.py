"""Agents at the bench: the playground as an MCP server (playground/ui/mcp_tools.py), the tokens an MCP client presents
(playground/course/agents.py, Classroom.agent_of) and the guard in front of Gradio's MCP routes (server.agents_only).

The servers here are started as serve() starts the page's (Gradio's server launched with mcp_server=True, then
server.protect), and an MCP client talks to them with the `mcp` SDK over Gradio's streamable HTTP transport at
/gradio_api/mcp/, as an agent would. Tokens are made as a student makes them: on the page's API, logged in."""
from __future__ import annotations

import asyncio
import contextlib
import json
import os
import sqlite3
import subprocess
import sys
import tempfile
from pathlib import Path
from types import SimpleNamespace

import gradio as gr
import httpx
import pytest
from gradio_client import Client
from starlette.requests import Request

from conftest import ROOT, has_gpu
from playground.settings import Settings
from playground.ui import api, classroom as cls, gateway, mcp_tools, server
from ports import free_port

pytestmark = [pytest.mark.timeout(900),
              pytest.mark.filterwarnings("ignore::pandas.errors.Pandas4Warning"),  # from Gradio's queue
              pytest.mark.filterwarnings("ignore::DeprecationWarning")]
TEACHER_PW = "teacher-secret"
CLASS_PW = "class-secret"
SMALL = {"M": 256, "N": 256, "K": 256}
TOOLS = ["list_kernels", "list_exercises", "describe", "compile", "run", "tune", "profile", "memcheck", "lowering",
         "share", "check", "submit", "leaderboard"]


def room_for(tmp_path, **kwargs) -> cls.Classroom:
    # The environment's settings underneath (PLAYGROUND_SANDBOX=none on a GPU host without bubblewrap), as a server
    # would read them
    settings = Settings.from_env().replace(data_dir=tmp_path / "data", teacher_password=TEACHER_PW, password=CLASS_PW)
    return cls.Classroom(settings, **kwargs)


def request_of(headers: dict | None = None, address: str = "10.0.0.7") -> Request:
    """A request as Gradio hands an MCP tool call to the tool: the MCP request itself."""
    raw = [(k.lower().encode(), v.encode()) for k, v in (headers or {}).items()]
    return Request({"type": "http", "client": (address, 40000), "headers": raw, "method": "POST", "path": "/",
                    "query_string": b""})


# -- tokens, without a server ------------------------------------------------------------------------------------------
def test_a_token_is_shown_once_stored_hashed_and_refused_once_revoked(tmp_path):
    room = room_for(tmp_path)
    made = room.make_token("Ada", "my agent")
    token = made["token"]
    assert made["ok"] and token.startswith("pgt_") and len(token) > 50
    assert "not shown again" in made["message"]
    assert room.agent_of(token) == {"id": made["id"], "name": "my agent", "student": "Ada"}
    listed = room.tokens_of("Ada")["tokens"]
    assert [t["id"] for t in listed] == [made["id"]] and token not in json.dumps(listed)
    assert listed[0]["hint"] == token[:10] + "…"  # enough to tell tokens apart, nothing to log in with
    verifier = token.split("_", 2)[2]
    room.store.close()
    dump = "\n".join(sqlite3.connect(room.store.db.path).iterdump())
    assert token not in dump and verifier not in dump, "the token (or its secret half) is kept as it is"
    assert room.revoke_token("Grace", made["id"])["error"]["stage"] == "parameters", "one user's only"
    assert room.revoke_token("Ada", made["id"])["ok"]
    assert room.agent_of(token) is None
    assert room.tokens_of("Ada")["tokens"] == []


def test_forged_malformed_and_removed_students_tokens_are_refused(tmp_path):
    room = room_for(tmp_path)
    room.import_roster("teacher", "", "Ada\nGrace\n")
    token = room.make_token("Ada", "agent")["token"]
    prefix, selector, verifier = token.split("_", 2)
    other = "B" if verifier[0] != "B" else "C"
    forged = [f"{prefix}_{selector}_{other}{verifier[1:]}",      # the secret half guessed wrong by one character
              f"{prefix}_{'0' * 12}_{verifier}",                 # another token's selector
              f"{prefix}_{selector}_{verifier[:-1]}", selector + verifier, "", None, 42, "x" * 10 ** 6,
              token + "\n" + token]
    assert all(room.agent_of(f) is None for f in forged)
    assert room.agent_of(token)["student"] == "Ada"
    assert room.agent_of(f"  {token} ") is not None, "white space around a pasted token is no forgery"
    room.remove_student("teacher", "", "Ada")
    assert room.agent_of(token) is None, "a removed student's token stops working"
    room.import_roster("teacher", "", "Ada\n")
    assert room.agent_of(token) is not None, "and works again once the student is back"
    teachers = room.make_token("teacher", "the class's agent")
    assert room.agent_of(teachers["token"])["student"] == "teacher"


def test_tokens_are_limited_per_user_named_in_plain_text_and_needed_only_where_the_page_asks_a_login(tmp_path):
    room = room_for(tmp_path)
    made = [room.make_token("Ada", f"agent {i}") for i in range(room.TOKENS)]
    assert all(m["ok"] for m in made)
    refused = room.make_token("Ada", "one more")
    assert refused["error"]["stage"] == "busy" and "revoke one" in refused["error"]["message"]
    assert room.make_token("Grace", "hers")["ok"], "each user their own"
    room.revoke_token("Ada", made[0]["id"])
    assert room.make_token("Ada", "one more")["ok"]
    for bad in ("", "   ", "x" * 41, None, ["a"]):
        assert room.make_token("Ada", bad)["error"]["stage"] == "parameters", bad
    assert room.make_token(None, "anon")["error"]["stage"] == "permission"
    hostile = room.make_token("Grace", '<img src=x onerror="alert(1)">')
    page = cls.tokens_html(room.tokens_of("Grace"))
    assert hostile["ok"] and "<img" not in page and "&lt;img src=x" in page
    personal = cls.Classroom(Settings(data_dir=tmp_path / "personal"))
    assert not personal.agents_need_token()
    assert "needs no token" in personal.make_token("me", "agent")["error"]["message"]


def test_an_agent_acts_as_its_user_with_that_users_place_in_the_queue(tmp_path):
    room = cls.install(room_for(tmp_path))
    try:
        token = room.make_token("Ada", "agent")["token"]
        who, refused = mcp_tools.caller(request_of({"Authorization": f"Bearer {token}"}))
        assert refused is None and who["student"] == "Ada" and who["agent"]["name"] == "agent"
        own = gr.Request(request=request_of(), username="Ada")  # Ada on the page, from the same address
        agent, person = gateway.student_of(who["request"]), gateway.student_of(own)
        assert (agent, agent.address) == (person, person.address) == ("user:Ada", "10.0.0.7"), \
            "one key: one fair share, one rate limit, one quota"
        for headers in ({}, {"Authorization": "Bearer nonsense"}, {"Authorization": f"Basic {token}"}):
            who, refused = mcp_tools.caller(request_of(headers))
            assert who is None and refused["error"]["stage"] == "permission", headers
        answer = json.loads(mcp_tools.compile("gemm", "", SMALL, request=request_of()))
        assert answer["error"]["stage"] == "permission" and "token" in answer["error"]["message"]
    finally:
        cls.install(None)


def test_long_texts_are_cut_unless_asked_for_and_a_note_says_how_to_get_them():
    answer = {"ok": True, "cuda": "#include <x>\n" * 50 + "__global__ void k() {\n" + "  x;\n" * 100 + "}\n",
              "sass": "\n".join(f"/*{i:04x}*/ NOP ;" for i in range(500)), "ptx": "short\n", "line_map": [1, 2],
              "passes": [{"name": "p", "ir": "ir\n" * 90}], "report_b64": "QUJD", "error": None}
    include, lines, bad = mcp_tools.options(None, 10)
    cut = mcp_tools.trimmed(answer, include, lines)
    assert bad is None and cut["cuda"].splitlines()[0] == "__global__ void k() {" and len(cut["cuda"].splitlines()) == 10
    assert len(cut["sass"].splitlines()) == 10 and cut["ptx"] == "short\n" and "line_map" not in cut
    assert len(cut["passes"][0]["ir"].splitlines()) == 10 and cut["report_b64"] is None
    assert 'include=["sass"]' in cut["trimmed"]["sass"] and "from __global__" in cut["trimmed"]["cuda"]
    full = mcp_tools.trimmed(answer, *mcp_tools.options(["sass", "line_map", "report"], 10)[:2])
    assert full["sass"] == answer["sass"] and full["line_map"] == [1, 2] and full["report_b64"] == "QUJD"
    assert "sass" not in full["trimmed"]
    for include, lines in ((["everything"], 10), ("sass;rm", 10), (None, -1), (None, True), ([1], 10)):
        assert mcp_tools.options(include, lines)[2]["error"]["stage"] == "parameters"


# -- over MCP --------------------------------------------------------------------------------------------------------
async def _session(url: str, token: str | None, work):
    from mcp import ClientSession
    from mcp.client.streamable_http import streamable_http_client
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    async with httpx.AsyncClient(headers=headers, timeout=httpx.Timeout(60, read=900)) as http:
        async with streamable_http_client(url + "/gradio_api/mcp/", http_client=http) as (read, write, _):
            async with ClientSession(read, write) as session:
                await session.initialize()
                return await work(session)


def with_mcp(url: str, token: str | None, work):
    """Run `work(session)` in an MCP client session with the server at `url` (the token sent as a Bearer)."""
    return asyncio.run(_session(url, token, work))


def tool(name: str, **arguments):
    """A call of one tool whose answer is the engine's JSON."""
    async def work(session):
        result = await session.call_tool(name, arguments)
        assert not result.isError, result
        return json.loads(result.content[0].text)
    return work


def refused_over_mcp(url: str, token: str | None) -> bool:
    async def work(session):
        await session.list_tools()
    try:
        with_mcp(url, token, work)
    except BaseException as exc:  # (the SDK raises the 401 inside an exception group)
        text = repr(exc) + "".join(repr(e) for e in getattr(exc, "exceptions", ()))
        return "401" in text or "Unauthorized" in text or "HTTPStatusError" in text
    return False


@contextlib.contextmanager
def started(room: cls.Classroom | None = None):
    """The page's named endpoints and the MCP tools, launched and protected as serve() does it (mcp_server=True,
    then server.protect); without a room, a personal server (no login)."""
    room = cls.install(room or cls.Classroom(Settings(data_dir=Path(tempfile.mkdtemp()))))
    with gr.Blocks() as demo:
        api.register(4, "engine")
        cls.register(4, "engine")
    mcp_tools.add(demo)
    demo.queue()
    auth, dependency = room.gradio_auth()
    app, url, _ = demo.launch(server_name="127.0.0.1", server_port=free_port(), auth=auth,
                              auth_dependency=dependency, auth_message=room.login_message(),
                              prevent_thread_lock=True, quiet=True, mcp_server=True)
    try:
        server.protect(demo, app, room)
        gateway.start_jobs(room.settings)
        yield SimpleNamespace(url=url.rstrip("/"), app=app, room=room, demo=demo)
    finally:
        demo.close()
        cls.install(None)


def test_serve_launches_the_mcp_server_with_the_tools_behind_the_guard(tmp_path):
    demo, app, url = server.serve("127.0.0.1", free_port(), password=CLASS_PW, prevent_thread_lock=True, quiet=True,
                                  settings=Settings(data_dir=tmp_path / "data", password=CLASS_PW))
    try:
        base = url.rstrip("/")
        assert demo.mcp_server_obj is not None and list(demo.mcp_server_obj.tool_to_endpoint) == TOOLS
        refused = httpx.post(base + "/gradio_api/mcp/", json={}, timeout=60)
        assert refused.status_code == 401 and refused.headers["www-authenticate"].startswith("Bearer")
        assert httpx.get(base + "/gradio_api/mcp/sse", timeout=60).status_code == 401
    finally:
        demo.close()
        cls.install(None)


def test_an_mcp_client_lists_the_tools_and_compiles_the_shipped_gemm_to_cuda():
    with started() as srv:  # a personal server: no login, so no token
        async def work(session):
            tools = (await session.list_tools()).tools
            compiled = json.loads((await session.call_tool("compile", {"kernel": "gemm", "params": SMALL}))
                                  .content[0].text)
            full = json.loads((await session.call_tool("compile", {"kernel": "gemm", "params": SMALL,
                                                                   "include": ["cuda"]})).content[0].text)
            kernels = json.loads((await session.call_tool("list_kernels", {})).content[0].text)
            return tools, compiled, full, kernels
        tools, compiled, full, kernels = with_mcp(srv.url, None, work)
    assert [t.name for t in tools] == TOOLS
    by_name = {t.name: t for t in tools}
    assert "CUDA" in by_name["compile"].description and by_name["compile"].inputSchema["required"] == ["kernel"]
    assert by_name["compile"].inputSchema["properties"]["include"]["description"]
    assert compiled["ok"], compiled.get("error")
    assert compiled["cuda"].lstrip().startswith(("extern", "__global__")) and "__global__" in compiled["cuda"]
    assert len(compiled["cuda"].splitlines()) == mcp_tools.LINES and "sass" in compiled["trimmed"]
    assert len(compiled["sass"].splitlines()) <= mcp_tools.LINES and "line_map" not in compiled
    assert "cuda" not in full["trimmed"] and len(full["cuda"].splitlines()) > mcp_tools.LINES
    assert "#include" in full["cuda"] and full["cuda"].count("\n") > compiled["cuda"].count("\n")
    assert {k["name"] for k in kernels["kernels"]} >= {"gemm", "vector_add", "softmax"}


@pytest.fixture(scope="module")
def class_server(tmp_path_factory):
    """A class's server (class and teacher passwords) whose room sends submissions on to their jobs even without a
    GPU (where the grade job then refuses them)."""
    room = room_for(tmp_path_factory.mktemp("mcp-class"), has_gpu=lambda: True)
    with started(room) as srv:
        yield srv


def page_login(url: str, name: str, password: str = CLASS_PW) -> Client:
    return Client(url, auth=(name, password), verbose=False)


def test_a_class_server_refuses_mcp_without_a_token_or_with_a_revoked_one(class_server):
    url = class_server.url
    no_token = httpx.post(url + "/gradio_api/mcp/", json={"jsonrpc": "2.0", "id": 1, "method": "tools/list"},
                          timeout=60)
    assert no_token.status_code == 401 and "make one on the page" in no_token.json()["detail"]
    assert no_token.headers["www-authenticate"] == 'Bearer realm="TileLang Playground"'
    assert refused_over_mcp(url, None)
    forged = httpx.post(url + "/gradio_api/mcp/", json={}, timeout=60,
                        headers={"Authorization": "Bearer pgt_0123456789ab_" + "A" * 43})
    assert forged.status_code == 401 and 'error="invalid_token"' in forged.headers["www-authenticate"]
    # A page's login is no way in: Gradio does not carry it to the tools
    browser = httpx.Client(timeout=60)
    assert browser.post(url + "/login", data={"username": "Ada", "password": CLASS_PW}).status_code == 200
    assert browser.post(url + "/gradio_api/mcp/", json={}).status_code == 401
    assert browser.get(url + "/gradio_api/mcp/schema").status_code == 200, "the API view's list of the tools"
    assert httpx.get(url + "/gradio_api/mcp/schema", timeout=60).status_code == 401

    ada = page_login(url, "Ada")
    made = ada.predict("my agent", api_name="/agent_token")
    assert made["ok"] and made["token"].startswith("pgt_")
    assert made["token"] not in json.dumps(ada.predict(api_name="/agent_tokens"))

    async def work(session):
        tools = [t.name for t in (await session.list_tools()).tools]
        return tools, await tool("compile", kernel="gemm", params=SMALL)(session)
    tools, compiled = with_mcp(url, made["token"], work)
    assert tools == TOOLS
    assert compiled["ok"] and "__global__" in compiled["cuda"], compiled.get("error")

    assert ada.predict(made["id"], api_name="/agent_token_revoke")["ok"]
    assert refused_over_mcp(url, made["token"])
    revoked = httpx.post(url + "/gradio_api/mcp/", json={}, timeout=60,
                         headers={"Authorization": f"Bearer {made['token']}"})
    assert revoked.status_code == 401 and "revoked" in revoked.json()["detail"]


WRONG_VECTOR_ADD = cls.load_exercises()["vector_add"].starter.replace(
    "A[bx * block_N + i] + B[bx * block_N + i]", "A[bx * block_N + i] - B[bx * block_N + i]")


def test_an_agents_check_is_graded_as_its_users_and_kept_nowhere(class_server):
    ada = page_login(class_server.url, "Ada")
    made = ada.predict("ada's checker", api_name="/agent_token")
    answer = with_mcp(class_server.url, made["token"], tool("check", exercise="vector_add", source=WRONG_VECTOR_ADD,
                                                            params={"block_N": 512}))
    # without a GPU the server says it has none; on one, the wrong sums at a visible shape: either way, a check's
    assert not answer["ok"] and answer["error"]["stage"] in ("device", "verify"), answer["error"]
    assert answer["checked"] is True, "the tool checks; it does not submit"
    teacher = page_login(class_server.url, "teacher", TEACHER_PW)
    assert [r for r in teacher.predict("vector_add", "", api_name="/teacher_submissions")["rows"]
            if r["student"] == "Ada"] == [], "a check is no submission"


def test_an_agents_refused_submission_is_kept_and_marked_as_an_agents_in_the_teachers_list(class_server):
    assert "- B[" in WRONG_VECTOR_ADD
    grace = page_login(class_server.url, "Grace")
    made = grace.predict("grace's bot", api_name="/agent_token")
    answer = with_mcp(class_server.url, made["token"], tool("submit", exercise="vector_add", source=WRONG_VECTOR_ADD,
                                                            params={"block_N": 512}))
    # refused by the grade job: without a GPU it answers that it has none; on one, the wrong sums
    assert not answer["ok"] and answer["error"]["stage"] in ("device", "verify"), answer["error"]
    teacher = page_login(class_server.url, "teacher", TEACHER_PW)
    rows = teacher.predict("vector_add", "", api_name="/teacher_submissions")["rows"]
    mine = [r for r in rows if r["student"] == "Grace"]
    assert [(r["status"], r["agent"]) for r in mine] == [("refused", "grace's bot")]
    exported = teacher.predict("vector_add", "", api_name="/teacher_export")["csv"].splitlines()
    assert exported[0].startswith("id,exercise,student,agent,")
    assert any(line.split(",")[2:4] == ["Grace", "grace's bot"] for line in exported[1:])
    frame = cls.submissions_frame({"rows": rows})
    assert list(frame[frame["student"] == "Grace"]["agent"]) == ["grace's bot"]


def test_the_worked_example_compiles_the_tiled_gemm_starter_and_without_a_gpu_stops_there_saying_so(class_server):
    made = page_login(class_server.url, "Mei").predict("agent loop", api_name="/agent_token")
    loop = [sys.executable, str(ROOT / "tools" / "agent_loop.py"), "--url", class_server.url, "--candidates", "2"]
    done = subprocess.run(loop, env={**os.environ, "PLAYGROUND_TOKEN": made["token"]}, capture_output=True,
                          text=True, timeout=1200)
    said = done.stdout
    assert done.returncode == 0, said + done.stderr[-3000:]
    assert "Tiled GEMM" in said and "compile, the starter's own tiles:" in said and "registers a thread" in said
    assert "block_M=128, block_N=256" in said
    if has_gpu():
        assert "accepted:" in said and "(agent loop)" in said
    else:
        assert "this server has no GPU" in said and "Stopping at compile." in said and "submitting it" not in said
    refused = subprocess.run(loop[:-2] + ["--token", "pgt_0123456789ab_" + "A" * 43], capture_output=True,
                             text=True, timeout=300, env={k: v for k, v in os.environ.items()
                                                          if k != "PLAYGROUND_TOKEN"})
    assert refused.returncode == 2 and "refused the call" in refused.stdout, refused.stdout + refused.stderr[-2000:]


@pytest.mark.gpu
def test_on_a_gpu_an_agents_accepted_submission_is_on_the_board_as_an_agents(class_server, record_property):
    if not has_gpu():
        pytest.skip("needs a CUDA GPU")
    starter = cls.load_exercises()["vector_add"].starter
    lin = page_login(class_server.url, "Lin")
    made = lin.predict("lin's agent", api_name="/agent_token")

    async def work(session):
        submitted = await tool("submit", exercise="vector_add", source=starter, params={"block_N": 2048})(session)
        agents = await tool("leaderboard", exercise="vector_add", who="agents")(session)
        students = await tool("leaderboard", exercise="vector_add", who="students")(session)
        return submitted, agents, students
    submitted, agents, students = with_mcp(class_server.url, made["token"], work)
    assert submitted["ok"] and submitted["agent"] == "lin's agent", submitted.get("error")
    row = next(r for r in agents["rows"] if r["student"] == "Lin")
    assert row["kind"] == "agent" and row["agent"] == "lin's agent" and row["gpu"] and row["sol_percent"]
    assert all(r["student"] != "Lin" for r in students["rows"]), "not on the board as Lin's own work"
    board = lin.predict("vector_add", "all", api_name="/leaderboard")
    assert any(r["student"] == "Lin" and r["kind"] == "agent" for r in board["rows"])
    record_property("gpu_summary", "mcp agent submission: " + json.dumps(
        {k: submitted.get(k) for k in ("median_ms", "gpu", "sol_percent", "rank")}))
