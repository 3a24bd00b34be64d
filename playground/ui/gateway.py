"""The page's only way to the engine: run_job (for everything that touches a kernel's source), the catalogue (for
the built-in kernels' declarations, imported from our own files only), and health().

Nothing here imports or executes a user's edited source: that text only ever goes to run_job.
"""
from __future__ import annotations

import functools
import inspect
import json
import logging
import re
from pathlib import Path
from typing import Callable

from ..engine.answers import Answer, failed
from ..engine.errors import StageError
from ..settings import Settings, current as current_settings

log = logging.getLogger("playground.ui")


def _run_job():
    from playground.jobs import run_job
    return run_job


@functools.lru_cache(maxsize=1)
def _accepts(name: str) -> bool:
    try:
        params = inspect.signature(_run_job()).parameters
    except (TypeError, ValueError):
        return False
    return name in params or any(p.kind is p.VAR_KEYWORD for p in params.values())


def call(action: str, kernel: str, source: str | None, params: dict | None, *, session: str = "anon",
         arch: str | None = None, options: dict | None = None,
         on_progress: Callable[[str, float], None] | None = None, owner: str | None = None,
         on_partial: Callable[[dict], None] | None = None) -> Answer:
    """run_job with the page's conventions: empty or unchanged source means the catalogue's file, params may be
    None, and anything unexpected comes back as an `internal` error result instead of an exception. `on_partial`
    hears a compile's partial answer (its CUDA and line map, the moment lowering ends), in the user's terms."""
    source = normalize_source(kernel, source)
    kwargs = {"arch": arch or None, "options": options or None, "on_progress": on_progress}
    if _accepts("session"):
        kwargs["session"] = session or "anon"
    if owner and _accepts("owner"):
        kwargs["owner"] = owner
    if on_partial is not None and _accepts("on_partial"):
        kwargs["on_partial"] = lambda partial: on_partial(in_users_terms(partial, kernel))
    try:
        result = _run_job()(action, kernel, source, dict(params or {}), **kwargs)
    except Exception as exc:  # run_job promises not to raise; a page must not break if it does
        log.exception("run_job raised")
        result = failed(StageError("internal", f"{type(exc).__name__}: {exc}"[:500]), action, kernel)
    if not isinstance(result, dict):
        result = failed(StageError("internal", "the engine returned no result", None, repr(result)[:2000]),
                        action, kernel)
    result.setdefault("kernel", kernel)
    result.setdefault("action", action)
    return in_api_terms(in_users_terms(result, kernel))


# The engine's hints are written for its command line (`--set entry=add_one`, `--set M=… --set N=…`); through the
# page's API the same value is a key of `params`: {"entry": "add_one"}, {"M": …, "N": …}.
_CLI_SETS = re.compile(r"--set (\w+)=(\S*?)(?=\)|[;,]?\s|$)(?:\s+--set (\w+)=(\S*?)(?=\)|[;,]?\s|$))*")
_CLI_SET = re.compile(r"--set (\w+)=(\S*?)(?=\)|[;,]?\s|$)")


def api_params_hint(text: str) -> str:
    """`--set entry=add_one` → `{"entry": "add_one"}`, a run of them as one object; `…` stays a placeholder."""
    def one(match) -> str:
        pairs = _CLI_SET.findall(match.group(0))
        def value(v: str) -> str:
            return v if v == "…" or re.fullmatch(r"-?\d+(\.\d+)?|true|false", v) else json.dumps(v)
        return "{" + ", ".join(f'"{k}": {value(v)}' for k, v in pairs) + "}"
    return _CLI_SETS.sub(one, text)


def in_api_terms(result):
    """The hints of an answer's messages as the API's params (api_params_hint), for a caller of the page's API."""
    if isinstance(result, str):
        return api_params_hint(result) if "--set " in result else result
    if isinstance(result, dict):
        return {k: v if k in ("log", "cuda", "ptx", "sass", "host", "source") or str(k).endswith("_b64")
                else in_api_terms(v) for k, v in result.items()}
    if isinstance(result, list):
        return [in_api_terms(v) for v in result]
    return result


