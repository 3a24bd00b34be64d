"""Softmax of long rows (past 16384 columns, up to 262144: a language model's vocabulary), a row over a cluster of CTAs.

Read kernels/softmax.py first: there a block holds a whole row in registers, in fp32, so each element is read once,
written once and costs one exp. That stops at about 16384 columns (64 fp32 values a thread at 256 threads: 80
registers, so that three blocks share an SM and hide each other's reductions). A longer row is split over a thread
block cluster (Hopper): `cluster` CTAs each hold a slice of the row in registers, as a block held a whole row, and
exchange their partial maxes, then their partial sums. The CTAs of a cluster run at the same time, on the SMs of one
GPC, and can write into each other's shared memory ("distributed shared memory"), so an exchange moves a few hundred
bytes on chip instead of a second pass over the row. The rule in kernels/softmax.py takes the fewest CTAs that keep
a slice to 16384 columns (again 80 registers), up to the largest cluster Hopper allows, 16.

Per row, each CTA:
1. loads its slice into registers, in fp32 (below: how, when the row does not start on a 16-byte boundary);
2. takes its slice's max: each thread's, then across a warp by shuffles, then across the warps through shared memory;
3. sends that partial max to every CTA of the cluster, waits for theirs and takes the row max;
4. replaces each value x by exp(x - max), takes the slice's sum the same way and exchanges the sums;
5. multiplies by 1 / sum and stores.

Rows off 16-byte boundaries. Row i starts at element i·N. When N is not a multiple of 8 (fp16 and bf16; of 4 in
fp32), that is not a 16-byte boundary for most rows, so a copy of "row i from column 0", as kernels/softmax.py
writes it, cannot use 16-byte loads: TileLang, which cannot prove the alignment, emits 2-byte loads and stores (at
4096 × 50257, GPT-2's vocabulary, that ran at 0.39 of the copy bandwidth on an H200). Here the matrix is read as one
flat array of 16-byte vectors instead. Row i touches the vectors from ⌊i·N / 8⌋ to ⌊(i·N + N - 1) / 8⌋, all of them
its own but the first and the last, which it shares with the rows before and after. Its own vectors are loaded
and stored 16 bytes at a time; the two shared ones element by element, each row reading and writing only its
elements.
The CTAs of the cluster take the row's vectors in equal shares, and thread t of a CTA takes vectors t, t + threads,
t + 2·threads, ... of its share, so that a warp's 32 loads are 512 contiguous bytes.
"""
import tilelang.language as T

LOG2E = 1.4426950408889634  # exp(x) = exp2(x * log2(e)), and exp2 is the GPU's native instruction


