"""The page's pure pieces: engine JSON → HTML, tables and figures, without launching anything.

The run/tune/sweep answers are real ones recorded on the H200 (playground/ui/samples/h200.json)."""
import json
import re
from html import unescape
from pathlib import Path

import pytest

from playground.ui import charts, controls as ctl, history as hist, views
from playground.ui.highlight import (code_html, cuda_lines_for, diff_html, snippet_html, source_line_choices,
                                     token_lines)

pytestmark = pytest.mark.timeout(60)
SAMPLES = json.loads((Path(__file__).resolve().parent.parent / "playground/ui/samples/h200.json").read_text())

CUDA = """#include <cuda.h>
extern "C" __global__ void k(half_t* __restrict__ A) {
  if (threadIdx.x < 128 && A != nullptr) {
    A[0] = A[1] > A[2] ? A[1] : A[2];
  }
}
"""
LINE_MAP = [None, 20, 22, 30, 30, None]
SOURCE = "\n".join(f"line {i} <src>" for i in range(1, 41))


def lines_of(html: str) -> list[str]:
    return re.findall(r'<div class="pg-line[^"]*"[^>]*>.*?</div>', html)


# -- highlighting ---------------------------------------------------------------------------------------------------
def test_highlighting_escapes_everything():
    html = code_html(CUDA, "cuda")
    assert "&lt;cuda.h&gt;" in html and "&amp;" in html and "&gt;" in html
    text_only = re.sub(r"<[^>]+>", "", html)
    assert "<" not in text_only and ">" not in text_only  # every angle bracket of the code is an entity
    # and the text, tags taken off and entities read back, is the code itself, line by line
    rows = [re.sub(r"<[^>]+>", "", r.split('<span class="pg-tx">', 1)[1]) for r in lines_of(html)]
    assert [unescape(r) for r in rows] == CUDA.splitlines()
    assert "<script>" not in code_html("<script>alert(1)</script>", "cuda")


def test_highlighting_colours_tokens_and_numbers_lines():
    html = code_html(CUDA, "cuda")
    assert '<span class="k' in html  # keywords have Pygments classes
    rows = lines_of(html)
    assert len(rows) == len(CUDA.splitlines())
    assert [int(n) for n in re.findall(r'<span class="pg-no">(\d+)</span>', html)] == list(range(1, 7))


SASS = """.text.main_kernel:
        /*0070*/               @!P1 BRA `(.L_x_1) ;
        /*0080*/                   HGMMA.64x128x16.F32 R24, gdesc[UR16], RZ, !UPT ;
        /*0090*/                   WARPGROUP.DEPBAR.LE gsb0, 0x0 ;
"""


def test_sass_listing_marks_opcodes_registers_and_predicates():
    lines = token_lines(SASS, "sass")
    assert len(lines) == 4
    assert '<span class="k">HGMMA.64x128x16.F32</span>' in lines[2], "the opcode with its modifiers is one keyword"
    assert '<span class="nv">R24</span>' in lines[2] and '<span class="nv">UR16</span>' in lines[2]
    assert '<span class="kp">@!P1</span>' in lines[1] and '<span class="k">BRA</span>' in lines[1]
    assert '<span class="cs">/*0090*/</span>' in lines[3]
    assert [unescape(re.sub(r"<[^>]+>", "", line)) for line in lines] == SASS.splitlines(), "nothing lost"


def test_token_lines_split_multiline_tokens():
    text = "/* a\nb */ int x;\nint y;"
    lines = token_lines(text, "cuda")
    assert len(lines) == 3 and "int" in lines[2]


def test_line_marks_follow_the_line_map():
    html = code_html(CUDA, "cuda", line_map=LINE_MAP, marked=[30], error_lines=[22],
                     source_lines=SOURCE.splitlines())
    rows = lines_of(html)
    marked = [i + 1 for i, r in enumerate(rows) if "pg-mark" in r.split(">")[0]]
    errors = [i + 1 for i, r in enumerate(rows) if "pg-error" in r.split(">")[0]]
    assert marked == cuda_lines_for(LINE_MAP, 30) == [4, 5]
    assert errors == [3]
    assert 'data-src="20"' in rows[1] and "data-src" not in rows[0]
    assert "from source line 30: line 30 &lt;src&gt;" in rows[3]  # the tooltip quotes the source, escaped


def test_a_cuda_line_made_by_an_imported_kernel_module_names_that_module_and_line():
    origins = [None, None, "flash_attention_hopper.py:169", None, None]
    html = code_html(CUDA, "cuda", line_map=[None, 20, None, 30, None], origins=origins,
                     origin_lines={"flash_attention_hopper.py:169": "T.copy(K[bz, k], K_shared)"},
                     source_lines=SOURCE.splitlines())
    rows = lines_of(html)
    assert "pg-has-origin" in rows[2].split(">")[0] and "data-src" not in rows[2]
    assert 'data-origin="flash_attention_hopper.py"' in rows[2]  # (the page's note names the module from it)
    assert "from flash_attention_hopper.py line 169: T.copy(K[bz, k], K_shared)" in rows[2]
    assert '<span class="pg-no">3</span>' in rows[2], "the listing's own line number, not the module's"
    assert "pg-has-origin" not in rows[1] and "from source line 20" in rows[1], "the file's own lines come first"
    # the picker lists that module's line after the file's own, and choosing it marks its CUDA
    choices = source_line_choices(SOURCE, [None, 20, None, 30, None], origins,
                                  {"flash_attention_hopper.py:169": "T.copy(K[bz, k], K_shared)"})
    assert choices[-1] == ("flash_attention_hopper.py:169: T.copy(K[bz, k], K_shared)",
                           "flash_attention_hopper.py:169") and [v for _, v in choices[:2]] == [20, 30]
    marked = lines_of(code_html(CUDA, "cuda", line_map=[None, 20, None, 30, None], origins=origins,
                                marked=["flash_attention_hopper.py:169"]))
    assert [i for i, r in enumerate(marked) if "pg-mark" in r.split(">")[0]] == [2]


