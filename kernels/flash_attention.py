"""FlashAttention forward: O = softmax(Q Kᵀ / √dim) V per batch and head, with an optional causal mask.

The seq_len × seq_len score matrix is never stored. Each thread block owns block_M queries of one head and streams
the keys and values past them in tiles of block_N, keeping for each query row a running max m, a running sum ℓ of
exp(s - m) and an unnormalized output (the "online softmax"). When a tile raises the max from m to m', what was
summed so far is rescaled by exp(m - m'), so the end result is exact. Per tile, two tensor-core GEMMs:
S = Q Kᵀ (block_M × block_N, fp32), then, with P = exp(S - m) rounded to fp16/bf16, O += P V.

The Hopper point: `T.Pipelined` makes the K and V tile copies TMA loads issued by a producer warpgroup, num_stages
tiles ahead, while the consumer warpgroups run both GEMMs as wgmma and the softmax between them on the registers
that hold S. Everything a block touches after loading its Q tile streams through shared memory once.

Overlapping the softmax with the tensor cores (the FlashAttention-3 trick): written plainly, each tile is
GEMM → softmax → GEMM, and while the exps run the tensor cores idle (that version ran at 0.84× SDPA on the H200).
Here the P V product of a tile is issued one iteration late, asynchronously: iteration k starts S = Q K(k)ᵀ and
O += P(k-1) V(k-1) with `T.wgmma_gemm` (no implicit wait), waits only for S (`T.wait_wgmma(1)`: all but the
newest group done), and computes the softmax of tile k while P V still runs; then waits for it (`T.wait_wgmma(0)`)
before rescaling O and overwriting P. So V arrives one tile behind K (at k = 0, P is all zeros and adds nothing),
and the last tile's P V is done after the loop. That took the kernel from 0.84× to 0.98× SDPA. `overlap=False`
runs the plain loop instead: flip it and compare (and use it before Hopper: `T.wgmma_gemm` needs sm_90a).

Ping-pong (`pingpong=True`, FlashAttention-3's other trick): the consumer warpgroups take turns to issue their GEMMs
(warpgroup 0, then 1, .., through named barriers), so the tensor cores run one warpgroup's GEMMs while the others do
their softmax, instead of all of them stalling on the same exps at once. It pays where the exps weigh most: at head
dim 64 (P V is half the work it is at 128) with 192-query tiles and three consumer warpgroups, which together took
the kernel from 0.92× to 1.03× SDPA (causal: 0.91× to 0.98×). At head dim 128 it lost 4% (bench/README.md).

The last tile (`extra_step`, on by default): the loop above would leave the last tile's P V for after it, on a V tile
loaded there by plain loads while every consumer thread waits. With extra_step the loop runs one step more, whose
only work is that P V, so the last V tile comes through the pipeline like the others, prefetched by TMA. The loop
is written as whole steps, each waiting for the wgmma it issued: the comment above `step_s_and_pv` says why (ptxas
serializes every wgmma otherwise).

What the SASS showed (bench/README.md): ptxas, the last compiler stage, schedules the wait for P V
(`WARPGROUP.DEPBAR`) right after the row max, before the exps, so P V overlapped only the max. Three options keep
the overlap, all on by default at head dim 128, where they took the kernel from 0.98× to 0.99× SDPA, and causal
from 0.98× to 1.03×:
- `fence_wait`: a `__threadfence_block()` just before the wait. ptxas moves no instruction across it, so the wait
  stays after the exps (the consumer threads have no stores pending, so the fence itself is cheap).
- `two_p`: P(k) is rounded into a second buffer while P V still reads P(k-1), so the rounding is done under P V too.
- `lazy_rescale` (as FlashAttention-4 does): a row keeps its old max unless the new one is larger by more than 8
  in log2 units, so the exps reach at most 2^8 and O and ℓ, which share the max, give the same O / ℓ; a thread
  rescales O only when one of its rows took a new max, which after the first tiles is rare.
The head-dim-64 presets turn them off (two_p needs registers three warpgroups do not have).

Persistent (`persistent=True`, the default of the non-causal head-dim-128 presets): with the grid above, each query
block pays for its launch, its Q load, a first S with nothing to overlap and its O store while the tensor cores
idle: measured, 1.79-1.83 µs per key tile but 3.1-4.5 µs fixed per query block (SDPA: 1.85-1.89 and 0.5-1.9), so
0.99× SDPA at 4096 tokens. The persistent schedule, written out by hand like kernels/gemm.py's, launches one block
per SM that walks query blocks in turn: its producer warpgroup loads the next Q and K while the consumers finish
this block, and the O store runs under the next block's work. Fixed cost 1.7 µs, 1.02× SDPA (fp16 and bf16). Causal
stays on the grid: its query blocks differ in length, and a fixed share of them per SM left SMs idle at the end
(0.95×), where the GPU's own block scheduler hands out the next block to whichever SM is free (1.03×).

Layout (batch, seq_len, heads, dim), "bshd": what a fused QKV projection produces without a transpose, and the
layout FlashAttention itself uses; SDPA takes (batch, heads, seq_len, dim), so its baseline gets transposed views.
The softmax scale 1/√dim is folded with log2(e) into one multiply, so the exponential is the native exp2.
Causal: query i sees keys j ≤ i, so a block stops at its diagonal tile and masks only the tiles that reach the
diagonal; that halves the work.
Ragged seq_len: keys past the end are masked to -inf, query rows past the end are computed but never written.

Run it alone:  python kernels/flash_attention.py   (checks it against PyTorch and times it against SDPA on a GPU)
"""
import math

