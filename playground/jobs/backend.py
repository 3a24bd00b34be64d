"""Where jobs run: the one interface the job layer calls (`Backend`), and what every backend does around a job.

    runner.run_job ─► checks, result cache, per-student limits, the queue (the same for every backend)
                   ─► Backend.run(request, gpu=token, ...) ─► an answer
                          LocalBackend (local_backend.py): pre-started sandboxed workers on this machine
                          RayBackend (ray_backend.py): the same workers on a Ray cluster's nodes

runner.py picks one from the settings (`ray` set: the cluster) and calls it only through this protocol, so the path
from the page to a worker (checks, cache, queue, stops) is the same line by line for both.

Around a GPU job, both backends do the same with the GPU's measured ceilings (`Ceilings`): a run reports percentages
of this GPU's copy bandwidth and matmul rate (engine/device.py), which the engine measures once and caches in its
cache folder. A job's cache folder is its own, so each run would measure them again (about 2 s of exclusive GPU
time). The backend keeps them instead: taken from a job that ran no user code (`no_user_code`: the catalogue's own
kernel, so nobody can plant flattering ceilings), written into every later GPU job's folder before it starts. The
local backend keeps one set for the server; on a cluster each GPU worker keeps its own GPU's.
"""
from __future__ import annotations

import json
import logging
import os
from pathlib import Path
from typing import Callable, Mapping, Protocol

from ..engine.answers import Answer
from .job import Exchange
from .result_cache import ROOT
from .sandbox import Mode

log = logging.getLogger("playground.jobs")

Progress = Callable[[str, float], None]
# Job files: the folder (relative to the job's own) → {file name: bytes}, written before the job starts.
JobFiles = Mapping[str, Mapping[str, bytes]]


class Backend(Protocol):
    """What the job layer needs of where jobs run. Sizes first (the queue is made from them), then the calls."""

    name: str            # "local" or "ray": health()'s "backend"
    mode: Mode           # how this server sandboxes jobs (on Ray the server's own; each node probes its own)
    gpus: list[dict]     # the GPUs jobs may take, one queue token ("index") each: [{"index", "name", "arch", ...}]
    cpu_slots: int       # compiles that may run at once

    def refused(self) -> str | None:
        """Why no job can run here, with the fix (sandbox.REFUSED), or None."""

    def start(self) -> None:
        """Start what jobs need ahead of the first one (spare workers)."""

    def run(self, request: dict, *, gpu: int | None, timeout: float, progress: Progress,
            started: Callable[[object], None], files: JobFiles, exchange: Exchange | None = None,
            background: bool = False) -> Answer:
        """Run one request (`gpu`: the queue's GPU token, None for a CPU job) and wait for its answer, never
        raising for the job's own failures. `started(job)` as soon as a worker holds it: the page's Stop kills it
        through its `kill()` where this server can (a local worker; a job on a Ray node has none and runs on to its
        end there, its answer dropped). `files` are written into the job's folder before it starts, where that
        folder is on this machine. `exchange` (a compile's): its partial answer, and nvcc's output the server keeps
        for its CUDA, where the backend can pass them (job.Exchange; a Ray node's compile has neither). `background`:
        a job nobody waits for (the pre-warm), whose processes yield the CPU to students' jobs. Nothing of the job
        is left when this returns: the caller may hand its queue slot on."""

    def idle(self) -> bool:
        """Nothing is being started: every spare worker is ready (tests and measurements wait for this)."""

    def health(self) -> dict:
        """This backend's part of health(): {"gpus", "spares", "cluster"}."""

    def shutdown(self) -> None:
        """Stop every worker and remove what it left."""


# -- what every backend does around a job ------------------------------------------------------------------------
def no_user_code(kernel: str, source: str | None) -> bool:
    """Did the request run only the catalogue's own code (its kernel, unedited)? Only such a job's ceilings and
    tuned configs are kept for others."""
    builtin = ROOT / "kernels" / f"{os.path.basename(kernel)}.py"
    return source is None or (builtin.is_file() and source == builtin.read_text())


class Ceilings:
    """One GPU's measured ceilings, kept between jobs: {file name: its JSON text} of the engine's cache/ceilings."""

    FOLDER = "cache/ceilings"

    def __init__(self):
        self.files: dict[str, str] = {}

    def seed(self, job) -> None:
        """Give a GPU job the ceilings kept so far, before it starts."""
        if self.files:
            give_job_files(job, {self.FOLDER: {name: text.encode() for name, text in self.files.items()}},
                           "the GPU's ceilings")

    def harvest(self, job, request: dict, answer) -> None:
        """Keep the ceilings a GPU job measured, if it ran no user code and answered ok."""
        if not (no_user_code(request["kernel"], request.get("source")) and isinstance(answer, dict)
                and answer.get("ok")):
            return
        for path in (job.dir / self.FOLDER).glob("*.json"):
            try:
                text = path.read_text()
                json.loads(text)
            except (OSError, ValueError):
                continue
            self.files[path.name] = text


def give_job_files(job, files: JobFiles, what: str) -> None:
    """Write `files` ({folder relative to the job's own: {name: bytes}}) into the job's folder before it starts,
    owned by the job's uid so it may read and replace them. Only a job whose folder is on this machine."""
    if not Path(job.dir).is_dir():
        return
    try:
        for folder, named in files.items():
            target = job.dir / folder
            target.mkdir(parents=True, exist_ok=True)
            for name, data in named.items():
                (target / name).write_bytes(data)
            if job.uid is not None:
                made = [p for p in (target, *target.parents) if p.is_relative_to(job.dir) and p != job.dir]
                for p in (*made, *(target / name for name in named)):
                    os.chown(p, job.uid, job.uid)
    except OSError:
        log.warning("could not give a job %s", what, exc_info=True)
