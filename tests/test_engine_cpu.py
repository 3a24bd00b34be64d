"""The engine on a machine without a GPU: compile for sm_90a and check what comes out is real."""
import json
import os
import re
import subprocess
import sys
import time

import pytest

from conftest import GEMM, PIPELINED, ROOT
from playground.engine import device
from playground.engine.compile import build, compile_kernel, parse_ptxas, split_line_directives
from playground.engine.errors import StageError
from playground.engine.kernel import loader

SMALL = {"gemm": dict(M=256, N=256, K=256), "gemm_epilogue": dict(M=256, N=256, K=256)}


def small(name: str) -> dict:
    return SMALL.get(name, {})


def cli(*args, timeout=300):
    return subprocess.run([sys.executable, "-m", "playground", *args], cwd=ROOT, capture_output=True, text=True,
                          timeout=timeout)


def line_of(source: str, needle: str) -> int:
    return next(i for i, text in enumerate(source.splitlines(), 1) if needle in text)


# -- the catalogue --------------------------------------------------------------------------------------------
def test_list_json_describes_every_kernel_with_its_space_and_presets():
    out = cli("list", "--json")
    assert out.returncode == 0, out.stderr
    kernels = json.loads(out.stdout)
    assert [k["name"] for k in kernels] == ["vector_add", "gemm", "gemm_epilogue", "softmax", "flash_attention"]
    for k in kernels:
        assert k["space"] and k["presets"] and k["dtypes"] and k["baselines"], k["name"]
        for name, values in k["space"].items():
            assert k["defaults"][name] in values, f"{k['name']}: default {name} is not in its own space"


def test_presets_include_a_ragged_size_for_every_kernel():
    for name in loader.builtin_names():
        k = loader.load(name)
        tiles = [v for n, v in k.default_config().tile.items() if n.startswith("block_") and isinstance(v, int)]
        problems = list(k.presets.values()) + k.check_problems(k.default_config().problem)
        ragged = [p for p in problems if any(isinstance(v, int) and not isinstance(v, bool) and v % 64 for v in p.values())]
        assert ragged, f"{name} has no problem size that is not a multiple of its tiles {tiles}"


def test_unknown_parameter_is_rejected_with_the_known_ones():
    k = loader.load("gemm")
    with pytest.raises(Exception) as err:
        k.resolve({"block_Q": 1})
    assert err.value.stage == "parameters" and "block_M" in err.value.message


def test_a_presets_tuned_tile_is_the_default_at_its_size_and_what_the_user_sets_wins():
    k = loader.load("softmax")
    tuned = k.tuned["4096×32768 (long rows)"]["cluster"]
    assert k.problem_names == ["M", "N"] and "cluster" in k.tile_names
    assert k.presets["4096×32768 (long rows)"] == {"M": 4096, "N": 32768}
    assert k.resolve({"preset": "4096×32768 (long rows)"}).tile["cluster"] == tuned
    assert k.resolve({"M": 4096, "N": 32768}).tile["cluster"] == tuned  # the size, however it was given
    assert k.resolve({}).tile["cluster"] == k.defaults["cluster"] != tuned
    assert k.resolve({"M": 4096, "N": 32768, "cluster": "4"}).tile["cluster"] == 4


def test_string_values_are_converted_by_the_type_of_the_default():
    cfg = loader.load("gemm").resolve({"block_M": "64", "M": "1000", "dtype": "bfloat16"})
    assert cfg.tile["block_M"] == 64 and cfg.problem["M"] == 1000 and cfg.dtype == "bfloat16"
    with pytest.raises(StageError, match=r"N='abc' is not a whole number"):  # said in words, not "a int"
        loader.load("vector_add").resolve({"N": "abc"})


# -- compiling --------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("name", ["vector_add", "gemm", "gemm_epilogue", "softmax", "flash_attention"])
def test_every_kernel_compiles_for_sm90a_without_spills(name):
    k = loader.load(name)
    r = compile_kernel(k, k.default_config(), "sm_90a")
    assert r["ok"] and r["arch"] == "sm_90a"
    res = r["resources"]
    assert res["spill_bytes"] == 0, f"{name} spills at its defaults: {res}"
    assert res["registers"] and res["registers"] <= 255
    assert res["threads"] and res["grid"]
    assert "__global__" in r["cuda"] and ".entry" in r["ptx"]
    assert "#line" not in r["cuda"], "line directives are moved into the line map"


@pytest.mark.parametrize("name", ["gemm", "gemm_epilogue", "flash_attention"])
def test_tensor_core_kernels_use_wgmma_and_tma_on_hopper(name):
    k = loader.load(name)
    r = compile_kernel(k, k.resolve(small(name)), "sm_90a")
    assert "wgmma.mma_async" in r["ptx"], "Hopper tensor cores are driven by wgmma"
    assert "cp.async.bulk.tensor" in r["ptx"], "tiles arrive by TMA"
    assert "HGMMA" in r["sass"] and "UTMALDG" in r["sass"], "the SASS ptxas assembled is in the result"
    mix = r["resources"]["sass_mix"]
    assert mix["tensor core"] > 0 and mix["TMA and bulk copies"] > 0 and mix["local memory (spills)"] == 0


