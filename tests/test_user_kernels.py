"""Kernels of one's own: any TileLang file, in the forms TileLang's README and examples write, compiles from the
command line (a path) and through the job layer (kernel ""), with clear errors for bad input; on a GPU it verifies
against its reference and is timed, or is timed and said to be not verified.

The kernels below are short ones of our own, written in the styles of TileLang's README quick start (an eager
@tilelang.jit with T.const and T.empty, a script at top level), examples/gemm (eager, block sizes without defaults,
a main() under __main__), examples/elementwise (a plain function returning a @T.prim_func, every argument required)
and a lazy @tilelang.jit RMSNorm with out_idx and pass_configs. Sizes are small: each compile costs seconds.
"""
import json
import re
import subprocess
import sys

import pytest

from conftest import ROOT
from tilelang_readme import QUICKSTART  # TileLang's README quick-start, as its README writes it

pytestmark = pytest.mark.filterwarnings("ignore::pandas.errors.Pandas4Warning")  # from Gradio's queue

QUICKSTART_KERNEL_ONLY = QUICKSTART[:QUICKSTART.index("M = N = K")]

GEMM_EXAMPLE = '''import tilelang
import tilelang.language as T


@tilelang.jit
def matmul(A, B, block_M, block_N, block_K, dtype=T.float16, accum_dtype=T.float32):
    M, N, K = T.const("M, N, K")
    A: T.Tensor((M, K), dtype)
    B: T.Tensor((K, N), dtype)
    C = T.empty((M, N), dtype)

    with T.Kernel(T.ceildiv(N, block_N), T.ceildiv(M, block_M), threads=128) as (bx, by):
        A_shared = T.alloc_shared((block_M, block_K), dtype)
        B_shared = T.alloc_shared((block_K, block_N), dtype)
        C_local = T.alloc_fragment((block_M, block_N), accum_dtype)
        T.clear(C_local)
        for k in T.Pipelined(T.ceildiv(K, block_K), num_stages=3):
            T.copy(A[by * block_M, k * block_K], A_shared)
            T.copy(B[k * block_K, bx * block_N], B_shared)
            T.gemm(A_shared, B_shared, C_local)
        T.copy(C_local, C[by * block_M, bx * block_N])

    return C


def main():
    import torch
    kernel = matmul.compile(M=1024, N=1024, K=1024, block_M=128, block_N=128, block_K=32)
    a = torch.randn(1024, 1024).cuda().half()
    b = torch.randn(1024, 1024).cuda().half()
    torch.testing.assert_close(kernel(a, b), a @ b, rtol=1e-2, atol=1e-2)


if __name__ == "__main__":
    main()
'''

ELEMENTWISE = '''import tilelang
import tilelang.language as T


def ref_program(x, y):
    return x + y


def elementwise_add(M, N, block_M, block_N, in_dtype, out_dtype, threads):

    @T.prim_func
    def elem_add(A: T.Tensor((M, N), in_dtype), B: T.Tensor((M, N), in_dtype), C: T.Tensor((M, N), out_dtype)):
        with T.Kernel(T.ceildiv(N, block_N), T.ceildiv(M, block_M), threads=threads) as (bx, by):
            for (local_y, local_x) in T.Parallel(block_M, block_N):
                y = by * block_M + local_y
                x = bx * block_N + local_x
                C[y, x] = A[y, x] + B[y, x]

    return elem_add


def main():
    import torch
    kernel = tilelang.compile(elementwise_add(512, 1024, 32, 32, "float32", "float32", 128), out_idx=-1)
    a = torch.randn(512, 1024, device="cuda")
    b = torch.randn(512, 1024, device="cuda")
    torch.testing.assert_close(kernel(a, b), ref_program(a, b))


if __name__ == "__main__":
    main()
'''

RMSNORM = '''"""RMSNorm: each row of X scaled by the reciprocal of its root mean square."""
import torch
import tilelang
import tilelang.language as T


@tilelang.jit(out_idx=[-1], pass_configs={"tl.disable_tma_lower": True}, compile_flags=["-O3"])
def rms_norm(M, N, block_M: int = 1, threads: int = 128, eps: float = 1e-6):
    dtype = "float32"

    @T.prim_func
    def main(X: T.Tensor((M, N), dtype), Y: T.Tensor((M, N), dtype)):
        with T.Kernel(T.ceildiv(M, block_M), threads=threads) as bx:
            x = T.alloc_fragment((block_M, N), dtype)
            squares = T.alloc_fragment((block_M, N), dtype)
            scale = T.alloc_fragment((block_M,), dtype)
            T.copy(X[bx * block_M, 0], x)
            for i, j in T.Parallel(block_M, N):
                squares[i, j] = x[i, j] * x[i, j]
            T.reduce_sum(squares, scale, dim=1)
            for i in T.Parallel(block_M):
                scale[i] = T.rsqrt(scale[i] / N + eps)
            for i, j in T.Parallel(block_M, N):
                Y[bx * block_M + i, j] = x[i, j] * scale[i]

    return main


def reference(x, eps):
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps)


BASELINES = {"torch": lambda x, eps: x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps)}
CHECK_SHAPES = [dict(M=33)]
'''
RMSNORM_WRONG_INDEX = RMSNORM.replace("Y[bx * block_M + i, j] = x[i, j] * scale[i]",
                                      "Y[bx * block_M + i, j] = X[bx * block_M + i, (j + 1) % N] * scale[i]")
RMSNORM_NO_REFERENCE = RMSNORM.replace("def reference(x, eps):", "def expected(x, eps):")

AUTOTUNED = '''import tilelang
import tilelang.language as T


@tilelang.autotune(configs=[{"block": 256, "threads": 128}, {"block": 512, "threads": 128},
                            {"block": 512, "threads": 256}])
@tilelang.jit(out_idx=[-1])
def double(N, block=None, threads=None):
    @T.prim_func
    def main(A: T.Tensor((N,), "float32"), B: T.Tensor((N,), "float32")):
        with T.Kernel(T.ceildiv(N, block), threads=threads) as bx:
            for i in T.Parallel(block):
                B[bx * block + i] = A[bx * block + i] * 2.0
    return main


def reference(a):
    return 2 * a
'''

FIXED = '''import tilelang.language as T

N = 4096


@T.prim_func
def double(A: T.Tensor((N,), "float32"), B: T.Tensor((N,), "float32")):
    with T.Kernel(T.ceildiv(N, 256), threads=256) as bx:
        for i in T.Parallel(256):
            B[bx * 256 + i] = A[bx * 256 + i] * 2.0
'''

TWO_KERNELS = '''import tilelang
import tilelang.language as T


@tilelang.jit(out_idx=[-1])
def add_one(N, block: int = 256):
    @T.prim_func
    def main(A: T.Tensor((N,), "float32"), B: T.Tensor((N,), "float32")):
        with T.Kernel(T.ceildiv(N, block), threads=128) as bx:
            for i in T.Parallel(block):
                B[bx * block + i] = A[bx * block + i] + 1.0
    return main


def add_two(N, block=256):
    @T.prim_func
    def main(A: T.Tensor((N,), "float32"), B: T.Tensor((N,), "float32")):
        with T.Kernel(T.ceildiv(N, block), threads=128) as bx:
            for i in T.Parallel(block):
                B[bx * block + i] = A[bx * block + i] + 2.0
    return main
'''

