"""Who runs when: compiles share the CPU cores, everything that touches the GPU takes it alone, students in turn.

- "cpu": a bounded number of compiles at once (one per core by default): compiles are CPU-bound and independent.
- "gpu": one job per GPU at a time, shared by run, tune and sweep: co-running work makes CUDA-event timings lie
  (measured on the H200: throughput falls 2-4x while event timings barely move), so a timing needs the GPU alone.
- "background": one compile nobody waits for (the pre-warm of the shipped kernels), in a slot of its own beside the
  CPU slots, so it never takes a student's slot; its processes run niced (jobs/limits.py BACKGROUND_NICE), so a
  student's compile gets the cores first.
- Fair queueing over students: when a slot frees, the waiting job of the student with the fewest jobs running goes
  first; among equals, the student whose last job started longest ago (round robin: on a single GPU everyone has
  none running when it frees), then the oldest job. So a student's endless loops hold at most the slots they
  already hold: a classmate's job takes the next one that frees, within one job's length, however many loops wait.
  Where one person may log in under many names (a class password, no roster: `Student.address` is set), the
  client's address is counted first, the same way, so more names buy no more turns.
- A bound on how many may wait in all; beyond it a job is turned away at once with "busy, try again in N s" (N from
  the recent job durations), rather than left to wait minutes behind a browser that may be gone.
- Per student: at most `session_inflight` jobs running or waiting, and a token bucket (a burst, then a steady rate),
  so one student's clicking or script cannot fill the queue for 29 others; where names are free, the same per
  client address too, `address_inflight` jobs (4 times a student's by default: a class behind one NAT shares it)
  and a bucket as many times a student's. Answers from the result cache cost nothing and are not counted. The
  numbers are settings (playground/settings.py).
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


class Student(str):
    """Who a job is counted against: the text every per-student limit counts (the login's name, else the client's
    address; ui/gateway.student_of), and, where one person may log in under many names (a class password without a
    roster), the client's `address`, which the queue counts as well."""

    def __new__(cls, key: str, address: str | None = None):
        self = super().__new__(cls, key)
        self.address = address or None
        return self


class Busy(Exception):
    def __init__(self, message: str, retry_after: float):
        super().__init__(message)
        self.retry_after = retry_after


class _Waiting:
    """A job in line: its student, the group it is counted in first (its address where names are free, else the
    student), and its place in arrival order."""
    __slots__ = ("session", "group", "seq")

    def __init__(self, session: str, group: tuple, seq: int):
        self.session, self.group, self.seq = session, group, seq


class Resource:
    """Tokens (CPU slot numbers, GPU indices) handed out to the waiting jobs in the fair order (Scheduler docs)."""

    def __init__(self, name: str, tokens: list[int]):
        self.name, self.free, self.size = name, list(tokens), len(tokens)
        self.waiting: list[_Waiting] = []
        self.running = 0
        self.running_of: collections.Counter = collections.Counter()  # student or group -> jobs holding a token
        self.started_at: dict = {}  # student or group -> when its last job took a token (while it has jobs here)
        self.mean_seconds = 5.0 if name == "cpu" else 20.0  # running mean of job durations, for "try again in"

    def eta(self, ahead: int) -> float:
        return self.mean_seconds * (ahead + self.running) / max(1, self.size)

    def order(self) -> list[_Waiting]:
        """The waiting jobs in the order they get tokens: the group, then the student, with the fewest jobs running,
        then the one whose last job started longest ago, then the oldest job."""
        def rank(w: _Waiting):
            return (self.running_of[w.group], self.started_at.get(w.group, -math.inf),
                    self.running_of[("student", w.session)], self.started_at.get(("student", w.session), -math.inf),
                    w.seq)
        return sorted(self.waiting, key=rank)

    def take(self, w: _Waiting) -> int:
        self.waiting.remove(w)
        self.running += 1
        now = time.monotonic()
        for key in {w.group, ("student", w.session)}:
            self.running_of[key] += 1
            self.started_at[key] = now
        return self.free.pop(0)

    def give_back(self, w: _Waiting, token: int) -> None:
        self.free.append(token)
        self.free.sort()
        self.running -= 1
        for key in {w.group, ("student", w.session)}:
            self.running_of[key] -= 1
            if self.running_of[key] <= 0:
                del self.running_of[key]

    def forget(self, keep: set) -> None:
        """Forget when groups and students with no job here any more last started one."""
        if len(self.started_at) > 4 * len(keep) + 64:
            self.started_at = {k: t for k, t in self.started_at.items() if k in keep}


