"""The grader trusts only the kernel (playground/engine/grading.py, tir_check.py, measure.py, timing.py).

A submission is the student's input to a trusted process: whatever its TIR carries besides the kernel (compile
flags, pass configs, injected source, host calls, names that write code) is refused before anything compiles; the
student's code never sees a hidden size where what it says could come back; and, on a GPU, a kernel is judged from
inputs copied before it ran, every timed call starts from poisoned outputs, and calls picked at random are checked.
"""
from __future__ import annotations

import json
import random

import pytest

from conftest import ROOT
from playground.settings import Settings

EXERCISES = ROOT / "exercises"

pytestmark = [pytest.mark.timeout(600)]
TEACHER_PW = "teacher-secret"


def _tl():
    import tilelang  # noqa: F401
    import tilelang.language as T
    import tvm
    return T, tvm


def _copy_kernel():
    T, _ = _tl()

    @T.prim_func
    def main(A: T.Tensor((1024,), "float32"), B: T.Tensor((1024,), "float32")):
        with T.Kernel(4, threads=256) as bx:
            for i in T.Parallel(256):
                B[bx * 256 + i] = A[bx * 256 + i]
    return main


def _refusal(func_or_json) -> str | None:
    from playground.engine.errors import StageError
    from playground.engine.grading import load_tir
    _, tvm = _tl()
    text = func_or_json if isinstance(func_or_json, str) else tvm.ir.save_json(func_or_json)
    try:
        load_tir(text)
    except StageError as err:
        assert err.stage == "definition"
        return err.message
    return None


# -- the TIR a submission may hand the grader ---------------------------------------------------------------------------
def test_a_kernel_carrying_compile_flags_or_pass_configs_of_its_own_is_refused_before_it_compiles():
    honest = _copy_kernel()
    assert _refusal(honest) is None
    flags = _refusal(honest.with_attr("tilelang_compile_flags", ["-Xcompiler", "-O0"]))
    assert flags and "tilelang_compile_flags" in flags
    device_flags = _refusal(honest.with_attr("tilelang_pass_configs", {"tl.device_compile_flags": "O0"}))
    assert device_flags and "tl.device_compile_flags" in device_flags
    writes_files = _refusal(honest.with_attr("tilelang_pass_configs", {"tl.enable_dump_ir": True}))
    assert writes_files and "tl.enable_dump_ir" in writes_files
    # a switch of TileLang's own code generation, on or off, is the kernel's to set (the shipped softmax does)
    assert _refusal(honest.with_attr("tilelang_pass_configs", {"tl.enable_fast_math": True})) is None


def test_source_injected_through_a_launch_option_or_a_name_is_refused():
    T, tvm = _tl()

    @T.prim_func
    def prelude(A: T.Tensor((4,), "float32")):
        with T.Kernel(1, threads=32, prelude="#include </etc/passwd>") as bx:
            A[bx] = 1.0
    assert "#include" in (_refusal(prelude) or "")

    graph = json.loads(tvm.ir.save_json(_copy_kernel()))
    for node in graph["nodes"]:
        if node["type"] == "ffi.String" and node["data"] == "A":
            node["data"] = 'A[0]; } int x = system("id"); //'
    assert "names in a kernel may hold" in (_refusal(json.dumps(graph)) or "")

    graph = json.loads(tvm.ir.save_json(_copy_kernel()))
    graph["nodes"].append({"type": "ffi.Function", "data": {}})
    assert "not TIR" in (_refusal(json.dumps(graph)) or "")


def test_a_call_shared_between_the_kernel_and_the_host_is_seen_on_the_host():
    """TIR is a graph and its JSON keeps the sharing: one call node used inside the kernel and on the host side."""
    T, _ = _tl()
    call = T.call_extern("int32", "system", "touch_pwned")

    @T.prim_func
    def shared(A: T.Tensor((4,), "float32")):
        T.evaluate(call)
        with T.Kernel(1, threads=32) as bx:
            T.evaluate(call)
            A[bx] = 1.0
    assert "on the host (call_extern)" in (_refusal(shared) or "")

    grid = T.call_extern("int32", "getpid")

    @T.prim_func
    def launch(A: T.Tensor((4,), "float32")):
        with T.Kernel(grid, threads=32) as bx:
            A[bx] = 1.0
    assert "on the host" in (_refusal(launch) or "")

    @T.prim_func
    def device_only(A: T.Tensor((4,), "float32")):
        with T.Kernel(1, threads=32) as bx:
            T.evaluate(T.call_extern("int32", "__threadfence_block"))
            A[bx] = 1.0
    assert _refusal(device_only) is None  # a CUDA device function, resolved by nvcc for the device only