def test_source_line_choices_list_the_mapped_lines_with_their_text():
    choices = source_line_choices(SOURCE, LINE_MAP)
    assert [n for _, n in choices] == [20, 22, 30]
    assert choices[0][0] == "20: line 20 <src>"


def test_snippet_marks_the_error_line():
    html = snippet_html(SOURCE, 10)
    rows = lines_of(html)
    assert len(rows) == 7  # 3 lines either side
    assert "pg-error" in rows[3] and ">10<" in rows[3]
    assert snippet_html(SOURCE, 999) == ""


def test_diff_shows_changes_escaped():
    a = "int x = a < b;\nfloat C_local[128];\n"
    b = "int x = a < b;\nfloat C_local[64];\n"
    html = diff_html(a, b, "#1 <old>", "#2")
    assert "pg-ddel" in html and "pg-dadd" in html and "&lt;old&gt;" in html
    assert "128" in html and "64" in html
    assert "same" in diff_html(a, a, "#1", "#2")


# -- errors, status, banner -------------------------------------------------------------------------------------
def test_error_view_shows_stage_message_and_the_users_line():
    source = "import tilelang\n\ndef gemm():\n    T.copy(A, A_sharedx)  # <here>\n"
    err = {"stage": "tilelang", "message": "NameError: name 'A_sharedx' <is> not defined", "line": 4, "log": "..."}
    html = views.error_html(err, source)
    assert ">tilelang<" in html and "line 4" in html
    assert "T.copy(A, A_sharedx)  # &lt;here&gt;" in html  # the offending line, quoted and escaped
    assert "&lt;is&gt;" in html and "<is>" not in html
    assert "pg-error" in html  # the snippet marks it
    assert views.error_html(None) == ""
    no_line = views.error_html({"stage": "device", "message": "no CUDA GPU", "line": None}, source)
    assert "no CUDA GPU" in no_line and "line" not in re.sub(r"<[^>]+>", "", no_line).lower().replace("no cuda", "")


def test_a_cached_compile_reports_the_time_the_user_waited():
    result = {"ok": True, "kernel": "gemm", "arch": "sm_90a", "compile_seconds": 12.5, "cached": True}
    text = re.sub(r"<[^>]+>", "", views.status_html("compile", result, waited=0.04))
    assert "in 0.04 s" in text and "from the cache" in text and "12.50 s" in text
    assert text.index("0.04 s") < text.index("12.50 s")  # what the user waited first
    fresh = {**result, "cached": False, "compile_seconds": 5.96}
    status = re.sub(r"<[^>]+>", "", views.status_html("compile", fresh, waited=13.1))
    assert "cache" not in status


def test_a_compile_has_one_time_the_engines_and_the_wait_around_it_is_said_apart():
    """The status said "compiled in 13.1 s" (the whole wait) and the resources line "5.96 s" (the engine's): one
    compile, two times. Now both say the engine's; the queue and the loading are told apart in the status."""
    result = {"ok": True, "kernel": "gemm", "arch": "sm_90a", "compile_seconds": 5.96, "cached": False,
              "resources": {"registers": 90, "threads": 128}}
    status = re.sub(r"<[^>]+>", "", views.status_html("compile", result, waited=13.1))
    meta = re.sub(r"<[^>]+>", "", views.resources_html(result))
    assert "compiled gemm for sm_90a in 5.96 s" in status and "compiled in 5.96 s" in meta
    assert "13.1" not in meta and "answered after 13.1 s: 7.1 s waiting in the queue and loading the kernel" in status
    assert re.findall(r"in (\d+\.\d\d) s", status) == ["5.96"], "one compile time"
    quick = re.sub(r"<[^>]+>", "", views.status_html("compile", result, waited=6.1))
    assert quick.endswith("in 5.96 s")


def test_staged_progress_names_each_stage_with_its_time():
    assert views.progress_stage("queued: 2 jobs ahead, waiting for a CPU core (about 9 s)") == "queued 3rd"
    assert views.progress_stage("queued: 0 jobs ahead, waiting for the GPU (about 1 s)") == "queued 1st"
    assert views.progress_stage("lowering: TileLang builds and lowers the kernel") == "lowering"
    assert views.progress_stage("importing: running the file's top level") == "importing the file"
    assert views.progress_stage("nvcc: compiling the generated CUDA") == "nvcc"
    assert views.progress_stage("verifying 256×256×256") == "verifying"
    assert views.progress_stage("timing against the baselines") == "timing"
    text = views.progress_text([("queued 2nd", 0.0), ("lowering", 1.5), ("nvcc", 4.0)], now=6.25)
    assert text == "queued 2nd 1.5 s ✓ · lowering 2.5 s ✓ · nvcc 2.2 s …"


def test_tilelang_errors_show_the_useful_lines_of_the_log():
    log = """Traceback (most recent call last):
  File "/x/site-packages/tilelang/jit/__init__.py", line 90, in compile
    return cached(...)
  0: tvm::tl::LayoutInference(...)
  1: 0x00007f3a2b1c
    raise IndexError(
ValueError: Check failed: (buffer A_shared shape [128, 64]) vs fragment [64, 64] mismatch
  The loop over k has extent 3
"""
    err = {"stage": "tilelang", "message": "ValueError: layout inference failed", "line": 12, "log": log}
    lines = views.useful_log_lines(err)
    assert lines == ["ValueError: Check failed: (buffer A_shared shape [128, 64]) vs fragment [64, 64] mismatch"]
    html = views.error_html(err, "\n" * 20)
    assert "A_shared shape [128, 64]" in html and "layout inference failed" in html
    assert views.useful_log_lines({"stage": "python", "message": "x", "log": log}) == []


def test_a_file_of_ones_own_pasted_over_a_shipped_kernel_is_told_what_to_do():
    pasted = {"ok": False, "kernel": "gemm", "error": {"stage": "parameters", "message": "the file has no kernel "
                                                       "'gemm'; its kernels: add", "line": None}}
    told = views.with_own_file_hint(pasted, "gemm")["error"]["message"]
    assert told.startswith("the file has no kernel 'gemm'; its kernels: add") and "New kernel" in told
    other = {"ok": False, "error": {"stage": "parameters", "message": "block_M must be one of 64, 128"}}
    assert views.with_own_file_hint(other, "gemm") is other


