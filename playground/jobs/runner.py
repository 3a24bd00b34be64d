"""run_job: one request from the page to an answer, through the result cache, the queue and a sandboxed worker.

    request ─► checks ─► result cache (compile) ─► per-session limits + queue ─► pre-started worker ─► answer
                                  ▲                                                        │
                                  └──────────── compile answers worth keeping ◄────────────┘

Never raises: every failure, ours included, is an answer with an error stage, so the page always has something to
show. The server process itself never imports user code, torch's CUDA, or TileLang.
"""
from __future__ import annotations

import atexit
import hashlib
import json
import logging
import os
import threading
import time
from typing import Callable

from ..engine import config_choice, ranges
from ..engine.errors import StageError, clip, format_exception, quoted
from ..engine.source import SOURCE_LIMIT  # (refused here before a job starts)
from ..settings import Settings, current
from . import hardware, ray_backend, sandbox
from .result_cache import ROOT, ResultCache, cacheable, request_key, tilelang_version
from .job import bound_answer, error
from .pool import Pool
from .queue import Busy, Scheduler, Stopped, Stops, Student

log = logging.getLogger("playground.jobs")
ACTIONS = ("compile", "run", "tune", "sweep", "build_submission", "grade", "ir", "profile", "memcheck")
ACTIONS += ("describe",)  # a kernel's parameters, read from the source sent (the page's controls), on the CPU
DESCRIBE_TIMEOUT = 60.0   # seconds: importing the file and tracing an eager kernel's shapes, no compile
GPU_ACTIONS = ("run", "tune", "sweep", "grade", "profile", "memcheck")  # build_submission, grade: a submission
# (engine/grading.py); ir: the lowering pass by pass, on the CPU like a compile (engine/ir.py); profile, memcheck:
# Nsight Compute and compute-sanitizer over the kernel (engine/profile.py), the GPU taken alone like a run
OPTIONS = {"seed": int, "graph": bool, "max_configs": int}  # what a caller may pass through to the engine
NO_GPU = ("no CUDA GPU is present on this server: compile works without one, run, tune and sweep need one")


class _State:
    """The server-wide parts, made on first use: the queue, the spare workers, the result cache."""
    cluster = None  # jobs run here; ray_backend.ClusterState, with its Cluster, when the setting `ray` is set

    def __init__(self, settings: Settings):
        self.settings = settings
        self.mode = sandbox.mode(settings)  # probes bwrap once and logs the warning if jobs cannot be sandboxed
        self.gpus = hardware.gpus(settings)
        cpu_slots = settings.compile_processes
        self.scheduler = Scheduler(cpu_slots, [g["index"] for g in self.gpus], settings)
        spares = settings.spares if settings.spares is not None else min(cpu_slots + 1, 6)
        self.pools = {("cpu", None): Pool(False, spares, None, settings)}
        for g in self.gpus:
            self.pools[("gpu", g["index"])] = Pool(True, 1, g["index"], settings)
        self.cache = ResultCache()
        self.inflight: dict[str, threading.Event] = {}  # compiles running now, by request key
        self.inflight_lock = threading.Lock()
        self.stops = Stops()
        self.ceilings: dict[str, str] = {}  # file name -> JSON of this GPU's measured ceilings (see _seed_ceilings)
        for pool in self.pools.values():
            pool.fill_later()

    def close(self) -> None:
        for pool in self.pools.values():
            pool.close()
        sandbox.remove_jobs_root()


_state: _State | None = None
_state_lock = threading.Lock()


_exit_hook = False


