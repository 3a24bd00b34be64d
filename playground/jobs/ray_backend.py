"""Jobs on a Ray cluster of GPU nodes (setting `ray`, env PLAYGROUND_RAY=<address>): the same sandboxed jobs, run on
other machines.

    web server: run_job (checks, result cache, per-student limits, the queue: unchanged, in front of Ray)
        └─ Cluster ── JSON lines ──► bridge process (the Ray driver)
                                        ├─► GpuWorker actors: one per GPU (num_gpus=1, plus the GPU's arch resource,
                                        │   e.g. {"sm_90a": 1}), long-lived, one job at a time: run, tune, sweep
                                        └─► compile tasks (num_cpus=1), anywhere in the cluster
    on the node: the Job of job.py (bubblewrap, limits, a pre-started worker) runs the engine exactly as on one server

- The server's queue hands out one token per GPU actor, so queue positions and waits are those of the cluster's GPUs,
  and an actor takes one job at a time besides (a retry or a second caller waits on the actor, never shares the GPU).
- A node says which GPUs it has with a custom resource named for their arch (`ray start --resources='{"sm_90a": 8}'`);
  a job for an arch goes only to actors of that arch.
- Results are the engine's JSON plus `ran_on`: {"node", "hostname", "gpu", "arch", "slot", "pid", "started",
  "finished"} (wall-clock seconds on that node).
- A worker that dies mid-job (its process or node is gone): a compile is retried once by Ray (max_retries=1), a GPU job
  once on another GPU of its arch by us (the answer says so in `retried`); a second death is a clear error.
- Why a bridge process: a Ray driver that loses its cluster for a while ends its own process ("Failed to connect to
  GCS ... The program will terminate"). The web server must stay up and say the cluster is gone, so the driver is a
  child process; when it ends, waiting jobs get a clear answer at once and the next job starts a new one.
"""
from __future__ import annotations

import atexit
import json
import logging
import os
import re
import signal
import socket
import subprocess
import sys
import threading
import time
from collections import deque
from typing import Callable

from ..engine.answers import Answer, failed
from ..engine.errors import StageError
from ..settings import Settings
from . import sandbox
from .backend import Ceilings, JobFiles, Progress
from .job import Exchange

log = logging.getLogger("playground.jobs")
NAMESPACE = "tilelang-playground"
ARCH_RESOURCE = re.compile(r"^sm_\d+a?$")  # a node's custom resource naming its GPUs' arch
CONNECT_TIMEOUT = 120.0   # seconds for the bridge to reach the cluster and start its GPU actors
ANSWER_SLACK = 60.0       # seconds past a job's own limit before the server stops waiting for the cluster
RESTART_EVERY = 10.0      # seconds between two attempts to reach a cluster that is gone
GCS_LOST_AFTER = "20"     # seconds a driver keeps trying to reach a lost head before Ray ends it (Ray's default: 60)
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


class ClusterUnavailable(Exception):
    pass


# -- on the cluster's nodes ----------------------------------------------------------------------------------------
def _here() -> dict:
    import ray
    return {"node": ray.util.get_node_ip_address(), "hostname": socket.gethostname(), "pid": os.getpid()}


class GpuWorker:
    """One GPU for the server's lifetime: one job at a time on it, a sandboxed worker pre-started for the next."""

    def __init__(self, slot: int, arch: str):
        import ray
        from .pool import Pool
        ids = ray.get_gpu_ids()  # Ray points CUDA_VISIBLE_DEVICES of this process at the GPU it reserved for us
        self.slot, self.arch = slot, arch
        self.gpu = int(ids[0]) if ids else None
        self.one_job = threading.Lock()  # the actor is threaded (progress is read while a job runs)
        self.now: tuple[str, float] | None = None
        self.ceilings = Ceilings()  # this GPU's measured ceilings (backend.py)
        self.pool = Pool(True, 1, self.gpu)
        self.pool.fill_later()
        atexit.register(self.pool.close)

    def where(self) -> dict:
        return {**_here(), "gpu": self.gpu, "arch": self.arch, "slot": self.slot}

    def run(self, request: dict, timeout: float) -> dict:
        with self.one_job:
            started = time.time()
            self.now = ("starting", 0.0)
            try:
                job = self.pool.take()
            except sandbox.Refused as refused:  # this node cannot make the sandbox: no job runs on it
                self.now = None
                return failed(StageError("internal", str(refused)), request["action"], request["kernel"],
                              ran_on=self.where())
            try:
                self.ceilings.seed(job)
                result = job.run(request, timeout, self._progress)
                self.ceilings.harvest(job, request, result)
            finally:
                job.close()  # before the next job: nothing of this one left on the GPU
                self.pool.fill_later()
                self.now = None
            return {**result, "ran_on": {**self.where(), "started": started, "finished": time.time()}}

    def _progress(self, what: str, fraction: float) -> None:
        self.now = (what, fraction)

    def progress(self) -> tuple[str, float] | None:
        return self.now


