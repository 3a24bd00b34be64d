"""FlashAttention: one step more than there are key tiles, against the kernel as it was at a256799.

Result (bench/tuning/README.md): extra_step wins at head dim 64 (1.045× / causal 1.033× SDPA against 1.03 / 0.98)
and loses 1% at 128; the dim-64 presets ship it.

Why: in the overlapped loop of a256799, step k issued S = Q K(k)ᵀ and O += P(k-1) V(k-1) for every k, so step 0 ran
a whole P V GEMM of zeros (1 of 2n+1 GEMMs: 1.5% of the tensor work at 32 key tiles, 3% on average when causal), and
the last tile's P V ran after the loop on a V tile loaded there by plain loads, with every consumer thread waiting on
them (the generated CUDA shows `ld.global` → `st.shared`, not TMA). The shipped loop now runs n_tiles + 1 steps:
no P V at step 0, no S at the extra step, and the last V tile comes through the pipeline, prefetched by TMA.
Also timed: the same with ping-pong at head dim 128 (two warpgroups), 3 stages at head dim 64.

On the device:  bash bench/tuning/run.sh flash_attention_steps.py   (carry .device; prints a table)
The kernel before: `git show a256799:kernels/flash_attention.py > bench/tuning/_fa_head.py` (not committed).
Here (no GPU):  python bench/tuning/flash_attention_steps.py --compile-only
"""
import os
import sys

import tilelang

sys.path.insert(0, os.getcwd())
sys.path.insert(0, os.path.join(os.getcwd(), "kernels"))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

DIM64 = dict(block_M=192, threads=384, pingpong=True)  # the head-dim-64 presets
# name: (module, parameters), per head dim
# The calls logged in flash-attention-steps-{1,2}.log ran with the kernel of commit 200604d, which had a second
# option, skip_zero_pv (step 0 issues S(0) alone instead of S(0) and a P V of zeros): "steps" and "both" were
# extra_step with it, "no zero PV" it alone. It was taken out after call 2 (1% slower at dim 128, no gain at 64); the
# variants left here run on the kernel as it is now. (flash-attention-steps-0.log: the first version, whose wgmma
# ptxas serialized; see kernels/flash_attention.py.)
VARIANTS_FOR = {
    128: {"before": ("_fa_head", {}), "ship": ("flash_attention", {}),
          "extra step": ("flash_attention", dict(extra_step=True))},
    64: {"before": ("_fa_head", DIM64), "extra step": ("flash_attention", dict(DIM64, extra_step=True))},
}
SHAPES = [(8, 32, 4096, 128, "float16"), (8, 32, 4096, 128, "bfloat16"), (4, 32, 8192, 64, "float16")]
CHECK = {128: (2, 4, 1000, 128), 64: (2, 4, 1000, 64)}  # ragged: a partial query block and a partial key tile
TARGET = {"kind": "cuda", "arch": "sm_90a"}


def build(b, h, s, d, causal, dtype, name):
    import importlib
    module, params = VARIANTS_FOR[d][name]
    kernel = importlib.import_module(module).flash_attention
    return tilelang.compile(kernel(b, h, s, d, causal, dtype, **params), out_idx=[3], target=TARGET)


def jobs():
    for b, h, s, d, dtype in SHAPES:
        for causal in (False, True):
            for name in VARIANTS_FOR[d]:
                yield (b, h, s, d, causal, dtype, name)
                yield (*CHECK[d], causal, dtype, name)


def compile_only():
    for job in jobs():
        if job[0] != CHECK[job[3]][0]:
            continue
        try:
            build(*job)
            print(f"{job} ok", flush=True)
        except Exception as exc:
            print(f"{job} FAILED: {str(exc).splitlines()[-1][:300]}", flush=True)


def on_gpu():
    from precompile import precompile
    precompile([(build, job, {}) for job in jobs()])
    import torch
    import torch.nn.functional as F
    import flash_attention as shipped
    from playground.timing import Timer
    rows = []
    for b, h, s, d, dtype in SHAPES:
        tdtype = getattr(torch, dtype)
        for causal in (False, True):
            g = torch.Generator(device="cuda").manual_seed(5)
            q, k, v = (torch.randn(b, s, h, d, device="cuda", generator=g).to(tdtype) for _ in range(3))
            bc, hc, sc, _ = CHECK[d]
            qc, kc, vc = (torch.randn(bc, sc, hc, d, device="cuda", generator=g).to(tdtype) for _ in range(3))
            ref_check = shipped.reference(qc, kc, vc, causal)

            def sdpa():
                return F.scaled_dot_product_attention(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2),
                                                      is_causal=causal)
            ref = sdpa().transpose(1, 2).float()
            calls = {"sdpa": sdpa}
            for name in VARIANTS_FOR[d]:
                try:
                    check = build(bc, hc, sc, d, causal, dtype, name)
                    ker = build(b, h, s, d, causal, dtype, name)
                except Exception as exc:
                    print(f"d{d} causal={causal} {name}: build failed: {str(exc).splitlines()[-1][:200]}", flush=True)
                    continue
                err_check = ((check(qc, kc, vc).float() - ref_check).norm() / ref_check.norm()).item()
                out = ker(q, k, v)
                err = ((out.float() - ref).norm() / ref.norm()).item()
                same = all(torch.equal(out, ker(q, k, v)) for _ in range(3))
                print(f"d{d} {dtype} causal={causal} {name:10s} ragged err {err_check:.2e}, err vs SDPA {err:.2e}, "
                      f"repeatable {same}", flush=True)
                if err < 1e-2 and err_check < 1e-2 and same:
                    calls[name] = lambda ker=ker: ker(q, k, v)
            times = {n: t["median_ms"] for n, t in Timer().time(calls, budget_ms=2000).items()}
            for name, ms in times.items():
                rows.append((f"{b}x{h}x{s}x{d}{' causal' if causal else ''} {dtype}", name, ms, times["sdpa"] / ms))
    print(f"\n{'shape':34s} {'variant':10s} {'ms':>8s} {'x SDPA':>7s}")
    for shape, name, ms, ratio in rows:
        print(f"{shape:34s} {name:10s} {ms:8.4f} {ratio:7.3f}")


if __name__ == "__main__":
    compile_only() if "--compile-only" in sys.argv else on_gpu()
