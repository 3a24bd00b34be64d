"""GEMM on Hopper: kernels/gemm.py's tiling, its pipeline written out by hand (`gemm` picks these on sm_90a).

Read `kernels/gemm.py` first: the tiling, the T.Pipelined loop these refine, the rule that picks a schedule, and
the two kernels (`gemm_warp_specialized`, `gemm_split_k`) whose body, `warp_specialized_tiles`, is this file.

`gemm_warp_specialized` (the shipped default) does two things `T.Pipelined` cannot. (a) It waits for the tensor
cores only as far as it must: after issuing step k, a consumer waits until just that step is still running
(`T.wait_wgmma(1)`) and hands back the buffer of step k-1, so the tensor cores never drain between steps (CUTLASS
does the same). (b) It is persistent: one block per SM walks many tiles, so the producer starts loading the next tile
while the consumers finish this one, and the store of a finished tile runs while the next one is being multiplied.
With a short K (8192 × 8192 × 1024: 16 steps a tile) the start and end of each tile are a large part of its time;
here they overlap the work. That took the kernel from 0.90× to 1.02× cuBLAS at 8192 × 8192 × 1024 and from 0.97× to
1.00× at 4096³ on an H200 (bench/README.md).

`gemm_split_k` (`split_k` > 1) is for outputs of few tiles and a long K: 128 × 8192 × 8192 is 64 tiles of 128 × 128,
half the SMs idle, each of the rest walking all 128 steps of K. With split_k = 2, a thread block cluster of two CTAs
shares a tile: each multiplies half of K into its own fp32 accumulator, then they add the halves through distributed
shared memory (Hopper's SM-to-SM copies inside a cluster) and each stores half the tile's rows. No partial goes
through global memory, and the sum is always taken in the same order, so the result does not change from run to run.
"""
import tilelang.language as T


