"""Tiled tensor-core GEMM: C = A @ B in fp16 or bf16, accumulated in fp32.

Three schedules of the same tiling. The first is here; the two Hopper ones are written out by hand, their body in
kernels/gemm_hopper.py (read this file first).

1. `gemm_pipelined` (any GPU with tensor cores). Each thread block owns one block_M × block_N tile of C. It walks
   along K in steps of block_K: copy a tile of A and a tile of B from global memory into shared memory, multiply them
   on the tensor cores into a register accumulator, and move on. `T.Pipelined` overlaps the copies of the next
   steps with the multiply of this one (num_stages tiles in flight); on Hopper (sm_90a) TileLang turns the copies
   into TMA loads and the multiply into wgmma, with a producer warpgroup feeding the consumers. At the end the
   accumulator is rounded to the output type and written once, through shared memory, as one TMA bulk copy.

2. `gemm_warp_specialized` (Hopper, the shipped default): the same pipeline by hand, the tensor cores kept busy
   between steps, one persistent block per SM walking many tiles (0.90× → 1.02× cuBLAS at 8192 × 8192 × 1024).

3. `gemm_split_k` (Hopper, `split_k` > 1): for outputs of too few tiles to fill the SMs, the CTAs of a thread block
   cluster share a tile, each multiplying a part of K, and add their parts through distributed shared memory.

Run it alone:  python kernels/gemm.py   (checks it against PyTorch and times it against cuBLAS on a GPU)
"""
import torch
import tilelang.language as T


def gemm(M=4096, N=4096, K=4096, dtype="float16",
         block_M=128, block_N=256, block_K=64, num_stages=3, threads=256, swizzle_panel=8,
         warp_specialized=True, num_sms=132, split_k=1, multicast=False):
    """`threads`: the threads that multiply (two warpgroups at the default); on Hopper a 128-thread producer
    warpgroup comes on top. `num_sms`: blocks of the persistent schedule, one per SM (132 on an H100 SXM or H200;
    the playground sets it to the GPU's count). `split_k`: CTAs that share each output tile, each taking a part of K
    (schedule 3). `multicast`: two CTAs in neighbouring tile rows load each step of B once for both (schedule 2)."""
    check_options(warp_specialized=warp_specialized, split_k=split_k, multicast=multicast)
    if not warp_specialized:
        return gemm_pipelined(M, N, K, dtype, block_M, block_N, block_K, num_stages, threads, swizzle_panel)
    if split_k > 1:
        return gemm_split_k(M, N, K, dtype, block_M, block_N, block_K, num_stages, threads, split_k)
    return gemm_warp_specialized(M, N, K, dtype, block_M, block_N, block_K, num_stages, threads, swizzle_panel,
                                 num_sms, multicast)


def check_options(warp_specialized, split_k, multicast):
    """Refuse the combinations no schedule implements (the engine asks too, of a rule's config with values over it)."""
    for asked, name in ((split_k > 1, "split_k > 1"), (multicast, "multicast=True")):
        if asked and not warp_specialized:
            raise ValueError(f"{name} runs on the warp-specialized schedule only: set warp_specialized=True")
    if split_k > 1 and multicast:
        raise ValueError("multicast=True needs split_k=1: split K's CTAs share a tile, not a column of tiles")


def pipelined_k_loop(K, block_M, block_N, block_K, num_stages):
    """The main loop of `gemm_pipelined`, shared with kernels/gemm_epilogue.py: the block_M × block_N tile (bx, by)
    of A @ B into the fp32 accumulator C_local, through the shared-memory tiles A_shared and B_shared."""

    @T.macro
    def k_loop(A, B, A_shared, B_shared, C_local, bx, by):
        T.clear(C_local)
        for k in T.Pipelined(T.ceildiv(K, block_K), num_stages=num_stages):
            T.copy(A[by * block_M, k * block_K], A_shared)  # out-of-range rows and columns read as zero
            T.copy(B[k * block_K, bx * block_N], B_shared)
            # FullRow: each consumer warpgroup owns whole rows of the tile (64 × 256 each at the defaults),
            # the widest wgmma shape, so each instruction does the most work per operand fetched.
            T.gemm(A_shared, B_shared, C_local, policy=T.GemmWarpPolicy.FullRow)

    return k_loop