def test_the_shipped_starters_and_kernels_pass_the_submission_check():
    """What students start from, and the tutorial's kernels they copy from, are kernels the grader takes."""
    import tomllib

    from playground.engine.kernel import loader
    from playground.engine.source import import_file
    for folder in sorted(EXERCISES.glob("*/exercise.toml")):
        config = tomllib.loads(folder.read_text())
        factory = getattr(import_file(folder.parent / "starter.py"), config["factory"])
        for problem in config["visible"][:1] + [config["timed"]]:
            assert _refusal(factory(**problem, dtype=config.get("dtype", "float16"))) is None, folder.parent.name
    for name in loader.builtin_names():
        kernel = loader.load(name)
        assert _refusal(kernel.prim_func(kernel.default_config())) is None, name


# -- hidden sizes -------------------------------------------------------------------------------------------------------
# Keeps every size its factory is called with, and says them all when it is called at the timed problem (public,
# so its message is shown in full).
TELLS_WHAT_IT_SAW = """
SEEN = []
_original = vector_add


def vector_add(N, dtype="float16", **tile):
    SEEN.append(N)
    if N == {timed}:
        raise ValueError("called with " + ", ".join(str(n) for n in SEEN))
    return _original(N, dtype=dtype, **tile)
"""
# Says the sizes when called at a hidden one (any N not public): its failure must be told as "a hidden shape".
TELLS_A_HIDDEN_SIZE = """
_original = vector_add


def vector_add(N, dtype="float16", **tile):
    if N not in {public}:
        print("hidden size", N)
        raise ValueError(f"hidden size {{N}}")
    return _original(N, dtype=dtype, **tile)
"""


def _says_any(text: str, sizes: list[int]) -> list[int]:
    """The sizes `text` says: as the number alone (the hidden N = 7 is in 67108864 and in line numbers, so a size
    is found only after "N=" or in a list of sizes, and a size of 4 digits or more anywhere)."""
    import re
    return [n for n in sizes if re.search(rf"(N=|, |with ){n}\b", text) or (n >= 1000 and re.search(rf"\b{n}\b", text))]


def test_no_message_of_a_submission_carries_a_hidden_size(tmp_path):
    from playground.ui import classroom as cls  # the page's class (Gradio): on the CPU only
    ex = cls.load_exercises()["vector_add"]
    room = cls.Classroom(Settings(data_dir=tmp_path / "data", teacher_password=TEACHER_PW), has_gpu=lambda: True)
    hidden = [p["N"] for p in ex.hidden]
    seen = []
    answer = room.submit("Mallory", "vector_add", ex.starter + TELLS_WHAT_IT_SAW.format(timed=ex.timed["N"]), {},
                         on_progress=lambda what, fraction: seen.append(what))
    assert not answer["ok"] and "called with" in answer["error"]["message"], answer["error"]
    text = json.dumps(answer, ensure_ascii=False) + json.dumps(seen)
    assert not _says_any(text, hidden), answer["error"]["message"]
    assert all(str(p["N"]) in answer["error"]["message"] for p in ex.visible)  # the public sizes it did see

    public = [p["N"] for p in ex.visible] + [ex.timed["N"]]
    answer = room.submit("Mallory", "vector_add", ex.starter + TELLS_A_HIDDEN_SIZE.format(public=public), {},
                         on_progress=lambda what, fraction: seen.append(what))
    assert not answer["ok"] and answer["hidden"] and "at a hidden shape" in answer["error"]["message"], answer
    text = json.dumps(answer, ensure_ascii=False) + json.dumps(seen)
    assert not _says_any(text, hidden), text[:2000]


def test_the_grade_jobs_progress_names_no_problem():
    from playground.engine.grading import _no_sizes
    assert _no_sizes("verifying 333×3000") == "verifying"
    assert _no_sizes("compiling 4 more shapes for verification") == "compiling"
    assert _no_sizes("verifying again on new inputs") == "verifying again on new inputs"


# -- which timed calls are checked ----------------------------------------------------------------------------------------
def test_every_timed_call_of_a_short_run_is_checked_and_a_random_quarter_and_the_last_of_a_long_one():
    from playground.engine.timing import AUDIT_ALL_UP_TO, audit_plan
    assert audit_plan(10) == set(range(10)) and audit_plan(AUDIT_ALL_UP_TO) == set(range(AUDIT_ALL_UP_TO))
    plans = [audit_plan(200, random.Random(seed)) for seed in range(20)]
    assert all(199 in p for p in plans)
    assert all(25 <= len(p) <= 80 for p in plans), [len(p) for p in plans]
    assert len({frozenset(p) for p in plans}) == len(plans)  # not a fixed pattern a kernel could learn
    # a kernel that skips every other call is seen skipping in every plan
    assert all(any(i % 2 for i in p) for p in plans)


# -- on a GPU: what a kernel can do to its judge --------------------------------------------------------------------------
# A vector add whose element loop does `body` (j is the element's index) and whose factory returns `returned`.
VECTOR_ADD = """
import tilelang.language as T


def vector_add(N, dtype="float16", block_N=1024, threads=256):
    @T.prim_func
    def main(A: T.Tensor((N,), dtype), B: T.Tensor((N,), dtype), C: T.Tensor((N,), dtype)):
        with T.Kernel(T.ceildiv(N, block_N), threads=threads) as bx:
            for i in T.Parallel(block_N):
                j = bx * block_N + i
                if j < N:
{body}
    return {returned}
"""


