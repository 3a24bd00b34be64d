"""The one measurement path and the plans over it (run, tune, sweep, bench), on the CPU.

These tests run no kernel: there is no GPU here. What they test is the plans' own logic (what tune ranks, what a
sweep charts, what bench counts as met) and the order of the stages inside `measure`. For that the per-configuration
measurement function is replaced by one that returns chosen results (a verification failure, a lost CUDA context,
made-up times for the configurations that pass), given to the plans through `Measurer`, which is how the real
function reaches them too. Whether the real verification and timing are right on a GPU is tests/test_engine_gpu.py's
job (`pytest -m gpu`).
"""
import math

import pytest

from playground.engine import measure as measure_module
from playground.engine.bench import TARGETS, bench, summary
from playground.engine.errors import StageError
from playground.engine.kernel import loader, problem_label
from playground.engine.measure import (DeviceError, Measurement, MeasureOptions, Measurer, baseline_names,
                                       device_error, measure, verification_failure)
from playground.engine.sweep import sweep
from playground.engine.timing import summarize
from playground.engine.tune import tune

CEILINGS = {"copy_gbps": 1000.0, "matmul_tflops": {"float16": 500.0}}


def verdict(config, passed: bool) -> dict:
    return {"shape": config.problem, "label": problem_label(config.problem), "passed": passed,
            "rel_error": 1e-4 if passed else 0.7, "max_abs_error": 0.0 if passed else 3.0, "limit": 5e-3,
            "mismatches": 0 if passed else 12, "first_mismatches": [] if passed else [[0]], "nonfinite": 0,
            "elements": 1024, "message": "ok" if passed else "relative error 0.7 is over the float16 limit 0.005"}


class StandIn:
    """A measurement function with chosen outcomes: `wrong(config)` fails verification, `lost(config)` loses the
    CUDA context; every other configuration passes and gets the time `ms(config)` (for the kernel and, when the
    options ask, each baseline at twice that)."""

    def __init__(self, wrong=lambda c: False, ms=lambda c: 1.0, lost=lambda c: False):
        self.wrong, self.ms, self.lost = wrong, ms, lost
        self.seen = []  # the configurations it was asked to measure, in order
        self.options = None

    def __call__(self, kernel, config, options, timer, compile_error=None, progress=None) -> Measurement:
        self.seen.append(config)
        self.options = options
        if self.lost(config):
            return Measurement(config, True, [verdict(config, True)], error=DeviceError(
                "the kernel failed on the GPU: CUDA error: an illegal memory access", context_lost=True))
        if self.wrong(config):
            failed = [verdict(config, False)]
            return Measurement(config, True, failed, error=verification_failure(failed))
        times = {"kernel": summarize([self.ms(config)] * 10)}
        times.update({name: summarize([2 * self.ms(config)] * 10)
                      for name in baseline_names(kernel, options.baselines, options.bench_baselines)})
        return Measurement(config, True, [verdict(config, True)], times)

    def opener(self, identity=lambda c: None):
        """What a plan takes as `open_measurer`: a Measurer with this function in place of `measure`, and a
        precompile that says each config compiled, into the kernel `identity(config)` (None: a kernel of its own)."""
        def compile_all(kernel, configs, *_, **__):
            return [{"error": None, "identity": identity(c)} for c in configs]
        return lambda options: Measurer(options, timer=None, ceilings=CEILINGS, measure=self, compile_all=compile_all,
                                        device_info=lambda: {"name": "stand-in (no GPU)"})


@pytest.fixture(scope="module")
def vector_add():
    return loader.load("vector_add")


def test_a_measurement_that_failed_verification_cannot_carry_times(vector_add):
    c = vector_add.resolve({"N": 2**20})
    with pytest.raises(ValueError):
        Measurement(c, True, [verdict(c, False)], {"kernel": summarize([1.0])})
    with pytest.raises(ValueError):  # compiled but never verified
        Measurement(c, True, [], {"kernel": summarize([1.0])})
    assert Measurement(c, True, [verdict(c, True)], {"kernel": summarize([1.0])}).stage == "timed"


