"""run_job: one request from the page to an answer, through the result cache, the queue and a sandboxed worker.

    request ─► checks ─► result cache (compile) ─► per-session limits + queue ─► pre-started worker ─► answer
                                  ▲                                                   │   ▲
                                  │                                       its TIR, ───┤   │ an answer kept for
                                  │                          partial answer (its CUDA) │   │ that TIR; nvcc's
                                  │                                      to the page ◄─┤   │ output for that CUDA
                                  └──────────── compile answers worth keeping ◄────────┴───┘

A compile is answered, in this order: from the answer kept for the same request (anyone's); from the answer kept
for the same program laid out anew (comments, blank lines, spacing), written by a job that ran no user code or by
the student's own; by waiting for the same compile already running; else by a job, which gets back an answer kept
for the TIR its kernel builds (by the same writers) and then lowers nothing, only moving the lines; or nvcc's
output kept for the CUDA its lowering made, and then skips nvcc and ptxas (result_cache.py). The shipped kernels
are compiled at the page's first request ahead of the class (`prewarm`).

Never raises: every failure, ours included, is an answer with an error stage, so the page always has something to
show. The server process itself never imports user code, torch's CUDA, or TileLang.
"""
from __future__ import annotations

import atexit
import functools
import hashlib
import json
import logging
import threading
import time
from typing import Callable

from ..engine import config_choice, ranges
from ..engine.answers import Answer, failed
from ..engine.errors import StageError, clip, format_exception, quoted
from ..engine.source import SOURCE_LIMIT  # (refused here before a job starts)
from ..settings import Settings, current
from . import hardware, sandbox
from .backend import Backend, no_user_code
from ..engine.compile_cache import nvcc_key
from .job import Exchange, bound_answer
from .local_backend import LocalBackend
from .queue import ANONYMOUS, Busy, Scheduler, Stopped, Stops, Student
from .result_cache import (FOLDER, SHARED, ResultCache, cacheable, laid_out, nvcc_entry, program_key, request_key,
                           source_text, tilelang_version, tir_key, writer_of)

log = logging.getLogger("playground.jobs")
ACTIONS = ("compile", "run", "tune", "sweep", "build_submission", "grade", "ir", "profile", "memcheck")
ACTIONS += ("describe",)  # a kernel's parameters, read from the source sent (the page's controls), on the CPU
DESCRIBE_TIMEOUT = 60.0   # seconds: importing the file and tracing an eager kernel's shapes, no compile
GPU_ACTIONS = ("run", "tune", "sweep", "grade", "profile", "memcheck")  # build_submission, grade: a submission
# (engine/grading.py); ir: the lowering pass by pass, on the CPU like a compile (engine/ir.py); profile, memcheck:
# Nsight Compute and compute-sanitizer over the kernel (engine/profile.py), the GPU taken alone like a run
OPTIONS = {"seed": int, "graph": bool, "max_configs": int}  # what a caller may pass through to the engine
NO_GPU = ("no CUDA GPU is present on this server: compile works without one, run, tune and sweep need one")


def backend_for(settings: Settings) -> Backend:
    """Where jobs run: the Ray cluster the setting `ray` names, else this machine."""
    if settings.ray:
        from .ray_backend import RayBackend  # (imports nothing of Ray in this process: its driver is a child)
        return RayBackend(settings)
    return LocalBackend(settings)


class JobLayer:
    """The server-wide parts, made on first use: the backend jobs run on, the queue sized to it, the result cache
    (always on this server), who may stop what. The same for every backend."""

    def __init__(self, settings: Settings, backend: Backend | None = None):
        self.settings = settings
        self.backend = backend or backend_for(settings)
        self.gpus = self.backend.gpus
        self.scheduler = Scheduler(self.backend.cpu_slots, [g["index"] for g in self.gpus], settings)
        self.cache = ResultCache(settings.data_dir / FOLDER, settings.compile_cache_bytes,
                                 seed=settings.compile_cache_seed)
        self.inflight: dict = {}  # compiles running now: by request key, and by program key where no user code ran
        self.inflight_lock = threading.Lock()
        self.stops = Stops()  # a job queued here is stopped before it starts; one on a Ray node runs to its end
        self.backend.start()

    def close(self) -> None:
        self.backend.shutdown()


_state: JobLayer | None = None
_state_lock = threading.Lock()


_exit_hook = False


def state(settings: Settings | None = None) -> JobLayer:
    """The server-wide parts, made on first use from `settings` (else this process's settings)."""
    global _state, _exit_hook
    with _state_lock:
        if not _exit_hook:
            # Before the state is made: a stop (SIGTERM, Ctrl-C) that lands half-way through making it still
            # removes whatever folders it had created by then.
            atexit.register(shutdown)
            _exit_hook = True
        if _state is None:
            _state = JobLayer(settings or current())
        return _state


