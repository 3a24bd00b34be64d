"""Jobs on this machine: pre-started sandboxed workers (pool.py), one pool for compiles and one for each GPU.

The Backend (backend.py) the job layer uses unless the setting `ray` names a cluster."""
from __future__ import annotations

from typing import Callable

from ..engine.answers import Answer
from ..settings import Settings
from . import hardware, sandbox
from .backend import Ceilings, JobFiles, Progress, give_job_files
from .job import Exchange
from .pool import Pool


class LocalBackend:
    name = "local"

    def __init__(self, settings: Settings):
        self.settings = settings
        self.mode = sandbox.mode(settings)  # probes bwrap once and logs the warning if jobs cannot be sandboxed
        self.gpus = hardware.gpus(settings)
        self.cpu_slots = settings.compile_processes
        # A worker's imports (torch, TileLang: about 5 s of CPU) cost more than a small compile: made while the
        # server is idle, they are not made while a class waits for a burst of distinct compiles (the load test's
        # cold p95 on two cores: 41 s with 3 spares, 27 s with 6). Each spare holds about 190 MiB of its own.
        spares = settings.spares if settings.spares is not None else min(2 * self.cpu_slots + 2, 8)
        self.pools = {("cpu", None): Pool(False, spares, None, settings)}
        for g in self.gpus:
            self.pools[("gpu", g["index"])] = Pool(True, 1, g["index"], settings)
        self.ceilings = Ceilings()  # this server's GPUs are one model: one set for all

    def refused(self) -> str | None:
        return self.mode.refused

    def start(self) -> None:
        for pool in self.pools.values():
            pool.fill_later()

    def run(self, request: dict, *, gpu: int | None, timeout: float, progress: Progress,
            started: Callable[[object], None], files: JobFiles, exchange: Exchange | None = None,
            background: bool = False) -> Answer:
        pool = self.pools[("gpu", gpu) if gpu is not None else ("cpu", None)]
        job = pool.take(background)
        try:
            started(job)  # a stop that came while the worker got ready kills it now
            if gpu is not None:
                self.ceilings.seed(job)
            give_job_files(job, files, "its files")
            answer = job.run(request, timeout, progress, exchange)
            if gpu is not None:
                self.ceilings.harvest(job, request, answer)
            return answer
        finally:
            job.close()  # before the slot is freed: the next job gets a GPU with nothing of this one on it
            if not background:
                pool.fill_later()

    def idle(self) -> bool:
        return all(p.idle() for p in self.pools.values())

    def health(self) -> dict:
        return {"gpus": hardware.gpus(self.settings),
                "spares": {f"{k}{'' if i is None else i}": p.snapshot() for (k, i), p in self.pools.items()},
                "cluster": None}

    def shutdown(self) -> None:
        for pool in self.pools.values():
            pool.close()
        sandbox.remove_jobs_root()