_compile_pool = None


def compile_task(request: dict, timeout: float) -> dict:
    """A compile in a Ray worker process; the process keeps one sandboxed worker pre-started for its next compile."""
    global _compile_pool
    from .pool import Pool
    if _compile_pool is None:
        _compile_pool = Pool(False, 1)
        atexit.register(_compile_pool.close)
    started = time.time()
    try:
        job = _compile_pool.take()
    except sandbox.Refused as refused:  # this node cannot make the sandbox: no job runs on it
        return failed(StageError("internal", str(refused)), request["action"], request["kernel"])
    try:
        result = job.run(request, timeout, lambda *_: None)
    finally:
        job.close()
        _compile_pool.fill_later()
    return {**result, "ran_on": {**_here(), "gpu": None, "arch": None, "slot": None, "started": started,
                                 "finished": time.time()}}


# -- the bridge: the Ray driver, a child process of the web server -------------------------------------------------
class _Bridge:
    def __init__(self, address: str, out):
        import ray
        from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy
        self.ray, self.address, self.out = ray, address, out
        self.send_lock = threading.Lock()
        ray.init(address=address, namespace=NAMESPACE, log_to_driver=False, configure_logging=False)
        self.compile = ray.remote(num_cpus=1, max_retries=1)(compile_task)
        actor = ray.remote(GpuWorker)
        self.workers: list[dict] = []
        for node in ray.nodes():
            if not node.get("Alive"):
                continue
            res = node.get("Resources", {})
            arches = sorted(k for k in res if ARCH_RESOURCE.match(k))
            count = min(int(res.get("GPU", 0)), int(res[arches[0]])) if arches else 0
            for _ in range(count):
                slot = len(self.workers)
                handle = actor.options(
                    num_cpus=0, num_gpus=1, resources={arches[0]: 1}, max_concurrency=8,
                    max_restarts=-1, max_task_retries=0,  # a restarted actor takes the next job; we retry ourselves
                    scheduling_strategy=NodeAffinitySchedulingStrategy(node["NodeID"], soft=False),
                ).remote(slot, arches[0])
                self.workers.append({"actor": handle, "slot": slot, "arch": arches[0],
                                     "node": node.get("NodeManagerAddress"), "node_id": node["NodeID"]})
        deadline = time.monotonic() + CONNECT_TIMEOUT
        for w in self.workers:
            try:
                w.update(ray.get(w["actor"].where.remote(), timeout=max(1.0, deadline - time.monotonic())))
            except ray.exceptions.GetTimeoutError:
                raise RuntimeError(f"the GPU worker for a {w['arch']} GPU on {w['node']} did not start within "
                                   f"{CONNECT_TIMEOUT:g} s (does another server hold that node's GPUs?)") from None

    def send(self, msg: dict) -> None:
        line = json.dumps(msg) + "\n"
        with self.send_lock:
            self.out.write(line)
            self.out.flush()

    def hello(self) -> dict:
        cpus = int(self.ray.cluster_resources().get("CPU", 1))
        return {"gpus": [{k: w[k] for k in ("slot", "arch", "node", "hostname", "gpu")} for w in self.workers],
                "cpus": cpus, "nodes": self.nodes()}

    def nodes(self) -> list[dict]:
        out = []
        for node in self.ray.nodes():
            res = node.get("Resources", {})
            out.append({"node": node.get("NodeManagerAddress"), "hostname": node.get("NodeManagerHostname"),
                        "alive": bool(node.get("Alive")), "cpus": res.get("CPU", 0), "gpus": res.get("GPU", 0),
                        "arches": sorted(k for k in res if ARCH_RESOURCE.match(k))})
        return out

    def handle(self, msg: dict) -> None:
        ident = msg.get("id")
        try:
            if msg.get("op") == "nodes":
                self.send({"id": ident, "result": {"nodes": self.nodes()}})
                return
            result = self.run(msg, lambda what, fraction: self.send({"id": ident, "progress": [what, fraction]}))
        except Exception as exc:  # an answer, never a silent thread death
            request = msg.get("request") or {}
            result = failed(StageError("internal", f"the cluster bridge failed: {type(exc).__name__}: {exc}"[:500]),
                            request.get("action", "?"), str(request.get("kernel", "?")))
        self.send({"id": ident, "result": result})

    def run(self, msg: dict, progress: Callable[[str, float], None]) -> dict:
        from ray import exceptions as rx
        request, timeout = msg["request"], float(msg["timeout"])
        action, kernel = request["action"], request["kernel"]
        lost = (rx.RayActorError, rx.ActorUnavailableError, rx.WorkerCrashedError, rx.NodeDiedError,
                rx.ObjectLostError, rx.OwnerDiedError)
        if msg.get("slot") is None:
            try:
                return self.wait(self.compile.remote(request, timeout), None, timeout, progress)
            except lost as exc:  # Ray has retried it once already
                return failed(StageError("internal", "the cluster's worker running this compile stopped twice "
                                                     f"(Ray retried it once): {_first_line(exc)}"), action, kernel)
            except TimeoutError as exc:
                return failed(StageError("timeout", str(exc)), action, kernel)
        arch = request.get("arch")
        same = sorted((w for w in self.workers if can_run(w["arch"], arch)), key=lambda w: w["arch"] != arch)
        if not same:
            have = sorted({w["arch"] for w in self.workers}) or ["none"]
            return failed(StageError("device", f"no GPU of the cluster runs {arch}; it has: {', '.join(have)}"),
                          action, kernel)
        first = next((w for w in same if w["slot"] == msg["slot"]), same[msg["slot"] % len(same)])
        others = [w for w in same if w is not first]
        failure = None
        for w in [first, (others or [first])[0]]:  # a dead actor restarts; another GPU, if there is one, is quicker
            try:
                result = self.wait(w["actor"].run.remote(request, timeout), w["actor"], timeout, progress)
            except TimeoutError as exc:
                return failed(StageError("timeout", str(exc)), action, kernel)
            except lost as exc:
                where = f"GPU {w.get('gpu')} on {w.get('hostname') or w['node']}"
                if failure is not None:
                    return failed(StageError("device", f"the cluster's GPU workers stopped during this job twice "
                                                       f"({failure}; then {where}, {type(exc).__name__}); try again "
                                                       "later", None, _first_line(exc)), action, kernel)
                failure = f"{where} stopped mid-job ({type(exc).__name__})"
                log.warning("%s: %s", failure, _first_line(exc))
                progress(f"{failure}; trying again on another GPU", 0.0)
                continue
            if failure is not None:
                result["retried"] = failure
            return result
        raise AssertionError("unreachable")

    def wait(self, ref, actor, timeout: float, progress: Callable[[str, float], None]) -> dict:
        deadline = time.monotonic() + timeout + ANSWER_SLACK
        shown = None
        while True:
            ready, _ = self.ray.wait([ref], timeout=0.5)
            if ready:
                return self.ray.get(ref)
            if time.monotonic() > deadline:
                raise TimeoutError(f"the cluster's worker gave no answer within {timeout + ANSWER_SLACK:g} s")
            if actor is not None:
                try:
                    now = self.ray.get(actor.progress.remote(), timeout=2)
                except Exception:
                    now = None
                if now and tuple(now) != shown:
                    shown = tuple(now)
                    progress(str(now[0]), float(now[1]))