def test_measure_stops_at_a_failed_verification_and_never_calls_the_timer(vector_add, monkeypatch):
    # The stages replaced: compiling and verifying need TileLang's output and a GPU; the order is what is tested.
    c = vector_add.resolve({"N": 2**20})
    monkeypatch.setattr(measure_module, "compile_stage", lambda *_: (object(), None))
    monkeypatch.setattr(measure_module, "verify_stage", lambda *_: [verdict(c, True), verdict(c, False)])

    def time_stage(*_):
        raise AssertionError("a configuration that failed verification reached the timer")
    monkeypatch.setattr(measure_module, "time_stage", time_stage)
    m = measure(vector_add, c, MeasureOptions("sm_90a", 1), timer=None)
    assert not m.verified and not m.timed and m.compiled
    assert m.error.stage == "verify" and "wrong result" in m.error.message


def test_measure_does_not_compile_again_what_the_precompile_refused(vector_add, monkeypatch):
    c = vector_add.resolve({"N": 2**20})

    def compile_stage(*_):
        raise AssertionError("compiled again")
    monkeypatch.setattr(measure_module, "compile_stage", compile_stage)
    m = measure(vector_add, c, MeasureOptions("sm_90a", 1), None, compile_error=StageError("nvcc", "bad", 7))
    assert m.stage == "none" and m.error.stage == "nvcc" and m.error.line == 7


def space_size(kernel) -> int:
    return math.prod(len(values) for values in kernel.space.values())


def test_tune_never_ranks_a_candidate_that_fails_verification(vector_add):
    # The candidates with the most threads are wrong, and would be the fastest if they were timed.
    most, second = sorted(vector_add.space["threads"])[-1], sorted(vector_add.space["threads"])[-2]
    stand_in = StandIn(wrong=lambda c: c.tile["threads"] == most, ms=lambda c: 1.0 / c.tile["threads"])
    result = tune(vector_add, vector_add.resolve({"N": 2**20}), max_configs=None, open_measurer=stand_in.opener())
    assert len(stand_in.seen) == len(result.rows) == space_size(vector_add)
    assert not stand_in.options.baselines and not stand_in.options.check_shapes  # tune verifies the tuned problem
    wrong = [r for r in result.rows if r["threads"] == most]
    assert wrong
    for r in wrong:
        assert r["verified"] is False and r["median_ms"] is None and r["tflops"] is None
        assert r["error"].startswith("verify: wrong result")
    assert result.best["tile"]["threads"] == second and result.best["median_ms"] == pytest.approx(1 / second)
    assert result.to_json()["ok"]


def test_tune_measures_each_distinct_kernel_once_and_shows_the_twins_with_its_result(vector_add):
    # As if threads were a parameter the schedule ignores: every candidate of one block_N compiles into one kernel.
    stand_in = StandIn(ms=lambda c: 1.0 / c.tile["block_N"])
    config = vector_add.resolve({"N": 2**20})
    result = tune(vector_add, config, max_configs=None,
                  open_measurer=stand_in.opener(identity=lambda c: f"block_N={c.tile['block_N']}"))
    assert len(result.rows) == space_size(vector_add)
    assert sorted(c.tile["block_N"] for c in stand_in.seen) == sorted(vector_add.space["block_N"]), \
        "one measurement for each distinct kernel"
    assert result.rows[0]["threads"] == config.tile["threads"] and "same_kernel_as" not in result.rows[0]
    twins = [r for r in result.rows if "same_kernel_as" in r]
    assert len(twins) == len(result.rows) - len(stand_in.seen)
    for r in twins:  # its own parameters, the result of the one it equals, and which one that is
        assert r["median_ms"] == pytest.approx(1.0 / r["block_N"]) and r["verified"]
        assert r["same_kernel_as"].startswith("threads=") and "block_N" not in r["same_kernel_as"]
    biggest = max(vector_add.space["block_N"])
    assert result.best["tile"]["block_N"] == biggest
    first = next(c for c in stand_in.seen if c.tile["block_N"] == biggest)
    assert result.best["tile"]["threads"] == first.tile["threads"], "the measured one wins, not its twin"


