"""FlashAttention non-causal at head dim 128: what a block costs besides its key tiles, and ping-pong again.

flash_attention_waves.py (flash-attention-waves.log) showed the 0.99× SDPA is not a last-round loss: the ratio is
0.99 at 31, 32, 60, 62, 64 and 128 rounds alike. So the loss is inside each block. Two questions for one call:

1. Fixed cost per block: with 8192 blocks in every shape (b × h × s/128), time ∝ rounds × (a + b × tiles), so the
   sequences 2048, 4096 and 8192 (16, 32, 64 key tiles a block) give the start-up and wind-down cost a (Q load,
   first S with nothing to overlap, the extra step, O store) that a persistent kernel could hide under the next
   block's work.
2. Ping-pong at head dim 128 with the options that keep P V under the exps (fence_wait, two_p, lazy_rescale): it
   lost 4% before those existed, when ptxas had the wait for P V before the exps.

On the device:  bash bench/tuning/run.sh flash_attention_block_cost.py   (carry .device; prints two tables)
Here (no GPU):  python bench/tuning/flash_attention_block_cost.py --compile-only
"""
import os
import sys

sys.path.insert(0, os.getcwd())
sys.path.insert(0, os.path.join(os.getcwd(), "kernels"))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

VARIANTS_FOR = {128: {"ship": {}, "pingpong": dict(pingpong=True),
                      "pingpong one P": dict(pingpong=True, two_p=False),
                      "pingpong eager": dict(pingpong=True, lazy_rescale=False)}}
SHAPES = [(8, 32, 4096, 128, "float16"), (8, 32, 4096, 128, "bfloat16")]
CHECK = {128: (2, 4, 1000, 128)}


if __name__ == "__main__":
    from harness import flash_attention_block_cost, flash_attention_script
    if "--compile-only" not in sys.argv:
        flash_attention_block_cost({128: {"ship": {}}})  # question 1: the shipped kernel only
    flash_attention_script(VARIANTS_FOR, SHAPES, CHECK)
