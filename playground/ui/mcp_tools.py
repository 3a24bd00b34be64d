"""The playground as an MCP server: the page's named endpoints as tools for kernel-writing agents.

Gradio serves MCP for an app launched with mcp_server=True (serve() does): streamable HTTP at /gradio_api/mcp/
(and an SSE transport at /gradio_api/mcp/sse, its messages at /gradio_api/mcp/messages/). Of the app's endpoints
only the tools here are offered (expose), each a thin call of what the page's own endpoints call (api.call, the
class's Classroom), with typed arguments and a description an agent reads:

    list_kernels, list_exercises, describe, compile, run, tune, profile, memcheck, lowering, share, check, submit,
    leaderboard

Each answers the engine's JSON as text. Long texts are cut so that an agent's context is not flooded: the CUDA
(from its first __global__), PTX, SASS and host code, each pass's IR and an error's log to `lines` lines unless
`include` names them (["sass"], ["cuda", "ptx"], ["ir"], ["log"]); the CUDA → source line map and a profile's Nsight
Compute report are left out unless `include` names them (["line_map"], ["report"]); what was cut is said under
"trimmed".

Who is calling: Gradio does not carry the page's login to MCP calls. Wherever the page asks for a login, a client
presents `Authorization: Bearer <token>`, a token a user made on the page (course/agents.py); server.py's guard
refuses a request to the MCP routes without a valid one (401), and each tool resolves the user from it again. The
token acts as its user, with their limits (the same key in the job queue, the same rate limits and quotas), and what
it submits is marked as their agent's. On a server without a login no token is needed, as for the page's API.

The tools are not queued in Gradio (queue=False): Gradio then calls them in-process with the MCP request (its
headers, its client address), where a queued call would go through a loopback client that has no login. The job
layer queues the work itself, fairly between users.
"""
from __future__ import annotations

import json
import logging
from typing import Literal

import gradio as gr

from ..course import agents, client_address, error
from . import api, classroom as cls, gateway

log = logging.getLogger("playground.mcp")

PATH = cls.MCP_PATH  # where Gradio mounts its MCP routes: /gradio_api/mcp
ENDPOINT_PREFIX = "mcp_"  # the tools' own endpoints (/mcp_compile, ...): undocumented, not queued
TEXTS = ("cuda", "ptx", "sass", "host")
INCLUDES = (*TEXTS, "ir", "log", "line_map", "report")
Text = Literal["cuda", "ptx", "sass", "host", "ir", "log", "line_map", "report"]  # what `include` may name
Who = Literal["all", "students", "agents"]
LINES, MAX_LINES = 40, 1_000_000
LINE_MAPS = ("line_map", "line_origins", "origin_lines")


# -- who is calling ------------------------------------------------------------------------------------------------
def as_user(request, name: str):
    """`request` as a request of the logged-in `name` (what the page's endpoints read: gateway.student_of keys the
    job queue's fair share and rate limits by it, so an agent and its user share one allowance)."""
    if isinstance(request, gr.Request):
        if request.request is not None:
            return gr.Request(request=request.request, username=name, session_hash=request.session_hash)
        return gr.Request(username=name, session_hash=request.session_hash, **request.kwargs)
    return gr.Request(request=request, username=name)


def caller(request) -> tuple[dict | None, dict | None]:
    """({"student", "agent", "request"}, None) for the user a call acts as, or (None, the refusal). With a token:
    its user, `agent` the token ({"id", "name", "student"}), `request` as that user's; without one, where no login
    is needed: nobody (the page's API without a login), `agent` None."""
    room = cls.classroom()
    headers = getattr(request, "headers", None) or {}
    token = agents.bearer(headers.get("authorization"))
    if token is None:
        if room.agents_need_token():
            return None, error("permission", "this server needs a token: make one on the page (Agents (MCP)) and "
                                             "send it as 'Authorization: Bearer <token>'")
        return {"student": None, "agent": None, "request": request}, None
    found = room.agent_of(token)
    if found is None:
        return None, error("permission", "this token is not valid: it was revoked, its user may no longer log in, "
                                         "or it is mistyped; make a new one on the page")
    return {"student": found["student"], "agent": found, "request": as_user(request, found["student"])}, None