def test_flash_attention_runs_the_softmax_while_the_tensor_cores_do_p_v():
    k = loader.load("flash_attention")
    overlapped = compile_kernel(k, k.resolve(small("flash_attention")), "sm_90a")
    ptx = overlapped["ptx"]
    # Its loop lives in kernels/flash_attention_hopper.py (and _persistent.py): the CUDA lines made there are named
    # by those files' lines, and quoted
    helpers = ("flash_attention_hopper.py", "flash_attention_persistent.py")
    named = {o for o in overlapped["line_origins"] if o}
    assert named and {o.split(":")[0] for o in named} <= set(helpers), named
    quotes = overlapped["origin_lines"]
    assert any("copy(K[" in q for q in quotes.values()), "the K tile's load is quoted from the helper file"
    for o, q in quotes.items():
        name, line = o.split(":")
        assert (ROOT / "kernels" / name).read_text().splitlines()[int(line) - 1].strip()[:200] == q
    # The loop waits for all but the newest wgmma group (S = Q Kᵀ ready, P V still running), then for all.
    assert "wgmma.wait_group.sync.aligned 1;" in ptx and "wgmma.wait_group.sync.aligned 0;" in ptx
    plain = compile_kernel(k, k.resolve({**small("flash_attention"), "overlap": False, "persistent": False}),
                           "sm_90a")["ptx"]
    assert "wgmma.wait_group.sync.aligned 1;" not in plain


@pytest.mark.parametrize("preset", ["8×32×4096×128", "8×32×4096×128 causal", "4×32×8192×64 causal",
                                    "2×8×1000×128 causal (ragged)"])
def test_flash_attention_wgmma_are_not_serialized_by_ptxas(preset):
    # ptxas serializes every wgmma of a kernel (warning C7514) when some path through the code may read an
    # accumulator while its wgmma still runs; a version of the extra-step loop did that and ran at 0.66× SDPA.
    # Where it only suspects a read, it adds a wait of its own (C7517): rescaling O between issuing Q Kᵀ and P V
    # did that, and lost 6%.
    k = loader.load("flash_attention")
    r = compile_kernel(k, k.resolve({"preset": preset}), "sm_90a")
    assert "Used" in r["ptxas_log"], "ptxas ran"
    assert "C7514" not in r["ptxas_log"] and "serialized" not in r["ptxas_log"], r["ptxas_log"]
    assert "C7517" not in r["ptxas_log"], r["ptxas_log"]


def sass_between(sass, first, then):
    """The SASS instructions after the first line containing `first`, up to the next containing `then`."""
    lines = sass.splitlines()
    start = next(i for i, line in enumerate(lines) if first in line)
    end = next(i for i in range(start + 1, len(lines)) if then in lines[i])
    return lines[start + 1:end]


@pytest.mark.parametrize("preset", ["8×32×4096×128", "8×32×4096×128 causal"])
def test_flash_attention_waits_for_p_v_only_after_the_softmax_exps(preset):
    # In the PTX the wait for P V follows the softmax, but ptxas schedules it: left alone it put the wait right
    # after the row max, so P V overlapped none of the exps a thread computes per tile (block_M × block_N scores
    # over the consumer threads). fence_wait pins it after all of them.
    k = loader.load("flash_attention")
    config = k.resolve({"preset": preset})
    sass = compile_kernel(k, config, "sm_90a")["sass"]
    between = sass_between(sass, "WARPGROUP.DEPBAR.LE gsb0, 0x1", "WARPGROUP.DEPBAR.LE gsb0, 0x0")
    exps_per_thread = config.tile["block_M"] * config.tile["block_N"] // config.tile["threads"]
    assert sum("MUFU.EX2" in line for line in between) >= exps_per_thread, "the exps run before the wait for P V"


def test_long_row_softmax_exchanges_its_partials_without_a_gpu_wide_fence():
    # Through a cluster barrier, each exchange cost a MEMBAR.ALL.GPU in every warp (ptxas's form of the barrier's
    # release) on every row's path: 0.87 of copy bandwidth. The partials now travel as bulk copies onto mbarriers.
    k = loader.load("softmax")
    sass = compile_kernel(k, k.resolve({"preset": "4096×32768 (long rows)"}), "sm_90a")["sass"]
    assert "UBLKCP" in sass, "the partials go by bulk copy"
    assert "MEMBAR.ALL.GPU" not in sass and "MEMBAR.SC.GPU" not in sass
    assert "FSETP" not in sass, "the exps are the fast exp2 (no denormal fix-ups around MUFU.EX2)"


def test_long_rows_off_16_byte_boundaries_still_move_16_bytes_per_access():
    # Rows of 50257 start anywhere within a 16-byte vector: a copy of "row i from column 0" moved 2 bytes at a time
    # (0.39 of copy bandwidth). Read as one flat array of vectors, all but the two a row shares with its neighbours
    # are whole, loaded and stored 16 bytes at a time.
    k = loader.load("softmax")
    r = compile_kernel(k, k.resolve({"preset": "4096×50257 (GPT-2's vocabulary)", "dtype": "bfloat16"}), "sm_90a")
    assert r["config"]["tile"]["cluster"] == 4
    assert re.search(WIDE_LOAD, r["ptx"]) and re.search(WIDE_STORE, r["ptx"])
    assert "MEMBAR.ALL.GPU" not in r["sass"] and "MEMBAR.SC.GPU" not in r["sass"]
    assert r["resources"]["spill_bytes"] == 0


def test_flash_attention_for_ampere_needs_the_plain_loop_and_says_so():
    k = loader.load("flash_attention")
    ampere = {**small("flash_attention"), "block_M": 64, "threads": 128}
    r = compile_kernel(k, k.resolve({**ampere, "overlap": False, "persistent": False}), "sm_80")
    assert "mma.sync" in r["ptx"] and "wgmma" not in r["ptx"]
    with pytest.raises(StageError) as err:
        compile_kernel(k, k.resolve({**ampere, "persistent": False}), "sm_80")
    assert "wgmma_gemm" in err.value.message and "Hopper" in err.value.message
    assert "flash_attention_hopper.py" in err.value.log, "the log names the file of the Hopper schedule"
    with pytest.raises(StageError) as err:  # the default at this size is the persistent schedule: TMA loads
        compile_kernel(k, k.resolve(ampere), "sm_80")
    assert "TMA" in err.value.message
    assert "flash_attention_persistent.py" in err.value.log, "the log names the file of the persistent schedule"


