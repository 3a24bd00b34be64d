"""Vector addition: C = A + B over N elements, the "hello world" of GPU kernels and a pure test of memory bandwidth.

Each element is read twice and written once and costs one addition, so the kernel does nothing but move bytes: its
speed is the speed of device memory (about 4.2 TB/s read + written on an H200). What gets it there:
- 16-byte accesses. The tile is spread over the threads in runs of 16 bytes (8 fp16 or bf16, 4 fp32), and TileLang
  turns each run into one 128-bit load or store (`uint4` in the CUDA, `ld.global.nc.v4` in the PTX); neighbouring
  threads take neighbouring runs, so a warp reads 512 contiguous bytes per instruction.
- Enough bytes in flight. A thread copies its block_N / threads elements of A and of B (32 by default: eight
  16-byte loads) into registers before the first add, and several blocks share each SM, to cover the ~µs latency
  of HBM. Below 2^26 elements the rule (`pick_config`) takes 8 a thread in four times the blocks: a shorter tail.
- Ragged N. Only the last block can run past the end. The full blocks take a branch without bounds checks, which
  TileLang vectorizes; the last one checks every element, which forces scalar accesses, but only there.

Run it alone:  python kernels/vector_add.py   (checks it against PyTorch and times it against torch.add on a GPU)
"""
import torch
import tilelang.language as T


def vector_add(N=2**28, dtype="float16", block_N=8192, threads=256):

    @T.prim_func
    def main(A: T.Tensor((N,), dtype), B: T.Tensor((N,), dtype), C: T.Tensor((N,), dtype)):
        # One block per block_N elements; each thread holds block_N / threads of them in registers.
        with T.Kernel(T.ceildiv(N, block_N), threads=threads) as bx:
            A_local = T.alloc_fragment((block_N,), dtype)
            B_local = T.alloc_fragment((block_N,), dtype)
            start = bx * block_N
            if start + block_N <= N:
                # A full block, without bounds checks, so every access is a 16-byte vector. All the loads are
                # issued before the first add: a thread has 2 * block_N / threads elements in flight at once.
                T.copy(A[start:start + block_N], A_local)
                T.copy(B[start:start + block_N], B_local)
                for i in T.Parallel(block_N):
                    A_local[i] += B_local[i]
                T.copy(A_local, C[start:start + block_N])
            else:
                # The ragged last block: element by element, and only the elements before N.
                for i in T.Parallel(block_N):
                    if start + i < N:
                        C[start + i] = A[start + i] + B[start + i]

    return main


# ---- What the playground needs to know about this kernel -------------------------------------------------------
DTYPES = ["float16", "bfloat16", "float32"]

# block_N / threads elements per thread: a multiple of 8 (fp16, bf16) or 4 (fp32) keeps the accesses 16 bytes wide;
# the pairs with fewer (1024 over 512 threads: 2) are in the space so that a tuning run sees what narrower ones cost.
SPACE = {
    "block_N": [1024, 2048, 4096, 8192, 16384],
    "threads": [128, 256, 512],
}

PRESETS = {
    "2^28 (512 MiB per fp16 vector)": dict(N=2**28),
    "2^24": dict(N=2**24),
    "2^20 (fits in L2)": dict(N=2**20),
    "1000003 (ragged)": dict(N=1_000_003),
}



def pick_config(N):
    """The config for N elements when none is set or tuned (playground/engine/config_choice.py)."""
    if N >= 2**26:  # the defaults: at 2^28, 1.01 of the copy bandwidth on an H200 and an H100 (bench/)
        return {"block_N": 8192, "threads": 256}
    # Fewer: 8 elements a thread (in fp16 and bf16 one 16-byte load of A and one of B), in blocks of 2048. Four
    # times the blocks of the defaults spread more evenly over the SMs, and each ends sooner, so the launch's tail
    # is shorter. Measured on an H100 against torch.add: 2^20 (CUDA graphs) 1.03×, where 4096-element blocks of
    # 128 threads gave 0.94×; 2^24 1.01×, where the defaults gave 0.95×.
    return {"block_N": 2048, "threads": 256}


# Verification runs on these too: one aligned, one with a ragged last block, one smaller than a single block.
CHECK_SHAPES = [dict(N=2**20), dict(N=1_000_003), dict(N=1000)]


def make_inputs(N, dtype, device, generator):
    a = torch.randn(N, device=device, generator=generator).to(dtype)
    b = torch.randn(N, device=device, generator=generator).to(dtype)
    return a, b


def reference(a, b):
    return a.float() + b.float()


BASELINES = {"torch.add": lambda a, b: a + b}


def flops(N):
    return N


def bytes_moved(N, dtype):
    size = 4 if dtype == "float32" else 2
    return 3 * N * size


if __name__ == "__main__":
    import sys
    from pathlib import Path
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    from playground.standalone import main
    main("vector_add")
