"""The hostile and broken corpus (tests/hostile/*.py) through run_job, as a student's edited kernel would go.

Each file is a harm put into today's kernels/vector_add.py (see hostile_source), done at import time, in the factory,
in the kernel or in making the inputs, and says on its second line what must come back (# EXPECT: stage=...; message=<regex>; line=<text of the line>). For each: a clear error in
bounded time, nothing changed outside the job, no process or folder of the job left, and the next job succeeds (the
next kernel's own error, and a fresh compile after the last).

What must be unreadable to a job (bwrap mode): /etc/shadow, /root, other processes' environment, the repository
except playground/ and kernels/ (so .git, tests/, app.py, the Makefile), other jobs' folders, the server's job
root. Readable (read-only): /usr, the Python installation, the virtualenv, playground/, kernels/.
"""
import errno
import fcntl
import json
import os
import re
import socket
import threading
import time
from pathlib import Path

import psutil
import pytest

from conftest import ROOT
from playground import jobs
from playground.jobs import runner, sandbox

HOSTILE = ROOT / "tests" / "hostile"
NAMES = sorted(p.stem for p in HOSTILE.glob("*.py") if not p.stem.startswith("gpu_"))
GPU_NAMES = sorted(p.stem for p in HOSTILE.glob("gpu_*.py"))  # run in tests/test_jobs_gpu.py
ISOLATION = {"open_socket", "read_outside", "read_other_job", "os_system"}  # need the bwrap sandbox
TIMEOUT = 20.0  # the job timeout given to each hostile job
BOUND = 45.0    # seconds any hostile job may take, end to end, including waiting for a spare worker


def expectation(path: Path) -> dict:
    line = next(ln for ln in path.read_text().splitlines() if ln.startswith("# EXPECT:"))
    return dict(part.strip().split("=", 1) for part in line.removeprefix("# EXPECT:").split(";"))


def hostile_source(name: str) -> str:
    """The kernel file a hostile student would send: today's kernels/vector_add.py with the corpus file's harm in it,
    so the corpus follows the kernel as it changes. A corpus file holds its # HOSTILE / # EXPECT header and either
    - a snippet of Python, which goes in right after the kernel's imports (harm done at import time), or
    - edits: `# AFTER: <a whole line of the kernel>` followed by the lines to insert after it, as they are to
      stand there, or `# REPLACE: <a whole line>` and `# WITH: <the line to put instead>`.
    A line named by an edit must be in the kernel exactly once: if the kernel changes under it, this fails loudly."""
    text = (HOSTILE / f"{name}.py").read_text()
    lines = text.splitlines(keepends=True)
    header = "".join(ln for ln in lines if ln.startswith(("# HOSTILE", "# EXPECT")))
    body = [ln for ln in lines if not ln.startswith(("# HOSTILE", "# EXPECT", "# ("))]
    kernel = (ROOT / "kernels" / "vector_add.py").read_text()
    if not any(ln.startswith(("# AFTER: ", "# REPLACE: ")) for ln in body):
        anchor = "import tilelang.language as T\n"
        assert kernel.count(anchor) == 1
        return header + kernel.replace(anchor, anchor + "\n" + "".join(body), 1)
    out = kernel.splitlines(keepends=True)

    def find(line: str) -> int:
        hits = [i for i, ln in enumerate(out) if ln.rstrip("\n") == line]
        assert len(hits) == 1, f"{name}: the line {line!r} is in kernels/vector_add.py {len(hits)} times, not once"
        return hits[0]
    i = 0
    while i < len(body):
        ln = body[i].rstrip("\n")
        if ln.startswith("# AFTER: "):
            block = []
            i += 1
            while i < len(body) and not body[i].startswith(("# AFTER: ", "# REPLACE: ")):
                block.append(body[i])
                i += 1
            at = find(ln.removeprefix("# AFTER: "))
            out[at + 1:at + 1] = block
        elif ln.startswith("# REPLACE: "):
            assert i + 1 < len(body) and body[i + 1].startswith("# WITH: "), f"{name}: # REPLACE needs a # WITH"
            out[find(ln.removeprefix("# REPLACE: "))] = body[i + 1].removeprefix("# WITH: ").rstrip("\n") + "\n"
            i += 2
        else:
            assert not ln.strip(), f"{name}: a line outside any edit: {ln!r}"
            i += 1
    return header + "".join(out)


