"""The compile cache's parts without jobs: the bounded store on disk (least recently used out, whole files only, a
corrupt file a miss), a source's program and where its lines went, nvcc's key, the PTX's lines moved, and who is
served what (an entry written from a job that ran user code reaches only its own student)."""
import json
import os
import stat

from conftest import ROOT
from playground.engine import compile_cache as cc
from playground.jobs import result_cache as rc

VECTOR_ADD = (ROOT / "kernels" / "vector_add.py").read_text()
K1, K2, K3, K4 = (f"{i:064x}" for i in range(1, 5))


def entry_bytes(value: dict, kind: str = "answer", key: str = K1) -> int:
    return len(json.dumps({"format": 1, "kind": kind, "key": key, "value": value}).encode())


# -- the store on disk ------------------------------------------------------------------------------------------
def test_the_store_keeps_entries_across_a_restart_in_a_folder_only_the_server_reads(tmp_path):
    store = cc.Store(tmp_path / "c", 10**6)
    assert store.put("answer", K1, {"cuda": "x"}) and store.get("answer", K1) == {"cuda": "x"}
    again = cc.Store(tmp_path / "c", 10**6)  # a restart: the index is read from the folder
    assert again.get("answer", K1) == {"cuda": "x"} and again.snapshot()["entries"] == 1
    assert stat.S_IMODE(os.stat(tmp_path / "c").st_mode) == 0o700
    assert again.get("answer", K2) is None and again.get("nvcc", K1) is None  # another key, another kind


def test_the_store_stays_within_its_bytes_and_drops_the_least_recently_used_first(tmp_path):
    value = {"text": "y" * 1000}
    size = entry_bytes(value)
    store = cc.Store(tmp_path, 3 * size + 10)
    for k in (K1, K2, K3):
        store.put("answer", k, value)
    assert store.get("answer", K1) == value  # K1 read: K2 is now the least recently used
    store.put("answer", K4, value)
    assert store.snapshot()["bytes"] <= 3 * size + 10
    assert store.get("answer", K2) is None and not (tmp_path / "answer" / f"{K2}.json").exists()
    assert all(store.get("answer", k) == value for k in (K1, K3, K4))
    # the order outlives a restart (file times), and a smaller budget evicts the oldest at once
    time_order = cc.Store(tmp_path, 2 * size + 10)
    assert time_order.snapshot()["entries"] == 2 and time_order.get("answer", K4) == value
    assert not store.put("answer", K1, {"text": "z" * 2 * size}), "an entry over half the budget is not kept"


def test_a_corrupt_cut_or_misplaced_file_is_a_miss_and_is_removed_never_an_error(tmp_path):
    store = cc.Store(tmp_path, 10**6)
    for k in (K1, K2, K3, K4):
        store.put("answer", k, {"ok": True, "cuda": "int x;"})
    folder = tmp_path / "answer"
    (folder / f"{K1}.json").write_bytes((folder / f"{K1}.json").read_bytes()[:20])  # cut short by a crash
    (folder / f"{K2}.json").write_bytes(b"\xff\xfe\x00 not json at all")
    os.replace(folder / f"{K3}.json", folder / f"{K4}.json")  # K3's entry under K4's name
    (tmp_path / "answer" / f".{K3}.1.2.tmp").write_text("{")  # a write a stop interrupted
    for k in (K1, K2, K4):
        assert store.get("answer", k) is None
        assert not (folder / f"{k}.json").exists()
    assert store.snapshot()["corrupt"] == 3
    cc.Store(tmp_path, 10**6)  # the next start removes what a cut write left
    assert not list(folder.glob("*.tmp"))
    (folder / f"{K1}.json").write_text(json.dumps({"format": 1, "kind": "answer", "key": K1, "value": [1]}))
    assert cc.Store(tmp_path, 10**6).get("answer", K1) is None  # a value that is not an answer


def test_an_entry_missing_from_the_store_is_taken_from_the_read_only_seed_and_a_bad_seed_file_is_a_miss(tmp_path):
    made = cc.Store(tmp_path / "seed", 10**6)  # made ahead of time (the image's build: app.py --prewarm)
    made.put("answer", K1, {"ok": True, "cuda": "int x;"})
    made.put("answer", K2, {"ok": True})
    (tmp_path / "seed" / "answer" / f"{K2}.json").write_bytes(b'{"format": 1, "kind": "answer"')  # cut short
    os.replace(tmp_path / "seed" / "answer" / f"{K1}.json", tmp_path / "seed" / "answer" / f"{K3}.json")
    made.put("answer", K1, {"ok": True, "cuda": "int x;"})
    seed_files = sorted(p.name for p in (tmp_path / "seed" / "answer").iterdir())
    store = cc.Store(tmp_path / "data", 10**6, seed=tmp_path / "seed")
    assert store.get("answer", K1) == {"ok": True, "cuda": "int x;"}
    assert (tmp_path / "data" / "answer" / f"{K1}.json").exists(), "copied into the server's own store"
    assert store.get("answer", K2) is None, "a cut seed file is a miss"
    assert store.get("answer", K3) is None, "an entry under another key's name is a miss"
    assert store.snapshot()["seeded"] == 1 and store.snapshot()["hits"] == 1
    assert sorted(p.name for p in (tmp_path / "seed" / "answer").iterdir()) == seed_files, "the seed is never written"
    (tmp_path / "seed" / "answer" / f"{K1}.json").unlink()
    assert cc.Store(tmp_path / "data", 10**6, seed=tmp_path / "seed").get("answer", K1) is not None  # kept here now