def softmax_cluster(M, N, dtype="bfloat16", cluster=4, threads=256):
    accum_dtype = "float32"
    V = 16 // (4 if dtype == "float32" else 2)  # elements in a 16-byte vector
    row_vectors = N // V if N % V == 0 else (N - 1) // V + 2  # the most vectors a row touches
    per_cta = -(-row_vectors // cluster)  # vectors a CTA takes
    K = -(-per_cta // threads)  # vectors a thread holds: K * V values in registers
    warps = threads // 32
    if M * N < V:
        raise ValueError(f"a row over a cluster needs at least one 16-byte vector in the tensor ({V} elements), "
                         f"and {M} × {N} has {M * N}: take cluster=1")
    # Element indices in the flat array; the last row's CTAs look up to a share's width past the tensor's end.
    index = "int64" if M * N + cluster * K * threads * V >= 2**31 else "int32"

    @T.macro
    def cta_reduce(value, scratch, which, op):
        # value[0], one per thread, becomes the max ("max") or the sum ("sum") over the CTA, in every thread: across
        # each warp by shuffles, then one value a warp through shared memory (scratch[which, :]).
        tx = T.get_thread_binding()
        value[0] = T.warp_reduce_max(value[0]) if op == "max" else T.warp_reduce_sum(value[0])
        if tx % 32 == 0:
            scratch[which, tx // 32] = value[0]
        T.sync_threads()
        value[0] = scratch[which, 0]
        for w in T.unroll(1, warps):
            value[0] = T.max(value[0], scratch[which, w]) if op == "max" else value[0] + scratch[which, w]

    @T.macro
    def exchange(value, mine, slots, arrived, which, rank):
        # This CTA's value[0] into slots[which, rank, 0] of every CTA of the cluster (this one too). One thread sends
        # 16 bytes (the least a bulk copy moves) to each CTA, as an asynchronous copy from shared memory to shared
        # memory that lands on the receiver's mbarrier arrived[which]; that barrier completes once all `cluster`
        # copies have landed. (An exchange through `barrier.cluster` instead cost every warp a GPU-wide memory fence,
        # which ptxas puts in front of the barrier's arrive: 0.89 of copy bandwidth against 0.96 at 32768 columns.
        # TileLang warns here that a sync hoisted out of `tx == 0` leaves a race: it sees the copies of the loop
        # write the same `slots` address, not that each goes to a different CTA.)
        if T.get_thread_binding() == 0:
            mine[which, 0] = value[0]
            for p in T.serial(cluster):
                T.copy_cluster(mine[which, 0:4], slots[which, rank, 0:4], dst_block=p,
                               remote_barrier=arrived[which])
        T.mbarrier_wait_parity(arrived[which], 0)

    @T.prim_func
    def main(X: T.Tensor((M, N), dtype), Y: T.Tensor((M, N), dtype)):
        with T.ClusterKernel(cluster, M, cluster_dims=(cluster, 1, 1), threads=threads) as (bx, row):
            T.annotate_pass_configs({"tl.enable_fast_math": True})  # exp2 as ex2.approx.ftz, no denormal fix-ups
            # Registers for three CTAs of 256 threads an SM (80 a thread), so that while one CTA waits on its
            # cluster the others load; left to itself ptxas took 89 at 50257 columns, and two CTAs an SM. Past 64
            # values a thread that would spill: two CTAs then (at 151936 columns, 10 vectors a thread over 8 CTAs
            # ran at 0.74 of copy bandwidth under the cap of three).
            T.annotate_min_blocks_per_sm(max(1, (768 if K * V <= 64 else 512) // threads))
            X_flat = T.Tensor((M * N,), dtype, X.data)  # the same memory, one index
            Y_flat = T.Tensor((M * N,), dtype, Y.data)
            tx = T.get_thread_binding()
            x = T.alloc_local((K * V,), accum_dtype)  # this thread's values of the row
            stat = T.alloc_local((1,), accum_dtype)  # its partial max or sum
            row_max = T.alloc_local((1,), accum_dtype)
            row_sum = T.alloc_local((1,), accum_dtype)
            scratch = T.alloc_shared((2, warps), accum_dtype)  # a value a warp, for each of the two reductions
            mine = T.alloc_shared((2, 4), accum_dtype)  # what this CTA sends: 16 bytes an exchange
            slots = T.alloc_shared((2, cluster, 4), accum_dtype)  # [e, p, 0]: what CTA p sent in exchange e
            arrived = T.alloc_barrier([cluster, cluster])  # one arrival per sender, with its 16 bytes
            rank = T.block_rank_in_cluster()

            start = T.cast(row, index) * N  # the row's first element
            end = start + N
            first = start // V + bx * per_cta  # this CTA's first vector
            last = T.min(first + per_cta, (end - 1) // V + 1)  # one past its last
            own_from = (start + V - 1) // V  # the vectors only this row touches: own_from to own_to - 1
            own_to = (end - V) // V + 1
            whole_vectors = M * N // V  # the vectors of the tensor that lie wholly inside it

            # The other CTAs write into `slots` as soon as they have their partials, maybe while this one is still
            # reducing; a read here makes `slots` live from the start, so that TileLang's planner puts nothing else
            # there (it did: wrong rows, different on every launch).
            row_sum[0] = slots[0, 0, 0]
            T.cluster_arrive_relaxed()  # after the mbarriers' init; with cluster_wait below, no copy lands early

            # 1. The slice, into registers in fp32: K vectors a thread, every one a 16-byte load, all in flight before
            # the first use. The loads sit in one branch-free block: ptxas issues all K of them, then converts. (With
            # a branch per vector, own or shared, the conversion of vector k was waited on before the branch to
            # vector k + 1, and every thread made K trips to memory one after the other: 0.63 of the copy bandwidth
            # at 50257 columns against 0.99 at 65536, whose rows share no vector and need no branch.)
            for k in T.unroll(K):
                v = first + k * threads + tx
                for e in T.vectorized(V):  # one 16-byte load; a vector past the tensor's last whole one reads that
                    x[k * V + e] = X_flat[T.min(v, whole_vectors - 1) * V + e]
            # Then, with all loads in flight, the values not this CTA's are set to -inf (exp(-inf) = 0): those of a
            # vector shared with the row before or after, and those past this CTA's share.
            for k in T.unroll(K):
                v = first + k * threads + tx
                if v < own_from or v >= T.min(own_to, last):
                    for e in T.unroll(V):
                        i = v * V + e
                        if (M * N) % V != 0:  # the tensor ends inside a vector, read above as the one before it
                            x[k * V + e] = T.if_then_else(v == whole_vectors and e < (M * N) % V, X_flat[i],
                                                          x[k * V + e])
                        x[k * V + e] = T.if_then_else(v < last and i >= start and i < end, x[k * V + e],
                                                      -T.infinity(accum_dtype))

            # 2., 3. The slice's max, then the row's.
            stat[0] = x[0]
            for i in T.unroll(1, K * V):
                stat[0] = T.max(stat[0], x[i])
            cta_reduce(stat, scratch, 0, "max")
            T.cluster_wait()
            exchange(stat, mine, slots, arrived, 0, rank)
            row_max[0] = slots[0, 0, 0]
            for p in T.serial(1, cluster):
                row_max[0] = T.max(row_max[0], slots[0, p, 0])

            # 4. The exps and the slice's sum, then the row's.
            for i in T.unroll(K * V):
                x[i] = T.exp2((x[i] - row_max[0]) * LOG2E)
            stat[0] = 0
            for i in T.unroll(K * V):
                stat[0] += x[i]
            cta_reduce(stat, scratch, 1, "sum")
            exchange(stat, mine, slots, arrived, 1, rank)
            T.cluster_arrive_relaxed()  # every copy into this CTA has landed (waited on at the very end)
            row_sum[0] = 0
            for p in T.serial(cluster):
                row_sum[0] += slots[1, p, 0]
            row_sum[0] = 1 / row_sum[0]  # one division, then multiplications

            # 5. Scaled, rounded to dtype and stored as loaded: 16 bytes at a time, the shared vectors element by
            # element.
            for k in T.unroll(K):
                v = first + k * threads + tx
                if v >= own_from and v < T.min(own_to, last):
                    for e in T.vectorized(V):  # one 16-byte store
                        Y_flat[v * V + e] = x[k * V + e] * row_sum[0]
                else:
                    for e in T.unroll(V):
                        if v < last and v * V + e >= start and v * V + e < end:
                            Y_flat[v * V + e] = x[k * V + e] * row_sum[0]
            T.cluster_wait()  # every CTA's copies have landed, so none still reads this CTA's `mine`: it may exit

    return main