def test_tune_with_no_verified_candidate_has_no_best(vector_add):
    stand_in = StandIn(wrong=lambda c: True)
    out = tune(vector_add, vector_add.resolve({"N": 2**20}), max_configs=4, open_measurer=stand_in.opener()).to_json()
    assert not out["ok"] and out["best"] is None and out["error"]["stage"] == "verify"
    assert all(r["median_ms"] is None for r in out["table"])


def test_a_tune_where_no_candidate_compiles_says_so_with_the_compile_error_and_its_line(vector_add):
    err = StageError("tilelang", "T.copy: the shapes do not match", 21).to_json()

    def refused(kernel, config, options, timer, compile_error=None, progress=None):
        return Measurement(config, error=compile_error)
    opener = lambda options: Measurer(options, timer=None, ceilings=CEILINGS, measure=refused,  # noqa: E731
                                      compile_all=lambda kernel, configs, *_, **__: [{"error": err}] * len(configs),
                                      device_info=lambda: {"name": "stand-in (no GPU)"})
    out = tune(vector_add, vector_add.resolve({"N": 2**20}), max_configs=4, open_measurer=opener).to_json()
    assert not out["ok"] and out["error"]["stage"] == "tilelang" and out["error"]["line"] == 21
    message = out["error"]["message"]
    assert "no candidate could be measured" in message and "shapes do not match" in message


def test_tune_stops_measuring_once_the_cuda_context_is_lost(vector_add):
    # The lost context is a typed fact (DeviceError.context_lost), not a message to match.
    config = vector_add.resolve({"N": 2**20})
    fewest = min(vector_add.space["threads"])
    stand_in = StandIn(lost=lambda c: c.tile["threads"] == fewest)
    result = tune(vector_add, config, max_configs=None, open_measurer=stand_in.opener())
    lost_at = next(i for i, r in enumerate(result.rows) if r["threads"] == fewest)
    assert lost_at + 1 < len(result.rows), "the lost context must come before the last candidate to test anything"
    assert len(stand_in.seen) == lost_at + 1, "measured after the context was lost"
    assert len(result.rows) == space_size(vector_add)  # the rest stay in the table, with why they were not measured
    assert all("not measured: the CUDA context was lost" in r["error"] for r in result.rows[lost_at + 1:])


def test_sweep_never_charts_a_size_that_fails_verification(vector_add):
    stand_in = StandIn(wrong=lambda c: c.problem["N"] == 2**24)
    out = sweep(vector_add, vector_add.resolve({}), problems=[{"N": 2**20}, {"N": 2**24}, {"N": 2**28}],
                open_measurer=stand_in.opener())
    assert stand_in.options.baselines is True
    rows = {r["problem"]["N"]: r for r in out["rows"]}
    wrong = rows[2**24]
    assert "series" not in wrong and wrong["passed"] is False and wrong["error"].startswith("verify:")
    for n in (2**20, 2**28):
        assert rows[n]["passed"] and set(rows[n]["series"]) == {"kernel", "torch.add"} and rows[n]["error"] is None
    assert out["ok"]


def test_a_sweep_where_no_size_verifies_is_not_ok_and_says_why(vector_add):
    out = sweep(vector_add, vector_add.resolve({}), problems=[{"N": 2**20}, {"N": 2**24}],
                open_measurer=StandIn(wrong=lambda c: True).opener())
    assert not out["ok"] and out["error"]["stage"] == "verify"
    assert not any("series" in r for r in out["rows"])


def test_bench_marks_a_row_that_fails_verification_not_met_with_its_error(vector_add):
    targets = [("vector_add", "float16", dict(N=2**20), "copy", 0.5),
               ("vector_add", "float16", dict(N=2**24), "copy", 0.5),
               ("vector_add", "float16", dict(N=2**24), "torch.add", 1.0)]
    stand_in = StandIn(wrong=lambda c: c.problem["N"] == 2**24, ms=lambda c: 0.005)
    lines = []
    rows = bench(targets, commit="test", log=lines.append, open_measurer=stand_in.opener())
    assert len(rows) == 3 and len(stand_in.seen) == 2  # one measurement per problem, shared by its targets
    good, *wrong = rows
    assert good["met"] and good["verified"] and good["error"] is None and good["ratio"] > 0.5
    for r in wrong:
        assert r["met"] is False and r["verified"] is False and r["ratio"] is None and r["median_ms"] is None
        assert r["error"].startswith("verify: wrong result")
    assert sum(line.startswith("FAIL") for line in lines) == 2