def gemm_pipelined(M, N, K, dtype, block_M, block_N, block_K, num_stages, threads, swizzle_panel):
    accum_dtype = "float32"
    k_loop = pipelined_k_loop(K, block_M, block_N, block_K, num_stages)

    @T.prim_func
    def main(A: T.Tensor((M, K), dtype), B: T.Tensor((K, N), dtype), C: T.Tensor((M, N), dtype)):
        # One block per output tile: bx walks the columns of C, by its rows.
        with T.Kernel(T.ceildiv(N, block_N), T.ceildiv(M, block_M), threads=threads) as (bx, by):
            A_shared = T.alloc_shared((block_M, block_K), dtype)
            B_shared = T.alloc_shared((block_K, block_N), dtype)
            C_local = T.alloc_fragment((block_M, block_N), accum_dtype)  # registers, spread over the threads
            C_shared = T.alloc_shared((block_M, block_N), dtype)  # the finished tile, for one bulk store

            # Neighbouring blocks share rows of A and columns of B: visiting the tiles in panels keeps them in L2.
            T.use_swizzle(panel_size=swizzle_panel, enable=swizzle_panel > 0)

            k_loop(A, B, A_shared, B_shared, C_local, bx, by)  # C_local = the tile of A @ B, in fp32
            T.copy(C_local, C_shared)  # rounded to dtype
            T.copy(C_shared, C[by * block_M, bx * block_N])  # one TMA store; out-of-range parts are not written

    return main