def _noted(who: dict, what: str, detail: str = "") -> None:
    if who.get("agent"):
        log.info("agent #%d (%r) of %s: %s %s", who["agent"]["id"], who["agent"]["name"], who["student"], what,
                 detail)


def _json(answer) -> str:
    return json.dumps(answer, default=str, ensure_ascii=False)


# -- what comes back -----------------------------------------------------------------------------------------------
def options(include, lines) -> tuple[set[str], int, dict | None]:
    """(the names to return in full, the lines to cut to, None), or the refusal of bad ones."""
    if include is None:
        include = []
    if isinstance(include, str):
        include = [include]
    if not isinstance(include, list) or not all(isinstance(i, str) for i in include):
        return set(), 0, error("parameters", f"include is a list of names: {', '.join(INCLUDES)}")
    unknown = sorted(set(include) - set(INCLUDES))
    if unknown:
        return set(), 0, error("parameters", f"include takes {', '.join(INCLUDES)}; not {', '.join(unknown)[:200]}")
    if lines is None:
        lines = LINES
    if isinstance(lines, bool) or not isinstance(lines, (int, float)) or not 0 <= lines <= MAX_LINES:
        return set(), 0, error("parameters", f"lines is a number of lines from 0 to {MAX_LINES}")
    return set(include), int(lines), None


def trimmed(answer: dict, include: set[str], lines: int) -> dict:
    """`answer` with its long texts cut to `lines` lines and its line maps and report left out, except those
    `include` names; what was cut is told under "trimmed"."""
    if not isinstance(answer, dict):
        return answer
    out, notes = dict(answer), {}

    def cut(text: str, key: str, where: str) -> str:
        all_lines = text.splitlines()
        if key in include or len(all_lines) <= lines:
            return text
        # The CUDA from its first kernel on: TileLang's preamble of #includes and #defines comes first.
        start = next((i for i, line in enumerate(all_lines) if "__global__" in line), 0) if key == "cuda" else 0
        start = max(0, min(start, len(all_lines) - lines))
        which = f"the first {lines}" if start == 0 else f"lines {start + 1} to {start + lines} (from __global__)"
        notes[where] = f"{which} of {len(all_lines)} lines: call again with include=[\"{key}\"] for all"
        return "\n".join(all_lines[start:start + lines])

    for key in TEXTS:
        if isinstance(out.get(key), str):
            out[key] = cut(out[key], key, key)
    if isinstance(out.get("passes"), list):
        passes = []
        for i, p in enumerate(out["passes"]):
            if isinstance(p, dict) and isinstance(p.get("ir"), str):
                p = {**p, "ir": cut(p["ir"], "ir", f"passes[{i}].ir")}
            passes.append(p)
        out["passes"] = passes
    if isinstance(out.get("error"), dict) and isinstance(out["error"].get("log"), str):
        out["error"] = {**out["error"], "log": cut(out["error"]["log"], "log", "error.log")}
    if "line_map" not in include:
        for key in LINE_MAPS:
            if out.get(key) is not None:
                out.pop(key)
                notes[key] = "left out: call again with include=[\"line_map\"] for it"
    if "report" not in include and out.get("report_b64"):
        out["report_b64"] = None
        notes["report_b64"] = "the Nsight Compute report left out: call again with include=[\"report\"] for it"
    if notes:
        out["trimmed"] = notes
    return out


def engine(action: str, kernel: str, source: str, params, include, lines, request) -> str:
    """An engine action as the page's API does it (api.call), for the caller, its answer trimmed."""
    who, refused = caller(request)
    if refused:
        return _json(refused)
    include, lines, bad = options(include, lines)
    if bad:
        return _json(bad)
    _noted(who, action, str(kernel or "(their own)"))
    return _json(trimmed(api.call(action, kernel, source, params, who["request"]), include, lines))