def test_a_resource_error_is_shown_beside_the_controls_it_names():
    c = ctl.controls_for(GEMM_DESCRIBE)
    err = {"stage": "resources", "message": "needs 1409 KiB of shared memory (block_K=256, num_stages=4); "
                                            "sm_90a has 227 KiB", "line": None, "log": ""}
    named = ctl.named_in(c, err["message"])
    assert named == ["block_K", "num_stages"]
    note = views.params_note_html(err, named, {})
    assert "pg-param-error" in note and "block_K" in note and "1409 KiB" in note
    assert views.params_note_html({"stage": "tilelang", "message": "block_K"}, [], {}) == ""
    assert "resources" in views.STAGE_HELP


def test_values_outside_the_tuned_space_are_marked_and_every_control_has_help():
    c = ctl.controls_for(GEMM_DESCRIBE)
    values = {**c.defaults(), "block_M": "96", "num_stages": "2"}
    assert list(ctl.outside_space(c, values)) == ["block_M"]  # the other tile controls are "auto": never warned
    assert "96" in ctl.outside_space(c, values)["block_M"] and "64, 128, 256" in ctl.outside_space(c, values)["block_M"]
    assert ctl.changed(c, values, "bfloat16") == {"block_M": "96", "num_stages": "2", "dtype": "bfloat16"}
    # "auto" is every tile control's default: nothing to warn about, nothing changed, options included
    a = ctl.controls_for(ATTN_DESCRIBE)
    for k in (c, a):
        assert ctl.outside_space(k, k.defaults()) == {} and ctl.changed(k, k.defaults()) == {}
    assert ctl.outside_space(a, {**a.defaults(), "act": "tanh"}) == {"act": "tanh is not one of auto, relu, gelu"}
    # a value equal to the factory's default, set by hand, is the user's (sent, and a changed value)
    assert ctl.changed(c, {**c.defaults(), "block_M": "128"}) == {"block_M": "128"}
    from playground.ui import gateway as engine
    for name in engine.kernel_names():
        k = ctl.controls_for(engine.describe(name))
        for control in k.problem + k.tile:
            text = ctl.help_text(name, control)
            assert len(text) > len(control.name) + 20 and ". " in text, (name, control.name, text)
    block_k = next(x for x in c.tile if x.name == "block_K")
    assert "32, 64" in ctl.help_text("gemm", block_k) and "shared memory" in ctl.help_text("gemm", block_k)
    html = views.param_help_html([("block_K", ctl.help_text("gemm", block_k))])
    assert 'data-param="block_K"' in html


def test_the_sweep_error_is_shown_in_its_tab_and_an_empty_sweep_draws_no_table():
    failed = {"ok": False, "kernel": "gemm", "error": {"stage": "device", "message": "no CUDA GPU on this server"}}
    assert views.sweep_frame(failed).empty and charts.sweep_figure(failed) is None
    assert "no CUDA GPU" in views.action_error_html("sweep", failed)
    assert views.action_error_html("sweep", SAMPLES["sweep_gemm"]) == ""


def test_stale_code_says_so():
    assert "Stale" in views.stale_note("gemm 256×256×256 fp16") and "gemm 256" in views.stale_note("gemm 256")


def test_status_lines():
    assert "failed at line 4" in views.status_html("compile", {"ok": False, "kernel": "gemm", "error": {
        "stage": "tilelang", "message": "bad", "line": 4}})
    ok = views.status_html("run", SAMPLES["run_gemm"])
    assert "TFLOP/s" in ok and "0.210 ms" in ok


def test_banner_says_no_gpu_once_and_names_a_gpu():
    assert "No CUDA GPU" in views.banner_html({"ok": True, "gpu": None})
    assert "H200" in views.banner_html({"ok": True, "gpu": "NVIDIA H200"})
    assert "not sandboxed" in views.banner_html({"ok": True, "gpu": "x", "sandbox": "none", "sandbox_why": "no bwrap"})


# -- compile, run, tune, sweep views -----------------------------------------------------------------------------
def test_resources_table():
    result = {"arch": "sm_90a", "compile_seconds": 2.5, "cached": False, "resources": {
        "registers": 168, "shared_bytes": 148480, "static_shared_bytes": 1024, "dynamic_shared_bytes": 147456,
        "spill_bytes": 0, "threads": 384, "grid": [16, 32, 1], "block": [384, 1, 1]}}
    html = views.resources_html(result)
    for text in ("168", "145 KiB", "0 B", "384", "16 × 32", "sm_90a", "2.50 s"):
        assert text in html, text
    spilled = views.resources_html({"resources": {**result["resources"], "spill_bytes": 64}})
    assert "pg-stat bad" in spilled
    assert "Compile" in views.resources_html(None)


def test_sass_instruction_mix_counts_each_class_and_shows_in_the_resources():
    from playground.engine.compile import sass_mix
    mix = sass_mix(SASS + "        /*00a0*/                   MUFU.EX2 R24, R24 ;\n"
                          "        /*00b0*/                   FFMA.FTZ R2, R2, R3, R4 ;\n")
    assert mix["instructions"] == 5 and mix["tensor core"] == 1 and mix["MUFU (exp, rcp)"] == 1
    assert mix["barriers and waits"] == 1 and mix["FP32 math"] == 1 and mix["local memory (spills)"] == 0
    assert sass_mix("no instructions here") == {}
    html = views.resources_html({"resources": {"registers": 40, "sass_mix": mix}})
    assert "SASS" in html and "1 tensor core" in html and "MUFU (exp, rcp) 1" in html


def test_verification_table_pass_and_fail():
    good = views.verification_html(SAMPLES["run_gemm"])
    assert good.count("✓ pass") == 3 and "3 of 3 shapes pass" in good
    bad = views.verification_html(SAMPLES["run_gemm_bad"])
    assert "✗ FAIL" in bad and "(0, 1)" in bad and "NaN/Inf" in bad
    frame = views.verification_frame(SAMPLES["run_gemm_bad"])
    assert list(frame["result"]).count("FAIL") >= 1
    assert "Run the kernel" in views.verification_html(None)


