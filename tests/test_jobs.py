"""The job layer on CPU: queue and limits (no processes), then run_job end to end through sandboxed workers."""
import contextlib
import json
import os
import socket
import subprocess
import sys
import threading
import time

import psutil
import pytest

from conftest import ROOT
from playground import jobs
from playground.jobs import result_cache as cache, runner, sandbox
from playground.jobs.backend import Ceilings, no_user_code
from playground.jobs.queue import Busy, Scheduler, Stopped, Stops
from playground.settings import Settings, current

VECTOR_ADD = (ROOT / "kernels" / "vector_add.py").read_text()


def with_import(code: str) -> str:
    return VECTOR_ADD.replace("import tilelang.language as T\n", "import tilelang.language as T\n" + code + "\n", 1)


# -- the queue, without processes -----------------------------------------------------------------------------
def test_a_stop_reaches_only_its_owners_jobs_asked_before_it():
    stops, before = Stops(), time.monotonic()
    assert stops.stop("tab-1") == {"killed": 0, "left": 0, "waiting": 0}  # nothing of the tab's holds a slot
    assert stops.stopped_since("tab-1", before)
    assert not stops.stopped_since("tab-2", before) and not stops.stopped_since(None, before)
    assert not stops.stopped_since("tab-1", time.monotonic())  # a job asked for after the stop runs


def test_a_stop_while_the_worker_gets_ready_kills_it_as_soon_as_it_is_there():
    class Worker:
        killed = False

        def kill(self):
            self.killed = True

    stops, before = Stops(), time.monotonic()
    with stops.track("tab-1", before) as ticket:  # the job holds its slot; pool.take() is still waiting
        assert stops.stop("tab-1") == {"killed": 0, "left": 0, "waiting": 1}
        worker = Worker()
        stops.attach(ticket, worker)
        assert worker.killed and ticket.stopped
    with stops.track("tab-1", before) as ticket:  # a job asked for before the stop, reaching its slot after it
        assert ticket.stopped


def test_a_stopped_job_leaves_the_queue_and_frees_its_place():
    sched, stops = Scheduler(1, [0]), Stops()
    release, started = threading.Event(), []
    holder = hold(sched, "gpu", "other", release, started)
    time.sleep(0.2)
    asked, outcome = time.monotonic(), []

    def wait_in_line():
        try:
            with sched.slot("gpu", "student", lambda *_: None, stop_if=lambda: stops.stopped_since("tab", asked)):
                outcome.append("ran")
        except Stopped:
            outcome.append("stopped")
    waiting = threading.Thread(target=wait_in_line)
    waiting.start()
    time.sleep(0.3)
    assert sched.snapshot()["gpu"]["waiting"] == 1
    stops.stop("tab")
    waiting.join(5)
    assert outcome == ["stopped"] and sched.snapshot()["gpu"]["waiting"] == 0  # gone before the GPU was free
    release.set()
    holder.join(5)


def hold(sched, kind, session, release, started, progress=None):
    def body():
        try:
            with sched.slot(kind, session, progress or (lambda *_: None)):
                started.append(session)
                release.wait(30)
        except Busy as b:
            started.append(b)
    t = threading.Thread(target=body, daemon=True)
    t.start()
    return t


def test_queue_reports_positions_and_runs_in_arrival_order():
    sched = Scheduler(1, [0])
    release, started, seen = threading.Event(), [], []
    threads = [hold(sched, "gpu", "a", release, started)]
    time.sleep(0.2)
    threads += [hold(sched, "gpu", f"s{i}", release, started, lambda w, f, i=i: seen.append((i, w))) for i in range(3)]
    time.sleep(0.5)
    assert started == ["a"]
    assert (2, "queued: 2 jobs ahead, waiting for the GPU") == (seen[-1][0], seen[-1][1].split(" (")[0])
    assert sched.snapshot()["gpu"] == {"running": 1, "waiting": 3, "slots": 1, "mean_job_seconds": 20.0}
    release.set()
    for t in threads:
        t.join(10)
    assert started == ["a", "s0", "s1", "s2"], "the GPU queue is first come, first served"


def test_compiles_run_side_by_side_on_the_cpu_slots():
    sched = Scheduler(2, [])
    release, started = threading.Event(), []
    threads = [hold(sched, "cpu", f"s{i}", release, started) for i in range(3)]
    time.sleep(0.5)
    assert len(started) == 2
    release.set()
    for t in threads:
        t.join(10)
    assert len(started) == 3


def test_full_queue_turns_jobs_away_with_a_time_to_retry():
    sched = Scheduler(1, [], Settings(queue_limit=2))
    release, started = threading.Event(), []
    threads = [hold(sched, "cpu", f"s{i}", release, started) for i in range(3)]
    time.sleep(0.5)
    with pytest.raises(Busy) as busy:
        with sched.slot("cpu", "late", lambda *_: None):
            pass
    assert "busy" in str(busy.value) and busy.value.retry_after > 0
    release.set()
    for t in threads:
        t.join(10)


def test_one_session_cannot_fill_the_queue():
    sched = Scheduler(1, [], Settings(session_inflight=2))
    release, started = threading.Event(), []
    threads = [hold(sched, "cpu", "greedy", release, started) for _ in range(3)]
    time.sleep(0.5)
    turned_away = [s for s in started if isinstance(s, Busy)]
    assert len(turned_away) == 1 and "already have 2 jobs" in str(turned_away[0])
    polite = hold(sched, "cpu", "polite", release, started)  # another session still gets in line
    time.sleep(0.3)
    assert sched.snapshot()["cpu"]["waiting"] == 2
    release.set()
    for t in threads + [polite]:
        t.join(10)
    assert started.count("greedy") == 2 and "polite" in started


