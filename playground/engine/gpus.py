"""The NVIDIA GPUs of this machine, asked of NVML (NVIDIA's management library, through nvidia-ml-py): the one place
the playground asks the driver what GPUs there are, what they are called, and their clocks now.

NVML creates no CUDA context, so the web server may call this without holding GPU memory or being disturbed by a
student's kernel. Without a driver (a compile-only machine, a container without GPUs) every answer is "no GPU":
an empty list, or None.
"""
from __future__ import annotations

import contextlib
import threading

try:
    import pynvml
except ImportError:  # nvidia-ml-py not installed: the same as no driver
    pynvml = None

_lock = threading.Lock()  # nvmlInit/nvmlShutdown are reference-counted, but keep one caller at a time


@contextlib.contextmanager
def _nvml():
    """NVML initialised for the block, or None where there is no usable driver."""
    if pynvml is None:
        yield None
        return
    with _lock:
        try:
            pynvml.nvmlInit()
        except pynvml.NVMLError:  # NVMLError_LibraryNotFound, _DriverNotLoaded, _NoPermission, ...
            yield None
            return
        try:
            yield pynvml
        finally:
            with contextlib.suppress(pynvml.NVMLError):
                pynvml.nvmlShutdown()


def arch_of(major: int, minor: int) -> str:
    """Compute capability 9.0 -> "sm_90a", as playground.engine.compile names targets (Hopper and Blackwell need the
    "a" variant for their tensor-core instructions)."""
    return f"sm_{major}{minor}" + ("a" if major in (9, 10) else "")


def _text(value) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def _or_none(fn, *args):
    try:
        return fn(*args)
    except Exception:  # a query this GPU or driver does not support
        return None


def list_gpus() -> list[dict]:
    """[{"index", "name", "arch", "memory_mib"}] of every NVIDIA GPU, numbered as NVML (and nvidia-smi, and CUDA with
    CUDA_DEVICE_ORDER=PCI_BUS_ID) number them; [] without a driver."""
    with _nvml() as nv:
        if nv is None:
            return []
        found = []
        try:
            count = nv.nvmlDeviceGetCount()
        except nv.NVMLError:
            return []
        for i in range(count):
            try:
                h = nv.nvmlDeviceGetHandleByIndex(i)
            except nv.NVMLError:
                continue
            cap = _or_none(nv.nvmlDeviceGetCudaComputeCapability, h)
            memory = _or_none(nv.nvmlDeviceGetMemoryInfo, h)
            found.append({"index": i, "name": _text(_or_none(nv.nvmlDeviceGetName, h) or "NVIDIA GPU"),
                          "arch": arch_of(*cap) if cap else None,
                          "memory_mib": memory.total // 2**20 if memory else None})
        return found


def first_gpu_name() -> str | None:
    found = list_gpus()
    return found[0]["name"] if found else None


def state(index: int = 0, pci: tuple[int, int, int] | None = None) -> dict:
    """The driver version and, for one GPU, its clocks (MHz), temperature (°C) and power draw (W) now; {} without a
    driver. The GPU is NVML's number `index`, or the one at PCI address `pci` = (domain, bus, device): what CUDA calls
    device 0 in a process that sees one GPU of several (NVML ignores CUDA_VISIBLE_DEVICES)."""
    with _nvml() as nv:
        if nv is None:
            return {}
        try:
            h = (nv.nvmlDeviceGetHandleByPciBusId(f"{pci[0]:08x}:{pci[1]:02x}:{pci[2]:02x}.0".encode()) if pci
                 else nv.nvmlDeviceGetHandleByIndex(index))
        except nv.NVMLError:
            return {"driver": _text(_or_none(nv.nvmlSystemGetDriverVersion) or "") or None}
        power = _or_none(nv.nvmlDeviceGetPowerUsage, h)
        return {
            "driver": _text(_or_none(nv.nvmlSystemGetDriverVersion) or "") or None,
            "clock_sm_mhz": _or_none(nv.nvmlDeviceGetClockInfo, h, nv.NVML_CLOCK_SM),
            "clock_memory_mhz": _or_none(nv.nvmlDeviceGetClockInfo, h, nv.NVML_CLOCK_MEM),
            "clock_sm_max_mhz": _or_none(nv.nvmlDeviceGetMaxClockInfo, h, nv.NVML_CLOCK_SM),
            "temperature_c": _or_none(nv.nvmlDeviceGetTemperature, h, nv.NVML_TEMPERATURE_GPU),
            "power_w": power / 1000 if power is not None else None,  # NVML answers milliwatts
        }
