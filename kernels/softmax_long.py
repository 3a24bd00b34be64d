"""Softmax of long rows (32768 to 262144 columns: the vocabulary of a language model), one row over a cluster of CTAs.

Read kernels/softmax.py first: there a block holds a whole row in registers, in fp32, so each element is read once,
written once and costs one exp. That stops at about 16384 columns (64 fp32 values a thread at 256 threads, a third of
an SM's registers, so that three blocks share an SM and hide each other's reductions). A longer row is split over a
thread block cluster (Hopper): `cluster` CTAs each hold a slice of the row in registers, as one block held a whole
row, and exchange their partial maxes, then their partial sums. The CTAs of a cluster run at the same time, on the
SMs of one GPC, and can write into each other's shared memory ("distributed shared memory"), so the exchange costs
a few hundred bytes on chip, not a second pass over the row.

Per row, each CTA:
1. loads its slice into registers, in fp32 (below: how, when the row does not start on a 16-byte boundary);
2. takes its slice's max: each thread's, then across a warp by shuffles, then across the warps through shared memory;
3. sends that partial max to every CTA of the cluster, waits for theirs and takes the row max;
4. replaces each value x by exp(x - max) and takes the slice's sum the same way; exchanges the sums;
5. multiplies by 1 / sum and stores.

Ragged rows. Row i starts at element i·N of the matrix. When N is not a multiple of 8 (fp16 and bf16; 4 in fp32),
that is not a 16-byte boundary for most rows, so the copy of "row i from column 0" that kernels/softmax.py writes
cannot use 16-byte loads: TileLang, which cannot prove the alignment, emits 2-byte loads and stores, and at
4096 × 50257 (GPT-2's vocabulary) that ran at 0.39 of the copy bandwidth. Here the matrix is read as one flat array
of 16-byte vectors instead. Row i touches the vectors from ⌊i·N / 8⌋ to ⌊(i·N + N - 1) / 8⌋, all of them only its
own but the first and the last, which it shares with the rows before and after. The vectors of its own are loaded
and stored 16 bytes at a time; the two shared ones element by element, each row reading and writing only its own
elements. The CTAs of the cluster take the row's vectors in equal shares, and thread t of a
CTA takes vectors t, t + threads, t + 2·threads, ... of its share, so that a warp's loads are 512 contiguous bytes.
"""
import tilelang.language as T

LOG2E = 1.4426950408889634  # exp(x) = exp2(x * log2(e)), and exp2 is the GPU's native instruction