def test_a_name_that_is_not_a_key_never_reaches_the_disk(tmp_path):
    store = cc.Store(tmp_path, 10**6)
    for kind, key in (("answer", "../../etc/passwd"), ("../x", K1), ("answer", "AB" * 32), ("answer", K1[:-1])):
        try:
            store.get(kind, key)
        except ValueError:
            continue
        raise AssertionError(f"{kind}/{key} was looked up")


# -- a source as a program ------------------------------------------------------------------------------------------
def test_comments_blank_lines_and_spacing_leave_the_program_as_it_was_and_say_where_lines_went():
    program, starts = cc.program_of(VECTOR_ADD)
    laid_out = "# a comment of mine\n\n" + VECTOR_ADD.replace("bx * block_N", "bx*block_N  # start")
    again, moved_starts = cc.program_of(laid_out)
    assert again == program
    moved = cc.line_mapping(starts, moved_starts)
    lines = VECTOR_ADD.splitlines()
    kernel_line = next(n for n, t in enumerate(lines, 1) if "T.Kernel(" in t)
    assert moved[kernel_line] == kernel_line + 2
    assert laid_out.splitlines()[moved[kernel_line] - 1] == lines[kernel_line - 1]
    for other in (VECTOR_ADD.replace("start", "offset"),  # a rename
                  VECTOR_ADD.replace('"""Vector addition', '"""Vector sum', 1),  # a docstring
                  VECTOR_ADD.replace("block_N=8192", "block_N=4096"), VECTOR_ADD + "\nX = 1\n"):
        assert cc.program_of(other)[0] != program
    assert cc.program_of("def f(:\n  )))") is None  # not Python: no program, no shortcut


def test_an_answer_laid_out_anew_gets_its_line_map_warnings_and_ptx_lines_moved():
    answer = {"ok": True, "error": None, "line_map": [None, 2, 3, None], "source_file": "/job/src/a/k.py",
              "warnings": [{"stage": "resources", "line": 3, "message": "spills"}],
              "ptx": '.file\t1 "/tmp/t/tvm_kernels.cu"\n.file\t2 "/job/src/a/k.py"\n.loc\t2 3 5\n.loc\t1 3 0\n'
                     '.loc\t3 9 1, function_name $L, inlined_at 2 2 7\n'}
    old = "import x\ny = 1\nz = 2\n"
    new = "# one\n# two\nimport x\n\ny = 1\nz = 2\n"
    moved = rc.relaid(answer, old, new)
    assert moved["line_map"] == [None, 5, 6, None] and moved["warnings"][0]["line"] == 6
    assert ".loc\t2 6 5" in moved["ptx"] and ".loc\t1 3 0" in moved["ptx"] and "inlined_at 2 5 7" in moved["ptx"]
    assert rc.relaid(answer, old, "import x\ny = 1\nz = 3\n") is None  # another program


# -- a TIR and where its lines went -----------------------------------------------------------------------------
def tir_of(source: str, tmp_path, params: dict | None = None) -> dict:
    from playground.engine.compile import make_prim_func, tir_identity
    from playground.engine.kernel import load
    folder = tmp_path / f"k{len(list(tmp_path.iterdir()))}"
    kernel = load("", source, str(folder))
    return tir_identity(make_prim_func(kernel, kernel.resolve(params or {})), kernel.resolve(params or {}),
                        str(kernel.path))


def test_an_edit_outside_the_kernel_keeps_its_tir_and_the_spans_say_where_its_lines_went(tmp_path):
    tir = tir_of(VECTOR_ADD, tmp_path)
    edited = VECTOR_ADD.replace('"""Vector addition:', '"""My notes.\n\nVector addition:', 1)
    again = tir_of(edited, tmp_path)
    assert again["digest"] == tir["digest"]
    moved = cc.span_mapping(tir["spans"], again["spans"])
    lines, new_lines = VECTOR_ADD.splitlines(), edited.splitlines()
    assert moved and all(lines[old - 1] == new_lines[new - 1] for old, new in moved.items())
    assert all(new == old + 2 for old, new in moved.items())
    # a rename the TIR keeps (the CUDA shows it), another tile: another TIR
    assert tir_of(VECTOR_ADD.replace("A_local", "A_regs"), tmp_path)["digest"] != tir["digest"]
    assert tir_of(VECTOR_ADD, tmp_path, {"block_N": 4096})["digest"] != tir["digest"]


