"""The config the engine picks for a problem it is not told a config for (playground/engine/config_choice.py):
the preset's tuned config at a preset's size, else the nearest tuned config of the same shape class on this GPU
model (the user's tuning runs, the table in kernels/tuned/), else the kernel file's rule, else the defaults; a value
the user sets always wins, and every result says which it was (`picked_by`)."""
import json
import os
import subprocess
import sys

import pytest

from conftest import ROOT
from playground import settings
from playground.engine import config_choice
from playground.engine.kernel import loader, problem_label
from playground.engine.tune import store_best

KERNELS = ["vector_add", "gemm", "gemm_epilogue", "softmax", "flash_attention"]


@pytest.fixture
def own_data(tmp_path, monkeypatch):
    """A data folder of this test's own: an empty table of the user's tuning runs."""
    monkeypatch.setattr(settings, "_current", settings.current().replace(data_dir=tmp_path))
    return tmp_path


def factory_tile(kernel):
    return {n: kernel.defaults[n] for n in kernel.tile_names}


# -- off the presets: the rule or the table, never a fixed value --------------------------------------------------
@pytest.mark.parametrize("name, problem, expected", [
    # short fp16 rows: 128 threads, so that no thread holds only padding
    ("softmax", dict(M=32768, N=1024), {"threads": 128, "cluster": 1}),
    # short rows share a block: at least 2048 elements each
    ("softmax", dict(M=131072, N=512), {"rows_per_block": 4, "threads": 128}),
    # 2048 columns: two 16-byte loads a thread, so 128 threads
    ("softmax", dict(M=32768, N=2048), {"threads": 128, "rows_per_block": 1}),
    # 3072³: 288 tiles of 128 × 256 would take three rounds of 132, the last 18 % full; 384 of 128 × 192, 97 % full
    ("gemm", dict(M=3072, N=3072, K=3072), {"block_M": 128, "block_N": 192, "num_stages": 4}),
    # rows of 65536: over 4 CTAs, 16384 columns each
    ("softmax", dict(M=4096, N=65536), {"cluster": 4}),
    # a vocabulary of 262144: over 16 CTAs, the largest cluster; GPT-2's 50257, ragged, over 4
    ("softmax", dict(M=4096, N=262144), {"cluster": 16}),
    ("softmax", dict(M=2048, N=50257), {"cluster": 4}),
    # head dim 256: 64-key tiles, so that two stages fit in shared memory
    ("flash_attention", dict(batch=4, heads=16, seq_len=4096, dim=256, causal=False), {"block_N": 64}),
    # a skinny output: 64 tiles of 128 × 128, each split in two along K, so that every SM has a part of one
    ("gemm", dict(M=256, N=4096, K=4096), {"block_M": 128, "block_N": 128, "split_k": 2}),
    ("gemm_epilogue", dict(M=4000, N=256, K=2048), {"block_N": 128}),
    # K = 2047: rows of A off the 16 bytes TMA needs, so the T.Pipelined schedule, 128-wide tiles
    ("gemm", dict(M=5120, N=3000, K=2047), {"warp_specialized": False, "block_N": 128}),
    # 3 million elements: blocks of 2048, 8 elements a thread, so that every SM has many and the tail is short
    ("vector_add", dict(N=3_000_000), {"block_N": 2048, "threads": 256}),
])
def test_the_default_off_the_presets_comes_from_the_kernel_files_rule(own_data, name, problem, expected):
    kernel = loader.load(name)
    assert problem not in kernel.presets.values()
    config = kernel.resolve(problem)
    assert config.picked_by == "rule" and config.to_json()["picked_by"] == "rule"
    assert {k: config.tile[k] for k in expected} == expected
    assert {k: config.tile[k] for k in expected} != {k: factory_tile(kernel)[k] for k in expected}


def test_the_gemm_rule_keeps_its_large_tile_where_the_last_round_is_full_and_not_where_it_is_not(own_data):
    gemm = loader.load("gemm")
    large = [dict(M=4096, N=4096, K=4096), dict(M=8192, N=8192, K=8192), dict(M=4096, N=14336, K=4096),
             dict(M=6144, N=6144, K=6144), dict(M=256, N=16384, K=4096)]
    for problem in large:
        tile = gemm.resolve(problem).tile
        assert (tile["block_M"], tile["block_N"]) == (128, 256), problem
    # Off the 128 × 256 grid of rounds, and on outputs of at most 256 columns (which stream A from memory): a
    # smaller tile, with as many stages as shared memory holds, more than 128 × 256's 3.
    for problem in (dict(M=3072, N=3072, K=3072), dict(M=2048, N=11008, K=4096), dict(M=1024, N=1024, K=8192),
                    dict(M=16384, N=256, K=4096)):
        tile = gemm.resolve(problem).tile
        assert tile["block_M"] * tile["block_N"] < 128 * 256, problem
        assert tile["num_stages"] == gemm.module.deepest_pipeline(tile["block_M"], tile["block_N"]) > 3, problem
        assert tile["split_k"] == 1, problem