# -- paths in an answer ---------------------------------------------------------------------------------------------
# A user's source runs as a file in a job's folder (/job/src/<hash>/gemm.py in the sandbox, a folder under the server's
# temporary directory without it), beside the playground's own files and the Python packages; tracebacks, messages,
# a describe's "file" and the generated code's debug lines name those paths. The user is told of their file by the
# name they know it by, and of ours relative to the project or the package: never where the server keeps them.
# A path is cut from where it starts (a "/" after no letter, dot, slash, plus or minus, or after a compiler's "-I")
# to a mark found by a plain search (the host's job folder "/server-N/job-X", "/site-packages/"), in one pass over
# the text: a pattern that tried every start and searched on from each would take time quadratic in the length of
# an unbroken text ("-I/" a hundred thousand times in a string of the user's, or in their program's output).
# The last character no path has (whitespace, quotes, brackets, commas, semicolons) before the end of a stretch:
_LAST_STOP = re.compile(r"(?s:.*)[\s'\"<>()\[\]{},;]")
_HOST_JOB_DIR = re.compile(r"/server-\d+/job-\w+")  # the job's folder as the host sees it (no sandbox)
_PACKAGES_MARK = re.compile(r"/(?:site|dist)-packages/")
# (Each pattern starts with its text and looks behind it after: one that starts with a look-behind is tried at every
# position of the text, 0.2 µs each, where a leading text is found by a fast search.)
_AT_PATH_START = re.compile(r"/(?:(?<![\w./+-]/)|(?<=-I/))")
_SANDBOX_JOB_DIR = r"/job(?:(?<![\w./+-]/job)|(?<=-I/job))"  # the job's folder as the sandbox shows it
_USER_FILE = re.compile(_SANDBOX_JOB_DIR + r"/src/(?:\w+/)?[0-9a-f]{16}/([A-Za-z_]\w*\.py)\b")  # src/submission/..
_IN_JOB = re.compile(_SANDBOX_JOB_DIR + "/")
_ROOT = str(Path(__file__).resolve().parents[2]) + "/"


def _cut_paths(text: str, mark: re.Pattern, replacement: str) -> str:
    """Each path that reaches `mark`, from its earliest start in the same run of path characters through the mark,
    replaced by `replacement`; a mark with no start before it is left. Each stretch of text is searched once, by the
    regular expression engine: between one mark and the next, for the last character no path has (where the run
    begins), then for the first place a path may start. (A loop over the characters in Python took 0.2 s for each
    cached answer of the GEMM: its PTX names TileLang's headers at its end.)"""
    out, done = [], 0
    run_start = scanned = search_from = 0  # the run of path characters so far; no path starts in [run, search_from)
    for m in mark.finditer(text):
        if m.start() < done:
            continue
        if scanned < done:
            scanned = run_start = search_from = done
        stop = _LAST_STOP.match(text, scanned, m.start())
        if stop:
            run_start = search_from = stop.end()
        scanned = m.start()
        found = _AT_PATH_START.search(text, max(run_start, search_from), m.start())
        if found is None:
            search_from = m.start()
            continue
        out += [text[done:found.start()], replacement]
        done = m.end()
    return "".join(out) + text[done:]


YOUR_KERNEL = "your kernel"  # a source of one's own has no file name the user gave it


