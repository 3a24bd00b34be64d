"""The persistent GEMM in CUTLASS's ping-pong form, against the shipped kernel and cuBLAS.

Why: the shipped `gemm_warp_specialized` is level with cuBLAS at 4096³ (0.998×), above it elsewhere. Its two
consumer warpgroups share each 128 × 256 tile (64 rows each), so both finish a tile together and both run the
epilogue (registers → shared → TMA store) while the tensor cores idle; the producer has loaded ahead, but no
wgmma is issued until the epilogue is done. In the ping-pong form each consumer warpgroup owns a whole tile
(128 × 128 here) and the warpgroups take alternate tiles: while one runs its epilogue, the other's main loop runs
on the tensor cores. The producer walks the tiles in order through one ring of stages; the warpgroups take turns
on it through two named barriers (a warpgroup starts its main loop once the other has issued its last step), which
correctness needs, not just speed: a stage's `full` barrier is waited on by parity, which tells only the phase just
completed from the one before, so a warpgroup must not start waiting for its round's stages while the other's are
still being filled (the first version, without the turns, faulted on the H200 once both warpgroups had tiles).
Each stage is freed by one warpgroup (empty barriers count 128); each warpgroup has its own C_shared and stores its
own tiles.

Result (gemm-pingpong-3.log, bench/tuning/README.md): 1.070× / 1.055× cuBLAS at 8192² × 1024 (5 stages; the shipped
kernel 1.027 / 1.020), level at 8192³, 0.99× at 4096³. Not shipped yet.

On the device:  bash bench/tuning/run.sh gemm_pingpong.py   (carry .device; prints a table)
Here (no GPU):  python bench/tuning/gemm_pingpong.py --compile-only
"""
import os
import sys

import tilelang
import tilelang.language as T

sys.path.insert(0, os.getcwd())
sys.path.insert(0, os.path.join(os.getcwd(), "kernels"))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))


