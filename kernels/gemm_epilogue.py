"""GEMM with a fused epilogue: D = act(A @ B + bias), bias a vector of N, act relu or gelu.

A linear layer followed by its activation. Done as three PyTorch calls, the M × N result goes to memory and back
twice more (once for the bias, once for the activation); cuBLAS can add the bias in its own epilogue (F.linear),
which leaves one more trip for the activation. Here the whole GEMM is `gemm.py`'s: its warp-specialized persistent
schedule on Hopper (`warp_specialized_tiles`, in gemm_hopper.py), its T.Pipelined one elsewhere (`pipelined_k_loop`),
both imported. What is new is what happens to the accumulator before it is stored: while the block_M × block_N tile of
A @ B is still in registers, in fp32, each thread adds the bias of its columns and applies the activation to its
own elements; then the tile is rounded and written once. In the warp-specialized schedule the epilogue runs on the
consumer warpgroups while the producer warpgroup already loads the next tile's first steps, so it costs a few
instructions per element and no wait for memory.

gelu uses the tanh approximation, 0.5 x (1 + tanh(√(2/π) (x + 0.044715 x³))), as does the reference (written
below in a form the GPU computes faster).

Run it alone:  python kernels/gemm_epilogue.py   (checks it against PyTorch and times it against cuBLAS on a GPU)
"""
import functools
import math

import torch
import torch.nn.functional as F
import tilelang.language as T

LOG2E = 1.4426950408889634  # exp(x) = exp2(x · log2(e))


def gemm_epilogue(M=4096, N=4096, K=4096, dtype="float16",
                  block_M=128, block_N=256, block_K=64, num_stages=3, threads=256, swizzle_panel=8,
                  activation="relu", warp_specialized=True, num_sms=132):
    """The tile parameters are gemm.py's (`threads`: the threads that multiply; `num_sms`: blocks of the persistent
    schedule, one per SM, set by the playground to the GPU present)."""
    accum_dtype = "float32"
    if activation not in ("relu", "gelu"):
        raise ValueError(f"activation must be relu or gelu, not {activation!r}")

    def act(x):  # a Python function: TileLang inlines the expression it builds into the loops below
        if activation == "relu":
            return T.max(x, 0)
        # 0.5 x (1 + tanh(u)) is x · sigmoid(2u) = x / (1 + exp(-2u)): one exp2 and one reciprocal, both the GPU's
        # own fast instructions with fast math on, where tanhf is a dozen. It runs on the consumers between two
        # tiles' multiplies, so every instruction here is time the tensor cores wait. (exp(-2u) overflowing to inf
        # for very negative x gives x / inf = -0, as gelu's value there rounds to.)
        u = math.sqrt(2 / math.pi) * (x + 0.044715 * x * x * x)
        return x / (1 + T.exp2(u * (-2 * LOG2E)))

    # The GEMM is kernels/gemm.py's and gemm_hopper.py's (imported here, not at the top, so that `python
    # kernels/gemm_epilogue.py` finds the kernels package once its __main__ block has put it on the path).
    from kernels.gemm import pipelined_k_loop
    from kernels.gemm_hopper import warp_specialized_tiles

    # What each fp32 element of a finished tile becomes, in either schedule, given its column's bias (0 past N, in
    # a ragged last tile: those columns are never stored).
    def bias_and_act(value, bias):
        return act(value + bias)

    if warp_specialized:
        tiles = warp_specialized_tiles(M, N, K, dtype, block_M, block_N, block_K, num_stages, threads, swizzle_panel,
                                       num_sms, epilogue=bias_and_act)

        @T.prim_func
        def main_ws(A: T.Tensor((M, K), dtype), B: T.Tensor((K, N), dtype), Bias: T.Tensor((N,), dtype),
                    D: T.Tensor((M, N), dtype)):
            with T.Kernel(num_sms, threads=threads + 128) as block:
                T.annotate_pass_configs({"tl.enable_fast_math": True})  # exp2 and 1/x as ex2.approx, rcp.approx
                tiles(A, B, D, block, Bias)

        return main_ws

    k_loop = pipelined_k_loop(K, block_M, block_N, block_K, num_stages)

    @T.prim_func
    def main(A: T.Tensor((M, K), dtype), B: T.Tensor((K, N), dtype), Bias: T.Tensor((N,), dtype),
             D: T.Tensor((M, N), dtype)):
        with T.Kernel(T.ceildiv(N, block_N), T.ceildiv(M, block_M), threads=threads) as (bx, by):
            T.annotate_pass_configs({"tl.enable_fast_math": True})
            A_shared = T.alloc_shared((block_M, block_K), dtype)
            B_shared = T.alloc_shared((block_K, block_N), dtype)
            C_local = T.alloc_fragment((block_M, block_N), accum_dtype)
            D_shared = T.alloc_shared((block_M, block_N), dtype)  # the finished tile, for one TMA store

            T.use_swizzle(panel_size=swizzle_panel, enable=swizzle_panel > 0)

            k_loop(A, B, A_shared, B_shared, C_local, bx, by)  # the main loop: C_local = this tile of A @ B

            # The epilogue, on the fp32 accumulator in registers: each thread touches only the elements it holds.
            for i, j in T.Parallel(block_M, block_N):
                column = bx * block_N + j
                C_local[i, j] = bias_and_act(C_local[i, j], T.if_then_else(column < N, Bias[column], 0))
            T.copy(C_local, D_shared)  # rounded to dtype
            T.copy(D_shared, D[by * block_M, bx * block_N])  # one TMA store; out-of-range parts are not written

    return main


