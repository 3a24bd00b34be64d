"""The profiler's and memory checker's plumbing on the CPU: the SASS → CUDA → TileLang line table of a real compile,
and the parsing of Nsight Compute's CSV pages and compute-sanitizer's log.

The CSV and log samples below are constructed by hand in the formats those tools print (ncu `--csv --page source
--print-source sass`: a "Kernel Name" row, a header row starting with "Address", one row per SASS instruction with
"Source", "Warp Stall Sampling (All Samples)", "Instructions Executed" and one "stall_<reason>" column per reason;
`--page details`: ID, ..., Section Name, Metric Name, Metric Unit, Metric Value, Rule Name, ...; `--page raw`: metric
names, a row of units, a row per kernel; compute-sanitizer: "=========" lines). Their instructions are the real SASS
of the compile under test. The run on a GPU, with the real tools, is tests/test_profile_gpu.py.
"""
import csv
import io

import pytest

from playground.engine.actions import execute
from playground.engine.kernel import loader
from playground.engine.profile import (align, build_with_line_table, locate, opcode, parse_details, parse_raw,
                                       parse_sanitizer, parse_source, sass_line_table, stall_reasons, stalls_by_line,
                                       user_line)


@pytest.fixture(scope="module")
def vector_add_build(tmp_path_factory):
    kernel = loader.load("vector_add")
    config = kernel.default_config()
    _, info = build_with_line_table(kernel, config, "sm_90a", tmp_path_factory.mktemp("build"))
    return kernel, info


def line_of(kernel, text):
    return next(n for n, line in enumerate(kernel.source.splitlines(), 1) if text in line)


def lines_of(kernel, info, op):
    table = info["sass"][info["functions"][0]]
    return {user_line(r["cuda_line"], info["line_map"]) for r in table if r["opcode"] == op}


def test_each_sass_instruction_of_a_real_compile_finds_the_tilelang_line_it_came_from(vector_add_build):
    kernel, info = vector_add_build
    assert info["functions"] and info["line_map"]
    source = kernel.source.splitlines()
    loads, stores, adds = (lines_of(kernel, info, op) for op in ("LDG", "STG", "HADD2"))
    # The global loads come from the two T.copy of A and B, the stores from the copy into C, the adds from `+=`.
    assert loads and all(line and "T.copy(" in source[line - 1] and "[start" in source[line - 1] for line in loads)
    assert len(loads) == 2
    assert stores and all("T.copy(" in source[line - 1] and "C[" in source[line - 1] for line in stores)
    assert adds and all("+=" in source[line - 1] for line in adds)


def test_nvdisasm_inlined_code_is_given_the_cuda_line_that_inlined_it():
    text = """
//--------------------- .text.main_kernel        --------------------------
	//## File "/tmp/x/tvm_kernels.cu", line 18
        /*0000*/                   LDC R1, c[0x0][0x28] ;
	//## File "/usr/include/cuda_fp16.hpp", line 2504 inlined at "/lib/common.h", line 1225
	//## File "/lib/common.h", line 1225 inlined at "/tmp/x/tvm_kernels.cu", line 37
	//## File "/tmp/x/tvm_kernels.cu", line 37
        /*0010*/                   HFMA2.MMA R7, R7, 1, 1, R11 ;
        /*0020*/                   HADD2 R6, R6, R10 ;
	//## File "/tmp/x/tvm_kernels.cu", line 40
        /*0030*/              @!P0 STG.E.128 desc[UR4][R2.64], R4 ;
"""
    table = sass_line_table(text)["main_kernel"]
    assert [(r["offset"], r["opcode"], r["cuda_line"]) for r in table] == [
        (0x0, "LDC", 18), (0x10, "HFMA2", 37), (0x20, "HADD2", 37), (0x30, "STG", 40)]