def test_waiting_for_anothers_compile_counts_against_the_student_but_not_the_queue():
    sched = Scheduler(1, [], Settings(session_inflight=1, queue_limit=0))  # a full queue: nothing more may wait
    with pytest.raises(Busy, match="server is busy"):
        with sched.slot("cpu", "ada", lambda *_: None):
            pass
    with sched.waiting_in_place("ada"):  # waits in no queue, so a full one does not turn it away ...
        with pytest.raises(Busy, match="already have 1 jobs"):
            with sched.waiting_in_place("ada"):  # ... but it is one of Ada's jobs in flight
                pass
        with sched.waiting_in_place("anon"):  # (the pre-warm's, counted against no one)
            pass
    assert sched.inflight["ada"] == 0


def test_a_freed_slot_goes_to_the_waiting_student_with_fewest_jobs_running_then_in_turn():
    # Two CPU slots: the greedy student holds both and waits with a third; a classmate comes after it.
    sched = Scheduler(2, [0])
    release = {name: threading.Event() for name in ("g1", "g2", "g3", "c1")}
    started = []

    def job(kind, session, name):
        def body():
            with sched.slot(kind, session, lambda *_: None):
                started.append(name)
                release[name].wait(30)
        t = threading.Thread(target=body, daemon=True)
        t.start()
        time.sleep(0.3)
        return t
    threads = [job("cpu", "greedy", n) for n in ("g1", "g2", "g3")] + [job("cpu", "classmate", "c1")]
    assert started == ["g1", "g2"]
    release["g1"].set()
    time.sleep(0.8)
    assert started == ["g1", "g2", "c1"], "the classmate (none running) goes before the greedy one's third (one)"
    for e in release.values():
        e.set()
    for t in threads:
        t.join(10)
    # One GPU: everyone has none running when it frees, so students take turns (the one served longest ago first).
    release = {name: threading.Event() for name in ("g1", "g2", "g3", "c1")}
    started.clear()
    threads = [job("gpu", "greedy", n) for n in ("g1", "g2", "g3")] + [job("gpu", "classmate", "c1")]
    release["g1"].set()
    time.sleep(0.8)
    assert started == ["g1", "c1"], started
    for e in release.values():
        e.set()
    for t in threads:
        t.join(10)
    assert started == ["g1", "c1", "g2", "g3"]


def test_where_names_are_free_an_address_is_held_to_its_own_limits_and_turn():
    from playground.jobs.queue import Student
    sched = Scheduler(1, [], Settings(session_inflight=3, address_inflight=4, session_burst=12, session_rate=0.5))
    release, started = threading.Event(), []
    # One person under five names from one address: four jobs in flight at most, whatever the names.
    names = [Student(f"user:eve{i}", address="203.0.113.9") for i in range(5)]
    threads = [hold(sched, "cpu", names[i], release, started) for i in range(5)]
    time.sleep(0.5)
    turned_away = [s for s in started if isinstance(s, Busy)]
    assert len(turned_away) == 1 and "from your address" in str(turned_away[0]), started
    # A classmate from another address still gets in line, and takes the slot before the four waiting names.
    classmate = hold(sched, "cpu", Student("user:cleo", address="198.51.100.4"), release, started)
    time.sleep(0.3)
    assert sched.snapshot()["cpu"]["waiting"] == 4
    release.set()
    for t in threads + [classmate]:
        t.join(10)
    assert [str(s) for s in started if not isinstance(s, Busy)][:2] == ["user:eve0", "user:cleo"], started
    # The address's bucket: 4 times a student's burst from one address, then refused whatever the name.
    sched = Scheduler(1, [], Settings(session_inflight=3, address_inflight=12, session_burst=2, session_rate=0.01))
    for i in range(8):
        with sched.slot("cpu", Student(f"user:mallory{i}", address="203.0.113.10"), lambda *_: None):
            pass
    with pytest.raises(Busy, match="from this address"):
        with sched.slot("cpu", Student("user:mallory-new", address="203.0.113.10"), lambda *_: None):
            pass
    with sched.slot("cpu", Student("user:cleo", address="198.51.100.4"), lambda *_: None):
        pass  # another address is not held back
    with sched.slot("cpu", "user:noaddress", lambda *_: None):
        pass  # nor a student whose names are not free (a roster)


def test_rate_limit_per_session_then_refill():
    sched = Scheduler(1, [], Settings(session_burst=3, session_rate=10.0))
    for _ in range(3):
        with sched.slot("cpu", "clicker", lambda *_: None):
            pass
    with pytest.raises(Busy) as busy:
        with sched.slot("cpu", "clicker", lambda *_: None):
            pass
    assert "too many jobs" in str(busy.value)
    with sched.slot("cpu", "someone-else", lambda *_: None):
        pass
    time.sleep(0.15)
    with sched.slot("cpu", "clicker", lambda *_: None):
        pass


def test_cache_key_depends_on_what_the_request_says():
    k = cache.request_key("compile", "gemm", "text", {"block_M": 64}, "sm_90a", {})
    assert k == cache.request_key("compile", "gemm", "text", {"block_M": 64}, "sm_90a", {})
    for other in [("compile", "gemm", "text ", {"block_M": 64}, "sm_90a", {}),
                  ("compile", "gemm", "text", {"block_M": 128}, "sm_90a", {}),
                  ("compile", "gemm", "text", {"block_M": 64}, "sm_80", {}),
                  ("run", "gemm", "text", {"block_M": 64}, "sm_90a", {})]:
        assert cache.request_key(*other) != k
    assert cache.request_key("compile", "vector_add", None, {}, "sm_90a", {}) == \
        cache.request_key("compile", "vector_add", VECTOR_ADD, {}, "sm_90a", {}), "no source means the built-in text"
    assert not cache.cacheable("compile", {"ok": False, "error": {"stage": "timeout"}})
    assert cache.cacheable("compile", {"ok": False, "error": {"stage": "nvcc"}})
    assert not cache.cacheable("run", {"ok": True, "error": None})


