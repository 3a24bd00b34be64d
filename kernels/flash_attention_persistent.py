"""FlashAttention forward on Hopper, persistent (`persistent=True`): one block per SM walks many query blocks.

Read `kernels/flash_attention.py` (the loop) and `kernels/flash_attention_hopper.py` (its overlapped steps, which
this schedule reuses) first.

Why: with a grid of query blocks, each pays for its launch, its Q load, a first S with nothing to overlap and its O
store while the tensor cores idle: measured, 1.79-1.83 µs per key tile but 3.1-4.5 µs fixed per query block (SDPA:
1.85-1.89 and 0.5-1.9), so 0.99× SDPA at 4096 tokens. Here one block per SM walks query blocks in turn, written
out by hand like kernels/gemm.py's warp-specialized GEMM: a producer warpgroup issues the TMA loads (Q once per
query block, then K(k) and V(k-1) into a ring of num_stages buffers guarded by full/empty mbarriers) and runs on
into the next query block while the consumers finish this one; the O store is left in flight under the next
block's work. The first step of a query block issues S(0) alone (no P V of zeros), the last one the last P V alone
(the extra step is built in). Fixed cost 1.7 µs, 1.02× SDPA (fp16 and bf16), the default of the non-causal
head-dim-128 presets. Causal query blocks differ in length: walked straight, a fixed share of them per SM left SMs
idle at the end (0.95×, where the grid's block scheduler, handing the next block to whichever SM is free, gave
1.03×). Walked in rounds that snake (`unit` below), they beat the grid on short sequences, where the fixed costs
weigh most (512 tokens: 0.97× SDPA against the grid's 0.73×; 2048: 1.05× against 0.97×); from 4096 tokens the two
are level or the grid ahead (the rule in flash_attention.py). Ping-pong is not written for this schedule: its
consumer warpgroups issue their GEMMs together.
"""
from types import SimpleNamespace

import tilelang.language as T

from kernels.flash_attention_hopper import overlap_steps