# ---- What the playground needs to know about this kernel -------------------------------------------------------
DTYPES = ["float16", "bfloat16"]

SPACE = {
    "block_M": [64, 128, 256],
    "block_N": [64, 128, 192, 256],
    "block_K": [32, 64],
    "num_stages": [2, 3, 4, 6, 8],
    "threads": [128, 256],
    "swizzle_panel": [0, 8, 16],
}

# activation is not tuned: a choice of what to compute, which the reference and the baselines take too.
# warp_specialized=False is gemm.py's T.Pipelined schedule (for rows TMA cannot load, and GPUs before Hopper).
OPTIONS = {"activation": ["relu", "gelu"], "warp_specialized": [True, False]}

PRESETS = {
    "4096³": dict(M=4096, N=4096, K=4096),
    "8192³": dict(M=8192, N=8192, K=8192),
    "8192×8192×1024 (skinny K)": dict(M=8192, N=8192, K=1024),
    "1000×1000×1000 (ragged)": dict(M=1000, N=1000, K=1000),
}

# gemm.py's tiles with their threads and the stage counts that fit (its TIED's unsplit tuples; a test keeps the two
# the same): of these, those a user leaves on auto follow those they set, so that a tile they pick keeps stages that
# fit it, and stages they pick keep a tile that holds them.
TIED = {("block_M", "block_N", "threads", "num_stages"): [
    (m, n, threads, stages) for m, n, threads, deepest in [(128, 256, 256, 3), (128, 192, 256, 4), (128, 128, 256, 6),
                                                          (64, 128, 128, 8)] for stages in range(deepest, 1, -1)]}


def shape_class(M, N, K):
    from kernels.gemm import shape_class as gemm_shape_class  # (imported here for the reason given in the factory)
    return gemm_shape_class(M, N, K)


def pick_config(M, N, K, num_sms=132):
    """gemm.py's rule, for the same reasons: this kernel's schedules are gemm.py's."""
    from kernels.gemm import pick_config as gemm_pick_config  # (imported here for the reason given in the factory)
    return gemm_pick_config(M, N, K, num_sms, split=False, multicast=False)  # (it has neither schedule)


CHECK_SHAPES = [dict(M=1024, N=1024, K=1024), dict(M=1000, N=1048, K=1000), dict(M=1000, N=1000, K=1000)]


def make_inputs(M, N, K, dtype, device, generator):
    # A is scaled by 1/√K so that A @ B + bias is of order 1, where relu and gelu bend: with plain randn inputs the
    # sums are of order √K, the activation is nearly the identity or zero, and a wrong one would pass the check.
    a = (torch.randn(M, K, device=device, generator=generator) / math.sqrt(K)).to(dtype)
    b = torch.randn(K, N, device=device, generator=generator).to(dtype)
    bias = torch.randn(N, device=device, generator=generator).to(dtype)
    return a, b, bias


def _act(activation):
    return torch.relu if activation == "relu" else (lambda x: F.gelu(x, approximate="tanh"))


def reference(a, b, bias, activation="relu"):
    return _act(activation)(a.float() @ b.float() + bias.float())


# `act` in a name is the run's activation (relu or gelu, the option `activation`): each baseline computes the same.
BASELINES = {
    # three kernels: cuBLAS GEMM, then the bias add and the activation, each a trip through memory
    "torch: act(a @ b + bias)": lambda a, b, bias, activation="relu": _act(activation)(a @ b + bias),
    # cuBLAS adds the bias in its own epilogue; F.linear wants the weight as (N, K): b.t() is a view, not a copy
    "torch: act(F.linear) (bias in cuBLAS)": lambda a, b, bias, activation="relu": _act(activation)(F.linear(a, b.t(), bias)),
}


@functools.cache
def _compiled(activation):
    # dynamic=False: a graph specialized to each shape, as a model compiled for its own sizes would be (after a
    # second shape torch.compile would otherwise switch to one graph for any size, and slower kernels).
    return torch.compile(lambda a, b, bias: _act(activation)(a @ b + bias), dynamic=False)


# Timed by the benchmark only (`python -m playground bench`), not in a student's run: torch.compile fuses the bias
# and the activation into one Triton kernel after cuBLAS's GEMM (two trips through memory instead of three), but the
# first call at each new shape compiles for tens of seconds.
BENCH_BASELINES = {
    "torch.compile: act(a @ b + bias)":
        lambda a, b, bias, activation="relu": _compiled(activation)(a, b, bias),
}


def flops(M, N, K):
    return 2 * M * N * K


def bytes_moved(M, N, K, dtype):
    size = 4 if dtype == "float32" else 2
    return size * (M * K + K * N + N + M * N)


if __name__ == "__main__":
    import sys
    from pathlib import Path
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    from playground.standalone import main
    main("gemm_epilogue")