class Scheduler:
    def __init__(self, cpu_slots: int, gpus: list[int], settings: Settings | None = None):
        settings = settings or current()
        self.queue_limit = settings.queue_limit            # jobs waiting (not running), all kinds together
        self.session_inflight = settings.session_inflight  # running + waiting, per session
        self.session_burst = settings.session_burst        # jobs a session may start back to back ...
        self.session_rate = settings.session_rate          # ... then this many per second
        # Per client address where names are free (Student.address): in flight, and the bucket scaled alike.
        self.address_inflight = settings.address_inflight
        self.address_scale = max(1.0, settings.address_inflight / max(1, settings.session_inflight))
        self.cond = threading.Condition()
        self.resources = {"cpu": Resource("cpu", list(range(cpu_slots))), "gpu": Resource("gpu", gpus),
                          "background": Resource("background", [0])}
        self.inflight: collections.Counter = collections.Counter()  # student, or ("address", A) -> running+waiting
        self.buckets: dict = {}  # student, or ("address", A) -> (tokens, time of last refill)
        self.seq = 0

    # -- admission ------------------------------------------------------------------------------------------------
    def _take_token(self, key, scale: float = 1.0) -> float:
        """0 if `key` may start a job now, else the seconds until it may (its bucket: the burst and rate times
        `scale`). A token is taken only when the answer is 0."""
        now = time.monotonic()
        burst, rate = self.session_burst * scale, self.session_rate * scale
        tokens, last = self.buckets.get(key, (burst, now))
        tokens = min(burst, tokens + (now - last) * rate)
        if tokens < 1:
            self.buckets[key] = (tokens, now)
            return (1 - tokens) / rate
        self.buckets[key] = (tokens - 1, now)
        if len(self.buckets) > 10000:  # forget keys idle long enough to have a full bucket again
            full = self.session_burst / self.session_rate
            self.buckets = {s: b for s, b in self.buckets.items() if now - b[1] < full}
        return 0.0

    def _give_token_back(self, key) -> None:
        tokens, last = self.buckets[key]
        self.buckets[key] = (tokens + 1, last)

    def _admit(self, kind: str, session: str, address: str | None, queued: bool = True) -> None:
        """Raise Busy where a job of `session` may not start now; `queued`: it will wait in `kind`'s queue (else it
        takes no place there, and only the student's and their address's limits count)."""
        res = self.resources[kind]
        waiting = sum(len(r.waiting) for r in self.resources.values())
        if queued and waiting >= self.queue_limit:
            raise Busy(f"the server is busy ({waiting} jobs waiting)", res.eta(len(res.waiting)))
        if session != ANONYMOUS:
            if self.inflight[session] >= self.session_inflight:
                raise Busy(f"you already have {self.inflight[session]} jobs running or waiting; wait for one to "
                           "finish", res.eta(0))
            place = ("address", address)
            if address is not None and self.inflight[place] >= self.address_inflight:
                raise Busy(f"{self.inflight[place]} jobs from your address are running or waiting, the most one "
                           "address may have under the class password; wait for one to finish", res.eta(0))
            wait = self._take_token(session)
            if wait > 0:
                raise Busy("too many jobs from this session in a short time", wait)
            if address is not None:
                wait = self._take_token(place, self.address_scale)
                if wait > 0:
                    self._give_token_back(session)
                    raise Busy("too many jobs from this address in a short time", wait)

    def _counted(self, session) -> list:
        """The keys a job of `session` counts against: the student, and where names are free their address."""
        address = getattr(session, "address", None)
        return [session] + ([("address", address)] if address is not None and session != ANONYMOUS else [])

    def _release(self, counted: list) -> None:
        for key in counted:
            self.inflight[key] -= 1
            if self.inflight[key] <= 0:
                del self.inflight[key]

    @contextlib.contextmanager
    def waiting_in_place(self, session: str) -> Iterator[None]:
        """Count a request that waits, without a slot, for another request's job to answer it (the same compile,
        jobs/runner.py) as one of its student's jobs in flight, admitted like one (the student's cap, their bucket):
        otherwise one student could park any number of requests behind one slow compile of their own, each holding
        a place in the page's queue, while the cap saw one job. It takes no place in the queue, so a full queue does
        not turn it away (a class opening one kernel at a busy moment waits for that kernel's one compile).
        Raises Busy when turned away."""
        counted = self._counted(session)
        with self.cond:
            self._admit("cpu", session, getattr(session, "address", None), queued=False)
            for key in counted:
                self.inflight[key] += 1
        try:
            yield
        finally:
            with self.cond:
                self._release(counted)
                self.cond.notify_all()

    # -- a slot ---------------------------------------------------------------------------------------------------
    @contextlib.contextmanager
    def slot(self, kind: str, session: str, on_progress: Callable[[str, float], None],
             give_up: float | None = None, stop_if: Callable[[], bool] | None = None) -> Iterator[int]:
        """Wait in line for a `kind` token and hold it for the block. Raises Busy when turned away, Stopped when
        `stop_if()` turns true while it waits."""
        res = self.resources[kind]
        if res.size == 0:
            raise Busy(f"this server has no {kind} to run the job on", 0)
        address = getattr(session, "address", None)
        counted = self._counted(session)
        with self.cond:
            self._admit(kind, session, address)
            for key in counted:
                self.inflight[key] += 1
            self.seq += 1
            ticket = _Waiting(str(session), ("address", address) if address else ("student", str(session)), self.seq)
            res.waiting.append(ticket)
        token = None
        try:
            reported = None
            deadline = time.monotonic() + give_up if give_up else None
            with self.cond:
                while True:
                    ahead = res.order().index(ticket)
                    if ahead == 0 and res.free:
                        token = res.take(ticket)
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
                    res.give_back(ticket, token)
                self._release(counted)
                res.forget({key for w in res.waiting for key in (w.group, ("student", w.session))}
                           | set(res.running_of))
                self.cond.notify_all()

    def snapshot(self) -> dict:
        with self.cond:
            out = {k: {"running": r.running, "waiting": len(r.waiting), "slots": r.size,
                       "mean_job_seconds": round(r.mean_seconds, 2)} for k, r in self.resources.items()}
            out["limit"] = self.queue_limit
            out["sessions"] = sum(isinstance(k, str) for k in self.inflight)
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
