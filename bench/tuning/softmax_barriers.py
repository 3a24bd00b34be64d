"""Long-row softmax over a 2-CTA cluster: what its exchanges cost, and cheaper ones.

Why (the SASS of the shipped `softmax_cluster`, from the compile result's `sass`): each of the two exchanges (the
partial maxes, then the partial sums) is written into the peer CTA by all 256 threads of a CTA (the same value, 256
times, each after a `__syncthreads`), then passed through `barrier.cluster.arrive` (release: ptxas puts a
`MEMBAR.ALL.GPU` in front of every warp's arrive) and `barrier.cluster.wait`. And the exps are the IEEE `exp2f`
(an `FSETP` and two `FMUL` around every `MUFU.EX2`, for denormals), not the fast form the other kernels use. A CTA
holds half a row in registers and three share an SM, so a CTA's lifetime (load, reduce, exchange, exp, reduce,
exchange, scale, store) is what limits the bandwidth; these are all on that path. Variants (`softmax_cluster_v`):
  fast        exp2 in its fast form (`tl.enable_fast_math`: `ex2.approx.ftz`)
  one writer  only thread 0 writes the peers' slots
  relaxed     one writer, which fences (`fence.acq_rel.cluster`) after its remote writes; every thread then arrives
              on the cluster barrier relaxed (no fence in each warp) and waits (acquire)
  bulk        no cluster barrier on the path: thread 0 sends its 16-byte partial to every CTA of the cluster by an
              asynchronous bulk copy that completes on the receiver's mbarrier (`cp.async.bulk.shared::cluster`,
              `T.copy_cluster(..., remote_barrier=)`); each CTA waits on its own mbarrier, which completes when all
              the partials have landed. One relaxed cluster barrier, arrived at before the scaling and waited on at
              the very end, keeps every CTA's shared memory alive until its outgoing copies are done

On the device:  bash bench/tuning/run.sh softmax_barriers.py   (carry .device; prints a table)
Here (no GPU):  python bench/tuning/softmax_barriers.py --compile-only
"""
import os
import sys


sys.path.insert(0, os.getcwd())
sys.path.insert(0, os.path.join(os.getcwd(), "kernels"))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

FENCE = r"""
__device__ __forceinline__ void fence_acq_rel_cluster() { asm volatile("fence.acq_rel.cluster;" ::: "memory"); }
"""
VARIANTS = {  # name: (module, parameters); "local" is softmax_cluster_v below
    "ship": ("softmax", dict(cluster=2)),
    "fast": ("local", dict(fast=True)),
    "one writer": ("local", dict(one_writer=True)),
    "relaxed": ("local", dict(one_writer=True, relaxed=True)),
    "relaxed fast": ("local", dict(one_writer=True, relaxed=True, fast=True)),
    "bulk": ("bulk", dict()),
    "bulk fast": ("bulk", dict(fast=True)),
    "relaxed fast c4 t128": ("local", dict(one_writer=True, relaxed=True, fast=True, cluster=4, threads=128)),
    "bulk fast c4 t128": ("bulk", dict(fast=True, cluster=4, threads=128)),
}
SHAPES = [(4096, 32768, "float16"), (4096, 32768, "bfloat16")]
CHECKS = [(100, 32768, "float16"), (333, 3000, "float16"), (7, 32768, "float32")]  # ragged, and fp32


