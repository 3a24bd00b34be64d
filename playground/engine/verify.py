"""Is the kernel right? Compare its outputs with the kernel file's PyTorch reference.

The rules, the same for every kernel:
- Inputs are fresh seeded random numbers (never zeros: zeros hide wrong indexing and unwritten outputs).
- Outputs are poisoned with NaN before the run, so an element the kernel never writes fails the check.
- The reference is computed in float32 or better; the comparison is done in float64.
- The figure that decides is the relative Frobenius error ‖out − ref‖ / ‖ref‖, against the threshold of the output
  dtype below. Any NaN or Inf in the output fails, whatever the error.
- Elements farther than atol + rtol·|ref| from the reference are counted as mismatches and the first few indices
  reported, to show *where* a kernel is wrong; they inform, the Frobenius error decides.

Thresholds (relative Frobenius error): the rounding of one output element alone is 2^-11 ≈ 4.9e-4 relative for fp16
and 2^-8 ≈ 3.9e-3 for bf16; accumulating in fp32 adds little. A threshold a few times that passes every correct
kernel and fails any wrong index, which moves the error to order 1.
"""
from __future__ import annotations

import math

import torch

REL_ERROR_LIMIT = {"float16": 5e-3, "bfloat16": 2e-2, "float32": 1e-4}
# atol, rtol for the per-element mismatch map
ELEMENT_TOLERANCE = {"float16": (1e-2, 1e-2), "bfloat16": (5e-2, 5e-2), "float32": (1e-4, 1e-4)}
FIRST_MISMATCHES = 5


def is_exact(dtype: str) -> bool:
    """Integer and bool outputs have no rounding to allow for: one element off is a wrong kernel, and a relative
    error over the whole tensor would hide it (one wrong int in 4096 is ~1e-3 relative)."""
    return str(dtype).startswith(("int", "uint")) or dtype == "bool"


DTYPE_ALIASES = {"float": "float32", "half": "float16", "double": "float64", "float8_e4m3": "float8_e4m3fn"}


def torch_dtype(name: str) -> torch.dtype:
    """PyTorch's type for a dtype name as TileLang or PyTorch spell it ("float16", "float", "torch.bfloat16")."""
    name = str(name).removeprefix("torch.")
    return getattr(torch, DTYPE_ALIASES.get(name, name))


def poisoned(shape, dtype: torch.dtype, device) -> torch.Tensor:
    return refill(torch.empty(shape, dtype=dtype, device=device))


def refill(t: torch.Tensor) -> torch.Tensor:
    """Poison `t` in place: NaN, or True, or the integer type's most negative value."""
    if t.dtype.is_floating_point:
        t.fill_(float("nan"))
    elif t.dtype == torch.bool:
        t.fill_(True)
    else:
        t.fill_(torch.iinfo(t.dtype).min)
    return t


def _index(flat: int, shape) -> list[int]:
    return [int(i) for i in torch.unravel_index(torch.tensor(flat), tuple(shape))] if len(shape) else []


def _fmt(index: list[int]) -> str:
    return "[" + ", ".join(map(str, index)) + "]"