def source_page(table, samples: dict[int, dict[str, int]], base=0x7F3A5C000000, function="main_kernel") -> str:
    """An ncu source page (CSV) for `table`'s instructions, at a runtime address base, with stall samples."""
    reasons = ["stall_barrier", "stall_long_sb", "stall_math", "stall_wait"]
    out = io.StringIO()
    w = csv.writer(out, quoting=csv.QUOTE_ALL, lineterminator="\n")
    w.writerow(["Kernel Name", function])
    w.writerow(["Address", "Source", "Warp Stall Sampling (All Samples)", "Warp Stall Sampling (Not-issued Samples)",
                "Instructions Executed", "Thread Instructions Executed", *reasons])
    for i, r in enumerate(table):
        s = samples.get(i, {})
        w.writerow([hex(base + r["offset"]), r["text"], sum(s.values()), 0, 32, 1024,
                    *[s.get(k.removeprefix("stall_"), 0) for k in reasons]])
    return out.getvalue()


def test_stall_samples_per_sass_instruction_are_added_up_per_tilelang_line(vector_add_build):
    kernel, info = vector_add_build
    table = info["sass"][info["functions"][0]]
    loads = [i for i, r in enumerate(table) if r["opcode"] == "LDG"]
    adds = [i for i, r in enumerate(table) if r["opcode"] in ("HADD2", "HFMA2")]
    line = {i: user_line(table[i]["cuda_line"], info["line_map"]) for i in loads}
    other = next(i for i in loads if line[i] != line[loads[0]])  # a load of the other T.copy
    samples = {loads[0]: {"long_sb": 70}, other: {"long_sb": 20}, adds[0]: {"wait": 10}}
    groups = parse_source(source_page(table, samples))
    assert len(groups) == 1 and groups[0]["function"] == "main_kernel"
    assert groups[0]["rows"][0]["offset"] == 0 and len(groups[0]["rows"]) == len(table)
    result = stalls_by_line(groups[0]["rows"], table, info["line_map"], kernel.source)
    top = result["lines"][0]
    assert "T.copy(" in top["code"] and top["stalls"] == {"long_sb": 70.0} and top["samples"] == 70
    by_line = {e["line"]: e for e in result["lines"]}
    add_line = user_line(table[adds[0]]["cuda_line"], info["line_map"])
    assert by_line[add_line]["stalls"] == {"wait": 10.0} and "+=" in by_line[add_line]["code"]
    assert result["total_samples"] == 100 and result["mapped_share"] == pytest.approx(1.0)


def test_alignment_survives_another_address_base_and_a_differing_instruction(vector_add_build):
    _, info = vector_add_build
    table = info["sass"][info["functions"][0]]
    profiled = [{"offset": r["offset"] + 0x80, "opcode": r["opcode"]} for r in table]  # shifted by a prologue
    del profiled[3]
    index = align(profiled, table)
    matched = [j for j in index if j is not None]
    assert len(matched) >= len(table) - 2
    assert all(table[j]["opcode"] == p["opcode"] for p, j in zip(profiled, index) if j is not None)


def test_opcode_drops_predicates_and_modifiers():
    assert opcode("@!P0 LDG.E.128.CONSTANT R8, desc[UR4][R32.64]") == "LDG"
    assert opcode("HGMMA.64x256x16.F32 R24, gdesc[UR8], R24, gsb0 ;") == "HGMMA"


