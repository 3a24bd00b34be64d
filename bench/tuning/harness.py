"""What every tuning script does with its variants once they are built: verify, time, print a table.

A variant is timed only if it is right: its relative Frobenius error against the reference is under `limit`, and
three relaunches on the same input give the same bits (a race shows as outputs that change between launches, as
the softmax's TMA loads once did). Times come from the engine's own timer, all of a shape's functions interleaved,
so a ratio compares two functions measured under the same clocks.
"""
import functools
import importlib
import sys

SM90A = {"kind": "cuda", "arch": "sm_90a"}


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
    """{name: median milliseconds}, the functions taking turns sample by sample (playground.engine.timing.Timer)."""
    from playground.engine.timing import Timer
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


def flash_attention_jobs(shapes, names_for_dim, check):
    """(b, h, s, d, causal, dtype, name) for every timed shape and its ragged check size, causal and not."""
    for b, h, s, d, dtype in shapes:
        for causal in (False, True):
            for name in names_for_dim[d]:
                yield (b, h, s, d, causal, dtype, name)
                yield (*check[d], causal, dtype, name)


def compare_flash_attention_variants(build, names_for_dim, shapes, check):
    """The flash-attention scripts' run: each variant (`build(b, h, s, d, causal, dtype, name)`) verified at a ragged
    size against the float32 reference and at the timed size against SDPA, then timed against SDPA there."""
    from precompile import precompile
    precompile([(build, job, {}) for job in flash_attention_jobs(shapes, names_for_dim, check)])
    import torch
    import torch.nn.functional as F
    import flash_attention as shipped
    rows = []
    for b, h, s, d, dtype in shapes:
        for causal in (False, True):
            g = torch.Generator(device="cuda").manual_seed(5)
            q, k, v = (torch.randn(b, s, h, d, device="cuda", generator=g).to(getattr(torch, dtype)) for _ in range(3))
            bc, hc, sc, _ = check[d]
            qc, kc, vc = (torch.randn(bc, sc, hc, d, device="cuda", generator=g).to(q.dtype) for _ in range(3))

            def sdpa():
                return F.scaled_dot_product_attention(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2),
                                                      is_causal=causal).transpose(1, 2)
            label = f"d{d} {dtype} causal={causal}"
            kernels = {}
            for name in names_for_dim[d]:
                try:
                    kernels[name] = (build(bc, hc, sc, d, causal, dtype, name), build(b, h, s, d, causal, dtype, name))
                except Exception as exc:
                    print(f"{label} {name}: build failed: {str(exc).splitlines()[-1][:200]}", flush=True)
            ragged = verified({n: (lambda c=c: c(qc, kc, vc)) for n, (c, _) in kernels.items()},
                              shipped.reference(qc, kc, vc, causal), f"{label} ragged")
            timed = verified({n: (lambda t=t: t(q, k, v)) for n, (_, t) in kernels.items() if n in ragged},
                             sdpa().float(), label)
            times = median_ms({"sdpa": sdpa, **timed}, budget_ms=2000)
            rows += [(f"{b}x{h}x{s}x{d}{' causal' if causal else ''} {dtype}", name, ms, times["sdpa"] / ms)
                     for name, ms in times.items()]
    print_table([("shape", 34, ""), ("variant", 22, ""), ("ms", 8, ".4f"), ("x SDPA", 7, ".3f")], rows)


def compare_softmax_variants(build, names, shapes, checks):
    """The softmax scripts' run: each variant (`build(M, N, dtype, name)`) verified at every size, and timed at the
    timed sizes against torch.softmax, a copy of the same size and the 1 GiB copy the bench's target reads against."""
    from precompile import precompile
    precompile([(build, (M, N, dtype, name), {}) for M, N, dtype in checks + shapes for name in names])
    import torch
    rows = []
    big = torch.empty(2**29, dtype=torch.float16, device="cuda")  # 1 GiB read, 1 GiB written
    big_out = torch.empty_like(big)
    for M, N, dtype in checks + shapes:
        g = torch.Generator(device="cuda").manual_seed(0)
        x = torch.randn(M, N, device="cuda", generator=g).to(getattr(torch, dtype))
        kernels = {}
        for name in names:
            try:
                kernels[name] = build(M, N, dtype, name)
            except Exception as exc:
                print(f"{M}x{N} {dtype} {name}: build failed: {str(exc).splitlines()[-1][:200]}", flush=True)
        passed = verified({n: (lambda f=f: f(x)) for n, f in kernels.items()}, torch.softmax(x.float(), dim=1),
                          f"{M}x{N} {dtype}")
        if (M, N, dtype) in shapes:
            out_copy = torch.empty_like(x)
            times = median_ms({"copy": lambda: out_copy.copy_(x), "copy 1 GiB": lambda: big_out.copy_(big),
                               "torch.softmax": lambda: torch.softmax(x, dim=1), **passed})
            nbytes = 2 * x.numel() * x.element_size()
            big_bw = 2 * big.numel() * big.element_size() / times.pop("copy 1 GiB")
            rows += [(f"{M}x{N} {dtype}", name, ms, times["copy"] / ms, nbytes / ms / big_bw)
                     for name, ms in times.items()]
    print_table([("shape", 20, ""), ("variant", 36, ""), ("ms", 8, ".4f"), ("of same-size copy", 17, ".3f"),
                 ("of 1 GiB copy", 13, ".3f")], rows)