WITH_HELPER = '''import tilelang
import tilelang.language as T
from tile_sizes import BLOCK


@tilelang.jit(out_idx=[-1])
def negate(N):
    @T.prim_func
    def main(A: T.Tensor((N,), "float32"), B: T.Tensor((N,), "float32")):
        with T.Kernel(T.ceildiv(N, BLOCK), threads=128) as bx:
            for i in T.Parallel(BLOCK):
                B[bx * BLOCK + i] = -A[bx * BLOCK + i]
    return main
'''

HUGE_TILES = '''import tilelang
import tilelang.language as T


@tilelang.jit(out_idx=[-1])
def matmul(M, N, K, block_M=512, block_N=512, block_K=128):
    @T.prim_func
    def main(A: T.Tensor((M, K), "float16"), B: T.Tensor((K, N), "float16"), C: T.Tensor((M, N), "float16")):
        with T.Kernel(T.ceildiv(N, block_N), T.ceildiv(M, block_M), threads=256) as (bx, by):
            A_shared = T.alloc_shared((block_M, block_K), "float16")
            B_shared = T.alloc_shared((block_K, block_N), "float16")
            C_local = T.alloc_fragment((block_M, block_N), "float")
            T.clear(C_local)
            for k in T.Pipelined(T.ceildiv(K, block_K), num_stages=2):
                T.copy(A[by * block_M, k * block_K], A_shared)
                T.copy(B[k * block_K, bx * block_N], B_shared)
                T.gemm(A_shared, B_shared, C_local)
            T.copy(C_local, C[by * block_M, bx * block_N])
    return main
'''

BAD_COPY = '''import tilelang
import tilelang.language as T


@tilelang.jit(out_idx=[-1])
def copy_tiles(M, N, block=64):
    @T.prim_func
    def main(A: T.Tensor((M, N), "float16"), B: T.Tensor((M, N), "float16")):
        with T.Kernel(T.ceildiv(N, block), T.ceildiv(M, block), threads=128) as (bx, by):
            tile = T.alloc_shared((block, block), "float16")
            T.copy(A[by * block, bx * block], tile)
            T.copy(tile[0:32, 0:16], B[by * block:by * block + 64, bx * block:bx * block + 64])
    return main
'''

# What each kernel is given beyond what its file gives: the quick-start's sizes come from its script's tensors, the
# GEMM example's tiles from its main() (its sizes are set smaller here), the elementwise example's every argument
# from the call in its main(); the RMSNorm's sizes are given nowhere in its file.
GIVEN = {
    "quickstart": (QUICKSTART, {}),
    "gemm_example": (GEMM_EXAMPLE, {"M": 256, "N": 256, "K": 256}),
    "elementwise": (ELEMENTWISE, {}),
    "rmsnorm": (RMSNORM, {"M": 64, "N": 1024}),
}


def cli(*args, timeout=300):
    return subprocess.run([sys.executable, "-m", "playground", *args], cwd=ROOT, capture_output=True, text=True,
                          timeout=timeout)


def cli_json(*args, timeout=300) -> tuple[int, dict]:
    out = cli(*args, "--json", timeout=timeout)
    try:
        return out.returncode, json.loads(out.stdout)
    except ValueError:
        raise AssertionError(f"no JSON on stdout:\n{out.stdout[-2000:]}\n{out.stderr[-3000:]}") from None


def sets(params: dict) -> list[str]:
    return sum([["--set", f"{k}={v}"] for k, v in params.items()], [])


def write(tmp_path, text: str, name: str = "kernel.py"):
    path = tmp_path / name
    path.write_text(text)
    return path


def line_of(source: str, needle: str) -> int:
    return next(i for i, text in enumerate(source.splitlines(), 1) if needle in text)


# -- reading a file: the forms, the parameters -------------------------------------------------------------------
def test_the_readme_quick_start_takes_its_sizes_from_the_tensors_its_script_makes(tmp_path):
    """M, N, K are T.const: the script at the bottom (`M = N = K = 1024`, `a = torch.randn((M, K))`,
    `matmul_relu(a, b)`) gives them, read from the text (it is not run: it needs a GPU); the block sizes are the
    function's defaults, and tile values by how the kernel uses them."""
    from playground.engine.kernel import loader
    k = loader.load(str(write(tmp_path, QUICKSTART)))
    d = k.describe()
    params = {p["name"]: p for p in d["parameters"]}
    assert list(params) == ["block_M", "block_N", "block_K", "M", "N", "K"], "tensors A and B are not parameters"
    assert params["block_M"]["default"] == 128 and params["block_M"]["kind"] == "int"
    assert params["block_M"]["origin"] == "default" and params["block_M"]["use"] == "tile"
    assert d["required"] == [] and params["M"]["source"] == "T.const"
    call = line_of(QUICKSTART, "c = matmul_relu(a, b)")
    assert {n: params[n]["default"] for n in "MNK"} == {"M": 1024, "N": 1024, "K": 1024}
    assert params["M"]["origin"] == "file" and f"line {call}" in params["M"]["from"]
    assert d["from_file"]["K"] == {"value": 1024, "from": params["K"]["from"]}
    assert d["problem"] == ["M", "N", "K"] and k.tile_names == ["block_M", "block_N", "block_K"]
    assert d["verified"] is False and "reference" in d["verification_note"]
    # the script at the bottom needs a GPU; on this machine it stops, and that is a warning, not an error
    assert d["warnings"] and d["warnings"][0]["line"] == line_of(QUICKSTART, 'device="cuda"')
    config = k.resolve({})
    assert config.problem == {"M": 1024, "N": 1024, "K": 1024} and config.tile["block_M"] == 128


def test_a_tensor_of_another_shape_in_the_script_gives_its_own_sizes(tmp_path):
    from playground.engine.kernel import loader
    text = QUICKSTART_KERNEL_ONLY + ("a = torch.randn(512, 256).cuda().half()\n"
                                     "b = torch.empty((256, 384), dtype=torch.float16)\nc = matmul_relu(a, b)\n")
    k = loader.load(str(write(tmp_path, text)))
    assert k.resolve({}).problem == {"M": 512, "N": 384, "K": 256}


def test_what_no_place_in_the_file_sets_is_asked_for(tmp_path):
    from playground.engine.kernel import loader
    from playground.engine.errors import StageError
    k = loader.load(str(write(tmp_path, QUICKSTART_KERNEL_ONLY)))
    assert k.describe()["required"] == ["M", "N", "K"] and k.describe()["from_file"] == {}
    with pytest.raises(StageError) as err:
        k.resolve({"M": 256})
    assert err.value.stage == "parameters" and "N, K" in err.value.message and "--set N=…" in err.value.message