def state(settings: Settings | None = None) -> _State:
    """The server-wide parts, made on first use from `settings` (else this process's settings)."""
    global _state, _exit_hook
    with _state_lock:
        if not _exit_hook:
            # Before the state is made: a stop (SIGTERM, Ctrl-C) that lands half-way through making it still
            # removes whatever folders it had created by then.
            atexit.register(shutdown)
            _exit_hook = True
        if _state is None:
            settings = settings or current()
            _state = ray_backend.ClusterState(settings) if settings.ray else _State(settings)
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
            owner: str | None = None) -> dict:
    """Run one compile/run/tune/sweep in a sandboxed process of its own; block until it answers; never raise.
    `session`: the student the limits count (a queue.Student also names its address where names are free);
    `owner` (the page's browser tab) may stop it: stop(owner)."""
    def progress(what: str, fraction: float) -> None:
        if on_progress:
            try:
                on_progress(what, fraction)
            except Exception:  # a page whose browser went away must not break the job
                pass
    asked = time.monotonic()  # a stop from now on reaches this job, wherever it waits
    try:
        student = session if isinstance(session, Student) and session else str(session or "anon")  # (its address)
        return _run_job(action, kernel, source, params, arch, options, student, progress, timeout, owner, asked)
    except Exception as exc:
        log.exception("run_job failed")
        return error(action, str(kernel), "internal", f"{type(exc).__name__}: {exc}"[:500],
                     clip(format_exception(exc)))


def _run_job(action, kernel, source, params, arch, options, session, progress, timeout, owner, asked) -> dict:
    kernel = str(kernel)
    if action not in ACTIONS:
        return error(action, kernel, "parameters", f"unknown action {action!r}; one of {', '.join(ACTIONS)}")
    if "/" in kernel or "\\" in kernel or kernel.endswith(".py"):  # the command line's paths are not for the page
        return error(action, kernel, "parameters", f"kernel {quoted(kernel, 100)} is neither a kernel of the catalogue "
                                                   "nor \"\" (a kernel of your own, sent as the source)")
    if action == "describe":
        timeout = timeout or DESCRIBE_TIMEOUT
    if source is not None and not isinstance(source, str):
        return error(action, kernel, "parameters", "the source must be text")
    if source is not None and len(source) > SOURCE_LIMIT:
        return error(action, kernel, "python", f"the source is longer than the {SOURCE_LIMIT // 1024} KiB a kernel "
                                               "file may have")  # (the stage the engine's own size check names)
    try:
        params = json.loads(json.dumps(params or {}))
        options = _clean_options(options)
    except (TypeError, ValueError) as exc:
        return error(action, kernel, "parameters", f"parameters and options must be plain values: {exc}")
    if not isinstance(params, dict):
        return error(action, kernel, "parameters", "parameters must be an object of NAME: VALUE")
    try:  # before a worker is spent on it
        ranges.check_source(source)
        ranges.check_arch(arch)
    except StageError as err:
        return error(action, kernel, err.stage, err.message, line=err.line)
    st = state()
    if st.mode.refused and not st.cluster:  # (on a Ray cluster jobs run on the nodes, each with its own sandbox)
        return error(action, kernel, "internal", st.mode.refused)
    gpu = action in GPU_ACTIONS
    if gpu and not st.gpus:
        return error(action, kernel, "device", NO_GPU)
    arch = arch or hardware.default_arch(st.settings)
    timeout = float(timeout or st.settings.timeout(action))

    if action != "compile":  # only compile answers are cached (result_cache.cacheable): no key to make
        return _execute(st, action, kernel, source, params, arch, options, session, progress, timeout, None, owner, asked)
    key = request_key(action, kernel, source, params, arch, options, _tuned_digest(st, kernel))
    # One compile per key at a time: a class opening the same kernel at once (or a double click) waits for the
    # compile already running instead of queueing copies of it, then reads its answer from the cache.
    for _ in range(2):
        hit = st.cache.get(key)
        if hit is not None:
            progress("cached: the same source, parameters and target were compiled before", 1.0)
            return {**hit, "cached": True}
        with st.inflight_lock:
            running = st.inflight.get(key)
            if running is None:
                st.inflight[key] = done = threading.Event()
                break
        progress("the same compile is running for another request: waiting for its answer", 0.0)
        until = time.monotonic() + timeout
        while not running.wait(0.5) and time.monotonic() < until:
            if st.stops.stopped_since(owner, asked):
                return error(action, kernel, "stopped", STOPPED_WAITING)
    else:  # that compile gave no answer worth sharing (a timeout, say): run one of our own
        return _execute(st, action, kernel, source, params, arch, options, session, progress, timeout, key, owner, asked)
    try:
        return _execute(st, action, kernel, source, params, arch, options, session, progress, timeout, key, owner, asked)
    finally:
        with st.inflight_lock:
            st.inflight.pop(key, None)
        done.set()