def gemm_warp_specialized(M, N, K, dtype, block_M, block_N, block_K, num_stages, threads, swizzle_panel, num_sms,
                          multicast=False):
    # The Hopper schedules' body is in its own file, kernels/gemm_hopper.py (imported here, not at the top, so that
    # `python kernels/gemm.py` finds the kernels package once its __main__ block has put it on the path).
    from kernels.gemm_hopper import warp_specialized_tiles
    pair = 2 if multicast else 1  # CTAs a cluster: with multicast, a pair sharing each step of B
    tiles = warp_specialized_tiles(M, N, K, dtype, block_M, block_N, block_K, num_stages, threads, swizzle_panel,
                                   num_sms // pair, multicast=multicast)

    if multicast:
        @T.prim_func
        def main_multicast(A: T.Tensor((M, K), dtype), B: T.Tensor((K, N), dtype), C: T.Tensor((M, N), dtype)):
            with T.ClusterKernel(num_sms // 2 * 2, cluster_dims=(2, 1, 1), threads=threads + 128) as block:
                tiles(A, B, C, block // 2, None)

        return main_multicast

    @T.prim_func
    def main(A: T.Tensor((M, K), dtype), B: T.Tensor((K, N), dtype), C: T.Tensor((M, N), dtype)):  # (persistent)
        with T.Kernel(num_sms, threads=threads + 128) as block:  # one block an SM; 128 threads are the producer's
            tiles(A, B, C, block, None)

    return main


def gemm_split_k(M, N, K, dtype, block_M, block_N, block_K, num_stages, threads, split_k):
    if block_M % split_k:
        raise ValueError(f"split_k={split_k} CTAs each store block_M / split_k rows of a tile: "
                         f"block_M={block_M} is not a multiple of it")
    needed = num_stages * stage_bytes(block_M, block_N, block_K) + output_bytes(block_M, block_N, 2, split_k)
    if needed > SHARED_MEMORY - 1024:
        raise ValueError(f"split_k={split_k} with {block_M} × {block_N} tiles and {num_stages} stages needs "
                         f"{needed // 1024} KiB of shared memory (the fp32 tile and its slices included); a block "
                         f"has {SHARED_MEMORY // 1024} KiB: take fewer stages or a smaller tile")
    from kernels.gemm_hopper import warp_specialized_tiles  # (imported here: see gemm_warp_specialized)
    num_tiles = -(-M // block_M) * -(-N // block_N)
    tiles = warp_specialized_tiles(M, N, K, dtype, block_M, block_N, block_K, num_stages, threads, 0, num_tiles,
                                   split_k=split_k)

    @T.prim_func
    def main(A: T.Tensor((M, K), dtype), B: T.Tensor((K, N), dtype), C: T.Tensor((M, N), dtype)):  # (split K)
        # A cluster of split_k CTAs a tile (cluster_dims: consecutive blocks along x form one cluster).
        with T.ClusterKernel(split_k * num_tiles, cluster_dims=(split_k, 1, 1), threads=threads + 128) as block:
            tiles(A, B, C, block // split_k, None)

    return main


# ---- What the playground needs to know about this kernel -------------------------------------------------------
DTYPES = ["float16", "bfloat16"]

# Tile parameters worth searching; the factory's defaults above are the shipped config, tuned on an H200
# (bench/README.md). 256-wide tiles in both M and N, or 4 stages of them, do not fit in shared memory (6 and 8
# stages fit smaller tiles only: `deepest_pipeline`); with 256 threads the two consumer warpgroups split block_M,
# so block_M = 64 needs threads = 128.
SPACE = {"block_M": [64, 128, 256], "block_N": [64, 128, 192, 256], "block_K": [32, 64], "num_stages": [2, 3, 4, 6, 8],
         "threads": [128, 256], "swizzle_panel": [0, 8, 16], "split_k": [1, 2, 4]}

# warp_specialized=False is the T.Pipelined schedule: for comparison, and for GPUs before Hopper (the hand-written
# schedule uses TMA, mbarriers and wgmma, which need sm_90a). multicast: pairs of CTAs sharing B (the rule's, below).
OPTIONS = {"warp_specialized": [True, False], "multicast": [False, True]}

PRESETS = {
    "4096³": dict(M=4096, N=4096, K=4096),
    "8192³": dict(M=8192, N=8192, K=8192),
    "8192×8192×1024 (skinny K)": dict(M=8192, N=8192, K=1024),
    "2048³": dict(M=2048, N=2048, K=2048),
    "1000×1000×1000 (ragged)": dict(M=1000, N=1000, K=1000),
}


def shape_class(M, N, K):
    """Rows TMA cannot load (below), or enough output tiles of 128 × 256 for half the SMs, or too few (skinny), and
    rows off a 128-byte line (where the rule multicasts): a config tuned for one says little about the others."""
    if K % 8 or N % 8:
        return "rows off 16 bytes"
    size = "large" if -(-M // 128) * -(-N // 256) >= 132 // 2 else "skinny"
    return size + (", rows off 128 bytes" if N % 64 or K % 64 else "")


# The tiles the rule picks from: (block_M, block_N, threads, num_stages, speed of a full round of them relative to
# 128 × 256, measured on the H200 from 4096³ to 8192³; 128 × 192 on an H100 at 3072³, 4096³ and 8192 × 8192 × 1024).
# Each keeps as many stages as fit beside its output tile (`deepest_pipeline`): a smaller tile reuses what it fetches
# less, so needs more in flight (64 × 128: 0.61 of 128 × 256 with 4 stages, 0.44 with 3; 1024³ on an H100, 8 stages:
# 1.05× cuBLAS, 4: 0.92×). 192 columns, a legal wgmma width, fit outputs whose 128 or 256 leave a round part-empty.
SHARED_MEMORY = 227 * 1024  # what one block may use on an H100 or H200


def stage_bytes(block_M, block_N, block_K=64, element_size=2):
    """Shared memory for one stage of the pipeline: a tile of A and a tile of B."""
    return (block_M * block_K + block_K * block_N) * element_size


def output_bytes(block_M, block_N, element_size=2, split_k=1):
    """Shared memory for a finished tile: the tile for its store, or with split_k > 1 the fp32 tile in slices and
    the slots for the other CTAs' parts of this one's slice (schedule 3)."""
    return (block_M * block_N * element_size if split_k == 1 else
            block_M * block_N * 4 + (split_k - 1) * (block_M // split_k) * block_N * 4)


def deepest_pipeline(block_M, block_N, block_K=64, element_size=2, most=8, split_k=1):
    """The most stages of A and B tiles (at most `most`) that fit in shared memory beside the output tile."""
    stage = stage_bytes(block_M, block_N, block_K, element_size)
    free = SHARED_MEMORY - output_bytes(block_M, block_N, element_size, split_k) - 1024
    return max(2, min(most, free // stage))


TILES = [(128, 256, 256, deepest_pipeline(128, 256), 1.00), (128, 192, 256, deepest_pipeline(128, 192), 0.98),
         (128, 128, 256, deepest_pipeline(128, 128), 0.98), (64, 128, 128, deepest_pipeline(64, 128), 0.61)]

# Split K (schedule 3): two CTAs of a cluster a tile, at most one round of them (the CTAs of an unfinished tile wait
# for each other), in 128 × 128 tiles or 64 × 128. Adding the parts costs about 5 steps of K (`SPLIT_COST`, in
# elements of K): the accumulator to shared memory, a slice to the other CTA, back, store. Four CTAs a tile are left
# to `tune` (H200: 128 × 4096 × 4096 0.51× cuBLAS, against 0.70× unsplit: three slices to add, 3 stages only).
SPLIT_TILES = [(128, 128, 256, deepest_pipeline(128, 128, split_k=2), 0.98, 2),
               (64, 128, 128, deepest_pipeline(64, 128, split_k=2), 0.61, 2)]
SPLIT_COST = 5 * 64
# Split only a product bound by memory, at most this many multiply-adds per element of A, B and C it moves: there
# every idle SM is bandwidth lost, while one bound by the tensor cores loses more adding the parts (H200, bf16:
# 128 × 8192 × 8192, 124 an element, 0.78× → 0.94× cuBLAS split; 256 × 4096², 227, 0.79× → 0.93×; 1024 × 1024 ×
# 8192, 482, 1.01× → 0.81×). An H200 does 989 TFLOP/s on 4.8 TB/s: 206 multiply-adds per 2-byte element.
SPLIT_MOST_INTENSITY = 256
# A tile goes with its threads, split and the stage counts it holds (TIED: what a user leaves follows what they set).
TIED = {("block_M", "block_N", "threads", "num_stages", "split_k"): [(m, n, threads, stages, split) for m, n, threads,
        deepest, *_, split in [t + (1,) for t in TILES] + SPLIT_TILES for stages in range(deepest, 1, -1)]}


def pick_config(M, N, K, num_sms=132, tiles=TILES, split=True, multicast=True):
    """The config for an M × N × K product when none is set, tuned or preset (playground/engine/config_choice.py).
    `tiles`: the TILES to choose from; `split`, `multicast`: whether split K or multicast may be chosen
    (kernels/gemm_epilogue.py, which shares this rule, has neither schedule)."""
    # TMA needs every row of A (K elements) and of B and C (N elements) to start on a 16-byte boundary (8 fp16 or
    # bf16 values). The hand-written schedule loads only by TMA, so other sizes (K = 2047) take the T.Pipelined one,
    # which then copies with cp.async; with 256-wide tiles that copy runs out of registers, 128-wide ones fit.
    if K % 8 or N % 8:
        return {"warp_specialized": False, "block_M": 128, "block_N": 128, "threads": 256}

    # The num_sms persistent blocks take the output tiles in rounds, and a round costs the same however few tiles
    # it has. 3072³ in 128 × 256 tiles is 288 tiles: three rounds, the last 18 % full (0.77× cuBLAS); in 128 × 128
    # tiles, 576: five rounds, 87 % full (0.85×); in 128 × 192 tiles, 384: three rounds, 97 % full. A small output
    # (1024³, or M = 128) fills one round only with 64 × 128 tiles. So: the tile with the shortest time, rounds ×
    # tile size ÷ speed (as cuBLAS's heuristics weigh wave quantization); on large outputs, whose last round is
    # nearly full, that is 128 × 256.
    def time(block_M, block_N, speed, split_k=1):
        count = -(-M // block_M) * -(-N // block_N) * split_k
        rounds = -(-count // num_sms)
        return rounds * block_M * block_N * (-(-K // split_k) + (SPLIT_COST if split_k > 1 else 0)) / speed

    # An output of at most 256 columns (16384 × 256 × 4096) reads A once, straight through, and the tensor cores
    # wait for memory: what counts is how much of A each SM has in flight, and a 128 × 256 tile has room for 3
    # stages of it only (H100: 0.89× cuBLAS; 128 × 128 tiles with 6 stages, twice the A in flight, 0.99× in two
    # rounds). At 256 rows the B in flight is the same in either tile, and one round beats two (0.91× vs 0.83×).
    if N <= 256:
        tiles = [t for t in tiles if t[:2] != (128, 256)] or tiles
    block_M, block_N, threads, num_stages, speed = min(tiles, key=lambda t: time(t[0], t[1], t[4]))
    config = {"block_M": block_M, "block_N": block_N, "threads": threads, "num_stages": num_stages}

    # An output of few tiles leaves SMs idle whatever the tile (128 × 8192 × 8192: 64 tiles of 128 × 128, or 128
    # of 64 × 128 at 0.61 the speed): then split K, if the product is bound by memory and one round holds every part.
    if split and M * N * K <= SPLIT_MOST_INTENSITY * (M * K + K * N + M * N):
        fitting = [t for t in SPLIT_TILES if -(-M // t[0]) * -(-N // t[1]) * t[5] <= num_sms]
        if fitting:
            t = min(fitting, key=lambda t: time(t[0], t[1], t[4], t[5]))
            if time(t[0], t[1], t[4], t[5]) < time(block_M, block_N, speed):
                return {"block_M": t[0], "block_N": t[1], "threads": t[2], "num_stages": t[3], "split_k": t[5]}

    # Pairs of CTAs in neighbouring tile rows loading each step of B once for both (multicast) halve B's reads from
    # L2. That pays where L2 sets the pace: rows of A or B off a 128-byte line (K or N not a multiple of 64 two-byte
    # values) make each TMA box row span two lines (H100: 3000 × 5000 × 1000 0.70× → 0.92× cuBLAS, 6000 × 10000 ×
    # 2000 0.82× → 0.96×), and two rows of tiles narrower than 256 read each step of B at once (256 × 8192 × 8192:
    # 0.86× → 0.99×). Elsewhere the pair costs (1024³: 0.80 the speed), and so do the extra rounds of pairs over an
    # odd count of rows where rounds are few (384 × 8192 × 8192: 86 pairs on 66 clusters, 2 rounds for 1: 0.51).
    rows, columns = -(-M // block_M), -(-N // block_N)
    rounds, paired_rounds = -(-rows * columns // num_sms), -(-(-(-rows // 2) * columns) // (num_sms // 2))
    if multicast and paired_rounds - rounds <= rounds // 8 and ((N % 64 or K % 64) and rows >= 4 or
                                                                rows == 2 and block_M == 128 and block_N < 256):
        config["multicast"] = True
    return config


# Verification runs on these too, whatever size is being timed: one aligned, one ragged in every dimension.
CHECK_SHAPES = [dict(M=1024, N=1024, K=1024), dict(M=1000, N=1048, K=1000)]


def make_inputs(M, N, K, dtype, device, generator):
    a = torch.randn(M, K, device=device, generator=generator).to(dtype)
    b = torch.randn(K, N, device=device, generator=generator).to(dtype)
    return a, b


def reference(a, b):
    return a.float() @ b.float()


BASELINES = {"torch.matmul (cuBLAS)": lambda a, b: a @ b}


def flops(M, N, K):
    return 2 * M * N * K


def bytes_moved(M, N, K, dtype):
    return (4 if dtype == "float32" else 2) * (M * K + K * N + M * N)


if __name__ == "__main__":
    import sys
    from pathlib import Path
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    from playground.standalone import main
    main("gemm")