def test_dtype_arguments_are_choices_and_block_sizes_are_tile_values_by_their_use(tmp_path):
    """examples/gemm: matmul(A, B, block_M, block_N, block_K, dtype=...) with no defaults for the blocks; its main()
    compiles it with M=N=K=1024 and 128, 128, 32. The blocks are tile values (grid divisors, shared tiles), never
    problem sizes, whatever their place in the signature."""
    from playground.engine.kernel import loader
    from playground.engine.errors import StageError
    k = loader.load(str(write(tmp_path, GEMM_EXAMPLE)))
    d = k.describe()
    params = {p["name"]: p for p in d["parameters"]}
    assert params["dtype"]["kind"] == "dtype" and params["dtype"]["default"] == "float16"
    assert {"float16", "bfloat16", "float32"} <= set(params["dtype"]["choices"])
    assert d["problem"] == ["M", "N", "K"] and {"block_M", "block_N", "block_K"} <= set(k.tile_names)
    assert d["required"] == [] and d["warnings"] == [], "main() under `if __name__ == \"__main__\":` is not run"
    main_call = line_of(GEMM_EXAMPLE, "matmul.compile(")
    assert params["block_M"]["default"] == 128 and params["block_K"]["default"] == 32
    assert params["block_M"]["from"] == f"the call of the kernel in main(), line {main_call}"
    config = k.resolve({"M": 256, "N": 256, "K": 256, "dtype": "bfloat16"})
    assert config.dtype == "bfloat16" and config.problem["M"] == 256
    assert config.to_json()["picked_by"] == "file" and "from the file" in config.why()
    mine = k.resolve({"M": 256, "N": 256, "K": 256, "block_M": "64"}).to_json()
    assert mine["picked_by"] == "user" and mine["set_by_user"] == ["block_M"] and mine["tile"]["block_M"] == 64
    assert mine["why"] == "block_M set by you; the rest from the file (the values its own code gives)"
    no_main = GEMM_EXAMPLE[:GEMM_EXAMPLE.index("def main():")]
    bare = loader.load(str(write(tmp_path, no_main, "bare.py")))
    assert bare.describe()["required"] == ["block_M", "block_N", "block_K", "M", "N", "K"]
    assert {"block_M", "block_N", "block_K"} <= set(bare.tile_names)
    with pytest.raises(StageError) as err:
        bare.resolve({"M": 256, "N": 256, "K": 256})
    assert err.value.stage == "parameters"
    assert all(n in err.value.message for n in ("block_M", "block_N", "block_K"))


def test_lazy_jit_keeps_out_idx_and_pass_configs_and_infers_inputs_and_bytes(tmp_path):
    from playground.engine.kernel import loader
    from playground.engine.compile import make_prim_func
    k = loader.load(str(write(tmp_path, RMSNORM)))
    config = k.resolve({"M": 64, "N": 1024})
    func = make_prim_func(k, config)
    assert dict(func.attrs["tilelang_pass_configs"])["tl.disable_tma_lower"], "the decorator's pass_configs"
    assert list(func.attrs["tilelang_compile_flags"]) == ["-O3"], "and its compile_flags"
    assert k.out_idx == [-1] and k.output_positions(func) == [1]
    assert k.bytes_moved(config) == 2 * 64 * 1024 * 4 and k.flops(config) is None
    assert k.describe()["verified"] is True and k.check_problems({"M": 64, "N": 1024}) == [
        {"M": 33, "N": 1024}, {"M": 64, "N": 1024}]


def test_eager_outputs_from_t_empty_are_the_outputs(tmp_path):
    from playground.engine.kernel import loader
    from playground.engine.compile import make_prim_func
    k = loader.load(str(write(tmp_path, QUICKSTART)))
    func = make_prim_func(k, k.resolve({"M": 128, "N": 64, "K": 32}))
    assert "tilelang_out_idx" not in func.attrs, "the compiled kernel takes its outputs, poisoned, as arguments"
    assert k.output_positions(func) == [2]
    shapes = [[int(s) for s in func.buffer_map[p].shape] for p in func.params if p in func.buffer_map]
    assert shapes == [[128, 32], [32, 64], [128, 64]]


def test_autotune_configs_are_the_tuning_space_and_the_first_is_the_default(tmp_path):
    from playground.engine.kernel import loader
    k = loader.load(str(write(tmp_path, AUTOTUNED)))
    assert k.tune_configs() == [{"block": 256, "threads": 128}, {"block": 512, "threads": 128},
                                {"block": 512, "threads": 256}]
    assert k.space == {"block": [256, 512], "threads": [128, 256]}
    assert k.resolve({"N": 4096}).tile == {"block": 256, "threads": 128}
    from playground.engine.tune import candidates
    tiles = [c.tile for c in candidates(k, k.resolve({"N": 4096}))]
    assert len(tiles) == 3 and {"block": 256, "threads": 256} not in tiles, "the configs, not their product"


def test_a_module_level_prim_func_has_no_parameters(tmp_path):
    from playground.engine.kernel import loader
    k = loader.load(str(write(tmp_path, FIXED)))
    assert k.describe()["parameters"] == [] and k.resolve({}).problem == {}


def test_describe_of_a_file_with_several_kernels_lists_them_and_a_compile_asks_for_one(tmp_path):
    path = write(tmp_path, TWO_KERNELS)
    code, result = cli_json("describe", str(path))
    assert code == 0 and result["ok"] and result["entry_needed"] is True
    assert [(e["name"], e["line"], e["parameters"]) for e in result["entries"]] == [
        ("add_one", line_of(TWO_KERNELS, "@tilelang.jit"), ["N", "block"]),
        ("add_two", line_of(TWO_KERNELS, "def add_two"), ["N", "block"])]
    assert "--set entry=add_one" in result["warnings"][0]["message"]
    code, result = cli_json("compile", str(path), "--set", "N=4096")
    assert code == 1 and result["error"]["stage"] == "parameters"
    assert "add_one (line" in result["error"]["message"] and "(--set entry=add_one)" in result["error"]["message"]
    code, result = cli_json("describe", str(path), "--set", "entry=add_two")
    assert code == 0 and result["name"] == "add_two" and result["form"] == "factory" and not result["entry_needed"]
    assert [e["name"] for e in result["entries"]] == ["add_one", "add_two"]


def test_of_several_kernels_the_one_the_files_own_script_runs_is_taken_whatever_the_files_name(tmp_path):
    """TileLang's examples/norm/rms_norm.py defines rms_norm_splitk and rms_norm, and its __main__ block compiles
    rms_norm: sent as text (written as kernel.py), it is that one, at the sizes the block gives."""
    from playground.engine.kernel import loader
    text = TWO_KERNELS + '\n\nif __name__ == "__main__":\n    N = 8192\n    kernel = add_two(N, block=128)\n'
    k = loader.load("", text, tmp_path)
    assert k.name == "add_two" and k.describe()["picked"] == "the file's own code calls it first"
    assert k.resolve({}).problem == {"N": 8192} and k.resolve({}).tile == {"block": 128}
    assert loader.load("", text, tmp_path, entry="add_one").resolve({}).problem == {"N": 8192}, \
        "a constant of the script named like a size the call does not give"


