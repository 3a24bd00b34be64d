"""FlashAttention: the persistent schedule (persistent=True in kernels/flash_attention.py) against the grid one.

flash_attention_block_cost.py (flash-attention-block-cost.log) measured the shipped kernel at 1.83 µs per key tile
against SDPA's 1.89, but 3.10 µs of fixed cost per query block against SDPA's 0.52: at 4096 tokens (32 key
tiles) that is what puts it at 0.99× SDPA. The persistent schedule keeps one block per SM, loads the next query
block's Q and first K/V while the consumers finish this one, leaves the O store in flight, and issues S(0) alone
instead of a P V of zeros. Measured here: the fixed cost again (sequences of 16, 32, 64 key tiles, 8192 query
blocks each), and every variant verified and timed against SDPA at the bench's shapes, causal and not.

On the device:  bash bench/tuning/run.sh flash_attention_persistent.py   (carry .device; prints the tables)
Here (no GPU):  python bench/tuning/flash_attention_persistent.py --compile-only
"""
import os
import sys

sys.path.insert(0, os.getcwd())
sys.path.insert(0, os.path.join(os.getcwd(), "kernels"))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

DIM64 = dict(block_M=192, threads=384, pingpong=True, fence_wait=False, two_p=False, lazy_rescale=False)
VARIANTS_FOR = {128: {"ship": {}, "persistent": dict(persistent=True)},
                64: {"ship": DIM64, "persistent": dict(persistent=True)}}
SHAPES = [(8, 32, 4096, 128, "float16"), (8, 32, 4096, 128, "bfloat16"), (4, 32, 8192, 64, "float16")]
CHECK = {128: (2, 4, 1000, 128), 64: (2, 4, 1000, 64)}


if __name__ == "__main__":
    from harness import flash_attention_block_cost, flash_attention_script
    if "--compile-only" not in sys.argv:
        flash_attention_block_cost(VARIANTS_FOR)
    flash_attention_script(VARIANTS_FOR, SHAPES, CHECK)
