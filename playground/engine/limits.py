"""What a GPU can launch: a kernel's resources checked against the target's limits, as early as each is known.

Three moments, so that an impossible kernel is refused in seconds rather than after minutes of nvcc (a kernel with
4 MiB of shared tiles lowers in seconds and then holds nvcc for minutes, unrolling what no GPU could launch):
- before lowering (`before_lowering`): the threads the kernel asks for, and its largest shared buffer as allocated
  (a lower bound: pipelining multiplies buffers by the stages, and buffers of disjoint lives may share bytes);
- after lowering, before nvcc (`while_lowered`): the lowered kernel's exact threads and shared memory, static and
  dynamic, read from the device module TileLang is about to hand to nvcc;
- after ptxas (`check`): the same from the compiled figures, and the register warnings.

- Shared memory per block (static + dynamic) over the target's opt-in maximum: the launch is refused
  (cudaErrorInvalidValue), so this is an error. The limits are CUDA's "maximum shared memory per block (opt-in)":
  227 KiB on sm_90 (H100, H200) and sm_100, 163 KiB on sm_80 (A100), 99 KiB on sm_86, sm_89 and sm_120.
- More than 1024 threads per block: no CUDA GPU launches it; an error.
- 255 registers per thread (the most a thread may have) with spills to local memory: it runs, slowly; a warning.

An error is a StageError of stage `resources` naming the figure, the limit and, where the source allocates it, the
line (the largest shared buffer's `T.alloc_shared`).
"""
from __future__ import annotations

import contextlib
import re

from .errors import StageError

KiB = 1024
SHARED_PER_BLOCK = {"sm_90": 227 * KiB, "sm_100": 227 * KiB, "sm_80": 163 * KiB, "sm_87": 163 * KiB,
                    "sm_86": 99 * KiB, "sm_89": 99 * KiB, "sm_120": 99 * KiB, "sm_75": 64 * KiB, "sm_70": 96 * KiB}
THREADS_PER_BLOCK = 1024
MAX_REGISTERS = 255


def shared_limit(arch: str) -> int | None:
    """The opt-in shared memory per block of `arch` ("sm_90a" → sm_90's), or None for an arch not in the table."""
    base = re.sub(r"[af]$", "", arch)
    return SHARED_PER_BLOCK.get(base)


def shared_buffers(func) -> list[dict]:
    """The shared-memory buffers a prim_func allocates: name, bytes and the source line of the allocation, largest
    first (before lowering: a pipelined buffer is later multiplied by its stages, so this is a lower bound)."""
    import tvm
    found: list[dict] = []
    block_type = getattr(tvm.tirx, "SBlock", None) or getattr(tvm.tirx, "Block", None)

    def visit(node):
        if block_type is not None and isinstance(node, block_type):
            for b in node.alloc_buffers:
                if not b.scope().startswith("shared"):
                    continue
                try:
                    n = 1
                    for s in b.shape:
                        n *= int(s)
                    nbytes = n * b.dtype.bits * max(1, b.dtype.lanes) // 8
                except (TypeError, ValueError, AttributeError):
                    continue
                span = getattr(b, "span", None)
                found.append({"name": b.name, "bytes": nbytes, "line": int(span.line) if span is not None else None,
                              "file": str(span.source_name.name) if span is not None else None})
    try:
        tvm.tirx.stmt_functor.post_order_visit(func.body, visit)
    except Exception:
        return []
    return sorted(found, key=lambda b: -b["bytes"])


def allocation_line(buffers: list[dict], user_file: str, source: str) -> int | None:
    """The line of the largest shared buffer's allocation in the user's file."""
    for b in buffers:
        if b.get("line") and b.get("file") and _same_file(b["file"], user_file):
            return b["line"]
    for b in buffers:  # the buffer's name where it is assigned
        for n, text in enumerate(source.splitlines(), 1):
            if re.match(rf"\s*{re.escape(b['name'])}\s*=\s*T\.alloc_shared\b", text):
                return n
    return None


def _same_file(a: str, b: str) -> bool:
    import os
    try:
        return os.path.realpath(a) == os.path.realpath(b)
    except OSError:
        return a == b


def _threads_asked(func) -> tuple[int | None, int | None]:
    """The threads a block of the prim_func's `T.Kernel` asks for (the product of its `threads`), and its line."""
    import tvm
    block_type = getattr(tvm.tirx, "SBlock", None) or getattr(tvm.tirx, "Block", None)
    found: list[tuple[int, int | None]] = []

    def visit(node):
        if block_type is not None and isinstance(node, block_type) and "tl.launch_threads" in node.annotations:
            try:
                n = 1
                for t in node.annotations["tl.launch_threads"]:
                    n *= int(t)
            except (TypeError, ValueError):
                return
            span = getattr(node, "span", None)
            found.append((n, int(span.line) if span is not None and span.line else None))
    try:
        tvm.tirx.stmt_functor.post_order_visit(func.body, visit)
    except Exception:
        return None, None
    return max(found, default=(None, None))


def _kernel_line(source: str) -> int | None:
    return next((n for n, text in enumerate(source.splitlines(), 1) if "T.Kernel(" in text), None)


