"""Row softmax: Y[i, :] = exp(X[i, :] - max) / sum(exp(X[i, :] - max)) for an M × N matrix, computed in fp32.

Softmax reads each element once and writes it once, so like vector_add it is bound by memory bandwidth; the math
(a max, an exp, a sum and a scale per element) must hide behind the loads. The plan:
- One row at a time is loaded whole into registers, in fp32, split over the block's threads (16 values a thread at
  N = 4096, 128 at N = 32768: 128 KB, half of an SM's register file). With the row on chip, the max, the exps, the
  sum and the scaling never touch memory again, and each element costs one exp. (An "online" softmax over column
  tiles would handle any N, but would read the input twice or pay two exps per element.)
- The max and the sum are `T.reduce_max` / `T.reduce_sum` across the threads: warp shuffles, then shared memory.
  Masked columns (past N in a ragged row) are set to -inf first, so they add nothing: exp(-inf) = 0.
- Hiding the loads: while a block reduces, it issues no loads, so something else must keep memory busy. At N = 4096
  that is the other blocks: a block is one row (rows_per_block = 1), 16384 of them, eight resident on each SM, so
  one block's loads overlap another's math (0.90 of copy bandwidth on the H200; walking 4 rows per block, below,
  gave 0.87 there). At N = 32768 one block fills an SM, so it must overlap with itself: it walks rows_per_block
  rows in a `T.Pipelined` loop, the copy of the next row into shared memory (cp.async, num_stages rows in flight)
  running while the threads compute on the current one.
- Short rows (a few hundred columns): a block walking them one by one holds each in a fragment padded to whole
  16-byte loads for every thread, so at N = 512 with 128 threads half of each row's loads are masked.
  `softmax_short_rows` holds the block's rows together instead, one (rows, N) fragment that TileLang spreads over
  the threads (4 × 512 on 128 threads: each row over 64 threads, 16-byte loads), the reductions along dim 1 only:
  at 512 or 1024 columns every load carries data, and all rows are in flight at once (131072 × 512 on an H100:
  94 µs, against 106 µs for the walk).
- Better at N = 32768 (Hopper): split each row over a cluster of `cluster` CTAs (`softmax_cluster`, below). Each
  CTA holds its part of the row in registers (64 values a thread at cluster = 2), so three CTAs share an SM and hide
  each other's reductions as the one-row blocks do at N = 4096. The CTAs of a cluster can write into each other's
  shared memory: each sends its partial max, then its partial sum, to every CTA of the cluster, as an asynchronous
  copy that lands on the receiver's mbarrier. 0.96 of the same-size copy's bandwidth on the H200, against 0.87 for
  4 rows a block; the config PRESETS ships for that size. (Exchanged through a cluster barrier instead, it was
  0.89: ptxas puts a GPU-wide memory fence in front of every warp's `barrier.cluster.arrive`, and a CTA's
  lifetime, which the barriers sit in, is what limits a kernel with three CTAs an SM.)
- Why not TMA here, as in the GEMM: TileLang turns a pipelined copy into TMA loads issued by a producer warpgroup,
  and for this loop that version gave wrong rows now and then on the H200 (1 to 3 rows of 16384, different ones
  each launch on the same input: a race), while the cp.async pipeline is exact and as fast (0.89 of copy bandwidth
  for both at 16384 × 4096). `disable_tma=True` on the copy asks for cp.async.

Run it alone:  python kernels/softmax.py   (checks it against PyTorch and times it against torch.softmax on a GPU)
"""
import torch
import tilelang.language as T

LOG2E = 1.4426950408889634  # exp(x) = exp2(x * log2(e)), and exp2 is the GPU's native instruction


def element_size(dtype):
    return 4 if dtype == "float32" else 2


def padded(columns, dtype, threads):
    """`columns` rounded up to whole 16-byte vectors for every thread: how a row (or part of one) is held on chip.
    The padding is masked."""
    chunk = threads * 16 // element_size(dtype)
    return (columns + chunk - 1) // chunk * chunk


