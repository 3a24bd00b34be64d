"""The job layer on a Ray cluster (playground/jobs/ray_backend.py): a real Ray head on this machine with 2 CPUs and 2
logical GPUs (an "sm_90a" resource each), the same sandboxed jobs run on its workers.

Ray binds and dials the machine's own address unless nothing else exists, so the head, the server's job layer and the
page all run inside a network namespace that has only loopback (`unshare -n`): no test traffic leaves the machine.
One scenario (this file run as a script, inside that namespace) drives the job layer and the page and writes what it
saw as JSON; the tests below check it, one behaviour each. GPU jobs here run on logical GPUs: the engine in the worker
answers its no-GPU `device` error, which is enough to see where and when each job ran.
"""
from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PORT = 6379  # the namespace is the test's own: Ray's default ports are free in it
SLEEPY = "import time\ntime.sleep({seconds})  # holds the job for a while, at import, before anything needs the GPU\n"


# -- the scenario, run inside the namespace --------------------------------------------------------------------
def _timed(fn, *args, **kwargs):
    start = time.monotonic()
    result = fn(*args, **kwargs)
    return result, round(time.monotonic() - start, 2)


def _source(kernel: str, seconds: float, tag: str) -> str:
    return SLEEPY.format(seconds=seconds) + (ROOT / "kernels" / f"{kernel}.py").read_text() + f"\n# {tag}\n"


