"""The compile cache through real jobs: what was compiled once is answered without a job, by anyone, after a restart
too; an edit that only lays the source out anew costs no job; one that keeps the CUDA skips nvcc and ptxas; a job's
lie about nvcc's output reaches its own student only; the CUDA comes before the rest, bounded; a timeout names its
stage; the pre-warm runs niced in a slot of its own."""
import threading
import time

import pytest

from conftest import ROOT
from playground import jobs
from playground.jobs import hardware, job as job_module, runner
from playground.jobs.queue import Scheduler
from playground.settings import current

VECTOR_ADD = (ROOT / "kernels" / "vector_add.py").read_text()
SMALL = {"N": 4096}


def with_import(code: str) -> str:
    return VECTOR_ADD.replace("import tilelang.language as T\n", "import tilelang.language as T\n" + code + "\n", 1)


def loc_lines(ptx: str) -> list[str]:
    """The PTX's line information in the user's file (file 2: nvcc numbers the .cu first)."""
    return [ln.split(",")[0].strip() for ln in ptx.splitlines() if ln.strip().startswith(".loc\t2 ")]


class Layer:
    """The job layer of these tests: the current one (a test restarts it)."""

    @property
    def cache(self):
        return runner.state().cache

    @property
    def settings(self):
        return runner.state().settings


@pytest.fixture(scope="module")
def layer(tmp_path_factory):
    jobs.shutdown()
    runner.state(current().replace(data_dir=tmp_path_factory.mktemp("data"), prewarm=False))
    yield Layer()
    jobs.shutdown()


def jobs_taken(_layer=None) -> int:
    """Compile jobs the current job layer has started."""
    return runner.state().backend.pools[("cpu", None)].taken


def keys_asked(st) -> list[str]:
    """The answer keys `st`'s cache is asked for from now on (a spy: the cache still answers)."""
    asked, get = [], st.cache.get
    st.cache.get = lambda key: (asked.append(key[:12]), get(key))[1]
    return asked


def compile_(source=None, session="user:a", params=SMALL, **kw):
    return jobs.run_job("compile", "vector_add", source, params, session=session, **kw)


def test_what_one_student_compiled_is_anothers_at_once_and_after_a_restart_from_the_disk(layer):
    cold = compile_(session="user:a")
    assert cold["ok"] and not cold.get("cached"), cold.get("error")
    taken = jobs_taken(layer)
    warm = compile_(session="user:b")
    assert warm["cached"] and warm["cuda"] == cold["cuda"] and jobs_taken(layer) == taken
    settings = layer.settings
    jobs.shutdown()  # a restart: nothing in memory
    runner.state(settings)
    try:
        again = compile_(session="user:c")
        assert again["cached"] and again["cuda"] == cold["cuda"] and jobs_taken() == 0, "no job after a restart"
        assert jobs.health()["cache"]["disk"]["entries"] >= 1
    finally:
        jobs.shutdown()
        runner.state(settings)


def test_an_edit_of_comments_and_blank_lines_costs_no_job_and_its_lines_move(layer):
    cold = compile_(session="user:a")  # (the catalogue's kernel: kept for everyone)
    taken = jobs_taken(layer)
    edited = "# my notes\n\n" + VECTOR_ADD.replace("bx * block_N", "bx*block_N  # where my block starts")
    progress = []
    hit = compile_(edited, session="user:d", on_progress=lambda w, f: progress.append(w))
    assert hit["ok"] and hit["cached"] and hit["cached_as"] == "program" and jobs_taken(layer) == taken
    assert "only comments" in progress[-1]
    assert hit["line_map"] == [n + 2 if n else n for n in cold["line_map"]]
    assert loc_lines(hit["ptx"]) == [f".loc\t2 {int(x.split()[2]) + 2} {x.split()[3]}" for x in loc_lines(cold["ptx"])]