def test_a_bench_row_marked_graph_is_timed_as_cuda_graph_replays_and_says_so(vector_add):
    stand_in = StandIn()
    seen_graph = []
    inner = stand_in.__call__

    def measure(kernel, config, options, *rest):
        seen_graph.append(options.graph)
        return inner(kernel, config, options, *rest)
    opener = lambda options: Measurer(options, timer=None, ceilings=CEILINGS, measure=measure,  # noqa: E731
                                      compile_all=lambda kernel, configs, *_, **__: [{"error": None}] * len(configs),
                                      device_info=lambda: {"name": "stand-in (no GPU)"})
    rows = bench([("vector_add", "float16", dict(N=2**20), "torch.add", 1.0, "graph"),
                  ("vector_add", "float16", dict(N=2**20), "torch.add", 1.0)], commit="test", log=lambda _: None,
                 open_measurer=opener)
    assert seen_graph == [True, False], "the same problem timed both ways is measured twice, each its own way"
    assert [r["timing"] for r in rows] == ["graph", "events"]
    assert any(len(t) == 6 and t[5] == "graph" for t in TARGETS), "the 2^20 vector add is timed with CUDA graphs"


def test_a_benchmark_only_baseline_is_measured_apart_and_its_row_is_shown_not_judged():
    stand_in = StandIn()
    problem = dict(M=1024, N=1024, K=1024)
    rows = bench([("gemm_epilogue", "float16", problem, "torch: act(a @ b + bias)", 1.20),
                  ("gemm_epilogue", "float16", problem, "linear", 1.00),
                  ("gemm_epilogue", "float16", problem, "torch.compile", None)],
                 commit="test", log=lambda _: None, open_measurer=stand_in.opener())
    assert len(stand_in.seen) == 2, "the torch.compile row has a measurement of its own"
    assert stand_in.options.baselines == ("torch.compile: act(a @ b + bias)",) and stand_in.options.bench_baselines
    unfused, linear, compiled = rows
    assert unfused["met"] is True and linear["met"] is True and unfused["baseline"] != compiled["baseline"]
    assert compiled["baseline"].startswith("torch.compile") and compiled["ratio"] == 2.0
    for r in rows:  # each baseline's spread beside its median, as the kernel's own
        assert r["baseline_p20_ms"] <= r["baseline_median_ms"] <= r["baseline_p80_ms"], r
    assert compiled["target"] is None and compiled["met"] is None
    assert summary(rows) == ("2/2 targets met", 0)
    assert any(t[3] == "torch.compile" and t[4] is None for t in TARGETS), "the epilogue is shown against it"


def test_a_failed_comparison_row_is_told_but_fails_no_benchmark_run():
    problem = dict(M=1024, N=1024, K=1024)
    stand_in = StandIn(wrong=lambda c: stand_in.options.bench_baselines)  # only the torch.compile measurement fails
    rows = bench([("gemm_epilogue", "float16", problem, "linear", 1.00),
                  ("gemm_epilogue", "float16", problem, "torch.compile", None)],
                 commit="test", log=lambda _: None, open_measurer=stand_in.opener())
    assert rows[0]["met"] and rows[1]["error"] and rows[1]["met"] is None
    assert summary(rows) == ("1/1 targets met; 1 comparison rows failed", 0)
    rows[0]["error"] = "verify: wrong result"
    assert summary(rows)[1] == 1


def test_the_benchmark_only_baselines_are_timed_only_when_asked_for_by_name():
    k = loader.load("gemm_epilogue")
    compiled = next(iter(k.bench_baselines))
    assert compiled not in baseline_names(k, True, bench=True), "a student's run never waits for torch.compile"
    assert baseline_names(k, True) == list(k.baselines)
    assert baseline_names(k, (compiled,), bench=False) == []
    assert baseline_names(k, (compiled,), bench=True) == [compiled]
    assert baseline_names(k, False, bench=True) == []