DETAILS = '''"ID","Process ID","Process Name","Host Name","Kernel Name","Context","Stream","Block Size","Grid Size","Device","CC","Section Name","Metric Name","Metric Unit","Metric Value","Rule Name","Rule Type","Rule Description","Estimated Speedup Type","Estimated Speedup"
"0","4242","python3","127.0.0.1","main_kernel","1","7","(256, 1, 1)","(132, 1, 1)","0","9.0","GPU Speed Of Light Throughput","DRAM Frequency","Ghz","2.62","","","","",""
"0","4242","python3","127.0.0.1","main_kernel","1","7","(256, 1, 1)","(132, 1, 1)","0","9.0","GPU Speed Of Light Throughput","Memory Throughput","%","84.31","","","","",""
"0","4242","python3","127.0.0.1","main_kernel","1","7","(256, 1, 1)","(132, 1, 1)","0","9.0","GPU Speed Of Light Throughput","Duration","us","1,032.35","","","","",""
"0","4242","python3","127.0.0.1","main_kernel","1","7","(256, 1, 1)","(132, 1, 1)","0","9.0","GPU Speed Of Light Throughput","Compute (SM) Throughput","%","12.5","","","","",""
"0","4242","python3","127.0.0.1","main_kernel","1","7","(256, 1, 1)","(132, 1, 1)","0","9.0","GPU Speed Of Light Throughput","","","","SOLBottleneck","OPT","Memory is more heavily utilized than Compute.","global","15.7"
"0","4242","python3","127.0.0.1","main_kernel","1","7","(256, 1, 1)","(132, 1, 1)","0","9.0","Occupancy","Theoretical Occupancy","%","50","","","","",""
"0","4242","python3","127.0.0.1","main_kernel","1","7","(256, 1, 1)","(132, 1, 1)","0","9.0","Occupancy","Achieved Occupancy","%","47.9","","","","",""
'''

RAW = '''"ID","Process ID","Process Name","Host Name","Kernel Name","Context","Stream","Block Size","Grid Size","Device","CC","gpu__time_duration.sum","smsp__average_warps_issue_stalled_long_scoreboard_per_issue_active.ratio","smsp__average_warps_issue_stalled_barrier_per_issue_active.ratio","smsp__average_warps_issue_stalled_wait_per_issue_active.ratio","smsp__average_warps_issue_stalled_long_scoreboard_not_issued_per_issue_active.ratio"
"","","","","","","","","","","","usecond","ratio","ratio","ratio","ratio"
"0","4242","python3","127.0.0.1","main_kernel","1","7","(256, 1, 1)","(132, 1, 1)","0","9.0","1,032.35","21.4","0.8","3.1","20.9"
'''


def test_the_details_page_gives_sections_metrics_and_advice():
    d = parse_details(DETAILS)
    assert d["kernel"] == "main_kernel" and d["grid"] == "(132, 1, 1)"
    sol = {m["name"]: m for m in d["sections"]["GPU Speed Of Light Throughput"]}
    assert sol["Memory Throughput"]["value"] == 84.31 and sol["Duration"]["value"] == 1032.35
    assert {m["name"] for m in d["sections"]["Occupancy"]} == {"Theoretical Occupancy", "Achieved Occupancy"}
    assert d["rules"][0]["name"] == "SOLBottleneck" and d["rules"][0]["speedup"] == 15.7


def test_the_raw_page_gives_the_kernels_stall_reasons_largest_first():
    raw = parse_raw(RAW)
    assert len(raw) == 1 and raw[0]["gpu__time_duration.sum"] == 1032.35
    assert list(stall_reasons(raw[0]).items()) == [("long_scoreboard", 21.4), ("wait", 3.1), ("barrier", 0.8)]


def memcheck_log(offset: int, cuda_line: int) -> str:
    return f"""========= COMPUTE-SANITIZER
========= Invalid __global__ read of size 16 bytes
=========     at main_kernel+{offset:#x} in /job/tmp/nvcc-keep-1/tvm_kernels.cu:{cuda_line}
=========     by thread (31,0,0) in block (3,0,0)
=========     Address 0x7f3a5c0021f0 is out of bounds
=========     and is 497 bytes after the nearest allocation at 0x7f3a5c000000 of size 8000 bytes
=========     Saved host backtrace up to driver entry point at kernel launch time
=========         Host Frame: [0x2dfbef] in libcuda.so.1
=========
========= Program hit cudaErrorLaunchFailure (error 719) due to "unspecified launch failure" on CUDA API call to cudaStreamSynchronize.
=========
========= ERROR SUMMARY: 2 errors
"""