def softmax_cluster(M, N, dtype="bfloat16", cluster=4, threads=256, online=False):
    accum_dtype = "float32"
    V = 16 // (4 if dtype == "float32" else 2)  # elements in a 16-byte vector
    row_vectors = N // V if N % V == 0 else (N - 1) // V + 2  # the most vectors a row touches
    per_cta = -(-row_vectors // cluster)  # vectors a CTA takes
    K = -(-per_cta // threads)  # vectors a thread holds: K * V values in registers
    warps = threads // 32
    index = "int64" if M * N >= 2**31 else "int32"  # element indices in the flat array

    @T.macro
    def cta_reduce(value, i, scratch, which, op):
        # value[i], one per thread, becomes the max or the sum over the CTA, in every thread.
        tx = T.get_thread_binding()
        value[i] = T.warp_reduce_max(value[i]) if op == "max" else T.warp_reduce_sum(value[i])
        if tx % 32 == 0:
            scratch[which, tx // 32] = value[i]
        T.sync_threads()
        value[i] = scratch[which, 0]
        for w in T.unroll(1, warps):
            value[i] = T.max(value[i], scratch[which, w]) if op == "max" else value[i] + scratch[which, w]

    @T.macro
    def exchange(value, n, mine, slots, arrived, which, rank):
        # value[0:n] of this CTA into slots[which, rank, 0:n] of every CTA of the cluster (this one too). One thread sends
        # 16 bytes (the least a bulk copy moves) to each CTA, as an asynchronous copy from shared memory to shared
        # memory that lands on the receiver's mbarrier `arrived`; that barrier completes once all `cluster` copies
        # have landed. (An exchange through `barrier.cluster` instead costs every warp a GPU-wide memory fence,
        # which ptxas puts in front of the barrier's arrive: 0.89 of copy bandwidth against 0.96 at 32768 columns.
        # TileLang warns here that a sync hoisted out of `tx == 0` leaves a race: it sees the copies of the loop
        # write the same `slots` address, not that each goes to a different CTA.)
        if T.get_thread_binding() == 0:
            for i in T.serial(n):
                mine[which, i] = value[i]
            for p in T.serial(cluster):
                T.copy_cluster(mine[which, 0:4], slots[which, rank, 0:4], dst_block=p,
                               remote_barrier=arrived[which])
        T.mbarrier_wait_parity(arrived[which], 0)

    @T.prim_func
    def main(X: T.Tensor((M, N), dtype), Y: T.Tensor((M, N), dtype)):
        with T.ClusterKernel(cluster, M, cluster_dims=(cluster, 1, 1), threads=threads) as (bx, row):
            T.annotate_pass_configs({"tl.enable_fast_math": True})  # exp2 as ex2.approx.ftz, no denormal fix-ups
            X_flat = T.Tensor((M * N,), dtype, X.data)  # the same memory, one index
            Y_flat = T.Tensor((M * N,), dtype, Y.data)
            tx = T.get_thread_binding()
            x = T.alloc_local((K * V,), accum_dtype)  # this thread's values of the row
            stat = T.alloc_local((2,), accum_dtype)
            scratch = T.alloc_shared((2, warps), accum_dtype)  # a value a warp, for each of the two reductions
            mine = T.alloc_shared((2, 4), accum_dtype)  # what this CTA sends, 16 bytes an exchange
            slots = T.alloc_shared((2, cluster, 4), accum_dtype)  # [e, p]: what CTA p sent in exchange e
            arrived = T.alloc_barrier([cluster, cluster])  # one arrival per sender, with its 16 bytes
            rank = T.block_rank_in_cluster()

            start = T.cast(row, index) * N  # the row's first element
            end = start + N
            first = start // V + bx * per_cta  # this CTA's first vector
            last = T.min(first + per_cta, (end - 1) // V + 1)  # one past its last
            whole_from = (start + V - 1) // V  # the row's vectors that are only its own: whole_from to whole_to - 1
            whole_to = (end - V) // V + 1

            # The other CTAs write into `slots` as soon as they have their partials, maybe while this one is still
            # reducing; a read here makes `slots` live from the start, so that TileLang's planner puts nothing else
            # there (it did: wrong rows, different on every launch).
            stat[1] = slots[0, 0, 0]
            T.cluster_arrive_relaxed()  # after the mbarriers' init; with cluster_wait below, no copy lands early

            for k in T.unroll(K):
                v = first + k * threads + tx
                if v >= whole_from and v < T.min(whole_to, last):
                    for e in T.vectorized(V):  # one 16-byte load
                        x[k * V + e] = X_flat[v * V + e]
                else:  # a vector shared with the next row or the row before, or past this CTA's share
                    for e in T.unroll(V):
                        x[k * V + e] = T.if_then_else(v < last and v * V + e >= start and v * V + e < end,
                                                      X_flat[v * V + e], -T.infinity(accum_dtype))  # exp(-inf) = 0

            stat[0] = x[0]
            for i in T.unroll(1, K * V):
                stat[0] = T.max(stat[0], x[i])
            cta_reduce(stat, 0, scratch, 0, "max")
            T.cluster_wait()
            if online:
                # One exchange instead of two: each CTA exponentiates against its own max m_p and sends (m_p, s_p),
                # s_p = sum of exp(x - m_p); then the row max m = max m_p, and the sum is sum_p s_p exp(m_p - m).
                stat[0] = T.if_then_else(stat[0] == -T.infinity(accum_dtype), 0, stat[0])  # a slice of -inf only
                for i in T.unroll(K * V):
                    x[i] = T.exp2((x[i] - stat[0]) * LOG2E)
                stat[1] = 0
                for i in T.unroll(K * V):
                    stat[1] += x[i]
                cta_reduce(stat, 1, scratch, 1, "sum")
                exchange(stat, 2, mine, slots, arrived, 0, rank)
                T.cluster_arrive_relaxed()
                if tx == 0:
                    stat[1] = slots[0, 0, 0]
                    for p in T.serial(1, cluster):
                        stat[1] = T.max(stat[1], slots[0, p, 0])
                    mine[1, 0] = 0
                    for p in T.serial(cluster):
                        mine[1, 0] += slots[0, p, 1] * T.exp2((slots[0, p, 0] - stat[1]) * LOG2E)
                    mine[1, 1] = T.exp2((stat[0] - stat[1]) * LOG2E) / mine[1, 0]
                T.sync_threads()
                stat[1] = mine[1, 1]
            else:
                exchange(stat, 1, mine, slots, arrived, 0, rank)
                stat[1] = slots[0, 0, 0]
                for p in T.serial(1, cluster):
                    stat[1] = T.max(stat[1], slots[0, p, 0])  # the row max

                for i in T.unroll(K * V):
                    x[i] = T.exp2((x[i] - stat[1]) * LOG2E)
                stat[0] = 0
                for i in T.unroll(K * V):
                    stat[0] += x[i]
                cta_reduce(stat, 0, scratch, 1, "sum")
                exchange(stat, 1, mine, slots, arrived, 1, rank)
                T.cluster_arrive_relaxed()  # every copy into this CTA has landed (waited on at the very end)
                stat[1] = 0
                for p in T.serial(cluster):
                    stat[1] += slots[1, p, 0]  # the row sum
                stat[1] = 1 / stat[1]

            for k in T.unroll(K):
                v = first + k * threads + tx
                if v >= whole_from and v < T.min(whole_to, last):
                    for e in T.vectorized(V):  # one 16-byte store
                        Y_flat[v * V + e] = x[k * V + e] * stat[1]
                else:
                    for e in T.unroll(V):
                        if v < last and v * V + e >= start and v * V + e < end:
                            Y_flat[v * V + e] = x[k * V + e] * stat[1]
            T.cluster_wait()  # every CTA's copies have landed, so none still reads this CTA's `mine`: it may exit

    return main