def warp_specialized_tiles(M, N, K, dtype, block_M, block_N, block_K, num_stages, consumers, swizzle_panel, num_sms,
                           epilogue=None, split_k=1, multicast=False):
    """The body of `gemm_warp_specialized`, shared with kernels/gemm_epilogue.py: block `block` of num_sms walks its
    tiles of C = A @ B. `epilogue(value, column_value)`, if given, is what each fp32 element of a finished tile
    becomes before it is rounded and stored; `column_value` is its column's element of `extra`, the macro's last
    argument (a vector of N, such as a bias; 0 past N).
    With split_k > 1 (`gemm_split_k`), `block` is a cluster of split_k CTAs and num_sms the count of clusters,
    one a tile: each CTA multiplies its part of K, and the cluster adds the parts (`add_across_cluster`).
    With multicast, `block` is a cluster of two CTAs and num_sms the count of clusters: the two take tiles of one
    tile column, in neighbouring tile rows, and load each step of B once for both (`gemm_multicast`)."""
    accum_dtype = "float32"
    k_steps = -(-(-(-K // block_K)) // split_k)  # steps of K a CTA takes (its cluster rank's part)
    pair = 2 if multicast else 1  # CTAs of a cluster that share a tile column's step of B
    m_tiles, n_tiles = -(-M // block_M), -(-N // block_N)
    m_units = -(-m_tiles // pair)  # what a block walks: a tile, or with multicast two of a column
    num_tiles = m_units * n_tiles
    rows = block_M // split_k  # rows of a tile that each CTA of a cluster adds up and stores
    # Block b takes tiles b, b + num_sms, b + 2 num_sms, ...: `rounds` of them at most. (An explicit test per
    # round, not a loop of ceildiv(num_tiles - b, num_sms) steps: TileLang 0.1.15 turns a loop it can prove runs
    # at most once into its body run once, also for the blocks that have no tile.)
    rounds = -(-num_tiles // num_sms)
    panel = min(swizzle_panel, n_tiles) if swizzle_panel > 0 else n_tiles  # tile columns walked together

    @T.macro
    def tile_at(t, tile, row_rank):
        # The t-th tile in panel order: `panel` tile columns at a time, down all the rows of C within a panel, so
        # that the 132 tiles in flight at once share a few rows of A and columns of B in L2. The last panel may
        # be narrower.
        first_column = t // (panel * m_units) * panel
        width = T.min(panel, n_tiles - first_column)
        within = t - first_column * m_units
        tile[0] = first_column + within % width  # tile column (bx)
        tile[1] = within // width * pair + row_rank  # tile row (by); with multicast, one of the pair's two

    @T.macro
    def release(empty, slot, rank, tx):
        # The consumers are done with buffer `slot`: its producer may load into it again.
        if multicast:
            # One thread a warpgroup, for both CTAs: a warpgroup's wgmma group completes as a whole (so all its
            # reads of the buffer have), and 256 threads each arriving on the other SM would cost more than a step.
            if tx % 128 == 0:
                T.mbarrier_arrive(empty[slot])
                T.mbarrier_arrive(empty[slot], 1 - rank)
        else:
            T.mbarrier_arrive(empty[slot])  # every consumer thread

    @T.macro
    def finish_tile(C, C_local, C_shared, tile, column_values):
        # The tile's epilogue and store, when this CTA holds all of it (split_k = 1).
        if epilogue is not None:
            # The epilogue, on the fp32 accumulator in registers: each thread touches only the elements it holds,
            # while the producer already loads the next tile's first steps.
            for r, c in T.Parallel(block_M, block_N):
                C_local[r, c] = epilogue(C_local[r, c], column_values[c])
        T.tma_store_wait()  # the previous tile's store has finished reading C_shared
        T.sync_threads(1, consumers)  # (named barrier 1: the consumers only, not the producer)
        T.copy(C_local, C_shared)  # rounded to dtype
        T.sync_threads(1, consumers)
        # One TMA store, not waited for: it runs while the next tile is multiplied. Out-of-range parts of a ragged
        # edge are not written.
        T.tma_copy(C_shared, C[tile[1] * block_M:(tile[1] + 1) * block_M,
                               tile[0] * block_N:(tile[0] + 1) * block_N])

    def cluster_sum(partial, received, rank, r, c):
        # Row r, column c of this CTA's slice: its own part, then the others' in the order of their slots (the
        # same order on every run, so the same rounding).
        total = partial[rank, r, c]
        for slot in range(split_k - 1):  # Python: unrolled into one expression
            total += received[slot, r, c]
        return total

    @T.macro
    def add_across_cluster(C, C_local, partial, received, arrived, tile, rank):
        # 1. The fp32 accumulator into shared memory, slice p (rows p × rows to (p + 1) × rows) for CTA p.
        for r, c in T.Parallel(block_M, block_N):
            partial[r // rows, r % rows, c] = C_local[r, c]
        T.fence_proxy_async()  # these writes are read next by the copy engine (the async proxy), not by threads
        T.sync_threads(1, consumers)
        # 2. One thread sends each other CTA its slice: an SM-to-SM bulk copy into that CTA's `received`, which
        # lands on that CTA's `arrived` barrier. CTA p keeps what CTA p + d sent (rank modulo split_k) in slot
        # d - 1. Then it waits for the slices sent to this CTA.
        if T.get_thread_binding() == 0:
            for d in T.serial(1, split_k):
                p = (rank + split_k - d) % split_k  # the CTA that keeps this one's part in its slot d - 1
                T.copy_cluster(partial[p, :, :], received[d - 1, :, :], dst_block=p, remote_barrier=arrived[0])
        T.mbarrier_wait_parity(arrived[0], 0)
        # 3. This CTA's slice of the tile: the sum of the parts, rounded and stored (a ragged edge's outside
        # rows and columns are not written).
        for r, c in T.Parallel(rows, block_N):
            row = tile[1] * block_M + rank * rows + r
            column = tile[0] * block_N + c
            if row < M and column < N:
                C[row, column] = cluster_sum(partial, received, rank, r, c)

    @T.macro
    def tiles(A, B, C, block, extra):
        A_shared = T.alloc_shared((num_stages, block_M, block_K), dtype)  # a ring of num_stages buffers
        B_shared = T.alloc_shared((num_stages, block_K, block_N), dtype)
        C_local = T.alloc_fragment((block_M, block_N), accum_dtype)
        if split_k == 1:
            C_shared = T.alloc_shared((block_M, block_N), dtype)
            rank = T.block_rank_in_cluster() if multicast else 0  # which of the pair's tile rows
            row_rank, k_rank = rank, 0
        else:
            partial = T.alloc_shared((split_k, rows, block_N), accum_dtype)  # this CTA's fp32 tile, in slices
            received = T.alloc_shared((split_k - 1, rows, block_N), accum_dtype)  # the others' parts of its rows
            arrived = T.alloc_barrier([split_k - 1])  # one arrival a sender, with the bytes it sends
            rank = T.block_rank_in_cluster()  # which part of K this CTA multiplies
            row_rank, k_rank = 0, rank
            # With the cluster_wait below: no CTA sends into another before the receiver's barrier is set up.
            T.cluster_arrive_relaxed()
        # Each buffer has two barriers: `full` (its tiles have arrived; the TMA unit counts their bytes in)
        # and `empty` (the consumers are done with it; the producer may load into it again).
        full = T.alloc_barrier([128] * num_stages)
        if multicast:
            # A buffer of B is written into both CTAs at once: it is empty when the consumers of both are done
            # with it (`release`: each consumer warpgroup arrives on its own CTA's barrier and on the other's).
            # (TileLang syncs the cluster after setting up cluster barriers: neither CTA loads into, or arrives
            # on, the other before its barriers are ready.)
            empty = T.alloc_cluster_barrier([2 * (consumers // 128)] * num_stages)
        else:
            empty = T.alloc_barrier([consumers] * num_stages)
        tile = T.alloc_local((2,), "int32")
        # The tile's columns of `extra`, for the epilogue.
        column_values = T.alloc_fragment((block_N,), dtype) if epilogue is not None else None
        tx = T.get_thread_binding()

        if tx >= consumers:  # the producer warpgroup: TMA loads, num_stages steps ahead, tile after tile
            T.set_max_nreg(40, 0)  # it needs few registers: give them to the consumers
            for i in T.serial(rounds):
                if block + i * num_sms < num_tiles:  # the last round may have no tile for this block
                    tile_at(block + i * num_sms, tile, row_rank)
                    for k in T.serial(k_steps):
                        step = i * k_steps + k  # this block's steps so far: which buffer, which round of it
                        s = step % num_stages
                        T.mbarrier_wait_parity(empty[s], ((step // num_stages) & 1) ^ 1)
                        # Out-of-range rows and columns of a ragged edge read as zero (TMA fills them).
                        kk = k_rank * k_steps + k  # the step of K (past K, the last CTA's tail reads zeros)
                        T.tma_copy(A[tile[1] * block_M:(tile[1] + 1) * block_M,
                                     kk * block_K:(kk + 1) * block_K], A_shared[s, :, :], barrier=full[s])
                        # With multicast, the pair's first CTA loads B into both (the other issues nothing).
                        T.tma_copy(B[kk * block_K:(kk + 1) * block_K,
                                     tile[0] * block_N:(tile[0] + 1) * block_N], B_shared[s, :, :],
                                   barrier=full[s], cluster_mask=0b11 if multicast else None)
                        T.mbarrier_arrive(full[s])
        else:  # the consumer warpgroups: wgmma, one step kept in flight
            T.set_max_nreg(232, 1)
            for i in T.serial(rounds):
                if block + i * num_sms < num_tiles:
                    tile_at(block + i * num_sms, tile, row_rank)
                    if epilogue is not None:  # loaded now, so that the main loop hides the loads' latency
                        for c in T.Parallel(block_N):
                            column = tile[0] * block_N + c
                            column_values[c] = T.if_then_else(column < N, extra[column], 0)
                    T.clear(C_local)
                    for k in T.serial(k_steps):
                        step = i * k_steps + k
                        s = step % num_stages
                        T.mbarrier_wait_parity(full[s], (step // num_stages) & 1)
                        T.wgmma_gemm(A_shared[s, :, :], B_shared[s, :, :], C_local,
                                     policy=T.GemmWarpPolicy.FullRow)
                        T.wait_wgmma(1)  # step k-1 has finished (step k may still run): its buffer goes back
                        if k > 0:
                            release(empty, (step + num_stages - 1) % num_stages, rank, tx)
                    T.wait_wgmma(0)
                    release(empty, (i * k_steps + k_steps - 1) % num_stages, rank, tx)  # the tile's last step
                    if split_k > 1:
                        T.cluster_wait()
                        add_across_cluster(C, C_local, partial, received, arrived, tile, rank)
                    else:
                        finish_tile(C, C_local, C_shared, tile, column_values)
            if split_k == 1:
                T.tma_store_wait()
        if multicast:  # no CTA exits while the other may still arrive on its barriers
            T.cluster_arrive()
            T.cluster_wait()
        if split_k > 1:
            # No CTA exits while a copy may still read its `partial`: every copy has landed once all CTAs are here.
            if tx >= consumers:
                T.cluster_wait()
            T.cluster_arrive()
            T.cluster_wait()

    return tiles