def test_a_memcheck_error_names_the_users_line_through_its_sass_offset(vector_add_build):
    kernel, info = vector_add_build
    table = info["sass"][info["functions"][0]]
    load = next(r for r in table if r["opcode"] == "LDG")
    report = parse_sanitizer(memcheck_log(load["offset"], 99999))  # a CUDA line that maps nowhere: the offset decides
    assert report["error_count"] == 2 and len(report["errors"]) == 1  # the API error is the launcher's, not an access
    error = report["errors"][0]
    assert error["message"].startswith("Invalid __global__ read of size 16") and error["block"] == [3, 0, 0]
    assert error["locations"][0] == {"function": "main_kernel", "offset": load["offset"], "file":
                                     "/job/tmp/nvcc-keep-1/tvm_kernels.cu", "line": 99999}
    line = locate(error, info["sass"], info["line_map"], tuple(info["cuda_files"]))
    assert line == user_line(load["cuda_line"], info["line_map"])
    assert "T.copy(" in kernel.source.splitlines()[line - 1]
    # Without a matching offset, the CUDA file and line the sanitizer names lead to the same place.
    error["locations"][0]["offset"] = 0xFFFFFF
    error["locations"][0]["line"] = load["cuda_line"]
    assert locate(error, info["sass"], info["line_map"], tuple(info["cuda_files"])) == line


def test_stalls_and_memcheck_errors_in_a_schedule_kept_in_an_imported_module_name_its_line(tmp_path):
    """flash_attention keeps its Hopper schedule in kernels/flash_attention_hopper.py: what waits there, or reads
    out of bounds there, is named by that file's line and quoted, not lost as "generated code"."""
    from playground.ui.profile_view import memcheck_html, profile_html
    kernel = loader.load("flash_attention")
    config = kernel.resolve({"batch": 1, "heads": 1, "seq_len": 256, "dim": 128, "causal": True,
                             "persistent": False})  # (the grid: its steps are all in flash_attention_hopper.py)
    _, info = build_with_line_table(kernel, config, "sm_90a", tmp_path)
    table = info["sass"][info["functions"][0]]
    helper = [i for i, r in enumerate(table) if user_line(r["cuda_line"], info["line_map"]) is None
              and user_line(r["cuda_line"], info["origins"])]
    assert helper, "the schedule's instructions come from flash_attention_hopper.py"
    where = user_line(table[helper[0]]["cuda_line"], info["origins"])
    assert where.startswith("flash_attention_hopper.py:") and where in info["origin_lines"]
    groups = parse_source(source_page(table, {helper[0]: {"long_sb": 60}}))
    result = stalls_by_line(groups[0]["rows"], table, info["line_map"], kernel.source, info["origins"],
                            info["origin_lines"])
    top = result["lines"][0]
    assert top["line"] == where and top["code"] == info["origin_lines"][where] and top["samples"] == 60
    assert result["mapped_share"] == pytest.approx(1.0)
    assert where in profile_html({"ok": True, "source": result})
    error = parse_sanitizer(memcheck_log(table[helper[0]]["offset"], 99999))["errors"][0]
    assert locate(error, info["sass"], info["line_map"], tuple(info["cuda_files"]), info["origins"]) == where
    error.update(line=where, code=info["origin_lines"][where])
    page = memcheck_html({"ok": True, "runs": [{"tool": "memcheck", "guards": True, "problems": [], "errors": [error],
                                                "error_count": 1}]})
    assert where in page and "pg-src-link" not in page.split(where)[0][-80:]


def test_a_memcheck_answer_the_users_code_wrote_shows_its_markup_as_text():
    """The memcheck job imports the user's file, and code run at its import can write the job's answer: a teacher
    who opens a student's link and clicks Check memory must not run the student's script. Every field is text."""
    from playground.ui.profile_view import memcheck_html
    tag = '<img src=x onerror="window.pwned=1">'
    forged = {"ok": True, "runs": [{"tool": tag, "guards": True, "problems": [{tag: tag}], "error_count": tag,
                                    "errors": [{"line": tag, "code": tag, "message": tag, "thread": tag,
                                                "block": tag, "details": [tag]}]}]}
    page = memcheck_html(forged)
    assert "<img" not in page and "&lt;img" in page, page


