"""FlashAttention forward with FlashAttention-3's ping-pong schedule, written out by hand, against the shipped kernel
and SDPA.

Why (bench/README.md): in the shipped kernel both consumer warpgroups issue their GEMMs together and then run their
softmax together, so per tile the tensor cores idle for about as long as the exps take, less what the one-tile-late
P V hides; the softmax is the critical path, more so at head dim 64. FlashAttention-3 makes the two warpgroups take
turns: each issues its GEMMs only after the other has issued its own (a pair of named barriers), so one warpgroup's
softmax runs while the other's GEMMs hold the tensor cores. `T.Pipelined` has no place for such barriers, so here
the whole pipeline is written by hand:

- a producer warpgroup loads K and V tiles by TMA into `stages` buffers each, guarded by full/empty mbarriers (K and
  V separately, so K can be handed back as soon as S = Q Kᵀ is done, V after P V);
- consumer warpgroups, 64 query rows each (two; three in FlashAttention-3's 192-row tile at head dim 64), run the
  loop of the shipped kernel (S of tile k and P V of tile k-1 issued together, the softmax of tile k under P V),
  with each warpgroup's issue step between
  `T.sync_threads(own barrier)` and `T.named_barrier_arrive(the next one's barrier)`, round the ring.

`pingpong=False` keeps the same hand-written pipeline without the turn-taking: it isolates what the schedule buys.

On the device:  bash bench/tuning/run.sh flash_attention_pingpong.py   (carry .device; prints a table)
Here (no GPU):  python bench/tuning/flash_attention_pingpong.py --compile-only
"""
import math
import os
import re
import sys

import tilelang
import tilelang.language as T

sys.path.insert(0, os.getcwd())
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

TURN = 5  # named barrier ids TURN .. TURN + warpgroups - 1 (TileLang's own partial syncs use low ids)