def test_an_answers_texts_are_cut_where_no_kernel_reaches_and_a_reports_bytes_are_not():
    from playground.engine.profile import REPORT_LIMIT
    from playground.jobs import limits
    from playground.jobs.job import bound_answer
    MiB = 2**20
    answer = {"ok": True, "cuda": "c" * (3 * MiB), "ptx": "p" * MiB, "report_b64": "r" * (20 * MiB),
              "error": {"stage": "nvcc", "message": "m" * (2 * MiB), "log": "l" * (5 * MiB)},
              "passes": [{"ir": "i" * (4 * MiB)}], "line_map": [1, None, 3]}
    cut = bound_answer(answer)
    assert len(cut["cuda"]) == limits.TEXT_CAPS["cuda"] and cut["cuda"].endswith("(cut at 1 MiB)\n")
    assert cut["ptx"] == answer["ptx"], "a text under its cap is whole"
    assert cut["report_b64"] is answer["report_b64"], "a file's bytes are not text to cut"
    assert cut["error"]["log"].endswith("(cut at 1 MiB)\n") and cut["error"]["message"].endswith("(cut at 1 MiB)\n")
    assert len(cut["passes"][0]["ir"]) == limits.OTHER_TEXT_CAP and cut["line_map"] == [1, None, 3]
    assert bound_answer(cut) == cut, "what is cut is not cut again"
    # A profile's answer carries its Nsight Compute report (base64) on top of the answer limit.
    assert limits.answer_bytes(Settings(), "profile") >= Settings().result_bytes + (REPORT_LIMIT + 2) // 3 * 4
    assert limits.answer_bytes(Settings(), "compile") == Settings().result_bytes


def test_removing_a_job_folder_touches_nothing_outside_it(tmp_path):
    """The folder of job folders must stay passable (0711) for the job uids: removing a leftover that another
    process removed first, or one with a locked subfolder, leaves its mode alone."""
    base = tmp_path / "jobs"
    base.mkdir(mode=0o711)
    base.chmod(0o711)
    sandbox.remove_job_dir(base / "server-1")  # already gone
    job = base / "server-2" / "job-x"
    (job / "locked").mkdir(parents=True)
    (job / "locked" / "f").write_text("x")
    (job / "locked").chmod(0)
    sandbox.remove_job_dir(base / "server-2")
    assert not (base / "server-2").exists()
    assert base.stat().st_mode & 0o777 == 0o711


def test_job_environment_is_cleared():
    server_env = {**os.environ, "PLAYGROUND_PASSWORD": "hunter2", "PLAYGROUND_PASSWORD_FILE": "/run/secrets/pw",
                  "AWS_SECRET_ACCESS_KEY": "x", "PLAYGROUND_PROCESSES": "77"}
    env = sandbox.job_env("/job", None, None, Settings.from_env(server_env))
    assert not {"PLAYGROUND_PASSWORD", "PLAYGROUND_PASSWORD_FILE", "AWS_SECRET_ACCESS_KEY"} & set(env)
    assert env["HOME"] == "/job"
    assert env["TILELANG_CACHE_DIR"] == "/job/tilelang-cache" and env["CUDA_VISIBLE_DEVICES"] == ""
    job = Settings.from_env(env)  # what the job's worker reads back
    assert job.processes == 77 and str(job.cache_dir) == "/job/cache" and job.password is None
    assert str(job.data_dir) == "/job/data", "the server's data folder (the class's database) is not the job's"
    assert set(env) <= {"PATH", "HOME", "TMPDIR", "USER", "LOGNAME", "PYTHONPATH", "PYTHONUNBUFFERED", "LANG",
                        "PYTHONDONTWRITEBYTECODE", "PLAYGROUND_CACHE_DIR", "PLAYGROUND_DATA", "PLAYGROUND_PROCESSES",
                        "PLAYGROUND_THREADS", "PLAYGROUND_NO_GPU", "PLAYGROUND_FILE_SIZE", "PLAYGROUND_OPEN_FILES",
                        "PLAYGROUND_COMPILE_ADDRESS_SPACE", "OMP_NUM_THREADS", "MKL_NUM_THREADS",
                        "OPENBLAS_NUM_THREADS", "TVM_NUM_THREADS", "TZ",
                        "LC_ALL", "LD_LIBRARY_PATH", "CUDA_DEVICE_ORDER"} | \
        {k for k in env if k.startswith(("TILELANG_", "CUDA_", "NVIDIA_", "NVCC_"))}


# -- run_job end to end ---------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def server():
    jobs.start()
    yield runner.state()
    jobs.shutdown()


def test_health_says_how_jobs_run(server):
    h = jobs.health()
    assert h["ok"] is True and h["sandbox"] in ("bwrap", "none") and h["sandbox_why"]
    assert set(h["queue"]) >= {"cpu", "gpu", "limit"} and "gpu" in h
    json.dumps(h)


def test_compile_then_the_warm_path_answers_in_under_a_second(server):
    server.cache.clear()
    progress = []
    cold = jobs.run_job("compile", "vector_add", VECTOR_ADD, {"threads": 128}, session="warm",
                        on_progress=lambda w, f: progress.append(w))
    assert cold["ok"], cold["error"]
    assert cold["resources"]["registers"] and not cold.get("cached")
    start = time.monotonic()
    warm = jobs.run_job("compile", "vector_add", VECTOR_ADD, {"threads": 128}, session="warm")
    assert time.monotonic() - start < 1.0 and warm["cached"] and warm["cuda"] == cold["cuda"]