def can_run(gpu_arch: str, arch: str | None) -> bool:
    """Can a GPU of `gpu_arch` run a kernel built for `arch`? A cubin for sm_XY runs on the same major version with a
    minor of Y or more; the arch-specific targets (sm_90a, sm_100a) only on exactly that arch."""
    if arch == gpu_arch:
        return True
    want, have = re.fullmatch(r"sm_(\d+)(\d)", arch or ""), re.fullmatch(r"sm_(\d+)(\d)a?", gpu_arch)
    return bool(want and have and want[1] == have[1] and int(have[2]) >= int(want[2]))


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return (text[0] if text else type(exc).__name__)[:300]


def bridge_main(address: str) -> int:
    """The bridge process: stdin one JSON request a line, stdout {"hello"} or {"fatal"}, then progress and results."""
    from ..settings import library_default
    library_default("RAY_gcs_rpc_server_reconnect_timeout_s", GCS_LOST_AFTER)
    out = os.fdopen(os.dup(1), "w", buffering=1)
    os.dup2(2, 1)  # Ray's and everyone's prints go to stderr: the protocol is ours alone
    sys.stdout = sys.stderr
    try:
        bridge = _Bridge(address, out)
        bridge.send({"hello": bridge.hello()})
    except Exception as exc:
        out.write(json.dumps({"fatal": f"{type(exc).__name__}: {_first_line(exc)}"}) + "\n")
        out.flush()
        return 1
    for line in sys.stdin:
        try:
            msg = json.loads(line)
        except ValueError:
            continue
        threading.Thread(target=bridge.handle, args=(msg,), daemon=True).start()
    os._exit(0)  # the server is gone: so is this driver, and with it its actors