# -- the tools -------------------------------------------------------------------------------------------------------
def list_kernels(request: gr.Request = None) -> str:
    """The shipped kernels: each one's name, what it is, its problem sizes, dtypes, tile parameters with their
    defaults and search space, presets of problem sizes and the baselines it is timed against. Pass a name as
    `kernel` to the other tools (source "" for the shipped file), or kernel "" with a source of your own.

    Returns:
        JSON: {"ok", "kernels": [{"name", "description", "problem", "dtypes", "defaults", "space", "options",
        "presets", "baselines"}]}
    """
    who, refused = caller(request)
    if refused:
        return _json(refused)
    keys = ("name", "description", "problem", "dtypes", "defaults", "space", "options", "presets", "check_shapes",
            "baselines")
    kernels = []
    for name in gateway.kernel_names():
        described = gateway.describe(name)
        kernels.append({k: described.get(k) for k in keys})
    return _json({"ok": True, "kernels": kernels})


def list_exercises(request: gr.Request = None) -> str:
    """The class's exercises: name, title, statement (Markdown), the starter code to begin from, the factory a
    submission defines, its dtype, the visible problem sizes, the timed one, the time target, the deadline (yours,
    where the teacher moved it) and whether the exercise takes agents' submissions. The hidden sizes stay on the
    server.

    Returns:
        JSON: {"ok", "exercises": [{"name", "title", "statement", "starter", "factory", "dtype", "visible", "timed",
        "target_ms", "deadline", "agents", ...}]}
    """
    who, refused = caller(request)
    if refused:
        return _json(refused)
    room = cls.classroom()
    listed = room.exercises(who["student"])
    for item in listed:
        ex = room.exercises_by_name().get(item["name"])
        if ex is not None:
            item["agents"] = room.agents_allowed(ex)
    return _json({"ok": True, "exercises": listed})


def describe(kernel: str, source: str = "", params: dict | None = None, request: gr.Request = None) -> str:
    """The parameters of a kernel: for a shipped one its declarations; for a file of your own (kernel "", its text
    as source) what the playground reads from it without running it: sizes, tile parameters, switches, their
    values in the file, which are required, and the kernels of a file that has several (pick one with params
    {"entry": NAME}).

    Args:
        kernel: a shipped kernel's name (list_kernels), or "" for a kernel of your own given as source
        source: the kernel file's text; "" for the shipped file
        params: {"entry": NAME} to pick one kernel of a file of several
    Returns:
        JSON: {"ok", "name", "parameters": [{"name", "kind", "required", "default", "choices", "source"}],
        "required", "problem", "defaults", "dtypes", "entries", "error"}
    """
    who, refused = caller(request)
    if refused:
        return _json(refused)
    _noted(who, "describe", str(kernel or "(their own)"))
    return _json(api.describe(kernel, source, params, who["request"]))


def compile(kernel: str, source: str = "", params: dict | None = None, include: list[Text] | None = None,
            lines: int = LINES, request: gr.Request = None) -> str:
    """Compile a kernel on the server (no GPU needed): the generated CUDA, PTX, SASS and host code, the registers,
    shared memory and spills (resources), and the config the engine picked for what params left out. A failure
    says its stage (python, parameters, tilelang, nvcc, timeout, ...), the message and the line of your source.

    Args:
        kernel: a shipped kernel's name (list_kernels), or "" for a kernel of your own given as source
        source: the kernel file's text (an edited copy of a shipped kernel, or your own file); "" for the shipped file
        params: problem sizes and tile parameters, e.g. {"M": 4096, "N": 4096, "K": 4096, "block_M": 128}; those
            left out are picked by the engine; "arch" sets the target (e.g. "sm_80"; default sm_90a)
        include: long texts to return in full: any of "cuda", "ptx", "sass", "host", "log", "line_map"
        lines: the lines kept of each long text not in include (default 40)
    Returns:
        JSON: {"ok", "kernel", "config", "cuda", "ptx", "sass", "host", "resources", "compile_seconds", "error",
        "trimmed"}
    """
    return engine("compile", kernel, source, params, include, lines, request)