def test_the_same_compile_requested_at_once_runs_once(server):
    server.cache.clear()
    pool = server.backend.pools[("cpu", None)]
    taken = pool.taken
    results = []
    threads = [threading.Thread(target=lambda i=i: results.append(jobs.run_job(
        "compile", "vector_add", VECTOR_ADD, {"threads": 512}, session=f"class-{i}"))) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    assert len(results) == 4 and all(r["ok"] for r in results)
    assert pool.taken == taken + 1, "four students opening the same kernel cost one compile"
    assert sum(bool(r.get("cached")) for r in results) == 3
    # those that waited for the compile say so (for them it was a compile, not a look-up)
    assert any(r.get("waited_s", 0) > 0 for r in results if r.get("cached")), [r.get("waited_s") for r in results]
    assert not any("waited_s" in r for r in results if not r.get("cached"))


def test_requests_waiting_for_the_same_compile_count_against_the_students_cap(server):
    # A student's slow compile, then more copies of it than their cap: each copy waits for the first one's answer
    # in place (no slot), and still counts as one of their jobs in flight, so the copies past the cap are turned
    # away at once instead of each holding a place in the page's queue.
    slow = with_import("import time\ntime.sleep(60)")
    progress, results = [], []

    def ask(record=None):
        results.append(jobs.run_job("compile", "vector_add", slow, {}, session="hog", owner="hog-tab", timeout=90,
                                    on_progress=(lambda what, _: record.append(what)) if record is not None
                                    else None))
    first = threading.Thread(target=ask, args=(progress,))
    first.start()
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and not (progress and progress[-1].startswith("importing")):
        time.sleep(0.1)
    copies = [threading.Thread(target=ask) for _ in range(server.scheduler.session_inflight + 1)]
    for t in copies:
        t.start()
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and len(results) < 2:
        time.sleep(0.1)
    busy = [r for r in results if (r.get("error") or {}).get("stage") == "busy"]
    assert len(busy) == 2, results  # the cap of 3: the running compile and two copies waiting for it
    assert "jobs running or waiting" in busy[0]["error"]["message"]
    jobs.stop("hog-tab")
    for t in [first] + copies:
        t.join(30)
    assert len(results) == len(copies) + 1
    assert server.scheduler.inflight["hog"] == 0, "a copy that waited is no longer counted once it is answered"


def test_the_job_sees_no_secret_and_no_gpu_and_its_own_folder(server):
    text = with_import("import os, json\nraise RuntimeError(json.dumps({'env': [k for k in os.environ if "
                       "'PASSWORD' in k], 'cwd': os.getcwd(), 'uid': os.getuid(), 'home': os.environ['HOME']}))")
    r = jobs.run_job("compile", "vector_add", text, {}, session="env")
    seen = json.loads(r["error"]["message"].split("RuntimeError: ", 1)[1])
    assert seen["env"] == [] and seen["cwd"] == seen["home"]
    if server.backend.mode.kind == "bwrap":
        assert seen["cwd"] == "/job"
    if os.geteuid() == 0 and sandbox.use_job_uids():
        assert seen["uid"] >= current().job_uid_base, "jobs of a root server run as a uid of their own"


def test_stop_kills_the_tabs_running_job_and_leaves_another_tabs_alone(server):
    results, progress = {}, {"tab-1": [], "tab-2": []}

    def start(owner):
        looping = with_import(f"# {owner}\nwhile True:\n    pass")  # two sources: two compiles, not one shared
        def body():
            results[owner] = jobs.run_job("compile", "vector_add", looping, {}, session="same-address", timeout=60,
                                          owner=owner, on_progress=lambda what, _: progress[owner].append(what))
        t = threading.Thread(target=body)
        t.start()
        return t

    first, second = start("tab-1"), start("tab-2")  # two tabs behind one address: one `session`, two owners
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and not all(p and p[-1].startswith("importing") for p in progress.values()):
        time.sleep(0.1)
    assert jobs.stop("tab-1")["killed"] == 1, (progress, results)
    first.join(10)
    assert results["tab-1"]["error"]["stage"] == "stopped", results["tab-1"]["error"]
    assert second.is_alive() and "tab-2" not in results  # the other tab's job runs on
    assert jobs.stop("tab-2")["killed"] == 1
    second.join(10)
    assert results["tab-2"]["error"]["stage"] == "stopped"
    assert jobs.stop("tab-1") == {"killed": 0, "left": 0, "waiting": 0}  # nothing left running
    # a job the tab starts after its stop runs as usual
    late = jobs.run_job("compile", "vector_add", VECTOR_ADD, {"threads": 64}, owner="tab-1", session="later")
    assert late["ok"], late["error"]


def test_timeout_kills_children_and_escaped_grandchildren(server):
    text = with_import("import subprocess, os\nsubprocess.Popen(['sleep', '300'])\n"
                       "subprocess.Popen(['setsid', 'sleep', '301'], start_new_session=True)\n"
                       "while True:\n    pass")
    start, progress = time.monotonic(), []
    r = jobs.run_job("compile", "vector_add", text, {}, session="kids", timeout=8,
                     on_progress=lambda what, _: progress.append(what))
    assert r["error"]["stage"] == "timeout" and time.monotonic() - start < 20, r["error"]
    assert progress[-1].startswith("importing"), progress  # the page shows where it hangs: the file's top level
    time.sleep(0.5)
    left = [p for p in psutil.process_iter(["cmdline"]) if p.info["cmdline"] and
            p.info["cmdline"][:2] in (["sleep", "300"], ["setsid", "sleep"], ["sleep", "301"])]
    if server.backend.mode.kind == "none" and not sandbox.use_job_uids():
        # Unsandboxed and without a uid of its own, a grandchild in a session of its own escapes the job's process
        # tree: a known limit of the fallback (health() says jobs are not sandboxed). Clean it up here.
        escaped = [p for p in left if p.info["cmdline"][:2] == ["sleep", "301"]]
        for p in escaped:
            p.kill()
        left = [p for p in left if p not in escaped]
    assert not left, left


def test_run_without_a_gpu_says_so_at_once(server):
    if server.gpus:
        pytest.skip("this machine has a GPU")
    start = time.monotonic()
    r = jobs.run_job("run", "vector_add", None, {}, session="nogpu")
    assert r["error"]["stage"] == "device" and "no CUDA GPU" in r["error"]["message"]
    assert time.monotonic() - start < 1


def test_bad_requests_are_answers_not_exceptions(server):
    assert jobs.run_job("explode", "gemm", None, {})["error"]["stage"] == "parameters"
    assert jobs.run_job("compile", "gemm", 42, {})["error"]["stage"] == "parameters"
    assert jobs.run_job("compile", "gemm", None, {"x": object()})["error"]["stage"] == "parameters"
    r = jobs.run_job("compile", "no_such_kernel", None, {}, session="bad")
    assert r["ok"] is False and r["error"]["stage"] == "parameters"


def test_gpu_ceilings_come_only_from_jobs_without_user_code_and_reach_later_jobs(tmp_path):
    class FakeJob:
        def __init__(self, d):
            self.dir, self.uid = d, None
    ceilings = Ceilings()
    jobs_ = [FakeJob(tmp_path / n) for n in "abc"]
    for job, gbps in zip(jobs_, (1, 4243)):
        (job.dir / "cache" / "ceilings").mkdir(parents=True)
        (job.dir / "cache" / "ceilings" / "k.json").write_text(f'{{"copy_gbps": {gbps}}}')
    assert no_user_code("vector_add", None) and no_user_code("vector_add", VECTOR_ADD)
    assert not no_user_code("vector_add", VECTOR_ADD + "# edited\n")
    ok = {"ok": True}
    ceilings.harvest(jobs_[0], {"kernel": "vector_add", "source": VECTOR_ADD + "# edited\n"}, ok)  # user code
    ceilings.harvest(jobs_[0], {"kernel": "vector_add", "source": None}, {"ok": False})  # a failed job
    assert not ceilings.files
    ceilings.harvest(jobs_[1], {"kernel": "vector_add", "source": VECTOR_ADD}, ok)
    later = jobs_[2]
    (later.dir / "cache").mkdir(parents=True)
    ceilings.seed(later)
    assert json.loads((later.dir / "cache" / "ceilings" / "k.json").read_text()) == {"copy_gbps": 4243}


def test_the_local_and_ray_backends_implement_the_one_interface():
    """runner calls a backend only through backend.Backend: both define each method it declares, with the same
    parameters, and set each of its attributes (in the class or in __init__)."""
    import ast
    import inspect
    import textwrap
    from playground.jobs.backend import Backend
    from playground.jobs.local_backend import LocalBackend
    from playground.jobs.ray_backend import RayBackend
    methods = {n for n, v in vars(Backend).items() if inspect.isfunction(v) and not n.startswith("_")}
    attributes = set(Backend.__annotations__)
    assert methods == {"refused", "start", "run", "idle", "health", "shutdown"}
    assert attributes == {"name", "mode", "gpus", "cpu_slots"}
    for backend in (LocalBackend, RayBackend):
        for name in methods:
            assert inspect.signature(vars(backend)[name]) == inspect.signature(vars(Backend)[name]), \
                (backend.__name__, name)
        init = ast.parse(textwrap.dedent(inspect.getsource(backend.__init__)))
        set_in_init = {t.attr for node in ast.walk(init) if isinstance(node, ast.Assign) for t in node.targets
                       if isinstance(t, ast.Attribute) and isinstance(t.value, ast.Name) and t.value.id == "self"}
        assert attributes <= set_in_init | set(vars(backend)), (backend.__name__, attributes - set_in_init)


def test_the_servers_tuned_configs_reach_the_job_and_a_new_one_is_not_answered_from_the_cache(server):
    """A tuning run kept by the server decides the tile a later request leaves out, in the sandboxed job too; the
    compile answered from the cache before it was kept is not given for that request afterwards."""
    from playground.engine import config_choice
    table = runner._tuned_table(server)
    kept = table.read_bytes() if table.is_file() else None  # the server's own table, put back afterwards
    table.unlink(missing_ok=True)
    gpu = config_choice.gpu_model()  # the model this machine's jobs look up (NVML's name, else the reference GPU)
    asked = {"N": 3_000_000}
    try:
        before = jobs.run_job("compile", "vector_add", None, asked, session="tuned")
        assert before["ok"] and before["config"]["picked_by"] == "rule", before.get("error") or before["config"]
        assert jobs.run_job("compile", "vector_add", None, asked, session="tuned").get("cached")
        gemm_key = runner._tuned_digest(server, "gemm")
        config_choice.remember("vector_add", {"N": 2**22}, "float16", {"block_N": 16384, "threads": 512}, gpu,
                               0.01, path=table)
        assert runner._tuned_digest(server, "gemm") == gemm_key, "another kernel's cached compiles stay reachable"
        after = jobs.run_job("compile", "vector_add", None, asked, session="tuned")
        assert after["ok"] and not after.get("cached"), "an answer compiled before the tuning run was served"
        assert after["config"]["picked_by"] == "table" and after["config"]["tile"]["block_N"] == 16384
        assert after["config"]["tuned_for"] == f"4194304 on {gpu}"
    finally:
        table.unlink(missing_ok=True)
        if kept is not None:
            table.write_bytes(kept)


def test_the_server_keeps_a_tuning_runs_best_and_the_answer_names_no_server_path(tmp_path):
    from playground.engine import config_choice
    st = type("S", (), {"settings": Settings(data_dir=tmp_path / "data")})()
    stored = {"ok": True, "table": config_choice.USER_TABLE, "gpu": "NVIDIA H200", "kernel": "softmax",
              "problem": {"M": 32768, "N": 1024}, "dtype": "float16", "tile": {"rows_per_block": 4, "threads": 256},
              "median_ms": 0.02, "tuned_for": "32768×1024 on NVIDIA H200"}
    answer = {"ok": True, "best": {"tile": stored["tile"], "stored": dict(stored)}}

    def table():
        return [(e["kernel"], e["problem"], e["tile"], e["median_ms"])
                for e in json.loads(runner._tuned_table(st).read_text())["entries"]]
    # a tuning run of the shipped kernel whose source was edited (user code ran): nothing kept, whatever it says
    runner._keep_tuned_config(st, "softmax", (ROOT / "kernels" / "softmax.py").read_text() + "\n# mine\n",
                              json.loads(json.dumps(answer)))
    assert not runner._tuned_table(st).exists()
    runner._keep_tuned_config(st, "softmax", None, answer)
    assert table() == [("softmax", stored["problem"], stored["tile"], 0.02)]
    assert answer["best"]["stored"]["ok"] and str(tmp_path) not in json.dumps(answer)
    # an answer for another kernel than the one asked, or with a tile that is not plain values, is not kept
    for bad in ({**stored, "kernel": "gemm"}, {**stored, "tile": {"threads": {"nested": 1}}}):
        runner._keep_tuned_config(st, "softmax", None, {"ok": True, "best": {"stored": bad}})
    assert len(table()) == 1
    # the table is the class's: a slower run of the same problem does not replace a faster one; a faster one does
    slower = {**stored, "tile": {"rows_per_block": 1, "threads": 128}, "median_ms": 0.05}
    runner._keep_tuned_config(st, "softmax", None, {"ok": True, "best": {"stored": slower}})
    assert table() == [("softmax", stored["problem"], stored["tile"], 0.02)]
    faster = {**slower, "median_ms": 0.01}
    runner._keep_tuned_config(st, "softmax", None, {"ok": True, "best": {"stored": faster}})
    assert table() == [("softmax", stored["problem"], faster["tile"], 0.01)]


USERNS_CHECK = r'''
import json, os, resource, socket, time
resource.setrlimit(resource.RLIMIT_NPROC, (32, 32))
out = {"uid": os.getuid()}
n = 0
try:
    for i in range(100):
        if os.fork() == 0:
            time.sleep(2)
            os._exit(0)
        n += 1
except OSError:
    out["forks"] = n
try:
    socket.create_connection(("127.0.0.1", PORT), timeout=2)
    out["net"] = "LEAK"
except OSError as e:
    out["net"] = "none"
out["seen"] = [p for p in ["/etc/shadow", REPO + "/Makefile", REPO + "/.git", "/root"] if os.path.exists(p)]
open("/job/x", "w").write("ok")
try:
    open(REPO + "/playground/x", "w")
    out["ro"] = False
except OSError:
    out["ro"] = True
print(json.dumps(out))
'''


@pytest.mark.skipif(os.geteuid() != 0 or not sandbox.shutil.which("bwrap") or not sandbox.shutil.which("setpriv"),
                    reason="needs root (to become an ordinary user), bwrap and setpriv")
def test_the_docker_way_an_ordinary_user_gets_a_user_namespace_sandbox(tmp_path, monkeypatch):
    """The image runs the server as an ordinary user: bwrap then makes a user namespace. Here, as root, the same
    command line is run as nobody, with the system Python (this machine's venv lives under /root)."""
    with socket.socket() as srv:
        srv.bind(("127.0.0.1", 0))
        srv.listen(1)
        monkeypatch.setattr(sandbox, "_readonly_paths",
                            lambda settings=None: ["/usr", "/etc/ld.so.cache", str(ROOT / "playground"),
                                                   str(ROOT / "kernels")])
        job_dir = sandbox.make_job_dir(65534)
        try:
            code = USERNS_CHECK.replace("PORT", str(srv.getsockname()[1])).replace("REPO", repr(str(ROOT)))
            cmd = sandbox.bwrap_command(job_dir, ["/usr/bin/python3", "-c", code], False, privileged=False)
            r = subprocess.run(["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", "--"] + cmd,
                               env=sandbox.job_env("/job", None), capture_output=True, text=True, timeout=60)
            assert r.returncode == 0, r.stderr
            seen = json.loads(r.stdout)
            assert (job_dir / "x").read_text() == "ok"
        finally:
            sandbox.remove_job_dir(job_dir)
    assert seen == {"uid": 65534, "forks": seen["forks"], "net": "none", "seen": [], "ro": True}
    assert seen["forks"] < 32, "RLIMIT_NPROC set inside counts the processes of the job's own namespace"


@contextlib.contextmanager
def own_job_layer(settings: Settings):
    """A job layer of its own (queue, workers, cache), made from `settings`, in place of the module's while it lasts."""
    with runner._state_lock:
        saved, runner._state = runner._state, runner.JobLayer(settings)
        mine = runner._state
    try:
        deadline = time.monotonic() + 300
        while not mine.backend.idle():  # its spare workers ready (a busy machine: minutes)
            assert time.monotonic() < deadline, "the spare workers did not start"
            time.sleep(0.2)
        yield mine
    finally:
        with runner._state_lock:
            runner._state = saved
        mine.close()


@pytest.mark.timeout(600)
def test_one_persons_endless_loops_under_many_names_delay_a_classmate_by_at_most_one_job(server):
    """Three endless-loop compiles (the per-student limit) under each of three names, from one address (a class
    password, no roster), on two CPU slots: a classmate's compile takes the first slot that frees, within one job's
    length (the compile time limit), instead of waiting behind all nine."""
    from playground.jobs.queue import Student
    from test_jobs_hostile import hostile_source
    length = 12.0  # seconds: the compile time limit, so the longest a job holds a slot
    settings = current().replace(cpu_slots=2, spares=3, timeout_compile=length)
    loop = hostile_source("import_loop")
    with own_job_layer(settings) as st:
        attacks = [threading.Thread(target=jobs.run_job, daemon=True, args=("compile", "vector_add",
                                    loop + f"\n# loop {i}\n", {}),
                                    kwargs={"session": Student(f"user:eve{i % 3}", address="203.0.113.9"),
                                            "owner": "eve's tab"}) for i in range(9)]
        for t in attacks:
            t.start()
        deadline = time.monotonic() + 30
        while st.scheduler.snapshot()["cpu"]["waiting"] < 7:
            assert time.monotonic() < deadline, st.scheduler.snapshot()
            time.sleep(0.1)
        asked, started = time.monotonic(), []
        answer = jobs.run_job("compile", "vector_add", VECTOR_ADD + "_cleos = 0\n", {}, timeout=120,
                              session=Student("user:cleo", address="198.51.100.4"),
                              on_progress=lambda what, _: started.append(time.monotonic()) if what == "starting" else 0)
        jobs.stop("eve's tab")
        for t in attacks:
            t.join(60)
    assert started, answer.get("error")
    assert started[0] - asked < length, f"the classmate's compile waited {started[0] - asked:.0f} s for a slot"
    assert answer["ok"], answer["error"]


# A server in a container started without the README's two --security-opt flags: Docker's default system call
# filter refuses the namespaces bubblewrap makes each job's sandbox of (unshare, mount, clone with a namespace flag).
# The same refusal, made by the kernel for the whole server process, before it starts the page and its job layer.
WITHOUT_NAMESPACES = r"""
import errno, pyseccomp as seccomp
from playground.jobs.sandbox import CLONE_NEW_FLAGS
f = seccomp.SyscallFilter(defaction=seccomp.ALLOW)
for name in ("unshare", "setns", "mount", "umount2", "pivot_root"):
    f.add_rule(seccomp.ERRNO(errno.EPERM), name)
for bit in range(32):
    if CLONE_NEW_FLAGS & (1 << bit):
        f.add_rule(seccomp.ERRNO(errno.EPERM), "clone", seccomp.Arg(0, seccomp.MASKED_EQ, 1 << bit, 1 << bit))
f.add_rule(seccomp.ERRNO(errno.ENOSYS), "clone3")
f.load()
"""
SERVE_AND_COMPILE = r"""
import json, socket, sys, httpx
from playground import jobs
from playground.settings import Settings
from playground.ui import gateway, serve, views
settings = Settings.from_env().install()
with socket.socket() as s:
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
demo, _, _ = serve("127.0.0.1", port, "class-pw", prevent_thread_lock=True, quiet=True, settings=settings)
marker = "/tmp/playground-unsandboxed-" + str(port)
text = open("kernels/vector_add.py").read().replace("import tilelang.language as T\n",
    "import tilelang.language as T\nopen(" + repr(marker) + ", 'w').write('a job wrote the server machine')\n", 1)
answer = jobs.run_job("compile", "vector_add", text, {}, session="student")
health = httpx.get(f"http://127.0.0.1:{port}/health", timeout=60)
import os
wrote = os.path.exists(marker)
if wrote:
    os.unlink(marker)
print("RESULT" + json.dumps({"answer": {k: answer.get(k) for k in ("ok", "error")}, "health": health.json(),
                             "status": health.status_code, "details": gateway.health(),
                             "banner": views.banner_html(gateway.health()), "wrote": wrote}))
demo.close()
jobs.shutdown()
"""


SANDBOX_SETTINGS = {"sandbox-wanted": None, "PLAYGROUND_SANDBOX=none": "none"}


@pytest.fixture(scope="module")
def servers_without_namespaces(tmp_path_factory):
    """The two servers of the test below, started at once (each a process of its own that imports, starts its
    spares and compiles: half the wall time of one after the other). {setting id: its stdout, stderr}."""
    if not sandbox.shutil.which("bwrap"):
        pytest.skip("needs bubblewrap, to see it refused")
    procs = {}
    for name, setting in SANDBOX_SETTINGS.items():
        env = {k: v for k, v in os.environ.items() if not k.startswith("PLAYGROUND_SANDBOX")}
        env["PLAYGROUND_JOBS_DIR"] = str(tmp_path_factory.mktemp("jobs"))
        env["PLAYGROUND_DATA"] = str(tmp_path_factory.mktemp("data"))  # a class database each, not one shared
        if setting:
            env["PLAYGROUND_SANDBOX"] = setting
        procs[name] = subprocess.Popen([sys.executable, "-c", WITHOUT_NAMESPACES + SERVE_AND_COMPILE], cwd=ROOT,
                                       env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        return {name: proc.communicate(timeout=500) for name, proc in procs.items()}
    finally:
        for proc in procs.values():
            if proc.poll() is None:
                proc.kill()
                proc.communicate()


@pytest.mark.timeout(600)
@pytest.mark.parametrize("setting", list(SANDBOX_SETTINGS.values()), ids=list(SANDBOX_SETTINGS))
def test_a_server_that_cannot_make_the_sandbox_runs_no_job_unless_told_to_and_says_so(setting,
                                                                                       servers_without_namespaces):
    stdout, stderr = servers_without_namespaces["PLAYGROUND_SANDBOX=none" if setting else "sandbox-wanted"]
    proc = subprocess.CompletedProcess([], 0, stdout, stderr)
    assert "RESULT" in proc.stdout, proc.stderr[-3000:]
    seen = json.loads(proc.stdout.split("RESULT", 1)[1].splitlines()[0])
    # health: GET /health without a login (the class has a password); details: what a logged-in user's says
    answer, health, details, banner = seen["answer"], seen["health"], seen["details"], seen["banner"]
    assert details["sandbox"] == "none"
    if setting is None:  # the sandbox was wanted: no job runs, and the answer, /health and the page say why and how
        assert not answer["ok"] and not seen["wrote"], "user code ran without the sandbox"
        message = answer["error"]["message"]
        for what in (message, details["sandbox_why"], health["jobs_refused"], banner):
            assert "no job runs on this server" in what and "--security-opt" in what, what
            assert "PLAYGROUND_SANDBOX=none" in what, what
        assert "bwrap" in message, "the cause, as bubblewrap said it"
        assert seen["status"] == 503 and health["ok"] is False and details["jobs"] == "refused"
        assert set(health) == {"ok", "jobs_refused"}, "without a login, only up or down, and why no job runs"
        assert "NO JOB RUNS" in proc.stderr, "the start-up log says so too"
    else:  # the admin chose to run jobs without the sandbox: they run, and everything says they are not sandboxed
        assert answer["ok"] or answer["error"]["stage"] != "internal", answer["error"]
        assert seen["wrote"], "the job ran, unsandboxed, as the admin asked"
        assert seen["status"] == 200 and health == {"ok": True} and details["jobs"] == "run"
        assert "PLAYGROUND_SANDBOX=none" in details["sandbox_why"] and "not sandboxed" in banner
        assert "JOBS ARE NOT SANDBOXED" in proc.stderr


def test_closing_a_pool_waits_for_a_spare_being_started_and_removes_it():
    # At shutdown a fill thread may be half-way through starting a spare; as a daemon thread it would be stopped at
    # interpreter exit with the spare's folder still there. close() must wait for it, and it must close itself.
    from playground.jobs.pool import Pool
    removed, starting = threading.Event(), threading.Event()

    class StartedSpare:  # stands for a Job whose start the pool cannot see into; only close() matters here
        def close(self):
            removed.set()

    def slow_spawn():
        starting.set()
        time.sleep(0.5)
        return StartedSpare()

    pool = Pool(gpu=False, size=1)
    pool._spawn = slow_spawn
    filler = threading.Thread(target=pool.fill, daemon=True)
    filler.start()
    assert starting.wait(5)
    pool.close()
    assert removed.is_set(), "close() returned before the spare that was starting was removed"
    assert pool.spares == [] and pool.pending == 0


# -- the GPUs, from NVML ------------------------------------------------------------------------------------------
def test_nvml_answers_no_gpu_cleanly_without_a_driver_and_the_settings_pick_the_visible_gpus():
    from conftest import has_gpu
    from playground.engine import gpus
    from playground.jobs import hardware
    if not has_gpu():  # no driver here: NVMLError_LibraryNotFound (or no nvidia-ml-py) must read as "no GPU"
        assert gpus.list_gpus() == [] and gpus.state() == {} and gpus.first_gpu_name() is None
        assert hardware.gpus(Settings()) == [] and hardware.default_arch(Settings()) == "sm_90a"
    four = [{"index": i, "name": "GPU", "arch": "sm_90a", "memory_mib": 1} for i in range(4)]
    assert hardware.visible(four, Settings(no_gpu=True)) == []
    assert [g["index"] for g in hardware.visible(four, Settings(inherited=(("CUDA_VISIBLE_DEVICES", "1,3"),)))] \
        == [1, 3]
    assert gpus.arch_of(9, 0) == "sm_90a" and gpus.arch_of(8, 0) == "sm_80" and gpus.arch_of(12, 0) == "sm_120"


def test_a_source_over_the_size_limit_is_refused_before_any_job_starts():
    from playground.engine.source import SOURCE_LIMIT
    r = jobs.run_job("compile", "vector_add", "#" * (SOURCE_LIMIT + 1), {}, session="big")
    assert not r["ok"] and r["error"]["stage"] == "python"  # a file's problem, as the engine's own check says
    assert f"{SOURCE_LIMIT // 1024} KiB" in r["error"]["message"]


READ_BOUNDS = '''import json, os, resource
bounds = {name: resource.getrlimit(getattr(resource, "RLIMIT_" + name))[0]
          for name in ("FSIZE", "NOFILE", "CORE", "AS")}
raise SystemExit("BOUNDS" + json.dumps({**bounds, "nice": os.nice(0)}))'''


@pytest.mark.parametrize("gpu", [False, True], ids=["compile job", "gpu job"])
def test_a_job_starts_by_exec_alone_and_its_worker_sets_every_bound_before_user_code(gpu, tmp_path):
    # The server has many threads: a child forked from it that runs Python before its exec (a preexec_fn) can hang
    # there. A hook run in every forked child that runs Python tells whether starting a job made one.
    import resource
    from playground.jobs import limits
    from playground.jobs.job import Job
    forked_python = tmp_path / "python-ran-in-a-forked-child"
    armed = [True]
    os.register_at_fork(after_in_child=lambda: armed[0] and forked_python.write_text(str(os.getpid())))
    # Bounds other than the defaults: the server's settings, not the worker's own defaults, must reach the job
    settings = current().replace(file_size=123 * 4096, open_files=321, compile_address_space=7 * 2**30)
    core = resource.getrlimit(resource.RLIMIT_CORE)  # a server allowed core files: the job still writes none
    resource.setrlimit(resource.RLIMIT_CORE, (min(2**20, core[1]) if core[1] != resource.RLIM_INFINITY else 2**20,
                                              core[1]))
    try:
        job = Job(gpu, None, settings)
    finally:
        armed[0] = False
        resource.setrlimit(resource.RLIMIT_CORE, core)
    try:
        assert job.wait_ready(settings.ready_timeout), job.log()
        result = job.run({"action": "compile", "kernel": "vector_add", "source": with_import(READ_BOUNDS),
                          "params": {}, "arch": "sm_90a", "options": {}}, 60, lambda *_: None)
    finally:
        job.close()
    assert not forked_python.exists(), "starting the job ran Python in a forked copy of the server"
    message = result["error"]["message"]
    assert "BOUNDS" in message, result["error"]
    seen = json.loads(message.split("BOUNDS", 1)[1].split("}", 1)[0] + "}")
    assert seen["CORE"] == 0 and seen["nice"] == (0 if gpu else limits.COMPILE_NICE), seen
    for name, value in (("FSIZE", settings.file_size), ("NOFILE", settings.open_files),
                        ("AS", None if gpu else settings.compile_address_space)):
        # the job's hard limit is this process's, inherited; a GPU job has no address-space bound (CUDA maps more
        # than all GPU memory)
        soft, hard = resource.getrlimit(getattr(resource, "RLIMIT_" + name))
        expected = soft if value is None else value if hard == resource.RLIM_INFINITY else min(value, hard)
        assert seen[name] == expected, (name, seen)