def line_of(text: str, needle: str) -> int:
    return next(i for i, t in enumerate(text.splitlines(), 1) if needle in t and not t.startswith("#"))


@pytest.fixture(scope="module")
def server():
    jobs.start()
    yield runner.state()
    jobs.shutdown()


def settle(st, timeout=90.0):
    """Wait until the spare workers are all started and ready, so that what is left can be counted."""
    deadline = time.monotonic() + timeout
    while not st.backend.idle():
        assert time.monotonic() < deadline, "the spare workers did not settle"
        time.sleep(0.2)


def leftovers(st) -> dict:
    """Processes and folders of this server's finished jobs: its descendants and the processes of the job uids it
    gave out, its job folders, files of its job uids in /tmp; less its current spares. Another server's on this
    machine (a developer's app, a test run beside this one) are not counted."""
    spares = set().union(*(p.pids() for p in st.backend.pools.values()))
    spare_dirs = {j.dir for p in st.backend.pools.values() for j in p.spares}
    procs = set()
    me = psutil.Process()
    for p in me.children(recursive=True):
        # The test process's own helper (multiprocessing's resource tracker, started by an in-process engine
        # test's compile pool) is not a job's; one started inside a job would have a worker as its parent.
        if p.ppid() == me.pid and "multiprocessing.resource_tracker" in " ".join(_cmdline(p)):
            continue
        procs.add(p)
    for p in psutil.process_iter(["uids"]):
        if _ours(p.info["uids"].real):  # (a process that left the job's tree, possible without bwrap)
            procs.add(p)
    alive = []
    for p in procs:
        try:
            if p.pid not in spares and p.status() != psutil.STATUS_ZOMBIE:
                alive.append(" ".join(p.cmdline())[:120])
        except psutil.Error:
            pass
    dirs = [d for d in sandbox.jobs_root().iterdir() if d not in spare_dirs]
    tmp_owned = [str(p) for p in Path("/tmp").iterdir() if _owned_by_job_uid(p)] + \
                [str(p) for p in (Path("/tmp/PWNED_HOST"), Path("/var/tmp/PWNED_HOST"), ROOT / "PWNED") if p.exists()]
    return {"processes": alive, "job_dirs": [str(d) for d in dirs], "files": tmp_owned}


def _cmdline(p) -> list[str]:
    try:
        return p.cmdline()
    except psutil.Error:
        return []


def _ours(uid: int) -> bool:
    """A job uid this server gave out, not held now by another server (which took it after this one's job ended)."""
    return uid in sandbox.uid_pool().given and not held_elsewhere(uid)


def held_elsewhere(uid: int) -> bool:
    """Another server on this machine (a developer's app, a parallel test run) holds this job uid now."""
    if uid in sandbox.uid_pool().held:
        return False
    path = sandbox.uid_lock_folder() / str(uid)
    try:
        fd = os.open(path, os.O_RDWR)
    except OSError:
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        return False
    except OSError:
        return True
    finally:
        os.close(fd)


def _owned_by_job_uid(p: Path) -> bool:
    try:
        uid = p.lstat().st_uid
    except OSError:
        return False
    return _ours(uid)


@pytest.fixture
def listener():
    """A TCP server on the host's loopback: a sandboxed job must not reach it."""
    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen(8)
    srv.settimeout(0.2)
    accepted = []
    stop = threading.Event()

    def serve():
        while not stop.is_set():
            try:
                conn, _ = srv.accept()
                accepted.append(conn)
            except OSError:
                pass
    t = threading.Thread(target=serve, daemon=True)
    t.start()
    yield srv.getsockname()[1], accepted
    stop.set()
    t.join()
    srv.close()


def start_other_job(st):
    """A live job with a secret in its folder; returns its host folder and a function that ends it."""
    text = (ROOT / "kernels" / "vector_add.py").read_text().replace(
        "import tilelang.language as T\n",
        "import tilelang.language as T\nimport os, time\nopen('secret.txt', 'w').write('s3cret')\n"
        "while not os.path.exists('stop'):\n    time.sleep(0.1)\nraise RuntimeError('stopped')\n", 1)
    done = {}
    t = threading.Thread(target=lambda: done.setdefault("r", jobs.run_job("compile", "vector_add", text, {},
                                                                         session="other", timeout=60)))
    t.start()
    deadline = time.monotonic() + 60
    while True:
        found = [d for d in sandbox.jobs_root().iterdir() if (d / "secret.txt").exists()]
        if found:
            break
        assert time.monotonic() < deadline, "the other job did not start"
        time.sleep(0.1)

    def end():
        assert t.is_alive(), f"the other job ended early: {done.get('r', {}).get('error')}"
        (found[0] / "stop").touch()
        t.join(60)
        return done.get("r")
    return found[0], end