# -- in the web server ---------------------------------------------------------------------------------------------
def _probe(address: str, timeout: float = 3.0) -> str | None:
    """None if the head's port accepts a connection, else why not (so a cluster that is down fails fast)."""
    hostport = address.split("://", 1)[-1]
    if hostport in ("auto", "local") or ":" not in hostport:
        return None
    host, port = hostport.rsplit(":", 1)
    try:
        with socket.create_connection((host.strip("[]"), int(port)), timeout=timeout):
            return None
    except (OSError, ValueError) as exc:
        return f"{type(exc).__name__}: {exc}"


class Cluster:
    """The web server's side: a bridge process to talk through, restarted when it ends; never raises from run()."""

    def __init__(self, address: str):
        self.address = address
        self.lock = threading.Lock()
        self.proc: subprocess.Popen | None = None
        self.hello: dict = {}
        self.pending: dict[int, deque] = {}
        self.events: dict[int, threading.Event] = {}
        self.next_id = 0
        self.why_down: str | None = None
        self.last_try = 0.0
        self.stderr_tail: deque = deque(maxlen=40)
        self._start()  # the first connection must work: the server's queue is sized from the cluster's GPUs
        if self.why_down:
            raise ClusterUnavailable(self.why_down)

    # -- the bridge ---------------------------------------------------------------------------------------------
    def _start(self) -> None:
        self.last_try = time.monotonic()
        why = _probe(self.address)
        if why:
            self.why_down = f"the Ray cluster at {self.address} cannot be reached ({why})"
            return
        proc = subprocess.Popen([sys.executable, "-m", "playground.jobs.ray_backend", self.address], cwd=ROOT,
                                stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                start_new_session=True)  # a Ctrl-C to the server is the server's to handle
        threading.Thread(target=self._drain_stderr, args=(proc,), daemon=True, name="ray-bridge-log").start()
        first: list = []
        reader = threading.Thread(target=lambda: first.append(proc.stdout.readline()), daemon=True)
        reader.start()
        reader.join(CONNECT_TIMEOUT + 30)
        try:
            msg = json.loads(first[0]) if first and first[0] else {}
        except ValueError:
            msg = {}
        if "hello" not in msg:
            why = msg.get("fatal") or ("no answer" if not first else f"it ended ({self._tail()})")
            self._kill(proc)
            self.why_down = f"could not connect to the Ray cluster at {self.address}: {why}"
            log.warning("%s", self.why_down)
            return
        self.proc, self.hello, self.why_down = proc, msg["hello"], None
        threading.Thread(target=self._read, args=(proc,), daemon=True, name="ray-bridge").start()
        log.info("jobs run on the Ray cluster at %s: %d GPU worker(s), %d CPUs", self.address,
                 len(self.hello["gpus"]), self.hello["cpus"])

    def _drain_stderr(self, proc: subprocess.Popen) -> None:
        for line in proc.stderr:
            self.stderr_tail.append(line.rstrip()[:500])
            log.debug("ray bridge: %s", line.rstrip())

    def _tail(self) -> str:
        """The bridge's last words, without Ray's log prefix and past their first sentence."""
        lines = [ln for ln in self.stderr_tail if ln.strip()]
        if not lines:
            return "no message"
        text = re.sub(r"^\[[^\]]*\]\s*\S+:\d+:\s*", "", lines[-1])
        return text.split(". ")[0][:300]

    def _read(self, proc: subprocess.Popen) -> None:
        for line in proc.stdout:
            try:
                msg = json.loads(line)
            except ValueError:
                continue
            with self.lock:
                box, event = self.pending.get(msg.get("id")), self.events.get(msg.get("id"))
            if box is not None:
                box.append(msg)
                event.set()
        proc.wait()
        with self.lock:  # every job still waiting learns now that its answer will not come
            if self.proc is proc:
                self.proc = None
                self.why_down = (f"lost the connection to the Ray cluster at {self.address} "
                                 f"({self._tail()})")
                log.warning("%s", self.why_down)
            for ident, box in self.pending.items():
                box.append({"id": ident, "lost": self.why_down or f"the server stopped talking to the Ray cluster "
                                                                   f"at {self.address}"})
                self.events[ident].set()

    @staticmethod
    def _kill(proc: subprocess.Popen) -> None:
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
        proc.wait()

    def _bridge(self) -> subprocess.Popen | None:
        with self.lock:
            if self.proc is not None:
                return self.proc
            if time.monotonic() - self.last_try < RESTART_EVERY:
                return None
            self._start()  # under the lock: one reconnection at a time; others get the clear message meanwhile
            return self.proc

    # -- what runner uses ---------------------------------------------------------------------------------------
    def gpus(self) -> list[dict]:
        """The cluster's GPU workers as the server's queue sees them: one token (`index`) per GPU actor."""
        return [{"index": g["slot"], "name": f"{g['arch']} GPU {g['gpu']} on {g.get('hostname') or g['node']}",
                 "arch": g["arch"], "memory_mib": None, "node": g["node"]} for g in self.hello.get("gpus", [])]

    def cpu_slots(self) -> int:
        return max(1, int(self.hello.get("cpus", 1)))

    def default_arch(self) -> str | None:
        gpus = self.hello.get("gpus") or []
        return gpus[0]["arch"] if gpus else None

    def run(self, action: str, slot: int | None, request: dict, timeout: float,
            progress: Callable[[str, float], None]) -> dict:
        """Run one job on the cluster (slot: the GPU token from the queue, None for a compile) and wait for it."""
        kernel = request["kernel"]
        answer = self._ask({"slot": slot, "request": request, "timeout": timeout}, timeout + 2 * ANSWER_SLACK,
                           progress)
        if "result" in answer:
            return answer["result"]
        if "down" in answer:
            return failed(StageError("busy", f"{answer['down']}; jobs cannot run until it is back: try again in "
                                             "a minute"), action, kernel)
        if "lost" in answer:
            return failed(StageError("busy", f"{answer['lost']}; the job did not finish: try again in a minute"),
                          action, kernel)
        return failed(StageError("timeout", f"the Ray cluster at {self.address} gave no answer within "
                                            f"{timeout + 2 * ANSWER_SLACK:g} s"), action, kernel)

    def _ask(self, msg: dict, wait: float, progress: Callable[[str, float], None]) -> dict:
        """Send one message to the bridge; {"result"}, or {"down"}, {"lost"} or {} (no answer in time)."""
        proc = self._bridge()
        if proc is None:
            return {"down": self.why_down}
        with self.lock:
            ident = self.next_id = self.next_id + 1
            box, event = deque(), threading.Event()
            self.pending[ident], self.events[ident] = box, event
        try:
            try:
                with self.lock:
                    proc.stdin.write(json.dumps({**msg, "id": ident}) + "\n")
                    proc.stdin.flush()
            except (OSError, ValueError):
                return {"lost": f"lost the connection to the Ray cluster at {self.address}"}
            deadline = time.monotonic() + wait
            while event.wait(max(0.0, deadline - time.monotonic())):
                event.clear()
                while box:
                    answer = box.popleft()
                    if "progress" in answer:
                        progress(str(answer["progress"][0]), float(answer["progress"][1]))
                    else:
                        return answer
            return {}
        finally:
            with self.lock:
                self.pending.pop(ident, None)
                self.events.pop(ident, None)

    def health(self) -> dict:
        """For health(): the backend, its address, whether it is reachable, its nodes and GPU workers."""
        nodes = self._ask({"op": "nodes"}, 10, lambda *_: None).get("result", {}).get("nodes") \
            if self.proc is not None else None
        return {"backend": "ray", "address": self.address, "connected": self.proc is not None,
                "why_down": self.why_down, "nodes": nodes or self.hello.get("nodes", []),
                "gpu_workers": self.hello.get("gpus", [])}

    def close(self) -> None:
        with self.lock:
            proc, self.proc = self.proc, None
        if proc is not None:
            try:
                proc.stdin.close()  # the bridge ends its driver (and so its actors) at EOF
                proc.wait(timeout=15)
            except (OSError, subprocess.TimeoutExpired):
                self._kill(proc)


