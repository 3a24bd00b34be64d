"""On a CUDA GPU with the CUDA toolkit's ncu and compute-sanitizer: the profile, the memory checker and the roofline
of the shipped kernels, and a FlashAttention kernel whose last key tile reads past the end.

    .venv/bin/python -m pytest -m gpu -v tests/test_profile_gpu.py

What each test found is printed at the end (SUMMARY lines), for the record in tests/gpu/."""
import base64
import json

import pytest

from playground.engine.actions import execute
from playground.engine.kernel import loader
from playground.ui.profile_view import memcheck_html, profile_html
from playground.ui.roofline import roofline_figure, roofline_label, roofline_point

pytestmark = [pytest.mark.gpu, pytest.mark.timeout(900)]

GEMM_SIZE = {"M": 2048, "N": 2048, "K": 2048}

# A student's first FlashAttention: the key and value tiles are loaded without masking, so on a ragged seq_len the
# last tile reads past the end of K and V. Everything else is right (the query rows and the output are masked).
FA_UNMASKED = '''"""FlashAttention forward without key masking."""
import torch
import tilelang.language as T


def flash_attention(batch=1, heads=2, seq_len=256, dim=64, dtype="float16", block_M=64, block_N=64, threads=128):
    scale = (1.0 / dim) ** 0.5 * 1.44269504  # log2(e): exp2 below
    accum = "float32"

    @T.prim_func
    def main(Q: T.Tensor((batch, seq_len, heads, dim), dtype), K: T.Tensor((batch, seq_len, heads, dim), dtype),
             V: T.Tensor((batch, seq_len, heads, dim), dtype), O: T.Tensor((batch, seq_len, heads, dim), dtype)):
        with T.Kernel(T.ceildiv(seq_len, block_M), heads, batch, threads=threads) as (bx, by, bz):
            Q_s = T.alloc_shared((block_M, dim), dtype)
            K_s = T.alloc_shared((block_N, dim), dtype)
            V_s = T.alloc_shared((block_N, dim), dtype)
            P_s = T.alloc_shared((block_M, block_N), dtype)
            S = T.alloc_fragment((block_M, block_N), accum)
            O_acc = T.alloc_fragment((block_M, dim), accum)
            m = T.alloc_fragment((block_M,), accum)
            m_prev = T.alloc_fragment((block_M,), accum)
            r = T.alloc_fragment((block_M,), accum)
            row_sum = T.alloc_fragment((block_M,), accum)
            l = T.alloc_fragment((block_M,), accum)
            for i, d in T.Parallel(block_M, dim):
                Q_s[i, d] = T.if_then_else(bx * block_M + i < seq_len, Q[bz, bx * block_M + i, by, d], 0)
            T.fill(O_acc, 0)
            T.fill(l, 0)
            T.fill(m, -T.infinity(accum))
            for k in T.serial(T.ceildiv(seq_len, block_N)):
                for i, d in T.Parallel(block_N, dim):
                    K_s[i, d] = K[bz, k * block_N + i, by, d]  # no key masking
                for i, d in T.Parallel(block_N, dim):
                    V_s[i, d] = V[bz, k * block_N + i, by, d]
                T.clear(S)
                T.gemm(Q_s, K_s, S, transpose_B=True)
                T.copy(m, m_prev)
                T.reduce_max(S, m, dim=1, clear=False)
                for i in T.Parallel(block_M):
                    r[i] = T.exp2((m_prev[i] - m[i]) * scale)
                for i, j in T.Parallel(block_M, block_N):
                    S[i, j] = T.exp2((S[i, j] - m[i]) * scale)
                T.reduce_sum(S, row_sum, dim=1)
                for i in T.Parallel(block_M):
                    l[i] = l[i] * r[i] + row_sum[i]
                for i, d in T.Parallel(block_M, dim):
                    O_acc[i, d] *= r[i]
                T.copy(S, P_s)
                T.gemm(P_s, V_s, O_acc)
            for i, d in T.Parallel(block_M, dim):
                if bx * block_M + i < seq_len:
                    O[bz, bx * block_M + i, by, d] = O_acc[i, d] / l[i]

    return main


DTYPES = ["float16"]
SPACE = {"block_M": [64], "block_N": [64], "threads": [128]}
PRESETS = {"1x2x256x64": dict(batch=1, heads=2, seq_len=256, dim=64)}
CHECK_SHAPES = [dict(seq_len=200)]


def make_inputs(batch, heads, seq_len, dim, dtype, device, generator):
    return tuple(torch.randn(batch, seq_len, heads, dim, device=device, generator=generator).to(dtype)
                 for _ in range(3))


def reference(q, k, v):
    s = torch.einsum("bqhd,bkhd->bhqk", q.float(), k.float()) / q.shape[-1] ** 0.5
    return torch.einsum("bhqk,bkhd->bqhd", s.softmax(-1), v.float())


BASELINES = {}


def flops(batch, heads, seq_len, dim):
    return 4 * batch * heads * seq_len * seq_len * dim


def bytes_moved(batch, heads, seq_len, dim):
    return 4 * batch * seq_len * heads * dim * 2
'''


def summary(record_property, text: str) -> None:
    record_property("gpu_summary", text)


@pytest.fixture(scope="module")
def gemm_profile(tmp_path_factory):
    return execute("profile", "gemm", None, GEMM_SIZE, None, str(tmp_path_factory.mktemp("profile")))


