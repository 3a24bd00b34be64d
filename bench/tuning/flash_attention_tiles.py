"""FlashAttention tile shapes, against the shipped kernel and SDPA.

Why: the shipped kernel is at 0.98× SDPA at head dim 128 and 0.91-0.93× at 64 (bench/README.md). Three levers not
yet measured:
- Wider key tiles at dim 128 (FlashAttention-3 uses 128 × 176 there when not causal): fewer row reductions and O
  rescales per key, and a longer P V wgmma to hide the next tile's exps under. 4096 is not a multiple of 176 or
  160, so the last tile is masked (the shipped kernel now masks only that tile).
- Three consumer warpgroups at dim 64 (block_M = 192, 384 threads; FlashAttention-3's choice at dim 64): 12
  consumer warps instead of 8 to hide the exps and the reductions, and K and V read once per 192 queries.
- More stages at dim 64 (4 measured 0.925-0.929 against 0.911-0.926 in an earlier call: within the spread).
- (second call, SECOND=1) FlashAttention-3's ping-pong on the shipped pipeline (`pingpong=True`): the consumer
  warpgroups take turns to issue their GEMMs (two named barriers), so one's softmax runs under the other's GEMMs.
Not here: TileLang's manual software-pipeline schedule (`T.Pipelined(order=, stage=)`, the form of TileLang's
Hopper FlashAttention example; 0.1.15 takes no `group=`, so one entry per statement). Built for sm_90a, its CUDA
has no producer warpgroup (cp.async loads) and a `warpgroup_wait<0>` after every wgmma: no GEMM overlaps the
softmax, which is the plain loop that ran at 0.84×. Not worth device time.

On the device:  bash bench/tuning/run.sh flash_attention_tiles.py   (carry .device; prints a table)
Here (no GPU):  python bench/tuning/flash_attention_tiles.py --compile-only
"""
import os
import sys

import tilelang

sys.path.insert(0, os.getcwd())
sys.path.insert(0, os.path.join(os.getcwd(), "kernels"))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))


# The shipped kernel's parameters for each variant; which apply at which head dim is decided by VARIANTS_FOR.
VARIANTS = {
    "ship": {},
    "bN176": dict(block_N=176),
    "bN160": dict(block_N=160),
    "bN192": dict(block_N=192),
    "s4": dict(num_stages=4),
    "bM192 t384": dict(block_M=192, threads=384),
    "bM192 t384 s3": dict(block_M=192, threads=384, num_stages=3),
    "pp": dict(pingpong=True),
    "bM192 t384 pp": dict(block_M=192, threads=384, pingpong=True),
    "bM192 t384 bN64": dict(block_M=192, threads=384, block_N=64),
    "bM192 t384 bN64 pp": dict(block_M=192, threads=384, block_N=64, pingpong=True),
    "bM192 t384 bN64 pp s3": dict(block_M=192, threads=384, block_N=64, pingpong=True, num_stages=3),
    "bM192 t384 pp s3": dict(block_M=192, threads=384, pingpong=True, num_stages=3),
}
# First call (flash-attention-tiles.log): the tile shapes; second: the ping-pong option (SECOND=1,
# flash-attention-pingpong-2.log); third: 64-key tiles with three warpgroups at dim 128 (THIRD=1).
if os.environ.get("THIRD"):
    VARIANTS_FOR = {128: ["ship", "pp", "bM192 t384 bN64", "bM192 t384 bN64 pp", "bM192 t384 bN64 pp s3"],
                    64: ["bM192 t384 pp", "bM192 t384 bN64 pp", "bM192 t384 pp s3"]}
elif os.environ.get("SECOND"):
    VARIANTS_FOR = {128: ["ship", "pp"], 64: ["ship", "pp", "bM192 t384", "bM192 t384 pp"]}
else:
    VARIANTS_FOR = {128: ["ship", "bN176", "bN160", "bN192"], 64: ["ship", "s4", "bM192 t384", "bM192 t384 s3"]}
SHAPES = [(8, 32, 4096, 128, "float16"), (4, 32, 8192, 64, "float16")]
CHECK = {128: (2, 4, 1000, 128), 64: (2, 4, 1000, 64)}  # ragged: a partial query block and a partial key tile
TARGET = {"kind": "cuda", "arch": "sm_90a"}


def build(b, h, s, d, causal, dtype, name):
    import flash_attention as shipped
    return tilelang.compile(shipped.flash_attention(b, h, s, d, causal, dtype, **VARIANTS[name]), out_idx=[3],
                            target=TARGET)


def compile_only():
    import re
    from harness import flash_attention_jobs
    for job in flash_attention_jobs(SHAPES, VARIANTS_FOR, CHECK):
        if job[0] != CHECK[job[3]][0]:
            continue
        try:
            src = build(*job).get_kernel_source()
            print(f"{job} ok: wgmma waits {len(re.findall(r'warpgroup_wait', src))}", flush=True)
        except Exception as exc:
            print(f"{job} FAILED: {str(exc).splitlines()[-1][:300]}", flush=True)


def on_gpu():
    from harness import compare_flash_attention_variants
    compare_flash_attention_variants(build, VARIANTS_FOR, SHAPES, CHECK)


if __name__ == "__main__":
    compile_only() if "--compile-only" in sys.argv else on_gpu()
