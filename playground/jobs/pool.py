"""Pre-started workers: the cold path costs the compile, not the 3-4 s of importing torch and TileLang.

Each spare is a full job (its own sandbox, folder and uid) that has already imported what every job needs and
waits for its one request. Its replacement starts, in the background, when the job that took it ends. A spare is used
once and never returned: the next job always gets a process no user code has touched.

Kinds: "cpu" spares for compiles (no GPU device in their sandbox, RLIMIT_AS on) and "gpu" spares for run, tune and
sweep (only where a GPU is present).
"""
from __future__ import annotations

import logging
import threading
import time

from ..settings import Settings, current
from . import limits, sandbox
from .job import Job

log = logging.getLogger("playground.jobs")
MAX_AGE = 1800.0  # seconds: an old spare is replaced (fresh code after a deploy, no slow leaks)


class Pool:
    def __init__(self, gpu: bool, size: int, gpu_index: int | None = None, settings: Settings | None = None):
        self.gpu, self.size, self.gpu_index = gpu, size, gpu_index
        self.settings = settings or current()
        self.spares: list[Job] = []
        self.lock = threading.Lock()
        self.closed = False
        self.started = self.taken = 0
        self.pending = 0  # spares being started right now (not yet in self.spares)
        self.out: set[Job] = set()  # jobs taken and not yet closed: a shutdown ends them too, folders and all

    def _spawn(self) -> Job | None:
        try:
            job = Job(self.gpu, self.gpu_index, self.settings)
        except Exception:
            log.exception("could not start a %s worker", "gpu" if self.gpu else "cpu")
            return None
        self.started += 1
        return job

    def fill(self) -> None:
        """Top the spares up to `size` (called after each take, in a background thread); none where no job may run
        (sandbox.Mode.refused)."""
        if sandbox.mode(self.settings).refused:
            return
        with self.lock:
            if self.closed:
                return
            stale = [j for j in self.spares if not j.alive() or time.monotonic() - j.created > MAX_AGE]
            self.spares = [j for j in self.spares if j not in stale]
        for j in stale:
            j.close()
        while True:
            with self.lock:  # several fill threads may run at once: count the ones being started too
                if self.closed or len(self.spares) + self.pending >= self.size:
                    return
                self.pending += 1
            job = self._spawn()
            with self.lock:
                if job is not None and not self.closed:
                    self.spares.append(job)
                    self.pending -= 1
                    continue
            # Closed while this one was starting: remove it before it stops counting as pending, so that close()
            # (which waits for pending to reach 0) does not return while its folder still exists.
            if job is not None:
                job.close()
            with self.lock:
                self.pending -= 1
            return

    def fill_later(self) -> None:
        if self.size > 0:
            threading.Thread(target=self.fill, daemon=True, name="pool-fill").start()

    def take(self, background: bool = False) -> Job:
        """A worker for one job: a ready spare, else the spare closest to ready, else a new one. `background` (the
        pre-warm): a worker of its own, started niced, whose imports and compile take only idle CPU. Either way the
        pool knows it until it is closed, so that a shutdown ends it."""
        job = None
        if background:
            job = Job(self.gpu, self.gpu_index, self.settings, nice=limits.BACKGROUND_NICE)
        else:
            with self.lock:
                alive = [j for j in self.spares if j.alive()]
                ready = [j for j in alive if j.ready.is_set()]
                job = (ready or alive or [None])[0]
                if job is not None:
                    self.spares.remove(job)
            if job is None:
                job = Job(self.gpu, self.gpu_index, self.settings)
            self.taken += 1
        with self.lock:
            closed = self.closed
            if not closed:
                self.out = {j for j in self.out if not j.closed}
                self.out.add(job)
        if closed:  # the shutdown has already ended the jobs it knew of: this one would outlive it
            job.close()
            raise RuntimeError("the job layer is shutting down")
        # The replacement is started when the job ends (runner calls fill_later), not now: its 3-4 s of imports
        # would compete for the cores with the very compile the user is waiting for.
        if not job.wait_ready(self.settings.ready_timeout * (4 if background else 1)):
            log.warning("a worker did not become ready: %s", job.log()[-500:])
        return job

    def close(self, wait: float = 20.0) -> None:
        with self.lock:
            self.closed = True
            spares, self.spares = self.spares, []
            running, self.out = [j for j in self.out if not j.closed], set()
        # A job still running (a student's compile, the pre-warm) ends here too: its thread is a daemon, stopped
        # midway at interpreter exit, and would leave its processes and folder behind.
        for j in spares + running:
            j.close()
        # A spare being started in a fill thread right now closes itself when it sees `closed`; wait for it, since
        # at interpreter exit that (daemon) thread would be stopped midway and leave its job folder behind.
        deadline = time.monotonic() + wait
        while time.monotonic() < deadline:
            with self.lock:
                if self.pending == 0:
                    return
            time.sleep(0.05)
        log.warning("%d %s worker(s) were still starting at shutdown", self.pending, "gpu" if self.gpu else "cpu")

    def idle(self) -> bool:
        """No spare is being started and every spare has imported (tests wait for this before counting)."""
        with self.lock:
            return self.pending == 0 and len(self.spares) >= self.size and all(j.ready.is_set() for j in self.spares)

    def pids(self) -> set[int]:
        """Every process of every spare (the outer bwrap, its init and the worker)."""
        with self.lock:
            spares = list(self.spares)
        return {p.pid for j in spares for p in j.tree()} | {j.proc.pid for j in spares}

    def snapshot(self) -> dict:
        with self.lock:
            return {"spares": len(self.spares), "ready": sum(j.ready.is_set() for j in self.spares),
                    "size": self.size, "started": self.started, "taken": self.taken}
