"""Tiled tensor-core GEMM: C = A @ B in fp16 or bf16, accumulated in fp32.

Each thread block owns one block_M × block_N tile of C. It walks along K in steps of block_K: copy a tile of A and a
tile of B from global memory into shared memory, multiply them on the tensor cores into a register accumulator, and
move on. `T.Pipelined` overlaps the copies of the next steps with the multiply of this one (num_stages tiles in
flight); on Hopper (sm_90a) TileLang turns the copies into TMA loads and the multiply into wgmma, with a producer
warpgroup feeding the consumers. At the end the accumulator is rounded to the output type and written once, through
shared memory so that the store too is one TMA bulk copy per tile.

Run it alone:  python kernels/gemm.py   (checks it against PyTorch and times it against cuBLAS on a GPU)
"""
import torch
import tilelang.language as T


def gemm(M=4096, N=4096, K=4096, dtype="float16",
         block_M=128, block_N=256, block_K=64, num_stages=3, threads=256, swizzle_panel=16):
    accum_dtype = "float32"

    @T.prim_func
    def main(A: T.Tensor((M, K), dtype), B: T.Tensor((K, N), dtype), C: T.Tensor((M, N), dtype)):
        # One block per output tile: bx walks the columns of C, by its rows.
        with T.Kernel(T.ceildiv(N, block_N), T.ceildiv(M, block_M), threads=threads) as (bx, by):
            A_shared = T.alloc_shared((block_M, block_K), dtype)
            B_shared = T.alloc_shared((block_K, block_N), dtype)
            C_local = T.alloc_fragment((block_M, block_N), accum_dtype)  # registers, spread over the threads
            C_shared = T.alloc_shared((block_M, block_N), dtype)  # the finished tile, for one bulk store

            # Neighbouring blocks share rows of A and columns of B: visiting the tiles in panels keeps them in L2.
            T.use_swizzle(panel_size=swizzle_panel, enable=swizzle_panel > 0)

            T.clear(C_local)
            for k in T.Pipelined(T.ceildiv(K, block_K), num_stages=num_stages):
                T.copy(A[by * block_M, k * block_K], A_shared)  # out-of-range rows and columns read as zero
                T.copy(B[k * block_K, bx * block_N], B_shared)
                # FullRow: each consumer warpgroup owns whole rows of the tile (64 × 256 each at the defaults),
                # the widest wgmma shape, so each instruction does the most work per operand fetched.
                T.gemm(A_shared, B_shared, C_local, policy=T.GemmWarpPolicy.FullRow)
            T.copy(C_local, C_shared)  # rounded to dtype
            T.copy(C_shared, C[by * block_M, bx * block_N])  # one TMA store; out-of-range parts are not written

    return main


# ---- What the playground needs to know about this kernel -------------------------------------------------------
DTYPES = ["float16", "bfloat16"]

# Tile parameters worth searching; the factory's defaults above are the shipped config, tuned on an H200
# (bench/README.md). 256-wide tiles in both M and N, or 4 stages of them, do not fit in shared memory.
SPACE = {
    "block_M": [64, 128, 256],
    "block_N": [64, 128, 256],
    "block_K": [32, 64],
    "num_stages": [2, 3, 4],
    "threads": [128, 256],
    "swizzle_panel": [0, 8, 16],
}

PRESETS = {
    "4096³": dict(M=4096, N=4096, K=4096),
    "8192³": dict(M=8192, N=8192, K=8192),
    "8192×8192×1024 (skinny K)": dict(M=8192, N=8192, K=1024),
    "2048³": dict(M=2048, N=2048, K=2048),
    "1000×1000×1000 (ragged)": dict(M=1000, N=1000, K=1000),
}

# Verification runs on these too, whatever size is being timed: one aligned, one ragged in every dimension.
CHECK_SHAPES = [dict(M=1024, N=1024, K=1024), dict(M=1000, N=1048, K=1000)]


def make_inputs(M, N, K, dtype, device, generator):
    a = torch.randn(M, K, device=device, generator=generator).to(dtype)
    b = torch.randn(K, N, device=device, generator=generator).to(dtype)
    return a, b


def reference(a, b):
    return a.float() @ b.float()


BASELINES = {"torch.matmul (cuBLAS)": lambda a, b: a @ b}


def flops(M, N, K):
    return 2 * M * N * K


def bytes_moved(M, N, K, dtype):
    size = 4 if dtype == "float32" else 2
    return size * (M * K + K * N + M * N)


if __name__ == "__main__":
    import sys
    from pathlib import Path
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    from playground.standalone import main
    main("gemm")