def persistent_forward(fa, fence_wait, two_p, num_sms):
    batch, heads, seq_len, dim, dtype, accum_dtype = fa.batch, fa.heads, fa.seq_len, fa.dim, fa.dtype, fa.accum_dtype
    block_M, block_N, num_stages, threads, shape = fa.block_M, fa.block_N, fa.num_stages, fa.threads, fa.shape
    steps_of = overlap_steps(fa, pingpong=False, fence_wait=fence_wait, two_p=two_p)
    q_blocks = -(-seq_len // block_M)
    num_tiles = q_blocks * heads * batch
    rounds = -(-num_tiles // num_sms)  # query blocks per block of the grid, at most

    def unit(block, i):
        # The query block that grid block `block` takes in round i. Non-causal: block + i × num_sms. Causal blocks
        # differ in length (the last query block of a head the longest), so the rounds snake: even rounds hand out
        # the units left to right, odd ones right to left, and a block that took a long unit in one round takes a
        # short one in the next (with 132 SMs and 4 query blocks a head, a straight walk gave SM b the same length
        # every round).
        if not fa.causal:
            return block + i * num_sms
        return i * num_sms + T.if_then_else(i % 2 == 0, block, num_sms - 1 - block)

    @T.macro
    def tile_of(t, tile):
        # Consecutive t are the query blocks of one head: the 132 in flight at once read the keys and values of a
        # few heads, which stay in L2. Causal: each head's longest (last) query blocks first.
        tile[0] = (q_blocks - 1 - t % q_blocks) if fa.causal else t % q_blocks  # bx: query block
        tile[1] = t // q_blocks % heads  # by: head
        tile[2] = t // (q_blocks * heads)  # bz: batch

    @T.macro
    def persistent_step(blk, K_shared, V_shared, P, P_next, bx, k, n_tiles):
        if k == 0:
            steps_of.s_only(blk, K_shared, P_next, bx, k)
        else:
            if k < n_tiles:
                steps_of.s_and_pv(blk, K_shared, V_shared, P, P_next, bx, k)
            else:
                steps_of.pv_only(blk, K_shared, V_shared, P, k)

    @T.prim_func
    def main_persistent(Q: T.Tensor(shape, dtype), K: T.Tensor(fa.kv_shape, dtype), V: T.Tensor(fa.kv_shape, dtype),
                        Output: T.Tensor(shape, dtype)):
        with T.Kernel(num_sms, threads=threads + 128) as block:
            T.annotate_pass_configs({"tl.enable_fast_math": True})
            Q_shared = T.alloc_shared((block_M, dim), dtype)
            K_shared = T.alloc_shared((num_stages, block_N, dim), dtype)
            V_shared = T.alloc_shared((num_stages, block_N, dim), dtype)
            O_shared = T.alloc_shared((block_M, dim), dtype)  # its own: the store runs under the next block
            S = T.alloc_fragment((block_M, block_N), accum_dtype)
            P = T.alloc_fragment((block_M, block_N), dtype)  # P(k) (at even k with two_p)
            acc_o = T.alloc_fragment((block_M, dim), accum_dtype)
            m = T.alloc_fragment((block_M,), accum_dtype)
            m_prev = T.alloc_fragment((block_M,), accum_dtype)
            rescale = T.alloc_fragment((block_M,), accum_dtype)
            row_sum = T.alloc_fragment((block_M,), accum_dtype)
            l = T.alloc_fragment((block_M,), accum_dtype)
            # `full`: the stage's K and V have arrived (the TMA unit counts their bytes in); `empty`: the consumers
            # are done with it. q_full / q_empty do the same for Q, once per query block.
            full = T.alloc_barrier([128] * num_stages)
            empty = T.alloc_barrier([threads] * num_stages)
            q_full = T.alloc_barrier([128])
            q_empty = T.alloc_barrier([threads])
            tile = T.alloc_local((3,), "int32")
            step = T.alloc_local((1,), "int32")  # steps this block has run over all its query blocks
            step[0] = 0
            tx = T.get_thread_binding()

            if tx >= threads:  # the producer warpgroup
                T.set_max_nreg(24, 0)
                for i in T.serial(rounds):
                    if unit(block, i) < num_tiles:
                        tile_of(unit(block, i), tile)
                        n_tiles = fa.key_tiles(tile[0])
                        # Q of this query block, once the consumers' last S of the one before is done
                        T.mbarrier_wait_parity(q_empty[0], (i & 1) ^ 1)
                        T.tma_copy(Q[tile[2], tile[0] * block_M:(tile[0] + 1) * block_M, tile[1], :], Q_shared,
                                   barrier=q_full[0])
                        T.mbarrier_arrive(q_full[0])
                        for k in T.serial(n_tiles + 1):  # step k: K(k) (none at the last) and V(k-1) (none at 0)
                            st = step[0] % num_stages
                            T.mbarrier_wait_parity(empty[st], ((step[0] // num_stages) & 1) ^ 1)
                            if k < n_tiles:  # keys past seq_len arrive as zeros
                                T.tma_copy(K[tile[2], k * block_N:(k + 1) * block_N, tile[1] // fa.group_size, :],
                                           K_shared[st, :, :],
                                           barrier=full[st])
                            if k > 0:
                                T.tma_copy(V[tile[2], (k - 1) * block_N:k * block_N, tile[1] // fa.group_size, :],
                                           V_shared[st, :, :], barrier=full[st])
                            T.mbarrier_arrive(full[st])
                            step[0] += 1
            else:  # the consumer warpgroups
                T.set_max_nreg(240 if threads <= 256 else 160, 1)  # what the register file holds: 64K a SM
                if two_p:
                    P_odd = T.alloc_fragment((block_M, block_N), dtype)  # P(k) at odd k
                    T.fill(P_odd, 0)  # never read before it is written, but TileLang cannot tell
                # T.meta_var: a Python value inside the kernel; the buffers the steps work on (no touch: the
                # buffers go back to the producer through `empty`, below)
                blk = T.meta_var(SimpleNamespace(Q_shared=Q_shared, S=S, acc_o=acc_o, m=m, m_prev=m_prev,
                                                 rescale=rescale, row_sum=row_sum, l=l, touch=None,
                                                 wg=0, steps=0))
                for i in T.serial(rounds):
                    if unit(block, i) < num_tiles:
                        tile_of(unit(block, i), tile)
                        n_tiles = fa.key_tiles(tile[0])
                        T.fill(acc_o, 0)
                        T.fill(l, 0)
                        T.fill(m, -T.infinity(accum_dtype))
                        T.mbarrier_wait_parity(q_full[0], i & 1)
                        for k in T.serial(n_tiles + 1):
                            st = step[0] % num_stages
                            T.mbarrier_wait_parity(full[st], (step[0] // num_stages) & 1)
                            if not two_p:  # one P: P V reads it, then P(k) overwrites it
                                persistent_step(blk, K_shared[st, :, :], V_shared[st, :, :], P, P, tile[0], k, n_tiles)
                            elif k % 2 == 0:  # P V reads P(k-1) from P_odd, P(k) goes into P
                                persistent_step(blk, K_shared[st, :, :], V_shared[st, :, :], P_odd, P,
                                                tile[0], k, n_tiles)
                            else:
                                persistent_step(blk, K_shared[st, :, :], V_shared[st, :, :], P, P_odd,
                                                tile[0], k, n_tiles)
                            T.mbarrier_arrive(empty[st])  # every wgmma of this step has finished
                            if k == n_tiles - 1:
                                T.mbarrier_arrive(q_empty[0])  # the last S is done: the producer may load the next Q
                            step[0] += 1
                        for i2, j in T.Parallel(block_M, dim):
                            acc_o[i2, j] /= l[i2]
                        T.tma_store_wait()  # the previous query block's store has finished reading O_shared
                        T.sync_threads(1, threads)  # (named barrier 1: the consumers only)
                        T.copy(acc_o, O_shared)
                        T.sync_threads(1, threads)
                        # One TMA store, not waited for; rows past a ragged seq_len are not written.
                        T.tma_copy(O_shared, Output[tile[2], tile[0] * block_M:(tile[0] + 1) * block_M, tile[1], :])
                T.tma_store_wait()

    return main_persistent