def before_lowering(func, arch: str, user_file: str = "", source: str = "") -> None:
    """Refuse, before TileLang lowers anything, a kernel that asks for more threads than any block may have, or
    whose shared buffers alone, one copy each, pass the target's shared memory."""
    threads, line = _threads_asked(func)
    if threads and threads > THREADS_PER_BLOCK:
        raise StageError("resources", f"the kernel asks for {threads} threads per block; CUDA allows at most "
                                      f"{THREADS_PER_BLOCK} (refused before compiling)",
                         line if line and user_file else _kernel_line(source))
    buffers = shared_buffers(func)
    limit = shared_limit(arch)
    # One buffer alone is a lower bound; their sum is not (TileLang lets buffers whose lives do not overlap share
    # the same bytes, as a GEMM's output tile does its input tiles).
    largest = buffers[0] if buffers else None
    if limit and largest and largest["bytes"] > limit:
        raise StageError("resources", f"the shared buffer {largest['name']} alone needs {_kib(largest['bytes'])} per "
                                      f"block; {arch} allows at most {_kib(limit)} in all, so no GPU of that kind can "
                                      "launch it: use smaller tiles (refused before compiling)",
                         allocation_line(buffers, user_file, source))


def lowered_resources(device_mod) -> dict:
    """Threads a block and shared bytes (static + dynamic) of the lowered device module's kernels, the largest."""
    import tvm
    tir = tvm.tirx
    threads, shared = 0, 0
    for _, func in device_mod.functions.items():
        attrs = func.attrs or {}
        if "thread_extent" not in attrs:
            continue
        n = 1
        for k, v in attrs["thread_extent"].items():
            if str(k).startswith("threadIdx") and isinstance(v, (int, tvm.tirx.IntImm)):
                n *= int(v)
        static = [0]

        def visit(node, static=static):
            buffer = getattr(node, "buffer", None) if type(node).__name__ == "AllocBuffer" else None
            if buffer is not None and buffer.scope() == "shared":  # static; "shared.dyn" is the dynamic buffer's
                try:
                    count = 1
                    for e in buffer.shape:
                        count *= int(e)
                    static[0] += count * buffer.dtype.bits * max(1, buffer.dtype.lanes) // 8
                except (TypeError, ValueError):
                    pass
        tir.stmt_functor.post_order_visit(func.body, visit)
        try:
            dynamic = int(attrs.get("dyn_shared_memory_buf") or 0)
        except (TypeError, ValueError):  # a size known only at the launch (a dynamic shape): checked after ptxas
            dynamic = 0
        threads, shared = max(threads, n), max(shared, static[0] + dynamic)
    return {"threads": threads or None, "shared_bytes": shared or None}


@contextlib.contextmanager
def while_lowered(arch: str, buffers: list[dict], user_file: str = "", source: str = ""):
    """Check the lowered kernel against `arch` the moment TileLang has lowered it, before its CUDA goes to nvcc.
    TileLang looks `lower_to_host_device_ir` up in its module at call time; the check wraps it for this block."""
    import importlib
    tilelang_lower = importlib.import_module("tilelang.engine.lower")  # the module, not the package's function
    original = tilelang_lower.lower_to_host_device_ir

    def checked(*args, **kwargs):
        out = original(*args, **kwargs)
        found = lowered_resources(out[1])
        check(found, arch, buffers, user_file, source, when=" (refused before nvcc)")
        return out
    tilelang_lower.lower_to_host_device_ir = checked
    try:
        yield
    finally:
        tilelang_lower.lower_to_host_device_ir = original


def _kib(n: int) -> str:
    return f"{n / KiB:.1f} KiB" if n % KiB else f"{n // KiB} KiB"


def check(resources: dict, arch: str, buffers: list[dict] | None = None, user_file: str = "",
          source: str = "", when: str = "") -> list[dict]:
    """Raise a `resources` StageError for what cannot launch on `arch`; return the warnings for what will be slow
    (each {"stage": "resources", "message", "line"})."""
    buffers = buffers or []
    shared = resources.get("shared_bytes")
    limit = shared_limit(arch)
    if shared and limit and shared > limit:
        line = allocation_line(buffers, user_file, source)
        largest = next(iter(buffers), None)
        where = (f"; the largest shared buffer is {largest['name']} ({_kib(largest['bytes'])})"
                 if largest else "")
        raise StageError("resources", f"the kernel needs {_kib(shared)} of shared memory per block; {arch} allows "
                                      f"at most {_kib(limit)}, so no GPU of that kind can launch it{where}: use "
                                      f"smaller tiles or fewer pipeline stages (num_stages){when}", line)
    threads = resources.get("threads")
    if threads and threads > THREADS_PER_BLOCK:
        line = next((n for n, text in enumerate(source.splitlines(), 1) if "T.Kernel(" in text and "threads" in text),
                    None)
        raise StageError("resources", f"the kernel asks for {threads} threads per block; CUDA allows at most "
                                      f"{THREADS_PER_BLOCK}{when}", line)
    warnings = []
    registers, spills = resources.get("registers"), resources.get("spill_bytes")
    if registers and registers >= MAX_REGISTERS and spills:
        warnings.append({"stage": "resources", "line": None,
                         "message": f"{registers} registers per thread, the most a thread may have ({MAX_REGISTERS}), "
                                    f"and {spills} bytes spilled to local memory: it runs, but slowly; smaller "
                                    "fragments (block sizes) or more threads per block leave room"})
    elif spills:
        warnings.append({"stage": "resources", "line": None,
                         "message": f"{spills} bytes spilled to local memory ({registers} registers per thread): "
                                    "spills cost memory traffic"})
    return warnings