def softmax_cluster_v(M, N, dtype="float16", cluster=2, threads=256, fast=False, one_writer=False, relaxed=False):
    """`softmax_cluster` of kernels/softmax.py, with the variants above."""
    import tilelang.language as T
    from softmax import LOG2E, padded
    accum_dtype = "float32"
    part = padded(-(-N // cluster), dtype, threads)

    @T.macro
    def exchange(value, mine, slots, which, rank):
        T.copy(value, mine)
        if one_writer:
            if T.get_thread_binding() == 0:
                for p in T.serial(cluster):
                    T.copy_cluster(mine, slots[which, rank:rank + 1], dst_block=p)
                if relaxed:
                    T.call_extern("handle", "fence_acq_rel_cluster")
        else:
            for p in T.serial(cluster):
                T.copy_cluster(mine, slots[which, rank:rank + 1], dst_block=p)
        if relaxed:
            T.cluster_arrive_relaxed()
            T.cluster_wait()
        else:
            T.cluster_sync()

    @T.prim_func
    def main(X: T.Tensor((M, N), dtype), Y: T.Tensor((M, N), dtype)):
        with T.ClusterKernel(cluster, M, cluster_dims=(cluster, 1, 1), threads=threads,
                             prelude=FENCE if relaxed else None) as (bx, row):
            if fast:
                T.annotate_pass_configs({"tl.enable_fast_math": True})
            x = T.alloc_fragment((1, part), accum_dtype)
            partial = T.alloc_fragment((1,), accum_dtype)
            mine = T.alloc_shared((1,), accum_dtype)
            slots = T.alloc_shared((2, cluster), accum_dtype)
            rank = T.block_rank_in_cluster()
            row_max = T.alloc_local((1,), accum_dtype)
            row_sum = T.alloc_local((1,), accum_dtype)
            row_sum[0] = slots[0, 0]  # keeps `slots` live from the start (see kernels/softmax.py)
            T.cluster_arrive_relaxed()
            T.copy(X[row, bx * part], x)
            for i, j in T.Parallel(1, part):
                x[i, j] = T.if_then_else(bx * part + j < N, x[i, j], -T.infinity(accum_dtype))
            T.reduce_max(x, partial, dim=1)
            T.cluster_wait()  # with the arrive above: every peer has started
            exchange(partial, mine, slots, 0, rank)
            row_max[0] = -T.infinity(accum_dtype)
            for p in T.serial(cluster):
                row_max[0] = T.max(row_max[0], slots[0, p])
            for i, j in T.Parallel(1, part):
                x[i, j] = T.exp2((x[i, j] - row_max[0]) * LOG2E)
            T.reduce_sum(x, partial, dim=1)
            exchange(partial, mine, slots, 1, rank)
            row_sum[0] = 0
            for p in T.serial(cluster):
                row_sum[0] += slots[1, p]
            row_sum[0] = 1 / row_sum[0]
            for i, j in T.Parallel(1, part):
                x[i, j] *= row_sum[0]
            T.copy(x, Y[row, bx * part])

    return main


def softmax_cluster_bulk(M, N, dtype="float16", cluster=2, threads=256, fast=False):
    """`softmax_cluster` with the partials sent by asynchronous bulk copies that complete on mbarriers."""
    import tilelang.language as T
    from softmax import LOG2E, padded
    accum_dtype = "float32"
    part = padded(-(-N // cluster), dtype, threads)

    @T.macro
    def exchange(value, mine, slots, bar, which, rank):
        T.copy(value, mine[which, 0:1])
        if T.get_thread_binding() == 0:
            for p in T.serial(cluster):  # 16 bytes (a bulk copy's least) into slot `rank` of CTA p
                T.copy_cluster(mine[which, 0:4], slots[which, rank, 0:4], dst_block=p, remote_barrier=bar[which])
        T.mbarrier_wait_parity(bar[which], 0)  # every CTA's partial has landed here

    @T.prim_func
    def main(X: T.Tensor((M, N), dtype), Y: T.Tensor((M, N), dtype)):
        with T.ClusterKernel(cluster, M, cluster_dims=(cluster, 1, 1), threads=threads) as (bx, row):
            if fast:
                T.annotate_pass_configs({"tl.enable_fast_math": True})
            x = T.alloc_fragment((1, part), accum_dtype)
            partial = T.alloc_fragment((1,), accum_dtype)
            mine = T.alloc_shared((2, 4), accum_dtype)
            slots = T.alloc_shared((2, cluster, 4), accum_dtype)
            bar = T.alloc_barrier([cluster, cluster])  # one arrival per sender, with its bytes
            rank = T.block_rank_in_cluster()
            row_max = T.alloc_local((1,), accum_dtype)
            row_sum = T.alloc_local((1,), accum_dtype)
            row_sum[0] = slots[0, 0, 0]  # keeps `slots` live from the start (see kernels/softmax.py)
            T.cluster_arrive_relaxed()  # the mbarriers are initialized (and fenced) before this
            T.copy(X[row, bx * part], x)
            for i, j in T.Parallel(1, part):
                x[i, j] = T.if_then_else(bx * part + j < N, x[i, j], -T.infinity(accum_dtype))
            T.reduce_max(x, partial, dim=1)
            T.cluster_wait()  # every peer has started: its mbarriers exist
            exchange(partial, mine, slots, bar, 0, rank)
            row_max[0] = -T.infinity(accum_dtype)
            for p in T.serial(cluster):
                row_max[0] = T.max(row_max[0], slots[0, p, 0])
            for i, j in T.Parallel(1, part):
                x[i, j] = T.exp2((x[i, j] - row_max[0]) * LOG2E)
            T.reduce_sum(x, partial, dim=1)
            exchange(partial, mine, slots, bar, 1, rank)
            T.cluster_arrive_relaxed()  # my incoming copies have landed; waited on at the end
            row_sum[0] = 0
            for p in T.serial(cluster):
                row_sum[0] += slots[1, p, 0]
            row_sum[0] = 1 / row_sum[0]
            for i, j in T.Parallel(1, part):
                x[i, j] *= row_sum[0]
            T.copy(x, Y[row, bx * part])
            T.cluster_wait()  # every CTA's incoming copies have landed: no copy still reads my `mine`

    return main


if __name__ == "__main__":
    from harness import softmax_script
    softmax_script(VARIANTS, {"local": softmax_cluster_v, "bulk": softmax_cluster_bulk}, SHAPES, CHECKS)