def test_a_racecheck_hazard_and_a_clean_run_parse():
    log = """========= COMPUTE-SANITIZER
========= Error: Race reported between Write access at main_kernel+0x2d0 in /job/tmp/k/tvm_kernels.cu:30
=========     and Read access at main_kernel+0x350 in /job/tmp/k/tvm_kernels.cu:35 [128 hazards]
=========
========= RACECHECK SUMMARY: 1 hazard displayed (1 error, 0 warnings)
"""
    report = parse_sanitizer(log)
    (error,) = report["errors"]
    assert [(loc["offset"], loc["line"]) for loc in error["locations"]] == [(0x2D0, 30), (0x350, 35)]
    assert parse_sanitizer("========= COMPUTE-SANITIZER\n========= ERROR SUMMARY: 0 errors\n") == {
        "errors": [], "error_count": 0}


@pytest.mark.parametrize("action", ["profile", "memcheck"])
def test_without_a_gpu_profile_and_memcheck_say_so(action):
    from conftest import has_gpu
    if has_gpu():
        pytest.skip("this machine has a GPU")
    result = execute(action, "vector_add", None, {"N": 4096}, "sm_90a")
    assert not result["ok"] and result["error"]["stage"] == "device" and "GPU" in result["error"]["message"]


def test_the_profile_tab_shows_the_stalls_per_tilelang_line_and_the_memcheck_errors_with_lines(vector_add_build):
    import base64
    from playground.engine.profile import STALL_MEANING
    from playground.ui.profile_view import memcheck_html, profile_html, report_file
    kernel, info = vector_add_build
    table = info["sass"][info["functions"][0]]
    load = next(i for i, r in enumerate(table) if r["opcode"] == "LDG")
    rows = parse_source(source_page(table, {load: {"long_sb": 9}, load + 1: {"barrier": 1}}))[0]["rows"]
    result = {"ok": True, "kernel": "vector_add", "function": "main_kernel", "details": parse_details(DETAILS),
              "stall_reasons": stall_reasons(parse_raw(RAW)[0]), "stall_meaning": STALL_MEANING,
              "source": stalls_by_line(rows, table, info["line_map"], kernel.source),
              "report_name": "vector_add.ncu-rep", "report_b64": base64.b64encode(b"NCU").decode()}
    page = profile_html(result)
    line = user_line(table[load]["cuda_line"], info["line_map"])
    assert f'data-line="{line}"' in page and "long_sb" in page
    assert html_escape(kernel.source.splitlines()[line - 1].strip()) in page
    assert "84.31 %" in page and "SOLBottleneck" in page and "long_scoreboard" in page
    assert report_file(result) == ("vector_add.ncu-rep", b"NCU")

    report = parse_sanitizer(memcheck_log(table[load]["offset"], 1))
    for e in report["errors"]:
        e["line"] = locate(e, info["sass"], info["line_map"])
        e["code"] = kernel.source.splitlines()[e["line"] - 1].strip()
    runs = [{"tool": "memcheck", "guards": True, "problems": [{"N": 1000003}], "errors": [], "error_count": 0},
            {"tool": "memcheck", "guards": False, "problems": [{"N": 1000003}], **report}]
    page = memcheck_html({"ok": True, "runs": runs})
    assert "memcheck: no errors" in page and f'data-line="{line}"' in page and "Invalid __global__ read" in page
    assert "your own masking is missing" in page


def html_escape(text):
    import html
    return html.escape(text)


def test_without_the_warp_state_metrics_the_stall_reasons_come_from_the_sampled_stalls(vector_add_build):
    _, info = vector_add_build
    table = info["sass"][info["functions"][0]]
    groups = parse_source(source_page(table, {0: {"long_sb": 5}, 1: {"long_sb": 2, "wait": 4}}))
    assert stall_reasons({"gpu__time_duration.sum": 3.0}, groups) == {"long_sb": 7.0, "wait": 4.0}
    assert stall_reasons({"smsp__pcsamp_warps_issue_stalled_barrier": 9.0,
                          "smsp__pcsamp_warps_issue_stalled_barrier_not_issued": 8.0}, groups) == {"barrier": 9.0}