CAUSAL = '''import argparse
import tilelang
import tilelang.language as T


@tilelang.jit(out_idx=[-1])
def masked(block_M, seq_len, is_causal, threads=128):
    @T.prim_func
    def main(A: T.Tensor((seq_len, seq_len), "float32"), B: T.Tensor((seq_len, seq_len), "float32")):
        with T.Kernel(T.ceildiv(seq_len, block_M), threads=threads) as bx:
            for i, j in T.Parallel(block_M, seq_len):
                if is_causal:
                    B[bx * block_M + i, j] = T.if_then_else(j <= bx * block_M + i, A[bx * block_M + i, j], 0.0)
                else:
                    B[bx * block_M + i, j] = A[bx * block_M + i, j]
    return main


def main(seq_len=512, is_causal=False, tune=False):
    if not tune:
        kernel = masked(64, seq_len, is_causal)
    else:
        kernel = masked(128, seq_len, is_causal, threads=256)


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--seq-len", type=int, default=1024)
    parser.add_argument("--is_causal", action="store_true")
    parser.add_argument("--tune", action="store_true")
    args = parser.parse_args()
    main(args.seq_len, args.is_causal, args.tune)
'''


def test_the_main_block_is_followed_through_argparse_into_main_and_the_branch_it_takes(tmp_path):
    """TileLang's examples write `main(args.seq_len, ...)` under __main__, argparse's defaults standing for the
    values; main() calls the kernel in `if not tune:`. Read, not run: 1024 (argparse's, not main()'s 512), 64 (the
    branch taken), is_causal False."""
    from playground.engine.kernel import loader
    k = loader.load(str(write(tmp_path, CAUSAL)))
    params = {p.name: p for p in k.parameters}
    assert {n: p.default for n, p in params.items()} == {"block_M": 64, "seq_len": 1024, "is_causal": False,
                                                          "threads": 128}
    assert params["block_M"].where == f"the call of the kernel in main(), line {line_of(CAUSAL, 'masked(64')}"
    assert k.problem_names == ["seq_len"] and k.tile_names == ["block_M", "is_causal", "threads"]


@pytest.mark.parametrize("given, taken", [("no", False), ("0", False), ("off", False), ("FALSE", False),
                                          ("yes", True), ("1", True), ("true", True), (True, True)])
def test_a_switch_used_as_a_test_takes_the_words_of_a_bool_and_says_which_it_took(tmp_path, given, taken):
    """`is_causal` has no default: its use (`if is_causal:`) makes it a switch, so `--set is_causal=no` is false
    (not the non-empty text "no", which was true) and `is_causal=0` is not "a problem size"."""
    from playground.engine.kernel import loader
    k = loader.load(str(write(tmp_path, CAUSAL)))
    assert {p.name: p.kind for p in k.parameters}["is_causal"] == "bool"
    config = k.resolve({"is_causal": given})
    assert config.tile["is_causal"] is taken
    notes = config.to_json().get("notes", [])
    if isinstance(given, bool):
        assert notes == []
    else:
        assert notes == [f"is_causal={given!r} taken as {str(taken).lower()}"]


def test_a_switch_refuses_what_is_not_a_bool_naming_what_it_takes(tmp_path):
    from playground.engine.kernel import loader
    from playground.engine.errors import StageError
    k = loader.load(str(write(tmp_path, CAUSAL)))
    for bad in ("maybe", "2", 3):
        with pytest.raises(StageError) as err:
            k.resolve({"is_causal": bad})
        assert err.value.stage == "parameters" and err.value.message == f"is_causal={bad!r} is not true or false"


def test_kernels_with_private_names_are_still_the_files_kernels(tmp_path):
    """TileLang's examples/norm/layernorm.py names its kernels _layernorm_fwd and _layernorm_bwd."""
    from playground.engine.kernel import loader
    text = TWO_KERNELS.replace("add_one", "_add_one").replace("add_two", "_add_two")
    k = loader.load(str(write(tmp_path, text)), entry="_add_two")
    assert [e["name"] for e in k.describe()["entries"]] == ["_add_one", "_add_two"] and k.name == "_add_two"


def test_a_missing_module_names_the_package_to_install_and_einops_is_installed(tmp_path):
    code, result = cli_json("describe", str(write(tmp_path, "import torch\nfrom sklearn import metrics\n" + FIXED)))
    err = result["error"]
    assert code == 1 and err["stage"] == "python" and err["line"] == 2
    assert "sklearn" in err["message"] and "pip install scikit-learn" in err["message"]
    code, result = cli_json("describe", str(write(tmp_path, "from einops import rearrange\n" + FIXED, "ein.py")))
    assert code == 0 and result["ok"], result.get("error")


def test_the_shipped_kernels_load_the_new_way_with_their_contracts():
    from playground.engine.kernel import loader
    for name in loader.builtin_names():
        k = loader.load(str(ROOT / "kernels" / f"{name}.py"))
        assert k.name == name and k.describe()["presets"] == loader.load(name).describe()["presets"]


# -- compiling from the command line (a path) and through the job layer (kernel "") -----------------------------
@pytest.mark.parametrize("name", list(GIVEN))
def test_kernel_compiles_from_the_command_line_given_a_path(name, tmp_path):
    text, params = GIVEN[name]
    code, result = cli_json("compile", str(write(tmp_path, text, f"{name}.py")), *sets(params), "--arch", "sm_90a")
    assert code == 0 and result["ok"], result.get("error")
    assert "__global__" in result["cuda"] and result["resources"]["threads"] >= 128
    assert result["line_map"] and any(result["line_map"]), "CUDA lines map back to the user's file"


@pytest.fixture(scope="module")
def jobs_server():
    from playground import jobs
    jobs.start()
    yield jobs
    jobs.shutdown()


@pytest.mark.parametrize("name", list(GIVEN))
def test_kernel_compiles_through_the_job_layer_as_kernel_empty(name, jobs_server):
    text, params = GIVEN[name]
    result = jobs_server.run_job("compile", "", text, params, arch="sm_90a", session=f"user-{name}")
    assert result["ok"], result.get("error")
    assert "__global__" in result["cuda"]


def test_describe_through_the_job_layer_reads_the_pasted_source(jobs_server):
    result = jobs_server.run_job("describe", "", QUICKSTART, {}, session="describe")
    assert result["ok"], result.get("error")
    assert result["required"] == [] and result["defaults"]["block_M"] == 128
    assert {n: v["value"] for n, v in result["from_file"].items()} == {"M": 1024, "N": 1024, "K": 1024}


def test_the_job_layer_refuses_a_path_for_a_kernel(jobs_server):
    result = jobs_server.run_job("compile", "/etc/hostname", None, {}, session="path")
    assert result["error"]["stage"] == "parameters" and "catalogue" in result["error"]["message"]


def test_a_helper_module_beside_the_kernel_imports(tmp_path):
    (tmp_path / "tile_sizes.py").write_text("BLOCK = 256\n")
    code, result = cli_json("compile", str(write(tmp_path, WITH_HELPER)), "--set", "N=4096", "--arch", "sm_90a")
    assert code == 0 and result["ok"], result.get("error")
    assert result["resources"]["grid"] == [16, 1, 1], "BLOCK from the helper module: 4096 / 256 blocks"


def test_a_multi_file_source_is_written_to_one_folder(tmp_path):
    from playground.engine.kernel import loader
    k = loader.load("", {"negate.py": WITH_HELPER, "tile_sizes.py": "BLOCK = 128\n"}, tmp_path)
    assert k.name == "negate" and (k.path.parent / "tile_sizes.py").exists()