def vector_add_doing(*lines: str, returned: str = "main") -> str:
    return VECTOR_ADD.format(body="".join(f"                    {line}\n" for line in lines), returned=returned)


# Skips its work when its output already holds values (NaN is the poison): timed on outputs left from
# the call before, each call would only read C.
SKIPS_WHEN_FILLED = vector_add_doing("if T.isnan(C[j]):", "    C[j] = A[j] + B[j]")
# Zeroes its inputs and its output: with the reference computed from the inputs after the kernel ran, error 0.
ZEROES_ITS_INPUTS = vector_add_doing("A[j] = T.cast(0, dtype)", "B[j] = T.cast(0, dtype)", "C[j] = T.cast(0, dtype)")
# Sets its own compile flags (a pass config TileLang hands to nvcc).
CARRIES_FLAGS = vector_add_doing("C[j] = A[j] + B[j]",
                                 returned='main.with_attr("tilelang_pass_configs", {"tl.device_compile_flags": "O0"})')


def _grade(tmp_path, name: str, source: str) -> dict:
    """An exercise's submission through both halves of the grader, in this process (the job layer apart)."""
    import tomllib

    from playground.engine.errors import StageError
    from playground.engine.grading import build, grade
    folder = EXERCISES / name
    config = tomllib.loads((folder / "exercise.toml").read_text())
    problems = list(config["visible"]) + list(config["hidden"]) + [config["timed"]]
    try:
        built = build(source, config["factory"], problems, config["dtype"], {}, str(tmp_path / "build"))
        return grade(config["factory"], (folder / "reference.py").read_text(), built["tir"], problems,
                     len(problems) - 1, config["dtype"], None, None, None, str(tmp_path / "grade"))
    except StageError as err:
        return {"ok": False, "error": err.to_json()}


@pytest.mark.gpu
def test_on_a_gpu_a_kernel_cannot_skip_timed_calls_overwrite_its_inputs_or_set_its_flags(tmp_path, record_property):
    starter = (EXERCISES / "vector_add" / "starter.py").read_text()
    honest = _grade(tmp_path / "honest", "vector_add", starter)
    assert honest["ok"], honest.get("error")

    skips = _grade(tmp_path / "skips", "vector_add", SKIPS_WHEN_FILLED)
    record_property("gpu_summary", f"grading: honest vector_add {honest['median_ms']:.4f} ms; the kernel that skips "
                                   f"when filled {skips.get('median_ms')} ms (timed on poisoned outputs)")
    # every timed call starts from NaN, so it computes each time, reading C as well: never faster than honest
    assert skips["ok"], skips.get("error")
    assert skips["median_ms"] >= 0.8 * honest["median_ms"], (skips["median_ms"], honest["median_ms"])

    zeroes = _grade(tmp_path / "zeroes", "vector_add", ZEROES_ITS_INPUTS)
    assert not zeroes["ok"] and "wrote its input" in json.dumps(zeroes["error"]), zeroes.get("error")

    flags = _grade(tmp_path / "flags", "vector_add", CARRIES_FLAGS)
    assert not flags["ok"] and "tl.device_compile_flags" in flags["error"]["message"], flags.get("error")


@pytest.mark.gpu
def test_on_a_gpu_a_kernel_that_skips_some_timed_calls_is_caught_by_the_checks_after_them():
    """The timer's checks themselves, on a real kernel whose every other call does nothing."""
    from playground.engine.kernel import loader
    from playground.engine.errors import StageError
    from playground.engine.measure import MeasureOptions, time_stage
    from playground.engine.parallel_compile import build_jit
    from playground.engine.timing import Timer
    kernel = loader.load("vector_add")
    config = kernel.resolve({"N": 1 << 22, "dtype": "float16"})
    real = build_jit(kernel, config, None)  # for the GPU present

    class EveryOtherCall:
        prim_func = real.prim_func

        def __init__(self):
            self.calls = 0

        def __call__(self, *args):
            self.calls += 1
            if self.calls % 2:
                real(*args)

    timer = Timer()
    honest = MeasureOptions(None, 1, baselines=False, check_shapes=False, budget_ms=200, audit_timed=True)
    assert time_stage(kernel, config, honest, real, timer)["kernel"]["median_ms"] > 0
    with pytest.raises(StageError, match="a timed call did not compute its output"):
        time_stage(kernel, config, honest, EveryOtherCall(), timer)
    unchecked = MeasureOptions(None, 1, baselines=False, check_shapes=False, budget_ms=200)
    assert time_stage(kernel, config, unchecked, EveryOtherCall(), timer)["kernel"]["median_ms"] > 0

