"""Row softmax: Y[i, :] = exp(X[i, :] - max_i) / sum_j exp(X[i, j] - max_i), computed in float32.

This version is right: one block per row, the row held in registers (padded to whole 16-byte vectors per thread,
the padding masked with -inf), a max and a sum reduced across the threads. Make it faster: how many threads a row,
how many rows a block, overlapping the next row's load with this row's math.
"""
import tilelang.language as T

LOG2E = 1.4426950408889634


def softmax(M, N, dtype="float16", threads=128):
    accum_dtype = "float32"
    chunk = threads * 8  # 8 fp16 values (16 bytes) per thread per step
    N_pad = (N + chunk - 1) // chunk * chunk

    @T.prim_func
    def main(X: T.Tensor((M, N), dtype), Y: T.Tensor((M, N), dtype)):
        with T.Kernel(M, threads=threads) as row:
            x = T.alloc_fragment((1, N_pad), accum_dtype)
            row_max = T.alloc_fragment((1,), accum_dtype)
            row_sum = T.alloc_fragment((1,), accum_dtype)
            T.copy(X[row, 0], x)  # columns past N read as zero ...
            for i, j in T.Parallel(1, N_pad):
                x[i, j] = T.if_then_else(j < N, x[i, j], -T.infinity(accum_dtype))  # ... and are masked here
            T.reduce_max(x, row_max, dim=1)
            for i, j in T.Parallel(1, N_pad):
                x[i, j] = T.exp2((x[i, j] - row_max[i]) * LOG2E)
            T.reduce_sum(x, row_sum, dim=1)
            for i, j in T.Parallel(1, N_pad):
                x[i, j] = x[i, j] / row_sum[i]
            T.copy(x, Y[row, 0])  # columns past N are not written

    return main
