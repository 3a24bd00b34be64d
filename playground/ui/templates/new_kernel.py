"""My kernel: C = ReLU(A @ B), one output tile per block. Edit it, then Compile (CUDA) or Run (checked and timed).

The function's arguments are the page's controls; `reference` below turns on verification.
"""
import torch
import tilelang
import tilelang.language as T


@tilelang.jit(out_idx=[-1])  # the last buffer, C, is the output
def gemm_relu(M: int = 1024, N: int = 1024, K: int = 1024, block_M: int = 128, block_N: int = 128,
              block_K: int = 32, num_stages: int = 2, threads: int = 128, dtype: str = "float16"):
    accum_dtype = "float32"

    @T.prim_func
    def main(A: T.Tensor((M, K), dtype), B: T.Tensor((K, N), dtype), C: T.Tensor((M, N), dtype)):
        with T.Kernel(T.ceildiv(N, block_N), T.ceildiv(M, block_M), threads=threads) as (bx, by):
            A_shared = T.alloc_shared((block_M, block_K), dtype)
            B_shared = T.alloc_shared((block_K, block_N), dtype)
            C_local = T.alloc_fragment((block_M, block_N), accum_dtype)
            T.clear(C_local)
            for k in T.Pipelined(T.ceildiv(K, block_K), num_stages=num_stages):
                T.copy(A[by * block_M, k * block_K], A_shared)
                T.copy(B[k * block_K, bx * block_N], B_shared)
                T.gemm(A_shared, B_shared, C_local)
            for i, j in T.Parallel(block_M, block_N):
                C_local[i, j] = T.max(C_local[i, j], 0)
            T.copy(C_local, C[by * block_M, bx * block_N])

    return main


def reference(A, B):
    """What C should be, in float32: the outputs are compared with it."""
    return torch.relu(A.float() @ B.float())


DTYPES = ["float16", "bfloat16"]
BASELINES = {"torch": lambda A, B: torch.relu(A @ B)}
PRESETS = {"1024³": dict(M=1024, N=1024, K=1024), "4096³": dict(M=4096, N=4096, K=4096)}
