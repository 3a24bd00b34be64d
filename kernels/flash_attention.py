"""FlashAttention forward: O = softmax(Q Kᵀ / √dim) V per batch and head, with an optional causal mask.

The seq_len × seq_len score matrix is never stored. Each thread block owns block_M queries of one head and streams
the keys and values past them in tiles of block_N, keeping for each query row a running max m, a running sum ℓ of
exp(s - m) and an unnormalized output (the "online softmax"). When a tile raises the max from m to m', what was
summed so far is rescaled by exp(m - m'), so the end result is exact. Per tile, two tensor-core GEMMs:
S = Q Kᵀ (block_M × block_N, fp32), then, with P = exp(S - m) rounded to fp16/bf16, O += P V.

Read this file first: `plain_forward` below is that loop, written plainly (GEMM, softmax, GEMM) and run with
`overlap=False`. On Hopper, `T.Pipelined` makes its K and V copies TMA loads issued by a producer warpgroup,
num_stages tiles ahead, and its GEMMs wgmma; on earlier GPUs, cp.async and mma.sync. It runs at 0.84× SDPA on an
H200: while the exps run, the tensor cores idle. The Hopper schedules that close that gap live in their own files:

- `kernels/flash_attention_hopper.py` (`overlap=True`, the factory's default): the FlashAttention-3 overlap, the
  softmax of tile k running while the tensor cores do P V of tile k-1; ping-pong (`pingpong`), the last tile's
  P V as one more pipelined step (`extra_step`), and three fixes for what the SASS showed (`fence_wait`, `two_p`,
  `lazy_rescale`).
- `kernels/flash_attention_persistent.py` (`persistent=True`, head dim 128 unless causal past 2048 tokens): the
  same steps, but one block per SM walks many query blocks, loading the next Q while it finishes this one.

`flash_attention(...)` below picks the schedule and refuses option combinations no schedule implements.

Layout (batch, seq_len, heads, dim), "bshd": what a fused QKV projection gives without a transpose, and
FlashAttention's own; SDPA takes (batch, heads, seq_len, dim), so its baseline gets transposed views. The scale
1/√dim is folded with log2(e) into one multiply, so the exponential is the native exp2. Causal: query i sees keys
j ≤ i, so a block stops at its diagonal tile and masks only the tiles that reach it; that halves the work. Ragged
seq_len: keys past the end are masked to -inf, query rows past the end are computed but never written.
Grouped-query attention (`group_size` query heads share one key/value head): query head h reads K and V head
h // group_size; a group's heads run side by side on the grid, so its keys and values come from L2 after the first.

Run it alone:  python kernels/flash_attention.py   (checks it against PyTorch and times it against SDPA on a GPU)
"""
import math
from types import SimpleNamespace

import torch
import torch.nn.functional as F
import tilelang.language as T


