"""The GPU corpus on a real GPU (pytest -m gpu): a hung kernel, an out-of-bounds write
and a GPU-memory bomb each end their own job with a message, and the next job on that GPU runs and verifies."""
import re
import time

import pytest

from conftest import ROOT
from playground import jobs
from playground.jobs import runner
from test_jobs_hostile import expectation, hostile_source, leftovers, settle

HOSTILE = ROOT / "tests" / "hostile"
GPU_NAMES = sorted(p.stem for p in HOSTILE.glob("gpu_*.py"))
SMALL = {"N": 2**20}
HANG_TIMEOUT = 60.0  # the run timeout given to the hung kernel: the kill from outside must free the GPU


@pytest.fixture(scope="module")
def server():
    jobs.start()
    yield runner.state()
    jobs.shutdown()


@pytest.mark.gpu
@pytest.mark.timeout(900)
@pytest.mark.parametrize("name", GPU_NAMES)
def test_gpu_harm_ends_its_own_job_and_the_next_job_runs(name, server):
    expect = expectation(HOSTILE / f"{name}.py")
    text = hostile_source(name)
    settle(server)
    started = time.monotonic()
    result = jobs.run_job("run", "vector_add", text, SMALL, session=f"gpu-{name}", timeout=HANG_TIMEOUT + 60
                          if name != "gpu_hang" else HANG_TIMEOUT)
    elapsed = time.monotonic() - started
    err = result["error"]
    print(f"\n{name}: {elapsed:.1f} s, stage {err and err['stage']}: {err and err['message']}")
    assert not result["ok"] and err
    assert err["stage"] in expect["stage"].split("|"), err
    assert re.search(expect["message"], err["message"], re.I), err["message"]
    assert elapsed < HANG_TIMEOUT + 90

    settle(server)
    assert leftovers(server) == {"processes": [], "job_dirs": [], "files": []}
    started = time.monotonic()
    after = jobs.run_job("run", "vector_add", None, SMALL, session=f"gpu-after-{name}")
    print(f"next job: {time.monotonic() - started:.1f} s, ok {after['ok']}, "
          f"{after.get('timing', {}).get('median_ms')} ms")
    assert after["ok"], after["error"]
    assert all(v["passed"] for v in after["verification"])


# Under the profilers the user's kernel runs in a process ncu or compute-sanitizer starts, outside the engine's own
# launch: a kernel that hangs or writes far out of bounds there must still end its own job (the tool's time limit,
# the job's watch) and leave the GPU to the next job.
UNDER_TOOLS = [("profile", "gpu_hang"), ("profile", "gpu_oob_write"), ("memcheck", "gpu_hang")]


@pytest.mark.gpu
@pytest.mark.timeout(900)
@pytest.mark.parametrize("action,name", UNDER_TOOLS, ids=[f"{a}-{n}" for a, n in UNDER_TOOLS])
def test_a_hostile_kernel_under_the_profilers_ends_its_own_job_and_the_next_job_runs(action, name, server):
    text = hostile_source(name)
    settle(server)
    started = time.monotonic()
    result = jobs.run_job(action, "vector_add", text, SMALL, session=f"tool-{action}-{name}", timeout=HANG_TIMEOUT)
    elapsed = time.monotonic() - started
    err = result.get("error") or {}
    print(f"\n{action} {name}: {elapsed:.1f} s, ok {result['ok']}, stage {err.get('stage')}: {err.get('message')}")
    assert elapsed < HANG_TIMEOUT + 90, "the job outlived its limit"
    if name == "gpu_hang":
        assert not result["ok"] and err["stage"] == "timeout" and re.search(r"limit", err["message"]), err
    else:  # the illegal address ends the profiled process; the answer says so instead of a profile
        assert not result["ok"] and err["stage"] in ("device", "profile", "python"), err
        assert re.search(r"illegal|CUDA error|context|exit|fail", err["message"], re.I), err["message"]

    settle(server)
    assert leftovers(server) == {"processes": [], "job_dirs": [], "files": []}
    after = jobs.run_job("run", "vector_add", None, SMALL, session=f"tool-after-{action}-{name}")
    assert after["ok"], after["error"]
    assert all(v["passed"] for v in after["verification"])


@pytest.mark.gpu
def test_nvml_lists_the_gpus_torch_sees_without_making_a_cuda_context():
    import json
    import subprocess
    import sys
    import torch
    probe = ("import json; from playground.engine import gpus; import torch\n"
             "print(json.dumps({'gpus': gpus.list_gpus(), 'state': gpus.state(), 'cuda': torch.cuda.is_initialized()}))")
    out = subprocess.run([sys.executable, "-c", probe], cwd=ROOT, capture_output=True, text=True, timeout=120)
    seen = json.loads(out.stdout.strip().splitlines()[-1])
    assert seen["cuda"] is False, "asking NVML made a CUDA context"
    assert len(seen["gpus"]) >= torch.cuda.device_count() >= 1
    names = {g["name"] for g in seen["gpus"]}
    assert torch.cuda.get_device_name(0) in names
    major, minor = torch.cuda.get_device_capability(0)
    assert any(g["arch"] and g["arch"].startswith(f"sm_{major}{minor}") for g in seen["gpus"])
    assert seen["state"]["driver"] and seen["state"]["clock_sm_max_mhz"] > 0
