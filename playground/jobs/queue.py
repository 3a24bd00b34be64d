"""Who runs when: compiles share the CPU cores, everything that touches the GPU takes it alone, in arrival order.

- "cpu": a bounded number of compiles at once (one per core by default): compiles are CPU-bound and independent.
- "gpu": one job per GPU at a time, shared by run, tune and sweep: co-running work makes CUDA-event timings lie
  (measured on the H200: throughput falls 2-4x while event timings barely move), so a timing needs the GPU alone.
- A bound on how many may wait in all; beyond it a job is turned away at once with "busy, try again in N s" (N from
  the recent job durations), rather than left to wait minutes behind a browser that may be gone.
- Per student: at most `session_inflight` jobs running or waiting, and a token bucket (a burst, then a steady rate),
  so one student's clicking or script cannot fill the queue for 29 others. Answers from the result cache cost
  nothing and are not counted. The numbers are settings (playground/settings.py).
"""
from __future__ import annotations

import collections
import contextlib
import math
import threading
import time
from typing import Callable, Iterator

from ..settings import Settings, current

ANONYMOUS = "anon"  # callers without a session (the command line, a grader) share only the global bounds


class Busy(Exception):
    def __init__(self, message: str, retry_after: float):
        super().__init__(message)
        self.retry_after = retry_after


class Resource:
    """Tokens (CPU slot numbers, GPU indices) handed out in arrival order."""

    def __init__(self, name: str, tokens: list[int]):
        self.name, self.free, self.size = name, list(tokens), len(tokens)
        self.waiting: collections.deque = collections.deque()
        self.running = 0
        self.mean_seconds = 5.0 if name == "cpu" else 20.0  # running mean of job durations, for "try again in"

    def eta(self, ahead: int) -> float:
        return self.mean_seconds * (ahead + self.running) / max(1, self.size)


class Scheduler:
    def __init__(self, cpu_slots: int, gpus: list[int], settings: Settings | None = None):
        settings = settings or current()
        self.queue_limit = settings.queue_limit            # jobs waiting (not running), all kinds together
        self.session_inflight = settings.session_inflight  # running + waiting, per session
        self.session_burst = settings.session_burst        # jobs a session may start back to back ...
        self.session_rate = settings.session_rate          # ... then this many per second
        self.cond = threading.Condition()
        self.resources = {"cpu": Resource("cpu", list(range(cpu_slots))), "gpu": Resource("gpu", gpus)}
        self.inflight: collections.Counter = collections.Counter()
        self.buckets: dict[str, tuple[float, float]] = {}  # session -> (tokens, time of last refill)

    # -- admission ------------------------------------------------------------------------------------------------
    def _take_token(self, session: str) -> float:
        """0 if the session may start a job now, else the seconds until it may."""
        now = time.monotonic()
        tokens, last = self.buckets.get(session, (self.session_burst, now))
        tokens = min(self.session_burst, tokens + (now - last) * self.session_rate)
        if tokens < 1:
            self.buckets[session] = (tokens, now)
            return (1 - tokens) / self.session_rate
        self.buckets[session] = (tokens - 1, now)
        if len(self.buckets) > 10000:  # forget sessions idle long enough to have a full bucket again
            full = self.session_burst / self.session_rate
            self.buckets = {s: b for s, b in self.buckets.items() if now - b[1] < full}
        return 0.0

    def _admit(self, kind: str, session: str) -> None:
        res = self.resources[kind]
        waiting = sum(len(r.waiting) for r in self.resources.values())
        if waiting >= self.queue_limit:
            raise Busy(f"the server is busy ({waiting} jobs waiting)", res.eta(len(res.waiting)))
        if session != ANONYMOUS:
            if self.inflight[session] >= self.session_inflight:
                raise Busy(f"you already have {self.inflight[session]} jobs running or waiting; wait for one to "
                           "finish", res.eta(0))
            wait = self._take_token(session)
            if wait > 0:
                raise Busy("too many jobs from this session in a short time", wait)

    # -- a slot ---------------------------------------------------------------------------------------------------
    @contextlib.contextmanager
    def slot(self, kind: str, session: str, on_progress: Callable[[str, float], None],
             give_up: float | None = None, stop_if: Callable[[], bool] | None = None) -> Iterator[int]:
        """Wait in line for a `kind` token and hold it for the block. Raises Busy when turned away, Stopped when
        `stop_if()` turns true while it waits."""
        res = self.resources[kind]
        if res.size == 0:
            raise Busy(f"this server has no {kind} to run the job on", 0)
        ticket = object()
        with self.cond:
            self._admit(kind, session)
            self.inflight[session] += 1
            res.waiting.append(ticket)
        token = None
        try:
            reported = None
            deadline = time.monotonic() + give_up if give_up else None
            with self.cond:
                while True:
                    ahead = res.waiting.index(ticket)
                    if ahead == 0 and res.free:
                        res.waiting.popleft()
                        token = res.free.pop(0)
                        res.running += 1
                        break
                    position = ahead + (0 if res.free else 1)
                    if position != reported:
                        reported = position
                        what = "the GPU" if kind == "gpu" else "a CPU core"
                        text = (f"queued: {ahead} job{'s' if ahead != 1 else ''} ahead, waiting for {what}"
                                f" (about {math.ceil(res.eta(ahead))} s)")
                        self.cond.release()
                        try:
                            on_progress(text, 0.0)
                        finally:
                            self.cond.acquire()
                        continue
                    if deadline and time.monotonic() > deadline:
                        raise Busy("waited too long in the queue", res.eta(ahead))
                    if stop_if is not None and stop_if():
                        raise Stopped()
                    self.cond.wait(0.5)
            started = time.monotonic()
            yield token
            res.mean_seconds = 0.8 * res.mean_seconds + 0.2 * (time.monotonic() - started)
        finally:
            with self.cond:
                if token is None:
                    with contextlib.suppress(ValueError):
                        res.waiting.remove(ticket)
                else:
                    res.free.append(token)
                    res.free.sort()
                    res.running -= 1
                self.inflight[session] -= 1
                if self.inflight[session] <= 0:
                    del self.inflight[session]
                self.cond.notify_all()

    def snapshot(self) -> dict:
        with self.cond:
            out = {k: {"running": r.running, "waiting": len(r.waiting), "slots": r.size,
                       "mean_job_seconds": round(r.mean_seconds, 2)} for k, r in self.resources.items()}
            out["limit"] = self.queue_limit
            out["sessions"] = len(self.inflight)
            return out