STOPPED_WAITING = "stopped by you before it started"


def _execute(st, action, kernel, source, params, arch, options, session, progress, timeout,
             key: str | None, owner: str | None = None, asked: float | None = None) -> dict:
    gpu = action in GPU_ACTIONS
    started = time.monotonic()
    asked = started if asked is None else asked
    try:
        with st.scheduler.slot("gpu" if gpu else "cpu", session, progress,
                               stop_if=lambda: st.stops.stopped_since(owner, asked)) as token, \
                st.stops.track(owner, asked) as ticket:
            if ticket.stopped:
                return error(action, kernel, "stopped", STOPPED_WAITING)
            progress("starting", 0.0)
            pool = st.pools[("gpu", token) if gpu else ("cpu", None)]
            job = pool.take()
            try:
                st.stops.attach(ticket, job)  # a stop that came while the worker got ready kills it now
                request = {"action": action, "kernel": kernel, "source": source, "params": params, "arch": arch,
                           "options": options}
                if gpu:
                    _seed_ceilings(st, job)
                _seed_tuned_table(st, job)
                result = job.run(request, timeout, progress)
                if ticket.stopped:
                    return error(action, kernel, "stopped", f"stopped by you after {time.monotonic() - started:.1f} s")
                if gpu and _no_user_code(kernel, source) and isinstance(result, dict) and result.get("ok"):
                    _harvest_ceilings(st, job)
                if action == "tune":
                    _keep_tuned_config(st, kernel, source, result)
            finally:
                job.close()  # before the slot is freed: the next job gets a GPU with nothing of this one on it
                pool.fill_later()
    except Busy as busy:
        wait = max(1, round(busy.retry_after))
        return error(action, kernel, "busy", f"{busy}: try again in {wait} s")
    except Stopped:
        return error(action, kernel, "stopped", STOPPED_WAITING)
    if not isinstance(result, dict):
        return error(action, kernel, "internal", "the job answered something other than a JSON object")
    result = bound_answer(result)  # (a local job's is cut as it is read; a Ray node's is cut here too)
    result.setdefault("kernel", kernel)
    result["action"] = action
    result.setdefault("job_seconds", round(time.monotonic() - started, 3))
    if key is not None and cacheable(action, result):
        st.cache.put(key, result)
    return result


# -- the GPU's ceilings ------------------------------------------------------------------------------------------
# A run reports percentages of this GPU's measured copy bandwidth and matmul rate (playground.engine.device.ceilings),
# which the engine measures once and caches in its cache folder. A job's cache folder is its own, so each run would
# measure them again (about 2 s of exclusive GPU time). The server keeps them instead: taken from a job that ran
# no user code (the catalogue's own kernel, so nobody can plant flattering ceilings), written into every later GPU
# job's folder before it starts.
def _no_user_code(kernel: str, source: str | None) -> bool:
    builtin = ROOT / "kernels" / f"{os.path.basename(kernel)}.py"
    return source is None or (builtin.is_file() and source == builtin.read_text())


def _harvest_ceilings(st: _State, job) -> None:
    for path in (job.dir / "cache" / "ceilings").glob("*.json"):
        try:
            text = path.read_text()
            json.loads(text)
        except (OSError, ValueError):
            continue
        st.ceilings[path.name] = text


def _seed_ceilings(st: _State, job) -> None:
    if st.ceilings:
        _give_job_files(job, "cache/ceilings", {name: text.encode() for name, text in st.ceilings.items()},
                        "the GPU's ceilings")