def test_tune_view_shows_a_kernel_measured_once_with_the_candidates_that_compiled_into_it():
    measured = {"rows_per_block": 4, "num_stages": 1, "compiled": True, "verified": True, "median_ms": 0.1,
                "tflops": None, "gbps": 2000.0, "rel_error": 1e-4, "error": None}
    slower = {**measured, "rows_per_block": 2, "median_ms": 0.2, "gbps": 1000.0}
    twin = {**measured, "num_stages": 3, "same_kernel_as": "num_stages=1"}
    # in the order tune writes them: a twin after the candidate it compiled into
    tune = {"ok": True, "table": [slower, measured, twin], "best": {"tile": {"rows_per_block": 4, "num_stages": 1},
                                                                    "median_ms": 0.1, "tflops": None, "gbps": 2000.0}}
    frame = views.tune_frame(tune)
    assert list(frame["num_stages"]) == [1, 3, 1] and list(frame["rows_per_block"]) == [4, 4, 2]
    assert "same_kernel_as" not in frame.columns
    assert frame.loc[0, "result"] == "✓ verified"
    assert "the same kernel as num_stages=1" in frame.loc[1, "result"]
    assert "1 the same kernel as another" in views.tune_summary_html(tune)
    bars = charts.tune_figure(tune).data[0]
    assert list(bars.x) == ["4/1", "2/1"], "a bar per kernel measured, labelled by its own parameters"


def test_speed_view_and_chart():
    run = SAMPLES["run_gemm"]
    html = views.speed_html(run)
    assert "654.2 TFLOP/s" in html and "97% matmul" in html and "matmul = cuBLAS at 8192³" in html and "torch.matmul (cuBLAS)" in html and "0.90×" in html
    fig = charts.speed_figure(run)
    bar = fig.data[0]
    assert list(bar.x) == ["this kernel", "torch.matmul (cuBLAS)"]
    assert bar.y[0] == pytest.approx(run["timing"]["median_ms"])
    # whiskers from p20 to p80
    assert bar.error_y.arrayminus[0] == pytest.approx(run["timing"]["median_ms"] - run["timing"]["p20_ms"])
    assert bar.error_y.array[0] == pytest.approx(run["timing"]["p80_ms"] - run["timing"]["median_ms"])
    assert charts.speed_figure({"ok": False}) is None
    assert "GB/s" in charts.speed_figure(SAMPLES["run_vadd"]).data[0].text[0]  # memory-bound: bandwidth


def test_tune_table_chart_and_best():
    tune = SAMPLES["tune_gemm"]
    frame = views.tune_frame(tune)
    assert len(frame) == len(tune["table"])
    timed = frame["median ms"].dropna().tolist()
    assert timed == sorted(timed) and frame.loc[0, "block_N"] == tune["best"]["tile"]["block_N"]
    assert "Best of 12" in views.tune_summary_html(tune)
    fig = charts.tune_figure(tune)
    assert len(fig.data[0].x) == len(timed)
    values = ctl.apply_tile(ctl.controls_for(GEMM_DESCRIBE), {"block_M": "64"}, tune["best"]["tile"])
    assert values["block_M"] == "128" and values["block_N"] == "256"
    # "Apply best" over controls left at "auto" sets explicit numbers: the user's values from then on
    c = ctl.controls_for(GEMM_DESCRIBE)
    applied = ctl.apply_tile(c, c.defaults(), tune["best"]["tile"])
    params = ctl.engine_params(applied, "float16")
    assert {k: params[k] for k in tune["best"]["tile"] if k in c.names} == {
        k: str(v) for k, v in tune["best"]["tile"].items() if k in c.names}
    assert ctl.changed(c, applied).keys() >= {k for k in tune["best"]["tile"] if k in c.names}


def test_sweep_chart_and_table():
    sweep = SAMPLES["sweep_gemm"]
    fig = charts.sweep_figure(sweep, "tflops")
    assert [t.name for t in fig.data] == ["this kernel", "torch.matmul (cuBLAS)"]
    assert len(fig.data[0].x) == len(sweep["rows"])
    assert charts.sweep_figure(sweep, "median_ms").data[0].error_y.array is not None
    frame = views.sweep_frame(sweep)
    assert set(frame["series"]) == {"this kernel", "torch.matmul (cuBLAS)"}


# -- history -----------------------------------------------------------------------------------------------------
def test_history_table_chart_and_compare():
    h = hist.add([], "compile", "gemm", {"ok": True, "cuda": "a\n", "config": SAMPLES["run_gemm"]["config"],
                                        "resources": {"registers": 90}}, False)
    h = hist.add(h, "run", "gemm", SAMPLES["run_gemm"], True)
    h = hist.add(h, "compile", "gemm", {"ok": False, "error": {"stage": "python", "message": "boom"}}, True,
                 config={"problem": {"M": 256}, "dtype": "float16", "tile": {"block_M": "64"}})
    frame = hist.frame(h)
    assert list(frame["#"]) == [3, 2, 1]  # newest first
    assert frame.loc[0, "result"].startswith("python: boom")
    assert "256 fp16 · block_M=64" in frame.loc[0, "kernel · config"]  # each tile value named
    assert frame.loc[1, "median ms"] == pytest.approx(0.2101, abs=1e-4)
    assert [n for _, n in hist.choices(h)] == [2, 1]  # only entries with CUDA can be compared
    assert hist.find(h, "2")["n"] == 2
    fig = charts.history_figure(h)
    assert len(fig.data[0].y) == 1
    assert charts.history_figure([]) is None
    many = []
    for _ in range(hist.LIMIT + 5):
        many = hist.add(many, "compile", "gemm", {"ok": True, "cuda": "x"}, False)
    assert len(many) == hist.LIMIT and many[-1]["n"] == hist.LIMIT + 5