import torch
import torch.nn.functional as F
import tilelang.language as T


def flash_attention(batch=8, heads=32, seq_len=4096, dim=128, causal=False, dtype="float16",
                    block_M=128, block_N=128, num_stages=2, threads=256, overlap=True, pingpong=False,
                    extra_step=True, fence_wait=True, two_p=True, lazy_rescale=True, persistent=False,
                    num_sms=132):
    """`threads`: the consumer threads (two warpgroups at the default); a 128-thread producer warpgroup comes on top.
    `num_sms`: blocks of the persistent schedule, one per SM (132 on an H100 SXM or H200;
    the playground sets it to the count of the GPU present)."""
    accum_dtype = "float32"
    TURN = 8  # first named barrier of the ping-pong ring (TileLang itself uses the low ids)
    scale = (1.0 / math.sqrt(dim)) * 1.4426950408889634  # 1/√dim and log2(e): exp(x/√d) = exp2(x * scale)
    shape = (batch, seq_len, heads, dim)

    def key_tiles(bx):
        """The key tiles query block bx reads. Causal: tiles past the diagonal hold only masked keys, so they are
        skipped altogether."""
        if causal:
            return T.min(T.ceildiv(seq_len, block_N), T.ceildiv((bx + 1) * block_M, block_N))
        return T.ceildiv(seq_len, block_N)

    @T.macro
    def mask(S, bx, k):
        # The tests on `causal` and `seq_len` are decided when the kernel is built, those on k per tile on the GPU.
        # Causal: only tiles that reach the diagonal hold masked keys; keys past a ragged end lie past every real
        # query, so the causal mask covers them too.
        if causal:
            if (k + 1) * block_N > bx * block_M:
                for i, j in T.Parallel(block_M, block_N):
                    S[i, j] = T.if_then_else(bx * block_M + i >= k * block_N + j, S[i, j], -T.infinity(accum_dtype))
        elif seq_len % block_N != 0:
            if (k + 1) * block_N > seq_len:  # only the last tile reaches past the end
                for i, j in T.Parallel(block_M, block_N):
                    S[i, j] = T.if_then_else(k * block_N + j < seq_len, S[i, j], -T.infinity(accum_dtype))

    @T.macro
    def online_softmax(S, m, m_prev, rescale, row_sum, l):
        # Every row sees at least one unmasked key in its first tile (key 0), so m is finite from then on and
        # m_prev - m is never -inf - (-inf).
        T.copy(m, m_prev)
        T.reduce_max(S, m, dim=1, clear=False)  # the max over this tile and all before it
        if lazy_rescale:  # keep the old max unless the new one is larger by more than 8 in log2 units
            for i in T.Parallel(block_M):
                m[i] = T.if_then_else((m[i] - m_prev[i]) * scale > 8.0, m[i], m_prev[i])
        for i in T.Parallel(block_M):
            rescale[i] = T.exp2((m_prev[i] - m[i]) * scale)
        for i, j in T.Parallel(block_M, block_N):
            S[i, j] = T.exp2(S[i, j] * scale - m[i] * scale)
        T.reduce_sum(S, row_sum, dim=1)
        for i in T.Parallel(block_M):
            l[i] = l[i] * rescale[i] + row_sum[i]

    # The steps of the overlapped loop (below). Each issues its wgmma and waits for all of them before it ends:
    # ptxas follows every path through the loop body, and where the tests for "issue" and for "wait" are separate
    # it finds paths (never taken) that read S while its wgmma may still run, and then serializes every wgmma
    # (warning C7514; a version written that way ran at 0.66× SDPA).
    @T.macro
    def next_turn(wg, groups, k, steps):
        if pingpong:  # the next warpgroup's turn; after the last warpgroup's last turn, nobody waits
            if wg < groups - 1 or k < steps - 1:
                T.named_barrier_arrive(TURN + (wg + 1) % groups, 256)

    @T.macro
    def step_s_and_pv(Q_shared, K_shared, V_shared, S, P, P_next, acc_o, touch, m, m_prev, rescale, row_sum, l, bx,
                      k, wg, groups, steps):
        # S(k) = Q K(k)ᵀ and O += P(k-1) V(k-1), the softmax of tile k running while P V does.
        T.wgmma_gemm(Q_shared, K_shared, S, transpose_B=True, clear_accum=True, policy=T.GemmWarpPolicy.FullRow)
        T.wgmma_gemm(P, V_shared, acc_o, policy=T.GemmWarpPolicy.FullRow)
        next_turn(wg, groups, k, steps)
        T.wait_wgmma(1)  # S is ready (all but the newest wgmma group are done); P V still runs
        # TileLang hands a stage's buffers back to the producer right after the statement that last reads them.
        # The wgmma above reads K_shared asynchronously, so its last read is made here, past the wait: else the
        # next TMA load could overwrite K while the tensor cores still read it.
        if touch is not None:
            touch[0] = K_shared[0, 0]
        mask(S, bx, k)
        online_softmax(S, m, m_prev, rescale, row_sum, l)  # while P V runs
        if two_p:  # P(k) into the other buffer while P V still reads P(k-1)
            T.copy(S, P_next)
        if fence_wait:  # ptxas moves no instruction across a fence: the wait below stays after the exps
            T.call_extern("handle", "__threadfence_block")
        T.wait_wgmma(0)  # P V is done: O and P may change now
        if touch is not None:
            touch[0] = V_shared[0, 0]  # V's last read, past the wait (as for K above)
        if lazy_rescale:  # O = O * exp(m_prev - m) only in threads where a row's max moved: rarely, after a while
            changed = T.alloc_local((1,), "int32")
            changed[0] = 0
            for i in T.Parallel(block_M):
                changed[0] = changed[0] | T.Cast("int32", rescale[i] != 1.0)
            if changed[0] != 0:
                for i, j in T.Parallel(block_M, dim):
                    acc_o[i, j] *= rescale[i]
        else:
            for i, j in T.Parallel(block_M, dim):
                acc_o[i, j] *= rescale[i]  # O = O * exp(m_prev - m), ready for P(k) V(k)
        if not two_p:
            T.copy(S, P_next)

    @T.macro
    def step_pv_only(K_shared, V_shared, P, acc_o, touch, k, wg, groups, steps):
        # The extra step: the last tile's P V.
        T.wgmma_gemm(P, V_shared, acc_o, policy=T.GemmWarpPolicy.FullRow)
        next_turn(wg, groups, k, steps)
        T.wait_wgmma(0)
        if touch is not None:
            touch[0] = K_shared[0, 0]
            touch[0] = V_shared[0, 0]

    @T.macro
    def step_s_only(Q_shared, K_shared, S, P_next, m, m_prev, rescale, row_sum, l, bx, k):
        # The first step of a tile in the persistent schedule: S(0) alone (O is zero, there is no P V to issue).
        T.wgmma_gemm(Q_shared, K_shared, S, transpose_B=True, clear_accum=True, policy=T.GemmWarpPolicy.FullRow)
        T.wait_wgmma(0)
        mask(S, bx, k)
        online_softmax(S, m, m_prev, rescale, row_sum, l)
        T.copy(S, P_next)

    @T.macro
    def step(Q_shared, K_shared, V_shared, S, P, P_next, acc_o, touch, m, m_prev, rescale, row_sum, l, bx, k, wg,
             groups, steps, n_tiles):
        if extra_step:
            if k < n_tiles:
                step_s_and_pv(Q_shared, K_shared, V_shared, S, P, P_next, acc_o, touch, m, m_prev, rescale, row_sum,
                              l, bx, k, wg, groups, steps)
            else:
                step_pv_only(K_shared, V_shared, P, acc_o, touch, k, wg, groups, steps)
        else:
            step_s_and_pv(Q_shared, K_shared, V_shared, S, P, P_next, acc_o, touch, m, m_prev, rescale, row_sum, l,
                          bx, k, wg, groups, steps)

    # ---- The persistent schedule (persistent=True): one block per SM walks many query blocks -------------------
    # Written out by hand, like kernels/gemm.py's warp-specialized GEMM: a producer warpgroup issues the TMA loads
    # (Q once per query block, then K(k) and V(k-1) into a ring of num_stages buffers guarded by full/empty
    # mbarriers) and runs on into the next query block while the consumers finish this one; the O store is left
    # in flight under the next block's work. What that hides: a block of the grid schedule spends 3 to 4.5 µs
    # (of 61 at 4096 tokens) on launch, its Q load, its first S alone and its O store, all with the tensor cores
    # idle (bench/README.md). Here the first step of a query block issues S(0) alone
    # (no P V of zeros), the last one the last P V alone.
    q_blocks = -(-seq_len // block_M)
    num_tiles = q_blocks * heads * batch
    rounds = -(-num_tiles // num_sms)  # query blocks per block of the grid, at most

    @T.macro
    def tile_of(t, tile):
        # Consecutive t are the query blocks of one head: the 132 in flight at once read the keys and values of a
        # few heads, which stay in L2. Causal: each head's longest (last) query blocks first.
        tile[0] = (q_blocks - 1 - t % q_blocks) if causal else t % q_blocks  # bx: query block
        tile[1] = t // q_blocks % heads  # by: head
        tile[2] = t // (q_blocks * heads)  # bz: batch

    @T.macro
    def persistent_step(Q_shared, K_shared, V_shared, S, P, P_next, acc_o, m, m_prev, rescale, row_sum, l, bx, k,
                        n_tiles):
        if k == 0:
            step_s_only(Q_shared, K_shared, S, P_next, m, m_prev, rescale, row_sum, l, bx, k)
        else:
            if k < n_tiles:
                step_s_and_pv(Q_shared, K_shared, V_shared, S, P, P_next, acc_o, None, m, m_prev, rescale, row_sum,
                              l, bx, k, 0, 1, 0)
            else:
                step_pv_only(K_shared, V_shared, P, acc_o, None, k, 0, 1, 0)

    @T.prim_func
    def main_persistent(Q: T.Tensor(shape, dtype), K: T.Tensor(shape, dtype), V: T.Tensor(shape, dtype),
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
                    if block + i * num_sms < num_tiles:
                        tile_of(block + i * num_sms, tile)
                        n_tiles = key_tiles(tile[0])
                        # Q of this query block, once the consumers' last S of the one before is done
                        T.mbarrier_wait_parity(q_empty[0], (i & 1) ^ 1)
                        T.tma_copy(Q[tile[2], tile[0] * block_M:(tile[0] + 1) * block_M, tile[1], :], Q_shared,
                                   barrier=q_full[0])
                        T.mbarrier_arrive(q_full[0])
                        for k in T.serial(n_tiles + 1):  # step k: K(k) (none at the last) and V(k-1) (none at 0)
                            st = step[0] % num_stages
                            T.mbarrier_wait_parity(empty[st], ((step[0] // num_stages) & 1) ^ 1)
                            if k < n_tiles:  # keys past seq_len arrive as zeros
                                T.tma_copy(K[tile[2], k * block_N:(k + 1) * block_N, tile[1], :], K_shared[st, :, :],
                                           barrier=full[st])
                            if k > 0:
                                T.tma_copy(V[tile[2], (k - 1) * block_N:k * block_N, tile[1], :],
                                           V_shared[st, :, :], barrier=full[st])
                            T.mbarrier_arrive(full[st])
                            step[0] += 1
            else:  # the consumer warpgroups
                T.set_max_nreg(240 if threads <= 256 else 160, 1)  # what the register file holds: 64K a SM
                if two_p:
                    P_odd = T.alloc_fragment((block_M, block_N), dtype)  # P(k) at odd k
                    T.fill(P_odd, 0)  # never read before it is written, but TileLang cannot tell
                for i in T.serial(rounds):
                    if block + i * num_sms < num_tiles:
                        tile_of(block + i * num_sms, tile)
                        n_tiles = key_tiles(tile[0])
                        T.fill(acc_o, 0)
                        T.fill(l, 0)
                        T.fill(m, -T.infinity(accum_dtype))
                        T.mbarrier_wait_parity(q_full[0], i & 1)
                        for k in T.serial(n_tiles + 1):
                            st = step[0] % num_stages
                            T.mbarrier_wait_parity(full[st], (step[0] // num_stages) & 1)
                            if not two_p:  # one P: P V reads it, then P(k) overwrites it
                                persistent_step(Q_shared, K_shared[st, :, :], V_shared[st, :, :], S, P, P, acc_o,
                                                m, m_prev, rescale, row_sum, l, tile[0], k, n_tiles)
                            elif k % 2 == 0:  # P V reads P(k-1) from P_odd, P(k) goes into P
                                persistent_step(Q_shared, K_shared[st, :, :], V_shared[st, :, :], S, P_odd, P, acc_o,
                                                m, m_prev, rescale, row_sum, l, tile[0], k, n_tiles)
                            else:
                                persistent_step(Q_shared, K_shared[st, :, :], V_shared[st, :, :], S, P, P_odd, acc_o,
                                                m, m_prev, rescale, row_sum, l, tile[0], k, n_tiles)
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

    if persistent and overlap and not pingpong:  # (with either of those, the grid schedule below runs)
        return main_persistent

    @T.prim_func
    def main(Q: T.Tensor(shape, dtype), K: T.Tensor(shape, dtype), V: T.Tensor(shape, dtype),
             Output: T.Tensor(shape, dtype)):
        with T.Kernel(T.ceildiv(seq_len, block_M), heads, batch, threads=threads) as (bx, by, bz):
            # exp2 in its fast form (ex2.approx.ftz): the exps are the softmax's critical path, and fp32 exps of
            # scores already shifted by their row max lose nothing that the fp16 P rounding keeps.
            T.annotate_pass_configs({"tl.enable_fast_math": True})
            Q_shared = T.alloc_shared((block_M, dim), dtype)
            K_shared = T.alloc_shared((block_N, dim), dtype)
            V_shared = T.alloc_shared((block_N, dim), dtype)
            O_shared = T.alloc_shared((block_M, dim), dtype)
            S = T.alloc_fragment((block_M, block_N), accum_dtype)  # scores of this tile, then exp(...)
            P = T.alloc_fragment((block_M, block_N), dtype)  # exp(...) rounded, for P V
            acc_o = T.alloc_fragment((block_M, dim), accum_dtype)
            m = T.alloc_fragment((block_M,), accum_dtype)  # running max of each query row
            m_prev = T.alloc_fragment((block_M,), accum_dtype)
            rescale = T.alloc_fragment((block_M,), accum_dtype)
            row_sum = T.alloc_fragment((block_M,), accum_dtype)
            l = T.alloc_fragment((block_M,), accum_dtype)  # running sum of exp(s - m)

            T.copy(Q[bz, bx * block_M:(bx + 1) * block_M, by, :], Q_shared)
            T.fill(acc_o, 0)
            T.fill(l, 0)
            T.fill(m, -T.infinity(accum_dtype))

            n_tiles = key_tiles(bx)

            if not overlap:  # the plain loop: GEMM, softmax, GEMM; the tensor cores idle during the softmax
                for k in T.Pipelined(n_tiles, num_stages=num_stages):
                    T.copy(K[bz, k * block_N:(k + 1) * block_N, by, :], K_shared)  # keys past seq_len arrive as 0
                    T.gemm(Q_shared, K_shared, S, transpose_B=True, clear_accum=True, policy=T.GemmWarpPolicy.FullRow)
                    mask(S, bx, k)
                    online_softmax(S, m, m_prev, rescale, row_sum, l)
                    T.copy(S, P)
                    for i, j in T.Parallel(block_M, dim):
                        acc_o[i, j] *= rescale[i]  # O = O * exp(m_prev - m) + P V
                    T.copy(V[bz, k * block_N:(k + 1) * block_N, by, :], V_shared)
                    T.gemm(P, V_shared, acc_o, policy=T.GemmWarpPolicy.FullRow)
            else:  # P V one tile late, so that the softmax of tile k runs while the tensor cores do P(k-1) V(k-1)
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
                groups = threads // 128
                for k in T.Pipelined(steps, num_stages=num_stages):
                    kk = T.min(k, n_tiles - 1) if extra_step else k  # extra step: the last K tile again (unused)
                    T.copy(K[bz, kk * block_N:(kk + 1) * block_N, by, :], K_shared)
                    prev = T.max(k - 1, 0)
                    T.copy(V[bz, prev * block_N:(prev + 1) * block_N, by, :], V_shared)  # one tile behind K
                    if pingpong:  # the consumer warpgroups issue their GEMMs in turn: 0, 1, .., 0, 1, ..
                        # Each turn's barrier has two parties: the warpgroup before arrives, this one waits.
                        # (Inside the loop, where TileLang numbers consumer threads from 0; outside it, not.)
                        if k == 0 and wg == groups - 1:
                            T.named_barrier_arrive(TURN, 256)  # warpgroup 0 goes first
                        # bar.sync as an extern: the pipeline pass moves T.sync_threads to the producer
                        T.call_extern("handle", "tl::__sync_thread_partial", TURN + wg, 256)
                    if two_p:  # P(k) alternates between two buffers: P at even k, P_odd at odd k
                        if k % 2 == 0:
                            step(Q_shared, K_shared, V_shared, S, P_odd, P, acc_o, touch, m, m_prev, rescale,
                                 row_sum, l, bx, k, wg, groups, steps, n_tiles)
                        else:
                            step(Q_shared, K_shared, V_shared, S, P, P_odd, acc_o, touch, m, m_prev, rescale,
                                 row_sum, l, bx, k, wg, groups, steps, n_tiles)
                    else:
                        step(Q_shared, K_shared, V_shared, S, P, P, acc_o, touch, m, m_prev, rescale, row_sum, l,
                             bx, k, wg, groups, steps, n_tiles)
                if not extra_step:  # the last tile's P V, on a V tile loaded here (O_shared is free until the end)
                    V_last = O_shared if block_M == block_N else T.alloc_shared((block_N, dim), dtype)
                    last = n_tiles - 1
                    T.copy(V[bz, last * block_N:(last + 1) * block_N, by, :], V_last)
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


# ---- What the playground needs to know about this kernel -------------------------------------------------------
DTYPES = ["float16", "bfloat16"]

# The consumer warpgroups (threads / 128) split block_M, 64 rows each: block_M = 64, 128, 192 go with threads = 128,
# 256, 384, and other pairs fail to compile (one warpgroup holding a 128 × 128 tile spills). Tuned on the H200
# (bench/README.md): 128 × 128 with two warpgroups at head dim 128, 192 × 128 with three at 64 (in PRESETS).
SPACE = {
    "block_M": [64, 128, 192],
    "block_N": [64, 128],
    "num_stages": [1, 2],
    "threads": [128, 256, 384],
}

# overlap=False is the plain loop, for comparison, and for GPUs before Hopper (T.wgmma_gemm needs sm_90a).
# The others apply to the overlapped loop (the module docstring says what each does and what it measured);
# persistent=True has its own pipeline, with the extra step built in; it runs the overlapped loop without
# ping-pong, so overlap=False or pingpong=True run on the grid (flip one of them on a persistent preset to compare).
OPTIONS = {"overlap": [True, False], "pingpong": [False, True], "extra_step": [True, False],
           "fence_wait": [True, False], "two_p": [True, False], "lazy_rescale": [True, False],
           "persistent": [False, True]}

# What the head-dim-64 presets change: three consumer warpgroups taking turns; their 160 registers a thread leave
# no room for a second P (two_p spills); the fence lost 3-4% there, the lazy rescale 4% (and +1% causal, within the
# spread; bench/README.md).
_DIM64 = dict(block_M=192, threads=384, pingpong=True, fence_wait=False, two_p=False, lazy_rescale=False)

PRESETS = {
    # tuned: non-causal query blocks are all the same length, so one block per SM can walk them in a fixed order
    "8×32×4096×128": dict(batch=8, heads=32, seq_len=4096, dim=128, causal=False, persistent=True),
    "8×32×4096×128 causal": dict(batch=8, heads=32, seq_len=4096, dim=128, causal=True),
    # tuned: at head dim 64 the exps outweigh the GEMMs; three consumer warpgroups taking turns hide them best
    "4×32×8192×64": dict(batch=4, heads=32, seq_len=8192, dim=64, causal=False, **_DIM64),
    "4×32×8192×64 causal": dict(batch=4, heads=32, seq_len=8192, dim=64, causal=True, **_DIM64),
    "2×8×1000×128 (ragged)": dict(batch=2, heads=8, seq_len=1000, dim=128, causal=False, persistent=True),
    "2×8×1000×128 causal (ragged)": dict(batch=2, heads=8, seq_len=1000, dim=128, causal=True),
}

# Merged over the problem being run (its dim and causal kept): a ragged sequence and an aligned one.
CHECK_SHAPES = [dict(batch=2, heads=4, seq_len=1000), dict(batch=1, heads=2, seq_len=512)]


def make_inputs(batch, heads, seq_len, dim, dtype, device, generator):
    return tuple(torch.randn(batch, seq_len, heads, dim, device=device, generator=generator).to(dtype)
                 for _ in range(3))


def reference(q, k, v, causal):
    """Plain attention in float32, a few heads at a time: the full score matrix of 8 × 32 heads at 4096 tokens
    would be 17 GB, one chunk of heads here is at most 1 GB."""
    b, s, h, d = q.shape
    out = torch.empty(b, s, h, d, dtype=torch.float32, device=q.device)
    keep = torch.ones(s, s, dtype=torch.bool, device=q.device).tril() if causal else None
    chunk = max(1, 2**28 // (s * s))  # heads per chunk: at most 2^28 scores (1 GB)
    for i in range(b):
        for h0 in range(0, h, chunk):
            qh, kh, vh = (t[i, :, h0:h0 + chunk].float().transpose(0, 1) for t in (q, k, v))  # (heads, s, d)
            scores = (qh @ kh.transpose(1, 2)) / math.sqrt(d)
            if causal:
                scores.masked_fill_(~keep, float("-inf"))
            out[i, :, h0:h0 + chunk] = (torch.softmax(scores, dim=-1) @ vh).transpose(0, 1)
    return out


def _sdpa(q, k, v, causal):
    o = F.scaled_dot_product_attention(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), is_causal=causal)
    return o.transpose(1, 2)


BASELINES = {"torch SDPA": _sdpa}


def flops(batch, heads, seq_len, dim, causal):
    return 4 * batch * heads * seq_len * seq_len * dim // (2 if causal else 1)


def bytes_moved(batch, heads, seq_len, dim, dtype):
    size = 4 if dtype == "float32" else 2
    return 4 * batch * seq_len * heads * dim * size


if __name__ == "__main__":
    import sys
    from pathlib import Path
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    from playground.standalone import main
    main("flash_attention")
