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
- Rows longer than a block can hold (past 16384 columns; from 4096 when N is not a multiple of 8): each row is
  split over a cluster of `cluster` CTAs that exchange their partial maxes and sums through distributed shared
  memory, each CTA holding its part of the row in registers as a block holds a whole row here. That schedule, and
  how it keeps 16-byte loads on rows that do not start on a 16-byte boundary, is `kernels/softmax_long.py`: read
  it after this file.
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
        # (imported here, not at the top, so that `python kernels/softmax.py` finds the kernels package once its
        # __main__ block has put it on the path)
        from kernels.softmax_long import softmax_cluster
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


# ---- What the playground needs to know about this kernel -------------------------------------------------------
DTYPES = ["float16", "bfloat16", "float32"]

# threads are the consumers; N_pad / threads values a thread must fit in registers (128 threads spill at N = 32768).
SPACE = {
    "rows_per_block": [1, 2, 4, 8, 16, 32],
    "num_stages": [1, 2, 3, 4],
    "threads": [128, 256, 512],
}

# cluster > 1 splits each row over that many CTAs (Hopper thread block clusters, sm_90 and later: softmax_long.py).
OPTIONS = {"cluster": [1, 2, 4, 8, 16]}

PRESETS = {
    "16384×4096": dict(M=16384, N=4096),
    "4096×32768 (long rows)": dict(M=4096, N=32768, cluster=2),  # tuned: a row over two CTAs
    "4096×50257 (GPT-2's vocabulary)": dict(M=4096, N=50257),  # ragged: rows off 16-byte boundaries
    "4096×128256 (Llama 3's vocabulary)": dict(M=4096, N=128256),
    "8192×8192": dict(M=8192, N=8192),
    "1000×1000 (ragged)": dict(M=1000, N=1000),
    "333×3000 (ragged)": dict(M=333, N=3000),
}


def ctas_per_row(N, dtype="float16"):
    # A CTA holds at most 16384 columns in registers (64 fp32 values a thread at 256 threads), so that three CTAs
    # share an SM and hide each other's reductions: a row over the fewest CTAs that keep to that, up to a cluster of
    # 16 (the most Hopper allows), so 262144 columns. Fewer, larger CTAs pay the exchanges for more bytes (at 32768
    # columns, 2 CTAs gave 0.96 of the same-size copy's bandwidth on the H200, 4 CTAs 0.80).
    ctas = 1
    while N > 16384 * ctas and ctas < 8:
        ctas *= 2
    # A cluster of 16 only past 8 × 20480 columns: its exchanges cost more than a CTA's larger share (bf16, 151936
    # columns, Qwen's vocabulary: 8 CTAs of 18992 columns gave 1.70× torch.softmax on the H200, 16 of 9496 1.56×).
    if N > 8 * 20480:
        ctas = 16
    # Rows that do not start on 16-byte boundaries (N not a multiple of a vector) load 2 bytes at a time in a
    # block of their own; the cluster schedule keeps 16-byte loads for them (softmax_long.py). On an H100, bf16,
    # 16384 rows: 8191 columns 0.28 of the copy bandwidth in a block, 1.00 over 2 CTAs; 5001: 0.31 and 0.88.
    if ctas == 1 and N >= 4096 and N % (16 // element_size(dtype)) != 0:
        ctas = 2
    return ctas


def shape_class(N, dtype):
    """Rows over 1, 2, 4, 8 or 16 CTAs, and over a cluster, CTAs of 128 or 256 threads (`threads_for`): a config
    tuned for one layout says little about another (4096 × 32768 tuned over two CTAs of 256 threads, 8 vectors a
    thread, is no guide for 11111 columns over two CTAs, 3 vectors a thread at 256)."""
    ctas = ctas_per_row(N, dtype)
    if ctas == 1:
        return "rows over 1 CTA"
    return f"rows over {ctas} CTAs of {threads_for(N, dtype)} threads"


def threads_for(N, dtype):
    vector = 16 // element_size(dtype)  # elements in one 16-byte access
    ctas = ctas_per_row(N, dtype)
    if ctas > 1:
        # A CTA of a cluster holds its share of the row as whole vectors: at least 4 a thread (softmax_long.py; on
        # an H100, 2 CTAs of 11111 columns ran at 0.99 of copy bandwidth with 128 threads, 6 vectors each, and
        # 0.91 with 256, 3 each).
        return 256 if N >= ctas * 4 * 256 * vector else 128
    # Every thread at least two 16-byte accesses of the row, so that each has a second load in flight while the
    # first arrives: 256 threads from 4096 fp16 columns up, 128 below (at 2048: 0.94 of copy bandwidth against
    # 0.78 with 256, each thread then waiting on a single load).
    return 256 if N >= 2 * 256 * vector else 128


def pick_config(N, dtype):
    """The config for rows of N when none is set, tuned or preset (playground/engine/config_choice.py)."""
    return {
        "cluster": ctas_per_row(N, dtype),  # (why: above)
        "threads": threads_for(N, dtype),  # (why: there)
        # At least 2048 elements a block: short rows share one, held together (softmax_short_rows: 1024 columns two
        # rows a block, 512 four), so a block's fixed costs (its launch, the two reductions' barriers) are paid for
        # enough bytes (at 1024, two rows a block walked one by one already gave 0.93 of copy bandwidth against
        # 0.86 for one). Longer rows: a row a block (at 4096, 4 rows a block gave 0.87 against 0.90).
        # A power of two up to 32 (the space's largest), so that it divides the threads.
        "rows_per_block": min(32, 1 << max(0, (2048 // N).bit_length() - 1)),
    }


# Verification runs on these too, with the tile under test: ragged rows and columns, the long-row layout on a few
# rows, short ragged rows (held together, the last block part-full, when that tile has several rows a block), and
# rows off 16-byte boundaries (20001 columns: nine rows start at every offset within a vector and wrap around;
# a cluster tile shares a vector between each two of them).
CHECK_SHAPES = [dict(M=1000, N=1000), dict(M=333, N=3000), dict(M=100, N=32768), dict(M=1001, N=300),
                dict(M=9, N=20001)]


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
