"""Long-row softmax over a cluster with one exchange instead of two, against the kernel as it was at a256799.

Why: at 4096 × 32768 the shipped `softmax_cluster` (2 CTAs a row) reached 0.874 of the 1 GiB copy's bandwidth in the
bench (target 0.90). Its CTAs exchanged twice, each exchange followed by a cluster barrier: the partial maxes, then
the partial sums below the row max. Now each CTA finishes its own part's softmax against its own max m_p and sends
(m_p, s_p) once; the row's sum is Σ s_p · exp(m_p - m), and a part's values are scaled by exp(m_p - m) / Σ. Still
one exp per element; one cluster barrier on the critical path of each row instead of two. With one barrier less,
bigger clusters (4 and 8 CTAs, 128 threads each) are timed again as well.

On the device:  bash bench/tuning/run.sh softmax_exchange.py   (carry .device; prints a table)
Result (softmax-exchange.log): slower, 0.805 of the same-size copy against 0.896 for the shipped two exchanges, and
NaN where a CTA's part is all padding (its max is -inf; 333 × 3000 at 4 CTAs). Not adopted; the variant lives here.
Here (no GPU):  python bench/tuning/softmax_exchange.py --compile-only
"""
import os
import sys


sys.path.insert(0, os.getcwd())
sys.path.insert(0, os.path.join(os.getcwd(), "kernels"))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

VARIANTS = {  # name: (module, parameters); "one exchange" is softmax_one_exchange below
    "before c2": ("softmax", dict(cluster=2)),
    "one exchange c2": ("local", dict(cluster=2)),
    "one exchange c4": ("local", dict(cluster=4)),
    "one exchange c4 t128": ("local", dict(cluster=4, threads=128)),
    "one exchange c8 t128": ("local", dict(cluster=8, threads=128)),
    "one exchange c2 t512": ("local", dict(cluster=2, threads=512)),
}
SHAPES = [(4096, 32768, "float16"), (4096, 32768, "bfloat16")]
CHECKS = [(100, 32768, "float16"), (333, 3000, "float16"), (7, 32768, "float32")]  # ragged, and fp32


def softmax_one_exchange(M, N, dtype="float16", cluster=2, threads=256):
    """`softmax_cluster` of kernels/softmax.py with one exchange: (part max, part sum below it) in one go."""
    import tilelang.language as T
    from softmax import LOG2E, padded
    accum_dtype = "float32"
    part = padded(-(-N // cluster), dtype, threads)

    @T.prim_func
    def main(X: T.Tensor((M, N), dtype), Y: T.Tensor((M, N), dtype)):
        with T.ClusterKernel(cluster, M, cluster_dims=(cluster, 1, 1), threads=threads) as (bx, row):
            x = T.alloc_fragment((1, part), accum_dtype)
            part_max = T.alloc_fragment((1,), accum_dtype)
            part_sum = T.alloc_fragment((1,), accum_dtype)
            mine = T.alloc_shared((2,), accum_dtype)
            slots = T.alloc_shared((cluster, 2), accum_dtype)  # [p, 0]: CTA p's max, [p, 1]: its sum below it
            rank = T.block_rank_in_cluster()
            row_max = T.alloc_local((1,), accum_dtype)
            total = T.alloc_local((1,), accum_dtype)
            total[0] = slots[0, 0]  # keeps `slots` live from the start (see kernels/softmax.py)
            T.cluster_arrive_relaxed()
            T.copy(X[row, bx * part], x)
            for i, j in T.Parallel(1, part):
                x[i, j] = T.if_then_else(bx * part + j < N, x[i, j], -T.infinity(accum_dtype))
            T.reduce_max(x, part_max, dim=1)
            for i, j in T.Parallel(1, part):
                x[i, j] = T.exp2((x[i, j] - part_max[0]) * LOG2E)
            T.reduce_sum(x, part_sum, dim=1)
            mine[0] = part_max[0]
            mine[1] = part_sum[0]
            T.cluster_wait()
            for p in T.serial(cluster):
                T.copy_cluster(mine, slots[rank, 0:2], dst_block=p)
            T.cluster_sync()
            row_max[0] = -T.infinity(accum_dtype)
            for p in T.serial(cluster):
                row_max[0] = T.max(row_max[0], slots[p, 0])
            total[0] = 0
            for p in T.serial(cluster):
                total[0] += slots[p, 1] * T.exp2((slots[p, 0] - row_max[0]) * LOG2E)
            total[0] = T.exp2((part_max[0] - row_max[0]) * LOG2E) / total[0]
            for i, j in T.Parallel(1, part):
                x[i, j] *= total[0]
            T.copy(x, Y[row, bx * part])

    return main


if __name__ == "__main__":
    from harness import softmax_script
    softmax_script(VARIANTS, {"local": softmax_one_exchange}, SHAPES, CHECKS)