class Stopped(Exception):
    """The job's owner stopped it while it waited in the queue."""


class Stops:
    """Who may stop which jobs: the page's Stop button stops the jobs its browser tab started (`owner`), never the
    jobs of others behind the same address. A job is tracked from the moment it holds its slot (a worker may take
    seconds to be ready), so a stop at any point reaches it: a job not yet started does not start, a running one is
    killed. One still waiting in the queue leaves it (Scheduler.slot's `stop_if`)."""

    class Ticket:
        def __init__(self):
            self.job = None
            self.stopped = False

    def __init__(self):
        self.lock = threading.Lock()
        self.running: dict[str, set] = {}    # owner -> tickets of its jobs holding a slot
        self.stopped: dict[str, float] = {}  # owner -> when it last asked to stop

    def stopped_since(self, owner: str | None, since: float) -> bool:
        with self.lock:
            return owner is not None and self.stopped.get(owner, -1.0) >= since

    @contextlib.contextmanager
    def track(self, owner: str | None, since: float) -> Iterator["Stops.Ticket"]:
        ticket = Stops.Ticket()
        if owner is None:
            yield ticket
            return
        with self.lock:
            ticket.stopped = self.stopped.get(owner, -1.0) >= since
            self.running.setdefault(owner, set()).add(ticket)
        try:
            yield ticket
        finally:
            with self.lock:
                self.running.get(owner, set()).discard(ticket)
                if not self.running.get(owner):
                    self.running.pop(owner, None)

    def attach(self, ticket: "Stops.Ticket", job) -> None:
        """The ticket's job, now started; killed at once if a stop came while it started."""
        with self.lock:
            ticket.job = job
            stopped = ticket.stopped
        if stopped:
            self._kill(job)

    def stop(self, owner: str) -> dict:
        """{"killed": jobs killed, "left": jobs that cannot be killed from here (on a Ray node: they run to their
        end, their answers dropped), "waiting": jobs that will not start}."""
        now = time.monotonic()
        with self.lock:
            self.stopped = {o: t for o, t in self.stopped.items() if now - t < 3600}  # a tab's, kept an hour
            self.stopped[owner] = now
            tickets = list(self.running.get(owner, ()))
            for ticket in tickets:
                ticket.stopped = True
            jobs = [t.job for t in tickets if t.job is not None]
        killed = sum(self._kill(job) for job in jobs)
        return {"killed": killed, "left": len(jobs) - killed, "waiting": len(tickets) - len(jobs)}

    @staticmethod
    def _kill(job) -> bool:
        kill = getattr(job, "kill", None)
        if kill is None:
            return False
        kill()
        return True