def start(settings: Settings | None = None) -> dict:
    """Probe the sandbox and start the spare workers now (the app calls this at start-up; run_job would anyway)."""
    state(settings)
    return health()


def shutdown() -> None:
    """Stop the spare workers and remove their folders (tests; atexit does it for a server)."""
    global _state
    with _state_lock:
        if _state is not None:
            _state.close()
            _state = None
        sandbox.remove_jobs_root()


def _clean_options(options: dict | None) -> dict:
    out = {}
    for k, v in (options or {}).items():
        if k in OPTIONS and v is not None:
            out[k] = OPTIONS[k](v)
    if "max_configs" in out:
        out["max_configs"] = max(1, min(256, out["max_configs"]))
    return out


def run_job(action: str, kernel: str, source: str | None = None, params: dict | None = None, *,
            arch: str | None = None, options: dict | None = None, session: str = "anon",
            on_progress: Callable[[str, float], None] | None = None, timeout: float | None = None,
            owner: str | None = None, on_partial: Callable[[dict], None] | None = None,
            background: bool = False) -> Answer:
    """Run one compile/run/tune/sweep in a sandboxed process of its own; block until it answers; never raise.
    `session`: the student the limits count (a queue.Student also names its address where names are free);
    `owner` (the page's browser tab) may stop it: stop(owner). `on_partial` hears a compile's partial answer (its
    CUDA, line map and origins, the moment lowering ends; bounded like every answer). `background`: a compile
    nobody waits for (prewarm): its own slot, its processes niced."""
    def progress(what: str, fraction: float) -> None:
        if on_progress:
            try:
                on_progress(what, fraction)
            except Exception:  # a page whose browser went away must not break the job
                pass
    asked = time.monotonic()  # a stop from now on reaches this job, wherever it waits
    try:
        student = session if isinstance(session, Student) and session else str(session or "anon")  # (its address)
        return _run_job(action, kernel, source, params, arch, options, student, progress, timeout, owner, asked,
                        on_partial, background)
    except Exception as exc:
        log.exception("run_job failed")
        return failed(StageError("internal", f"{type(exc).__name__}: {exc}"[:500], None,
                                 clip(format_exception(exc))), action, str(kernel))


class _Compile:
    """What the cache knows of one compile request: its keys, whose entries it may read and write."""

    def __init__(self, st: JobLayer, action, kernel, source, params, arch, options, session):
        self.tuned = _tuned_digest(st, kernel)
        self.request = (action, kernel, source, params, arch, options)
        self.arch = arch
        self.key = request_key(*self.request, self.tuned)
        self.text = source_text(kernel, source)
        self.trusted = no_user_code(kernel, source)  # the catalogue's own kernel, unedited: entries for everyone
        own = writer_of(session)
        self.writer = SHARED if self.trusted else own
        # A job that ran no user code keeps what it makes for everyone, so it reads only what everyone may: a
        # student's own entries (which their own code may have forged) must not reach it and through it the class.
        self.readers = [SHARED] if self.trusted else [SHARED] + ([own] if own else [])

    @functools.cached_property
    def program(self) -> str | None:
        """The key of the source's program, made when first asked for: an answer found by its request's key needs
        no tokenizing of the source (a cached answer is tens of ms of the server's time, the tokenizing a third)."""
        return program_key(*self.request, self.tuned)


