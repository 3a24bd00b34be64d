"""Tiled tensor-core GEMM: C = A @ B in fp16 or bf16, accumulated in fp32.

Two schedules of the same tiling, the second built out of the first.

1. `gemm_pipelined` (any GPU with tensor cores). Each thread block owns one block_M × block_N tile of C. It walks
   along K in steps of block_K: copy a tile of A and a tile of B from global memory into shared memory, multiply them
   on the tensor cores into a register accumulator, and move on. `T.Pipelined` overlaps the copies of the next
   steps with the multiply of this one (num_stages tiles in flight); on Hopper (sm_90a) TileLang turns the copies
   into TMA loads and the multiply into wgmma, with a producer warpgroup feeding the consumers. At the end the
   accumulator is rounded to the output type and written once, through shared memory, as one TMA bulk copy.

2. `gemm_warp_specialized` (Hopper, the shipped default). The same pipeline written out by hand, for two things
   `T.Pipelined` cannot do. (a) It waits for the tensor cores only as far as it must: after issuing step k, a
   consumer waits until just that step is still running (`T.wait_wgmma(1)`) and hands back the buffer of step k-1,
   so the tensor cores never drain between steps (CUTLASS does the same). (b) It is persistent: one block per SM
   walks many tiles, so the producer starts loading the next tile while the consumers finish this one, and the
   store of a finished tile runs while the next one is being multiplied. With a short K (8192 × 8192 × 1024: 16
   steps a tile) the start and end of each tile are a large part of its time; here they overlap the work.
   That took the kernel from 0.90× to 1.02× cuBLAS at 8192 × 8192 × 1024 and from 0.97× to 1.00× at 4096³ on an
   H200 (bench/README.md).

3. Split K (`split_k` > 1, on the warp-specialized schedule) for outputs of few tiles and a long K: 128 × 8192 ×
   8192 is 64 tiles of 128 × 128, half the SMs idle, each of the rest walking all 128 steps of K. With split_k = 2,
   a thread block cluster of two CTAs shares a tile: each multiplies half of K into its own fp32 accumulator, then
   they add the halves through distributed shared memory (Hopper's SM-to-SM copies inside a cluster) and each
   stores half the tile's rows. No partial goes through global memory, and the sum is always taken in the same
   order, so the result does not change from run to run.

Run it alone:  python kernels/gemm.py   (checks it against PyTorch and times it against cuBLAS on a GPU)
"""
import torch
import tilelang.language as T


def gemm(M=4096, N=4096, K=4096, dtype="float16",
         block_M=128, block_N=256, block_K=64, num_stages=3, threads=256, swizzle_panel=8,
         warp_specialized=True, num_sms=132, split_k=1):
    """`threads`: the threads that multiply (two warpgroups at the default); on Hopper a 128-thread producer
    warpgroup comes on top. `num_sms`: blocks of the persistent schedule, one per SM (132 on an H100 SXM or
    H200; the playground sets it to the count of the GPU present). `split_k`: CTAs that share each output tile,
    each taking a part of K (schedule 3)."""
    if split_k > 1:
        if not warp_specialized:
            raise ValueError("split_k > 1 runs on the warp-specialized schedule only: set warp_specialized=True")
        return gemm_split_k(M, N, K, dtype, block_M, block_N, block_K, num_stages, threads, split_k)
    if warp_specialized:
        return gemm_warp_specialized(M, N, K, dtype, block_M, block_N, block_K, num_stages, threads, swizzle_panel,
                                     num_sms)
    return gemm_pipelined(M, N, K, dtype, block_M, block_N, block_K, num_stages, threads, swizzle_panel)


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


def gemm_warp_specialized(M, N, K, dtype, block_M, block_N, block_K, num_stages, threads, swizzle_panel, num_sms):
    tiles = warp_specialized_tiles(M, N, K, dtype, block_M, block_N, block_K, num_stages, threads, swizzle_panel,
                                   num_sms)

    @T.prim_func
    def main(A: T.Tensor((M, K), dtype), B: T.Tensor((K, N), dtype), C: T.Tensor((M, N), dtype)):
        with T.Kernel(num_sms, threads=threads + 128) as block:
            tiles(A, B, C, block, None)

    return main