def test_an_edit_that_keeps_the_cuda_skips_nvcc_shows_the_cuda_first_and_moves_only_the_lines(layer):
    compile_(session="user:a")
    renamed = "# renamed\n" + VECTOR_ADD.replace("start", "offset")  # another program, the same CUDA
    partial, events = [], []
    reused = compile_(renamed, session="user:e", on_partial=lambda p: (partial.append(p), events.append("partial")),
                      on_progress=lambda w, f: events.append(w))
    assert reused["ok"] and not reused.get("cached") and reused["nvcc_reused"], reused.get("error")
    assert any(w.startswith("nvcc: skipped") for w in events if isinstance(w, str))
    assert partial and partial[0]["cuda"] == reused["cuda"] and partial[0]["line_map"] == reused["line_map"]
    assert events.index("partial") < len(events)  # the CUDA came before the answer
    # what nvcc itself makes of this source: the same SASS and figures, the PTX's lines where the reuse put them
    layer.cache.clear()
    fresh = compile_(renamed + "\n", session="user:f")
    assert fresh["ok"] and not fresh["nvcc_reused"]
    assert fresh["sass"] == reused["sass"] and fresh["resources"] == reused["resources"]
    assert loc_lines(fresh["ptx"]) == loc_lines(reused["ptx"]) and fresh["line_map"] == reused["line_map"]


def test_an_edit_that_keeps_the_tir_lowers_nothing_and_gives_the_lines_a_fresh_compile_gives(layer):
    compile_(session="user:a")  # (the catalogue's kernel: kept for everyone)
    # Another program (a longer docstring, a line more in the __main__ block), the same TIR: its lines move by two
    edited = VECTOR_ADD.replace('"""Vector addition:', '"""My notes on it.\n\nVector addition:', 1) \
        .replace('    main("vector_add")', '    print("checking")\n    main("vector_add")')
    events = []
    reused = compile_(edited, session="user:g", on_progress=lambda w, f: events.append(w))
    assert reused["ok"] and not reused.get("cached") and reused["lowering_reused"], reused.get("error")
    assert any(w.startswith("lowering: skipped") for w in events) and not any(w.startswith("nvcc") for w in events)
    # what lowering and nvcc themselves make of this source: the same code, its lines where the reuse put them
    layer.cache.clear()
    fresh = compile_(edited + "\n", session="user:h")
    assert fresh["ok"] and not fresh["lowering_reused"] and not fresh["nvcc_reused"]
    assert fresh["cuda"] == reused["cuda"] and fresh["sass"] == reused["sass"]
    assert fresh["line_map"] == reused["line_map"] and any(fresh["line_map"])
    assert loc_lines(fresh["ptx"]) == loc_lines(reused["ptx"]) and loc_lines(fresh["ptx"])


def test_a_rename_the_tir_keeps_is_lowered_again_so_the_cuda_shows_the_new_name(layer):
    compile_(session="user:a")
    renamed = VECTOR_ADD.replace("A_local", "A_regs")
    answer = compile_(renamed, session="user:a")
    assert answer["ok"] and not answer["lowering_reused"] and "A_regs" in answer["cuda"], answer.get("error")


def test_a_file_that_changes_what_lowering_does_besides_its_tir_is_lowered_again(layer):
    compile_(session="user:a")
    # the same TIR, and a CUDA post-processing callback registered at the file's top level: TileLang runs it
    postproc = with_import("from tilelang.engine.callback import register_cuda_postproc_callback\n"
                           "register_cuda_postproc_callback(lambda code, target: '// post-processed\\n' + code)")
    answer = compile_(postproc, session="user:a")
    assert answer["ok"] and not answer["lowering_reused"], answer.get("error")
    assert "// post-processed" in answer["cuda"]


