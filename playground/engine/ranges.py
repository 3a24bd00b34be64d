"""Values checked against their valid ranges before anything is compiled, each refusal a `parameters` error that
names the parameter and its range (rather than a kernel that compiles "ok" for block_M=-1, or an internal error with
a traceback for arch=123).

- a problem size (an integer the kernel's factory takes for the problem, N, M, seq_len, ...): 1 to 2**31 - 1, what
  the kernels' int32 indexing can address;
- a tile parameter that is an integer (block_M, threads, num_stages, ...): 1 to 65536 (0 too where the kernel's own
  space or default uses it, as swizzle_panel=0 for "no swizzle"); no tile, thread count or stage count of a GPU
  kernel comes near 65536;
- the target: sm_ and a compute capability, as compile.ARCHES names them;
- the source: text that can be written as UTF-8 (a lone surrogate, which a browser or a JSON client can send, cannot).
"""
from __future__ import annotations

import re

from .errors import StageError

PROBLEM_MAX = 2**31 - 1
TILE_MAX = 65536
ARCH_PATTERN = re.compile(r"sm_[0-9]{2,3}[a-z]?")


def check_source(source: str | None) -> None:
    """A source that is not valid Unicode text: a `parameters` error at its line."""
    if source is None:
        return
    try:
        source.encode("utf-8")
    except UnicodeEncodeError as exc:
        line = source.count("\n", 0, exc.start) + 1
        column = exc.start - (source.rfind("\n", 0, exc.start) + 1) + 1
        raise StageError("parameters", f"the source is not valid text: line {line}, column {column} holds "
                                       f"U+{ord(source[exc.start]):04X}, half of a surrogate pair with no other half "
                                       "(paste the character again, or remove it)", line) from None


def check_arch(arch) -> None:
    if arch is None:
        return
    if not isinstance(arch, str) or not ARCH_PATTERN.fullmatch(arch):
        from .compile import ARCHES
        raise StageError("parameters", f"arch {arch!r} is not a target: sm_ and a compute capability, one of "
                                       f"{', '.join(ARCHES)}")


def _is_int(value) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def check_config(kernel, config) -> None:
    """The resolved problem sizes and tile parameters of `kernel` (a kernel.Kernel) within their ranges."""
    for name, value in config.problem.items():
        if _is_int(value) and not 1 <= value <= PROBLEM_MAX:
            raise StageError("parameters", f"{name}={value} is out of range: a problem size is 1 to {PROBLEM_MAX} "
                                           "(2**31 - 1)")
    space = getattr(kernel, "space", None) or {}
    defaults = getattr(kernel, "defaults", None) or {}
    for name, value in config.tile.items():
        if not _is_int(value):
            continue
        low = 0 if 0 in (space.get(name) or ()) or defaults.get(name) == 0 else 1
        if not low <= value <= TILE_MAX:
            raise StageError("parameters", f"{name}={value} is out of range: {name} is {low} to {TILE_MAX}")