def build_flash_attention_variant(variants_for, b, h, s, d, causal, dtype, name):
    """The shipped kernel with a variant's options (variants_for[dim][name])."""
    import tilelang
    from flash_attention import flash_attention
    return tilelang.compile(flash_attention(b, h, s, d, causal, dtype, **variants_for[d][name]), out_idx=[3],
                            target=SM90A)


def flash_attention_script(variants_for, shapes, check):
    """The whole of a script whose variants are options of kernels/flash_attention.py: with --compile-only, build
    the ragged fp16 jobs here (no GPU); else verify and time them all on the GPU."""
    build = functools.partial(build_flash_attention_variant, variants_for)
    if "--compile-only" in sys.argv:
        build_each(build, [job for job in flash_attention_jobs(shapes, variants_for, check)
                           if job[0] == check[job[3]][0] and job[5] == "float16"])
    else:
        compare_flash_attention_variants(build, variants_for, shapes, check)


BLOCK_COST_SEQS = [(16, 2048), (8, 4096), (4, 8192)]  # (batch, seq_len) at 32 heads: 8192 query blocks each


def flash_attention_block_cost(variants_for):
    """Each head-dim-128 variant (variants_for[128]) and SDPA, non-causal fp16, at 16, 32 and 64 key tiles a query
    block (8192 blocks each): the time per round of 132 blocks, split into a cost per key tile and a fixed cost per
    query block."""
    from precompile import precompile
    import torch
    import torch.nn.functional as F
    build = functools.partial(build_flash_attention_variant, variants_for)
    names = list(variants_for[128])
    precompile([(build, (b, 32, s, 128, False, "float16", name), {}) for b, s in BLOCK_COST_SEQS for name in names])
    rows, per_round = [], {}
    for b, s in BLOCK_COST_SEQS:
        g = torch.Generator(device="cuda").manual_seed(5)
        q, k, v = (torch.randn(b, s, 32, 128, device="cuda", generator=g).half() for _ in range(3))

        def sdpa():
            return F.scaled_dot_product_attention(q.transpose(1, 2), k.transpose(1, 2),
                                                  v.transpose(1, 2)).transpose(1, 2)
        kernels = {name: build(b, 32, s, 128, False, "float16", name) for name in names}
        ok = verified({name: (lambda f=f: f(q, k, v)) for name, f in kernels.items()}, sdpa().float(), f"{b}x32x{s}")
        times = median_ms({"sdpa": sdpa, **ok}, budget_ms=1500)
        for name, ms in times.items():
            per_round[name, s // 128] = ms * 1000 / 63  # µs per round of 132 query blocks (8192: 62.06 rounds)
            rows.append((f"{b}x32x{s}x128", s // 128, name, ms, per_round[name, s // 128], times["sdpa"] / ms))
    print_table([("shape", 18, ""), ("tiles", 5, "d"), ("variant", 12, ""), ("ms", 8, ".4f"),
                 ("us/round", 9, ".2f"), ("x SDPA", 7, ".3f")], rows)
    for name in ["sdpa", *names]:
        if (name, 16) in per_round and (name, 64) in per_round:
            slope = (per_round[name, 64] - per_round[name, 16]) / 48
            print(f"{name}: {slope:.3f} us per key tile, fixed {per_round[name, 16] - 16 * slope:.2f} us per query "
                  f"block (from 16 and 64 tiles; at 32 tiles predicted {per_round[name, 16] + 16 * slope:.2f}, "
                  f"measured {per_round.get((name, 32), float('nan')):.2f})")


def build_softmax_variant(variants, local, M, N, dtype, name):
    """variants[name] = (module, parameters): `module` names one of the script's own factories (in `local`) or a
    module of kernels/ whose `softmax` to build."""
    import tilelang
    module, params = variants[name]
    kernel = local[module] if module in local else importlib.import_module(module).softmax
    return tilelang.compile(kernel(M, N, dtype, **params), out_idx=[1], target=SM90A)


def softmax_script(variants, local, shapes, checks):
    """The whole of a softmax tuning script: with --compile-only, build every job here; else verify and time."""
    build = functools.partial(build_softmax_variant, variants, local)
    if "--compile-only" in sys.argv:
        build_each(build, [(M, N, dtype, name) for M, N, dtype in checks + shapes for name in variants])
    else:
        compare_softmax_variants(build, list(variants), shapes, checks)
