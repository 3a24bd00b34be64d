"""What the server has, found without creating a CUDA context in the server (which would hold GPU memory and
could be lost by a student's kernel): NVML for the GPUs (playground/engine/gpus.py). (Its CPU cores: settings.py's
usable_cores.)"""
from __future__ import annotations

import threading
import time

from ..engine import gpus as nvml
from ..settings import Settings, current

_lock = threading.Lock()
_cached: tuple[float, Settings, list[dict]] | None = None


def gpus(settings: Settings | None = None, max_age: float = 300.0) -> list[dict]:
    """[{"index", "name", "arch", "memory_mib"}] of the GPUs jobs may use; [] without any."""
    global _cached
    settings = settings or current()
    with _lock:
        if _cached and _cached[1] is settings and time.monotonic() - _cached[0] < max_age:
            return _cached[2]
        found = visible(nvml.list_gpus(), settings)
        _cached = (time.monotonic(), settings, found)
        return found


def visible(found: list[dict], settings: Settings) -> list[dict]:
    """Of the GPUs NVML lists, those the settings leave to jobs: none with `no_gpu`, and only those named by the
    server's CUDA_VISIBLE_DEVICES where it has one (numbered as NVML numbers them: jobs run with PCI_BUS_ID order)."""
    if settings.no_gpu:
        return []
    visible_devices = settings.inherited_env.get("CUDA_VISIBLE_DEVICES")
    if visible_devices is not None:
        keep = [int(v) for v in visible_devices.split(",") if v.strip().isdigit()]
        found = [g for g in found if g["index"] in keep]
    return found


def default_arch(settings: Settings | None = None) -> str:
    """The arch a request without one is compiled for: the GPU's, else the engine's default (sm_90a)."""
    found = gpus(settings)
    return (found[0]["arch"] if found and found[0]["arch"] else None) or "sm_90a"
