"""Vector add: C = A + B. This version is right but slow: each thread adds one element at a time.

Make it run at the speed of device memory. Hints: let each thread move 16 bytes per load (T.copy of a block into
a fragment), keep several loads in flight, and take care of the last, partial block.
"""
import tilelang.language as T


def vector_add(N, dtype="float16", block_N=1024, threads=256):

    @T.prim_func
    def main(A: T.Tensor((N,), dtype), B: T.Tensor((N,), dtype), C: T.Tensor((N,), dtype)):
        with T.Kernel(T.ceildiv(N, block_N), threads=threads) as bx:
            for i in T.Parallel(block_N):
                if bx * block_N + i < N:
                    C[bx * block_N + i] = A[bx * block_N + i] + B[bx * block_N + i]

    return main