def run(kernel: str, source: str = "", params: dict | None = None, include: list[Text] | None = None,
        lines: int = LINES, request: gr.Request = None) -> str:
    """Compile, verify against the kernel's float32 reference on its check shapes and the size asked, and time it
    (CUDA events, L2 flushed) against its baselines (cuBLAS, cuDNN, torch) on the server's GPU. Needs a GPU: on a
    server without one the answer's error stage is "device". A kernel of your own without reference() is timed,
    not verified.

    Args:
        kernel: a shipped kernel's name, or "" for a kernel of your own given as source
        source: the kernel file's text; "" for the shipped file
        params: problem sizes and tile parameters as for compile; also "seed" and "graph" (time as a CUDA graph)
        include: long texts to return in full: any of "cuda", "ptx", "sass", "host", "log", "line_map"
        lines: the lines kept of each long text not in include (default 40)
    Returns:
        JSON: {"ok", "verification", "timing", "baselines", "tflops", "gbps", "percent_of_copy_bandwidth",
        "percent_of_matmul_peak", "device", "resources", "error", ...}
    """
    return engine("run", kernel, source, params, include, lines, request)


def tune(kernel: str, source: str = "", params: dict | None = None, request: gr.Request = None) -> str:
    """Search the kernel's tile space on the GPU: every candidate compiled, verified and timed; the table and the
    best config. Needs a GPU.

    Args:
        kernel: a shipped kernel's name, or "" for a kernel of your own given as source
        source: the kernel file's text; "" for the shipped file
        params: problem sizes (and tile values to hold fixed); "max_configs" bounds the candidates tried
    Returns:
        JSON: {"ok", "best", "table", "error", ...}
    """
    return engine("tune", kernel, source, params, None, None, request)


def profile(kernel: str, source: str = "", params: dict | None = None, include: list[Text] | None = None,
            lines: int = LINES, request: gr.Request = None) -> str:
    """Nsight Compute over one launch: speed of light, occupancy, memory workload, warp stall reasons and stall
    samples per line of your source. Needs a GPU.

    Args:
        kernel: a shipped kernel's name, or "" for a kernel of your own given as source
        source: the kernel file's text; "" for the shipped file
        params: problem sizes and tile parameters as for compile
        include: "report" for the .ncu-rep (base64), "log" for the tools' whole log
        lines: the lines kept of each long text not in include (default 40)
    Returns:
        JSON: {"ok", "details", "stall_reasons", "source", "error", ...}
    """
    return engine("profile", kernel, source, params, include, lines, request)


def memcheck(kernel: str, source: str = "", params: dict | None = None, include: list[Text] | None = None,
             lines: int = LINES, request: gr.Request = None) -> str:
    """compute-sanitizer memcheck (as compiled, and without TileLang's bounds guards) and racecheck on the
    kernel's check shapes: each error with the line of your source. Needs a GPU.

    Args:
        kernel: a shipped kernel's name, or "" for a kernel of your own given as source
        source: the kernel file's text; "" for the shipped file
        params: problem sizes and tile parameters as for compile
        include: "log" for the tools' whole log
        lines: the lines kept of each long text not in include (default 40)
    Returns:
        JSON: {"ok", "memcheck", "racecheck", "error", ...}
    """
    return engine("memcheck", kernel, source, params, include, lines, request)


def lowering(kernel: str, source: str = "", params: dict | None = None, include: list[Text] | None = None,
             lines: int = LINES, request: gr.Request = None) -> str:
    """The TileLang/TVM IR after each lowering pass that changed it, in order (no GPU needed): where a tile
    became loops, copies became cp.async or TMA, a pipeline its stages.

    Args:
        kernel: a shipped kernel's name, or "" for a kernel of your own given as source
        source: the kernel file's text; "" for the shipped file
        params: problem sizes and tile parameters as for compile
        include: "ir" for every pass's IR in full
        lines: the lines kept of each pass's IR when not in full (default 40)
    Returns:
        JSON: {"ok", "passes": [{"name", "phase", "folded", "ir"}], "unchanged_at_end", "error", "trimmed"}
    """
    return engine("ir", kernel, source, params, include, lines, request)


def share(kernel: str, source: str = "", params: dict | None = None, request: gr.Request = None) -> str:
    """A share link to the kernel, its source and parameters: whoever opens it gets the same editor on the page
    (for a person to look at what you made).

    Args:
        kernel: a shipped kernel's name, or "" for a kernel of your own given as source
        source: the kernel file's text
        params: its parameters as for compile
    Returns:
        JSON: {"ok", "id", "url"}
    """
    who, refused = caller(request)
    if refused:
        return _json(refused)
    _noted(who, "share", str(kernel))
    from .own_kernel import OWN  # (a kernel of one's own is shared under the page's name for it)
    kernel = kernel if kernel else OWN
    return _json(cls.classroom().share(kernel, source, params, None, cls.base_url_of(request),
                                       who=gateway.student_of(who["request"]), address=client_address(request)))