@pytest.fixture(scope="module")
def api():
    """The page's API, served in-process, and a client of it."""
    import socket

    from gradio_client import Client

    from playground.ui import serve
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    demo, _, url = serve("127.0.0.1", port, prevent_thread_lock=True, quiet=True)
    try:
        yield Client(url, verbose=False)
    finally:
        demo.close()


def test_the_page_api_describes_and_compiles_a_kernel_of_ones_own(api):
    described = api.predict("", RMSNORM, {}, api_name="/describe")
    assert described["ok"] and described["required"] == ["M", "N"], described.get("error")
    assert [p["name"] for p in described["parameters"]] == ["M", "N", "block_M", "threads", "eps"]
    shipped = api.predict("vector_add", "", {}, api_name="/describe")
    assert shipped["ok"] and shipped["name"] == "vector_add" and "N" in shipped["problem"]
    compiled = api.predict("", RMSNORM, {"M": 64, "N": 1024, "arch": "sm_90a"}, api_name="/compile")
    assert compiled["ok"] and "__global__" in compiled["cuda"], compiled.get("error")
    refused = api.predict("", RMSNORM, {"M": 64}, api_name="/compile")
    assert '({"N": …})' in refused["error"]["message"] and "--set" not in refused["error"]["message"]


def test_the_api_describes_a_file_of_several_kernels_with_each_kernel_and_its_hint_is_a_key_of_params(api):
    """/describe of a file with several kernels answers ok, each kernel with its parameters and line (what the
    page's picker lists); a compile that names none is told to, as the API says it: {"entry": NAME}."""
    described = api.predict("", TWO_KERNELS, {}, api_name="/describe")
    assert described["ok"] and described["entry_needed"] is True, described.get("error")
    assert [(e["name"], e["parameters"], e["line"]) for e in described["entries"]] == [
        ("add_one", ["N", "block"], line_of(TWO_KERNELS, "@tilelang.jit")),
        ("add_two", ["N", "block"], line_of(TWO_KERNELS, "def add_two"))]
    refused = api.predict("", TWO_KERNELS, {"N": 4096, "arch": "sm_90a"}, api_name="/compile")
    message = refused["error"]["message"]
    assert refused["error"]["stage"] == "parameters" and '({"entry": "add_one"})' in message
    assert "--set" not in message and "add_two (line" in message
    picked = api.predict("", TWO_KERNELS, {"entry": "add_two"}, api_name="/describe")
    assert picked["ok"] and picked["name"] == "add_two" and picked["entry_needed"] is False
    compiled = api.predict("", TWO_KERNELS, {"N": 4096, "entry": "add_two", "arch": "sm_90a"}, api_name="/compile")
    assert compiled["ok"] and compiled["kernel"] == "add_two", compiled.get("error")


# -- bad input ----------------------------------------------------------------------------------------------------
def test_a_file_without_a_kernel_lists_the_accepted_forms(tmp_path):
    code, result = cli_json("describe", str(write(tmp_path, "import torch\n\nSIZE = 4\n")))
    assert code == 1 and result["error"]["stage"] == "definition"
    assert all(form in result["error"]["message"] for form in ("@tilelang.jit", "@T.prim_func"))


def test_a_source_over_the_size_cap_is_refused(tmp_path, jobs_server):
    big = FIXED + "#" * (300 * 1024) + "\n"
    code, result = cli_json("describe", str(write(tmp_path, big)))
    assert code == 1 and "KiB" in result["error"]["message"]
    assert jobs_server.run_job("compile", "", big, {}, session="big")["error"]["stage"] == "python"


def test_a_file_that_is_not_utf8_is_refused_with_its_line(tmp_path):
    path = tmp_path / "latin1.py"
    path.write_bytes(FIXED.encode() + "# café\n".encode("latin-1"))
    code, result = cli_json("compile", str(path))
    assert code == 1 and "UTF-8" in result["error"]["message"]
    assert result["error"]["line"] == len(FIXED.splitlines()) + 1


def test_a_missing_required_argument_is_named(tmp_path):
    code, result = cli_json("compile", str(write(tmp_path, QUICKSTART_KERNEL_ONLY)), "--set", "M=256")
    assert code == 1 and result["error"]["stage"] == "parameters"
    assert "N, K" in result["error"]["message"] and "M" not in result["error"]["message"].split("for ")[1][:2]


def test_an_argument_of_the_wrong_type_is_refused(tmp_path, jobs_server):
    code, result = cli_json("compile", str(write(tmp_path, QUICKSTART)), *sets({"M": "big", "N": 64, "K": 64}))
    assert code == 1 and result["error"]["stage"] == "parameters" and "M='big' is not a whole number" in result["error"]["message"]
    r = jobs_server.run_job("compile", "", RMSNORM, {"M": 64, "N": 1024, "block_M": 1.5}, session="types")
    assert r["error"]["stage"] == "parameters" and "block_M" in r["error"]["message"]


def test_an_unknown_parameter_lists_the_kernels_parameters(tmp_path):
    code, result = cli_json("describe", str(write(tmp_path, RMSNORM)), "--set", "nope=1")
    code, result = cli_json("compile", str(write(tmp_path, RMSNORM)), "--set", "nope=1")
    assert code == 1 and "nope" in result["error"]["message"] and "block_M" in result["error"]["message"]


# -- resources and TileLang's errors -------------------------------------------------------------------------
def test_shared_memory_over_the_targets_limit_is_a_resources_error_at_the_allocation(tmp_path):
    code, result = cli_json("compile", str(write(tmp_path, HUGE_TILES)), *sets({"M": 1024, "N": 1024, "K": 1024}),
                            "--arch", "sm_90a")
    err = result["error"]
    assert code == 1 and err["stage"] == "resources"
    assert "227 KiB" in err["message"] and "KiB of shared memory" in err["message"]
    assert err["line"] == line_of(HUGE_TILES, "A_shared = T.alloc_shared")


def test_limits_per_target_and_register_spills_warn():
    from playground.engine import limits
    from playground.engine.errors import StageError
    assert limits.shared_limit("sm_90a") == 227 * 1024 and limits.shared_limit("sm_80") == 163 * 1024
    assert limits.shared_limit("sm_86") == limits.shared_limit("sm_89") == 99 * 1024
    with pytest.raises(StageError) as err:
        limits.check({"shared_bytes": 120 * 1024, "threads": 256}, "sm_86")
    assert err.value.stage == "resources" and "99 KiB" in err.value.message
    assert limits.check({"shared_bytes": 120 * 1024, "threads": 256}, "sm_90a") == []
    with pytest.raises(StageError) as err:
        limits.check({"shared_bytes": 0, "threads": 2048}, "sm_90a")
    assert "2048 threads" in err.value.message and "1024" in err.value.message
    warnings = limits.check({"registers": 255, "spill_bytes": 96, "threads": 128}, "sm_90a")
    assert "255" in warnings[0]["message"] and "96 bytes" in warnings[0]["message"]


