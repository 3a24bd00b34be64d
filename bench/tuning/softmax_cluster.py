"""Softmax with each long row split over a thread block cluster, against the shipped kernel, torch and a copy.

Why: at 4096 × 32768 the shipped softmax reaches 0.85 of copy bandwidth (target 0.90). One 64 KB row fills a block
that fills an SM, so its two block-wide reductions stall the SM while nothing else loads (bench/README.md). Split
the row over a cluster of `split` CTAs: each holds N / split columns in registers (64 values a thread at split 2),
so several CTAs fit on an SM and hide each other's reductions, as one row per block does at N = 4096 (0.90). The
partial max and sum cross the cluster through distributed shared memory: each CTA writes its partial into slot
`rank` of every CTA's `slots` (`T.copy_cluster(..., dst_block=p)`), a cluster barrier, then each reads all slots.

On the device:  bash bench/tuning/run.sh softmax_cluster.py   (carry .device; prints a table)
Here (no GPU):  python bench/tuning/softmax_cluster.py --compile-only
"""
import os
import sys

import tilelang
import tilelang.language as T

sys.path.insert(0, os.getcwd())
sys.path.insert(0, os.path.join(os.getcwd(), "kernels"))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))


def softmax_cluster(M, N, dtype="float16", split=2, threads=256, hold_in_dtype=False, min_blocks=1):
    accum_dtype = "float32"
    # hold_in_dtype: the row part stays in registers as fp16/bf16 (half the registers: 48 instead of 80 a thread
    # at split 2, so 5 CTAs an SM instead of 3, more loads in flight); max and sum are still fp32, the exps are
    # rounded to dtype once before the scaling (one more rounding than torch: well within the fp16 limit).
    # min_blocks: CTAs an SM must hold (__launch_bounds__), which caps the registers ptxas may use; without it
    # ptxas spends 80 a thread on the fp16 row too.
    hold = dtype if hold_in_dtype else accum_dtype
    log2e = 1.4426950408889634
    size = 4 if dtype == "float32" else 2
    chunk = threads * 16 // size
    part = (-(-N // split) + chunk - 1) // chunk * chunk  # columns per CTA, whole 16-byte vectors per thread

    @T.prim_func
    def main(X: T.Tensor((M, N), dtype), Y: T.Tensor((M, N), dtype)):
        with T.ClusterKernel(split, M, cluster_dims=(split, 1, 1), threads=threads) as (bx, row):
            if min_blocks > 1:
                T.annotate_min_blocks_per_sm(min_blocks)
            x = T.alloc_fragment((1, part), hold)
            partial = T.alloc_fragment((1,), accum_dtype)
            mine = T.alloc_shared((1,), accum_dtype)
            # One buffer for both exchanges: as two, TileLang's planner gave them the same address (their lives do
            # not overlap in this CTA), and a peer's partial sum could then land on a max not yet read here.
            slots = T.alloc_shared((2, split), accum_dtype)
            rank = T.block_rank_in_cluster()
            row_max = T.alloc_local((1,), accum_dtype)
            row_sum = T.alloc_local((1,), accum_dtype)

            # Peers write into `slots` from their first exchange on, which may come while this CTA is still in its
            # own reduce_max; so `slots` must live from the start: the first device run (softmax-cluster-1.log)
            # had the planner put reduce_max's workspace over it, and a peer's max then landed in that workspace.
            row_sum[0] = slots[0, 0]
            T.cluster_arrive_relaxed()  # (paired with the wait below: every peer has started before its shared
            T.copy(X[row, bx * part], x)  # memory is written from here; columns past N read as zero: masked below
            for i, j in T.Parallel(1, part):
                x[i, j] = T.if_then_else(bx * part + j < N, x[i, j], -T.infinity(hold))
            T.reduce_max(x, partial, dim=1)
            T.copy(partial, mine)
            T.cluster_wait()
            for p in T.serial(split):  # my partial max into slot `rank` of every CTA of the cluster
                T.copy_cluster(mine, slots[0, rank:rank + 1], dst_block=p)
            T.cluster_sync()
            row_max[0] = -T.infinity(accum_dtype)
            for p in T.serial(split):
                row_max[0] = T.max(row_max[0], slots[0, p])

            for i, j in T.Parallel(1, part):
                x[i, j] = T.exp2((T.cast(x[i, j], accum_dtype) - row_max[0]) * log2e)
            T.reduce_sum(x, partial, dim=1)
            T.copy(partial, mine)
            for p in T.serial(split):
                T.copy_cluster(mine, slots[1, rank:rank + 1], dst_block=p)
            T.cluster_sync()
            row_sum[0] = 0
            for p in T.serial(split):
                row_sum[0] += slots[1, p]
            row_sum[0] = 1 / row_sum[0]

            for i, j in T.Parallel(1, part):
                x[i, j] = T.cast(x[i, j], accum_dtype) * row_sum[0]
            T.copy(x, Y[row, bx * part])  # columns past N are not written

    return main


VARIANTS = {
    "cluster 2, 256 threads": dict(split=2, threads=256),
    "cluster 4, 256 threads": dict(split=4, threads=256),
    "cluster 2, 512 threads": dict(split=2, threads=512),
    "cluster 2, 256 threads, fp16 row": dict(split=2, threads=256, hold_in_dtype=True),
    "cluster 2, 256 thr, fp16 row, 4/SM": dict(split=2, threads=256, hold_in_dtype=True, min_blocks=4),
    "cluster 2, 256 thr, fp16 row, 5/SM": dict(split=2, threads=256, hold_in_dtype=True, min_blocks=5),
    "cluster 4, 128 thr, fp16 row, 8/SM": dict(split=4, threads=128, hold_in_dtype=True, min_blocks=8),
}
SHAPES = [(4096, 32768, "float16")]
CHECKS = [(1000, 32768 - 5, "float16"), (64, 32768, "float16")]
TARGET = {"kind": "cuda", "arch": "sm_90a"}


def build(M, N, dtype, **kw):
    return tilelang.compile(softmax_cluster(M, N, dtype, **kw), out_idx=[1], target=TARGET)


def build_shipped(M, N, dtype):
    import softmax as shipped
    return tilelang.compile(shipped.softmax(M, N, dtype, rows_per_block=4), out_idx=[1], target=TARGET)


SHIPPED = "ship (4 rows a block)"  # the shipped kernel when this script ran


def build_named(M, N, dtype, name):
    return build_shipped(M, N, dtype) if name == SHIPPED else build(M, N, dtype, **VARIANTS[name])


def compile_only():
    import re
    for name, kw in VARIANTS.items():
        for shape in SHAPES + CHECKS:
            try:
                src = build(*shape, **kw).get_kernel_source()
            except Exception as exc:
                print(f"{name:36s} {shape} FAILED: {str(exc).splitlines()[-1][:300]}", flush=True)
                continue
            print(f"{name:36s} {shape} ok: cluster syncs {len(re.findall(r'cluster_sync', src))}, "
                  f"remote stores {len(re.findall(r'shared::cluster|map_shared_rank|mapa', src))}", flush=True)


def on_gpu():
    from harness import compare_softmax_variants
    compare_softmax_variants(build_named, [SHIPPED, *VARIANTS], SHAPES, CHECKS)


if __name__ == "__main__":
    compile_only() if "--compile-only" in sys.argv else on_gpu()