def _give_job_files(job, folder: str, files: dict[str, bytes], what: str) -> None:
    """Write `files` into `folder` (relative) of the job's own folder before it starts, owned by the job's uid so
    it may read and replace them. A Ray node's job has no folder on this machine (ray_backend.ClusterJob): nothing
    to write there."""
    if not job.dir.is_dir():
        return
    target = job.dir / folder
    try:
        target.mkdir(parents=True, exist_ok=True)
        for name, data in files.items():
            (target / name).write_bytes(data)
        if job.uid is not None:
            made = [p for p in (target, *target.parents) if p.is_relative_to(job.dir) and p != job.dir]
            for p in (*made, *(target / name for name in files)):
                os.chown(p, job.uid, job.uid)
    except OSError:
        log.warning("could not give a job %s", what, exc_info=True)


# -- the users' tuned configs ----------------------------------------------------------------------------------------
# A tuning run's best verified config is picked again for the nearest problem of its shape class (config_choice.py).
# A job's data folder is its own and goes with it, so the server keeps the table (in its data folder, beside the
# class's database): copied into each job before it starts, and extended from a tuning run of a shipped kernel that
# ran unedited (no user code, so nobody can plant a config that others then get).
def _tuned_table(st: _State):
    return st.settings.data_dir / config_choice.USER_TABLE


def _tuned_digest(st: _State, kernel: str) -> str:
    """A digest of the table's entries for `kernel`: a tuning run of one kernel leaves the others' cached compiles
    reachable."""
    try:
        entries = json.loads(_tuned_table(st).read_text()).get("entries") or []
    except (OSError, ValueError, AttributeError):
        return ""
    mine = [e for e in entries if isinstance(e, dict) and e.get("kernel") == kernel]
    return hashlib.sha256(json.dumps(mine, sort_keys=True).encode()).hexdigest()[:16] if mine else ""


def _seed_tuned_table(st: _State, job) -> None:
    table = _tuned_table(st)
    try:
        data = table.read_bytes()
    except OSError:  # none kept yet
        return
    _give_job_files(job, "data", {table.name: data}, "the table of tuned configs")


def _plain(value) -> bool:
    return isinstance(value, (bool, int, float)) or (isinstance(value, str) and len(value) <= 64)


def _keep_tuned_config(st: _State, kernel: str, source: str | None, result: dict) -> None:
    """Store the run's best config in the server's table, if the job ran no user code (then its answer is the
    engine's own: store_best kept only a real search from the engine's starting config) and it is faster than what
    the table holds for that problem; the answer then says so (and names no server path)."""
    if not (isinstance(result, dict) and result.get("ok") and _no_user_code(kernel, source)):
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
        gpus = st.gpus if st.cluster else hardware.gpus(st.settings)
        refused = st.mode.refused if not st.cluster else None
        return {
            "ok": not refused,  # a server that runs no job is not healthy (Docker's HEALTHCHECK: unhealthy)
            "jobs": "refused" if refused else "run",
            "jobs_refused": refused,  # why no job runs, and the fix (sandbox.REFUSED)
            "gpu": gpus[0]["name"] if gpus else None,
            "gpus": gpus,
            "sandbox": st.mode.kind,
            "sandbox_why": st.mode.why,
            "sandbox_detail": st.mode.to_json(st.settings),
            "queue": st.scheduler.snapshot(),
            "spares": {f"{k}{'' if i is None else i}": p.snapshot() for (k, i), p in st.pools.items()},
            "cache": st.cache.snapshot(),
            "tilelang": tilelang_version(),
            "backend": "ray" if st.cluster else "local",
            "cluster": st.cluster.health() if st.cluster else None,  # the Ray cluster's address, nodes, GPU workers
        }
    except Exception as exc:
        return {"ok": False, "error": f"{type(exc).__name__}: {exc}", "gpu": None, "sandbox": "unknown",
                "queue": {}}