def test_a_t_copy_between_tiles_of_different_shapes_names_both_at_its_line(tmp_path):
    code, result = cli_json("compile", str(write(tmp_path, BAD_COPY)), *sets({"M": 256, "N": 256}),
                            "--arch", "sm_90a")
    err = result["error"]
    assert code == 1 and err["stage"] == "tilelang"
    assert "32×16" in err["message"] and "64×64" in err["message"]
    assert err["line"] == line_of(BAD_COPY, "T.copy(tile[0:32")


STORE = "        T.copy(C_local, C[by * block_M, bx * block_N])"
COPIES_THAT_CANNOT_MATCH = {
    # a fragment into a global slice half its width, and a global tile into a global tile of another shape:
    # TileLang compiled both without a word
    "fragment to a narrower global slice": (
        STORE.replace("C[by * block_M, bx * block_N]", "C[by * block_M:(by + 1) * block_M, bx * block_N:bx * block_N"
                                                         " + block_N // 2]"), "128×128 tile of C_local", "128×64 tile of C"),
    "global to global": (STORE + "\n        T.copy(A[by * block_M:(by + 1) * block_M, 0:block_K], "
                                 "C[by * block_M:(by + 1) * block_M, 0:block_N])", "128×32 tile of A", "128×128 tile of C"),
}


@pytest.mark.parametrize("case", list(COPIES_THAT_CANNOT_MATCH))
def test_a_copy_between_shapes_that_cannot_match_is_refused_at_its_line_before_it_compiles(tmp_path, case):
    from playground.engine.compile import build
    from playground.engine.errors import StageError
    from playground.engine.kernel import loader
    store, src, dst = COPIES_THAT_CANNOT_MATCH[case]
    text = QUICKSTART_KERNEL_ONLY.replace(STORE, store)
    k = loader.load(str(write(tmp_path, text)))
    with pytest.raises(StageError) as err:
        build(k, k.resolve({"M": 256, "N": 256, "K": 256}), "sm_90a")
    assert err.value.stage == "tilelang" and src in err.value.message and dst in err.value.message
    assert "before compiling" in err.value.message
    assert err.value.line == line_of(text, store.strip().splitlines()[-1])


# Two fragment mistakes TileLang reports from inside layout inference, at an allocation at best: a transpose in
# registers, and two fragments laid out by two T.gemm calls combined where their elements sit in different threads.
TRANSPOSE_IN_REGISTERS = """import tilelang.language as T


def transpose_add(M=128, N=128):
    @T.prim_func
    def main(A: T.Tensor((M, N), "float32"), B: T.Tensor((M, N), "float32")):
        with T.Kernel(1, threads=128) as bx:
            A_frag = T.alloc_fragment((M, N), "float32")
            T.copy(A, A_frag)
            for i, j in T.Parallel(M, N):
                A_frag[i, j] = A_frag[i, j] + A_frag[j, i]
            T.copy(A_frag, B)
    return main
"""
TWO_GEMM_LAYOUTS = """import tilelang.language as T


def two_products(M=128, N=128):
    @T.prim_func
    def main(A: T.Tensor((M, N), "float16"), B: T.Tensor((N, M), "float16"), C: T.Tensor((M, M), "float32")):
        with T.Kernel(1, threads=128) as bx:
            A_s = T.alloc_shared((M, N), "float16")
            B_s = T.alloc_shared((N, M), "float16")
            C_frag = T.alloc_fragment((M, M), "float32")
            D_frag = T.alloc_fragment((M, M), "float32")
            T.copy(A, A_s)
            T.copy(B, B_s)
            T.gemm(A_s, B_s, C_frag, clear_accum=True)
            T.gemm(A_s, B_s, D_frag, clear_accum=True)
            for i, j in T.Parallel(M, M):
                C_frag[i, j] = C_frag[i, j] + D_frag[j, i]
            T.copy(C_frag, C)
    return main
"""


@pytest.mark.parametrize("text,names,loop_line", [
    (TRANSPOSE_IN_REGISTERS, ["A_frag[j, i]", "A_frag[i, j]"], "A_frag[i, j] = A_frag[i, j] + A_frag[j, i]"),
    (TWO_GEMM_LAYOUTS, ["D_frag", "C_frag"], "C_frag[i, j] = C_frag[i, j] + D_frag[j, i]"),
], ids=["one fragment indexed two ways", "two fragments laid out by two gemms"])
def test_a_fragment_layout_conflict_says_why_and_what_to_do_at_the_loops_line(tmp_path, text, names, loop_line):
    from playground.engine.compile import build
    from playground.engine.errors import StageError
    from playground.engine.kernel import loader
    k = loader.load(str(write(tmp_path, text)))
    with pytest.raises(StageError) as raised:
        build(k, k.resolve({}), "sm_90a")
    err = raised.value
    assert err.stage == "tilelang", err.message
    assert all(name in err.message for name in names), err.message
    assert "T.Parallel" in err.message and "shared memory" in err.message, err.message
    assert err.line == line_of(text, loop_line), (err.line, err.message)


def test_tvms_shape_check_of_a_copy_is_said_as_the_copy_and_its_two_shapes_at_its_line(tmp_path):
    """A fragment copied into a shared tile half its width failed inside TVM ("StructuralEqual check failed, caused
    by lhs at <root>[1].value"): now the copy, its two buffers and their shapes, at the copy's line."""
    from playground.engine.compile import make_prim_func
    from playground.engine.errors import StageError
    from playground.engine.kernel import loader
    text = QUICKSTART_KERNEL_ONLY.replace(STORE, "        C_shared = T.alloc_shared((block_M, block_N // 2), T.float16)\n"
                                                 "        T.copy(C_local, C_shared)\n"
                                                 "        T.copy(C_shared, C[by * block_M, bx * block_N])")
    k = loader.load(str(write(tmp_path, text)))
    with pytest.raises(StageError) as err:
        make_prim_func(k, k.resolve({"M": 256, "N": 256, "K": 256}))
    assert err.value.stage == "tilelang" and err.value.line == line_of(text, "T.copy(C_local, C_shared)")
    assert err.value.message == ("T.copy from C_local (128×128) into C_shared (128×64): the source and the "
                                 "destination must have the same shape")
    assert "StructuralEqual" in err.value.log, "TVM's own words stay in the log"


def test_a_hopper_schedule_for_ampere_gets_the_hint():
    code, result = cli_json("compile", "gemm", *sets({"M": 256, "N": 256, "K": 256, "block_N": 128, "block_K": 32,
                                                      "threads": 128}), "--arch", "sm_80")
    assert code == 1 and "needs Hopper (sm_90a) or warp_specialized=False" in result["error"]["message"]


def test_verification_failure_names_the_check_shape_and_the_criterion():
    import torch
    from playground.engine.measure import verification_failure
    from playground.engine.verify import compare
    ref = torch.randn(64, 64)
    wrong = ref.clone()
    wrong[:, 1:] = ref[:, :-1]
    v = {**compare(wrong.half(), ref, "float16"), "shape": {"M": 33}, "label": "33"}
    err = verification_failure([v])
    assert "33" in err.message and '{"M": 33}' in err.message
    assert "relative error" in err.message and "outside atol" in err.message and "index [0, 1]" in err.message


