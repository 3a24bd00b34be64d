"""What every tuning script does with its variants once they are built: verify, time, print a table.

A variant is timed only if it is right: its relative Frobenius error against the reference is under `limit`, and
three relaunches on the same input give the same bits (a race shows as outputs that change between launches, as
the softmax's TMA loads once did). Times come from the engine's own timer, all of a shape's functions interleaved,
so a ratio compares two functions measured under the same clocks.
"""
def build_each(build, jobs):
    """--compile-only: build every job here (no GPU), one line each, the error's last line where one fails."""
    for job in jobs:
        try:
            build(*job)
            print(f"{job} ok", flush=True)
        except Exception as exc:
            print(f"{job} FAILED: {str(exc).splitlines()[-1][:300]}", flush=True)


def rel_error(out, ref):
    return ((out.float() - ref).norm() / ref.norm()).item()


def verified(fns, ref, label, limit=1e-2, repeats=3):
    """fns: {name: zero-argument function returning the output}. Prints one line per function and returns the
    ones that pass, ready to be timed."""
    import torch
    passed = {}
    for name, fn in fns.items():
        out = fn()
        err = rel_error(out, ref)
        same = all(torch.equal(out, fn()) for _ in range(repeats))
        print(f"{label} {name:28s} rel err {err:.2e} repeatable {same}", flush=True)
        if err < limit and same:
            passed[name] = fn
    return passed


def median_ms(calls, budget_ms=1500):
    """{name: median milliseconds}, the functions taking turns sample by sample (playground.timing.Timer)."""
    from playground.timing import Timer
    return {name: t["median_ms"] for name, t in Timer().time(calls, budget_ms=budget_ms).items()}


def print_table(columns, rows):
    """columns: (title, width, format) triples, e.g. ("ms", 8, ".4f"); rows: tuples in the same order."""
    print()
    print(" ".join(f"{title:>{width}s}" if fmt else f"{title:{width}s}" for title, width, fmt in columns))
    for row in rows:
        print(" ".join(f"{value:{width}{fmt}}" if fmt else f"{value:{width}s}"
                       for value, (_, width, fmt) in zip(row, columns)), flush=True)


def compare_gemm_variants(build_shipped, build, variants, shapes, checks, dtypes=("float16", "bfloat16")):
    """The GEMM scripts' run: every variant (`build(M, N, K, dtype, **variants[name])`) verified at the check
    sizes and the timed ones, and timed against cuBLAS and the shipped kernel at the timed sizes."""
    from precompile import precompile
    jobs = [(build_shipped, (M, N, K, dtype), {}) for dtype in dtypes for M, N, K in shapes]
    jobs += [(build, (M, N, K, dtype), kw) for dtype in dtypes for M, N, K in shapes + checks
             for kw in variants.values()]
    precompile(jobs)
    import torch
    rows = []
    for dtype in dtypes:
        for M, N, K in checks + shapes:
            g = torch.Generator(device="cuda").manual_seed(0)
            a = torch.randn(M, K, device="cuda", generator=g).to(getattr(torch, dtype))
            b = torch.randn(K, N, device="cuda", generator=g).to(getattr(torch, dtype))
            timed = (M, N, K) in shapes
            kernels = {"ship": build_shipped(M, N, K, dtype)} if timed else {}
            for name, kw in variants.items():
                try:
                    kernels[name] = build(M, N, K, dtype, **kw)
                except Exception as exc:
                    print(f"{dtype} {M}x{N}x{K} {name}: build failed: {str(exc).splitlines()[-1][:200]}", flush=True)
            fns = {name: (lambda f=f: f(a, b)) for name, f in kernels.items()}
            calls = {"cuBLAS": lambda: a @ b, **verified(fns, a.float() @ b.float(), f"{dtype} {M}x{N}x{K}")}
            if timed:
                times = median_ms(calls)
                rows += [(dtype, f"{M}x{N}x{K}", name, ms, times["cuBLAS"] / ms) for name, ms in times.items()]
    print_table([("dtype", 9, ""), ("shape", 16, ""), ("variant", 36, ""), ("ms", 8, ".4f"), ("x cuBLAS", 9, ".3f")],
                rows)
