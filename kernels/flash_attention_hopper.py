"""FlashAttention forward on Hopper: the softmax overlapped with the tensor cores (`overlap=True`, the default).

Read `kernels/flash_attention.py` first: the problem, the online softmax and the plain loop (`plain_forward`) are
there, and this file takes its `mask` and `online_softmax` from it. What follows changes only the order of work.

The overlap (the FlashAttention-3 trick): written plainly, each tile is GEMM → softmax → GEMM, and while the exps
run the tensor cores idle (0.84× SDPA on the H200). Here the P V product of a tile is issued one iteration late,
asynchronously: iteration k starts S = Q K(k)ᵀ and O += P(k-1) V(k-1) with `T.wgmma_gemm` (no implicit wait),
waits only for S (`T.wait_wgmma(1)`: all but the newest group done), and computes the softmax of tile k while P V
still runs; then waits for it (`T.wait_wgmma(0)`) before rescaling O and overwriting P. So V arrives one tile
behind K (at k = 0, P is all zeros and adds nothing). That took the kernel from 0.84× to 0.98× SDPA.

Ping-pong (`pingpong=True`, FlashAttention-3's other trick): the consumer warpgroups take turns to issue their GEMMs
(warpgroup 0, then 1, .., through named barriers), so the tensor cores run one warpgroup's GEMMs while the others do
their softmax, instead of all of them stalling on the same exps at once. It pays where the exps weigh most: at head
dim 64 (P V is half the work it is at 128) with 192-query tiles and three consumer warpgroups, which together took
the kernel from 0.92× to 1.03× SDPA (causal: 0.91× to 0.98×). At head dim 128 it lost 4% (bench/README.md).

The last tile (`extra_step`, on by default): the loop would leave the last tile's P V for after it, on a V tile
loaded there by plain loads while every consumer thread waits. With extra_step the loop runs one step more, whose
only work is that P V, so the last V tile comes through the pipeline like the others, prefetched by TMA.

What the SASS showed (bench/README.md): ptxas, the last compiler stage, schedules the wait for P V
(`WARPGROUP.DEPBAR`) right after the row max, before the exps, so P V overlapped only the max. `fence_wait` and
`two_p` (explained where they are used, in `overlap_steps`) keep the overlap, with `lazy_rescale` (in
`online_softmax`): at head dim 128 they took the kernel from 0.98× to 0.99× SDPA, and causal from 0.98× to 1.03×.
The head-dim-64 presets turn them off (two_p needs registers three warpgroups do not have).
"""
from types import SimpleNamespace

import tilelang.language as T

TURN = 8  # first named barrier of the ping-pong ring (TileLang itself uses the low ids)