# -- the Backend (backend.py) when jobs run on the cluster -------------------------------------------------------------
class NodeJob:
    """A job sent to the cluster, as the page's Stop sees it: this server cannot kill it (it has no `kill`), so it
    runs on to its end on its node and its answer is dropped."""


class RayBackend:
    """Jobs on the cluster the setting `ray` names (the workers on the nodes take their limits from the settings of
    their own node). The queue in front of it is sized to the cluster: a CPU slot per CPU of the cluster, a GPU token
    per GPU actor. The result cache and the queue stay on this server."""

    name = "ray"

    def __init__(self, settings: Settings):
        self.settings = settings
        self.mode = sandbox.mode(settings)  # the server's own; each node's workers probe theirs
        self.cluster = Cluster(settings.ray)
        self.gpus = self.cluster.gpus()
        self.cpu_slots = self.cluster.cpu_slots()
        self.taken = {"cpu": 0, **{f"gpu{g['index']}": 0 for g in self.gpus}}

    def refused(self) -> str | None:
        return None  # each node's workers refuse jobs themselves where their sandbox cannot be made

    def start(self) -> None:
        pass  # the workers on the nodes keep their own spares

    def run(self, request: dict, *, gpu: int | None, timeout: float, progress: Progress,
            started: Callable[[object], None], files: JobFiles, exchange: Exchange | None = None,
            background: bool = False) -> Answer:
        # `files` are not sent: the job's folder is on the node, whose jobs read that node's own. Nor is `exchange`
        # used: a node's compile answers once, its CUDA with the rest, and runs nvcc itself.
        self.taken["cpu" if gpu is None else f"gpu{gpu}"] += 1
        started(NodeJob())
        return self.cluster.run(request["action"], gpu, request, timeout, progress)

    def idle(self) -> bool:
        return True  # nothing is started on this server

    def health(self) -> dict:
        return {"gpus": self.gpus, "spares": {k: {"on": "ray", "taken": n} for k, n in self.taken.items()},
                "cluster": self.cluster.health()}

    def shutdown(self) -> None:
        self.cluster.close()


if __name__ == "__main__":
    sys.exit(bridge_main(sys.argv[1]))