# -- unusual but valid files ---------------------------------------------------------------------------------------
DYNAMIC = '''import tilelang
import tilelang.language as T


@tilelang.jit(out_idx=[-1])
def dyn_add(N: int = 1024, block: int = 256):
    M = T.symbolic("M")

    @T.prim_func
    def main(A: T.Tensor((M, N), "float32"), B: T.Tensor((M, N), "float32"), C: T.Tensor((M, N), "float32")):
        with T.Kernel(T.ceildiv(M, block), threads=128) as bx:
            for i, j in T.Parallel(block, N):
                if bx * block + i < M:
                    C[bx * block + i, j] = A[bx * block + i, j] + B[bx * block + i, j]
    return main


def reference(a, b):
    return a + b
'''

SUM_DIFF = '''import tilelang
import tilelang.language as T


@tilelang.jit
def sum_diff(M, N, *, block: int = 32, dtype: str = "float16"):
    @T.prim_func
    def main(A: T.Tensor((M, N), dtype), B: T.Tensor((M, N), dtype),
             S: T.Tensor((M, N), dtype), D: T.Tensor((M, N), dtype)):
        with T.Kernel(T.ceildiv(N, block), T.ceildiv(M, block), threads=128) as (bx, by):
            for i, j in T.Parallel(block, block):
                y, x = by * block + i, bx * block + j
                S[y, x] = A[y, x] + B[y, x]
                D[y, x] = A[y, x] - B[y, x]
    return main


def reference(a, b):
    return a + b, a - b
'''

DECLARED = '''import numpy as np
import tilelang
import tilelang.language as T


@tilelang.jit(out_idx=[-1])
def scale(M, N, block_M: int = 32, block_N: int = 64, relu: bool = False):
    @T.prim_func
    def main(A: T.Tensor((M, N), "float32"), C: T.Tensor((M, N), "float32")):
        with T.Kernel(T.ceildiv(N, block_N), T.ceildiv(M, block_M), threads=128) as (bx, by):
            for i, j in T.Parallel(block_M, block_N):
                C[by * block_M + i, bx * block_N + j] = A[by * block_M + i, bx * block_N + j] * 2
    return main


SPACE = {
    "block_M": [32, 64],
    "block_N": [64, 128],
}
OPTIONS = {"relu": [False, True]}
PRESETS = {
    "1024²": dict(M=1024, N=1024),
    "tall": dict(M=4096, N=np.int64(256)),
}
CHECK_SHAPES = [dict(M=33)]
'''


def test_a_dynamic_shape_is_a_size_to_make_inputs_of_and_compiles(tmp_path):
    """T.symbolic("M"): the kernel compiles for any M, so M is no argument of the function, but the page asks for it
    (inputs are made at one size); the grid of the compiled kernel is given at that size."""
    import torch
    from playground.engine.kernel import loader
    from playground.engine.compile import build, make_prim_func
    from playground.engine.kernel import static_shape
    k = loader.load(str(write(tmp_path, DYNAMIC)))
    params = {p["name"]: p for p in k.describe()["parameters"]}
    assert params["M"]["required"] and params["M"]["source"] == "T.symbolic"
    assert k.problem_names == ["N", "M"], "N, a tensor's shape, is a size too (its default from the function)"
    config = k.resolve({"M": 1000})
    assert "M" not in k.call_kwargs(config), "not an argument of dyn_add"
    func = make_prim_func(k, config)
    inputs = k.make_inputs(k.run_params(config), func, "cpu", torch.Generator().manual_seed(0))
    assert [tuple(t.shape) for t in inputs] == [(1000, 1024), (1000, 1024)]
    output = [func.buffer_map[p] for p in func.params][k.output_positions(func)[0]]
    assert static_shape(output, k.run_params(config)) == [1000, 1024]
    assert k.bytes_moved(config) == 3 * 1000 * 1024 * 4
    result = build(k, config, "sm_90a").result
    assert result["ok"] and result["resources"]["grid"] == [4, 1, 1] and result["resources"]["threads"] == 128


def test_integer_outputs_must_equal_the_reference_exactly():
    """One wrong int among 4096 is a relative error of ~1e-3: under any float threshold, yet a wrong kernel."""
    import torch
    from playground.engine.verify import compare
    ref = torch.arange(4096, dtype=torch.int32)
    wrong = ref.clone()
    wrong[7] += 1
    v = compare(wrong, ref, "int32")
    assert not v["passed"] and v["criterion"] == "exact" and v["mismatches"] == 1
    assert "1 of 4096" in v["message"] and "index [7]" in v["message"] and "exactly" in v["message"]
    assert compare(ref.clone(), ref, "int32")["passed"] and compare(ref.float(), ref, "float32")["passed"]


def test_two_outputs_come_from_the_references_tuple_and_keyword_only_tiles_are_parameters(tmp_path):
    from playground.engine.kernel import loader
    from playground.engine.compile import make_prim_func
    k = loader.load(str(write(tmp_path, SUM_DIFF)))
    assert k.problem_names == ["M", "N"] and k.tile_names == ["block"] and k.dtypes[0] == "float16"
    func = make_prim_func(k, k.resolve({"M": 64, "N": 64, "block": "16"}))
    assert k.output_positions(func) == [2, 3], "reference(a, b) takes two inputs: the other two buffers are outputs"


def test_numpy_numbers_in_the_declarations_are_plain_numbers(tmp_path):
    """A preset's np.int64 reached the compile cache's JSON key and failed there as an internal error."""
    from playground.engine.kernel import loader
    k = loader.load(str(write(tmp_path, DECLARED)))
    config = k.resolve({"preset": "tall"})
    assert type(config.problem["N"]) is int and json.dumps(config.to_json()) and json.dumps(k.describe())


@pytest.mark.parametrize("old, new, message, needle", [
    ('"block_N": [64, 128]', '"block_K": [64, 128]', "SPACE names 'block_K', which scale does not take",
     '"block_K"'),
    ('OPTIONS = {"relu": [False, True]}', 'OPTIONS = {"gelu": [False, True]}', "OPTIONS names 'gelu'", "OPTIONS"),
    ('dict(M=4096, N=np.int64(256))', 'dict(M=4096, K=256)', "preset 'tall' gives 'K', which scale does not take",
     '"tall"'),
    ('dict(M=4096, N=np.int64(256))', 'dict(M=4096)', "preset 'tall' gives no N, and the source has no default",
     '"tall"'),
    ('CHECK_SHAPES = [dict(M=33)]', 'CHECK_SHAPES = [dict(m=33)]', "CHECK_SHAPES gives 'm'", "CHECK_SHAPES"),
    ('SPACE = {', 'SPACE = 64\nX = {', "SPACE must be a dict of tile parameter name", "SPACE"),
])
def test_declarations_naming_what_the_kernel_lacks_are_refused_at_their_line(tmp_path, old, new, message, needle):
    """A typo in SPACE (block_K for block_N) was dropped without a word: never tuned, never shown; a preset without a
    size the source needs ran on whatever size the page held before."""
    from playground.engine.kernel import loader
    from playground.engine.errors import StageError
    text = DECLARED.replace(old, new)
    with pytest.raises(StageError) as err:
        loader.load(str(write(tmp_path, text)))
    assert err.value.stage == "definition" and message in err.value.message
    assert err.value.line == line_of(text, needle)


