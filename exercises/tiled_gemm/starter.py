"""Tiled GEMM: C = A @ B, fp16 in, fp32 accumulation, fp16 out.

This version is right: one block per block_M x block_N tile of C, walking K in steps of block_K through shared
memory, with T.Pipelined overlapping the next copies with this multiply. Make it faster: bigger tiles, more stages,
a swizzled tile order (T.use_swizzle), and on Hopper the warp-specialized schedule of kernels/gemm.py.
"""
import tilelang.language as T


def gemm(M, N, K, dtype="float16", block_M=128, block_N=128, block_K=32, num_stages=2, threads=128):
    accum_dtype = "float32"

    @T.prim_func
    def main(A: T.Tensor((M, K), dtype), B: T.Tensor((K, N), dtype), C: T.Tensor((M, N), dtype)):
        with T.Kernel(T.ceildiv(N, block_N), T.ceildiv(M, block_M), threads=threads) as (bx, by):
            A_shared = T.alloc_shared((block_M, block_K), dtype)
            B_shared = T.alloc_shared((block_K, block_N), dtype)
            C_local = T.alloc_fragment((block_M, block_N), accum_dtype)
            T.clear(C_local)
            for k in T.Pipelined(T.ceildiv(K, block_K), num_stages=num_stages):
                T.copy(A[by * block_M, k * block_K], A_shared)  # out-of-range rows and columns read as zero
                T.copy(B[k * block_K, bx * block_N], B_shared)
                T.gemm(A_shared, B_shared, C_local)
            T.copy(C_local, C[by * block_M, bx * block_N])  # out-of-range parts are not written

    return main