@pytest.mark.timeout(300)
@pytest.mark.parametrize("name", NAMES)
def test_hostile_kernel_ends_its_own_job_only(name, server, listener):
    st = server
    if name in ISOLATION and st.backend.mode.kind != "bwrap":
        pytest.skip(f"jobs are not sandboxed here ({st.backend.mode.why})")
    path = HOSTILE / f"{name}.py"
    expect = expectation(path)
    text = hostile_source(name).replace("PORT = 47613", f"PORT = {listener[0]}")
    end_other = None
    settle(st)
    if name == "read_other_job":
        other, end_other = start_other_job(st)
        text = text.replace("/nonexistent/other-job", str(other))

    started = time.monotonic()
    result = jobs.run_job("compile", "vector_add", text, {}, session=f"hostile-{name}", timeout=TIMEOUT)
    elapsed = time.monotonic() - started
    if end_other:
        assert end_other()["error"]["message"].endswith("stopped"), "the other job was disturbed"

    err = result["error"]
    assert not result["ok"] and err, result
    assert err["stage"] == expect["stage"], err
    assert re.search(expect["message"], err["message"]), err["message"]
    assert "LEAK" not in err["message"] + err.get("log", "")
    if "line" in expect:
        assert err["line"] == line_of(text, expect["line"]), err
    assert elapsed < (TIMEOUT + 10 if expect.get("within") == "timeout" else BOUND), elapsed
    assert not listener[1], "the job reached a server on the host's loopback"

    settle(st)
    assert leftovers(st) == {"processes": [], "job_dirs": [], "files": []}
    # The next job is the next hostile kernel's, whose own expected error (not the job layer's "internal") says the
    # server still works; after the last of them, test_after_the_whole_corpus_a_fresh_compile_succeeds.


def test_after_the_whole_corpus_a_fresh_compile_succeeds(server):
    """Runs after every hostile kernel above (pytest keeps a file's order): nothing they did broke compiling."""
    server.cache.clear()  # the job really runs: lowering, nvcc and ptxas
    after = jobs.run_job("compile", "vector_add", None, {}, session="after-the-corpus")
    assert after["ok"] and not after.get("cached"), after.get("error")
    assert "uint4" in after["cuda"] or "ld.global" in after["ptx"]


@pytest.mark.parametrize("name", GPU_NAMES)
def test_gpu_corpus_compiles_here_so_the_gpu_run_tests_its_harm(name, server):
    """The GPU corpus does its harm only on a GPU; here it must at least compile, harm included."""
    text = hostile_source(name)
    r = jobs.run_job("compile", "vector_add", text, {"N": 2**20}, session=f"gpu-corpus-{name}")
    assert r["ok"], r["error"]
    marker = {"gpu_hang": "while (1)", "gpu_oob_write": "1099511627776", "gpu_memory_bomb": ""}[name]
    assert marker in r["cuda"]


OTHER_SERVER = """
import pathlib, sys, time
from playground import jobs
from playground.jobs import runner
jobs.start()
while not runner.state().backend.idle():
    time.sleep(0.2)
pathlib.Path(sys.argv[1]).write_text("ready")
while pathlib.Path(sys.argv[1]).exists():
    time.sleep(0.2)
jobs.shutdown()
"""


@pytest.mark.timeout(300)
def test_the_leftover_count_is_of_this_servers_jobs_only(server, tmp_path):
    """Another server on the machine (a developer's app, a second test run), not started by this one: its workers,
    with job uids of their own, are not this server's leftovers."""
    import subprocess
    import sys
    ready = tmp_path / "ready"
    env = {**os.environ, "PLAYGROUND_JOBS_DIR": str(tmp_path / "other-jobs")}
    # setsid -f: the other server is nobody's child here, as one started from another shell would be.
    subprocess.run(["setsid", "-f", sys.executable, "-c", OTHER_SERVER, str(ready)], cwd=ROOT, env=env, check=True)
    try:
        deadline = time.monotonic() + 240
        while not ready.exists():
            assert time.monotonic() < deadline, "the other server did not start"
            time.sleep(0.2)
        other = next(p for p in psutil.process_iter(["cmdline"]) if str(ready) in (p.info["cmdline"] or []))
        assert other.ppid() != os.getpid() and other not in psutil.Process().children(recursive=True)
        assert any("playground.jobs.worker" in " ".join(_cmdline(p)) for p in other.children(recursive=True)), \
            "the other server's workers are running"
        settle(server)
        assert leftovers(server) == {"processes": [], "job_dirs": [], "files": []}
    finally:
        ready.unlink(missing_ok=True)  # the other server shuts down


