"""The shipped (warp-specialized, persistent) GEMM at 4096³, where it is level with cuBLAS: tile shape, pipeline
depth and swizzle panel around the default, fp16 and bf16, interleaved with cuBLAS in one call.

On the device:  bash bench/tuning/run.sh gemm_4096.py   (carry .device; prints a table)
"""
import os
import sys

import tilelang

sys.path.insert(0, os.getcwd())
sys.path.insert(0, os.path.join(os.getcwd(), "kernels"))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import gemm as shipped  # noqa: E402

VARIANTS = {
    "default (128x256x64 s3 panel 8)": dict(),
    "panel 4": dict(swizzle_panel=4),
    "panel 16": dict(swizzle_panel=16),
    "block_K 32, 4 stages": dict(block_K=32, num_stages=4),
    "block_K 32, 6 stages": dict(block_K=32, num_stages=6),
    "256x128 tiles": dict(block_M=256, block_N=128),
    "128x128 tiles, 4 stages": dict(block_N=128, num_stages=4),
}
SHAPES = [(4096, 4096, 4096)]
TARGET = {"kind": "cuda", "arch": "sm_90a"}


def build(M, N, K, dtype, **kw):
    return tilelang.compile(shipped.gemm(M, N, K, dtype, **kw), out_idx=[2], target=TARGET)


def on_gpu():
    from precompile import precompile
    precompile([(build, (M, N, K, dtype), kw) for dtype in ("float16", "bfloat16") for M, N, K in SHAPES
                for kw in VARIANTS.values()])
    import torch
    from playground.engine.timing import Timer
    rows = []
    for dtype in ("float16", "bfloat16"):
        tdt = getattr(torch, dtype)
        for M, N, K in SHAPES:
            g = torch.Generator(device="cuda").manual_seed(0)
            a = torch.randn(M, K, device="cuda", generator=g).to(tdt)
            b = torch.randn(K, N, device="cuda", generator=g).to(tdt)
            ref = a.float() @ b.float()
            calls = {"cuBLAS": lambda: a @ b}
            for name, kw in VARIANTS.items():
                try:
                    fn = build(M, N, K, dtype, **kw)
                except Exception as exc:
                    print(f"{dtype} {name}: build failed: {str(exc).splitlines()[-1][:200]}", flush=True)
                    continue
                out = fn(a, b)
                err = ((out.float() - ref).norm() / ref.norm()).item()
                print(f"{dtype} {M}x{N}x{K} {name:32s} rel err {err:.2e}", flush=True)
                if err < 1e-2:
                    calls[name] = lambda f=fn: f(a, b)
            times = {n: t["median_ms"] for n, t in Timer().time(calls, budget_ms=1500).items()}
            for name, ms in times.items():
                rows.append((dtype, f"{M}x{N}x{K}", name, ms, times["cuBLAS"] / ms))
    print(f"\n{'dtype':9s} {'shape':16s} {'variant':32s} {'ms':>8s} {'x cuBLAS':>9s}")
    for dtype, shape, name, ms, ratio in rows:
        print(f"{dtype:9s} {shape:16s} {name:32s} {ms:8.4f} {ratio:9.3f}")


if __name__ == "__main__":
    on_gpu()
