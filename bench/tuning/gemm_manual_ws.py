"""GEMM with a hand-written warp-specialized main loop (CUTLASS's schedule), against the shipped kernel and cuBLAS.

Why: the shipped kernel's `T.Pipelined` loop ends every k-step with `warpgroup_wait<0>` before it hands the stage
back (bench/README.md), so each consumer warpgroup drains its tensor-core queue at every step. CUTLASS keeps one
step in flight: issue step k, wait until only that one is outstanding (`wait_wgmma(1)`), then hand back step k-1's
stage. `T.Pipelined` cannot hand back a previous iteration's stage, so here the pipeline is written out by hand:
a producer warpgroup issues TMA loads into `stages` buffers guarded by full/empty mbarriers, the two consumer
warpgroups run the wgmma.

Variants: manual schedule with wait depth 1 (CUTLASS) and 0 (the shipped behaviour, same code otherwise: isolates
the effect of the wait), stages 3/4, C stored through shared memory (TMA) or straight from registers.

On the device:  bash bench/tuning/run.sh gemm_manual_ws.py   (carry .device; prints a table)
Here (no GPU):  python bench/tuning/gemm_manual_ws.py --compile-only   (builds every variant for sm_90a, prints
                ptxas figures and counts the waits in the generated CUDA)
"""
import os
import re
import sys

import tilelang
import tilelang.language as T

sys.path.insert(0, os.getcwd())
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))


