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

# An answer, in the server. Its size is the setting `result_bytes` (8 MiB: the largest answer of the shipped kernels,
# flash_attention's lowering pass by pass, is 1.2 MiB; a compile's, gemm_epilogue's at 256-row tiles, 1.1 MiB). Each
# large text of it is cut where no shipped kernel's reaches (measured with `python -m playground compile NAME --arch
# sm_90a --json` over the kernels and their options: CUDA at most 32 KB, host code 55 KB, PTX 491 KB, SASS 537 KB,
# ptxas's log 1 KB, an error's log is clipped to 20,000 characters by the engine, a pass's IR 52 KB, a submission's TIR
# 44 KB), and says "(cut at N MiB)": what the page highlights, caches and copies stays that small, whatever a job
# sends. A profile's answer may carry the Nsight Compute report on top (base64; the engine sends one up to 16 MiB).
# 1 MiB each: twice the largest (SASS, PTX), and more than the page shows of either (its first 20,000 lines: about
# 0.6 MiB of PTX); the page's highlighting costs some 40 times a text's size for a while.
TEXT_CAPS = {"cuda": MiB, "host": MiB, "ptx": MiB, "sass": MiB, "log": MiB, "ptxas_log": MiB}
OTHER_TEXT_CAP = MiB        # any other text of an answer (a `..._b64` file's bytes excepted)
REPORT_BYTES = 22 * MiB     # a profile's report in base64 (engine/profile.py's REPORT_LIMIT, 16 MiB, times 4/3)
ANSWER_VALUES = 200_000     # numbers, lists, objects of a large answer (the shipped kernels': a few thousand)
LARGE_ANSWER = MiB          # past this, a line of a job's answer holds one of LARGE_AT_ONCE places to be read
LARGE_AT_ONCE = 2           # large answers read and parsed at once, all jobs together
ANSWER_STALL = 10.0         # seconds a large answer may take to arrive once it holds its place
CUBIN_B64_BYTES = 4 * MiB   # a compile's cubin as the job sends it for the server to keep (the largest is ~0.3 MiB)
TIR_SPANS = 200_000          # a compile's TIR as the job sends it: the spans of its statements (flash_attention: ~200)
BACKGROUND_NICE = 19        # a background job's niceness (the pre-warm): the CPU goes to students' jobs first
# A compile job's niceness: the web server (niceness 0) answers a cached request (tens of ms of CPU) at once instead of
# after the compiles' time slices on a busy server; compiles share the cores among themselves as before.
COMPILE_NICE = 5


def answer_bytes(settings: Settings, action: str) -> int:
    """The most a job's answer may be: `result_bytes`, and a profile's report on top."""
    return settings.result_bytes + (REPORT_BYTES if action == "profile" else 0)


def _cap(which: int, value: int) -> None:
    soft, hard = resource.getrlimit(which)
    value = value if hard == resource.RLIM_INFINITY else min(value, hard)
    resource.setrlimit(which, (value, value))


def apply_rlimits(settings: Settings, gpu: bool, nice: int = 0) -> None:
    """Called by the job's worker first thing (worker.py), before any user code, so every process of the job inherits
    them (and `nice`, how far the job yields the CPU). Not in the server between fork and exec (a `preexec_fn`): the
    server has many threads, and a child forked from it that runs Python before exec can hang there (Python's
    subprocess docs say so; a test's server once left such a child spinning for minutes); without one, the job starts
    by vfork and exec alone. RLIMIT_NPROC: see set_nproc."""
    import os
    if nice:
        os.nice(nice)
    _cap(resource.RLIMIT_FSIZE, settings.file_size)
    _cap(resource.RLIMIT_NOFILE, settings.open_files)
    _cap(resource.RLIMIT_CORE, 0)  # a crashing kernel must not leave a core file the size of its memory
    if not gpu:
        _cap(resource.RLIMIT_AS, settings.compile_address_space)


def set_nproc(processes: int) -> None:
    """Bound the processes and threads of this job (called inside the sandbox, before any user code). Outside the
    job's namespace it would count the server's own threads (same uid)."""
    _cap(resource.RLIMIT_NPROC, processes)