def _run_job(action, kernel, source, params, arch, options, session, progress, timeout, owner, asked,
             on_partial=None, background=False) -> Answer:
    kernel = str(kernel)
    if action not in ACTIONS:
        return failed(StageError("parameters", f"unknown action {action!r}; one of {', '.join(ACTIONS)}"),
                      action, kernel)
    if "/" in kernel or "\\" in kernel or kernel.endswith(".py"):  # the command line's paths are not for the page
        return failed(StageError("parameters", f"kernel {quoted(kernel, 100)} is neither a kernel of the catalogue "
                                               "nor \"\" (a kernel of your own, sent as the source)"), action, kernel)
    if action == "describe":
        timeout = timeout or DESCRIBE_TIMEOUT
    if source is not None and not isinstance(source, str):
        return failed(StageError("parameters", "the source must be text"), action, kernel)
    if source is not None and len(source) > SOURCE_LIMIT:
        return failed(StageError("python", f"the source is longer than the {SOURCE_LIMIT // 1024} KiB a kernel "
                                           "file may have"), action, kernel)  # (the stage the engine's check names)
    try:
        params = json.loads(json.dumps(params or {}))
        options = _clean_options(options)
    except (TypeError, ValueError) as exc:
        return failed(StageError("parameters", f"parameters and options must be plain values: {exc}"),
                      action, kernel)
    if not isinstance(params, dict):
        return failed(StageError("parameters", "parameters must be an object of NAME: VALUE"), action, kernel)
    try:  # before a worker is spent on it
        ranges.check_source(source)
        ranges.check_arch(arch)
    except StageError as err:
        return failed(StageError(err.stage, err.message, err.line), action, kernel)
    st = state()
    refused = st.backend.refused()  # (on a Ray cluster jobs run on the nodes, each with its own sandbox)
    if refused:
        return failed(StageError("internal", refused), action, kernel)
    gpu = action in GPU_ACTIONS
    if gpu and not st.gpus:
        return failed(StageError("device", NO_GPU), action, kernel)
    arch = arch or hardware.default_arch(st.settings)
    timeout = float(timeout or st.settings.timeout(action)) * (BACKGROUND_TIME if background else 1)

    if action != "compile":  # only compile answers are cached (result_cache.cacheable): no key to make
        return _execute(st, action, kernel, source, params, arch, options, session, progress, timeout, None, owner,
                        asked)
    c = _Compile(st, action, kernel, source, params, arch, options, session)
    # One compile per key at a time: a class opening the same kernel at once (or a double click) waits for the
    # compile already running instead of queueing copies of it, then reads its answer from the cache; so does an
    # edit of a shipped kernel that lays it out anew while that kernel compiles.
    # An answer that came after waiting for another request's compile says how long it waited (`waited_s`): for
    # this request it was a compile, not a look-up.
    waited: dict = {}
    for _ in range(2):
        hit = st.cache.get(c.key)
        if hit is not None:
            progress("cached: the same source, parameters and target were compiled before", 1.0)
            return {**hit, "cached": True, **waited}
        hit = st.cache.get_program(c.program, c.readers, c.text) if c.program and c.text is not None else None
        if hit is not None:
            progress("cached: the same program was compiled before (only comments, blank lines or spacing differ)",
                     1.0)
            return {**hit, "cached": True, "cached_as": "program", **waited}
        with st.inflight_lock:
            running = st.inflight.get(c.key) or (st.inflight.get(("program", c.program)) if c.program else None)
            if running is None:
                st.inflight[c.key] = done = threading.Event()
                if c.trusted and c.program:
                    st.inflight[("program", c.program)] = done
                break
        progress("the same compile is running for another request: waiting for its answer", 0.0)
        began = time.monotonic()
        until = began + timeout
        try:  # the wait counts as one of the student's jobs in flight
            with st.scheduler.waiting_in_place(ANONYMOUS if background else session):
                while not running.wait(0.5) and time.monotonic() < until:
                    if st.stops.stopped_since(owner, asked):
                        return failed(StageError("stopped", STOPPED_WAITING), action, kernel)
        except Busy as busy:
            return failed(busy_error(busy), action, kernel)
        waited = {"waited_s": round(time.monotonic() - began, 2)}
    else:  # that compile gave no answer worth sharing (a timeout, say): run one of our own
        return _execute(st, action, kernel, source, params, arch, options, session, progress, timeout, c, owner,
                        asked, on_partial, background)
    try:
        return _execute(st, action, kernel, source, params, arch, options, session, progress, timeout, c, owner,
                        asked, on_partial, background)
    finally:
        with st.inflight_lock:
            st.inflight.pop(c.key, None)
            if c.trusted and c.program:
                st.inflight.pop(("program", c.program), None)
        done.set()


STOPPED_WAITING = "stopped by you before it started"


def busy_error(busy: Busy) -> StageError:
    """A refusal of the queue's, as the page shows it: what is full, and when to try again."""
    return StageError("busy", f"{busy}: try again in {max(1, round(busy.retry_after))} s")


BACKGROUND_TIME = 4  # a background compile's time limit, in compile limits: it runs niced, on the CPU left over


def _exchange(st: JobLayer, c: _Compile | None, on_partial) -> Exchange | None:
    """A compile's partial answer to the page; an answer kept for its TIR, and nvcc's output kept for its CUDA (each
    by the writers its reader trusts), back to the job."""
    if c is None:
        return None

    def known(partial: dict) -> dict | None:
        if not (isinstance(partial.get("cuda"), str) and isinstance(partial.get("nvcc"), dict)):
            return None
        return st.cache.get_nvcc(nvcc_key(partial["cuda"], partial["nvcc"], tilelang_version()), c.readers)

    def known_tir(tir: dict) -> dict | None:
        return st.cache.get_tir(tir_key(tir["digest"], c.arch), c.readers)
    return Exchange(partial=on_partial, known=known, known_tir=known_tir)