def test_history_labels_name_only_the_values_that_differ_from_the_defaults():
    config = {"problem": {"M": 256, "N": 256, "K": 256}, "dtype": "float16",
              "tile": {"block_M": 128, "block_N": 128, "block_K": 64, "num_stages": 3, "warp_specialized": True}}
    defaults = {"block_M": "128", "block_N": "256", "block_K": "64", "num_stages": "3", "warp_specialized": "True"}
    assert hist.short_config(config, defaults) == "256×256×256 fp16 · block_N=128"
    assert hist.short_config({**config, "tile": {k: int(v) if v.isdigit() else v for k, v in defaults.items()}},
                             defaults).endswith("· default tile")
    h = hist.add([], "compile", "gemm", {"ok": True, "cuda": "x", "config": config}, False, defaults=defaults)
    assert h[0]["label"] == "256×256×256 fp16 · block_N=128"
    assert "True" not in h[0]["label"] and "/" not in h[0]["label"]


def test_history_labels_show_the_tile_that_ran_not_auto():
    from playground.ui import gateway as engine
    c = ctl.controls_for(engine.describe("softmax"))
    values = {**c.defaults(), "M": "32768", "N": "1024"}
    ran = {"problem": {"M": 32768, "N": 1024}, "dtype": "float16", "picked_by": "rule", "set_by_user": [],
           "tile": {"rows_per_block": 1, "num_stages": 2, "threads": 128, "cluster": 1}}
    h = hist.add([], "compile", "softmax", {"ok": True, "cuda": "x", "config": ran}, False,
                 ctl.config_of(c, values, "float16"), c.factory_defaults())
    label = h[0]["label"]
    assert "auto" not in label and label.startswith("32768×1024 fp16 · ")
    differs = {k: v for k, v in ran["tile"].items() if str(v) != c.factory_defaults()[k]}
    assert differs and all(f"{k}={v}" in label for k, v in differs.items())  # what ran, as it differs
    assert hist.choices(h)[0][0].endswith(label)  # Compare's picker reads the same
    # a job that failed before the engine resolved a config: only what the user set is named, never "auto"
    config = ctl.config_of(c, {**values, "threads": "512"}, "float16")
    assert config["tile"] == {"threads": "512"}
    failed = hist.add([], "compile", "softmax", {"ok": False, "error": {"stage": "python", "message": "x"}}, True,
                      config, c.factory_defaults())
    assert failed[0]["label"] == "32768×1024 fp16 · threads=512"


# -- controls ----------------------------------------------------------------------------------------------------
GEMM_DESCRIBE = {
    "name": "gemm", "dtypes": ["float16", "bfloat16"], "problem": ["M", "N", "K"],
    "defaults": {"M": 4096, "N": 4096, "K": 4096, "dtype": "float16", "block_M": 128, "block_N": 256, "block_K": 64,
                 "num_stages": 3, "threads": 256, "swizzle_panel": 10},
    "space": {"block_M": [64, 128, 256], "block_N": [64, 128, 256], "block_K": [32, 64], "num_stages": [2, 3, 4],
              "threads": [128, 256], "swizzle_panel": [0, 10]},
    "options": {},
    "presets": {"4096³": {"M": 4096, "N": 4096, "K": 4096}, "2048³": {"M": 2048, "N": 2048, "K": 2048}},
}
ATTN_DESCRIBE = {
    "name": "attn", "dtypes": ["float16"], "problem": ["batch", "seq", "causal"],
    "defaults": {"batch": 8, "seq": 4096, "causal": False, "dtype": "float16", "block": 128, "act": "relu"},
    "space": {"block": [64, 128]}, "options": {"act": ["relu", "gelu"]},
    "presets": {"small": {"batch": 1, "seq": 1024, "causal": True}},
}


def test_controls_come_from_the_kernels_declarations():
    c = ctl.controls_for(GEMM_DESCRIBE)
    assert [x.name for x in c.problem] == ["M", "N", "K"]
    assert [x.name for x in c.tile] == ["block_M", "block_N", "block_K", "num_stages", "threads", "swizzle_panel"]
    # every tile parameter and option starts at "auto" (the engine picks it); the factory's value is kept for labels
    assert c.tile[0].choices == [ctl.AUTO_TILE, "64", "128", "256"] and c.tile[0].default == ctl.AUTO_TILE
    assert c.tile[0].factory == "128" and all(x.auto and x.default == "auto" for x in c.tile)
    assert c.factory_defaults()["block_N"] == "256" and c.defaults()["block_N"] == "auto"
    assert c.problem[0].choices == ["2048", "4096"]
    assert c.dtypes == ["float16", "bfloat16"] and c.dtype == "float16"
    assert ctl.preset_for(c, c.defaults()) == "4096³"
    assert ctl.preset_for(c, {"M": "256", "N": "256", "K": "256"}) == ctl.CUSTOM
    a = ctl.controls_for(ATTN_DESCRIBE)
    assert a.problem[2].choices == ["True", "False"] and not a.problem[2].custom
    assert a.tile[1].group == "option" and a.tile[1].choices == ["auto", "relu", "gelu"] and a.tile[1].factory == "relu"
    assert not any(x.auto for x in c.problem + a.problem)  # sizes and switches are always sent
    assert len(c.problem) <= ctl.PROBLEM_SLOTS and len(c.tile) <= ctl.TILE_SLOTS


def test_controls_from_the_real_catalogue():
    from playground.ui import gateway as engine
    names = engine.kernel_names()
    assert "gemm" in names
    for name in names:
        c = ctl.controls_for(engine.describe(name))
        assert len(c.problem) <= ctl.PROBLEM_SLOTS and len(c.tile) <= ctl.TILE_SLOTS, name
        assert c.dtype in c.dtypes