def test_the_torch_compile_baseline_of_the_fused_epilogue_computes_its_reference():
    # Real torch.compile (Inductor, on the CPU here): the baseline must solve the kernel's problem, or its time
    # means nothing.
    import torch
    k = loader.load("gemm_epilogue")
    fn = k.bench_baselines["torch.compile: act(a @ b + bias)"]
    a, b, bias = k.module.make_inputs(64, 96, 80, torch.float32, "cpu", torch.Generator().manual_seed(0))
    for activation in ("relu", "gelu"):
        out = fn(a, b, bias, activation=activation)
        assert torch.allclose(out, k.reference((a, b, bias), {"activation": activation}), atol=1e-5)


def test_bench_reports_a_kernel_that_does_not_load_as_its_rows_error():
    rows = bench([("no_such_kernel", "float16", dict(N=4), "copy", 0.5)], commit="test", log=lambda _: None,
                 open_measurer=StandIn().opener())
    assert len(rows) == 1 and not rows[0]["met"] and rows[0]["error"]


def test_a_sticky_cuda_error_loses_the_context_and_a_refused_launch_does_not():
    assert device_error(RuntimeError("CUDA error: an illegal memory access was encountered")).context_lost
    assert device_error(RuntimeError("CUDA error: unspecified launch failure")).context_lost
    refused = device_error(RuntimeError("CUDA error: too many resources requested for launch"))
    assert refused.stage == "device" and not refused.context_lost and "context is lost" not in refused.message
    oom = device_error(RuntimeError("CUDA out of memory. Tried to allocate 10.00 GiB"))
    assert not oom.context_lost
    assert set(DeviceError("x", context_lost=True).to_json()) == {"stage", "message", "line", "log"}


# -- on a GPU: the real measurement function ----------------------------------------------------------------------
@pytest.mark.gpu
def test_measure_on_the_gpu_times_a_right_kernel_and_refuses_a_wrong_one():
    from conftest import GEMM, PIPELINED
    from playground.engine.compile import resolve_arch
    from playground.engine.measure import new_seed
    wrong_source = GEMM.replace("T.copy(C_shared, C[by * block_M, bx * block_N])",
                                "T.copy(C_shared, C[bx * block_M, by * block_N])")
    assert wrong_source != GEMM
    measurer = Measurer.open(MeasureOptions(resolve_arch(None), new_seed(), baselines=True, check_shapes=True,
                                            budget_ms=200))
    params = dict(M=1024, N=1024, K=1024, block_M=128, block_N=128, **PIPELINED)
    right = loader.load("gemm", GEMM)
    m = measurer.measure(right, right.resolve(params))
    assert m.timed and m.verified and m.error is None and len(m.verification) >= 2
    assert set(m.times) == {"kernel", *right.baselines}
    wrong = loader.load("gemm", wrong_source)
    m = measurer.measure(wrong, wrong.resolve(params))
    assert m.compiled and not m.verified and not m.timed and m.error.stage == "verify"


@pytest.mark.gpu
def test_bench_measures_a_target_on_the_gpu():
    rows = bench([("vector_add", "float16", dict(N=2**24), "copy", 0.0)], budget_ms=200, commit="test",
                 log=lambda _: None)
    assert len(rows) == 1 and rows[0]["error"] is None
    assert rows[0]["verified"] and rows[0]["ratio"] > 0 and rows[0]["met"]


def test_the_l2_flush_reads_its_buffer_and_writes_nothing_the_timed_kernel_would_write_back():
    # A written flush leaves L2 full of dirty lines, and the timed kernel pays for writing them back (a fifth of
    # a 96 MB vector add's time); the flush must only read. (Its buffer on the CPU here: the same torch calls.)
    from playground.engine.timing import Timer
    timer = Timer(device="cpu")
    timer.flush_buffer.fill_(1)
    timer.flush()
    assert bool((timer.flush_buffer == 1).all())
    assert int(timer.flush_sum) == timer.flush_buffer.numel()
    assert timer.flush_sum.dtype == timer.flush_buffer.dtype  # else the sum first writes a converted copy