def test_gemm_for_ampere_needs_the_pipelined_schedule_and_says_so():
    k = loader.load("gemm")
    ampere = {**small("gemm"), "block_N": 128, "block_K": 32, "num_stages": 3, "threads": 128}
    r = compile_kernel(k, k.resolve({**ampere, "warp_specialized": False}), "sm_80")
    assert "mma.sync" in r["ptx"] and "wgmma" not in r["ptx"]
    with pytest.raises(StageError) as err:
        compile_kernel(k, k.resolve(ampere), "sm_80")
    assert "TMA" in err.value.message
    # The operation is in kernels/gemm_hopper.py: named there, at its line, and pointed at where gemm.py imports it
    # (not at a line of gemm.py's own schedule that allocates a buffer of the same name).
    hopper = (ROOT / "kernels" / "gemm_hopper.py").read_text().splitlines()
    where = re.search(r"\(in gemm_hopper\.py, line (\d+)\)", err.value.message)
    assert where and "T.tma_copy(" in hopper[int(where.group(1)) - 1], err.value.message
    assert "import" in k.source.splitlines()[err.value.line - 1] and "gemm_hopper" in k.source.splitlines()[
        err.value.line - 1]


def test_gemm_for_plain_sm_90_or_a_later_gpu_says_which_target_has_hoppers_instructions():
    # nvcc refuses in TileLang's own headers (a static assertion on setmaxnreg); the user is told of the target
    # to pick, at a line of their kernel, not only of a header they never wrote.
    k = loader.load("gemm")
    # 3 stages: within sm_120's 99 KiB of shared memory, so that what is refused is the instructions, not the size
    config = k.resolve({**small("gemm"), "warp_specialized": False, "num_stages": 3})
    for arch, says in (("sm_90", "pick sm_90a"), ("sm_120", "made for sm_90a")):
        with pytest.raises(StageError) as err:
            compile_kernel(k, config, arch)
        assert says in err.value.message, err.value.message
        assert err.value.line is not None and 0 < err.value.line <= len(k.source.splitlines())