def test_a_files_other_kernel_is_not_refused_for_the_declarations_of_the_kernel_named_like_the_file():
    """kernels/gemm.py's OPTIONS (warp_specialized) are gemm's: picking gemm_pipelined of that file still loads."""
    from playground.engine.kernel import loader
    k = loader.load(str(ROOT / "kernels" / "gemm.py"), entry="gemm_pipelined")
    assert k.name == "gemm_pipelined" and "warp_specialized" not in k.tile_names


# -- on the GPU ------------------------------------------------------------------------------------------------
@pytest.mark.gpu
def test_a_user_kernel_with_a_reference_verifies_and_is_timed_against_its_baselines(tmp_path):
    code, result = cli_json("run", str(write(tmp_path, RMSNORM)), *sets({"M": 4096, "N": 1024}), timeout=600)
    assert code == 0 and result["ok"], result.get("error")
    assert result["verified"] is True and all(v["passed"] and v["verified"] for v in result["verification"])
    assert [v["label"] for v in result["verification"]] == ["33×1024", "4096×1024"], "the ragged check shape too"
    assert result["timing"]["median_ms"] > 0 and "torch" in result["baselines"]
    print(f"\nuser RMSNorm 4096×1024: {result['timing']['median_ms']:.4f} ms, {result['gbps']:.0f} GB/s; torch "
          f"{result['baselines']['torch']['median_ms']:.4f} ms")


@pytest.mark.gpu
def test_the_same_kernel_with_a_wrong_index_fails_naming_the_criterion_and_index(tmp_path):
    code, result = cli_json("run", str(write(tmp_path, RMSNORM_WRONG_INDEX)), *sets({"M": 4096, "N": 1024}),
                            timeout=600)
    err = result["error"]
    assert code == 1 and err["stage"] == "verify" and "timing" not in result
    assert "relative error" in err["message"] and "outside atol" in err["message"] and "index [0, " in err["message"]
    assert not re.search(r"(?<!\d)0 of \d", err["message"]), "a wrong result that counts 0 elements off"
    print(f"\nwrong index: {err['message']}")


@pytest.mark.gpu
def test_a_kernel_without_a_reference_is_timed_and_marked_not_verified(tmp_path):
    code, result = cli_json("run", str(write(tmp_path, RMSNORM_NO_REFERENCE)), *sets({"M": 4096, "N": 1024}),
                            timeout=600)
    assert code == 0 and result["ok"], result.get("error")
    assert result["verified"] is False and "not verified" in result["verification_note"]
    assert all(v["verified"] is False for v in result["verification"]) and result["timing"]["median_ms"] > 0
    print(f"\nno reference: {result['timing']['median_ms']:.4f} ms, {result['verification_note']}")


@pytest.mark.gpu
def test_tune_measures_the_autotune_configs(tmp_path):
    code, result = cli_json("tune", str(write(tmp_path, AUTOTUNED)), "--set", "N=1048576", timeout=600)
    assert code == 0 and result["ok"], result.get("error")
    tried = [{k: row[k] for k in ("block", "threads")} for row in result["table"]]
    assert sorted(tried, key=str) == sorted([{"block": 256, "threads": 128}, {"block": 512, "threads": 128},
                                             {"block": 512, "threads": 256}], key=str)
    assert all(row["verified"] for row in result["table"]) and result["best"]["tile"] in tried


TOP_LEVEL_SYMBOLIC = '''import numpy as np
import tilelang
import tilelang.language as T

M = T.symbolic("M")
SPACE = {"block": np.arange(128, 257, 128)}


@tilelang.jit(out_idx=[-1])
def rows_add(N: int = 256, block: int = 128):
    @T.prim_func
    def main(A: T.Tensor((M, N), "float32"), C: T.Tensor((M, N), "float32")):
        with T.Kernel(T.ceildiv(M, block), threads=128) as bx:
            for i, j in T.Parallel(block, N):
                if bx * block + i < M:
                    C[bx * block + i, j] = A[bx * block + i, j] + 1
    return main


@tilelang.jit(out_idx=[-1])
def fixed_add(N: int = 256, block: int = 128):
    @T.prim_func
    def main(A: T.Tensor((N,), "float32"), C: T.Tensor((N,), "float32")):
        with T.Kernel(T.ceildiv(N, block), threads=128) as bx:
            for i in T.Parallel(block):
                C[bx * block + i] = A[bx * block + i] + 1
    return main


def reference(a):
    return a + 1
'''


def test_a_top_level_dynamic_size_belongs_to_the_kernels_that_use_it_and_numpy_ranges_are_a_space(tmp_path):
    from playground.engine.kernel import loader
    path = write(tmp_path, TOP_LEVEL_SYMBOLIC)
    uses = loader.load(str(path), entry="rows_add")
    assert "M" in uses.problem_names and uses.space == {"block": [128, 256]}
    other = loader.load(str(path), entry="fixed_add")
    assert "M" not in other.problem_names  # it would be asked for a size it has no use for
    other.resolve({})


def test_a_top_level_dynamic_size_kept_under_another_python_name_is_still_asked_for(tmp_path):
    # `rows = T.symbolic("M")`, used as `rows`: the size is M, and without it the inputs cannot be made.
    from playground.engine.kernel import loader
    source = (TOP_LEVEL_SYMBOLIC.replace('M = T.symbolic("M")', 'rows = T.symbolic("M")')
              .replace("(M, N)", "(rows, N)").replace("ceildiv(M,", "ceildiv(rows,").replace("< M:", "< rows:"))
    assert re.findall(r"\bM\b", source) == ["M"]  # only in T.symbolic("M")
    path = write(tmp_path, source)
    uses = loader.load(str(path), entry="rows_add")
    assert "M" in uses.problem_names
    assert uses.resolve({"M": 8}).problem["M"] == 8
    assert "M" not in loader.load(str(path), entry="fixed_add").problem_names


def test_exact_outputs_are_compared_as_integers_beyond_what_a_double_holds():
    import torch
    from playground.engine.verify import compare
    ref = torch.tensor([2 ** 53], dtype=torch.int64)
    assert not compare(ref + 1, ref, "int64")["passed"]  # equal once both are float64


def test_reading_a_files_values_is_bounded_and_never_an_error():
    """The values are read from the text, never run: a file whose functions call each other ten times over is read
    in bounded time, and one this reading cannot follow (or cannot even parse) gives no values, not an error."""
    import time
    from playground.engine.kernel import static
    text = "import tilelang\n\n@tilelang.jit\ndef k(N, block=64):\n    pass\n"
    for i in range(8):
        text += f"def f{i}():\n" + f"    f{i + 1}()\n" * 10 + "    k(N=4096)\n"
    start = time.monotonic()
    found = static.file_values(text, {"k": ["N", "block"]}, "k").found
    assert time.monotonic() - start < 5 and found["N"].value == 4096
    assert static.file_values("def (:", {"k": ["N"]}, "k").found == {}
    assert static.file_values("for i in range():\n    k(N=3)\n", {"k": ["N"]}, "k").found["N"].value == 3