# -- values out of range (threat model: "values not range-checked") ------------------------------------------------
SURROGATE_LINE = 3


def with_lone_surrogate() -> str:
    lines = (ROOT / "kernels" / "vector_add.py").read_text().splitlines(keepends=True)
    lines.insert(SURROGATE_LINE - 1, "# pasted from a chat: \ud800\n")
    return "".join(lines)


@pytest.mark.timeout(300)
@pytest.mark.parametrize("kernel,params,arch,source,expect", [
    ("gemm", {"block_M": -1}, None, None, r"block_M=-1 is out of range: block_M is 1 to 65536"),
    ("vector_add", {"N": -5}, None, None, r"N=-5 is out of range: a problem size is 1 to 2147483647"),
    ("vector_add", {"N": 10**12}, None, None, r"N=1000000000000 is out of range: a problem size is 1 to 2147483647"),
    ("vector_add", {}, 123, None, r"arch 123 is not a target: sm_ and a compute capability, one of sm_90a"),
    ("vector_add", {}, None, "surrogate", r"line 3, column 23 holds U\+D800"),
], ids=["block_M=-1", "N=-5", "N=10**12", "arch=123", "lone-surrogate"])
def test_out_of_range_values_get_a_message_naming_the_parameter_and_its_range(server, kernel, params, arch, source,
                                                                             expect):
    text = with_lone_surrogate() if source == "surrogate" else None
    r = jobs.run_job("compile", kernel, text, params, arch=arch, session="ranges")
    err = r["error"]
    assert not r["ok"] and err["stage"] == "parameters", err
    assert re.search(expect, err["message"]), err["message"]
    assert "Traceback" not in err["log"]
    if source == "surrogate":
        assert err["line"] == SURROGATE_LINE


# -- the login's password file (threat model: "an empty password file opens the server") ---------------------------
@pytest.mark.timeout(120)
@pytest.mark.parametrize("content", ["", "\n  \n", None], ids=["empty", "blank-lines", "unreadable"])
def test_an_empty_or_unreadable_password_file_stops_the_server_with_a_clear_message(tmp_path, content):
    import subprocess
    import sys
    path = tmp_path / "pw"
    if content is None:
        path.mkdir()  # a folder where the file should be: unreadable as a file, whoever the server runs as
    else:
        path.write_text(content)
    env = {k: v for k, v in os.environ.items() if not k.startswith("PLAYGROUND_PASSWORD")}
    env["PLAYGROUND_PASSWORD_FILE"] = str(path)
    proc = subprocess.run([sys.executable, str(ROOT / "app.py"), "--host", "127.0.0.1", "--port", "1"], env=env,
                          capture_output=True, text=True, timeout=90)
    assert proc.returncode != 0, proc.stdout
    assert "not started" in proc.stderr and "PLAYGROUND_PASSWORD_FILE" in proc.stderr, proc.stderr
    assert ("is empty" if content is not None else "cannot be read") in proc.stderr, proc.stderr
    assert "TileLang Playground on http" not in proc.stdout


# -- a flood on the answer pipe (threat model: "the answer pipe is unbounded") -------------------------------------
def _status_kib(field: str) -> int:
    line = next(ln for ln in Path("/proc/self/status").read_text().splitlines() if ln.startswith(field + ":"))
    return int(line.split()[1])


@pytest.mark.timeout(300)
def test_a_flood_on_the_answer_pipe_stops_the_job_and_the_server_holds_no_more_than_the_cap(server):
    settle(server)
    cap = server.settings.result_bytes
    before = _status_kib("VmRSS") * 1024
    Path("/proc/self/clear_refs").write_text("5")  # the peak (VmHWM) starts again from now
    started = time.monotonic()
    r = jobs.run_job("compile", "vector_add", hostile_source("answer_flood"), {}, session="flood", timeout=TIMEOUT)
    peak = _status_kib("VmHWM") * 1024
    assert r["error"]["stage"] == "python" and f"its answer was larger than {cap // 2**20} MiB" in r["error"]["message"], r
    assert time.monotonic() - started < BOUND
    # 1 GiB was written; the server read at most the cap (and a chunk) of it, and its peak shows no more.
    assert peak - before < 3 * cap, f"the server's peak grew by {(peak - before) / 2**20:.0f} MiB"


