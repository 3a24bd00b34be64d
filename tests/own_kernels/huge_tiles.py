"""A kernel of one's own whose tiles alone are 2 MiB each: lowered in seconds, then minutes of nvcc unrolling what
no GPU could launch, but for the checks before lowering (playground/engine/limits.py). Read as text by
tests/test_limits.py and tools/latency.py."""
import tilelang
import tilelang.language as T


@tilelang.jit
def matmul(M=4096, N=4096, K=4096, block_M=2048, block_N=2048, block_K=512, dtype="float16"):
    @T.prim_func
    def main(A: T.Tensor((M, K), dtype), B: T.Tensor((K, N), dtype), C: T.Tensor((M, N), dtype)):
        with T.Kernel(T.ceildiv(N, block_N), T.ceildiv(M, block_M), threads=128) as (bx, by):
            A_shared = T.alloc_shared((block_M, block_K), dtype)
            B_shared = T.alloc_shared((block_K, block_N), dtype)
            C_local = T.alloc_fragment((block_M, block_N), "float")
            T.clear(C_local)
            for k in T.Pipelined(T.ceildiv(K, block_K), num_stages=3):
                T.copy(A[by * block_M, k * block_K], A_shared)
                T.copy(B[k * block_K, bx * block_N], B_shared)
                T.gemm(A_shared, B_shared, C_local)
            T.copy(C_local, C[by * block_M, bx * block_N])
    return main
