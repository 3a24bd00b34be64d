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


def torch_dtype(name: str) -> torch.dtype:
    return getattr(torch, name)


def poisoned(shape, dtype: torch.dtype, device) -> torch.Tensor:
    t = torch.empty(shape, dtype=dtype, device=device)
    if dtype.is_floating_point:
        t.fill_(float("nan"))
    else:
        t.fill_(torch.iinfo(dtype).min)
    return t


def compare(out: torch.Tensor, ref: torch.Tensor, dtype: str) -> dict:
    """The verdict on one output tensor against its reference."""
    if tuple(out.shape) != tuple(ref.shape):
        return {"passed": False, "rel_error": None, "max_abs_error": None, "mismatches": None,
                "first_mismatches": [], "nonfinite": None,
                "message": f"output shape {tuple(out.shape)} differs from the reference's {tuple(ref.shape)}"}
    o = out.detach().to(torch.float64)
    r = ref.detach().to(torch.float64)
    nonfinite = int((~torch.isfinite(o)).sum())
    diff = (o - r).abs()
    diff = torch.where(torch.isfinite(diff), diff, torch.full_like(diff, math.inf))
    ref_norm = float(torch.linalg.vector_norm(r))
    err_norm = float(torch.linalg.vector_norm(diff))
    rel = err_norm / ref_norm if ref_norm > 0 else err_norm
    atol, rtol = ELEMENT_TOLERANCE.get(dtype, (1e-2, 1e-2))
    bad = diff > atol + rtol * r.abs()
    mismatches = int(bad.sum())
    first = [list(map(int, idx)) for idx in torch.nonzero(bad)[:FIRST_MISMATCHES].tolist()] if mismatches else []
    limit = REL_ERROR_LIMIT.get(dtype, 1e-2)
    passed = nonfinite == 0 and math.isfinite(rel) and rel <= limit
    message = ("ok" if passed else
               f"{nonfinite} NaN/Inf elements in the output (unwritten or overflowed)" if nonfinite else
               f"relative error {rel:.3g} is over the {dtype} limit {limit:g}")
    return {"passed": passed, "rel_error": _finite(rel), "max_abs_error": _finite(float(diff.max()) if diff.numel() else 0.0),
            "limit": limit, "mismatches": mismatches, "first_mismatches": first, "nonfinite": nonfinite,
            "elements": out.numel(), "message": message}


def _finite(x: float) -> float | None:
    return x if math.isfinite(x) else None  # JSON has no Inf/NaN