def test_the_catalogues_own_kernel_never_takes_a_students_forged_entry_and_so_never_shares_it(layer):
    layer.cache.clear()
    params = {"N": 4096, "threads": 64}  # a TIR and a CUDA no job without user code has made here
    forging = with_import("import playground.engine.compile as _c\n"
                          "_c.ptxas_resources = lambda ptx, arch: ({'registers': 1}, 'FORGED LOG', 'FORGED SASS')")
    assert compile_(forging, session="user:mallory", params=params)["sass"] == "FORGED SASS"
    # the forger asks for the unedited kernel at those sizes: a job that runs no user code, whose answer is
    # everyone's, so it reads only entries everyone may read, not the forger's own
    unedited = compile_(None, session="user:mallory", params=params)
    assert unedited["ok"] and not unedited["lowering_reused"] and not unedited["nvcc_reused"]
    assert "FORGED" not in unedited["sass"]
    for_bob = compile_(None, session="user:bob", params=params)
    assert for_bob["cached"] and "FORGED" not in for_bob["sass"]


def test_a_job_that_forges_nvccs_output_misleads_only_its_own_student(layer):
    layer.cache.clear()
    params = {"N": 4096, "threads": 128}  # a CUDA no job without user code has compiled here
    forging = with_import("import playground.engine.compile as _c\n"
                          "_c.ptxas_resources = lambda ptx, arch: ({'registers': 1}, 'FORGED LOG', 'FORGED SASS')")
    forged = compile_(forging, session="user:mallory", params=params)
    assert forged["ok"] and forged["sass"] == "FORGED SASS", forged.get("error")
    # the forger's own next compile of that CUDA is served what the forger's job said (its own entry) ...
    own = compile_(VECTOR_ADD + "\nX = 1\n", session="user:mallory", params=params)
    assert own["nvcc_reused"] and own["lowering_reused"] and own["sass"] == "FORGED SASS"  # (the same TIR)
    # ... a classmate's is not: nvcc runs for them
    other = compile_(VECTOR_ADD + "\nX = 2\n", session="user:bob", params=params)
    assert other["ok"] and not other["nvcc_reused"] and not other["lowering_reused"]
    assert "FORGED" not in other["sass"] and other["sass"]
    assert other["resources"]["registers"] != 1


def test_a_partial_answer_is_bounded_like_every_answer(layer):
    flood = with_import("import gc\nfor _o in gc.get_objects():\n    if type(_o).__name__ == 'ServerCacheClient':\n"
                        "        _o.send({'partial': {'cuda': 'x' * (3 * 2**20), 'line_map': [], 'nvcc': {}}})")
    seen = []
    result = compile_(flood, session="user:flood", on_partial=seen.append)
    assert result["ok"], result.get("error")
    assert seen and len(seen[0]["cuda"]) <= 2**20 and "cut at 1 MiB" in seen[0]["cuda"]


def test_a_compile_that_times_out_says_which_stage_it_was_in_and_the_likely_cause(layer):
    looping = with_import("while True:\n    pass")
    result = compile_(looping, session="user:loop", timeout=8)
    assert result["error"]["stage"] == "timeout"
    assert "while Python ran the file's top level" in result["error"]["message"], result["error"]
    assert "loop" in result["error"]["message"]
    nvcc = job_module.timeout_message("compile", 120, "nvcc: compiling the generated CUDA")
    assert nvcc == ("the compile job ran past its 120 s limit while nvcc compiled the generated CUDA and was stopped: "
                    "very large unrolled loops (T.unroll, big T.Parallel extents) make nvcc slow")


def test_a_background_job_takes_a_slot_of_its_own_and_runs_niced(layer):
    sched = Scheduler(1, [])
    release, holding = threading.Event(), threading.Event()

    def background():
        with sched.slot("background", "anon", lambda *_: None):
            holding.set()
            release.wait(30)
    t = threading.Thread(target=background, daemon=True)
    t.start()
    assert holding.wait(5)
    started = time.monotonic()
    with sched.slot("cpu", "student", lambda *_: None):  # the student's slot is free while the background runs
        assert time.monotonic() - started < 1
    release.set()
    t.join(5)
    niceness = with_import("import os\nraise SystemExit(f'niceness {os.nice(0)}')")
    result = jobs.run_job("compile", "vector_add", niceness, SMALL, background=True)
    assert "niceness 19" in result["error"]["message"], result["error"]