def test_a_profile_of_the_shipped_gemm_shows_its_stall_reasons_on_tilelang_lines(gemm_profile, record_property):
    r = gemm_profile
    assert r["ok"], json.dumps(r.get("error"))[:4000]
    sol = {m["name"]: m for m in r["details"]["sections"].get("GPU Speed Of Light Throughput", [])}
    assert "Duration" in sol and ("Compute (SM) Throughput" in sol or "Memory Throughput" in sol), r["details"]
    assert r["stall_reasons"], "the raw page gave no warp-state stall reasons"
    source = r["source"]
    lines = [e for e in source["lines"] if e["samples"] > 0]
    assert lines and source["mapped_share"] > 0.5, source.get("unmapped")
    assert all(e["code"] for e in lines)
    assert any(e["stalls"] for e in lines), "no stall reason per line (stall_* columns of the source page)"
    # The tensor-core work of the kernel is on its gemm line, and its warps wait there on something.
    assert any("gemm" in e["code"] for e in lines), [e["code"] for e in lines[:10]]
    assert base64.b64decode(r["report_b64"]), "the .ncu-rep to download"
    assert "Where the warps wait" in profile_html(r)
    top = "; ".join(f"line {e['line']} {e['code'][:40]!r} {e['share']:.0%} {dict(list(e['stalls'].items())[:2])}"
                    for e in lines[:4])
    summary(record_property, f"profile gemm {GEMM_SIZE}: ncu {r['ncu']}, {source['mapped_share']:.0%} of samples "
                             f"on TileLang lines; top: {top}; kernel stalls {dict(list(r['stall_reasons'].items())[:3])}")


def test_memcheck_names_the_line_of_a_flash_attention_that_reads_past_the_last_key(tmp_path, record_property):
    r = execute("memcheck", "flash_attention", FA_UNMASKED, {}, None, str(tmp_path))
    assert r["ok"], json.dumps(r.get("error"))[:4000]
    runs = {(run["tool"], run["guards"]): run for run in r["runs"]}
    unguarded = runs[("memcheck", False)]
    assert unguarded["problems"] == [{"batch": 1, "heads": 2, "seq_len": 200, "dim": 64}]
    assert unguarded["error_count"] > 0, unguarded.get("log")
    named = [e for e in unguarded["errors"] if e["line"] and "K_s[i, d] = K[" in (e["code"] or "")]
    assert named, [(e["message"], e["line"], e["code"]) for e in unguarded["errors"][:5]]
    assert "read" in named[0]["message"].lower()
    # As compiled, TileLang's own guards keep the loads in bounds (the keys past the end read as zeros).
    assert runs[("memcheck", True)]["error_count"] == 0, runs[("memcheck", True)]["errors"][:3]
    assert "your own masking is missing" in memcheck_html(r)
    summary(record_property, f"memcheck unmasked flash attention (seq_len 200): {unguarded['error_count']} errors "
                             f"without TileLang's guards, first at line {named[0]['line']} {named[0]['code']!r}: "
                             f"{named[0]['message']}; as compiled: 0")


@pytest.mark.parametrize("name", loader.builtin_names())
def test_memcheck_and_racecheck_find_nothing_in_the_shipped_kernels(name, tmp_path, record_property):
    r = execute("memcheck", name, None, {}, None, str(tmp_path))
    assert r["ok"], json.dumps(r.get("error"))[:4000]
    as_compiled = [run for run in r["runs"] if run["guards"]]
    assert {run["tool"] for run in as_compiled} == {"memcheck", "racecheck"}
    for run in as_compiled:
        assert run["error_count"] == 0, (run["tool"], [(e["message"], e["line"], e["code"]) for e in run["errors"][:5]])
    unguarded = next(run for run in r["runs"] if not run["guards"])
    summary(record_property, f"memcheck {name}: clean as compiled (memcheck, racecheck) on "
                             f"{len(unguarded['problems'])} check shape(s); without TileLang's guards "
                             f"{unguarded['error_count']} error(s) at lines "
                             f"{sorted({e['line'] for e in unguarded['errors'] if e['line']})}")


@pytest.mark.parametrize("name", loader.builtin_names())
def test_every_shipped_kernel_has_a_point_on_the_roofline(name, record_property):
    r = execute("run", name, None, {}, None)
    assert r["ok"], json.dumps(r.get("error"))[:4000]
    p = roofline_point(r)
    assert p is not None and 0 < p["percent"] < 150, p
    assert roofline_figure(r) is not None
    others = ", ".join(f"{k} {b['percent']:.0f} %" for k, b in p["baselines"].items())
    summary(record_property, f"roofline {name} {r['config']['problem']}: {p['intensity']:.3g} FLOP/B, "
                             f"{p['tflops']:.3g} TFLOP/s = {roofline_label(p)}; baselines: {others}")


def test_profile_and_memcheck_run_in_the_sandboxed_job_layer(record_property):
    """Through run_job, as the page calls them: in the sandbox (bubblewrap where the host allows it)."""
    from playground import jobs
    from playground.jobs import run_job
    jobs.start()
    try:
        mode = jobs.health().get("sandbox")
        prof = run_job("profile", "vector_add", None, {"N": 2**24})
        check = run_job("memcheck", "vector_add", None, {})
    finally:
        jobs.shutdown()
    assert prof["ok"], json.dumps(prof.get("error"))[:4000]
    assert prof["source"]["lines"] and any("T.copy(" in (e["code"] or "") for e in prof["source"]["lines"])
    assert check["ok"] and all(run["error_count"] == 0 for run in check["runs"] if run["guards"]), \
        json.dumps(check.get("error") or check["runs"])[:4000]
    summary(record_property, f"sandboxed ({mode}) profile and memcheck of vector_add: ok, "
                             f"{prof['source']['mapped_share']:.0%} of samples on TileLang lines")
