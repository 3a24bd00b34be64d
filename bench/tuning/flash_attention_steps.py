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


def compile_only():
    from harness import build_each, flash_attention_jobs
    build_each(build, [job for job in flash_attention_jobs(SHAPES, VARIANTS_FOR, CHECK)
                       if job[0] == CHECK[job[3]][0]])  # the ragged sizes


def on_gpu():
    from harness import compare_flash_attention_variants
    compare_flash_attention_variants(build, VARIANTS_FOR, SHAPES, CHECK)


if __name__ == "__main__":
    compile_only() if "--compile-only" in sys.argv else on_gpu()