def gemm_ws(M, N, K, dtype="float16", block_M=128, block_N=256, block_K=64, stages=3, wait_depth=1,
            smem_store=True, swizzle_panel=16):
    accum = "float32"
    k_blocks = T.ceildiv(K, block_K)
    consumers = 256  # two consumer warpgroups share each tile (64 rows each with FullRow)

    @T.prim_func
    def main(A: T.Tensor((M, K), dtype), B: T.Tensor((K, N), dtype), C: T.Tensor((M, N), dtype)):
        with T.Kernel(T.ceildiv(N, block_N), T.ceildiv(M, block_M), threads=consumers + 128) as (bx, by):
            A_s = T.alloc_shared((stages, block_M, block_K), dtype)
            B_s = T.alloc_shared((stages, block_K, block_N), dtype)
            C_local = T.alloc_fragment((block_M, block_N), accum)
            C_s = T.alloc_shared((block_M, block_N), dtype)
            full = T.alloc_barrier([128] * stages)  # the producer warpgroup arrives; TMA completes the bytes
            empty = T.alloc_barrier([consumers] * stages)  # the consumers hand a stage back
            T.use_swizzle(panel_size=swizzle_panel, enable=swizzle_panel > 0)
            tx = T.get_thread_binding()

            if tx >= consumers:  # producer warpgroup: TMA loads, `stages` k-steps ahead
                T.set_max_nreg(40, 0)
                for k in T.serial(k_blocks):
                    s = k % stages
                    T.mbarrier_wait_parity(empty[s], ((k // stages) & 1) ^ 1)
                    T.tma_copy(A[by * block_M:(by + 1) * block_M, k * block_K:(k + 1) * block_K], A_s[s, :, :],
                               barrier=full[s])
                    T.tma_copy(B[k * block_K:(k + 1) * block_K, bx * block_N:(bx + 1) * block_N], B_s[s, :, :],
                               barrier=full[s])
                    T.mbarrier_arrive(full[s])
            else:  # consumer warpgroups: wgmma, one k-step kept in flight
                T.set_max_nreg(232, 1)
                T.clear(C_local)
                for k in T.serial(k_blocks):
                    s = k % stages
                    T.mbarrier_wait_parity(full[s], (k // stages) & 1)
                    T.wgmma_gemm(A_s[s, :, :], B_s[s, :, :], C_local, policy=T.GemmWarpPolicy.FullRow)
                    if wait_depth == 1:
                        T.wait_wgmma(1)  # step k-1 is done: its stage goes back; step k still runs
                        if k > 0:
                            T.mbarrier_arrive(empty[(k + stages - 1) % stages])
                    else:
                        T.wait_wgmma(0)
                        T.mbarrier_arrive(empty[s])
                T.wait_wgmma(0)
                if smem_store:
                    T.copy(C_local, C_s)
                    T.copy(C_s, C[by * block_M, bx * block_N])
                else:
                    T.copy(C_local, C[by * block_M, bx * block_N])

    return main


def gemm_ws_persistent(M, N, K, dtype="float16", block_M=128, block_N=256, block_K=64, stages=3, grid=132,
                       swizzle_panel=16):
    """The same main loop in a persistent kernel: `grid` blocks walk the tiles (in panels of `swizzle_panel` tile
    columns, for L2), the producer runs on into the next tile while the consumers finish this one, and the C store
    of one tile is left in flight (TMA, no wait) while the next tile's main loop runs: it is waited for only before
    C_s is written again. That overlaps the epilogue and the next tile's pipeline fill, which the shipped kernel
    cannot (at K = 1024 a tile has only 16 k-steps)."""
    accum = "float32"
    k_blocks = T.ceildiv(K, block_K)
    m_blocks, n_blocks = T.ceildiv(M, block_M), T.ceildiv(N, block_N)
    assert n_blocks % swizzle_panel == 0
    num_tiles = m_blocks * n_blocks
    consumers = 256

    @T.macro
    def tile_of(t, coords):
        # panel-major order: `swizzle_panel` tile columns at a time, walking down the rows of C within a panel
        panel = t // (swizzle_panel * m_blocks)
        within = t % (swizzle_panel * m_blocks)
        coords[0] = panel * swizzle_panel + within % swizzle_panel  # bx: tile column
        coords[1] = within // swizzle_panel  # by: tile row

    @T.prim_func
    def main(A: T.Tensor((M, K), dtype), B: T.Tensor((K, N), dtype), C: T.Tensor((M, N), dtype)):
        with T.Kernel(grid, threads=consumers + 128) as bid:
            A_s = T.alloc_shared((stages, block_M, block_K), dtype)
            B_s = T.alloc_shared((stages, block_K, block_N), dtype)
            C_local = T.alloc_fragment((block_M, block_N), accum)
            C_s = T.alloc_shared((block_M, block_N), dtype)
            full = T.alloc_barrier([128] * stages)
            empty = T.alloc_barrier([consumers] * stages)
            coords = T.alloc_local((2,), "int32")
            tx = T.get_thread_binding()
            my_tiles = T.ceildiv(num_tiles - bid, grid)

            if tx >= consumers:  # producer: never waits for an epilogue
                T.set_max_nreg(40, 0)
                for i in T.serial(my_tiles):
                    tile_of(bid + i * grid, coords)
                    for k in T.serial(k_blocks):
                        g = i * k_blocks + k  # this block's k-step count so far: the stage and its phase
                        s = g % stages
                        T.mbarrier_wait_parity(empty[s], ((g // stages) & 1) ^ 1)
                        T.tma_copy(A[coords[1] * block_M:(coords[1] + 1) * block_M, k * block_K:(k + 1) * block_K],
                                   A_s[s, :, :], barrier=full[s])
                        T.tma_copy(B[k * block_K:(k + 1) * block_K, coords[0] * block_N:(coords[0] + 1) * block_N],
                                   B_s[s, :, :], barrier=full[s])
                        T.mbarrier_arrive(full[s])
            else:
                T.set_max_nreg(232, 1)
                for i in T.serial(my_tiles):
                    tile_of(bid + i * grid, coords)
                    T.clear(C_local)
                    for k in T.serial(k_blocks):
                        g = i * k_blocks + k
                        s = g % stages
                        T.mbarrier_wait_parity(full[s], (g // stages) & 1)
                        T.wgmma_gemm(A_s[s, :, :], B_s[s, :, :], C_local, policy=T.GemmWarpPolicy.FullRow)
                        T.wait_wgmma(1)
                        if k > 0:
                            T.mbarrier_arrive(empty[(g + stages - 1) % stages])
                    T.wait_wgmma(0)
                    T.mbarrier_arrive(empty[(i * k_blocks + k_blocks - 1) % stages])  # the tile's last step
                    T.tma_store_wait()  # the previous tile's store has read C_s (no-op but on its issuing thread)
                    T.sync_threads(1, consumers)
                    T.copy(C_local, C_s)
                    T.sync_threads(1, consumers)
                    T.tma_copy(C_s, C[coords[1] * block_M:(coords[1] + 1) * block_M,
                                      coords[0] * block_N:(coords[0] + 1) * block_N])  # left in flight
                T.tma_store_wait()

    return main


VARIANTS = {  # 4 stages with C staged in shared memory need 256 KB: more than a block gets (227 KB)
    "ws wait1 s3": dict(),
    "ws wait0 s3": dict(wait_depth=0),  # the shipped kernel's wait, in this code: isolates the wait's effect
    "ws wait1 s4 direct-store": dict(stages=4, smem_store=False),
    "ws wait1 bk128 s2 direct-store": dict(block_K=128, stages=2, smem_store=False),
    "ws wait1 s3 panel8": dict(swizzle_panel=8),
    "persistent wait1 s3": dict(persistent=True),
    "persistent wait1 s3 panel8": dict(persistent=True, swizzle_panel=8),
}
SHAPES = [(4096, 4096, 4096), (8192, 8192, 1024), (8192, 8192, 8192)]
TARGET = {"kind": "cuda", "arch": "sm_90a"}


def build(M, N, K, dtype, persistent=False, **kw):
    factory = gemm_ws_persistent if persistent else gemm_ws
    return tilelang.compile(factory(M, N, K, dtype, **kw), out_idx=[2], target=TARGET)


def build_shipped(M, N, K, dtype):
    sys.path.insert(0, os.path.join(os.getcwd(), "kernels"))
    import gemm as shipped
    return tilelang.compile(shipped.gemm(M, N, K, dtype), out_idx=[2], target=TARGET)


def compile_only():
    tilelang.env.disable_cache()  # fresh builds: a cached one carries no launch figures
    for name, kw in VARIANTS.items():
        try:
            kernel = build(4096, 4096, 4096, "float16", **kw)
        except Exception as exc:  # report and go on: one variant not fitting must not hide the others
            print(f"{name:32s} FAILED: {str(exc).splitlines()[-1][:200]}")
            continue
        import tempfile
        from pathlib import Path
        from playground.engine.compile import launch_info, ptxas_resources
        src = kernel.get_kernel_source()
        with tempfile.TemporaryDirectory() as tmp:
            ptx = Path(tmp) / "k.ptx"
            ptx.write_text(kernel._get_ptx())
            figures, _, _ = ptxas_resources(ptx, "sm_90a")
        smem = launch_info(kernel).get("dynamic_shared_bytes", 0) // 1024
        waits = re.findall(r"wait_wgmma<(\d)>", src)
        print(f"{name:32s} ok: {figures.get('registers')} registers, {figures.get('spill_stores')} spill stores, "
              f"{smem} KB dynamic shared memory{' (too much: 227 KB a block)' if smem > 227 else ''}; "
              f"wait_wgmma {dict((w, waits.count(w)) for w in sorted(set(waits)))}")


def on_gpu():
    from precompile import precompile
    precompile([(build_shipped, (M, N, K, dtype), {}) for dtype in ("float16", "bfloat16") for M, N, K in SHAPES]
               + [(build, (M, N, K, dtype), kw) for dtype in ("float16", "bfloat16") for M, N, K in SHAPES
                  for kw in VARIANTS.values()])  # before CUDA is touched here: the builds run in forked children
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
            fns = {"cuBLAS": lambda: a @ b,
                   "ship": build_shipped(M, N, K, dtype)}
            for name, kw in VARIANTS.items():
                try:
                    fns[name] = build(M, N, K, dtype, **kw)
                except Exception as exc:
                    print(f"{dtype} {M}x{N}x{K} {name}: build failed: {str(exc).splitlines()[-1][:200]}", flush=True)
            calls = {}
            for name, fn in fns.items():
                call = fn if name == "cuBLAS" else (lambda f=fn: f(a, b))
                out = call()
                err = ((out.float() - ref).norm() / ref.norm()).item()
                same = all(torch.equal(out, call()) for _ in range(3))
                ok = err < 1e-2 and same
                print(f"{dtype} {M}x{N}x{K} {name:28s} rel err {err:.2e} repeatable {same}", flush=True)
                if ok:
                    calls[name] = call
            times = {n: t["median_ms"] for n, t in Timer().time(calls, budget_ms=1500).items()}  # interleaved
            base = times["cuBLAS"]
            for name, ms in times.items():
                rows.append((dtype, f"{M}x{N}x{K}", name, ms, base / ms))
    print(f"\n{'dtype':9s} {'shape':16s} {'variant':28s} {'ms':>8s} {'x cuBLAS':>9s}")
    for dtype, shape, name, ms, ratio in rows:
        print(f"{dtype:9s} {shape:16s} {name:28s} {ms:8.4f} {ratio:9.3f}")


if __name__ == "__main__":
    compile_only() if "--compile-only" in sys.argv else on_gpu()