def scenario(head_pgid: int) -> dict:
    sys.path.insert(0, str(ROOT))
    from playground.jobs import runner
    out: dict = {"server_pid": os.getpid()}

    # A compile through the job layer runs in a Ray worker, not here.
    out["compile"], out["compile_seconds"] = _timed(runner.run_job, "compile", "vector_add", session="s-compile")

    # Four GPU jobs at once on two logical GPUs.
    gpu_results: list = [None] * 4

    def gpu_job(i: int) -> None:
        gpu_results[i] = runner.run_job("run", "vector_add", _source("vector_add", 2, f"gpu job {i}"),
                                        session=f"s-gpu-{i}")
    threads = [threading.Thread(target=gpu_job, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    out["gpu_jobs"] = gpu_results

    # A GPU worker killed while its job runs: the job is retried on the other GPU (or answers clearly).
    pids = {r["ran_on"]["slot"]: r["ran_on"]["pid"] for r in gpu_results if r and "ran_on" in r}
    box: dict = {}
    killer = threading.Thread(target=lambda: box.update(result=runner.run_job(
        "run", "vector_add", _source("vector_add", 8, "killed"), session="s-kill")))
    killer.start()
    time.sleep(4)  # the job has started on GPU slot 0 (both were free: the queue hands out the lowest first)
    os.kill(pids[0], signal.SIGKILL)
    out["killed_pid"] = pids[0]
    killer.join()
    out["killed"] = box.get("result")

    out["health"] = runner.health()
    runner.shutdown()  # gives the GPUs back to the cluster for the page's own job layer

    # The page: a compile through its API, and /health.
    sys.path.insert(0, str(ROOT / "tests" / "load"))
    import load_test
    port = load_test.free_port()
    app = load_test.start_app(port, Path(tempfile.gettempdir()) / f"ray-app-{port}.log")
    try:
        load_test.wait_health(port)
        from gradio_client import Client
        client = Client(f"http://127.0.0.1:{port}/", auth=("ray-test", load_test.LOAD_PASSWORD), verbose=False)
        out["page_compile"] = client.predict("vector_add", "", {"block_N": 4096, "threads": 128},
                                             api_name="/compile")
        out["page_health"] = load_test.health_details(port)  # a logged-in user's /health
        import urllib.request
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=30) as r:
            out["page_health_anonymous"] = json.loads(r.read())
    except Exception as exc:
        out["page_error"] = f"{type(exc).__name__}: {exc}"
    finally:
        app.send_signal(signal.SIGTERM)
        try:
            app.wait(timeout=60)
        except subprocess.TimeoutExpired:
            os.killpg(app.pid, signal.SIGKILL)

    # The cluster goes away under a running server: clear answers, quickly, and the server stays up.
    runner.run_job("compile", "vector_add", session="s-lost")  # connects again (from the cache or the cluster)
    os.killpg(head_pgid, signal.SIGKILL)
    out["lost"], out["lost_seconds"] = _timed(runner.run_job, "compile", "vector_add",
                                              _source("vector_add", 0, "after the head died"), session="s-lost")
    out["lost_again"], out["lost_again_seconds"] = _timed(runner.run_job, "compile", "vector_add",
                                                          _source("vector_add", 0, "and again"), session="s-lost")
    runner.shutdown()
    return out


# -- the fixture: a Ray head in a network namespace of its own, and the scenario run beside it -----------------
def _namespaces_work() -> str | None:
    for tool in ("unshare", "nsenter", "ip"):
        if shutil.which(tool) is None:
            return f"{tool} is not installed"
    try:
        import ray  # noqa: F401
    except ImportError:
        return "ray is not installed"
    probe = subprocess.run(["unshare", "-n", "true"], capture_output=True, text=True)
    return None if probe.returncode == 0 else f"cannot make a network namespace: {probe.stderr.strip()}"


def _kill_tree(pgid: int, pids: set[int]) -> None:
    import psutil
    for sig in (signal.SIGTERM, signal.SIGKILL):
        for pid in pids:
            try:
                os.kill(pid, sig)
            except ProcessLookupError:
                pass
        try:
            os.killpg(pgid, sig)
        except ProcessLookupError:
            pass
        deadline = time.monotonic() + 15
        while time.monotonic() < deadline and any(psutil.pid_exists(p) and psutil.Process(p).status() !=
                                                  psutil.STATUS_ZOMBIE for p in pids if _exists(p)):
            time.sleep(0.2)


def _exists(pid: int) -> bool:
    import psutil
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False


@contextlib.contextmanager
def ray_head(gpus: int, arch: str):
    """A Ray head (2 CPUs, `gpus` GPUs of `arch`) in a network namespace of its own; yields (its pid, a folder)."""
    why = _namespaces_work()
    if why:
        pytest.skip(why)
    import psutil
    temp = tempfile.mkdtemp(prefix="pgray-")  # short: Ray's socket paths live under it
    env = {**os.environ, "PYTHONPATH": str(ROOT), "RAY_USAGE_STATS_ENABLED": "0"}
    env.pop("PLAYGROUND_RAY", None)
    ray_bin = str(Path(sys.executable).parent / "ray")
    head_cmd = (f"ip link set lo up && exec {ray_bin} start --head --block --port={PORT} --num-cpus=2 "
                f"--num-gpus={gpus} --resources='{{\"{arch}\": {gpus}}}' --node-ip-address=127.0.0.1 "
                f"--disable-usage-stats --include-dashboard=false --object-store-memory=100000000 --temp-dir={temp}")
    head = subprocess.Popen(["unshare", "-n", "bash", "-c", head_cmd], cwd=ROOT, env=env, start_new_session=True,
                            stdout=open(Path(temp) / "head.log", "w"), stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + 90
        while time.monotonic() < deadline and not list(Path(temp).glob("session_*/sockets/raylet")):
            time.sleep(0.5)
        time.sleep(2)
        yield head.pid, Path(temp)
    finally:
        try:
            tree = {p.pid for p in psutil.Process(head.pid).children(recursive=True)} | {head.pid}
        except psutil.Error:
            tree = set()
        _kill_tree(head.pid, tree)
        head.wait(timeout=30)
        shutil.rmtree(temp, ignore_errors=True)


def drive(head_pid: int, temp: Path, call: str) -> dict:
    """Run `call` (an expression of this module, answering a dict) as the server would, beside the head."""
    out_file = temp / "seen.json"
    env = {**os.environ, "PYTHONPATH": str(ROOT), "RAY_USAGE_STATS_ENABLED": "0",
           "PLAYGROUND_RAY": f"127.0.0.1:{PORT}",
           "PLAYGROUND_DATA": str(temp / "server-data")}  # its own compile cache: the first compile is the cluster's
    code = (f"import json, sys; sys.path.insert(0, {str(ROOT / 'tests')!r}); import test_jobs_ray as t; "
            f"json.dump(t.{call}, open({str(out_file)!r}, 'w'), default=str)")
    driver = subprocess.run(["nsenter", "-t", str(head_pid), "-n", sys.executable, "-c", code], cwd=ROOT,
                            env=env, capture_output=True, text=True, timeout=540)
    assert out_file.exists(), f"the scenario wrote nothing:\n{driver.stderr[-4000:]}"
    return json.loads(out_file.read_text())


@pytest.fixture(scope="module")
def seen(tmp_path_factory):
    with ray_head(2, "sm_90a") as (head_pid, temp):
        answers = drive(head_pid, temp, f"scenario({head_pid})")
    kept = tmp_path_factory.mktemp("ray") / "seen.json"  # what the scenario saw, for a failure's reader
    kept.write_text(json.dumps(answers, indent=1))
    yield answers


# -- what was seen -------------------------------------------------------------------------------------------------
def test_a_compile_through_the_job_layer_runs_on_a_ray_worker_and_says_where(seen):
    result = seen["compile"]
    assert result["ok"], result.get("error")
    ran_on = result["ran_on"]
    assert ran_on["node"] == "127.0.0.1" and ran_on["gpu"] is None
    assert ran_on["pid"] != seen["server_pid"]
    assert "cuda" in result and result["kernel"] == "vector_add" and result["action"] == "compile"


def test_gpu_jobs_never_share_a_gpu_and_use_every_gpu(seen):
    results = seen["gpu_jobs"]
    assert all(r is not None for r in results)
    for r in results:  # the engine ran in the worker and found no CUDA device (logical GPUs): its own answer
        assert r["error"]["stage"] == "device" and "no CUDA GPU" in r["error"]["message"], r["error"]
    by_gpu: dict = {}
    for r in results:
        by_gpu.setdefault((r["ran_on"]["node"], r["ran_on"]["gpu"]), []).append(
            (r["ran_on"]["started"], r["ran_on"]["finished"]))
    assert len(by_gpu) == 2, by_gpu  # both GPUs took work
    for spans in by_gpu.values():
        spans.sort()
        for (_, end), (start, _) in zip(spans, spans[1:]):
            assert start >= end, f"two jobs overlapped on one GPU: {spans}"
    assert {r["ran_on"]["slot"] for r in results} == {0, 1}
    assert all(r["ran_on"]["finished"] - r["ran_on"]["started"] >= 2 for r in results)  # each slept 2 s on it


def test_a_gpu_worker_killed_mid_job_retries_the_job_on_another_gpu(seen):
    result = seen["killed"]
    assert result is not None
    assert "stopped mid-job" in result.get("retried", ""), result
    assert result["ran_on"]["slot"] == 1 and result["ran_on"]["pid"] != seen["killed_pid"]
    assert result["error"]["stage"] == "device"  # the retry ran to the engine's own answer


def test_health_names_the_ray_backend_and_its_nodes(seen):
    cluster = seen["health"]["cluster"]
    assert cluster["backend"] == "ray" and cluster["connected"]
    assert [n["node"] for n in cluster["nodes"]] == ["127.0.0.1"]
    assert cluster["nodes"][0]["alive"] and cluster["nodes"][0]["gpus"] == 2
    assert cluster["nodes"][0]["arches"] == ["sm_90a"]
    assert [w["slot"] for w in cluster["gpu_workers"]] == [0, 1]


def test_the_page_compiles_on_the_cluster(seen):
    assert "page_error" not in seen, seen.get("page_error")
    result = seen["page_compile"]
    assert result["ok"], result.get("error")
    assert result["ran_on"]["node"] == "127.0.0.1" or result.get("cached")


def test_the_pages_health_names_the_backend_and_its_nodes_to_a_logged_in_user_only(seen):
    details = seen["page_health"]
    assert details["ok"] and details["backend"] == "ray"
    assert [n["node"] for n in details["cluster"]["nodes"]] == ["127.0.0.1"]
    assert seen["page_health_anonymous"] == {"ok": True}


def test_a_lost_cluster_gives_a_clear_answer_not_a_hang(seen):
    for key in ("lost", "lost_again"):
        result = seen[key]
        assert not result["ok"]
        assert result["error"]["stage"] == "busy" and "Ray cluster at 127.0.0.1" in result["error"]["message"]
        assert seen[f"{key}_seconds"] < 60, seen[f"{key}_seconds"]
    assert seen["lost_again_seconds"] < 5  # once known to be gone: answered at once


def test_a_gpu_job_goes_only_to_a_gpu_that_can_run_its_arch():
    from playground.jobs.ray_backend import can_run
    assert can_run("sm_90a", "sm_90a") and can_run("sm_90a", "sm_90")  # an H100/H200 runs both
    assert can_run("sm_89", "sm_80") and can_run("sm_86", "sm_80")      # same major, newer minor
    assert not can_run("sm_80", "sm_86") and not can_run("sm_90a", "sm_80")
    assert not can_run("sm_100a", "sm_90a") and not can_run("sm_100a", "sm_90")  # arch-specific, or a new major
    assert not can_run("sm_90a", None)


# -- on a real GPU ----------------------------------------------------------------------------------------------
def gpu_scenario() -> dict:
    sys.path.insert(0, str(ROOT))
    from playground.jobs import runner
    result = runner.run_job("run", "vector_add", None, {"N": 1 << 20}, session="s-gpu")
    runner.shutdown()
    return result


@pytest.mark.gpu
def test_a_run_on_a_real_gpu_through_a_ray_actor_is_timed_there():
    sys.path.insert(0, str(ROOT))
    from playground.jobs import hardware
    gpu = hardware.gpus()[0]
    with ray_head(1, gpu["arch"]) as (head_pid, temp):
        result = drive(head_pid, temp, "gpu_scenario()")
    assert result["ok"], result.get("error")
    assert result["ran_on"]["gpu"] == 0 and result["ran_on"]["arch"] == gpu["arch"]
    assert result["ran_on"]["finished"] > result["ran_on"]["started"]
    assert result["verified"] and all(v["passed"] for v in result["verification"])
    assert result["timing"]["median_ms"] > 0


if __name__ == "__main__":  # python tests/test_jobs_ray.py HEAD_PGID: the scenario alone, printed
    print(json.dumps(scenario(int(sys.argv[1])), indent=1, default=str))