def fa_pingpong(batch, heads, seq_len, dim, causal, dtype="float16", block_M=128, block_N=128, stages=2,
                pingpong=True, producer_regs=24, consumer_regs=None):
    accum = "float32"
    scale = (1.0 / math.sqrt(dim)) * 1.4426950408889634
    shape = (batch, seq_len, heads, dim)
    groups = block_M // 64  # consumer warpgroups, 64 query rows each (FlashAttention-3 uses 3 at head dim 64)
    consumers = 128 * groups
    if consumer_regs is None:  # what the register file leaves them after the producer's share, in steps of 8
        consumer_regs = min(240, (65536 // (consumers + 128) * (consumers + 128) - 128 * producer_regs)
                            // consumers // 8 * 8)

    @T.macro
    def mask(S, bx, k):
        if causal:
            if (k + 1) * block_N > bx * block_M:
                for i, j in T.Parallel(block_M, block_N):
                    S[i, j] = T.if_then_else(bx * block_M + i >= k * block_N + j, S[i, j], -T.infinity(accum))
        elif seq_len % block_N != 0:
            for i, j in T.Parallel(block_M, block_N):
                S[i, j] = T.if_then_else(k * block_N + j < seq_len, S[i, j], -T.infinity(accum))

    @T.prim_func
    def main(Q: T.Tensor(shape, dtype), K: T.Tensor(shape, dtype), V: T.Tensor(shape, dtype),
             Output: T.Tensor(shape, dtype)):
        with T.Kernel(T.ceildiv(seq_len, block_M), heads, batch, threads=consumers + 128) as (bx, by, bz):
            T.annotate_pass_configs({"tl.enable_fast_math": True})
            Q_shared = T.alloc_shared((block_M, dim), dtype)  # holds O at the end: each warpgroup its own rows
            K_shared = T.alloc_shared((stages, block_N, dim), dtype)
            V_shared = T.alloc_shared((stages, block_N, dim), dtype)
            S = T.alloc_fragment((block_M, block_N), accum)
            P = T.alloc_fragment((block_M, block_N), dtype)
            acc_o = T.alloc_fragment((block_M, dim), accum)
            m = T.alloc_fragment((block_M,), accum)
            m_prev = T.alloc_fragment((block_M,), accum)
            rescale = T.alloc_fragment((block_M,), accum)
            row_sum = T.alloc_fragment((block_M,), accum)
            l = T.alloc_fragment((block_M,), accum)
            k_full = T.alloc_barrier([128] * stages)
            k_empty = T.alloc_barrier([consumers] * stages)
            v_full = T.alloc_barrier([128] * stages)
            v_empty = T.alloc_barrier([consumers] * stages)
            tx = T.get_thread_binding()
            wg = tx // 128  # the consumer warpgroup: 0 .. groups-1

            n_tiles = (T.min(T.ceildiv(seq_len, block_N), T.ceildiv((bx + 1) * block_M, block_N)) if causal
                       else T.ceildiv(seq_len, block_N))

            T.copy(Q[bz, bx * block_M:(bx + 1) * block_M, by, :], Q_shared)

            if tx >= consumers:  # producer: K(k) and V(k), `stages` tiles ahead
                T.set_max_nreg(producer_regs, 0)
                for k in T.serial(n_tiles):
                    s = k % stages
                    T.mbarrier_wait_parity(k_empty[s], ((k // stages) & 1) ^ 1)
                    T.tma_copy(K[bz, k * block_N:(k + 1) * block_N, by, :], K_shared[s, :, :], barrier=k_full[s])
                    T.mbarrier_arrive(k_full[s])
                    T.mbarrier_wait_parity(v_empty[s], ((k // stages) & 1) ^ 1)
                    T.tma_copy(V[bz, k * block_N:(k + 1) * block_N, by, :], V_shared[s, :, :], barrier=v_full[s])
                    T.mbarrier_arrive(v_full[s])
            else:
                T.set_max_nreg(consumer_regs, 1)
                T.fill(acc_o, 0)
                T.fill(l, 0)
                T.fill(m, -T.infinity(accum))
                T.fill(P, 0)  # never multiplied at k = 0 (no P V is issued there), but TileLang asks P to be set
                if pingpong:  # the warpgroups issue in turn, 0, 1, .., groups-1, 0, ..
                    if wg == groups - 1:
                        T.named_barrier_arrive(TURN, 256)  # warpgroup 0 goes first
                for k in T.serial(n_tiles):
                    s = k % stages
                    sp = (k + stages - 1) % stages  # the stage of tile k-1 (V one tile behind K)
                    T.mbarrier_wait_parity(k_full[s], (k // stages) & 1)
                    if k > 0:
                        T.mbarrier_wait_parity(v_full[sp], ((k - 1) // stages) & 1)
                    if pingpong:
                        T.sync_threads(TURN + wg, 256)  # my turn: the warpgroup before me has issued
                    T.wgmma_gemm(Q_shared, K_shared[s, :, :], S, transpose_B=True, clear_accum=True,
                                 policy=T.GemmWarpPolicy.FullRow)
                    if k > 0:  # at k = 0 that stage of V holds no tile yet: whatever is there (NaN bits, say)
                        T.wgmma_gemm(P, V_shared[sp, :, :], acc_o, policy=T.GemmWarpPolicy.FullRow)
                    if pingpong:
                        if wg < groups - 1 or k < n_tiles - 1:  # after the last warpgroup's last, nobody waits
                            T.named_barrier_arrive(TURN + (wg + 1) % groups, 256)  # the next one's turn
                    if k > 0:
                        T.wait_wgmma(1)  # S is ready; P V still runs
                    else:
                        T.wait_wgmma(0)
                    T.mbarrier_arrive(k_empty[s])
                    mask(S, bx, k)
                    T.copy(m, m_prev)
                    T.reduce_max(S, m, dim=1, clear=False)
                    for i in T.Parallel(block_M):
                        rescale[i] = T.exp2((m_prev[i] - m[i]) * scale)
                    for i, j in T.Parallel(block_M, block_N):
                        S[i, j] = T.exp2(S[i, j] * scale - m[i] * scale)
                    T.reduce_sum(S, row_sum, dim=1)
                    for i in T.Parallel(block_M):
                        l[i] = l[i] * rescale[i] + row_sum[i]
                    T.wait_wgmma(0)  # P V is done: O and P may change, V(k-1) goes back
                    if k > 0:
                        T.mbarrier_arrive(v_empty[sp])
                    for i, j in T.Parallel(block_M, dim):
                        acc_o[i, j] *= rescale[i]
                    T.copy(S, P)
                last = (n_tiles - 1) % stages
                T.mbarrier_wait_parity(v_full[last], ((n_tiles - 1) // stages) & 1)
                T.wgmma_gemm(P, V_shared[last, :, :], acc_o, policy=T.GemmWarpPolicy.FullRow)
                T.wait_wgmma(0)
                for i, j in T.Parallel(block_M, dim):
                    acc_o[i, j] /= l[i]
                T.copy(acc_o, Q_shared)
                T.copy(Q_shared, Output[bz, bx * block_M:(bx + 1) * block_M, by, :])

    return main


SHAPES = [  # (batch, heads, seq_len, dim, causal): the bench's six rows, then a ragged check
    (8, 32, 4096, 128, False), (8, 32, 4096, 128, True), (4, 32, 8192, 64, False), (4, 32, 8192, 64, True),
]
CHECKS = [(2, 4, 1000, 128, False), (2, 4, 1000, 128, True), (1, 2, 512, 64, True)]
VARIANTS = {
    "pingpong": dict(),
    "pingpong 3 warpgroups (bM 192)": dict(block_M=192, dims=(64,)),  # FA3's tile at head dim 64 (spills at 128)
    "hand pipeline, no pingpong": dict(pingpong=False),
    "pingpong s3": dict(stages=3),
}
TARGET = {"kind": "cuda", "arch": "sm_90a"}


def variants(dim):
    return {name: {k: v for k, v in kw.items() if k != "dims"} for name, kw in VARIANTS.items()
            if dim in kw.get("dims", (dim,))}


def build(b, h, s, d, c, dtype="float16", **kw):
    return tilelang.compile(fa_pingpong(b, h, s, d, c, dtype, **kw), out_idx=[3], target=TARGET)


def build_shipped(b, h, s, d, c, dtype):
    sys.path.insert(0, os.path.join(os.getcwd(), "kernels"))
    import flash_attention as shipped
    return tilelang.compile(shipped.flash_attention(b, h, s, d, c, dtype), out_idx=[3], target=TARGET)


def cases():
    for dtype in ("float16", "bfloat16"):
        for shape in CHECKS + SHAPES:
            if not (dtype == "bfloat16" and shape[3] == 64):  # the bench's dim-64 rows are fp16 only
                yield dtype, shape


def compile_only():
    import tempfile
    from pathlib import Path
    from playground.engine.compile import launch_info, ptxas_resources
    tilelang.env.disable_cache()
    for shape in [SHAPES[0], SHAPES[1], SHAPES[2]]:
        for name, kw in variants(shape[3]).items():
            try:
                kernel = build(*shape, **kw)
            except Exception as exc:
                print(f"{shape} {name:28s} FAILED: {str(exc).splitlines()[-1][:300]}")
                continue
            src = kernel.get_kernel_source()
            with tempfile.TemporaryDirectory() as tmp:
                ptx = Path(tmp) / "k.ptx"
                ptx.write_text(kernel._get_ptx())
                figures, _, _ = ptxas_resources(ptx, "sm_90a")
            smem = launch_info(kernel).get("dynamic_shared_bytes", 0) // 1024
            syncs = re.findall(r"__sync_thread_partial\((\d+), (\d+)\)", src)
            print(f"{shape} {name:28s} ok: {figures.get('registers')} registers, {figures.get('spill_stores')} spill "
                  f"stores, {smem} KB dynamic shared memory; partial syncs {syncs}")


def on_gpu():
    from precompile import precompile
    precompile([(build_shipped, (*shape, dtype), {}) for dtype, shape in cases()]
               + [(build, (*shape, dtype), kw) for dtype, shape in cases() for kw in variants(shape[3]).values()])
    import torch
    import torch.nn.functional as F
    from playground.engine.timing import Timer
    sys.path.insert(0, os.path.join(os.getcwd(), "kernels"))
    import flash_attention as shipped
    rows = []
    for dtype, shape in cases():
        tdt = getattr(torch, dtype)
        b, h, s, d, c = shape
        g = torch.Generator(device="cuda").manual_seed(5)
        q, k_, v = (torch.randn(b, s, h, d, device="cuda", generator=g).to(tdt) for _ in range(3))

        def sdpa():
            return F.scaled_dot_product_attention(q.transpose(1, 2), k_.transpose(1, 2), v.transpose(1, 2),
                                                  is_causal=c)
        ref = shipped.reference(q, k_, v, c)
        fns = {"sdpa": sdpa}
        kernels = {"ship": build_shipped(b, h, s, d, c, dtype)}
        for name, kw in variants(d).items():
            try:
                kernels[name] = build(b, h, s, d, c, dtype, **kw)
            except Exception as exc:
                print(f"{dtype} {shape} {name}: build failed: {str(exc).splitlines()[-1][:300]}", flush=True)
        for name, ker in kernels.items():
            out = ker(q, k_, v)
            err = ((out.float() - ref).norm() / ref.norm()).item()
            same = all(torch.equal(out, ker(q, k_, v)) for _ in range(3))
            print(f"{dtype} {shape} {name:28s} rel err {err:.2e} repeatable {same}", flush=True)
            if err < 1e-2 and same:
                fns[name] = (lambda ker=ker: ker(q, k_, v))
        if shape in CHECKS:
            continue
        times = {n: t["median_ms"] for n, t in Timer().time(fns, budget_ms=3000).items()}
        for name, ms in times.items():
            rows.append((dtype, str(shape), name, ms, times["sdpa"] / ms))
    print(f"\n{'dtype':9s} {'shape':28s} {'variant':28s} {'ms':>8s} {'x SDPA':>7s}")
    for dtype, shape, name, ms, ratio in rows:
        print(f"{dtype:9s} {shape:28s} {name:28s} {ms:8.4f} {ratio:7.3f}")


if __name__ == "__main__":
    compile_only() if "--compile-only" in sys.argv else on_gpu()