def gemm_split_k(M, N, K, dtype, block_M, block_N, block_K, num_stages, threads, split_k):
    if block_M % split_k:
        raise ValueError(f"split_k={split_k} CTAs each store block_M / split_k rows of a tile: "
                         f"block_M={block_M} is not a multiple of it")
    needed = num_stages * (block_M + block_N) * block_K * 2 + output_bytes(block_M, block_N, 2, split_k)
    if needed > SHARED_MEMORY - 1024:
        raise ValueError(f"split_k={split_k} with {block_M} × {block_N} tiles and {num_stages} stages needs "
                         f"{needed // 1024} KiB of shared memory (the fp32 tile and its slices included); a block "
                         f"has {SHARED_MEMORY // 1024} KiB: take fewer stages or a smaller tile")
    num_tiles = -(-M // block_M) * -(-N // block_N)
    tiles = warp_specialized_tiles(M, N, K, dtype, block_M, block_N, block_K, num_stages, threads, 0, num_tiles,
                                   split_k=split_k)

    @T.prim_func
    def main(A: T.Tensor((M, K), dtype), B: T.Tensor((K, N), dtype), C: T.Tensor((M, N), dtype)):
        # A cluster of split_k CTAs a tile (cluster_dims: consecutive blocks along x form one cluster).
        with T.ClusterKernel(split_k * num_tiles, cluster_dims=(split_k, 1, 1), threads=threads + 128) as block:
            tiles(A, B, C, block // split_k, None)

    return main


def warp_specialized_tiles(M, N, K, dtype, block_M, block_N, block_K, num_stages, consumers, swizzle_panel, num_sms,
                           epilogue=None, split_k=1):
    """The body of `gemm_warp_specialized`, shared with kernels/gemm_epilogue.py: block `block` of num_sms walks its
    tiles of C = A @ B. `epilogue(value, column, extra)`, if given, is what each fp32 element of a finished tile
    becomes before it is rounded and stored (`extra`: the macro's last argument, a buffer such as a bias).
    With split_k > 1 (`gemm_split_k`), `block` is a cluster of split_k CTAs and num_sms the count of clusters,
    one a tile: each CTA multiplies its part of K, and the cluster adds the parts (`add_across_cluster`)."""
    accum_dtype = "float32"
    k_steps = -(-(-(-K // block_K)) // split_k)  # steps of K a CTA takes (its cluster rank's part)
    m_tiles, n_tiles = -(-M // block_M), -(-N // block_N)
    num_tiles = m_tiles * n_tiles
    rows = block_M // split_k  # rows of a tile that each CTA of a cluster adds up and stores
    # Block b takes tiles b, b + num_sms, b + 2 num_sms, ...: `rounds` of them at most. (An explicit test per
    # round, not a loop of ceildiv(num_tiles - b, num_sms) steps: TileLang 0.1.15 turns a loop it can prove runs
    # at most once into its body run once, also for the blocks that have no tile.)
    rounds = -(-num_tiles // num_sms)
    panel = min(swizzle_panel, n_tiles) if swizzle_panel > 0 else n_tiles  # tile columns walked together

    @T.macro
    def tile_at(t, tile):
        # The t-th tile in panel order: `panel` tile columns at a time, down all the rows of C within a panel, so
        # that the 132 tiles in flight at once share a few rows of A and columns of B in L2. The last panel may
        # be narrower.
        first_column = t // (panel * m_tiles) * panel
        width = T.min(panel, n_tiles - first_column)
        within = t - first_column * m_tiles
        tile[0] = first_column + within % width  # tile column (bx)
        tile[1] = within // width  # tile row (by)

    @T.macro
    def finish_tile(C, C_local, C_shared, tile, extra):
        # The tile's epilogue and store, when this CTA holds all of it (split_k = 1).
        if epilogue is not None:
            # The epilogue, on the fp32 accumulator in registers: each thread touches only the elements it holds,
            # while the producer already loads the next tile's first steps.
            for r, c in T.Parallel(block_M, block_N):
                C_local[r, c] = epilogue(C_local[r, c], tile[0] * block_N + c, extra)
        T.tma_store_wait()  # the previous tile's store has finished reading C_shared
        T.sync_threads(1, consumers)  # (named barrier 1: the consumers only, not the producer)
        T.copy(C_local, C_shared)  # rounded to dtype
        T.sync_threads(1, consumers)
        # One TMA store, not waited for: it runs while the next tile is multiplied. Out-of-range parts of a ragged
        # edge are not written.
        T.tma_copy(C_shared, C[tile[1] * block_M:(tile[1] + 1) * block_M,
                               tile[0] * block_N:(tile[0] + 1) * block_N])

    def cluster_sum(partial, received, rank, r, c):
        # Row r, column c of this CTA's slice: its own part, then the others' in the order of their slots (the
        # same order on every run, so the same rounding).
        total = partial[rank, r, c]
        for slot in range(split_k - 1):  # Python: unrolled into one expression
            total += received[slot, r, c]
        return total

    @T.macro
    def add_across_cluster(C, C_local, partial, received, arrived, tile, rank):
        # 1. The fp32 accumulator into shared memory, slice p (rows p × rows to (p + 1) × rows) for CTA p.
        for r, c in T.Parallel(block_M, block_N):
            partial[r // rows, r % rows, c] = C_local[r, c]
        T.fence_proxy_async()  # these writes are read next by the copy engine (the async proxy), not by threads
        T.sync_threads(1, consumers)
        # 2. One thread sends each other CTA its slice: an SM-to-SM bulk copy into that CTA's `received`, which
        # lands on that CTA's `arrived` barrier. CTA p keeps what CTA p + d sent (rank modulo split_k) in slot
        # d - 1. Then it waits for the slices sent to this CTA.
        if T.get_thread_binding() == 0:
            for d in T.serial(1, split_k):
                p = (rank + split_k - d) % split_k  # the CTA that keeps this one's part in its slot d - 1
                T.copy_cluster(partial[p, :, :], received[d - 1, :, :], dst_block=p, remote_barrier=arrived[0])
        T.mbarrier_wait_parity(arrived[0], 0)
        # 3. This CTA's slice of the tile: the sum of the parts, rounded and stored (a ragged edge's outside
        # rows and columns are not written).
        for r, c in T.Parallel(rows, block_N):
            row = tile[1] * block_M + rank * rows + r
            column = tile[0] * block_N + c
            if row < M and column < N:
                C[row, column] = cluster_sum(partial, received, rank, r, c)

    @T.macro
    def tiles(A, B, C, block, extra):
        A_shared = T.alloc_shared((num_stages, block_M, block_K), dtype)  # a ring of num_stages buffers
        B_shared = T.alloc_shared((num_stages, block_K, block_N), dtype)
        C_local = T.alloc_fragment((block_M, block_N), accum_dtype)
        if split_k == 1:
            C_shared = T.alloc_shared((block_M, block_N), dtype)
            rank = 0
        else:
            partial = T.alloc_shared((split_k, rows, block_N), accum_dtype)  # this CTA's fp32 tile, in slices
            received = T.alloc_shared((split_k - 1, rows, block_N), accum_dtype)  # the others' parts of its rows
            arrived = T.alloc_barrier([split_k - 1])  # one arrival a sender, with the bytes it sends
            rank = T.block_rank_in_cluster()  # which part of K this CTA multiplies
            # With the cluster_wait below: no CTA sends into another before the receiver's barrier is set up.
            T.cluster_arrive_relaxed()
        # Each buffer has two barriers: `full` (its tiles have arrived; the TMA unit counts their bytes in)
        # and `empty` (the consumers are done with it; the producer may load into it again).
        full = T.alloc_barrier([128] * num_stages)
        empty = T.alloc_barrier([consumers] * num_stages)
        tile = T.alloc_local((2,), "int32")
        tx = T.get_thread_binding()

        if tx >= consumers:  # the producer warpgroup: TMA loads, num_stages steps ahead, tile after tile
            T.set_max_nreg(40, 0)  # it needs few registers: give them to the consumers
            for i in T.serial(rounds):
                if block + i * num_sms < num_tiles:  # the last round may have no tile for this block
                    tile_at(block + i * num_sms, tile)
                    for k in T.serial(k_steps):
                        step = i * k_steps + k  # this block's steps so far: which buffer, which round of it
                        s = step % num_stages
                        T.mbarrier_wait_parity(empty[s], ((step // num_stages) & 1) ^ 1)
                        # Out-of-range rows and columns of a ragged edge read as zero (TMA fills them).
                        kk = rank * k_steps + k  # the step of K (past K, the last CTA's tail reads zeros)
                        T.tma_copy(A[tile[1] * block_M:(tile[1] + 1) * block_M,
                                     kk * block_K:(kk + 1) * block_K], A_shared[s, :, :], barrier=full[s])
                        T.tma_copy(B[kk * block_K:(kk + 1) * block_K,
                                     tile[0] * block_N:(tile[0] + 1) * block_N], B_shared[s, :, :],
                                   barrier=full[s])
                        T.mbarrier_arrive(full[s])
        else:  # the consumer warpgroups: wgmma, one step kept in flight
            T.set_max_nreg(232, 1)
            for i in T.serial(rounds):
                if block + i * num_sms < num_tiles:
                    tile_at(block + i * num_sms, tile)
                    T.clear(C_local)
                    for k in T.serial(k_steps):
                        step = i * k_steps + k
                        s = step % num_stages
                        T.mbarrier_wait_parity(full[s], (step // num_stages) & 1)
                        T.wgmma_gemm(A_shared[s, :, :], B_shared[s, :, :], C_local,
                                     policy=T.GemmWarpPolicy.FullRow)
                        T.wait_wgmma(1)  # step k-1 has finished (step k may still run): its buffer goes back
                        if k > 0:
                            T.mbarrier_arrive(empty[(step + num_stages - 1) % num_stages])
                    T.wait_wgmma(0)
                    T.mbarrier_arrive(empty[(i * k_steps + k_steps - 1) % num_stages])  # the tile's last step
                    if split_k > 1:
                        T.cluster_wait()
                        add_across_cluster(C, C_local, partial, received, arrived, tile, rank)
                    else:
                        finish_tile(C, C_local, C_shared, tile, extra)
            if split_k == 1:
                T.tma_store_wait()
        if split_k > 1:
            # No CTA exits while a copy may still read its `partial`: every copy has landed once all CTAs are here.
            if tx >= consumers:
                T.cluster_wait()
            T.cluster_arrive()
            T.cluster_wait()

    return tiles


# ---- What the playground needs to know about this kernel -------------------------------------------------------
DTYPES = ["float16", "bfloat16"]

# Tile parameters worth searching; the factory's defaults above are the shipped config, tuned on an H200
# (bench/README.md). 256-wide tiles in both M and N, or 4 stages of them, do not fit in shared memory (6 and 8
# stages fit smaller tiles only: `deepest_pipeline`); with 256 threads the two consumer warpgroups split block_M,
# so block_M = 64 needs threads = 128.
SPACE = {
    "block_M": [64, 128, 256],
    "block_N": [64, 128, 192, 256],
    "block_K": [32, 64],
    "num_stages": [2, 3, 4, 6, 8],
    "threads": [128, 256],
    "swizzle_panel": [0, 8, 16],
    "split_k": [1, 2, 4],
}

# warp_specialized=False is the T.Pipelined schedule: for comparison, and for GPUs before Hopper (the hand-written
# schedule uses TMA, mbarriers and wgmma, which need sm_90a).
OPTIONS = {"warp_specialized": [True, False]}

PRESETS = {
    "4096³": dict(M=4096, N=4096, K=4096),
    "8192³": dict(M=8192, N=8192, K=8192),
    "8192×8192×1024 (skinny K)": dict(M=8192, N=8192, K=1024),
    "2048³": dict(M=2048, N=2048, K=2048),
    "1000×1000×1000 (ragged)": dict(M=1000, N=1000, K=1000),
}



def shape_class(M, N, K):
    """Rows TMA cannot load (below), or enough output tiles of 128 × 256 for half the SMs, or too few (skinny): a
    config tuned for one says little about the others."""
    if K % 8 or N % 8:
        return "rows off 16 bytes"
    return "large" if -(-M // 128) * -(-N // 256) >= 132 // 2 else "skinny"


# The tiles the rule picks from: (block_M, block_N, threads, num_stages, speed of a full round of them relative to
# 128 × 256, measured on the H200 from 4096³ to 8192³; 128 × 192 on an H100 at 3072³, 4096³ and 8192 × 8192 × 1024).
# Each keeps as many stages as fit in shared memory beside its output tile (`deepest_pipeline`): a smaller tile
# reuses what it fetches less, so needs more in flight (64 × 128: 0.61 of 128 × 256 with 4 stages, 0.44 with 3; at
# 1024³ 8 stages instead of 4 gave 1.05× cuBLAS instead of 0.92× on an H100). 192 columns are a legal wgmma width:
# a step between 128 and 256 for outputs whose tiles of either leave a round part-empty.
SHARED_MEMORY = 227 * 1024  # what one block may use on an H100 or H200


def output_bytes(block_M, block_N, element_size=2, split_k=1):
    """Shared memory for a finished tile: the tile for its store, or with split_k > 1 the fp32 tile in slices and
    the slots for the other CTAs' parts of this one's slice (schedule 3)."""
    if split_k == 1:
        return block_M * block_N * element_size
    return block_M * block_N * 4 + (split_k - 1) * (block_M // split_k) * block_N * 4


def deepest_pipeline(block_M, block_N, block_K=64, element_size=2, most=8, split_k=1):
    """The most stages of A and B tiles (at most `most`) that fit in shared memory beside the output tile."""
    stage = (block_M * block_K + block_K * block_N) * element_size
    free = SHARED_MEMORY - output_bytes(block_M, block_N, element_size, split_k) - 1024
    return max(2, min(most, free // stage))


TILES = [(128, 256, 256, deepest_pipeline(128, 256), 1.00), (128, 192, 256, deepest_pipeline(128, 192), 0.98),
         (128, 128, 256, deepest_pipeline(128, 128), 0.98), (64, 128, 128, deepest_pipeline(64, 128), 0.61)]


# Split K (schedule 3) in 128 × 128 tiles: a CTA's accumulator is 64 KiB of fp32, and two CTAs of a cluster or
# four, at most one round of them (the CTAs of an unfinished tile wait for each other). Adding the parts costs
# about as long as 5 steps of K (`SPLIT_COST`, in elements of K): write 64 KiB to shared memory, copy a slice to
# each other CTA, read them back, store.
SPLIT_TILES = [(128, 128, 256, deepest_pipeline(128, 128, split_k=s), 0.98, s) for s in (2, 4)]
SPLIT_COST = 5 * 64


def pick_config(M, N, K, num_sms=132, tiles=TILES, split=True):
    """The config for an M × N × K product when none is set, tuned or preset (playground/engine/config_choice.py).
    `tiles`: the TILES to choose from (kernels/gemm_epilogue.py passes those its own SPACE has); `split`: whether
    split K may be chosen (gemm_epilogue.py has no such schedule)."""
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
    # of 64 × 128 at 0.61 the speed): then split K, if one round holds every part.
    if split:
        fitting = [t for t in SPLIT_TILES if -(-M // t[0]) * -(-N // t[1]) * t[5] <= num_sms]
        if fitting:
            t = min(fitting, key=lambda t: time(t[0], t[1], t[4], t[5]))
            if time(t[0], t[1], t[4], t[5]) < time(block_M, block_N, speed):
                config = {"block_M": t[0], "block_N": t[1], "threads": t[2], "num_stages": t[3], "split_k": t[5]}
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
    size = 4 if dtype == "float32" else 2
    return size * (M * K + K * N + M * N)


if __name__ == "__main__":
    import sys
    from pathlib import Path
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    from playground.standalone import main
    main("gemm")