def overlap_steps(fa, pingpong, fence_wait, two_p):
    """The steps of the overlapped loop, for this schedule and `kernels/flash_attention_persistent.py`. Each takes
    `blk`, what one thread block holds for its query block (Q_shared, S, acc_o, the row state m, m_prev, rescale,
    row_sum, l; touch, wg and steps, below), this step's K and V tiles and P buffers, the query block bx and k.

    Each step issues its wgmma and waits for all of them before it ends: ptxas follows every path through the loop
    body, and where the tests for "issue" and for "wait" are separate it finds paths (never taken) that read S while
    its wgmma may still run, and then serializes every wgmma (warning C7514; a version written that way ran at
    0.66× SDPA)."""
    block_M, dim, groups = fa.block_M, fa.dim, fa.threads // 128

    @T.macro
    def next_turn(blk, k):
        if pingpong:  # the next warpgroup's turn; after the last warpgroup's last turn, nobody waits
            if blk.wg < groups - 1 or k < blk.steps - 1:
                T.named_barrier_arrive(TURN + (blk.wg + 1) % groups, 256)

    @T.macro
    def s_and_pv(blk, K_shared, V_shared, P, P_next, bx, k):
        # S(k) = Q K(k)ᵀ and O += P(k-1) V(k-1), the softmax of tile k running while P V does.
        T.wgmma_gemm(blk.Q_shared, K_shared, blk.S, transpose_B=True, clear_accum=True,
                     policy=T.GemmWarpPolicy.FullRow)
        T.wgmma_gemm(P, V_shared, blk.acc_o, policy=T.GemmWarpPolicy.FullRow)
        next_turn(blk, k)
        T.wait_wgmma(1)  # S is ready (all but the newest wgmma group are done); P V still runs
        # TileLang hands a stage's buffers back to the producer right after the statement that last reads them.
        # The wgmma above reads K_shared asynchronously, so its last read is made here, past the wait: else the
        # next TMA load could overwrite K while the tensor cores still read it. (The persistent schedule hands
        # its buffers back itself, and has no `touch`.)
        if blk.touch is not None:
            blk.touch[0] = K_shared[0, 0]
        fa.mask(blk.S, bx, k)
        fa.online_softmax(blk.S, blk.m, blk.m_prev, blk.rescale, blk.row_sum, blk.l)  # while P V runs
        if two_p:  # P(k) into the other buffer while P V still reads P(k-1): the rounding runs under P V too
            T.copy(blk.S, P_next)
        if fence_wait:  # ptxas moves no instruction across a fence, so the wait below stays after the exps (the
            T.call_extern("handle", "__threadfence_block")  # consumer threads have no stores pending: it is cheap)
        T.wait_wgmma(0)  # P V is done: O and P may change now
        if blk.touch is not None:
            blk.touch[0] = V_shared[0, 0]  # V's last read, past the wait (as for K above)
        if fa.lazy_rescale:  # O = O * exp(m_prev - m) only in threads where a row's max moved: rarely, after a while
            changed = T.alloc_local((1,), "int32")
            changed[0] = 0
            for i in T.Parallel(block_M):
                changed[0] = changed[0] | T.Cast("int32", blk.rescale[i] != 1.0)
            if changed[0] != 0:
                for i, j in T.Parallel(block_M, dim):
                    blk.acc_o[i, j] *= blk.rescale[i]
        else:
            for i, j in T.Parallel(block_M, dim):
                blk.acc_o[i, j] *= blk.rescale[i]  # O = O * exp(m_prev - m), ready for P(k) V(k)
        if not two_p:
            T.copy(blk.S, P_next)

    @T.macro
    def pv_only(blk, K_shared, V_shared, P, k):
        # The extra step: the last tile's P V.
        T.wgmma_gemm(P, V_shared, blk.acc_o, policy=T.GemmWarpPolicy.FullRow)
        next_turn(blk, k)
        T.wait_wgmma(0)
        if blk.touch is not None:
            blk.touch[0] = K_shared[0, 0]
            blk.touch[0] = V_shared[0, 0]

    @T.macro
    def s_only(blk, K_shared, P_next, bx, k):
        # The first step of a query block in the persistent schedule: S(0) alone (O is zero, no P V to issue).
        T.wgmma_gemm(blk.Q_shared, K_shared, blk.S, transpose_B=True, clear_accum=True,
                     policy=T.GemmWarpPolicy.FullRow)
        T.wait_wgmma(0)
        fa.mask(blk.S, bx, k)
        fa.online_softmax(blk.S, blk.m, blk.m_prev, blk.rescale, blk.row_sum, blk.l)
        T.copy(blk.S, P_next)

    return SimpleNamespace(s_and_pv=s_and_pv, pv_only=pv_only, s_only=s_only)


