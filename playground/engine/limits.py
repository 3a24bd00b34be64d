"""What a GPU can launch: a compiled kernel's resources checked against the target's limits before it is called
"compiled".

- Shared memory per block (static + dynamic) over the target's opt-in maximum: the launch is refused
  (cudaErrorInvalidValue), so this is an error. The limits are CUDA's "maximum shared memory per block (opt-in)":
  227 KiB on sm_90 (H100, H200) and sm_100, 163 KiB on sm_80 (A100), 99 KiB on sm_86, sm_89 and sm_120.
- More than 1024 threads per block: no CUDA GPU launches it; an error.
- 255 registers per thread (the most a thread may have) with spills to local memory: it runs, slowly; a warning.

An error is a StageError of stage `resources` naming the figure, the limit and, where the source allocates it, the
line (the largest shared buffer's `T.alloc_shared`).
"""
from __future__ import annotations

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


def _kib(n: int) -> str:
    return f"{n / KiB:.1f} KiB" if n % KiB else f"{n // KiB} KiB"


def check(resources: dict, arch: str, buffers: list[dict] | None = None, user_file: str = "",
          source: str = "") -> list[dict]:
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
                                      "smaller tiles or fewer pipeline stages (num_stages)", line)
    threads = resources.get("threads")
    if threads and threads > THREADS_PER_BLOCK:
        line = next((n for n, text in enumerate(source.splitlines(), 1) if "T.Kernel(" in text and "threads" in text),
                    None)
        raise StageError("resources", f"the kernel asks for {threads} threads per block; CUDA allows at most "
                                      f"{THREADS_PER_BLOCK}", line)
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
