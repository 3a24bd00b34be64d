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

SEQS = [(16, 2048), (8, 4096), (4, 8192)]  # (batch, seq_len) at 32 heads: 8192 blocks each
VARIANTS_FOR = {128: {"ship": {}, "pingpong": dict(pingpong=True),
                      "pingpong one P": dict(pingpong=True, two_p=False),
                      "pingpong eager": dict(pingpong=True, lazy_rescale=False)}}
SHAPES = [(8, 32, 4096, 128, "float16"), (8, 32, 4096, 128, "bfloat16")]
CHECK = {128: (2, 4, 1000, 128)}


def build(b, s):
    import tilelang
    from harness import SM90A
    from flash_attention import flash_attention
    return tilelang.compile(flash_attention(b, 32, s, 128, False, "float16"), out_idx=[3], target=SM90A)


def block_cost():
    import torch
    import torch.nn.functional as F
    from harness import median_ms, print_table, verified
    rows, per_round = [], {}
    for b, s in SEQS:
        kern = build(b, s)
        g = torch.Generator(device="cuda").manual_seed(5)
        q, k, v = (torch.randn(b, s, 32, 128, device="cuda", generator=g).half() for _ in range(3))

        def sdpa():
            return F.scaled_dot_product_attention(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2)).transpose(1, 2)
        ok = verified({"ship": lambda: kern(q, k, v)}, sdpa().float(), f"{b}x32x{s}")
        times = median_ms({"sdpa": sdpa, **ok}, budget_ms=1500)
        for name, ms in times.items():
            per_round[name, s // 128] = ms * 1000 / 63  # µs per round of 132 blocks (8192 blocks: 62.06 rounds)
            rows.append((f"{b}x32x{s}x128", s // 128, name, ms, per_round[name, s // 128], times["sdpa"] / ms))
    print_table([("shape", 18, ""), ("tiles", 5, "d"), ("variant", 8, ""), ("ms", 8, ".4f"), ("us/round", 9, ".2f"),
                 ("x SDPA", 7, ".3f")], rows)
    for name in ("sdpa", "ship"):
        slope = (per_round[name, 64] - per_round[name, 16]) / 48
        print(f"{name}: {slope:.3f} us per key tile, fixed {per_round[name, 16] - 16 * slope:.2f} us per block "
              f"(from 16 and 64 tiles; at 32 tiles predicted {per_round[name, 16] + 16 * slope:.2f}, "
              f"measured {per_round[name, 32]:.2f})")


if __name__ == "__main__":
    from harness import flash_attention_script
    if "--compile-only" not in sys.argv:
        from precompile import precompile
        precompile([(build, job, {}) for job in SEQS])
        block_cost()
    flash_attention_script(VARIANTS_FOR, SHAPES, CHECK)