def test_gemm_for_hopper_keeps_one_wgmma_step_in_flight_and_stays_resident():
    # The shipped schedule waits for all but the newest wgmma step in its main loop, and launches one block per SM
    # (persistent), each walking many tiles.
    k = loader.load("gemm")
    r = compile_kernel(k, k.resolve(small("gemm")), "sm_90a")
    assert "wgmma.wait_group.sync.aligned 1;" in r["ptx"]
    assert r["resources"]["grid"][:2] == [132, 1]
    plain_config = k.resolve({**small("gemm"), "warp_specialized": False})
    plain = compile_kernel(k, plain_config, "sm_90a")
    p, tile = plain_config.problem, plain_config.tile
    tiles = [-(-p["N"] // tile["block_N"]), -(-p["M"] // tile["block_M"])]  # one block per output tile: a grid
    assert "wgmma.wait_group.sync.aligned 1;" not in plain["ptx"] and plain["resources"]["grid"][:2] == tiles


def test_split_k_gemm_runs_a_cluster_a_tile_and_adds_the_parts_from_sm_to_sm():
    k = loader.load("gemm")
    # 64 tiles of 128 × 128, K split in two
    config = k.resolve({"M": 128, "N": 8192, "K": 8192, "block_M": 128, "block_N": 128, "num_stages": 4,
                        "split_k": 2})
    r = compile_kernel(k, config, "sm_90a")
    assert r["resources"]["grid"][:2] == [128, 1]  # two CTAs a tile, not one block an SM
    assert "cp.async.bulk.shared::cluster.shared::cta" in r["ptx"]  # the parts go SM to SM, not through memory
    # A split that cannot fit in shared memory is refused before nvcc, saying what to change.
    with pytest.raises(StageError) as err:
        compile_kernel(k, k.resolve({"M": 128, "N": 8192, "K": 8192, "block_M": 128, "block_N": 128, "split_k": 4,
                                     "num_stages": 6}), "sm_90a")
    assert "shared memory" in err.value.message and "fewer stages" in err.value.message


def test_multicast_gemm_loads_each_step_of_b_once_for_a_pair_of_ctas():
    k = loader.load("gemm")
    config = k.resolve({"M": 3000, "N": 5000, "K": 1000, "block_M": 128, "block_N": 192, "num_stages": 4,
                        "multicast": True})
    r = compile_kernel(k, config, "sm_90a")
    assert r["resources"]["grid"][0] == 132 and r["resources"]["spill_bytes"] == 0  # 66 pairs, one CTA an SM
    assert "multicast::cluster" in r["ptx"]  # B by TMA multicast, into both CTAs of the pair
    assert "mbarrier.arrive.shared::cluster" in r["ptx"]  # each CTA's consumers free the buffer in the other too


def test_flash_attention_ships_the_persistent_schedule_but_for_long_causal_sequences():
    # One block per SM walks the query blocks (its producer loads the next Q while the consumers finish this
    # block); causal ones differ in length, and from 4096 tokens the GPU's block scheduler balances them as well.
    k = loader.load("flash_attention")
    for problem in ({"preset": "8×32×4096×128"}, dict(batch=16, heads=32, seq_len=2048, dim=128, causal=True)):
        persistent = compile_kernel(k, k.resolve(problem), "sm_90a")["resources"]
        assert persistent["grid"] == [132, 1, 1] and persistent["block"] == [384, 1, 1], problem
        assert persistent["spill_bytes"] == 0
    grid = compile_kernel(k, k.resolve({"preset": "8×32×4096×128 causal"}), "sm_90a")["resources"]
    assert grid["grid"] == [32, 32, 8]
    one_p = compile_kernel(k, k.resolve({"preset": "8×32×4096×128", "two_p": False}), "sm_90a")
    assert one_p["resources"]["grid"] == [132, 1, 1] and one_p["resources"]["spill_bytes"] == 0
    assert "C7514" not in one_p["ptxas_log"] and "C7517" not in one_p["ptxas_log"], "no wgmma serialized"


@pytest.mark.parametrize("schedule", [dict(persistent=True), dict(persistent=False),
                                      dict(persistent=False, overlap=False)])
def test_grouped_query_attention_takes_a_key_value_head_per_group_of_query_heads(schedule):
    # Llama 3's grouping, 32 query heads on 8 key/value heads: K and V have 8 heads in every schedule, the grid
    # (or the persistent walk) still covers all 32 query heads, and nothing spills.
    k = loader.load("flash_attention")
    config = k.resolve(dict(batch=2, heads=32, seq_len=512, dim=128, causal=False, group_size=4, **schedule))
    func = k.prim_func(config)
    shapes = {func.buffer_map[p].name: [int(x) for x in func.buffer_map[p].shape] for p in func.params}
    assert shapes["Q"] == shapes["Output"] == [2, 512, 32, 128]
    assert shapes["K"] == shapes["V"] == [2, 512, 8, 128]
    r = compile_kernel(k, config, "sm_90a")
    assert r["resources"]["spill_bytes"] == 0
    assert r["resources"]["grid"] == ([132, 1, 1] if schedule["persistent"] else [4, 32, 2])


def test_grouped_query_attention_with_heads_not_a_multiple_of_the_group_is_refused_at_its_line():
    k = loader.load("flash_attention")
    with pytest.raises(StageError) as err:
        compile_kernel(k, k.resolve(dict(batch=1, heads=6, seq_len=256, group_size=4)), "sm_90a")
    assert "heads=6" in err.value.message and "group_size=4" in err.value.message, err.value.message
    assert "raise ValueError" in k.source.splitlines()[err.value.line - 1]


def test_persistent_kernels_launch_one_block_per_sm_of_the_gpu_present(monkeypatch):
    # An H100 PCIe has 114 SMs: the H200's 132 blocks would leave 18 for a second round there, nearly doubling the
    # time. The default follows the GPU (what the page shows is what compiles); a value the user sets still wins.
    monkeypatch.setattr(device, "sm_count", lambda: 114)
    assert loader.load("flash_attention").describe()["defaults"]["num_sms"] == 114
    k = loader.load("gemm")
    assert k.describe()["defaults"]["num_sms"] == 114
    assert compile_kernel(k, k.resolve(small("gemm")), "sm_90a")["resources"]["grid"] == [114, 1, 1]
    assert k.resolve({"num_sms": "100"}).tile["num_sms"] == 100

    def asked():
        raise AssertionError("the GPU was asked for its SM count, though the request named num_sms")
    monkeypatch.setattr(device, "sm_count", asked)  # the page names every parameter: its jobs spawn no query
    k = loader.load("gemm")
    assert k.resolve({**k.factory_defaults, "num_sms": "100"}).tile["num_sms"] == 100
    monkeypatch.setattr(device, "sm_count", lambda: None)
    assert loader.load("gemm").defaults["num_sms"] == 132, "without a GPU, the factory's default"


def test_no_gpu_means_no_sm_count(monkeypatch):
    monkeypatch.setenv("PLAYGROUND_NO_GPU", "1")
    device.sm_count.cache_clear()
    try:
        assert device.sm_count() is None
    finally:
        device.sm_count.cache_clear()


@pytest.mark.parametrize("option", ["overlap", "pingpong", "extra_step"])
def test_flash_attention_refuses_an_option_the_persistent_schedule_lacks_and_says_which(option):
    # The default preset is persistent. Flipping overlap off (the plain loop), ping-pong on or the extra step off
    # there asks for something that schedule does not do: refused, naming both options, at the rule's line; with
    # persistent off the same option runs on the grid.
    k = loader.load("flash_attention")
    flipped = {option: not k.factory_defaults[option]}
    with pytest.raises(StageError) as err:
        compile_kernel(k, k.resolve({"preset": "8×32×4096×128", **flipped}), "sm_90a")
    assert option in err.value.message and "persistent" in err.value.message, err.value.message
    assert "raise ValueError" in k.source.splitlines()[err.value.line - 1], "the error points at the rule"
    if option != "extra_step":
        r = compile_kernel(k, k.resolve({"preset": "8×32×4096×128", **flipped, "persistent": False}), "sm_90a")
        assert r["resources"]["grid"] == [32, 32, 8], option


def test_flash_attention_refuses_ping_pong_without_the_overlap():
    k = loader.load("flash_attention")
    with pytest.raises(ValueError, match="pingpong=True needs overlap=True"):
        k.factory(**{**k.factory_defaults, "overlap": False, "pingpong": True})


def test_no_kernel_file_is_over_300_lines():
    # A kernel file is a lesson: one schedule a short file, the Hopper schedules beside the loop they refine.
    lengths = {p.name: len(p.read_text().splitlines()) for p in (ROOT / "kernels").rglob("*.py")}
    assert lengths and not {name: n for name, n in lengths.items() if n > 300}, lengths


def test_an_edited_flash_attention_compiled_from_another_folder_reaches_its_hopper_schedules(tmp_path):
    # The job sandbox runs the CLI with the project root on PYTHONPATH, elsewhere than the root; the edited main
    # file imports its schedules from the catalogue's kernels package, and its own online_softmax goes into them.
    text = (ROOT / "kernels" / "flash_attention.py").read_text()
    edited = text.replace("> 8.0, m[i], m_prev[i])", "> 7.0, m[i], m_prev[i])")
    assert edited != text
    (tmp_path / "edited.py").write_text(edited)
    out = subprocess.run([sys.executable, "-m", "playground", "compile", "flash_attention", "--source", "edited.py",
                          "--set", "preset=8×32×4096×128", "--arch", "sm_90a", "--json"], cwd=tmp_path,
                         capture_output=True, text=True, timeout=300, env={**os.environ, "PYTHONPATH": str(ROOT)})
    result = json.loads(out.stdout)
    assert out.returncode == 0 and result["ok"], result.get("error")
    assert result["resources"]["grid"] == [132, 1, 1], "the persistent schedule"
    assert "7.000000e+00" in result["cuda"], "the edited lazy-rescale threshold reached the persistent schedule"


WIDE_LOAD = r"ld\.global(\.\w+)*\.v(4\.(b|u|f)32|2\.(b|u|f)64|8)"
ASYNC_16 = r"cp\.async\.(cg|ca)\.shared\.global \[[^]]+\], \[[^]]+\], 16\b"
WIDE_STORE = r"st\.global(\.\w+)*\.v(4\.(b|u|f)32|2\.(b|u|f)64|8)"


def test_memory_bound_kernels_move_16_bytes_per_access():
    for name in ("vector_add", "softmax"):
        k = loader.load(name)
        ptx = compile_kernel(k, k.default_config(), "sm_90a")["ptx"]
        # 16-byte loads per thread: into registers, or into shared memory by cp.async (softmax's pipeline)
        assert re.search(WIDE_LOAD, ptx) or re.search(ASYNC_16, ptx), f"{name}: no 128-bit loads"
        assert re.search(WIDE_STORE, ptx), f"{name}: no 128-bit stores"


def test_line_map_points_gemm_cuda_back_to_the_t_gemm_line():
    k = loader.load("gemm")
    r = compile_kernel(k, k.resolve({**small("gemm"), **PIPELINED}), "sm_90a")
    cuda_lines = r["cuda"].splitlines()
    assert len(r["line_map"]) == len(cuda_lines)
    gemm_line = line_of(k.source, "T.gemm(A_shared, B_shared, C_local")
    mapped = [cuda_lines[i] for i, src in enumerate(r["line_map"]) if src == gemm_line]
    assert any("wgmma" in text or "gemm" in text for text in mapped), mapped[:5]
    assert all(src is None or 1 <= src <= len(k.source.splitlines()) for src in r["line_map"])
    assert r["source_file"].endswith("kernels/gemm.py")


def test_compile_is_cached_by_source_parameters_and_target():
    k = loader.load("gemm")
    cfg = k.resolve({**small("gemm"), "block_M": 64})
    first = compile_kernel(k, cfg, "sm_90a")
    start = time.perf_counter()
    again = compile_kernel(k, cfg, "sm_90a")
    assert again["cached"] and time.perf_counter() - start < 0.5
    assert again["cuda"] == first["cuda"]
    edited = loader.load("gemm", k.source + "\n# an edit\n")
    assert not compile_kernel(edited, cfg, "sm_90a")["cached"]


def test_edited_source_compiles_from_its_own_file():
    k = loader.load("gemm")
    text = k.source.replace("T.clear(C_local)", "T.clear(C_local)  # edited")
    edited = loader.load("gemm", text)
    assert edited.path != k.path and edited.path.read_text() == text
    r = build(edited, edited.resolve(small("gemm")), "sm_90a").result
    assert r["source_file"] == str(edited.path)


# -- errors point at the user's line ----------------------------------------------------------------------------
def compile_error(text: str, params=None):
    out = cli("compile", "gemm", "--source", _write(text), "--json",
              *sum([["--set", f"{k}={v}"] for k, v in {**small("gemm"), **(params or {})}.items()], []))
    result = json.loads(out.stdout)
    assert out.returncode == 1 and not result["ok"]
    return result["error"]


def _write(text: str) -> str:
    import tempfile
    f = tempfile.NamedTemporaryFile("w", suffix=".py", delete=False)
    f.write(text)
    f.close()
    return f.name


def test_syntax_error_is_a_python_error_at_its_line():
    text = GEMM.replace('accum_dtype = "float32"', 'accum_dtype = = "float32"')
    err = compile_error(text)
    assert err["stage"] == "python" and "SyntaxError" in err["message"]
    assert err["line"] == line_of(text, "accum_dtype = =")


def test_exception_at_import_is_a_python_error_at_its_line():
    text = GEMM.replace("import torch\n", "import torch\nraise ValueError('boom')\n", 1)
    err = compile_error(text)
    assert err["stage"] == "python" and "boom" in err["message"] and err["line"] == line_of(text, "boom")


def test_misspelt_buffer_in_kernel_is_a_tilelang_error_at_its_line():
    text = GEMM.replace("T.clear(C_local)", "T.clear(C_locl)")
    err = compile_error(text, PIPELINED)
    assert err["stage"] == "tilelang" and "C_locl" in err["message"] and err["line"] == line_of(text, "C_locl")


def test_gemm_into_the_wrong_buffer_is_a_tilelang_error_at_its_line():
    text = GEMM.replace("T.gemm(A_shared, B_shared, C_local", "T.gemm(A_shared, B_shared, A_shared")
    assert text != GEMM
    err = compile_error(text, PIPELINED)
    assert err["stage"] == "tilelang" and err["line"] == line_of(text, "T.gemm(A_shared, B_shared, A_shared")


def test_a_wgmma_tile_too_small_is_a_tilelang_error_at_the_wgmma_line_without_the_targets_json():
    k = loader.load("gemm")
    with pytest.raises(StageError) as info:
        compile_kernel(k, k.resolve({"block_M": "3"}), "sm_90a")
    err = info.value
    assert err.stage == "tilelang" and "T.wgmma_gemm()" in err.message
    line = line_of((ROOT / "kernels" / "gemm_hopper.py").read_text(), "T.wgmma_gemm(A_shared")
    assert f"(in gemm_hopper.py, line {line})" in err.message
    assert err.line == line_of((ROOT / "kernels" / "gemm.py").read_text(), "from kernels.gemm_hopper import")
    assert "target=cuda sm_90a" in err.message and '"keys"' not in err.message, err.message


def test_undefined_cuda_function_is_an_nvcc_error_at_the_user_line():
    text = GEMM.replace("            T.copy(C_local, C_shared)",
                        "            for i, j in T.Parallel(block_M, block_N):\n"
                        "                C_local[i, j] = T.call_extern(\"float32\", \"no_such_function\", C_local[i, j])\n"
                        "            T.copy(C_local, C_shared)", 1)
    assert text != GEMM
    err = compile_error(text, PIPELINED)
    assert err["stage"] == "nvcc" and "no_such_function" in err["message"]
    assert err["line"] == line_of(text, "no_such_function")
    assert err["log"].lstrip().splitlines()[0].endswith('error: identifier "no_such_function" is undefined'), \
        "the log starts with the error, not with the whole .cu or the warnings"


def test_missing_reference_means_not_verified_not_an_error():
    out = cli("describe", "gemm", "--source", _write(GEMM.replace("def reference(a, b)", "def referenc(a, b)")),
              "--json")
    result = json.loads(out.stdout)
    assert out.returncode == 0 and result["verified"] is False and "reference" in result["verification_note"]


def test_import_time_infinite_loop_times_out():
    out = cli("compile", "gemm", "--source", _write("while True:\n    pass\n"), "--json", "--timeout", "3")
    err = json.loads(out.stdout)["error"]
    assert out.returncode == 1 and err["stage"] == "timeout"


# -- the command line -----------------------------------------------------------------------------------------
def test_cli_compile_json_has_the_documented_fields():
    out = cli("compile", "gemm", "--set", "M=256", "--set", "N=256", "--set", "K=256", "--arch", "sm_90a", "--json")
    assert out.returncode == 0, out.stderr
    r = json.loads(out.stdout)
    for field in ("ok", "kernel", "cuda", "ptx", "resources", "line_map", "compile_seconds", "error"):
        assert field in r
    assert set(r["resources"]) >= {"registers", "shared_bytes", "spill_bytes"}
    assert r["ok"] is True and r["error"] is None and r["kernel"] == "gemm"


def test_cli_run_without_gpu_says_so_and_fails():
    out = cli("run", "gemm", "--json")
    r = json.loads(out.stdout)
    assert out.returncode == 1 and r["error"]["stage"] == "device" and "no CUDA GPU" in r["error"]["message"]


def test_cli_bad_set_syntax_is_a_parameters_error():
    out = cli("compile", "gemm", "--set", "block_M", "--json")
    assert out.returncode == 1 and json.loads(out.stdout)["error"]["stage"] == "parameters"


def test_user_prints_do_not_corrupt_the_json():
    text = GEMM.replace("import torch\n", "import torch\nprint('hello from the user')\n", 1)
    out = cli("compile", "gemm", "--source", _write(text), "--json", "--set", "M=256", "--set", "N=256", "--set", "K=256")
    assert json.loads(out.stdout)["ok"] and "hello from the user" in out.stderr


# -- pure pieces ------------------------------------------------------------------------------------------------
def test_parse_ptxas_reads_registers_spills_and_shared_memory():
    log = """ptxas info    : Compiling entry function 'main_kernel' for 'sm_90a'
ptxas info    : Function properties for main_kernel
    8 bytes stack frame, 4 bytes spill stores, 12 bytes spill loads
ptxas info    : Used 168 registers, used 1 barriers, 1024 bytes smem"""
    assert parse_ptxas(log) == {"stack_bytes": 8, "spill_stores": 4, "spill_loads": 12, "registers": 168,
                                "barriers": 1, "static_shared_bytes": 1024}


def test_line_directives_become_a_map_and_leave_the_code():
    cuda = '#include <x>\n#line 7 "/k.py"\nint a;\n#line 99 "/lib/other.py"\nint b;\n}\n#line 9 "/k.py"\nint c;\n'
    clean, line_map = split_line_directives(cuda, "/k.py")
    assert clean.splitlines() == ["#include <x>", "int a;", "int b;", "}", "int c;"]
    assert line_map == [None, 7, None, None, 9]


def test_lines_from_a_kernel_module_beside_the_file_are_named_by_that_module_and_line(tmp_path):
    from playground.engine.compile import origin_quotes, split_line_directives_with_origins
    (tmp_path / "helper.py").write_text("a\nT.copy(K[0], K_s)\n")
    cuda = (f'#line 3 "{tmp_path}/k.py"\nint a;\n#line 2 "{tmp_path}/helper.py"\nint b;\n'
            '#line 40 "/site/tilelang/copy_op.py"\nint c;\n')
    clean, line_map, origins, files = split_line_directives_with_origins(cuda, str(tmp_path / "k.py"))
    assert clean.splitlines() == ["int a;", "int b;", "int c;"]
    # TileLang's own files are never named: what they expand for the helper's operation (its T.copy) is the helper's
    # line, not a line of the user's file that happens to call T.copy too.
    assert line_map == [3, None, None] and origins == [None, "helper.py:2", "helper.py:2"]
    # ... the module's next line that calls such an operation, as for the user's file: a wgmma after a barrier wait.
    (tmp_path / "helper2.py").write_text("wait(full)\nT.wgmma_gemm(A_s, B_s, C)\n")
    wgmma = f'#line 1 "{tmp_path}/helper2.py"\nwait;\n#line 640 "/site/tilelang/wgmma_macro_generator.py"\nwgmma;\n'
    assert split_line_directives_with_origins(wgmma, str(tmp_path / "k.py"))[2] == ["helper2.py:1", "helper2.py:2"]
    assert origin_quotes(origins, files) == {"helper.py:2": "T.copy(K[0], K_s)"}
    # a module of the same name in another kernel folder is not quoted in its place
    (tmp_path / "other").mkdir()
    (tmp_path / "other" / "helper.py").write_text("x\ny\n")
    cuda2 = cuda + f'#line 1 "{tmp_path}/other/helper.py"\nint d;\n'
    _, _, origins2, files2 = split_line_directives_with_origins(cuda2, str(tmp_path / "k.py"), "",
                                                                (tmp_path / "other",))
    assert origins2[-1] is None and origin_quotes(origins2, files2) == {"helper.py:2": "T.copy(K[0], K_s)"}


def test_macro_expansions_are_attributed_to_the_next_matching_operation():
    # The shape of flash attention: a GEMM, softmax statements, a second GEMM; TileLang names its macro file for
    # the body of each GEMM and the user's file for the statements between them.
    source = "x\nT.clear(S)\nT.gemm(Q, K, S)\ny = T.exp2(S)\nT.gemm(P, V, O)\n"
    cuda = ('#line 2 "/k.py"\nclear;\n#line 5 "/tl/wgmma_macro_generator.py"\nqk;\n'
            '#line 9 "/tl/wgmma_macro_generator.py"\nqk_more;\n#line 4 "/k.py"\nexp2;\n'
            '#line 5 "/tl/wgmma_macro_generator.py"\npv;\n')
    _, line_map = split_line_directives(cuda, "/k.py", source)
    assert line_map == [2, 3, 3, 4, 5]


def test_an_explicit_wgmma_gemm_gets_its_own_expansion_not_an_earlier_t_gemm():
    # gemm.py's shape: a T.Pipelined schedule with T.gemm first, then the hand-written one with T.wgmma_gemm after
    # a barrier wait. Only the second is compiled; its expansion belongs to its own line.
    source = "T.gemm(A, B, C)\nwait(full)\nT.wgmma_gemm(A_s[s, :, :], B_s[s, :, :], C,\n    policy=P)\nT.wait_wgmma(1)\n"
    cuda = ('#line 2 "/k.py"\nwait;\n#line 598 "/tl/wgmma_macro_generator.py"\ndesc;\n'
            '#line 640 "/tl/wgmma_macro_generator.py"\nwgmma;\n#line 5 "/k.py"\nwait1;\n')
    _, line_map = split_line_directives(cuda, "/k.py", source)
    assert line_map == [2, 3, 3, 5]


def test_gpu_out_of_memory_is_a_device_error_not_an_internal_one():
    from playground.engine.actions import is_gpu_failure
    from playground.engine.measure import device_error

    class OutOfMemoryError(RuntimeError):  # the name torch gives it
        pass
    exc = OutOfMemoryError("CUDA out of memory. Tried to allocate 10.00 GiB")
    assert is_gpu_failure(exc)
    err = device_error(exc)
    assert err.stage == "device" and "ran out of memory" in err.message and "context is lost" not in err.message
    lost = device_error(RuntimeError("CUDA error: an illegal memory access was encountered"))
    assert "context is lost" in lost.message


def test_a_kernels_cache_key_covers_the_shipped_modules_it_imports(tmp_path, monkeypatch):
    """flash_attention.py takes its Hopper schedules from flash_attention_hopper.py: an edit there must not be
    answered with a compile cached before it."""
    from playground.engine.kernel import contract
    kernel = loader.load("flash_attention")
    before = kernel.fingerprint
    assert (ROOT / "kernels" / "flash_attention_hopper.py").read_text() in before
    copy = tmp_path / "kernels"
    copy.mkdir()
    for p in (ROOT / "kernels").glob("*.py"):
        (copy / p.name).write_text(p.read_text())
    (copy / "flash_attention_hopper.py").write_text((copy / "flash_attention_hopper.py").read_text() + "\n# edit\n")
    monkeypatch.setattr(contract, "KERNELS_DIR", copy)
    assert kernel.fingerprint != before


def test_a_config_listed_twice_for_a_parallel_compile_is_compiled_once():
    # The benchmark lists a problem once per way it is measured (events and CUDA graphs, a torch.compile row):
    # each distinct config costs one compile, and every listed one gets its answer.
    from playground.engine.parallel_compile import compile_all
    k = loader.load("vector_add")
    small, large = k.resolve({"N": 4096}), k.resolve({"N": 8192})
    counted = []
    results = compile_all(k, [small, large, small], "sm_90a", workers=1, on_done=lambda i, n: counted.append((i, n)))
    assert [r["error"] for r in results] == [None, None, None]
    assert results[0]["identity"] == results[2]["identity"] != results[1]["identity"]
    assert counted == [(1, 2), (2, 2)], "two distinct configs, two compiles"


def test_configs_that_compile_into_the_same_kernel_share_an_identity():
    # Rows held whole (softmax_short_rows) walk nothing, so num_stages cannot change them: the autotuner measures
    # such twins once (tune.twin_row). Rows per block do change the kernel.
    from playground.engine.parallel_compile import compile_all
    k = loader.load("softmax")
    base = {"M": 4096, "N": 512, "threads": 128, "cluster": 1}
    configs = [k.resolve({**base, "rows_per_block": r, "num_stages": s}) for r, s in ((4, 1), (4, 3), (2, 1))]
    results = compile_all(k, configs, "sm_90a", workers=1)
    assert [r["error"] for r in results] == [None, None, None]
    assert results[0]["identity"] == results[1]["identity"] != results[2]["identity"]


def test_a_compile_process_that_dies_is_that_configs_error_not_the_end_of_the_whole_compile(tmp_path):
    # A worker killed for memory, or crashed inside the compiler, breaks the process pool: the configs it had not
    # answered get a clear error, and the caller (a tuning run, a check shape) carries on.
    from playground.engine.parallel_compile import compile_all
    source = (ROOT / "kernels" / "vector_add.py").read_text()
    dying = tmp_path / "vector_add.py"
    dying.write_text("import multiprocessing, os\nif multiprocessing.parent_process() is not None:\n"
                     "    os._exit(9)  # only in a compile process\n" + source)
    k = loader.load_file("vector_add", dying)
    results = compile_all(k, [k.resolve({"N": 4096}), k.resolve({"N": 8192})], "sm_90a", workers=2)
    assert [r["error"]["stage"] for r in results] == ["tilelang", "tilelang"]
    assert all("compile process died" in r["error"]["message"] for r in results)


@pytest.mark.parametrize("harm", ["raise KeyboardInterrupt", "class Quit(BaseException): pass\nraise Quit('bye')"])
def test_a_base_exception_at_import_is_the_users_python_error_at_its_line(harm, tmp_path):
    source = (ROOT / "kernels" / "vector_add.py").read_text()
    anchor = "import tilelang.language as T\n"
    edited = source.replace(anchor, anchor + harm + "\n", 1)
    line = edited.splitlines().index(harm.splitlines()[-1]) + 1
    with pytest.raises(StageError) as err:
        loader.load("vector_add", edited, workdir=tmp_path)
    assert err.value.stage == "python" and err.value.line == line


def test_the_factory_ending_itself_with_system_exit_is_the_users_python_error_at_its_line(tmp_path):
    from playground.engine.compile import make_prim_func
    source = (ROOT / "kernels" / "vector_add.py").read_text()
    anchor = "    @T.prim_func\n"
    edited = source.replace(anchor, "    raise SystemExit(3)\n" + anchor, 1)
    k = loader.load("vector_add", edited, workdir=tmp_path)
    with pytest.raises(StageError) as err:
        make_prim_func(k, k.resolve({"N": 4096}))
    assert err.value.stage == "python" and "SystemExit" in err.value.message
    assert err.value.line == edited.splitlines().index("    raise SystemExit(3)") + 1


@pytest.mark.parametrize("value", [1.5, True, None, [1], float("nan"), float("inf"), {"a": 1}])
def test_a_json_value_of_the_wrong_type_for_a_size_is_a_parameters_error_naming_it(value):
    # (these reached the compiler, which answered with an internal error or a TVM traceback)
    with pytest.raises(StageError, match=r"N=.* is not a whole number") as err:
        loader.load("vector_add").resolve({"N": value})
    assert err.value.stage == "parameters"


def test_a_whole_float_is_a_size_and_a_bool_option_takes_only_a_bool():
    assert loader.load("vector_add").resolve({"N": 4096.0}).problem["N"] == 4096
    gemm = loader.load("gemm")
    assert gemm.resolve({"warp_specialized": False}).tile["warp_specialized"] is False
    with pytest.raises(StageError, match="is not true or false"):
        gemm.resolve({"warp_specialized": 3})


@pytest.mark.parametrize("text, value", [("true", True), ("FALSE", False), ("1", True), ("0", False),
                                         ("Yes", True), ("no", False), ("ON", True), ("off", False)])
def test_a_switch_takes_the_words_of_a_bool_in_any_case(text, value):
    assert loader.load("gemm").resolve({"warp_specialized": text}).tile["warp_specialized"] is value


@pytest.mark.parametrize("value, shown", [("maybe", "'maybe'"), ("2", "'2'"), (1, "1"), (None, "None")])
def test_anything_else_for_a_switch_is_refused_naming_the_parameter_the_value_and_what_it_takes(value, shown):
    with pytest.raises(StageError) as err:
        loader.load("gemm").resolve({"warp_specialized": value})
    assert err.value.stage == "parameters"
    assert err.value.message == f"warp_specialized={shown} is not true or false"


def test_a_shipped_kernel_and_a_file_of_ones_own_say_the_same_of_the_same_mistake(tmp_path):
    # The same factory in a file named otherwise is a kernel of one's own (kernel/inferred.py): one converter
    # (kernel/params.py) answers both.
    own = tmp_path / "my_add.py"
    own.write_text((ROOT / "kernels" / "vector_add.py").read_text())
    mine, shipped = loader.load(str(own)), loader.load("vector_add")
    assert type(mine).__name__ == "UserKernel" and type(shipped).__name__ == "Kernel"
    for bad in ({"N": "abc"}, {"N": 1.5}, {"block_N": "big"}):
        messages = []
        for kernel in (mine, shipped):
            with pytest.raises(StageError) as err:
                kernel.resolve(bad)
            messages.append(err.value.message)
        assert messages[0] == messages[1], bad


def test_a_coding_line_python_cannot_use_is_an_error_on_line_one(tmp_path):
    source = "# -*- coding: nosuch -*-\n" + (ROOT / "kernels" / "vector_add.py").read_text()
    with pytest.raises(StageError) as err:
        loader.load("vector_add", source, workdir=tmp_path)
    assert err.value.stage == "python" and err.value.line == 1 and "encoding" in err.value.message
