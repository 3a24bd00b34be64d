"""The named API endpoints `compile`, `run`, `tune`, `sweep`, `ir`, `profile` and `memcheck`: (kernel, source,
params) → the engine's JSON.

    from gradio_client import Client
    client = Client("http://localhost:7860/")
    result = client.predict("gemm", "", {"M": 256, "N": 256, "K": 256}, api_name="/compile")

`source` is the kernel file's text ("" = the catalogue's own file); `params` may be left out. A kernel of your own
(any TileLang file: a @tilelang.jit function, a function returning a @T.prim_func, a module-level @T.prim_func) is
sent as kernel "" with its source; `/describe` answers its parameters, and params' "entry" picks one of several
kernels in the file. Two keys of params are
not kernel parameters: "arch" (compile target, e.g. "sm_80") and, for tune, "max_configs".
"""
from __future__ import annotations

import gradio as gr

from ..engine.answers import Answer, failed  # the one failed answer: one JSON shape everywhere
from ..engine.errors import StageError
from . import gateway

ACTION_OPTIONS = {"tune": ("max_configs",), "run": ("seed", "graph")}


def _progress(progress):
    def report(what: str, fraction: float) -> None:
        try:
            progress(None if fraction is None else float(fraction), desc=str(what))
        except Exception:
            pass
    return report


def call(action: str, kernel: str, source: str | None, params: dict | None, request: gr.Request | None,
         progress=None) -> Answer:
    # What an HTTP caller sends is anything JSON: say what was wrong, never answer with a Python error.
    name = str(kernel or "")
    if params is not None and not isinstance(params, dict):
        return failed(StageError("parameters", f"params must be an object of NAME: VALUE, not {type(params).__name__}"),
                      action, name)
    if source is not None and not isinstance(source, str):
        return failed(StageError("parameters", f"source must be text, not {type(source).__name__}"), action, name)
    if kernel is not None and not isinstance(kernel, str):
        return failed(StageError("parameters", f"kernel must be a name (text), not {type(kernel).__name__}"),
                      action, name)
    params = dict(params or {})
    arch = params.pop("arch", None)
    options = {k: params.pop(k) for k in ACTION_OPTIONS.get(action, ()) if k in params}
    session = gateway.student_of(request)  # the logged-in student, else the address: not a session id it can mint
    return gateway.call(action, str(kernel or ""), source, params, session=session, arch=arch, options=options,
                       on_progress=_progress(progress) if progress is not None else None)


def compile(kernel: str, source: str = "", params: dict | None = None, request: gr.Request = None) -> dict:
    """Compile a kernel: generated CUDA, PTX, host code, registers/shared memory/spills, the CUDA → source line
    map."""
    return call("compile", kernel, source, params, request)


def run(kernel: str, source: str = "", params: dict | None = None, request: gr.Request = None) -> dict:
    """Compile, verify against the PyTorch reference on several shapes, and time against the baselines (needs a GPU)."""
    return call("run", kernel, source, params, request)


def tune(kernel: str, source: str = "", params: dict | None = None, request: gr.Request = None) -> dict:
    """Search the kernel's tile space: every candidate compiled, verified and timed; the table and the best config."""
    return call("tune", kernel, source, params, request)


def sweep(kernel: str, source: str = "", params: dict | None = None, request: gr.Request = None) -> dict:
    """Time the kernel and its baselines over a range of problem sizes (the page's size-sweep chart; needs a GPU)."""
    return call("sweep", kernel, source, params, request)


def ir(kernel: str, source: str = "", params: dict | None = None, request: gr.Request = None) -> dict:
    """The TileLang/TVM IR after each lowering pass that changed it, in order; the passes that changed nothing are
    named in `folded` (no GPU needed)."""
    return call("ir", kernel, source, params, request)


def profile(kernel: str, source: str = "", params: dict | None = None, request: gr.Request = None) -> dict:
    """Nsight Compute over one launch: speed of light, occupancy, memory workload, warp stall reasons, stall samples
    per line of the source, and the .ncu-rep (base64, `report_b64`) for Nsight Compute's UI (needs a GPU)."""
    return call("profile", kernel, source, params, request)


def memcheck(kernel: str, source: str = "", params: dict | None = None, request: gr.Request = None) -> dict:
    """compute-sanitizer memcheck (as compiled and without TileLang's bounds guards) and racecheck on the kernel's
    check shapes: each error with the source line (needs a GPU)."""
    return call("memcheck", kernel, source, params, request)


def describe(kernel: str, source: str = "", params: dict | None = None, request: gr.Request = None) -> dict:
    """The kernel's parameters read from the source being edited (kernel "" for a kernel of your own; params may
    pick one of several kernels in the file with "entry"): what the page builds its controls from."""
    session = gateway.student_of(request)
    return gateway.describe_source(str(kernel or ""), source, params, session=session)


def register(concurrency_limit: int | None, concurrency_id: str) -> None:
    """Add the engine's endpoints to the Blocks being built (call inside `with gr.Blocks():`); the class's own
    (/share, /submit, /leaderboard, /teacher_*) are classroom.register's."""
    for fn in (compile, run, tune, sweep, ir, profile, memcheck, describe):
        gr.api(fn, api_name=fn.__name__, concurrency_limit=concurrency_limit, concurrency_id=concurrency_id)
