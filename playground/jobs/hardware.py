"""What the server has, found without creating a CUDA context in the server (which would hold GPU memory and
could be lost by a student's kernel): nvidia-smi for the GPUs, os.cpu_count for the cores."""
from __future__ import annotations

import glob
import os
import shutil
import subprocess
import threading
import time

_lock = threading.Lock()
_cached: tuple[float, list[dict]] | None = None


def gpus(max_age: float = 300.0) -> list[dict]:
    """[{"index", "name", "arch", "memory_mib"}] of the visible NVIDIA GPUs; [] without any."""
    global _cached
    with _lock:
        if _cached and time.monotonic() - _cached[0] < max_age:
            return _cached[1]
        found = _query()
        _cached = (time.monotonic(), found)
        return found


def _query() -> list[dict]:
    if os.environ.get("PLAYGROUND_NO_GPU") == "1":
        return []
    smi = shutil.which("nvidia-smi")
    if smi is None:
        return [{"index": 0, "name": "NVIDIA GPU (nvidia-smi not found)", "arch": None, "memory_mib": None}] \
            if glob.glob("/dev/nvidia[0-9]*") else []
    try:
        out = subprocess.run([smi, "--query-gpu=index,name,compute_cap,memory.total", "--format=csv,noheader,nounits"],
                             capture_output=True, text=True, timeout=20).stdout
    except (OSError, subprocess.SubprocessError):
        return []
    found = []
    for line in out.strip().splitlines():
        parts = [p.strip() for p in line.split(",")]
        if len(parts) < 4 or not parts[0].isdigit():
            continue
        found.append({"index": int(parts[0]), "name": parts[1], "arch": _arch(parts[2]),
                      "memory_mib": int(parts[3]) if parts[3].isdigit() else None})
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    if visible is not None:
        keep = [int(v) for v in visible.split(",") if v.strip().isdigit()]
        found = [g for g in found if g["index"] in keep]
    return found


def _arch(cap: str) -> str | None:
    """"9.0" -> "sm_90a", as playground.engine.compile.gpu_arch names it (Hopper and Blackwell need the "a" variant)."""
    try:
        major, minor = (int(x) for x in cap.split("."))
    except ValueError:
        return None
    return f"sm_{major}{minor}" + ("a" if major in (9, 10) else "")


def default_arch() -> str:
    """The arch a request without one is compiled for: the GPU's, else the engine's default (sm_90a)."""
    found = gpus()
    return (found[0]["arch"] if found and found[0]["arch"] else None) or "sm_90a"


def cpu_count() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:
        return os.cpu_count() or 1