def overlapped_forward(fa, pingpong, extra_step, fence_wait, two_p):
    """One thread block per query block (a grid of them), its loop overlapping the softmax with P V."""
    batch, heads, seq_len, dim, dtype, accum_dtype = fa.batch, fa.heads, fa.seq_len, fa.dim, fa.dtype, fa.accum_dtype
    block_M, block_N, num_stages, threads, shape = fa.block_M, fa.block_N, fa.num_stages, fa.threads, fa.shape
    steps_of = overlap_steps(fa, pingpong, fence_wait, two_p)

    @T.macro
    def step(blk, K_shared, V_shared, P, P_next, bx, k, n_tiles):
        if extra_step:
            if k < n_tiles:
                steps_of.s_and_pv(blk, K_shared, V_shared, P, P_next, bx, k)
            else:
                steps_of.pv_only(blk, K_shared, V_shared, P, k)
        else:
            steps_of.s_and_pv(blk, K_shared, V_shared, P, P_next, bx, k)

    @T.prim_func
    def main(Q: T.Tensor(shape, dtype), K: T.Tensor(fa.kv_shape, dtype), V: T.Tensor(fa.kv_shape, dtype),
             Output: T.Tensor(shape, dtype)):
        with T.Kernel(T.ceildiv(seq_len, block_M), heads, batch, threads=threads) as (bx, by, bz):
            T.annotate_pass_configs({"tl.enable_fast_math": True})  # exp2 as ex2.approx.ftz (see plain_forward)
            Q_shared = T.alloc_shared((block_M, dim), dtype)
            K_shared = T.alloc_shared((block_N, dim), dtype)
            V_shared = T.alloc_shared((block_N, dim), dtype)
            O_shared = T.alloc_shared((block_M, dim), dtype)
            S = T.alloc_fragment((block_M, block_N), accum_dtype)
            P = T.alloc_fragment((block_M, block_N), dtype)  # P(k) (at even k with two_p)
            acc_o = T.alloc_fragment((block_M, dim), accum_dtype)
            m = T.alloc_fragment((block_M,), accum_dtype)
            m_prev = T.alloc_fragment((block_M,), accum_dtype)
            rescale = T.alloc_fragment((block_M,), accum_dtype)
            row_sum = T.alloc_fragment((block_M,), accum_dtype)
            l = T.alloc_fragment((block_M,), accum_dtype)

            T.copy(Q[bz, bx * block_M:(bx + 1) * block_M, by, :], Q_shared)
            T.fill(acc_o, 0)
            T.fill(l, 0)
            T.fill(m, -T.infinity(accum_dtype))

            n_tiles = fa.key_tiles(bx)
            # extra_step: one step more than there are tiles, so the last tile's V comes through the pipeline,
            # prefetched, instead of being loaded after the loop while every thread waits for it.
            steps = n_tiles + 1 if extra_step else n_tiles
            touch = T.alloc_local((1,), dtype)
            if two_p:
                P_odd = T.alloc_fragment((block_M, block_N), dtype)  # P(k) at odd k
                T.fill(P_odd, 0)  # P(-1): the P V issued at k = 0 adds nothing
            else:
                T.fill(P, 0)  # P(-1): the P V issued at k = 0 adds nothing
            wg = T.get_thread_binding() // 128 if pingpong else 0  # this consumer warpgroup (from 0 in the loop)
            # T.meta_var: a Python value inside the kernel (no variable of its own): what the steps work on
            blk = T.meta_var(SimpleNamespace(Q_shared=Q_shared, S=S, acc_o=acc_o, m=m, m_prev=m_prev,
                                             rescale=rescale, row_sum=row_sum, l=l, touch=touch, wg=wg,
                                             steps=steps))
            for k in T.Pipelined(steps, num_stages=num_stages):
                kk = T.min(k, n_tiles - 1) if extra_step else k  # extra step: the last K tile again (unused)
                T.copy(K[bz, kk * block_N:(kk + 1) * block_N, by // fa.group_size, :], K_shared)
                prev = T.max(k - 1, 0)
                T.copy(V[bz, prev * block_N:(prev + 1) * block_N, by // fa.group_size, :], V_shared)  # 1 tile behind
                if pingpong:  # the consumer warpgroups issue their GEMMs in turn: 0, 1, .., 0, 1, ..
                    # Each turn's barrier has two parties: the warpgroup before arrives, this one waits.
                    # (Inside the loop, where TileLang numbers consumer threads from 0; outside it, not.)
                    if k == 0 and wg == threads // 128 - 1:
                        T.named_barrier_arrive(TURN, 256)  # warpgroup 0 goes first
                    # bar.sync as an extern: the pipeline pass moves T.sync_threads to the producer
                    T.call_extern("handle", "tl::__sync_thread_partial", TURN + wg, 256)
                if two_p:  # P(k) alternates between two buffers: P at even k, P_odd at odd k
                    if k % 2 == 0:
                        step(blk, K_shared, V_shared, P_odd, P, bx, k, n_tiles)
                    else:
                        step(blk, K_shared, V_shared, P, P_odd, bx, k, n_tiles)
                else:
                    step(blk, K_shared, V_shared, P, P, bx, k, n_tiles)
            if not extra_step:  # the last tile's P V, on a V tile loaded here (O_shared is free until the end)
                V_last = O_shared if block_M == block_N else T.alloc_shared((block_N, dim), dtype)
                last = n_tiles - 1
                T.copy(V[bz, last * block_N:(last + 1) * block_N, by // fa.group_size, :], V_last)
                if two_p:
                    if last % 2 == 0:
                        T.gemm(P, V_last, acc_o, policy=T.GemmWarpPolicy.FullRow)
                    else:
                        T.gemm(P_odd, V_last, acc_o, policy=T.GemmWarpPolicy.FullRow)
                else:
                    T.gemm(P, V_last, acc_o, policy=T.GemmWarpPolicy.FullRow)

            for i, j in T.Parallel(block_M, dim):
                acc_o[i, j] /= l[i]
            T.copy(acc_o, O_shared)
            T.copy(O_shared, Output[bz, bx * block_M:(bx + 1) * block_M, by, :])  # rows past seq_len: not written

    return main