def test_url_query_sets_parameters():
    c = ctl.controls_for(GEMM_DESCRIBE)
    values, unknown = ctl.from_query(c, {"kernel": "gemm", "block_M": "64", "dtype": "bfloat16", "bogus": "1"})
    assert values["block_M"] == "64" and values["dtype"] == "bfloat16" and values["M"] == "4096"
    assert values["block_N"] == ctl.AUTO_TILE  # a link without a tile value leaves it to the engine
    assert unknown == ["bogus"]
    values, _ = ctl.from_query(c, {"kernel": "gemm", "block_M": "128"})  # the factory's value, set by the link
    assert values["block_M"] == "128" and ctl.engine_params(values, "float16")["block_M"] == "128"
    values, _ = ctl.from_query(c, {"preset": "2048³", "K": "512"}, base={"block_N": "64"})
    assert (values["M"], values["K"], values["block_N"]) == ("2048", "512", ctl.AUTO_TILE)  # the preset's pick
    values, _ = ctl.from_query(c, {"preset": "2048³", "block_N": "64"})
    assert (values["M"], values["block_N"], values["block_M"]) == ("2048", "64", ctl.AUTO_TILE)
    assert ctl.engine_params({"M": "256", "x": ""}, "float16") == {"M": "256", "dtype": "float16"}
    slots = ctl.values_from_slots(c, ["256", None, "256"], ["64"])
    assert slots["M"] == "256" and slots["N"] == "4096" and slots["block_M"] == "64"
    assert slots["threads"] == ctl.AUTO_TILE  # an empty slot is its control's default
    q = views.share_query("gemm", {"M": "4096", "block_M": "64", "block_N": "auto", "dtype": "float16"}, c.defaults())
    assert q == "kernel=gemm&block_M=64"
    q = views.share_query("gemm", {"M": "4096", "block_M": "128", "dtype": "float16"}, c.defaults())
    assert q == "kernel=gemm&block_M=128"  # set by hand, even to the factory's value: the link keeps it