def compare(out: torch.Tensor, ref: torch.Tensor, dtype: str) -> dict:
    """The verdict on one output tensor against its reference. `message` names the criterion that decided, with
    its figure, its threshold and the first index where it fails, so that it reads true on its own."""
    if tuple(out.shape) != tuple(ref.shape):
        return {"passed": False, "verified": True, "criterion": "shape", "rel_error": None, "max_abs_error": None,
                "mismatches": None, "first_mismatches": [], "nonfinite": None, "elements": out.numel(),
                "message": f"output shape {tuple(out.shape)} differs from the reference's {tuple(ref.shape)}"}
    o = out.detach().to(torch.float64)
    r = ref.detach().to(torch.float64)
    bad_values = ~torch.isfinite(o)
    nonfinite = int(bad_values.sum())
    diff = (o - r).abs()
    diff = torch.where(torch.isfinite(diff), diff, torch.full_like(diff, math.inf))
    ref_norm = float(torch.linalg.vector_norm(r))
    err_norm = float(torch.linalg.vector_norm(diff))
    rel = err_norm / ref_norm if ref_norm > 0 else err_norm
    exact = is_exact(dtype)
    atol, rtol = (0.0, 0.0) if exact else ELEMENT_TOLERANCE.get(dtype, (1e-2, 1e-2))
    if exact and not out.is_floating_point() and not ref.is_floating_point():
        # natively (float64 holds integers only up to 2^53), in a type that holds both: a reference of 2^32 + 5
        # must not wrap to an int32 output's 5
        common = torch.promote_types(out.dtype, ref.dtype)
        bad = out.detach().to(common) != ref.detach().to(common)
    else:
        bad = diff > atol + rtol * r.abs()
    mismatches = int(bad.sum())
    first = [list(map(int, idx)) for idx in torch.nonzero(bad)[:FIRST_MISMATCHES].tolist()] if mismatches else []
    limit = 0.0 if exact else REL_ERROR_LIMIT.get(dtype, 1e-2)
    max_abs = float(diff.max()) if diff.numel() else 0.0
    worst = _index(int(torch.argmax(torch.nan_to_num(diff, posinf=1e308))), out.shape) if diff.numel() else []
    passed = nonfinite == 0 and (mismatches == 0 if exact else math.isfinite(rel) and rel <= limit)
    n = out.numel()
    tolerance = f"atol {atol:g} + rtol {rtol:g}·|ref|"
    if passed:
        criterion, message = None, "ok"
    elif nonfinite:
        at = _index(int(torch.nonzero(bad_values.flatten())[0]), out.shape)
        unwritten = int((torch.isnan(o) & torch.isfinite(r)).sum())
        criterion = "nonfinite"
        message = (f"{nonfinite} of {n} elements are NaN or Inf, the first at index {_fmt(at)}"
                   + (f" ({unwritten} NaN where the reference is finite: the outputs are filled with NaN before the "
                      "run, so these elements were never written, or the kernel computed NaN)" if unwritten else ""))
    elif exact:
        criterion = "exact"
        message = (f"{mismatches} of {n} elements differ from the reference ({dtype} outputs must equal it exactly), "
                   f"the first at index {_fmt(first[0])} (the largest error, {max_abs:.3g}, at {_fmt(worst)})")
    else:
        criterion = "relative_error"
        message = f"relative error ‖out − ref‖/‖ref‖ = {rel:.3g} is over the {dtype} limit {limit:g}; "
        if mismatches:
            message += (f"{mismatches} of {n} elements are outside {tolerance}, the first at index {_fmt(first[0])}"
                        f" (the largest error, {max_abs:.3g}, at {_fmt(worst)})")
        else:
            message += (f"no single element is outside {tolerance}: the error is small and spread over many "
                        f"elements; the largest, {max_abs:.3g}, is at index {_fmt(worst)}")
    return {"passed": passed, "verified": True, "criterion": criterion, "rel_error": _finite(rel),
            "max_abs_error": _finite(max_abs), "worst_index": worst, "limit": limit, "atol": atol, "rtol": rtol,
            "mismatches": mismatches, "first_mismatches": first, "nonfinite": nonfinite, "elements": n,
            "message": message}


def unchecked(out: torch.Tensor, note: str | None = None) -> dict:
    """The verdict on an output with no reference to compare with: it passes if every element was written and is
    finite, and says it is not verified."""
    bad_values = ~torch.isfinite(out.detach().to(torch.float64)) if out.dtype.is_floating_point else None
    nonfinite = int(bad_values.sum()) if bad_values is not None else 0
    n = out.numel()
    if nonfinite:
        at = _index(int(torch.nonzero(bad_values.flatten())[0]), out.shape)
        message = (f"{nonfinite} of {n} elements are NaN or Inf, the first at index {_fmt(at)} (the outputs are "
                   "filled with NaN before the run: unwritten, or computed as NaN)")
    else:
        message = note or "not verified: no reference to compare with"
    return {"passed": nonfinite == 0, "verified": False, "criterion": "nonfinite" if nonfinite else None,
            "rel_error": None, "max_abs_error": None, "limit": None, "mismatches": None, "first_mismatches": [],
            "nonfinite": nonfinite, "elements": n, "message": message}


def _finite(x: float) -> float | None:
    return x if math.isfinite(x) else None  # JSON has no Inf/NaN