def in_users_terms(result, kernel: str):
    """`result` (an engine answer: dicts, lists, text) with the paths of the server's folders taken out: the user's
    source file as `kernel`.py (an edited shipped kernel) or "your kernel", another file of theirs by its name, a
    file of the job's folder, the project or a package by its path inside it."""
    main = f"{kernel}.py" if kernel and kernel.isidentifier() else "kernel.py"  # as the engine writes the source

    def users_file(match) -> str:
        name = match.group(1)
        return YOUR_KERNEL if name == main and not (kernel and kernel.isidentifier()) else name

    def clean(value):
        if isinstance(value, str):
            if "/" not in value:
                return value
            value = _cut_paths(value, _HOST_JOB_DIR, "/job")  # then as the sandbox shows it
            if "/job" in value:  # (a plain search first: the patterns' look-behinds are tried at every position)
                value = _IN_JOB.sub("", _USER_FILE.sub(users_file, value))
            return _cut_paths(value, _PACKAGES_MARK, "").replace(_ROOT, "")
        if isinstance(value, dict):  # (a file's bytes in base64, like a profile's report, are no text to read)
            return {k: v if str(k).endswith("_b64") else clean(v) for k, v in value.items()}
        if isinstance(value, list):
            return [clean(v) for v in value]
        return value
    return clean(result)


def refused_for_no_gpu(result: dict | None) -> bool:
    """The answer of a run or tune turned away at once because the server has no GPU: nothing was compiled."""
    from playground.jobs.runner import NO_GPU
    err = (result or {}).get("error") or {}
    return err.get("stage") == "device" and err.get("message") == NO_GPU


def stop(owner: str | None) -> dict:
    """Stop the jobs this browser tab started (`owner`: its session id): {"killed", "left", "waiting"} (jobs.stop)."""
    none = {"killed": 0, "left": 0, "waiting": 0}
    if not owner:
        return none
    try:
        from playground.jobs import stop as stop_jobs
        return {**none, **stop_jobs(owner)}
    except Exception:  # the page's Stop must answer even if the job system is down
        log.exception("stopping jobs failed")
        return none


# The server's class (ui/classroom.py sets this when it is imported): whether one person may log in under any name
# decides what the job queue counts. The class's section calls the gateway, never the other way round.
class_room: Callable[[], object] | None = None


def student_of(request) -> str:
    """Who the per-student limits (playground/jobs/queue.py) count a request against: the logged-in user (the login's
    user name, or a reverse proxy's user header), else the client's address; never the Gradio session id, which the
    client chooses (a script opening new sessions would get past the limits). Without a login, students behind one
    address share its limits: a class server asks for a login (README: For a class). Where one person may log in
    under any name (a class password, no roster), the login's key also carries the address, which the job queue
    counts too (queue.Student)."""
    from ..course import client_address, user_name  # the one rule for an address (a trusted proxy's X-Forwarded-For)
    # (the name as the class spells it, as the class's rules take it: a proxy's user header may be spelt freely)
    name = user_name(getattr(request, "username", None) if request is not None else None)
    if name:
        from playground.jobs.queue import Student
        room = class_room() if class_room is not None else None
        return Student(f"user:{name}", client_address(request) if room is not None and room.names_are_free() else None)
    host = client_address(request)
    return f"address:{host}" if host else "anon"


def normalize_source(kernel: str, source: str | None) -> str | None:
    """None when the text is empty or the catalogue's own file (so the engine and its cache use the original)."""
    if source is None or not source.strip() or is_original(kernel, source):
        return None
    return source


def is_original(kernel: str, source: str | None) -> bool:
    """Is this the catalogue's file, give or take the trailing newlines and line endings an editor changes?"""
    def canon(text: str) -> str:
        return text.replace("\r\n", "\n").rstrip()
    try:
        return source is not None and canon(source) == canon(original_source(kernel))
    except Exception:
        return False


# -- the catalogue (our own kernel files only) --------------------------------------------------------------------
def kernel_names() -> list[str]:
    """The catalogue's kernels whose files load, in the catalogue's order."""
    from playground.engine.kernel import builtin_names
    names = []
    for name in builtin_names():
        try:
            describe(name)
        except Exception as exc:  # a kernel file another developer is still writing
            log.warning("kernel %s is not available: %s", name, exc)
            continue
        names.append(name)
    return names


@functools.lru_cache(maxsize=None)
def describe(name: str) -> dict:
    """A shipped kernel's declarations, read in the server: only a name of the catalogue, never a path (the engine
    imports a path's file, and a file from the page runs only in a sandboxed job)."""
    from playground.engine.errors import quoted
    from playground.engine.kernel import builtin_names, load
    if name not in builtin_names():
        raise ValueError(f"no kernel named {quoted(name, 100)} in the catalogue (a kernel of your own is sent as "
                         "its source)")
    return load(name).describe()