def test_the_default_controls_send_no_tile_parameter_so_the_engine_picks_them():
    from playground.ui import gateway as engine
    for name in engine.kernel_names():
        c = ctl.controls_for(engine.describe(name))
        values = c.defaults()
        dtype = values.pop("dtype")
        for control in c.problem:  # a size no preset has: only the engine's own choice can suit it
            if not control.auto and control.custom and control.default.isdigit():
                values[control.name] = str(int(control.default) * 3 // 2)
        assert ctl.preset_for(c, values) == ctl.CUSTOM, name
        params = ctl.engine_params(values, dtype)
        assert set(params) == {x.name for x in c.problem} | {"dtype"}, (name, params)
        # and the engine, given that request, says the tile was its own choice, not the user's
        from playground.engine.kernel import loader
        config = loader.load(name).resolve(params).to_json()
        assert config["picked_by"] in ("rule", "table", "default") and config["set_by_user"] == [], (name, config)
        assert set(ctl.auto_picks(c, {**values, "dtype": dtype}, config)) == {x.name for x in c.tile}, name
    # one value typed in is the only tile parameter sent, and the engine says it was the user's
    c = ctl.controls_for(engine.describe("gemm"))
    values = {**c.defaults(), "M": "3000", "block_N": "128"}
    params = ctl.engine_params(values, values.pop("dtype"))
    assert set(params) - {"M", "N", "K", "dtype"} == {"block_N"}
    from playground.engine.kernel import loader
    config = loader.load("gemm").resolve(params).to_json()
    assert config["set_by_user"] == ["block_N"] and "block_N set by you" in config["why"]
    assert "block_N" not in ctl.auto_picks(c, values, config) and "block_M" in ctl.auto_picks(c, values, config)


def test_the_page_shows_what_auto_became_and_why():
    config = {"problem": {"M": 32768, "N": 1024}, "dtype": "float16",
              "tile": {"rows_per_block": 1, "num_stages": 2, "threads": 128, "cluster": 1}, "picked_by": "rule",
              "tuned_for": None, "set_by_user": [], "why": "by the rule in the kernel's file (pick_config)"}
    text = views.tile_choice_text(config)
    assert text == ("auto → rows_per_block=1, num_stages=2, threads=128, cluster=1 "
                    "(by the rule in the kernel's file (pick_config))")
    html = views.resources_html({"arch": "sm_90a", "resources": {"registers": 30}, "config": config})
    assert "tile config: auto → rows_per_block=1, num_stages=2, threads=128, cluster=1" in html
    partly = {**config, "picked_by": "user", "set_by_user": ["threads"],
              "why": "threads set by you; the rest by the rule in the kernel's file (pick_config)"}
    assert views.tile_choice_text(partly).startswith("auto → rows_per_block=1, num_stages=2, cluster=1 (threads set")
    assert views.tile_choice_text({**config, "picked_by": "user", "set_by_user": list(config["tile"]),
                                   "why": "set by you"}) == "set by you"
    assert views.tile_choice_text(None) == "" and "tile config" not in views.resources_html({"resources": {}})
    # each control left at "auto" learns its value; one the user set does not
    from playground.ui import gateway as engine
    c = ctl.controls_for(engine.describe("softmax"))
    values = {**c.defaults(), "M": "32768", "N": "1024", "threads": "256"}
    assert ctl.auto_picks(c, values, config) == {"rows_per_block": "1", "num_stages": "2", "cluster": "1"}
    assert ctl.auto_picks(c, values, None) == {}


def test_choosing_a_preset_leaves_its_tile_to_the_engine_which_picks_the_presets_tuned_config():
    from playground.engine.kernel import loader
    from playground.ui import gateway as engine
    c = ctl.controls_for(engine.describe("softmax"))
    long_rows = next(label for label in c.presets if "32768" in label)
    assert c.tuned[long_rows]["cluster"] != int(c.factory_defaults()["cluster"])
    typed = {**c.defaults(), "threads": "512", "cluster": "4"}  # values the user set for the size before
    values = {**typed, **ctl.preset_values(c, long_rows)}
    assert values["N"] == "32768" and all(values[x.name] == ctl.AUTO_TILE for x in c.tile)
    assert ctl.preset_for(c, values) == long_rows
    params = ctl.engine_params(values, values.pop("dtype"))
    assert set(params) == {"M", "N", "dtype"}
    config = loader.load("softmax").resolve(params).to_json()
    assert config["picked_by"] == "preset" and config["tile"]["cluster"] == c.tuned[long_rows]["cluster"]
    # a tile value typed in after the preset is sent as the user's; the rest still comes from the preset
    config = loader.load("softmax").resolve({**params, "threads": "512"}).to_json()
    assert config["set_by_user"] == ["threads"] and config["tile"]["threads"] == 512
    assert config["tile"]["cluster"] == c.tuned[long_rows]["cluster"] and "tuned for" in config["why"]
    back = ctl.preset_values(c, "16384×4096")  # leaving the tuned size leaves its tuning
    assert back["cluster"] == ctl.AUTO_TILE and back["N"] == "4096"
    from_link, _ = ctl.from_query(c, {"preset": long_rows})
    assert from_link["cluster"] == ctl.AUTO_TILE and from_link["N"] == "32768"


# -- server bits ---------------------------------------------------------------------------------------------------
def test_password_from_env_and_file(tmp_path):
    from playground.ui.server import checker, password_from_env
    assert password_from_env({}) is None
    assert password_from_env({"PLAYGROUND_PASSWORD": "s3cret"}) == "s3cret"
    f = tmp_path / "pw"
    f.write_text("from-file\n")
    assert password_from_env({"PLAYGROUND_PASSWORD_FILE": str(f)}) == "from-file"
    check = checker("s3cret")
    assert check("anyone", "s3cret") and not check("anyone", "wrong")


def test_app_flags_and_environment():
    import app
    args = app.parse_args([], env={})
    assert (args.host, args.port) == ("0.0.0.0", 7860)
    args = app.parse_args([], env={"GRADIO_SERVER_NAME": "127.0.0.1", "GRADIO_SERVER_PORT": "9000"})
    assert (args.host, args.port) == ("127.0.0.1", 9000)
    args = app.parse_args(["--host", "::", "--port", "8000"], env={"GRADIO_SERVER_PORT": "9000"})
    assert (args.host, args.port) == ("::", 8000)


def test_unchanged_source_goes_to_the_engine_as_none():
    from playground.ui import gateway as engine
    original = engine.original_source("gemm")
    assert engine.normalize_source("gemm", original) is None
    assert engine.normalize_source("gemm", original.rstrip("\n")) is None  # an editor dropped the last newline
    assert engine.normalize_source("gemm", "") is None
    assert engine.normalize_source("gemm", original + "\nx = 1\n") is not None


def test_status_names_the_cluster_node_and_gpu_a_job_ran_on():
    from playground.ui.views import status_html
    result = {"ok": True, "kernel": "gemm", "arch": "sm_90a", "compile_seconds": 1.0,
              "ran_on": {"node": "10.0.0.7", "hostname": "gpu-node-2", "gpu": 1, "arch": "sm_90a"}}
    assert "ran on gpu-node-2, GPU 1 (sm_90a)" in status_html("compile", result)
    assert "ran on" not in status_html("compile", {**result, "ran_on": None})


def test_a_draft_saved_before_auto_gives_its_untouched_tile_values_back_to_the_engine():
    from playground.ui import gateway
    c = ctl.controls_for(gateway.describe("gemm"))
    old = {**{x.name: x.factory for x in c.tile if x.factory}, "block_K": "32", "M": "4096"}
    restored = ctl.from_draft_before_auto(c, old)
    assert restored["block_K"] == "32" and restored["M"] == "4096", "values set by hand and sizes stay"
    assert all(restored[x.name] == ctl.AUTO_TILE for x in c.tile if x.factory and x.name != "block_K")
    assert "block_K" in ctl.engine_params(restored, "float16") and "block_M" not in ctl.engine_params(restored, None)


def test_the_board_with_no_exercise_picked_says_to_pick_one():
    for exercise in (None, ""):
        note = views.board_note_html(exercise, {})
        assert "Pick an exercise" in unescape(note) and "pg-placeholder" in note
    empty = unescape(views.board_note_html("softmax", {"ok": True, "rows": [], "timed_at": "M=4096"}))
    assert "Pick an exercise" not in empty and "No accepted submission" in empty and "softmax" in empty
    board = {"ok": True, "timed_at": "M=4096 × N=4096", "rows": [{"rank": 1}, {"rank": 2}]}
    assert "2 students on the board of softmax, timed at M=4096 × N=4096" in unescape(
        views.board_note_html("softmax", board))
    refused = views.board_note_html("nope", {"ok": False, "error": {"message": "no exercise named 'nope'"}})
    assert "fail" in refused and "no exercise named" in unescape(refused)


def test_answers_name_the_users_file_and_no_server_folder():
    from playground.ui.gateway import _ROOT, in_users_terms
    log = ('File "/job/src/ddb4e2677449b146/kernel.py", line 2\n'
           'File "/tmp/playground-jobs-1000/server-42/job-a_b9/src/0123456789abcdef/gemm.py", line 7\n'
           'File "/tmp/playground-jobs-1000/server-42/job-a_b9/src/0123456789abcdef/helper.py", line 3\n'
           f'File "{_ROOT}playground/engine/source.py", line 100\n'
           f'File "{_ROOT}.venv/lib/python3.11/site-packages/tilelang/jit/kernel.py", line 9\n'
           'nvcc -o /job/tmp/tmpq/x.cubin /job/tmp/tmpq/tvm_kernels.cu\n'
           'see http://example.com/job/x and a/job/b')
    answer = {"ok": False, "error": {"message": "No such file: '/job/src/8e83ac33e498ffab/kernel.py.missing'",
                                     "log": log}, "file": "/job/src/ddb4e2677449b146/kernel.py",
              "report_b64": "ab/job/src/+/job/"}
    own = in_users_terms(answer, "")
    assert own["file"] == "your kernel" and own["error"]["message"] == "No such file: 'your kernel.missing'"
    assert own["error"]["log"].splitlines() == [
        'File "your kernel", line 2', 'File "gemm.py", line 7', 'File "helper.py", line 3',
        'File "playground/engine/source.py", line 100', 'File "tilelang/jit/kernel.py", line 9',
        'nvcc -o tmp/tmpq/x.cubin tmp/tmpq/tvm_kernels.cu', 'see http://example.com/job/x and a/job/b']
    assert own["report_b64"] == answer["report_b64"], "a file's bytes are left as they are"
    assert in_users_terms(answer, "gemm")["file"] == "kernel.py", "an edited gemm is gemm.py; no other file is it"
    assert in_users_terms({"file": "/job/src/ddb4e2677449b146/gemm.py"}, "gemm") == {"file": "gemm.py"}


def test_cleaning_paths_out_of_an_answer_takes_time_in_proportion_to_its_length():
    # "-I/" over and over makes every third character a place a path may start; a search on from each start to the
    # end of the text held the whole server for minutes at the source size limit.
    import time
    from playground.ui.gateway import in_users_terms
    for text in ("-I/" * 90_000, "a/site-packages" * 20_000, "/server-1/" * 30_000, "x:/server-1/job-" * 20_000):
        began = time.monotonic()
        assert in_users_terms({"message": text}, "gemm")["message"]
        assert time.monotonic() - began < 5, f"{text[:20]!r}... took {time.monotonic() - began:.1f} s"
    cleaned = in_users_terms({"log": "nvcc -I/opt/venv/lib/python3.11/site-packages/tilelang/src -I/x/server-7/job-ab"
                                     "/tmp/inc a:/t/server-1/job-x/y"}, "gemm")["log"]
    assert cleaned == "nvcc -Itilelang/src -Itmp/inc a:y"


def test_the_code_is_marked_edited_only_when_the_setup_differs_from_the_compiled_one():
    from playground.ui.views import edited_note
    assert edited_note(None, "a") == "" and edited_note("a", "a") == ""
    assert "Edited since this code was compiled" in edited_note("a", "b")


def test_a_value_the_compile_will_refuse_is_told_before_the_compile():
    a = ctl.controls_for(GEMM_DESCRIBE)
    told = ctl.outside_space(a, {**a.defaults(), "M": "abc", "N": "0", "K": "", "block_N": "-128",
                                 "swizzle_panel": "0"})
    assert "not a whole number" in told["M"] and "not positive" in told["N"] and "is used" in told["K"]
    assert "negative" in told["block_N"] and "swizzle_panel" not in told  # 0 is a swizzle panel the space offers
    assert "may still compile" in ctl.outside_space(a, {**a.defaults(), "block_N": "96"})["block_N"]


def test_generated_cudas_preamble_is_folded_so_the_pane_opens_at_its_first_global():
    from playground.ui.highlight import code_html, preamble_lines
    preamble = ["#if defined(_MSC_VER)", "#define alignas(N) x", "#endif", "#include <tl_templates/cuda/gemm.h>",
                "#ifdef ENABLE_BF16", "#include <x.cuh>", "#endif", ""]
    cuda = "\n".join(preamble + ['extern "C" __global__ void k(half* A);', "__global__ void k(half* A) {", "}"])
    assert preamble_lines(cuda) == len(preamble)
    html = code_html(cuda, "cuda", fold_preamble=True)
    head, rest = html.split("</details>")
    assert '<details class="pg-fold">' in head and "preamble: 8 lines" in head and head.count('class="pg-line"') == 8
    assert re.sub(r"<[^>]+>", "", rest).lstrip().startswith("9extern"), "the first line shown: __global__, numbered 9"
    assert "<details" not in code_html(cuda, "cuda"), "only where asked (the CUDA pane)"
    # code before the first __global__ that is not the preprocessor's (a helper function) is not folded away
    assert preamble_lines("#include <a.h>\n#include <b.h>\n__device__ int f() { return 1; }\n__global__ void k() {}") == 0
    assert preamble_lines("__global__ void k() {}") == 0


def test_the_source_editor_sends_the_text_as_it_is():
    # gr.Code strips leading and trailing whitespace: a shared source lost its final newline
    from playground.ui.layout import SourceEditor
    editor = SourceEditor("x = 1\n", language="python")
    assert editor.postprocess("  x = 1\n\n") == "  x = 1\n\n" and editor.postprocess(None) is None
    assert editor.get_block_name() == "code"


def test_a_switch_given_as_a_word_says_under_the_resources_which_value_it_took():
    result = {"ok": True, "resources": {"registers": 40}, "compile_seconds": 1.0,
              "config": {"tile": {"is_causal": False}, "set_by_user": ["is_causal"], "picked_by": "user",
                         "why": "set by you", "notes": ["is_causal='no' taken as false"]}}
    assert "is_causal=&#x27;no&#x27; taken as false" in views.resources_html(result)


def test_an_answer_written_by_the_users_code_cannot_put_markup_or_a_link_in_a_classmates_page():
    """A job imports the user's file, and code run at its import can write the job's answer; a shared link shows
    that answer to whoever opens it and compiles. What the views take from it is shown as a value or not at all."""
    gemm = ctl.controls_for(GEMM_DESCRIBE)
    values = {c.name: ctl.AUTO_TILE for c in gemm.tile}
    assert any(c.auto for c in gemm.tile)
    name = next(c.name for c in gemm.tile if c.auto)
    forged = {"tile": {name: "[see](java\tscript:alert(1))"}}
    assert name not in ctl.auto_picks(gemm, values, forged)  # (a dropdown's info is Markdown: a link)
    assert ctl.auto_picks(gemm, values, {"tile": {name: 128}})[name] == "128"
    assert ctl.auto_picks(gemm, values, "not a config") == {}
    listing = code_html("a\nb", line_map=['1" onmouseover="alert(1)', 2], source_lines=None)
    assert "onmouseover" not in listing and 'data-src="2"' in listing
    assert views.first_sentence(" \n ") == ""  # (white space alone: no first line, and no IndexError)
    # Plotly draws <a> and styles in names and labels: a baseline's name from the answer is text there too
    run = json.loads(json.dumps(SAMPLES["run_gemm"]))
    run["baselines"] = {'<a href="https://x.example">cuBLAS</a>': run["baselines"]["torch.matmul (cuBLAS)"]}
    from playground.ui.roofline import roofline_figure
    for fig in (charts.speed_figure(run), roofline_figure(run)):
        assert "<a href" not in fig.to_json() and "&lt;a href" in fig.to_json()