def submit(exercise: str, source: str, params: dict | None = None, request: gr.Request = None) -> str:
    """Submit a solution of an exercise (list_exercises) for grading: it is verified on the visible and hidden
    shapes with fresh inputs, timed, verified again, and if accepted it is on the exercise's board as your user's
    agent. Needs a GPU server and a token; refused after the deadline, or where the teacher forbids agents on the
    exercise. One submission of a user's is graded at a time.

    Args:
        exercise: the exercise's name, e.g. "tiled_gemm"
        source: the file defining the exercise's factory (its starter, made faster)
        params: tile parameters only, e.g. {"block_M": 128, "num_stages": 3}; the sizes and dtype are the exercise's
    Returns:
        JSON: {"ok", "median_ms", "speedup", "gpu", "sol_percent", "rank", "agent", "checks", "message"} or
        {"ok": false, "error"}
    """
    who, refused = caller(request)
    if refused:
        return _json(refused)
    _noted(who, "submit", str(exercise))
    return _json(cls.classroom().submit(who["student"], exercise, source, params, agent=who["agent"],
                                        address=client_address(request)))


def check(exercise: str, source: str, params: dict | None = None, request: gr.Request = None) -> str:
    """Check a solution of an exercise before submitting it: graded as a submission is (fresh inputs, verified,
    timed, verified again), on the exercise's visible shapes and its timed one only, and kept nowhere: no board, no
    attempt. Needs a GPU server and a token; refused where the teacher forbids agents on the exercise.

    Args:
        exercise: the exercise's name, e.g. "tiled_gemm"
        source: the file defining the exercise's factory
        params: tile parameters only, as for submit
    Returns:
        JSON: {"ok", "checked": true, "median_ms", "speedup", "checks", "message"} or {"ok": false, "error"}
    """
    who, refused = caller(request)
    if refused:
        return _json(refused)
    _noted(who, "check", str(exercise))
    return _json(cls.classroom().check(who["student"], exercise, source, params, agent=who["agent"],
                                       address=client_address(request)))


def leaderboard(exercise: str, who: Who = "all", request: gr.Request = None) -> str:
    """An exercise's board: per student their best accepted submission, and apart from it their agents' best
    (kind "agent", with the token's name), ranked by the share of the speed of light on the GPU it ran on, then
    time.

    Args:
        exercise: the exercise's name
        who: "all", "students" or "agents"
    Returns:
        JSON: {"ok", "rows": [{"rank", "student", "kind", "agent", "median_ms", "speedup", "gpu", "sol_percent",
        "met_target", "attempts"}], "agents_allowed"}
    """
    calling, refused = caller(request)
    if refused:
        return _json(refused)
    return _json(cls.classroom().leaderboard(exercise, calling["student"], who=who))


TOOLS = (list_kernels, list_exercises, describe, compile, run, tune, profile, memcheck, lowering, share, check,
         submit, leaderboard)


# -- in the app ------------------------------------------------------------------------------------------------------
def add(demo: gr.Blocks) -> None:
    """Add the tools' endpoints to `demo` (once; before it is launched)."""
    if getattr(demo, "playground_mcp_tools", False):
        return
    with demo:
        for fn in TOOLS:
            gr.api(fn, api_name=ENDPOINT_PREFIX + fn.__name__, queue=False, api_visibility="undocumented")
    demo.playground_mcp_tools = True


def expose(demo: gr.Blocks) -> bool:
    """Offer exactly the tools above on `demo`'s MCP server, named as above (Gradio offers every public endpoint by
    its function's name, and the page's own would take the names first); False where `demo` serves no MCP."""
    server = getattr(demo, "mcp_server_obj", None)
    if server is None or not getattr(demo, "playground_mcp_tools", False):
        return False
    server.api_info = demo.get_api_info(all_endpoints=True)
    server.tool_to_endpoint = {server.tool_prefix + fn.__name__: "/" + ENDPOINT_PREFIX + fn.__name__ for fn in TOOLS}
    return True
