"""The verification rules, on the CPU: they decide what a student is told, so they are tested on their own."""
import torch

from playground.engine.timing import summarize
from playground.engine.verify import REL_ERROR_LIMIT, compare, poisoned


def gemm_inputs(n=96, dtype=torch.float16):
    g = torch.Generator().manual_seed(0)
    return torch.randn(n, n, generator=g).to(dtype), torch.randn(n, n, generator=g).to(dtype)


def test_correct_fp16_output_passes():
    a, b = gemm_inputs()
    ref = a.float() @ b.float()
    v = compare(ref.half(), ref, "float16")
    assert v["passed"] and v["rel_error"] < REL_ERROR_LIMIT["float16"] / 5 and v["nonfinite"] == 0


def test_correct_bf16_output_passes():
    a, b = gemm_inputs(dtype=torch.bfloat16)
    ref = a.float() @ b.float()
    assert compare(ref.bfloat16(), ref, "bfloat16")["passed"]


def test_wrong_index_fails_verification():
    a, b = gemm_inputs()
    ref = a.float() @ b.float()
    wrong = (a.float() @ b.float().t()).half()  # B read with its indices swapped
    v = compare(wrong, ref, "float16")
    assert not v["passed"] and v["rel_error"] > 0.5 and v["mismatches"] > 0 and len(v["first_mismatches"]) == 5


def test_unwritten_elements_fail_through_the_poison():
    ref = torch.randn(64, 64)
    out = poisoned((64, 64), torch.float16, "cpu")
    out[:, :63] = ref[:, :63].half()  # the last column is never written
    v = compare(out, ref, "float16")
    assert not v["passed"] and v["nonfinite"] == 64 and "NaN" in v["message"]
    assert v["first_mismatches"][0] == [0, 63]


def test_inf_fails_even_when_the_error_is_tiny_elsewhere():
    ref = torch.randn(1000)
    out = ref.clone()
    out[10] = float("inf")
    assert not compare(out.half(), ref, "float16")["passed"]


def test_shape_mismatch_fails_with_a_message():
    v = compare(torch.zeros(4, 4), torch.zeros(4, 5), "float32")
    assert not v["passed"] and "shape" in v["message"]


def test_summary_gives_median_and_percentiles():
    s = summarize([5.0, 1.0, 2.0, 3.0, 4.0])
    assert s["median_ms"] == 3.0 and s["p20_ms"] == 1.8 and s["p80_ms"] == 4.2 and s["samples"] == 5


# -- the message names the criterion that failed ------------------------------------------------------------------
def test_a_small_spread_error_in_fp16_names_the_threshold_not_zero_mismatches():
    ref = torch.full((1000,), 1.0, dtype=torch.float64)
    out = (ref * 1.009).half()  # 0.9 % off everywhere: over fp16's 5e-3, inside its 1e-2 element tolerance
    v = compare(out, ref, "float16")
    assert not v["passed"] and v["mismatches"] == 0 and v["criterion"] == "relative_error"
    assert "over the float16 limit 0.005" in v["message"] and "no single element" in v["message"]
    assert "atol 0.01 + rtol 0.01" in v["message"] and "index [" in v["message"]


def test_a_wrong_index_names_the_tolerance_and_the_first_bad_index():
    ref = torch.randn(32, 32)
    out = ref.clone()
    out[3, 5] += 10
    v = compare(out, ref, "float32")
    assert not v["passed"] and v["first_mismatches"][0] == [3, 5]
    assert "outside atol 0.0001 + rtol 0.0001·|ref|, the first at index [3, 5]" in v["message"]


def test_unwritten_elements_are_named_as_such_with_their_first_index():
    ref = torch.randn(8, 8)
    out = poisoned((8, 8), torch.float32, "cpu")
    out[:4] = ref[:4]
    v = compare(out, ref, "float32")
    assert v["criterion"] == "nonfinite" and "32 of 64 elements are NaN or Inf, the first at index [4, 0]" in v["message"]
    assert "never written" in v["message"]


def test_an_output_without_a_reference_is_never_called_verified():
    from playground.engine.verify import unchecked
    written = unchecked(torch.ones(4), "not verified: no reference")
    assert written["passed"] and written["verified"] is False and written["message"].startswith("not verified")
    half = poisoned((4,), torch.float16, "cpu")
    half[:2] = 1
    v = unchecked(half)
    assert not v["passed"] and "2 of 4 elements are NaN or Inf" in v["message"]


def test_an_integer_output_is_compared_without_wrapping_the_reference_into_its_type():
    # int32 5 against an int64 reference of 2^32 + 5, uint8 255 against -1: equal only after a wrap
    ref = torch.tensor([2**32 + 5, 7], dtype=torch.int64)
    v = compare(torch.tensor([5, 7], dtype=torch.int32), ref, "int32")
    assert not v["passed"] and v["mismatches"] == 1 and v["first_mismatches"] == [[0]]
    assert not compare(torch.tensor([255], dtype=torch.uint8), torch.tensor([-1]), "uint8")["passed"]
    assert compare(torch.tensor([5, 7], dtype=torch.int32), torch.tensor([5, 7]), "int32")["passed"]