def test_the_gemm_rule_splits_k_where_the_output_has_too_few_tiles_for_the_sms_and_waits_on_memory(own_data):
    gemm = loader.load("gemm")
    num_sms = gemm.defaults["num_sms"]
    for problem, block_M in ((dict(M=128, N=8192, K=8192), 128), (dict(M=256, N=4096, K=4096), 128),
                             (dict(M=128, N=4096, K=4096), 64)):
        tile = gemm.resolve(problem).tile
        assert (tile["split_k"], tile["block_M"], tile["block_N"]) == (2, block_M, 128), problem
        tiles = -(-problem["M"] // tile["block_M"]) * -(-problem["N"] // tile["block_N"])
        assert tiles * 2 <= num_sms < 2 * tiles * 2, problem  # one round, at least half full
        assert tile["num_stages"] == gemm.module.deepest_pipeline(tile["block_M"], tile["block_N"], split_k=2)
    # Enough tiles for the SMs; too short a K to pay for adding the parts; or bound by the tensor cores, not by
    # memory (1024 × 1024 × 8192: 64 tiles of 128 × 128, but 482 multiply-adds an element moved): no split.
    for problem in (dict(M=4096, N=4096, K=4096), dict(M=256, N=16384, K=4096), dict(M=1024, N=1024, K=1024),
                    dict(M=1024, N=1024, K=8192), dict(M=512, N=4096, K=8192), dict(M=128, N=8192, K=1024)):
        assert gemm.resolve(problem).tile["split_k"] == 1, problem
    # gemm_epilogue shares the rule but has no split-K schedule.
    assert "split_k" not in loader.load("gemm_epilogue").resolve(dict(M=128, N=8192, K=8192)).tile


def test_the_gemm_rule_pairs_ctas_to_share_b_where_rows_are_off_a_128_byte_line(own_data):
    """N or K not a multiple of 64 (rows of B or A off a 128-byte line of L2): multicast, which won there on the GPU
    (3000 × 5000 × 1000: 0.70× → 0.92× cuBLAS); on aligned rows it lost, so no pair (but for two rows of tiles, below);
    nor at 3 tile rows, nor beside a split, nor in gemm_epilogue (no multicast schedule), nor beside the user's
    T.Pipelined schedule."""
    gemm = loader.load("gemm")
    for problem in (dict(M=3000, N=5000, K=1000), dict(M=3000, N=5120, K=1000), dict(M=2048, N=11000, K=4096),
                    dict(M=1000, N=1000, K=1000)):
        tile = gemm.resolve(problem).tile
        assert tile["multicast"] is True and tile["split_k"] == 1 and tile["warp_specialized"], problem
    # two rows of tiles narrower than 256, bound by memory: both read every step of B (256 × 8192 × 8192: 0.86× →
    # 0.99× paired); not three rows (the pair's second row past M: half the speed), nor 128 × 256 tiles (level)
    assert gemm.resolve(dict(M=256, N=8192, K=8192)).tile["multicast"] is True
    # nor where pairs over an odd count of rows take more rounds than the tiles alone (384 × 8192 × 8192: 2 for
    # 1, 0.51 the speed; 520 × 3000 × 1000 likewise), while one round more in 19 still pays (6000 × 10000 × 2000)
    assert gemm.resolve(dict(M=6000, N=10000, K=2000)).tile["multicast"] is True
    for problem in (dict(M=4096, N=4096, K=4096), dict(M=1024, N=1024, K=1024), dict(M=3072, N=3072, K=3072),
                    dict(M=384, N=5000, K=1000), dict(M=128, N=8000, K=8000), dict(M=384, N=8192, K=8192),
                    dict(M=256, N=16384, K=4096), dict(M=520, N=3000, K=1000)):
        assert gemm.resolve(problem).tile["multicast"] is False, problem
    assert "multicast" not in loader.load("gemm_epilogue").resolve(dict(M=3000, N=5000, K=1000)).tile
    # beside the user's T.Pipelined schedule the rule's tile stays, without its multicast; beside their split K,
    # the split's own tile
    rule = gemm.resolve(dict(M=1000, N=1000, K=1000)).tile
    plain = gemm.resolve(dict(M=1000, N=1000, K=1000, warp_specialized=False)).tile
    assert plain == {**rule, "warp_specialized": False, "multicast": False}
    split = gemm.resolve(dict(M=3000, N=5000, K=1000, split_k=2)).tile
    assert split["multicast"] is False and (split["block_M"], split["block_N"], split["num_stages"]) == (128, 128, 4)
    gemm.module.check_options(split["warp_specialized"], split["split_k"], split["multicast"])


def test_tuning_from_the_rules_multicast_tries_split_k_without_it_and_keeps_what_the_user_set(own_data):
    """Candidates lay the space's values over the config: split K beside the rule's multicast was refused, two
    thirds of the space spent on nothing (found in review). The engine's multicast gives way; the user's does not."""
    from playground.engine.tune import candidates
    gemm = loader.load("gemm")
    check = gemm.module.check_options
    ruled = candidates(gemm, gemm.resolve(dict(M=3000, N=5000, K=1000)))
    assert ruled[0].tile["multicast"] is True and any(c.tile["split_k"] > 1 for c in ruled)
    for c in ruled:
        check(c.tile["warp_specialized"], c.tile["split_k"], c.tile["multicast"])
    assert all(c.tile["multicast"] == (c.tile["split_k"] == 1) for c in ruled)
    asked = candidates(gemm, gemm.resolve(dict(M=3000, N=5000, K=1000, multicast=True)))
    assert asked and all(c.tile["multicast"] is True and c.tile["split_k"] == 1 for c in asked)


def test_a_tuned_split_k_laid_over_the_rules_multicast_gives_a_config_the_kernel_takes(own_data):
    """A tuning run stores its SPACE's values only, never multicast: its split K at 128 × 8192 × 8192 reused at
    256 × 8192 × 8192 (same shape class), where the rule multicasts, made split K beside multicast, which the
    kernel refuses (found in review). The table's tile stays; the option no one set goes back to its default."""
    gemm = loader.load("gemm")
    tuned = {"block_M": 128, "block_N": 128, "block_K": 64, "num_stages": 4, "threads": 256, "split_k": 2}
    config_choice.remember("gemm", dict(M=128, N=8192, K=8192), "float16", tuned, config_choice.gpu_model(), 1.0)
    config = gemm.resolve(dict(M=256, N=8192, K=8192))
    assert config.picked_by == "table" and {k: config.tile[k] for k in tuned} == tuned
    assert config.tile["multicast"] is False
    gemm.module.check_options(config.tile["warp_specialized"], config.tile["split_k"], config.tile["multicast"])


def test_a_gemm_tile_the_user_sets_brings_its_own_threads_and_stages_not_the_rules_for_another_tile(own_data):
    """1024³: the rule's 64 × 128 tile has 8 stages; with the user's 128 × 128 those 8 did not fit in shared memory
    (the GPU run found it: a `resources` error where the user had set only the tile). The rest follows the tile the
    user set (TIED), keeping as much of the rule's pick as fits."""
    from playground.engine.compile import compile_kernel
    gemm = loader.load("gemm")
    config = gemm.resolve(dict(M=1024, N=1024, K=1024, block_M=128, block_N=128, warp_specialized=False))
    assert (config.tile["threads"], config.tile["num_stages"]) == (256, 6)
    assert compile_kernel(gemm, config, "sm_90a")["ok"]
    # block_M = 128 again at 3072³ keeps the rule's 128 × 192; block_M = 64 on a split product keeps the split
    assert gemm.resolve(dict(M=3072, N=3072, K=3072, block_M=128)).tile["block_N"] == 192
    # (and the rule's 4 stages, which 64 × 128 holds too: what follows changes as little as it must)
    split = gemm.resolve(dict(M=128, N=8192, K=8192, block_M=64)).tile
    assert (split["split_k"], split["threads"], split["num_stages"]) == (2, 128, 4)
    # 3 stages at 256³ keep the rule's 64 × 128 tile (they fit it), not the 128 × 256 one that holds at most 3
    assert gemm.resolve(dict(M=256, N=256, K=256, num_stages=3)).tile["block_M"] == 64
    # never a tie the kernel refuses beside what the user set: 4 stages of 128 × 128 are split K's, not multicast's
    both = gemm.resolve(dict(M=1100, N=1048, K=1000, block_M=128, block_N=128, num_stages=4, multicast=True)).tile
    assert both["split_k"] == 1
    gemm.module.check_options(both["warp_specialized"], both["split_k"], True)  # (raises where refused)
    # a stage count the user sets brings the tile that holds it, and the answer says so
    deep = gemm.resolve(dict(M=4096, N=4096, K=4096, num_stages=8))
    assert (deep.tile["block_M"], deep.tile["block_N"], deep.tile["threads"]) == (64, 128, 128)
    assert deep.to_json()["notes"] == ["block_M=64, block_N=128, threads=128: they go with num_stages=8"]
    assert "notes" not in gemm.resolve(dict(M=3072, N=3072, K=3072, block_M=128)).to_json()  # nothing followed
    # what the user sets is never changed, and gemm_epilogue's ties are gemm's unsplit ones
    assert gemm.resolve(dict(M=1024, N=1024, K=1024, block_M=128, num_stages=2)).tile["num_stages"] == 2
    epilogue = list(loader.load("gemm_epilogue").module.TIED.values())[0]
    assert epilogue == [t[:4] for t in list(gemm.module.TIED.values())[0] if t[4] == 1]
    for block_M, block_N, _, stages, split_k in list(gemm.module.TIED.values())[0]:  # every tie fits
        assert stages <= gemm.module.deepest_pipeline(block_M, block_N, split_k=split_k)


def test_the_deepest_pipeline_fits_in_shared_memory_and_the_shipped_tiles_keep_theirs():
    from kernels.gemm import SHARED_MEMORY, TILES, deepest_pipeline
    for block_M, block_N, _, stages, _ in TILES:
        assert stages == deepest_pipeline(block_M, block_N)
        used = stages * (block_M + block_N) * 64 * 2 + block_M * block_N * 2
        assert used <= SHARED_MEMORY and used + (block_M + block_N) * 64 * 2 > SHARED_MEMORY or stages == 8
    assert [t[3] for t in TILES] == [3, 4, 6, 8]  # 128 × 256, 128 × 192, 128 × 128, 64 × 128
    # Split K keeps an fp32 tile and the other CTAs' slices of it beside the stages.
    from kernels.gemm import SPLIT_TILES, output_bytes
    for block_M, block_N, _, stages, _, split_k in SPLIT_TILES:
        stage = (block_M + block_N) * 64 * 2
        used = stages * stage + output_bytes(block_M, block_N, 2, split_k)
        assert used <= SHARED_MEMORY < used + stage


def test_the_rule_follows_the_problem_not_one_fixed_config(own_data):
    softmax = loader.load("softmax")
    sizes = (512, 1024, 4096, 16384, 32768, 65536, 131072, 262144)
    tiles = {n: softmax.resolve(dict(M=4096, N=n)).tile for n in sizes}
    assert len({json.dumps(t, sort_keys=True) for t in tiles.values()}) >= 3
    assert [tiles[n]["cluster"] for n in sizes[2:]] == [1, 1, 2, 4, 8, 16]
    # Qwen's vocabulary, 151936: over 8 CTAs of 18992 columns, not 16 of 9496 (fewer exchanges)
    assert softmax.resolve(dict(M=4096, N=151936)).tile["cluster"] == 8


def test_rows_off_16_byte_boundaries_take_the_cluster_schedule_from_4096_columns(own_data):
    # A block of its own loads such a row 2 bytes at a time; the cluster schedule keeps 16-byte loads for it.
    softmax = loader.load("softmax")
    assert [softmax.module.ctas_per_row(n, "bfloat16") for n in (4001, 5001, 8191, 11111, 11112, 20001)] == [
        1, 2, 2, 2, 1, 2]
    assert softmax.module.ctas_per_row(11110, "float32") == 2 and softmax.module.ctas_per_row(11112, "float32") == 1
    assert softmax.resolve(dict(M=4096, N=11111)).tile["cluster"] == 2  # the rule's, or the table's of that class


def test_head_dim_64_off_its_presets_gets_the_head_dim_64_config(own_data):
    """16×16×2048×64 is no preset: it gets the head-dim-64 config (three warpgroups taking turns), from the table
    shipped for the H200 (tuned at 4×32×8192×64) or the rule, never the head-dim-128 defaults."""
    fa = loader.load("flash_attention")
    config = fa.resolve(dict(batch=16, heads=16, seq_len=2048, dim=64, causal=False))
    assert config.picked_by in ("table", "rule")
    assert config.tile["block_M"] == 192 and config.tile["threads"] == 384 and config.tile["pingpong"] is True
    assert config.tile != factory_tile(fa)


# -- the presets keep their tuned configs -------------------------------------------------------------------------
@pytest.mark.parametrize("name", KERNELS)
def test_every_preset_with_a_tuned_config_still_gets_it(own_data, name):
    kernel = loader.load(name)
    for label, tuned in kernel.tuned.items():
        config = kernel.resolve({"preset": label})
        assert config.picked_by == "preset", label
        assert {k: config.tile[k] for k in tuned} == tuned, label
        # what the preset does not tune is as before: the factory's defaults (the rule agrees there)
        assert {k: v for k, v in config.tile.items() if k not in tuned} == \
               {k: v for k, v in factory_tile(kernel).items() if k not in tuned}, label


def test_the_shipped_table_agrees_with_the_presets_it_was_built_from():
    table = json.loads((ROOT / "kernels" / "tuned" / "h200.json").read_text())
    assert table["gpu"] == config_choice.REFERENCE_GPU
    assert config_choice.table_file_name(table["gpu"]) == "h200.json"
    for entry in table["entries"]:
        kernel = loader.load(entry["kernel"])
        tuned = kernel.tuned[entry["preset"]]
        assert kernel.presets[entry["preset"]] == entry["problem"]
        assert {k: entry["tile"][k] for k in tuned} == tuned, entry["preset"]
        assert set(entry["tile"]) <= set(kernel.tile_names)


def test_a_tuned_config_is_not_reused_across_shape_classes(own_data):
    """The table's long-row softmax config (a row over 2 CTAs) is not the config of short rows."""
    softmax = loader.load("softmax")
    assert softmax.resolve(dict(M=8192, N=32000)).picked_by == "table"
    short = softmax.resolve(dict(M=8192, N=8192))
    assert short.picked_by == "rule" and short.tile["cluster"] == 1



def test_a_config_tuned_for_long_causal_attention_is_not_reused_where_the_rule_runs_another_schedule(own_data):
    """Causal attention up to 2048 tokens runs on the persistent schedule, longer on the grid: a config tuned at
    8192 tokens (the grid's) says nothing of 2048 nearby, whose rule config stays; one tuned at 1024 carries over."""
    fa = loader.load("flash_attention")
    gpu = config_choice.gpu_model()
    grid = {"block_M": 128, "block_N": 128, "num_stages": 2, "threads": 256, "persistent": False}
    config_choice.remember("flash_attention", dict(batch=4, heads=32, seq_len=8192, dim=128, causal=True),
                           "float16", grid, gpu, 1.0)
    assert fa.resolve(dict(batch=2, heads=32, seq_len=4096, dim=128, causal=True)).picked_by == "table"
    short = dict(batch=8, heads=32, seq_len=2048, dim=128, causal=True)  # within reach of 4 × 8192 in size
    assert fa.resolve(short).picked_by == "rule" and fa.resolve(short).tile["persistent"] is True
    config_choice.remember("flash_attention", dict(batch=16, heads=32, seq_len=1024, dim=128, causal=True),
                           "float16", {**grid, "persistent": True, "num_stages": 1}, gpu, 1.0)
    assert fa.resolve(short).picked_by == "table" and fa.resolve(short).tile["num_stages"] == 1

# -- the user's own tuning runs -----------------------------------------------------------------------------------
def test_a_stored_tuning_run_is_reused_for_a_nearby_shape_and_reported(own_data):
    gemm = loader.load("gemm")
    gpu = config_choice.gpu_model()
    tuned = {"block_M": 128, "block_N": 128, "block_K": 64, "num_stages": 4, "threads": 256, "swizzle_panel": 16}
    config_choice.remember("gemm", dict(M=4096, N=4096, K=4096), "float16", tuned, gpu, 1.0)
    config = gemm.resolve(dict(M=4000, N=4096, K=4160, dtype="bfloat16"))
    assert config.picked_by == "table"
    assert config.tuned_for == f"4096×4096×4096 on {gpu}"
    assert {k: config.tile[k] for k in tuned} == tuned
    out = config.to_json()
    assert out["picked_by"] == "table" and "tuned for 4096×4096×4096" in out["why"]
    # far away (and skinny: another shape class), or with rows off a 128-byte line (the rule multicasts), the rule
    # decides
    assert gemm.resolve(dict(M=256, N=4096, K=4096)).picked_by == "rule"
    assert gemm.resolve(dict(M=4000, N=4096, K=4200)).tile["multicast"] is True
    assert gemm.resolve(dict(M=32768, N=32768, K=32768)).picked_by == "rule"


def test_a_run_stored_before_the_kernel_had_grouped_query_attention_counts_as_multi_head(own_data):
    """A table written before flash_attention took `group_size` has no such size: it was tuned at the default (1),
    and still carries over, to a grouped problem nearby too; the labels name the grouping only where there is one."""
    gpu = config_choice.gpu_model()
    tuned = {"block_N": 64, "num_stages": 1}
    old_problem = dict(batch=4, heads=16, seq_len=4096, dim=256, causal=True)
    config_choice.remember("flash_attention", old_problem, "bfloat16", tuned, gpu)
    fa = loader.load("flash_attention")
    for group_size in (1, 2):
        config = fa.resolve(dict(old_problem, seq_len=2048, group_size=group_size))
        assert config.picked_by == "table" and config.tuned_for == f"4×16×4096×256 causal on {gpu}"
        assert {k: config.tile[k] for k in tuned} == tuned
    assert problem_label(dict(old_problem, group_size=4)) == "4×16×4096×256 causal group_size=4"
    assert problem_label(dict(old_problem, group_size=1)) == "4×16×4096×256 causal"


def test_the_nearest_tuned_shape_is_nearest_in_log_distance(own_data):
    """4608 is nearer 8192 than 2048 by ratio (1.8× against 2.2×), though not by difference. (Multiples of 64: rows
    off a 128-byte line are another shape class.)"""
    gpu = config_choice.gpu_model()
    small_tile = {"block_K": 32, "num_stages": 2}
    large_tile = {"block_K": 64, "num_stages": 4}
    config_choice.remember("gemm", dict(M=2048, N=2048, K=2048), "float16", small_tile, gpu)
    config_choice.remember("gemm", dict(M=8192, N=8192, K=8192), "float16", large_tile, gpu)
    gemm = loader.load("gemm")
    assert gemm.resolve(dict(M=4608, N=4608, K=4608)).tuned_for == f"8192×8192×8192 on {gpu}"
    assert gemm.resolve(dict(M=3968, N=3968, K=3968)).tuned_for == f"2048×2048×2048 on {gpu}"


def test_a_tuning_run_serves_dtypes_of_its_element_width_and_prefers_its_own_dtype(own_data):
    gpu = config_choice.gpu_model()
    softmax = loader.load("softmax")
    problem = dict(M=8192, N=2048)  # no preset: the rule's, unless a run is near
    config_choice.remember("softmax", dict(M=8192, N=2000), "float32", {"threads": 512}, gpu)
    assert softmax.resolve({**problem, "dtype": "float16"}).picked_by == "rule"  # tuned for twice the bytes
    assert softmax.resolve({**problem, "dtype": "float32"}).tile["threads"] == 512
    config_choice.remember("softmax", dict(M=8192, N=2000), "bfloat16", {"threads": 128}, gpu)
    config_choice.remember("softmax", dict(M=8192, N=2000), "float16", {"threads": 256}, gpu)
    assert softmax.resolve({**problem, "dtype": "float16"}).tile["threads"] == 256  # as near: its own dtype's
    assert softmax.resolve({**problem, "dtype": "bfloat16"}).tile["threads"] == 128
    assert softmax.resolve({**problem, "dtype": "float32"}).tile["threads"] == 512


def test_a_tuning_run_on_another_gpu_model_is_not_reused(own_data):
    config_choice.remember("gemm", dict(M=4096, N=4096, K=4096), "float16", {"num_stages": 2}, "NVIDIA A100-SXM4-80GB")
    assert loader.load("gemm").resolve(dict(M=4000, N=4096, K=4096)).picked_by == "rule"


def test_the_users_run_at_a_presets_own_size_beats_the_preset(own_data):
    gpu = config_choice.gpu_model()
    softmax = loader.load("softmax")
    problem = softmax.presets["4096×32768 (long rows)"]
    config_choice.remember("softmax", problem, "float16", {"rows_per_block": 2, "num_stages": 3, "threads": 512}, gpu)
    config = softmax.resolve({"preset": "4096×32768 (long rows)"})
    assert config.picked_by == "table" and config.tile["threads"] == 512
    assert config.tile["cluster"] == 2  # not searched: from the rule and the preset's class


def test_tune_stores_a_shipped_kernels_best_and_not_an_edited_copys(own_data, tmp_path):
    gemm = loader.load("gemm")
    config = gemm.resolve(dict(M=3000, N=3000, K=3000))
    best = {"block_M": 128, "block_N": 128, "block_K": 64, "num_stages": 4, "threads": 256, "swizzle_panel": 0}
    stored = store_best(gemm, config, best, 0.5, {"name": "NVIDIA H200"})
    gpu = config_choice.visible_gpu() or "NVIDIA H200"  # named as NVML names the GPU present, if there is one
    assert stored["ok"] and stored["tuned_for"] == f"3000×3000×3000 on {gpu}"
    entries = json.loads((own_data / config_choice.USER_TABLE).read_text())["entries"]
    assert [(e["kernel"], e["problem"], e["tile"], e["gpu"]) for e in entries] == \
           [("gemm", dict(M=3000, N=3000, K=3000), best, gpu)]
    # the same problem tuned again replaces its entry
    store_best(gemm, config, {**best, "num_stages": 3}, 0.4, {"name": "NVIDIA H200"})
    entries = json.loads((own_data / config_choice.USER_TABLE).read_text())["entries"]
    assert len(entries) == 1 and entries[0]["tile"]["num_stages"] == 3
    edited = loader.load("gemm", (ROOT / "kernels" / "gemm.py").read_text() + "\n# mine\n", tmp_path / "src")
    assert not store_best(edited, config, best, 0.5, {"name": "NVIDIA H200"})["ok"]
    # what a class would start from: not a run from values set by hand, not a "search" of one candidate
    mine = gemm.resolve(dict(M=3000, N=3000, K=3000, block_M="64"))
    refused = store_best(gemm, mine, best, 0.1, {"name": "NVIDIA H200"}, searched=32)
    assert not refused["ok"] and "block_M set by you" in refused["why"]
    refused = store_best(gemm, config, best, 0.1, {"name": "NVIDIA H200"}, searched=1)
    assert not refused["ok"] and "fewer than a search" in refused["why"]
    assert store_best(gemm, config, best, 0.1, {"name": "NVIDIA H200"}, searched=32)["ok"]


def test_an_unreadable_table_of_tuning_runs_is_ignored(own_data):
    (own_data / config_choice.USER_TABLE).write_text("{not json")
    assert loader.load("vector_add").resolve(dict(N=2**20)).picked_by == "rule"


# -- the user's value wins ----------------------------------------------------------------------------------------
def test_a_value_the_user_sets_always_wins(own_data):
    gpu = config_choice.gpu_model()
    config_choice.remember("gemm", dict(M=4096, N=4096, K=4096), "float16", {"block_K": 32}, gpu)
    gemm = loader.load("gemm")
    config = gemm.resolve(dict(M=4000, N=4096, K=4096, block_K="64", num_stages="2"))
    assert config.tile["block_K"] == 64 and config.tile["num_stages"] == 2
    assert config.picked_by == "user" and config.set_by_user == ("block_K", "num_stages")
    assert config.why() == f"block_K, num_stages set by you; the rest tuned for 4096×4096×4096 on {gpu}"
    every = gemm.resolve({"M": 4000, "N": 4096, "K": 4096, **{n: str(v) for n, v in factory_tile(gemm).items()}})
    assert every.picked_by == "user" and every.why() == "set by you" and every.tile == factory_tile(gemm)
    fa = loader.load("flash_attention")
    config = fa.resolve({"preset": "4×32×8192×64", "block_M": "128", "threads": "256", "pingpong": "false"})
    assert (config.tile["block_M"], config.tile["threads"], config.tile["pingpong"]) == (128, 256, False)
    assert config.picked_by == "user"


# -- every result says how its config was picked ------------------------------------------------------------------
def cli(*args, env=None):
    return subprocess.run([sys.executable, "-m", "playground", *args], cwd=ROOT, capture_output=True, text=True,
                          timeout=300, env={**os.environ, **(env or {})})


def test_picked_by_is_in_the_result_json_of_compile(tmp_path):
    data = tmp_path / "data"
    out = cli("compile", "vector_add", "--set", "N=3000000", "--arch", "sm_90a", "--json",
              env={"PLAYGROUND_DATA": str(data)})
    result = json.loads(out.stdout)
    assert out.returncode == 0 and result["ok"], out.stderr[-2000:]
    assert result["config"]["picked_by"] == "rule" and result["config"]["tile"]["block_N"] == 2048
    # a tuning run stored for 2^22 on this GPU model: the same request now starts from it, and says so
    config_choice.remember("vector_add", dict(N=2**22), "float16", {"block_N": 16384, "threads": 512},
                           config_choice.gpu_model(), path=data / config_choice.USER_TABLE)
    out = cli("compile", "vector_add", "--set", "N=3000000", "--arch", "sm_90a", "--json",
              env={"PLAYGROUND_DATA": str(data)})
    result = json.loads(out.stdout)
    assert out.returncode == 0 and result["ok"], out.stderr[-2000:]
    assert result["config"]["picked_by"] == "table"
    assert result["config"]["tuned_for"] == f"4194304 on {config_choice.gpu_model()}"
    assert result["config"]["tile"] == {"block_N": 16384, "threads": 512}
    assert "16384" in result["cuda"]  # the CUDA is the stored config's


def test_a_kernel_of_ones_own_has_no_rule_its_defaults_are_picked_by_default(tmp_path):
    source = '''import tilelang.language as T

def add_one(N=1024, dtype="float16", block_N=256):
    @T.prim_func
    def main(A: T.Tensor((N,), dtype), B: T.Tensor((N,), dtype)):
        with T.Kernel(T.ceildiv(N, block_N), threads=128) as bx:
            for i in T.Parallel(block_N):
                B[bx * block_N + i] = A[bx * block_N + i] + 1
    return main
'''
    kernel = loader.load("", source, tmp_path)
    assert kernel.resolve({}).to_json()["picked_by"] == "default"
    mine = kernel.resolve({"block_N": "128"})
    assert mine.picked_by == "user" and mine.tile["block_N"] == 128 and mine.set_by_user == ("block_N",)


@pytest.mark.gpu
def test_tune_on_the_gpu_keeps_its_best_and_the_next_request_nearby_starts_from_it(own_data):
    from playground.engine.tune import tune
    vector_add = loader.load("vector_add")
    result = tune(vector_add, vector_add.resolve(dict(N=2**22)), max_configs=None).to_json()  # its whole space
    assert result["ok"] and result["best"]["stored"]["ok"], result["best"]
    gpu = config_choice.gpu_model()
    assert result["best"]["stored"]["tuned_for"] == f"4194304 on {gpu}"
    config = vector_add.resolve(dict(N=3_000_000))
    assert config.picked_by == "table" and config.tuned_for == f"4194304 on {gpu}"
    assert config.tile == result["best"]["tile"]


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("asked", [dict(overlap=False), dict(persistent=True)])
def test_what_the_user_sets_never_meets_a_rule_config_the_kernel_refuses(asked, causal):
    """The head-dim-64 rule picks ping-pong; with the user's overlap=False or persistent=True that combination is
    refused by flash_attention.check_options, so the user's value wins and the rest are the factory's defaults
    (the H200 run found these refused before)."""
    kernel = loader.load("flash_attention")
    config = kernel.resolve({"batch": 2, "heads": 8, "seq_len": 1000, "dim": 64, "causal": causal, **asked})
    assert all(config.tile[k] == v for k, v in asked.items())
    kernel.module.check_options(**{k: config.tile[k] for k in ("overlap", "pingpong", "extra_step", "persistent")})
    assert config.picked_by != "rule"



@pytest.mark.parametrize("asked", [dict(warp_specialized=False), dict(multicast=True)])
def test_what_the_user_sets_never_meets_the_gemm_rules_split_k(asked):
    """128 × 8192 × 8192: the rule splits K, which the T.Pipelined schedule and multicast do not do; the user's value
    wins, and the product compiles on the schedule they asked for."""
    kernel = loader.load("gemm")
    assert kernel.resolve({"M": 128, "N": 8192, "K": 8192}).tile["split_k"] == 2
    config = kernel.resolve({"M": 128, "N": 8192, "K": 8192, **asked})
    assert all(config.tile[k] == v for k, v in asked.items()) and config.tile["split_k"] == 1
    options = {k: config.tile[k] for k in ("warp_specialized", "split_k", "multicast")}
    kernel.module.check_options(**options)
    kernel.prim_func(config)
    with pytest.raises(ValueError, match="split_k"):  # the rule's split beside what the user set: refused
        kernel.module.check_options(**{**options, "split_k": 2})

@pytest.mark.parametrize("asked, follows", [(dict(block_M=64), dict(threads=128)),
                                            (dict(block_M=192), dict(threads=384)),
                                            (dict(threads=128), dict(block_M=64))])
def test_the_parameter_the_user_left_to_the_engine_follows_the_one_they_set(asked, follows):
    """flash_attention's block_M and threads go together (its TIED: a warpgroup per 64 query rows): block_M = 64
    with the rule's 256 threads failed to compile ("Layout infer conflict"), the choice a student makes from the
    list."""
    from playground.engine.compile import compile_kernel
    kernel = loader.load("flash_attention")
    config = kernel.resolve({"batch": 1, "heads": 2, "seq_len": 1024, "dim": 128, "causal": True, **asked})
    assert {k: config.tile[k] for k in follows} == follows
    assert compile_kernel(kernel, config, "sm_90a")["cuda"]
    both = kernel.resolve({"batch": 1, "heads": 2, "seq_len": 1024, "dim": 128, "block_M": 64, "threads": 256})
    assert (both.tile["block_M"], both.tile["threads"]) == (64, 256), "what the user sets is never changed"
