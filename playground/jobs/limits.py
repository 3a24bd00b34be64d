"""Every bound a job runs under, in one place, each overridable by an environment variable of the same name.

Why these numbers: a class of 30 shares one server. A compile needs about 0.5 GiB and a few seconds; a run, tune or
sweep needs the GPU and a few GiB of host memory. The bounds are loose enough for every kernel of the catalogue and
tight enough that one student's loop, allocation or fork bomb ends their own job only.
"""
from __future__ import annotations

import os
import resource

GiB = 2**30
MiB = 2**20


def _env(name: str, default: float) -> float:
    try:
        return float(os.environ.get(f"PLAYGROUND_{name}", default))
    except ValueError:
        return default


# Wall-clock seconds for a whole job, per action (the caller may ask for less or, for a grader, more).
TIMEOUTS = {"compile": _env("TIMEOUT_COMPILE", 120), "run": _env("TIMEOUT_RUN", 300),
            "tune": _env("TIMEOUT_TUNE", 900), "sweep": _env("TIMEOUT_SWEEP", 600),
            "ir": _env("TIMEOUT_IR", 120), "profile": _env("TIMEOUT_PROFILE", 300),
            "memcheck": _env("TIMEOUT_MEMCHECK", 600)}
GRACE = 5.0  # seconds between the job's own alarm (which names the user's line) and the hard kill from outside
READY_TIMEOUT = _env("READY_TIMEOUT", 120)  # a pre-started worker that has not imported TileLang by then is broken

# Memory. A compile job is bounded per process by RLIMIT_AS (a clean MemoryError at the user's line). A GPU job
# cannot be: CUDA reserves a virtual address range the size of all GPU memory and more, so RLIMIT_AS would break it;
# its resident memory (all its processes added up) is watched from outside instead, which catches both kinds.
COMPILE_ADDRESS_SPACE = int(_env("COMPILE_ADDRESS_SPACE", 8 * GiB))   # per process: torch+TileLang map ~1 GiB
COMPILE_RESIDENT = int(_env("COMPILE_RESIDENT", 6 * GiB))             # all processes of one compile job
GPU_RESIDENT = int(_env("GPU_RESIDENT", 32 * GiB))                    # all processes of one run/tune/sweep job

# Files. RLIMIT_FSIZE bounds one file (a write past it fails with EFBIG); the watchdog bounds the job folder's total,
# which is also the only writable place (its /tmp and /dev/shm are folders inside it).
FILE_SIZE = int(_env("FILE_SIZE", 256 * MiB))
DISK = int(_env("DISK", 1 * GiB))
OPEN_FILES = int(_env("OPEN_FILES", 1024))

# Processes and threads of one job. Counted inside the job's own namespace (bwrap) or per job uid, so one job's
# fork bomb cannot starve another job or the server. torch, TVM and a tune's parallel compiles need a few hundred.
PROCESSES = int(_env("PROCESSES", 512))
THREADS_PER_POOL = int(_env("THREADS", 4))  # OMP/TVM/MKL pools: a compile is mostly one core; keep room for others

# Output. The protocol (progress lines and the result, whose CUDA, PTX and host code can be a few MiB) and the job's
# own chatter on stderr (print(), TileLang logs) are capped separately; flooding stderr ends the job.
RESULT_BYTES = int(_env("RESULT_BYTES", 32 * MiB))
STDERR_BYTES = int(_env("STDERR_BYTES", 8 * MiB))   # more than this and the job is stopped
STDERR_KEPT = 64 * 1024                              # the tail of it kept for the error log

WATCH_EVERY = 0.5  # seconds between two looks at a job's memory, disk and processes


def apply_rlimits(gpu: bool) -> None:
    """Called in the child between fork and exec (before bwrap), so every process of the job inherits them.
    RLIMIT_NPROC is not set here: outside the job's namespace it would count the server's own threads (same uid);
    the worker sets it first thing inside (see worker.py)."""
    def cap(which: int, value: int) -> None:
        soft, hard = resource.getrlimit(which)
        value = value if hard == resource.RLIM_INFINITY else min(value, hard)
        resource.setrlimit(which, (value, value))

    cap(resource.RLIMIT_FSIZE, FILE_SIZE)
    cap(resource.RLIMIT_NOFILE, OPEN_FILES)
    cap(resource.RLIMIT_CORE, 0)  # a crashing kernel must not leave a core file the size of its memory
    if not gpu:
        cap(resource.RLIMIT_AS, COMPILE_ADDRESS_SPACE)


def set_nproc() -> None:
    """Bound the processes and threads of this job (called inside the sandbox, before any user code)."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NPROC)
    value = PROCESSES if hard == resource.RLIM_INFINITY else min(PROCESSES, hard)
    resource.setrlimit(resource.RLIMIT_NPROC, (value, value))
