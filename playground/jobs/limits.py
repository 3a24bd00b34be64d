"""The bounds a job runs under. Their values are settings (playground/settings.py: PLAYGROUND_TIMEOUT_*,
PLAYGROUND_PROCESSES, ...); what is here is how they are applied, and the few constants that are not for tuning.

Why the default numbers: a class of 30 shares one server. A compile needs about 0.5 GiB and a few seconds; a run,
tune or sweep needs the GPU and a few GiB of host memory. The bounds are loose enough for every kernel of the
catalogue and tight enough that one student's loop, allocation or fork bomb ends their own job only.

Memory. A compile job is bounded per process by RLIMIT_AS (a clean MemoryError at the user's line). A GPU job cannot
be: CUDA reserves a virtual address range the size of all GPU memory and more, so RLIMIT_AS would break it; the memory
all its processes hold is watched from outside instead (job.py), which catches both kinds.
Files. RLIMIT_FSIZE bounds one file (a write past it fails with EFBIG); the watchdog bounds the job folder's total,
which is also the only writable place (its /tmp and /dev/shm are folders inside it).
Processes and threads of one job: RLIMIT_NPROC, counted inside the job's own namespace (bwrap) or per job uid, so one
job's fork bomb cannot starve another job or the server. torch, TVM and a tune's parallel compiles need a few hundred.
"""
from __future__ import annotations

import resource

from ..settings import GiB, MiB, Settings  # noqa: F401  (GiB, MiB: for messages)

GRACE = 5.0          # seconds between the job's own alarm (which names the user's line) and the hard kill from outside
STDERR_KEPT = 64 * 1024  # the tail of a job's stderr kept for the error log
WATCH_EVERY = 0.5    # seconds between two looks at a job's memory, disk and processes


def _cap(which: int, value: int) -> None:
    soft, hard = resource.getrlimit(which)
    value = value if hard == resource.RLIM_INFINITY else min(value, hard)
    resource.setrlimit(which, (value, value))


def apply_rlimits(settings: Settings, gpu: bool) -> None:
    """Called in the child between fork and exec (before bwrap), so every process of the job inherits them.
    RLIMIT_NPROC is not set here: outside the job's namespace it would count the server's own threads (same uid);
    the worker sets it first thing inside (see worker.py), from the settings the job was handed."""
    _cap(resource.RLIMIT_FSIZE, settings.file_size)
    _cap(resource.RLIMIT_NOFILE, settings.open_files)
    _cap(resource.RLIMIT_CORE, 0)  # a crashing kernel must not leave a core file the size of its memory
    if not gpu:
        _cap(resource.RLIMIT_AS, settings.compile_address_space)


def set_nproc(processes: int) -> None:
    """Bound the processes and threads of this job (called inside the sandbox, before any user code)."""
    _cap(resource.RLIMIT_NPROC, processes)