# -- a large well-formed answer (threat model: "an answer's size multiplied in the server") -------------------------
def huge_answer(mib: int, i: int) -> str:
    """answer_huge's kernel, its answer `mib` MiB (a comment makes each copy a compile of its own)."""
    return hostile_source("answer_huge").replace("_MIB = 31", f"_MIB = {mib}") + f"\n# copy {i}\n"


def peak_growth(sources: list[str]) -> tuple[int, list[dict]]:
    """Compile `sources` at once through the page's way to the job layer (gateway.call: the answer's paths cleaned
    as for the page); how far the server's peak resident memory rose above where it started, and the answers."""
    from playground.ui import gateway
    results: list = [None] * len(sources)

    def one(i):
        results[i] = gateway.call("compile", "vector_add", sources[i], {}, session=f"large-answer-{i}")
    before = _status_kib("VmRSS") * 1024
    Path("/proc/self/clear_refs").write_text("5")  # the peak (VmHWM) starts again from now
    threads = [threading.Thread(target=one, args=(i,)) for i in range(len(sources))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(BOUND * 2)
    return _status_kib("VmHWM") * 1024 - before, results


@pytest.mark.timeout(300)
def test_a_large_well_formed_answer_costs_the_server_a_small_multiple_of_its_size(server):
    """A compile's answer of 31 MiB took a server from 0.6 to 2.9 GB (three at once: 6.8 GB): the answer was copied
    whole at each step (read, parsed, cached, its paths cleaned, highlighted). Now the answer limit is far below that,
    each large text is cut where no shipped kernel's reaches, and two large answers at most are read at once."""
    from playground.jobs import limits
    settle(server)
    server.cache.clear()
    cap = server.settings.result_bytes
    assert cap <= 8 * 2**20, "the answer limit is at most 8 MiB (the shipped kernels' largest answer is 1.2 MiB)"
    # Three answers of 31 MiB at once: each job stopped at the limit, never read whole.
    growth, results = peak_growth([huge_answer(31, i) for i in range(3)])
    for r in results:
        assert r["error"]["stage"] == "python", r["error"]
        assert f"its answer was larger than {cap // 2**20} MiB" in r["error"]["message"], r["error"]
    assert growth < 3 * cap, f"three answers over the limit grew the server by {growth / 2**20:.0f} MiB"  # (576 MiB)
    # Three answers just under the limit, at once: each arrives with its CUDA cut, and saying where.
    size = cap // 2**20 - 2
    growth, results = peak_growth([huge_answer(size, i) for i in range(3)])
    cut = limits.TEXT_CAPS["cuda"]
    for r in results:
        assert r["ok"], r.get("error")
        assert len(r["cuda"]) <= cut and r["cuda"].endswith(f"(cut at {cut // 2**20} MiB)\n"), r["cuda"][-100:]
        assert r["ptx"] and "cut at" not in r["ptx"], "a text under its cap is whole"
    # Held at once at most: two answers being parsed (each as text and as parsed), what waits of the third (1 MiB),
    # and the cut answers kept (the results, the cache's copies): less than twice the three answers' sizes (it was
    # 5.5 times: 100 MiB).
    assert growth < 2 * 3 * size * 2**20, f"three answers of {size} MiB grew the server by {growth / 2**20:.0f} MiB"
    # An answer small in bytes and huge in objects (7 MiB of empty lists) is counted before it is parsed.
    growth, (r,) = peak_growth([hostile_source("answer_many_values")])
    assert r["error"]["stage"] == "python" and "values" in r["error"]["message"], r["error"]
    assert growth < 3 * 7 * 2**20, f"an answer of 7 MiB of empty lists grew the server by {growth / 2**20:.0f} MiB"


# -- logins (threat model: "logins are not throttled") ---------------------------------------------------------------
def test_failed_logins_wait_longer_each_time_then_are_refused_per_name_and_age_out():
    from playground.ui.server import LoginThrottle as T
    now = [1000.0]
    throttle = T(clock=lambda: now[0])
    answers = [throttle.admit("203.0.113.7", "eve") for _ in range(T.LIMIT)]
    delays = [a[0] for a in answers]
    assert delays[:T.FREE] == [0.0] * T.FREE and all(a[1] is None for a in answers)
    assert delays[T.FREE:] == sorted(delays[T.FREE:]) and delays[T.FREE] > 0 and max(delays) == T.MAX_DELAY
    refused = throttle.admit("203.0.113.7", " EVE ")  # the name as the login reads it
    assert refused[1] is not None and refused[1] > 0 and refused[3] == "name", "past the limit the name is refused"
    assert throttle.admit("198.51.100.1", "eve")[:2] == (0.0, None), "another address is not held back"
    now[0] += T.WINDOW + 1
    assert throttle.admit("203.0.113.7", "eve")[:2] == (0.0, None), "the failures age out"
    delay, _, stamp, _ = throttle.admit("198.51.100.9", "ada")
    throttle.succeeded("198.51.100.9", "ada", stamp)
    assert not throttle.failures["198.51.100.9", "ada"] and not throttle.by_address["198.51.100.9"], \
        "a success is not counted as a failure"


@pytest.fixture
def class_page(server):
    """The page served with the class password "class-pw" on a free loopback port: its base URL."""
    from playground.ui import serve
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    demo, _, _ = serve("127.0.0.1", port, password="class-pw", prevent_thread_lock=True, quiet=True)
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        demo.close()


@pytest.mark.timeout(300)
def test_fifty_wrong_passwords_at_once_are_slowed_then_answered_429(class_page):
    import concurrent.futures
    import httpx
    from playground.ui.server import LoginThrottle as T
    base = class_page

    def guess(i):
        t = time.monotonic()
        r = httpx.post(base + "/login", data={"username": "eve", "password": f"guess-{i}"}, timeout=60)
        return r.status_code, time.monotonic() - t, r.headers.get("retry-after")
    with concurrent.futures.ThreadPoolExecutor(50) as pool:
        answers = list(pool.map(guess, range(50)))
    codes = [a[0] for a in answers]
    assert 200 not in codes
    assert codes.count(400) == T.LIMIT and codes.count(429) == 50 - T.LIMIT, codes
    assert all(int(a[2]) > 0 for a in answers if a[0] == 429)
    assert max(a[1] for a in answers if a[0] == 400) >= T.MAX_DELAY, "later failures were made to wait"
    # The right password from the same address waits out the lock too: a guesser cannot tell it was right.
    assert httpx.post(base + "/login", data={"username": "eve", "password": "class-pw"},
                      timeout=60).status_code == 429


def test_a_body_over_the_request_limit_is_answered_413_unread_and_the_server_stays_responsive(class_page):
    """Gradio parsed a body whole before asking for a login: one anonymous 300 MiB POST held every student's page for
    seconds and its memory stayed. Now the declared length is refused unread, a chunked body is cut at the limit, and
    an event of normal size is still read."""
    import httpx
    from playground.settings import current
    limit = current().request_bytes
    base = class_page
    rss = psutil.Process().memory_info().rss
    declared = httpx.post(base + "/gradio_api/queue/join", content=b"x" * (limit + 1),
                          headers={"content-type": "application/json"}, timeout=60)
    assert declared.status_code == 413 and "limited" in declared.json()["error"]

    def chunks():  # no content-length: counted as it comes
        for _ in range(limit // (1 << 20) + 2):
            yield b"y" * (1 << 20)
    chunked = httpx.post(base + "/gradio_api/queue/join", content=chunks(), timeout=60)
    assert chunked.status_code == 413
    assert psutil.Process().memory_info().rss - rss < 4 * limit, "what was refused was not held"
    small = httpx.post(base + "/gradio_api/queue/join", json={"data": ["z" * 300_000], "fn_index": 0}, timeout=60)
    assert small.status_code == 401, small.text  # read, then refused for what it is: no login
    assert httpx.get(base + "/health", timeout=10).json()["ok"]


# -- per-student limits (threat model: "limits keyed on a session id the client chooses") ---------------------------
def _request(address: str, session: str, username: str | None = None):
    import gradio as gr
    from starlette.requests import Request
    scope = {"type": "http", "client": (address, 40000), "headers": [], "method": "POST", "path": "/",
             "query_string": b""}
    return gr.Request(request=Request(scope), username=username, session_hash=session)


def test_new_sessions_from_one_client_share_its_limits():
    from playground.jobs.queue import Busy, Scheduler
    from playground.settings import Settings
    from playground.ui import api, common, gateway
    # Many sessions, one student: the key is the login, else the address, never the session id.
    assert {gateway.student_of(_request("203.0.113.5", f"s{i}")) for i in range(20)} == {"address:203.0.113.5"}
    assert {gateway.student_of(_request(f"198.51.100.{i}", f"s{i}", "ana")) for i in range(5)} == {"user:ana"}
    assert gateway.student_of(_request("203.0.113.5", "s1")) != gateway.student_of(_request("203.0.113.6", "s1"))
    # The page's handlers and the API endpoints take that key (common.session_of, api's endpoints).
    assert common.session_of(_request("203.0.113.5", "fresh-session")) == "address:203.0.113.5"
    assert "gateway.student_of(request)" in Path(api.__file__).read_text()
    assert "session_hash" not in Path(api.__file__).read_text()
    # And the queue then holds a script opening 10 sessions to the 3 jobs of one student.
    sched = Scheduler(1, [], Settings(session_inflight=3))
    held, release = [], threading.Event()

    def take(i):
        key = gateway.student_of(_request("203.0.113.5", f"script-session-{i}"))
        try:
            with sched.slot("cpu", key, lambda *_: None):
                held.append(i)
                release.wait(10)
        except Busy as busy:
            held.append(busy)
    threads = [threading.Thread(target=take, args=(i,), daemon=True) for i in range(10)]
    for t in threads:
        t.start()
    time.sleep(0.5)
    assert sum(isinstance(h, Busy) for h in held) == 7, held
    release.set()
    for t in threads:
        t.join(10)


def test_where_names_are_free_the_key_of_a_login_carries_its_address_for_the_queue(tmp_path):
    from playground.settings import Settings
    from playground.ui import classroom, gateway
    saved = classroom._classroom
    try:
        # The class password and no roster: one person may log in under any name, so the queue counts the address.
        classroom.install(classroom.Classroom(Settings(data_dir=tmp_path), class_password="class-pw"))
        keys = {gateway.student_of(_request("203.0.113.5", f"s{i}", f"eve{i}")) for i in range(3)}
        assert keys == {"user:eve0", "user:eve1", "user:eve2"} and {k.address for k in keys} == {"203.0.113.5"}
        # A proxy's authenticated user (or a roster): a name is a person, counted as the login alone.
        classroom.install(classroom.Classroom(Settings(data_dir=tmp_path, user_header="X-Forwarded-User"),
                                              class_password=None))
        assert gateway.student_of(_request("203.0.113.5", "s1", "eve")).address is None
    finally:
        classroom._classroom = saved


# -- job uids (threat model: "one job's harm reaches another's") -----------------------------------------------------
def test_two_servers_with_different_job_folders_never_hold_the_same_job_uid(tmp_path, monkeypatch):
    base = 990_000 + os.getpid() % 1000 * 8  # uids no real server of this machine gives out
    first, second = sandbox.UidPool(base, 2), sandbox.UidPool(base, 2)
    monkeypatch.setattr(sandbox, "jobs_root", lambda: tmp_path / "server-a" / "jobs")
    a = first.take()
    monkeypatch.setattr(sandbox, "jobs_root", lambda: tmp_path / "server-b" / "jobs")
    b = second.take()
    try:
        assert {a, b} == {base, base + 1}, "the lock that keeps a uid to one server is machine-wide"
        with pytest.raises(RuntimeError, match="no free job uid"):
            first.take()  # both are held, one by each server
    finally:
        first.give(a)
        second.give(b)
    assert second.take() == base  # given back: free again
    second.give(base)


# -- a path where a kernel name goes (threat model: "user code in the server") ---------------------------------------
def test_a_path_given_as_the_kernel_to_describe_is_refused_and_its_file_never_runs(tmp_path):
    # Gradio stores an uploaded file and names its path: sent to /describe as the kernel, the server must not import
    # it (it would run as the server, outside every limit and wall).
    from playground.ui import gateway
    marker = tmp_path / "ran"
    evil = tmp_path / "evil.py"
    evil.write_text(f"open({str(marker)!r}, 'w').write('ran in the server')\n")
    for name in (str(evil), str(evil)[:-3], "../" + evil.name):
        answer = gateway.describe_source(name, "", {})
        assert answer["ok"] is False and answer["error"]["stage"] == "parameters", answer
        with pytest.raises(ValueError, match="no kernel named"):
            gateway.describe(name)
    assert not marker.exists(), "the file ran in the server"


# -- downloads and /health (threat model: "downloads readable by anyone", "/health tells anyone") -------------------
def test_downloads_are_private_to_the_server_and_removed_when_old(tmp_path):
    import stat
    from playground.ui import downloads
    path = Path(downloads.write("user:ana", "gemm.cu", "// cuda"))
    assert path.read_text() == "// cuda"
    for p in (path.parent, downloads.root()):
        assert stat.S_IMODE(p.stat().st_mode) == 0o700, oct(p.stat().st_mode)
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    other = Path(downloads.write("user:bob", "gemm.cu", "// bob's"))
    assert other.parent != path.parent
    # a profile's report is bytes, named by the job's answer: written the same way, never outside the folder
    report = Path(downloads.write("user:ana", "../../gemm.ncu-rep", b"\x00NCU"))
    assert report.parent == path.parent and report.read_bytes() == b"\x00NCU"
    assert stat.S_IMODE(report.stat().st_mode) == 0o600
    assert Path(downloads.write("user:ana", "..", b"x")).parent == path.parent
    downloads.prune(now=time.time() + downloads.KEEP_SECONDS + 1)
    assert not path.exists() and not path.parent.exists() and not other.exists()


@pytest.mark.timeout(300)
def test_health_without_a_login_says_only_up_or_down(class_page):
    import httpx
    anonymous = httpx.get(class_page + "/health", timeout=30)
    assert anonymous.status_code == 200 and anonymous.json() == {"ok": True}
    with httpx.Client(base_url=class_page, timeout=30) as logged:
        assert logged.post("/login", data={"username": "ana", "password": "class-pw"}).status_code == 200
        body = logged.get("/health").json()
    assert body["ok"] is True and {"sandbox", "queue", "cache", "gpu"} <= set(body)


# -- the system call filter (threat model: "no syscall filter in the job") ------------------------------------------
SYSCALLS = '''
import ctypes, json, os, threading
libc = ctypes.CDLL(None, use_errno=True)
def call(nr, *args):
    return 0 if libc.syscall(nr, *args) >= 0 else ctypes.get_errno()
t = threading.Thread(target=lambda: None)  # threads and forks: what every job needs still works
t.start()
t.join()
pid = os.fork()
if pid == 0:
    os._exit(0)
os.waitpid(pid, 0)
seen = {"ptrace": call(101, 0, 0, 0, 0), "mount": call(165, b"none", b"/tmp", b"tmpfs", 0, 0),
        "keyctl": call(250, 0, -1, 0, 0), "bpf": call(321, 0, 0, 0), "unshare": call(272, 0x10000000),
        "init_module": call(175, 0, 0, 0), "reboot": call(169, 0, 0, 0, 0),
        "clone_newuser": call(56, 0x10000000 | 17, 0, 0, 0, 0),
        "seccomp_mode": next(l for l in open("/proc/self/status") if l.startswith("Seccomp:")).split()[1]}
raise RuntimeError("SEEN" + json.dumps(seen))
'''


@pytest.mark.timeout(300)
def test_the_job_cannot_ptrace_mount_keyctl_bpf_unshare_load_modules_or_reboot(server):
    import platform
    if server.backend.mode.kind != "bwrap":
        pytest.skip(f"jobs are not sandboxed here ({server.backend.mode.why})")
    if platform.machine() != "x86_64":
        pytest.skip("the system call numbers below are x86-64's")
    assert server.backend.mode.to_json(server.settings)["syscall_filter"], "libseccomp's bindings are missing"
    text = (ROOT / "kernels" / "vector_add.py").read_text().replace(
        "import tilelang.language as T\n", "import tilelang.language as T\n" + SYSCALLS, 1)
    r = jobs.run_job("compile", "vector_add", text, {}, session="syscalls", timeout=TIMEOUT)
    assert "SEEN" in r["error"]["message"], r["error"]
    seen = json.loads(r["error"]["message"].split("SEEN", 1)[1])
    assert seen.pop("seccomp_mode") == "2", "the job runs under a seccomp filter"
    assert seen == {name: errno.EPERM for name in seen}, seen
    # The other side: what a kernel job needs is allowed (the same filter compiles a kernel).
    server.cache.clear()
    after = jobs.run_job("compile", "vector_add", None, {}, session="syscalls-after")
    assert after["ok"], after["error"]