def test_spans_that_cannot_be_paired_are_no_mapping_and_a_line_no_span_names_keeps_its_distance():
    old = [None, ["", 10], ["", 12], ["/k/helper.py", 5]]
    moved = cc.span_mapping(old, [None, ["", 20], ["", 22], ["/k/helper.py", 5]])
    assert moved == {10: 20, 12: 22}
    assert moved.get(11) == 21 and moved.get(9) == 19 and moved.get(30) == 40  # (nvcc's line information)
    assert cc.span_mapping(old, old[:3]) is None                                      # another count
    assert cc.span_mapping(old, [None, ["", 20], ["", 22], ["/k/helper.py", 6]]) is None  # a module's line moved
    assert cc.span_mapping(old, [None, ["", 20], ["/k/other.py", 22], ["/k/helper.py", 5]]) is None
    assert cc.span_mapping([["", 10], ["", 10]], [["", 20], ["", 21]]) is None        # one line split in two
    assert cc.span_mapping(old, [["", 1], ["", 20], ["", 22], ["/k/helper.py", 5]]) is None
    assert cc.span_mapping([["/k/helper.py", 5]], [["/k/helper.py", 5]]).get(7) == 7  # nothing of the user's


# -- nvcc's key --------------------------------------------------------------------------------------------------
def test_nvccs_key_is_the_cuda_its_flags_and_tilelang_and_not_the_jobs_folder():
    from playground.engine.compile import _stable_options
    flags = {"format": "cubin", "arch": ["-arch=sm_90a"],
             "options": _stable_options(["-std=c++20", "-keep", "-keep-dir", "/job/tmp/nvcc-keep-abc"])}
    same = {**flags, "options": _stable_options(["-std=c++20", "-keep", "-keep-dir", "/job/tmp/nvcc-keep-xyz"])}
    key = cc.nvcc_key("int main;", flags, "0.1.15")
    assert key == cc.nvcc_key("int main;", same, "0.1.15")
    assert len({key, cc.nvcc_key("int main2;", flags, "0.1.15"), cc.nvcc_key("int main;", flags, "0.1.16"),
                cc.nvcc_key("int main;", {**flags, "arch": ["-arch=sm_80"]}, "0.1.15"),
                cc.nvcc_key("int main;", {**flags, "options": ["--use_fast_math"]}, "0.1.15")}) == 5


# -- who is served what -------------------------------------------------------------------------------------------
NVCC = {"ptx": "ptx", "sass": "sass", "ptxas_log": "log", "cubin_b64": "AAAA", "user_lines": [1, None],
        "source_file": "/job/src/a/k.py"}


def test_an_entry_from_a_students_job_reaches_that_student_only_and_one_without_user_code_reaches_all(tmp_path):
    cache = rc.ResultCache(tmp_path, 10**7)
    alice, bob = rc.writer_of("user:alice"), rc.writer_of("user:bob")
    cache.put_nvcc(K1, alice, {**NVCC, "sass": "alice's"})
    assert cache.get_nvcc(K1, [rc.SHARED, alice])["sass"] == "alice's"
    assert cache.get_nvcc(K1, [rc.SHARED, bob]) is None, "one student's job never answers for another"
    cache.put_nvcc(K1, rc.SHARED, {**NVCC, "sass": "the catalogue's"})
    assert cache.get_nvcc(K1, [rc.SHARED, bob])["sass"] == "the catalogue's"
    assert cache.get_nvcc(K1, [rc.SHARED, alice])["sass"] == "the catalogue's"  # shared first
    # programs alike
    answer = {"ok": True, "error": None, "line_map": [1], "warnings": []}
    cache.put(K2, answer)
    cache.put_program(K3, alice, K2, "x = 1\n")
    assert cache.get_program(K3, [rc.SHARED, alice], "x = 1  # mine\n")["line_map"] == [1]
    assert cache.get_program(K3, [rc.SHARED, bob], "x = 1  # mine\n") is None
    # where one person may log in under any name, the address is part of whose entries they are
    from playground.jobs.queue import Student
    assert rc.writer_of(Student("user:alice", "10.0.0.9")) != alice
    assert rc.writer_of("anon") is None and rc.writer_of("") is None


def test_the_cache_is_read_back_from_disk_after_a_restart_and_a_malformed_entry_is_a_miss(tmp_path):
    cache = rc.ResultCache(tmp_path, 10**7)
    cache.put(K1, {"ok": True, "cuda": "int a;"})
    cache.put_nvcc(K2, rc.SHARED, {**NVCC, "cubin_b64": 7})  # not nvcc's output as kept: never served
    restarted = rc.ResultCache(tmp_path, 10**7)
    assert restarted.get(K1) == {"ok": True, "cuda": "int a;"}
    assert restarted.get_nvcc(K2, [rc.SHARED]) is None
    restarted.clear()
    assert rc.ResultCache(tmp_path, 10**7).get(K1) is None