@T.macro
def softmax_in_registers(x, row_max, row_sum, rows, N, N_pad):
    """x (rows × N_pad, fp32, in registers) becomes the softmax of each row's first N values, in place."""
    if N_pad != N:  # (a Python `if`: decided when the kernel is built)
        for i, j in T.Parallel(rows, N_pad):
            x[i, j] = T.if_then_else(j < N, x[i, j], -T.infinity("float32"))
    T.reduce_max(x, row_max, dim=1)
    for i, j in T.Parallel(rows, N_pad):
        x[i, j] = T.exp2((x[i, j] - row_max[i]) * LOG2E)
    T.reduce_sum(x, row_sum, dim=1)
    for i in T.Parallel(rows):
        row_sum[i] = 1 / row_sum[i]  # one division per row, then multiplications
    for i, j in T.Parallel(rows, N_pad):
        x[i, j] *= row_sum[i]


def softmax(M=16384, N=4096, dtype="float16", rows_per_block=1, num_stages=2, threads=256, cluster=1):
    if cluster > 1:
        return softmax_cluster(M, N, dtype, cluster, threads)
    if rows_per_block > 1 and rows_per_block * N <= SHORT_ROWS_ELEMENTS and threads % rows_per_block == 0:
        return softmax_short_rows(M, N, dtype, rows_per_block, threads)
    accum_dtype = "float32"
    N_pad = padded(N, dtype, threads)
    # Rows in flight, as many as shared memory takes (two 64 KB fp16 rows at N = 32768, one fp32 row).
    stages = max(1, min(num_stages, 192 * 1024 // (N_pad * element_size(dtype))))

    @T.prim_func
    def main(X: T.Tensor((M, N), dtype), Y: T.Tensor((M, N), dtype)):
        with T.Kernel(T.ceildiv(M, rows_per_block), threads=threads) as bx:
            x_shared = T.alloc_shared((1, N_pad), dtype)
            x = T.alloc_fragment((1, N_pad), accum_dtype)  # the row, spread over the threads' registers
            row_max = T.alloc_fragment((1,), accum_dtype)
            row_sum = T.alloc_fragment((1,), accum_dtype)

            for r in T.Pipelined(rows_per_block, num_stages=stages):
                row = bx * rows_per_block + r
                T.copy(X[row, 0], x_shared, disable_tma=True)  # rows past M, columns past N: zeros
                T.copy(x_shared, x)  # to registers, in fp32; the shared buffer is free for the next row
                softmax_in_registers(x, row_max, row_sum, 1, N, N_pad)
                T.copy(x, Y[row, 0])  # rounded to dtype; out-of-range rows and columns are not written

    return main


SHORT_ROWS_ELEMENTS = 8192  # a block's rows held together: 64 fp32 values a thread at 128 threads, no spills


def softmax_short_rows(M, N, dtype, rows, threads):
    """`rows` rows a block, loaded at once into one (rows, N) fragment (num_stages does not apply: nothing is
    walked)."""
    accum_dtype = "float32"
    N_pad = padded(N, dtype, threads // rows)  # the fragment a whole number of 16-byte vectors for every thread

    @T.prim_func
    def main(X: T.Tensor((M, N), dtype), Y: T.Tensor((M, N), dtype)):
        with T.Kernel(T.ceildiv(M, rows), threads=threads) as bx:
            x = T.alloc_fragment((rows, N_pad), accum_dtype)
            row_max = T.alloc_fragment((rows,), accum_dtype)
            row_sum = T.alloc_fragment((rows,), accum_dtype)
            T.copy(X[bx * rows, 0], x)  # straight to registers; rows past M, columns past N: zeros
            softmax_in_registers(x, row_max, row_sum, rows, N, N_pad)  # each row's reductions among its own threads
            T.copy(x, Y[bx * rows, 0])

    return main


def softmax_cluster(M, N, dtype, cluster, threads):
    """One row per cluster of `cluster` CTAs, each holding N / cluster columns in registers (rows_per_block and
    num_stages do not apply). The partial maxes, then the partial sums, cross the cluster as asynchronous copies
    from one CTA's shared memory into another's, each landing on the receiver's mbarrier: no cluster-wide barrier
    on a row's path (bench/README.md: a `barrier.cluster` with release semantics puts a GPU-wide memory fence in
    every warp; without it the kernel went from 0.89 to 0.96 of the same-size copy's bandwidth on the H200)."""
    accum_dtype = "float32"
    part = padded(-(-N // cluster), dtype, threads)  # columns a CTA holds

    @T.macro
    def exchange(value, mine, slots, arrived, which, rank):
        # My partial into slot `rank` of every CTA of the cluster (mine too), by one thread: 16 bytes, the least a
        # bulk copy moves. Each copy arrives on the receiver's mbarrier `arrived[which]` with its bytes; that
        # barrier completes once all `cluster` partials have landed there. (TileLang warns here that a sync
        # hoisted out of `tx == 0` leaves a race: it sees the copies of the loop write the same `slots` address,
        # not that each goes to a different CTA. The outputs are exact and repeat bit for bit.)
        T.copy(value, mine[which, 0:1])
        if T.get_thread_binding() == 0:
            for p in T.serial(cluster):
                T.copy_cluster(mine[which, 0:4], slots[which, rank, 0:4], dst_block=p, remote_barrier=arrived[which])
        T.mbarrier_wait_parity(arrived[which], 0)

    @T.prim_func
    def main(X: T.Tensor((M, N), dtype), Y: T.Tensor((M, N), dtype)):
        with T.ClusterKernel(cluster, M, cluster_dims=(cluster, 1, 1), threads=threads) as (bx, row):
            T.annotate_pass_configs({"tl.enable_fast_math": True})  # exp2 as ex2.approx.ftz, no denormal fix-ups
            x = T.alloc_fragment((1, part), accum_dtype)
            partial = T.alloc_fragment((1,), accum_dtype)
            mine = T.alloc_shared((2, 4), accum_dtype)  # [0, 0]: my partial max, [1, 0]: my partial sum
            slots = T.alloc_shared((2, cluster, 4), accum_dtype)  # [0, p, 0]: CTA p's partial max, [1, p, 0]: its sum
            arrived = T.alloc_barrier([cluster, cluster])  # one arrival per sender, with its bytes
            rank = T.block_rank_in_cluster()
            row_max = T.alloc_local((1,), accum_dtype)
            row_sum = T.alloc_local((1,), accum_dtype)

            # The other CTAs write into `slots` as soon as they have their partials, maybe while this one is still
            # in its reduce_max; a read here makes `slots` live from the start, so TileLang's planner cannot put the
            # reduction's workspace over it (it did: wrong rows, different on every launch).
            row_sum[0] = slots[0, 0, 0]
            T.cluster_arrive_relaxed()  # after the mbarriers' init; with cluster_wait below: no copy lands early
            T.copy(X[row, bx * part], x)  # columns past N read as zero, masked next
            for i, j in T.Parallel(1, part):
                x[i, j] = T.if_then_else(bx * part + j < N, x[i, j], -T.infinity(accum_dtype))

            T.reduce_max(x, partial, dim=1)
            T.cluster_wait()
            exchange(partial, mine, slots, arrived, 0, rank)
            row_max[0] = -T.infinity(accum_dtype)
            for p in T.serial(cluster):
                row_max[0] = T.max(row_max[0], slots[0, p, 0])

            for i, j in T.Parallel(1, part):
                x[i, j] = T.exp2((x[i, j] - row_max[0]) * LOG2E)
            T.reduce_sum(x, partial, dim=1)
            exchange(partial, mine, slots, arrived, 1, rank)
            T.cluster_arrive_relaxed()  # every copy into this CTA has landed (waited on at the very end)
            row_sum[0] = 0
            for p in T.serial(cluster):
                row_sum[0] += slots[1, p, 0]
            row_sum[0] = 1 / row_sum[0]

            for i, j in T.Parallel(1, part):
                x[i, j] *= row_sum[0]
            T.copy(x, Y[row, bx * part])  # columns past N are not written
            T.cluster_wait()  # every CTA's copies have landed, so none still reads this CTA's `mine`: it may exit

    return main


# ---- What the playground needs to know about this kernel -------------------------------------------------------
DTYPES = ["float16", "bfloat16", "float32"]

# threads are the consumers; N_pad / threads values a thread must fit in registers (128 threads spill at N = 32768).
SPACE = {
    "rows_per_block": [1, 2, 4, 8, 16, 32],
    "num_stages": [1, 2, 3, 4],
    "threads": [128, 256, 512],
}

# cluster > 1 splits each row over that many CTAs (Hopper thread block clusters; sm_90 and later).
OPTIONS = {"cluster": [1, 2, 4]}

PRESETS = {
    "16384×4096": dict(M=16384, N=4096),
    "4096×32768 (long rows)": dict(M=4096, N=32768, cluster=2),  # tuned: a row over two CTAs
    "8192×8192": dict(M=8192, N=8192),
    "1000×1000 (ragged)": dict(M=1000, N=1000),
    "333×3000 (ragged)": dict(M=333, N=3000),
}



def ctas_per_row(N):
    # A CTA holds at most 16384 columns in registers (64 fp32 values a thread at 256 threads), so that three CTAs
    # share an SM and hide each other's reductions: 32768-long rows over 2 CTAs, as the preset measured.
    return 1 if N <= 16384 else 2 if N <= 32768 else 4


def shape_class(N):
    """Rows over 1, 2 or 4 CTAs: a config tuned for one layout says little about another."""
    return f"rows over {ctas_per_row(N)} CTA" + ("s" if ctas_per_row(N) > 1 else "")


def pick_config(N, dtype):
    """The config for rows of N when none is set, tuned or preset (playground/engine/config_choice.py)."""
    vector = 16 // element_size(dtype)  # elements in one 16-byte access
    return {
        "cluster": ctas_per_row(N),  # (why: above)
        # Every thread at least two 16-byte accesses of the row, so that each has a second load in flight while the
        # first arrives: 256 threads from 4096 fp16 columns up, 128 below (at 2048: 0.94 of copy bandwidth against
        # 0.78 with 256, each thread then waiting on a single load).
        "threads": 256 if N >= 2 * 256 * vector else 128,
        # At least 2048 elements a block: short rows share one, held together (softmax_short_rows: 1024 columns two
        # rows a block, 512 four), so a block's fixed costs (its launch, the two reductions' barriers) are paid for
        # enough bytes (at 1024, two rows a block walked one by one already gave 0.93 of copy bandwidth against
        # 0.86 for one). Longer rows: a row a block (at 4096, 4 rows a block gave 0.87 against 0.90).
        # A power of two up to 32 (the space's largest), so that it divides the threads.
        "rows_per_block": min(32, 1 << max(0, (2048 // N).bit_length() - 1)),
    }


# Verification runs on these too, with the tile under test: ragged rows and columns, the long-row layout on a few
# rows, and short ragged rows (held together, the last block part-full, when that tile has several rows a block).
CHECK_SHAPES = [dict(M=1000, N=1000), dict(M=333, N=3000), dict(M=100, N=32768), dict(M=1001, N=300)]


def make_inputs(M, N, dtype, device, generator):
    return torch.randn(M, N, device=device, generator=generator).to(dtype)


def reference(x):
    return torch.softmax(x.float(), dim=-1)


BASELINES = {"torch.softmax": lambda x: torch.softmax(x, dim=-1)}


def flops(M, N):
    return 5 * M * N  # max, subtract, exp, add, scale


def bytes_moved(M, N, dtype):
    return 2 * M * N * element_size(dtype)


if __name__ == "__main__":
    import sys
    from pathlib import Path
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    from playground.standalone import main
    main("softmax")