def describe_source(kernel: str, source: str | None, params: dict | None = None, *, session: str = "anon") -> dict:
    """The parameters of the kernel being edited, for the page's controls: {"ok", "name", "entries", "parameters":
    [{"name", "kind", "required", "default", "choices", "source"}], "required", "problem", "defaults", "dtypes",
    "space", "options", "presets", "verified", "verification_note", "warnings", "error"} (UserKernel.describe).
    A shipped kernel's unchanged file is read here; any other text only in a sandboxed job, like a compile."""
    if normalize_source(kernel, source) is None and kernel:
        try:
            return in_users_terms({"ok": True, "action": "describe", **describe(kernel), "error": None}, kernel)
        except Exception as exc:
            return failed(StageError("parameters", str(exc)[:500]), "describe", kernel)
    return call("describe", kernel, source, params, session=session)


def original_source(name: str) -> str:
    from playground.engine.kernel import builtin_source
    return builtin_source(name)


def arches() -> list[str]:
    try:
        from playground.engine.compile import ARCHES
        return list(ARCHES)
    except Exception:
        return ["sm_90a", "sm_90", "sm_80", "sm_86", "sm_89"]


def start_jobs(settings: Settings | None = None) -> dict | None:
    """Start the job system's workers now rather than at the first click (where playground.jobs has start()), then,
    with the setting `prewarm`, compile the shipped kernels in the background (prewarm)."""
    try:
        from playground.jobs import start
    except ImportError:
        return None
    try:
        started = start(settings)
    except Exception:
        log.exception("starting the job system failed")
        return None
    if (settings or current_settings()).prewarm:
        prewarm(settings)
    return started


def prewarm_requests() -> list[tuple[str, dict]]:
    """The request a fresh page sends for each shipped kernel: its default problem sizes and dtype, every tile on
    auto (controls.defaults through engine_params, as the page's Compile sends them)."""
    from . import controls as ctl
    requests = []
    for name in kernel_names():
        c = ctl.controls_for(describe(name))
        values = c.defaults()
        dtype = values.pop("dtype")
        requests.append((name, ctl.engine_params(values, dtype)))
    return requests


def prewarm(settings: Settings | None = None, wait: bool = False) -> list[dict]:
    """Compile the shipped kernels at the page's first request of each into the server's compile cache: in the
    background, a slot of the queue's own and niced (`wait`: here, before returning, with each compile's answer:
    `app.py --prewarm`, which the image's build runs)."""
    try:
        from playground.jobs.runner import prewarm as compile_ahead
        answers = compile_ahead(prewarm_requests(), wait=wait, settings=settings)
        return answers if wait else []
    except Exception as exc:
        log.exception("the pre-warm failed")
        return [failed(StageError("internal", f"the pre-warm failed: {type(exc).__name__}: {exc}"[:500]), "compile",
                       "")]


# -- health -------------------------------------------------------------------------------------------------------
@functools.lru_cache(maxsize=1)
def _gpu_name() -> str | None:
    """The first GPU's name from NVML (no CUDA context in the web server), or None."""
    from playground.engine.gpus import first_gpu_name
    return first_gpu_name()


def health() -> dict:
    """playground.jobs.health() where it exists; until then a minimal answer of our own."""
    try:
        from playground.jobs import health as jobs_health
    except ImportError:
        jobs_health = None
    if jobs_health is not None:
        try:
            return dict(jobs_health())
        except Exception as exc:
            log.exception("health() raised")
            return {"ok": False, "gpu": _gpu_name(), "sandbox": None, "queue": None,
                    "error": f"{type(exc).__name__}: {exc}"[:300]}
    return {"ok": True, "gpu": _gpu_name(), "sandbox": None, "queue": None, "source": "ui fallback"}