def _keep(st: JobLayer, c: _Compile, result: dict, exchange: Exchange | None) -> None:
    """Keep what a compile's answer gives: the answer for its request (everyone's), and, where the job's writer may
    be trusted by others or by themselves, its program and nvcc's output for its CUDA."""
    st.cache.put(c.key, result)
    if c.writer is None or not laid_out(result):
        return
    if c.program and c.text is not None:
        st.cache.put_program(c.program, c.writer, c.key, c.text)
    tir = exchange.tir if exchange is not None else None
    if tir and not result.get("lowering_reused"):  # (a reused answer's TIR is kept already)
        st.cache.put_tir(tir_key(tir["digest"], c.arch), c.writer, c.key, result, tir["spans"])
    lowered = exchange.lowered if exchange is not None else None
    entry = nvcc_entry(result, lowered, exchange.made if exchange is not None else None)
    if entry is not None and isinstance(lowered.get("nvcc"), dict):
        st.cache.put_nvcc(nvcc_key(lowered["cuda"], lowered["nvcc"], tilelang_version()), c.writer, entry)


def _execute(st, action, kernel, source, params, arch, options, session, progress, timeout,
             c: _Compile | None, owner: str | None = None, asked: float | None = None, on_partial=None,
             background: bool = False) -> Answer:
    gpu = action in GPU_ACTIONS
    started = time.monotonic()
    asked = started if asked is None else asked
    exchange = _exchange(st, c, on_partial)
    kind = "gpu" if gpu else "background" if background else "cpu"
    try:
        with st.scheduler.slot(kind, ANONYMOUS if background else session, progress,
                               stop_if=lambda: st.stops.stopped_since(owner, asked)) as token, \
                st.stops.track(owner, asked) as ticket:
            if ticket.stopped:
                return failed(StageError("stopped", STOPPED_WAITING), action, kernel)
            progress("starting", 0.0)
            request = {"action": action, "kernel": kernel, "source": source, "params": params, "arch": arch,
                       "options": options}
            result = st.backend.run(request, gpu=token if gpu else None, timeout=timeout, progress=progress,
                                    started=lambda job: st.stops.attach(ticket, job), files=_tuned_files(st),
                                    **({"exchange": exchange} if exchange is not None else {}),
                                    **({"background": True} if background else {}))
            if ticket.stopped:
                return failed(StageError("stopped", f"stopped by you after {time.monotonic() - started:.1f} s"),
                              action, kernel)
            if action == "tune":
                _keep_tuned_config(st, kernel, source, result)
    except Busy as busy:
        return failed(busy_error(busy), action, kernel)
    except Stopped:
        return failed(StageError("stopped", STOPPED_WAITING), action, kernel)
    if not isinstance(result, dict):
        return failed(StageError("internal", "the job answered something other than a JSON object"),
                      action, kernel)
    result = bound_answer(result)  # (a local job's is cut as it is read; a Ray node's is cut here too)
    result.setdefault("kernel", kernel)
    result["action"] = action
    result.setdefault("job_seconds", round(time.monotonic() - started, 3))
    if c is not None and cacheable(action, result):
        _keep(st, c, result, exchange)
    return result


# -- the pre-warm ------------------------------------------------------------------------------------------------------
# The shipped kernels at the page's first request of each, compiled into the cache when the server starts (and when
# the image is built, into its data folder), so the first student's first compile is answered from the cache. Each
# in the queue's background slot (never a student's), its processes niced: students' jobs get the cores first.
def prewarm(requests: list[tuple[str, dict]], *, wait: bool = False,
            settings: Settings | None = None) -> threading.Thread | list[dict]:
    """Compile each (kernel, params) of the catalogue, unedited, for the default arch, one after the other, in the
    background (`wait`: here, before returning, with each compile's answer). Those already kept cost nothing."""
    st = state(settings)
    answers: list[dict] = []

    def work():
        for kernel, params in requests:
            if _state is not st:
                return
            if (why := st.backend.refused()):
                answers.append(failed(StageError("internal", why), "compile", kernel))
                return
            result = run_job("compile", kernel, None, params, session=ANONYMOUS, background=True)
            answers.append(result)
            log.info("pre-warm: %s %s: %s", kernel, json.dumps(params, sort_keys=True),
                     "kept" if result.get("ok") else (result.get("error") or {}).get("message"))
    if wait:
        work()
        return answers
    thread = threading.Thread(target=work, daemon=True, name="prewarm")
    thread.start()
    return thread