def gemm_pingpong(M, N, K, dtype="float16", block_M=128, block_N=128, block_K=64, num_stages=4, swizzle_panel=8,
                  num_sms=132):
    accum_dtype = "float32"
    k_steps = T.ceildiv(K, block_K)
    m_tiles, n_tiles = -(-M // block_M), -(-N // block_N)
    num_tiles = m_tiles * n_tiles
    rounds = -(-num_tiles // num_sms)
    panel = min(swizzle_panel, n_tiles) if swizzle_panel > 0 else n_tiles

    @T.macro
    def tile_at(t, tile):
        first_column = t // (panel * m_tiles) * panel
        width = T.min(panel, n_tiles - first_column)
        within = t - first_column * m_tiles
        tile[0] = first_column + within % width
        tile[1] = within // width

    ORDER = 8  # named barriers 8 and 9: whose main loop is next (TileLang itself uses the low ids)

    @T.macro
    def consumer(wg, block, A, B, C, A_shared, B_shared, C_local, C_shared, full, empty, tile):
        # Warpgroup wg takes this block's rounds wg, wg + 2, wg + 4, ...; step numbers count every round's steps
        # (both warpgroups'), as the producer does, so stage and parity follow the one ring.
        for j in T.serial((rounds + 1) // 2):
            i = 2 * j + wg
            if i < rounds and block + i * num_sms < num_tiles:
                tile_at(block + i * num_sms, tile)
                T.clear(C_local)
                if i > 0:  # the other warpgroup's main loop of round i-1 has been issued
                    T.sync_threads(ORDER + wg, 256)
                for k in T.serial(k_steps):
                    step = i * k_steps + k
                    s = step % num_stages
                    T.mbarrier_wait_parity(full[s], (step // num_stages) & 1)
                    T.wgmma_gemm(A_shared[s, :, :], B_shared[s, :, :], C_local)
                    T.wait_wgmma(1)  # step k-1 has finished: its stage goes back to the producer
                    if k > 0:
                        T.mbarrier_arrive(empty[(step + num_stages - 1) % num_stages])
                if i + 1 < rounds and block + (i + 1) * num_sms < num_tiles:  # the other one's turn, if it has one
                    T.named_barrier_arrive(ORDER + 1 - wg, 256)
                T.wait_wgmma(0)
                T.mbarrier_arrive(empty[(i * k_steps + k_steps - 1) % num_stages])
                T.tma_store_wait()  # this warpgroup's previous store has finished reading its C_shared
                T.sync_threads(1 + wg, 128)
                T.copy(C_local, C_shared)
                T.sync_threads(1 + wg, 128)
                T.tma_copy(C_shared, C[tile[1] * block_M:(tile[1] + 1) * block_M,
                                       tile[0] * block_N:(tile[0] + 1) * block_N])
        T.tma_store_wait()

    @T.prim_func
    def main(A: T.Tensor((M, K), dtype), B: T.Tensor((K, N), dtype), C: T.Tensor((M, N), dtype)):
        with T.Kernel(num_sms, threads=384) as block:
            A_shared = T.alloc_shared((num_stages, block_M, block_K), dtype)
            B_shared = T.alloc_shared((num_stages, block_K, block_N), dtype)
            C_local0 = T.alloc_fragment((block_M, block_N), accum_dtype)
            C_local1 = T.alloc_fragment((block_M, block_N), accum_dtype)
            C_shared0 = T.alloc_shared((block_M, block_N), dtype)
            C_shared1 = T.alloc_shared((block_M, block_N), dtype)
            full = T.alloc_barrier([128] * num_stages)
            empty = T.alloc_barrier([128] * num_stages)  # one warpgroup frees a stage
            tile = T.alloc_local((2,), "int32")
            tx = T.get_thread_binding()

            if tx >= 256:  # the producer warpgroup: every round's loads, in order, through one ring
                T.set_max_nreg(40, 0)
                for i in T.serial(rounds):
                    if block + i * num_sms < num_tiles:
                        tile_at(block + i * num_sms, tile)
                        for k in T.serial(k_steps):
                            step = i * k_steps + k
                            s = step % num_stages
                            T.mbarrier_wait_parity(empty[s], ((step // num_stages) & 1) ^ 1)
                            T.tma_copy(A[tile[1] * block_M:(tile[1] + 1) * block_M,
                                         k * block_K:(k + 1) * block_K], A_shared[s, :, :], barrier=full[s])
                            T.tma_copy(B[k * block_K:(k + 1) * block_K,
                                         tile[0] * block_N:(tile[0] + 1) * block_N], B_shared[s, :, :],
                                       barrier=full[s])
                            T.mbarrier_arrive(full[s])
            elif tx < 128:
                T.set_max_nreg(232, 1)
                consumer(0, block, A, B, C, A_shared, B_shared, C_local0, C_shared0, full, empty, tile)
            else:
                T.set_max_nreg(232, 1)
                consumer(1, block, A, B, C, A_shared, B_shared, C_local1, C_shared1, full, empty, tile)

    return main


def build_shipped(M, N, K, dtype):
    import gemm
    return tilelang.compile(gemm.gemm(M, N, K, dtype), out_idx=[2], target=TARGET)


def build(M, N, K, dtype, **kw):
    return tilelang.compile(gemm_pingpong(M, N, K, dtype, **kw), out_idx=[2], target=TARGET)


VARIANTS = {
    "pingpong 128x128 s4": dict(),
    "pingpong 128x128 s5": dict(num_stages=5),
    "pingpong 64x256 s3": dict(block_M=64, block_N=256, num_stages=3),
}
SHAPES = [(4096, 4096, 4096), (8192, 8192, 1024), (8192, 8192, 8192)]
# aligned; ragged; fewer tiles than blocks; ragged with three rounds a block (both warpgroups busy)
CHECKS = [(1024, 1024, 1024), (1000, 1048, 1000), (384, 640, 256), (2000, 3000, 1000)]
TARGET = {"kind": "cuda", "arch": "sm_90a"}


def compile_only():
    for M, N, K in CHECKS[1:2] + SHAPES[:1]:
        for name, kw in VARIANTS.items():
            try:
                src = build(M, N, K, "float16", **kw).get_kernel_source()
                open(f"/tmp/gemm_pingpong_{name.replace(' ', '_')}_{M}.cu", "w").write(src)
                print(f"{M}x{N}x{K} {name} ok", flush=True)
            except Exception as exc:
                print(f"{M}x{N}x{K} {name} FAILED: {str(exc).splitlines()[-1][:300]}", flush=True)


def on_gpu():
    from harness import compare_gemm_variants
    compare_gemm_variants(build_shipped, build, VARIANTS, SHAPES, CHECKS)


if __name__ == "__main__":
    compile_only() if "--compile-only" in sys.argv else on_gpu()