def test_a_students_compile_yields_the_cpu_to_the_web_server_answering_cached_requests(layer):
    from playground.jobs import limits
    # (not the background test's text: that answer is kept, and would be this one's)
    niceness = with_import("import os\nstudent = 1\nraise SystemExit(f'niceness {os.nice(0)}')")
    result = jobs.run_job("compile", "vector_add", niceness, SMALL, session="user:nice")
    assert f"niceness {limits.COMPILE_NICE}" in result["error"]["message"], result["error"]
    assert limits.COMPILE_NICE > 0


def test_the_prewarm_compiles_the_pages_first_request_so_the_first_student_is_answered_from_the_cache(layer, tmp_path):
    from playground.ui import gateway
    layer.cache.clear()
    first = dict(gateway.prewarm_requests())["vector_add"]
    asked = keys_asked(runner.state())
    made = runner.prewarm([("vector_add", first)], wait=True)
    assert [a["ok"] for a in made] == [True], made
    taken = jobs_taken(layer)
    answer = gateway.call("compile", "vector_add", "", first, session="user:first")
    assert answer["ok"] and answer["cached"] and jobs_taken(layer) == taken
    tuned_before = runner._tuned_digest(runner.state(), "vector_add")

    # The image's build pre-warms into a folder of its own, which a server with an empty data folder (a new
    # volume, a bind-mounted host folder) reads as its seed: the first student's first compile is warm there too
    settings = layer.settings
    seed = settings.data_dir / "compile-cache"
    jobs.shutdown()
    try:
        runner.state(settings.replace(data_dir=tmp_path / "empty", compile_cache_seed=seed))
        taken = jobs_taken()
        asked_again = keys_asked(runner.state())
        answer = gateway.call("compile", "vector_add", "", first, session="user:first")
        # (what a failure needs to be read: the seed's entries, what the new store did, the answer keys each layer
        # asked for and what goes into them that a layer decides)
        seen = {"seed": sorted(str(p.relative_to(seed)) for p in seed.glob("*/*.json")),
                "store": runner.state().cache.disk.snapshot(), "error": answer.get("error"),
                "asked before": asked, "asked after": asked_again,
                "tuned before": tuned_before, "tuned after": runner._tuned_digest(runner.state(), "vector_add"),
                "arch": hardware.default_arch(runner.state().settings),
                "layer's data folder": str(runner.state().settings.data_dir), "asked for": str(tmp_path / "empty")}
        assert answer["ok"] and answer["cached"] and jobs_taken() == taken, seen
        assert seen["store"]["seeded"] >= 1, seen
    finally:
        jobs.shutdown()
        runner.state(settings)


def test_a_shutdown_during_the_prewarm_ends_its_job_and_leaves_no_folder(layer):
    """The pre-warm's worker is its own (niced), not a spare: the pool still knows it, so a shutdown (SIGTERM) ends
    it with its folder, where its daemon thread would have been stopped midway and left both behind."""
    settings = layer.settings
    pool = runner.state().backend.pools[("cpu", None)]
    thread = threading.Thread(target=lambda: jobs.run_job("compile", "vector_add", None, {"N": 12345},
                                                          background=True), daemon=True)
    thread.start()
    deadline = time.monotonic() + 60
    while not pool.out and time.monotonic() < deadline:
        time.sleep(0.05)
    (job,) = pool.out
    assert job.dir.exists()
    try:
        jobs.shutdown()
        assert job.closed and not job.dir.exists()
        thread.join(30)
        assert not thread.is_alive()
    finally:
        runner.state(settings)