# -- the users' tuned configs ----------------------------------------------------------------------------------------
# A tuning run's best verified config is picked again for the nearest problem of its shape class (config_choice.py).
# A job's data folder is its own and goes with it, so the server keeps the table (in its data folder, beside the
# class's database): copied into each job before it starts, and extended from a tuning run of a shipped kernel that
# ran unedited (no user code, so nobody can plant a config that others then get).
def _tuned_table(st: JobLayer):
    return st.settings.data_dir / config_choice.USER_TABLE


def _tuned_digest(st: JobLayer, kernel: str) -> str:
    """A digest of the table's entries for `kernel`: a tuning run of one kernel leaves the others' cached compiles
    reachable."""
    try:
        entries = json.loads(_tuned_table(st).read_text()).get("entries") or []
    except (OSError, ValueError, AttributeError):
        return ""
    mine = [e for e in entries if isinstance(e, dict) and e.get("kernel") == kernel]
    return hashlib.sha256(json.dumps(mine, sort_keys=True).encode()).hexdigest()[:16] if mine else ""


def _tuned_files(st: JobLayer) -> dict[str, dict[str, bytes]]:
    """The table, as files for the job's data folder (a Ray node's jobs read their own node's: a job's folder is on
    the node, where the server writes nothing)."""
    table = _tuned_table(st)
    try:
        return {"data": {table.name: table.read_bytes()}}
    except OSError:  # none kept yet
        return {}


def _plain(value) -> bool:
    return isinstance(value, (bool, int, float)) or (isinstance(value, str) and len(value) <= 64)


def _keep_tuned_config(st: JobLayer, kernel: str, source: str | None, result: dict) -> None:
    """Store the run's best config in the server's table, if the job ran no user code (then its answer is the
    engine's own: store_best kept only a real search from the engine's starting config) and it is faster than what
    the table holds for that problem; the answer then says so (and names no server path)."""
    if not (isinstance(result, dict) and result.get("ok") and no_user_code(kernel, source)):
        return
    best = result.get("best") if isinstance(result.get("best"), dict) else {}
    stored = best.get("stored") if isinstance(best.get("stored"), dict) else {}
    problem, tile, gpu = stored.get("problem"), stored.get("tile"), stored.get("gpu")
    if not (stored.get("ok") and stored.get("kernel") == kernel and isinstance(problem, dict)
            and isinstance(tile, dict) and isinstance(gpu, str) and len(gpu) <= 128 and 0 < len(tile) <= 32
            and all(_plain(v) for v in [*problem.values(), *tile.values()])):
        return
    try:
        median = stored.get("median_ms")
        config_choice.remember(kernel, problem, str(stored.get("dtype")), tile, gpu,
                               float(median) if isinstance(median, (int, float)) else None, path=_tuned_table(st),
                               keep_faster=True)
    except OSError as exc:
        best["stored"] = {"ok": False, "why": f"the server could not keep it: {exc.strerror or exc}"}
        return
    best["stored"] = {"ok": True, "gpu": gpu, "tuned_for": stored.get("tuned_for"), "table": "the server's"}


def stop(owner: str) -> dict:
    """Stop every job `owner` started: {"killed", "left" (on Ray nodes, running on to their end), "waiting"}."""
    return state().stops.stop(str(owner))


def health() -> dict:
    """For /health and the page's footer: is the server fine, what GPU, how jobs are sandboxed, how full the queue."""
    try:
        st = state()
        backend = st.backend
        part = backend.health()  # {"gpus", "spares", "cluster": the Ray cluster's address, nodes, GPU workers}
        refused = backend.refused()
        return {
            "ok": not refused,  # a server that runs no job is not healthy (Docker's HEALTHCHECK: unhealthy)
            "jobs": "refused" if refused else "run",
            "jobs_refused": refused,  # why no job runs, and the fix (sandbox.REFUSED)
            "gpu": part["gpus"][0]["name"] if part["gpus"] else None,
            "gpus": part["gpus"],
            "sandbox": backend.mode.kind,
            "sandbox_why": backend.mode.why,
            "sandbox_detail": backend.mode.to_json(st.settings),
            "queue": st.scheduler.snapshot(),
            "spares": part["spares"],
            "cache": st.cache.snapshot(),
            "tilelang": tilelang_version(),
            "backend": backend.name,
            "cluster": part["cluster"],
        }
    except Exception as exc:
        return {"ok": False, "error": f"{type(exc).__name__}: {exc}", "gpu": None, "sandbox": "unknown",
                "queue": {}}