def flash_attention(batch=8, heads=32, seq_len=4096, dim=128, causal=False, group_size=1, dtype="float16",
                    block_M=128, block_N=128, num_stages=2, threads=256, overlap=True, pingpong=False,
                    extra_step=True, fence_wait=True, two_p=True, lazy_rescale=True, persistent=False,
                    num_sms=132):
    """`group_size`: query heads sharing one key/value head (Llama 3: 32 query heads, 8 key/value heads, groups of 4;
    1 is multi-head attention). `threads`: the consumer threads (two warpgroups at the default); on Hopper a
    128-thread producer warpgroup comes on top. `num_sms`: blocks of the persistent schedule, one per SM (132 on an
    H100 SXM or H200; the playground sets it to the GPU's count). The other options are listed in OPTIONS below."""
    check_options(overlap=overlap, pingpong=pingpong, extra_step=extra_step, persistent=persistent)
    if group_size < 1 or heads % group_size:
        raise ValueError(f"group_size={group_size} (the query heads that share one key/value head) must be at least "
                         f"1 and divide heads={heads}")
    accum_dtype = "float32"
    scale = (1.0 / math.sqrt(dim)) * 1.4426950408889634  # 1/√dim and log2(e): exp(x/√d) = exp2(x * scale)
    shape = (batch, seq_len, heads, dim)
    kv_shape = (batch, seq_len, heads // group_size, dim)  # query head h reads key/value head h // group_size

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
        # lazy_rescale (as FlashAttention-4 does): a row keeps its old max unless the new one is larger by more
        # than 8 in log2 units, so the exps reach at most 2^8, and O and ℓ, which share the max, give the same
        # O / ℓ. Then rescale is exactly 1 for most rows after the first tiles, which the Hopper schedules use to
        # skip rescaling O altogether.
        if lazy_rescale:
            for i in T.Parallel(block_M):
                m[i] = T.if_then_else((m[i] - m_prev[i]) * scale > 8.0, m[i], m_prev[i])
        for i in T.Parallel(block_M):
            rescale[i] = T.exp2((m_prev[i] - m[i]) * scale)
        for i, j in T.Parallel(block_M, block_N):
            S[i, j] = T.exp2(S[i, j] * scale - m[i] * scale)
        T.reduce_sum(S, row_sum, dim=1)
        for i in T.Parallel(block_M):
            l[i] = l[i] * rescale[i] + row_sum[i]

    # What every schedule shares: the problem, its tiling, and the two macros above.
    fa = SimpleNamespace(batch=batch, heads=heads, seq_len=seq_len, dim=dim, causal=causal, group_size=group_size,
                         dtype=dtype, accum_dtype=accum_dtype, shape=shape, kv_shape=kv_shape, block_M=block_M,
                         block_N=block_N, num_stages=num_stages, threads=threads, lazy_rescale=lazy_rescale,
                         key_tiles=key_tiles, mask=mask, online_softmax=online_softmax)
    if not overlap:
        return plain_forward(fa)
    # The Hopper schedules, each in its own file (imported here, not at the top, so that `python
    # kernels/flash_attention.py` finds the kernels package once its __main__ block has put it on the path).
    if persistent:
        from kernels.flash_attention_persistent import persistent_forward
        return persistent_forward(fa, fence_wait=fence_wait, two_p=two_p, num_sms=num_sms)
    from kernels.flash_attention_hopper import overlapped_forward
    return overlapped_forward(fa, pingpong=pingpong, extra_step=extra_step, fence_wait=fence_wait, two_p=two_p)


def check_options(overlap, pingpong, extra_step, persistent):
    """Refuse the combinations no schedule implements, rather than run another schedule than the one asked for."""
    if persistent and not overlap:
        raise ValueError("persistent=True needs overlap=True: the persistent schedule is built from the overlapped "
                         "steps (set persistent=False to run the plain loop)")
    if persistent and pingpong:
        raise ValueError("pingpong=True needs persistent=False: the persistent schedule runs its consumer "
                         "warpgroups together (set persistent=False for ping-pong on the grid)")
    if persistent and not extra_step:
        raise ValueError("extra_step=False needs persistent=False: the persistent schedule always runs the last "
                         "tile's P V as one more step")
    if pingpong and not overlap:
        raise ValueError("pingpong=True needs overlap=True: warpgroups take turns to issue the overlapped loop's "
                         "GEMMs; the plain loop has no turns to take")


def plain_forward(fa):
    """The online-softmax loop as written in the FlashAttention paper: per key tile, S = Q Kᵀ, the softmax, O += P V.
    The tensor cores idle during the softmax; `kernels/flash_attention_hopper.py` overlaps them."""
    batch, heads, seq_len, dim, dtype, accum_dtype = fa.batch, fa.heads, fa.seq_len, fa.dim, fa.dtype, fa.accum_dtype
    block_M, block_N, num_stages, shape = fa.block_M, fa.block_N, fa.num_stages, fa.shape
    mask, online_softmax = fa.mask, fa.online_softmax

    @T.prim_func
    def main(Q: T.Tensor(shape, dtype), K: T.Tensor(fa.kv_shape, dtype), V: T.Tensor(fa.kv_shape, dtype),
             Output: T.Tensor(shape, dtype)):
        with T.Kernel(T.ceildiv(seq_len, block_M), heads, batch, threads=fa.threads) as (bx, by, bz):
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

            n_tiles = fa.key_tiles(bx)
            for k in T.Pipelined(n_tiles, num_stages=num_stages):
                # keys past seq_len arrive as 0
                T.copy(K[bz, k * block_N:(k + 1) * block_N, by // fa.group_size, :], K_shared)
                T.gemm(Q_shared, K_shared, S, transpose_B=True, clear_accum=True, policy=T.GemmWarpPolicy.FullRow)
                mask(S, bx, k)
                online_softmax(S, m, m_prev, rescale, row_sum, l)
                T.copy(S, P)
                for i, j in T.Parallel(block_M, dim):
                    acc_o[i, j] *= rescale[i]  # O = O * exp(m_prev - m) + P V
                T.copy(V[bz, k * block_N:(k + 1) * block_N, by // fa.group_size, :], V_shared)
                T.gemm(P, V_shared, acc_o, policy=T.GemmWarpPolicy.FullRow)

            for i, j in T.Parallel(block_M, dim):
                acc_o[i, j] /= l[i]
            T.copy(acc_o, O_shared)
            T.copy(O_shared, Output[bz, bx * block_M:(bx + 1) * block_M, by, :])  # rows past seq_len: not written

    return main


# ---- What the playground needs to know about this kernel -------------------------------------------------------
DTYPES = ["float16", "bfloat16"]

# The consumer warpgroups (threads / 128) split block_M, 64 rows each: block_M = 64, 128, 192 go with threads = 128,
# 256, 384 (TIED: of the two, the one a user leaves on auto follows the one they set), and other pairs fail to
# compile (one warpgroup holding a 128 × 128 tile spills). Tuned on the H200 (bench/README.md): 128 × 128 with two
# warpgroups at head dim 128, 192 × 128 with three at 64 (in PRESETS).
SPACE = {"block_M": [64, 128, 192], "block_N": [64, 128], "num_stages": [1, 2], "threads": [128, 256, 384]}
TIED = {("block_M", "threads"): [(64, 128), (128, 256), (192, 384)]}

# Which schedule runs, and the refinements of the Hopper ones (their files say what each does and what it measured):
#   overlap=False      the plain loop above: for comparison, and for GPUs before Hopper (T.wgmma_gemm needs sm_90a)
#   overlap=True       the overlapped loop of kernels/flash_attention_hopper.py, on a grid of query blocks
#   persistent=True    kernels/flash_attention_persistent.py: needs overlap, has the extra step built in, no ping-pong
#   pingpong           consumer warpgroups take turns issuing their GEMMs (overlapped grid only)
#   extra_step         the last tile's P V as one more pipelined step (overlapped grid; always on when persistent)
#   fence_wait, two_p  keep ptxas from moving the wait for P V before the exps (both Hopper schedules)
#   lazy_rescale       keep a row's max until it grows by 2^8 (every schedule, the plain loop too)
# The plain loop has no P V to overlap, so fence_wait, two_p and extra_step do not change it.
OPTIONS = {"overlap": [True, False], "pingpong": [False, True], "extra_step": [True, False],
           "fence_wait": [True, False], "two_p": [True, False], "lazy_rescale": [True, False],
           "persistent": [False, True]}

# The head-dim-64 presets' config: three consumer warpgroups taking turns; 160 registers a thread leave no room for a
# second P (two_p spills); the fence cost 3-4% there, the lazy rescale 4% (causal +1%, in the spread; bench/README.md).
_DIM64 = dict(block_M=192, threads=384, pingpong=True, fence_wait=False, two_p=False, lazy_rescale=False)

PRESETS = {
    # tuned: non-causal query blocks are all the same length, so one block per SM can walk them in a fixed order
    "8×32×4096×128": dict(batch=8, heads=32, seq_len=4096, dim=128, causal=False, group_size=1, persistent=True),
    "8×32×4096×128 causal": dict(batch=8, heads=32, seq_len=4096, dim=128, causal=True, group_size=1),
    # tuned: at head dim 64 the exps outweigh the GEMMs; three consumer warpgroups taking turns hide them best
    "4×32×8192×64": dict(batch=4, heads=32, seq_len=8192, dim=64, causal=False, group_size=1, **_DIM64),
    "4×32×8192×64 causal": dict(batch=4, heads=32, seq_len=8192, dim=64, causal=True, group_size=1, **_DIM64),
    "2×8×1000×128 (ragged)": dict(batch=2, heads=8, seq_len=1000, dim=128, causal=False, group_size=1, persistent=True),
    "2×8×1000×128 causal (ragged)": dict(batch=2, heads=8, seq_len=1000, dim=128, causal=True, group_size=1),
    # grouped-query attention as in Llama 3 8B: 32 query heads, 8 key/value heads (no tuned config: the engine picks)
    "8×32×4096×128 causal, 8 KV heads (Llama 3)": dict(batch=8, heads=32, seq_len=4096, dim=128, causal=True,
                                                       group_size=4),
}


def shape_class(dim, causal, seq_len):  # configs differ most by these, and by the schedule the rule gives them
    persistent = pick_config(dim, causal, seq_len).get("persistent")  # (causal: by the sequence's length)
    return f"head dim {dim}" + (", causal" if causal else "") + (", persistent" if persistent else ", grid")


def pick_config(dim, causal, seq_len):
    """The config when none is set, tuned or preset (playground/engine/config_choice.py)."""
    if dim <= 64:  # the exps outweigh the GEMMs: the head-dim-64 presets' config (0.96× SDPA at 16×16×2048×64,
        return dict(_DIM64)  # against 0.87× with the defaults)
    if dim > 128:  # 128 × 256 key and value tiles, two stages of each, would need 320 KB of shared memory (the
        return {"block_N": 64}  # GPU has 228): 64-key tiles take 193 KB, without spills
    # One block per SM walks the query blocks; causal ones in rounds that snake across the SMs, which beats the grid
    # on short sequences (H200, fp16: 512 0.73× → 0.97× SDPA, 1024 0.86× → 1.04×; 4096 1.03× both; 8192 1.07×, 1.03×).
    return {"persistent": not causal or seq_len <= 2048}


# Merged over the problem being run (its heads, dim, causal, group_size kept): a ragged sequence and an aligned one.
CHECK_SHAPES = [dict(batch=1, seq_len=1000), dict(batch=1, seq_len=512)]


def make_inputs(batch, heads, seq_len, dim, group_size, dtype, device, generator):
    q = torch.randn(batch, seq_len, heads, dim, device=device, generator=generator).to(dtype)
    kv = [torch.randn(batch, seq_len, heads // group_size, dim, device=device, generator=generator) for _ in "kv"]
    return q, kv[0].to(dtype), kv[1].to(dtype)


def expand_heads(q, k, v):
    """K and V with each key/value head repeated for the query heads of its group: multi-head attention's layout."""
    g = q.shape[2] // k.shape[2]  # group_size
    return (k.repeat_interleave(g, dim=2), v.repeat_interleave(g, dim=2)) if g > 1 else (k, v)


def reference(q, k, v, causal):
    """Plain attention in float32, a few heads at a time (all 8 × 32 heads' scores at 4096 tokens: 17 GB)."""
    k, v = expand_heads(q, k, v)
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
    # Grouped-query attention: the key/value heads expanded first (and timed), as a multi-head model would run it
    k, v = expand_heads(q, k, v)
    o = F.scaled_dot_product_attention(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), is_causal=causal)
    return o.transpose(1, 2)


BASELINES = {"torch SDPA": _sdpa}


def flops(batch, heads, seq_len, dim, causal):
    return 4 * batch * heads * seq_len * seq_len * dim // (2 if causal else 1)


def bytes_moved(batch, heads, seq_len, dim, group_size, dtype):
    size = 4 if dtype == "float32" else 2  # Q and O, then K and V with heads / group_size heads
    return (2 * heads + 2 * (heads // group_size)) * batch * seq_len * dim * size


if __name__ == "__main__":
    import sys
    from pathlib import Path
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    from playground.standalone import main
    main("flash_attention")
