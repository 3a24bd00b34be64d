"""The GPU a result was measured on, and its ceilings measured the way kernels are timed.

A percentage of a datasheet figure flatters nobody; a percentage of what this very GPU does for a device-to-device
copy (bytes read + written) and for cuBLAS's best matrix product is a goal a student can actually reach.
"""
from __future__ import annotations

import functools
import json
import subprocess
import sys

from . import compile_cache as cache, gpus
from .errors import StageError
from ..settings import current as current_settings

NO_GPU = "no CUDA GPU is present on this machine: compile works without one, run, tune and sweep need one"


def require_gpu() -> None:
    import torch
    if not torch.cuda.is_available():
        raise StageError("device", NO_GPU)


# Asked of the CUDA driver directly: cuInit and an attribute query create no context.
_SM_COUNT = """
import ctypes
cuda, dev, n = ctypes.CDLL("libcuda.so.1"), ctypes.c_int(), ctypes.c_int()
assert cuda.cuInit(0) == 0 and cuda.cuDeviceGet(ctypes.byref(dev), 0) == 0
assert cuda.cuDeviceGetAttribute(ctypes.byref(n), 16, dev) == 0  # CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT
print(n.value)
"""


@functools.lru_cache(maxsize=None)
def sm_count() -> int | None:
    """Multiprocessors of the first visible GPU, or None without one. Asked in a child process, so that the caller
    (the server, which keeps CUDA out of its own process) never loads the driver itself."""
    if current_settings().no_gpu:
        return None
    try:
        out = subprocess.run([sys.executable, "-c", _SM_COUNT], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.SubprocessError):
        return None
    return int(out.stdout) if out.returncode == 0 and out.stdout.strip().isdigit() else None


def info() -> dict:
    """Name, memory, multiprocessors and clocks of the GPU now (clocks read at the moment of the call)."""
    import torch
    props = torch.cuda.get_device_properties(0)
    pci = tuple(getattr(props, f"pci_{p}_id", None) for p in ("domain", "bus", "device"))
    now = gpus.state(pci=pci if None not in pci else None)  # NVML: the same GPU as CUDA's device 0 here
    return {
        "name": props.name,
        "capability": f"{props.major}.{props.minor}",
        "multiprocessors": props.multi_processor_count,
        "memory_gib": round(props.total_memory / 2**30, 1),
        "l2_mib": round(getattr(props, "L2_cache_size", 0) / 2**20, 1),
        "driver": now.get("driver"),
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "clocks_mhz": {"sm": _num(now.get("clock_sm_mhz")), "memory": _num(now.get("clock_memory_mhz")),
                       "sm_max": _num(now.get("clock_sm_max_mhz"))},
        "temperature_c": _num(now.get("temperature_c")),
        "power_w": _num(now.get("power_w")),
    }


def _num(text):
    try:
        return float(text)
    except (TypeError, ValueError):
        return None


def measure_ceilings(timer) -> dict:
    """Copy bandwidth (GB/s, bytes read + written) and cuBLAS fp16/bf16 matmul rate (TFLOP/s) at 8192³."""
    import torch
    src = torch.empty(2**30 // 2, dtype=torch.float16, device="cuda").normal_()  # 1 GiB
    dst = torch.empty_like(src)
    fns = {"copy": lambda: dst.copy_(src)}
    n = 8192
    mats = {}
    for dt in ("float16", "bfloat16"):
        a = torch.randn(n, n, device="cuda", dtype=getattr(torch, dt))
        b = torch.randn(n, n, device="cuda", dtype=getattr(torch, dt))
        mats[dt] = (a, b)
        fns[f"matmul_{dt}"] = (lambda a=a, b=b: a @ b)
    t = timer.time(fns, budget_ms=1500, min_samples=10, max_samples=50)
    result = {
        "copy_gbps": 2 * src.numel() * 2 / (t["copy"]["median_ms"] * 1e6),
        "matmul_tflops": {dt: 2 * n**3 / (t[f"matmul_{dt}"]["median_ms"] * 1e9) for dt in mats},
        "how": "device-to-device copy of 1 GiB (bytes read + written) and torch.matmul at 8192³, median of "
               "L2-flushed CUDA-event samples",
    }
    del src, dst, mats
    torch.cuda.empty_cache()
    return result


def ceilings(timer, refresh: bool = False) -> dict:
    """The measured ceilings of this GPU, cached per GPU name and driver (measuring costs a few seconds)."""
    gpu = info()
    k = cache.key("ceilings", gpu["name"], gpu["driver"], gpu["torch"])
    hit = None if refresh else cache.get("ceilings", k)
    if hit is None:
        hit = {**measure_ceilings(timer), "gpu": gpu["name"]}
        cache.put("ceilings", k, hit)
    return hit


def matmul_ceiling(ceil: dict, dtype: str) -> float | None:
    return ceil.get("matmul_tflops", {}).get(dtype) or ceil.get("matmul_tflops", {}).get("float16")


if __name__ == "__main__":
    print(json.dumps(info(), indent=1))
