"""A prim_func's buffers: their shapes at a problem's sizes, their bytes, and seeded inputs made from them (for a
file with no make_inputs of its own)."""
from __future__ import annotations

from ..errors import StageError


def buffers_of(func) -> list:
    """The prim_func's buffer parameters, in its order."""
    return [func.buffer_map[p] for p in func.params if p in func.buffer_map]


def concrete(expr, sizes: dict | None = None) -> int | None:
    """An extent as an int: a dynamic shape's (`T.symbolic`) at the values `sizes` gives its names; None where a
    name has no value."""
    try:
        return int(expr)
    except (TypeError, ValueError):
        pass
    from tvm import arith, tirx
    found = {}
    tirx.stmt_functor.post_order_visit(expr, lambda node: found.setdefault(node.name, node)
                                       if isinstance(node, tirx.Var) else None)
    values = {}
    for name, var in found.items():
        value = (sizes or {}).get(name)
        if value is not None and not isinstance(value, bool):
            try:
                values[var] = tirx.IntImm(var.dtype, int(value))
            except (TypeError, ValueError):
                pass
    try:
        return int(arith.Analyzer().simplify(tirx.stmt_functor.substitute(expr, values)))
    except (TypeError, ValueError):
        return None


def static_shape(buffer, sizes: dict | None = None) -> list[int]:
    """The buffer's shape, a dynamic one at `sizes` (the problem's values of its T.symbolic names)."""
    shape = [concrete(s, sizes) for s in buffer.shape]
    if None in shape:
        raise StageError("definition", f"buffer {buffer.name} has the symbolic shape {list(buffer.shape)} and no "
                                       "value was given for its sizes; give them as parameters (or make_inputs in "
                                       "the file can make inputs for it)")
    return shape


def buffer_torch_dtype(name: str):
    """The PyTorch type of a buffer's element type, or a `definition` error naming it."""
    from ..verify import torch_dtype
    try:
        return torch_dtype(name)
    except AttributeError:
        raise StageError("definition", f"no PyTorch type for the buffer type {name}; make_inputs in the file can "
                                       "make inputs for it") from None


def buffer_bytes(buffer, sizes: dict | None = None) -> int:
    n = 1
    for s in static_shape(buffer, sizes):
        n *= s
    bits = getattr(buffer.dtype, "bits", None) or 8 * buffer_torch_dtype(str(buffer.dtype)).itemsize
    lanes = getattr(buffer.dtype, "lanes", 1) or 1
    return n * bits * lanes // 8


def random_tensor(buffer, device: str, generator, sizes: dict | None = None):
    """Seeded random values for one input buffer: normal floats (never zeros), small integers."""
    import torch
    shape, dtype = static_shape(buffer, sizes), buffer_torch_dtype(str(buffer.dtype))
    if dtype == torch.bool:
        return torch.randint(0, 2, shape, device=device, generator=generator).bool()
    if dtype.is_floating_point:
        return torch.randn(shape, device=device, generator=generator).to(dtype)
    low, high = (-8, 8) if dtype in (torch.int8, torch.int16) else (0, 16)
    return torch.randint(low, high, shape, device=device, generator=generator, dtype=dtype)


def inputs_from_buffers(func, outputs: list[int], device: str, generator, sizes: dict | None = None) -> tuple:
    """Seeded random inputs for every buffer of `func` but the outputs (their positions), at the problem's sizes."""
    skip = set(outputs)
    return tuple(random_tensor(b, device, generator, sizes) for i, b in enumerate(buffers_of(func)) if i not in skip)
