"""The Docker image, built and run as a class would meet it: `make image-test` (and so .ci/run) runs this.

The image is built from the Dockerfile by deploy/image.sh, with Docker where its daemon answers and podman elsewhere,
with the CPU build of torch (compiling needs no GPU), and started by the same script under the seccomp profile the
README gives (deploy/seccomp-bwrap.json) with the app's own user. Then, from outside: /health answers and the
HEALTHCHECK passes; the server runs as uid 1000 with jobs sandboxed in a user namespace; the shipped GEMM compiles
through the page's API with the wheel's nvcc (the image has no CUDA toolkit); the first compile of each shipped kernel
is answered from what the build compiled; hostile jobs cannot write the
container's /tmp or read outside their folder; the profile is in force; the data volume is the app's; and the
browser test (tests/test_browser.py) passes against the container's page.

A plain `pytest` skips the container's tests (building takes minutes): set PLAYGROUND_IMAGE_TEST=1, as
`make image-test` does."""
import json
import os
import shutil
import sqlite3
import subprocess
import sys
import time
import urllib.request
import uuid
from pathlib import Path

import pytest

from conftest import ROOT
from playground.jobs.sandbox import INSIDE
from test_jobs_hostile import expectation, hostile_source
from ports import free_port

pytestmark = pytest.mark.timeout(3600)

IMAGE = os.environ.get("PLAYGROUND_IMAGE", "tilelang-playground:cpu-test")
SCRIPT = str(ROOT / "deploy" / "image.sh")
ARTIFACTS = ROOT / "tests" / "artifacts"
APP_UID = 1000
SECRET = f"SERVER_SECRET={uuid.uuid4().hex}"  # in the server's environment only



def image_sh(*args: str, timeout: float = 120, check: bool = True) -> subprocess.CompletedProcess:
    # PYTHON: the pip that fetches the CPU torch wheel for the build (this venv's; a system python3 may have none)
    proc = subprocess.run([SCRIPT, *args], capture_output=True, text=True, timeout=timeout, cwd=ROOT,
                          env={**os.environ, "PYTHON": sys.executable})
    if check:
        assert proc.returncode == 0, f"deploy/image.sh {' '.join(args)}:\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"
    return proc


@pytest.fixture(scope="module")
def image():
    if not os.environ.get("PLAYGROUND_IMAGE_TEST"):
        pytest.skip("builds and runs the Docker image (minutes): `make image-test` runs it (PLAYGROUND_IMAGE_TEST=1); "
                    ".ci/run does")
    docker_daemon = shutil.which("docker") and subprocess.run(["docker", "info"], capture_output=True).returncode == 0
    if not (docker_daemon or shutil.which("podman") or shutil.which("apt-get")):
        pytest.skip("no container engine: no Docker daemon answers, and podman is neither here nor installable "
                    "(no apt-get)")
    ARTIFACTS.mkdir(exist_ok=True)
    started = time.monotonic()
    proc = image_sh("build", IMAGE, "cpu", timeout=2000, check=False)
    took = f"image {IMAGE}: deploy/image.sh build took {time.monotonic() - started:.0f} s, rc {proc.returncode}\n"
    (ARTIFACTS / "image-build.log").write_text(took + proc.stdout + proc.stderr)
    assert proc.returncode == 0, f"the image did not build (tests/artifacts/image-build.log):\n{proc.stderr[-4000:]}"
    return IMAGE


@pytest.fixture(scope="module")
def container(image, tmp_path_factory):
    """The image running as `docker run` in the README runs it; yields (name, url, host data folder)."""
    name = f"playground-test-{uuid.uuid4().hex[:8]}"
    port = free_port()
    data = tmp_path_factory.mktemp("data")
    if os.geteuid() == 0:
        os.chown(data, APP_UID, APP_UID)  # a host folder for the volume, owned as the app's user will write it
    image_sh("run", name, image, str(port), str(data), SECRET)
    url = f"http://127.0.0.1:{port}/"
    try:
        wait_healthy(name, url)
        yield name, url, data
    finally:
        logs = image_sh("logs", name, check=False)
        (ARTIFACTS / "image-container.log").write_text(logs.stdout + logs.stderr)
        image_sh("rm", "-f", name, check=False)


def wait_healthy(name: str, url: str, timeout: float = 300) -> None:
    deadline = time.monotonic() + timeout
    last = ""
    while time.monotonic() < deadline:
        state = image_sh("inspect", "--format", "{{.State.Status}}", name, check=False).stdout.strip()
        assert state in ("created", "running"), f"the container stopped ({state}):\n" + \
            image_sh("logs", name, check=False).stderr[-4000:]
        try:
            with urllib.request.urlopen(url + "health", timeout=5) as r:
                if r.status == 200:
                    return
        except OSError as exc:
            last = str(exc)
        time.sleep(2)
    raise AssertionError(f"/health did not answer within {timeout:.0f} s ({last}):\n"
                         + image_sh("logs", name, check=False).stderr[-4000:])


def in_container(name: str, *argv: str, user: str | None = None) -> subprocess.CompletedProcess:
    return image_sh("exec", *(["--user", user] if user else []), name, *argv, check=False)


def health(url: str) -> dict:
    with urllib.request.urlopen(url + "health", timeout=10) as r:
        return json.loads(r.read())


def api(url: str, kernel: str, source: str, params: dict) -> dict:
    from gradio_client import Client
    return Client(url, verbose=False).predict(kernel, source, params, api_name="/compile")


# -- the tests ------------------------------------------------------------------------------------------------------
@pytest.mark.image
def test_health_answers_and_the_images_healthcheck_passes(container):
    name, url, _ = container
    body = health(url)
    assert body["ok"] is True, body
    proc = subprocess.run([SCRIPT, "inspect", "--format", "{{json .Config.Healthcheck}}", name],
                          capture_output=True, text=True, cwd=ROOT)
    check = json.loads(proc.stdout)["Test"]
    # The image's own HEALTHCHECK command, run inside the container as the engine's health monitor runs it.
    assert check[0] == "CMD" and "/health" in " ".join(check), check
    ran = in_container(name, *check[1:])
    assert ran.returncode == 0, ran.stderr


@pytest.mark.image
def test_the_server_runs_as_uid_1000_with_jobs_in_a_user_namespace(container):
    name, url, _ = container
    find = ("import os\n"
            "for pid in filter(str.isdigit, os.listdir('/proc')):\n"
            "    try:\n"
            "        argv = open(f'/proc/{pid}/cmdline', 'rb').read().split(b'\\0')\n"
            "        status = open(f'/proc/{pid}/status').read()\n"
            "    except OSError:\n"
            "        continue\n"
            "    if argv[1:2] == [b'app.py']:\n"
            "        print(status.split('Uid:')[1].split(chr(10))[0].split())\n")
    uids = in_container(name, ".venv/bin/python", "-c", find, user="root")
    assert uids.returncode == 0 and uids.stdout.strip(), uids.stderr
    for line in uids.stdout.splitlines():
        assert line == str([str(APP_UID)] * 4), line  # real, effective, saved, filesystem
    sandbox = health(url)["sandbox_detail"]
    assert sandbox["kind"] == "bwrap" and sandbox["user_namespace"] is True, \
        f"jobs are not sandboxed in the container: {health(url)['sandbox_why']}"


@pytest.mark.image
def test_the_image_has_no_cuda_toolkit_and_compiles_the_gemm_through_the_page_api(container):
    name, url, _ = container
    toolkit = in_container(name, "sh", "-c", "command -v nvcc || ls -d /usr/local/cuda* 2>/dev/null")
    assert toolkit.stdout.strip() == "", f"the image has a CUDA toolkit: {toolkit.stdout}"
    result = api(url, "gemm", "", {"M": 256, "N": 256, "K": 256})
    assert result["ok"], result.get("error")
    assert result["arch"].startswith("sm_") and "wgmma.mma_async" in result["ptx"], "not the Hopper GEMM"
    assert result["resources"]["registers"] and "__global__" in result["cuda"]


@pytest.mark.image
def test_the_first_compile_of_each_shipped_kernel_is_answered_from_what_the_images_build_compiled(container):
    from playground.ui import gateway
    name, url, _ = container
    seed = in_container(name, "sh", "-c", "ls /app/compile-cache-seed/answer | wc -l; "
                                          "test -w /app/compile-cache-seed && echo writable")
    assert seed.stdout.split()[0] == str(len(gateway.prewarm_requests())) and "writable" not in seed.stdout, seed
    for kernel, params in gateway.prewarm_requests():  # the page's first request of each
        started = time.monotonic()
        answer = api(url, kernel, "", params)
        assert answer["ok"] and answer["cached"], (kernel, answer.get("error"))
        assert time.monotonic() - started < 10, f"{kernel}'s cached answer took {time.monotonic() - started:.1f} s"
    assert health(url)["cache"]["disk"]["seeded"] >= 1


@pytest.mark.image
def test_a_hostile_job_cannot_write_the_containers_tmp_or_the_code(container):
    name, url, _ = container
    want = expectation(ROOT / "tests" / "hostile" / "os_system.py")
    result = api(url, "vector_add", hostile_source("os_system"), {})
    assert not result["ok"] and result["error"]["stage"] == want["stage"], result.get("error")
    assert "sealed" in result["error"]["message"], result["error"]["message"]
    left = in_container(name, "sh", "-c", "ls -d /tmp/PWNED_HOST /var/tmp/PWNED_HOST /app/PWNED 2>/dev/null")
    assert left.stdout.strip() == "", f"a job wrote outside its folder: {left.stdout}"


@pytest.mark.image
def test_a_hostile_job_reads_nothing_of_the_server_or_the_repository(container):
    """The corpus's read_outside, and what it may find: /proc/1 is readable to a job in a user namespace because
    pid 1 of the job's own pid namespace is its bwrap, under the job's uid; its environment must be the job's
    cleared one, not the server's (the container runs with SECRET, which must not reach any job)."""
    name, url, _ = container
    result = api(url, "vector_add", hostile_source("read_outside"), {})
    message = result["error"]["message"]
    assert "sealed" in message or "LEAK: read ['/proc/1/environ']" in message, message
    kernel = (ROOT / "kernels" / "vector_add.py").read_text()
    anchor = "import tilelang.language as T\n"
    dump = anchor + ("raise RuntimeError('pid 1 environment: ' + open('/proc/1/environ', 'rb').read()"
                     ".replace(bytes(1), b' ').decode())\n")
    result = api(url, "vector_add", kernel.replace(anchor, dump, 1), {})
    seen = result["error"]["message"] + result["error"]["log"]
    assert f"HOME={INSIDE} " in seen, seen[-2000:]  # it read the environment, and that is the job's
    assert SECRET.split("=")[1] not in seen, "the server's environment reached a job"


@pytest.mark.image
def test_the_seccomp_profile_is_in_force(container):
    """add_key is one of the calls the profile refuses (the engine's own default profile may allow it)."""
    name, _, _ = container
    probe = ("import ctypes, os; libc = ctypes.CDLL(None, use_errno=True); "
             "r = libc.syscall(248, b'user', b'probe', b'x', 1, -2); print(r, ctypes.get_errno())")
    proc = in_container(name, ".venv/bin/python", "-c", probe)
    assert proc.stdout.split() == ["-1", "1"], f"add_key was not refused with EPERM: {proc.stdout} {proc.stderr}"


@pytest.mark.image
def test_the_data_volume_is_the_apps_to_write(container):
    name, _, data = container
    env = in_container(name, "printenv", "PLAYGROUND_DATA")
    assert env.stdout.strip() == "/data"
    wrote = in_container(name, "sh", "-c", "echo kept > /data/written-by-the-app")
    assert wrote.returncode == 0, wrote.stderr
    kept = Path(data) / "written-by-the-app"
    assert kept.read_text() == "kept\n" and kept.stat().st_uid == APP_UID


@pytest.mark.image
def test_the_readmes_backup_command_copies_the_class_database_while_the_server_runs(container):
    name, _, data = container
    # (this container runs without class settings, so it has no class database yet: a share link, as the page's
    # Share makes one, makes it; no roster, which would change the logins of the tests after this one)
    made = in_container(name, ".venv/bin/python", "-c", "from playground.store import Store; "
                        "print(Store('/data').put_share('gemm', '# kept\\n', {}))")
    assert made.returncode == 0, made.stderr
    ran = in_container(name, ".venv/bin/python", "-m", "playground", "backup", "/data/backups/2027-01-15.sqlite3")
    assert ran.returncode == 0 and "0 students on the roster" in ran.stdout, ran.stdout + ran.stderr
    copy = sqlite3.connect(Path(data) / "backups" / "2027-01-15.sqlite3")
    assert copy.execute("SELECT count(*) FROM shares").fetchone()[0] == 1
    copy.close()


@pytest.mark.image
def test_the_readmes_exercises_on_the_volume_are_the_ones_a_server_with_the_setting_reads(container):
    name, _, data = container
    copied = in_container(name, "cp", "-r", "exercises", "/data/exercises")
    assert copied.returncode == 0, copied.stderr
    read = in_container(name, "env", "PLAYGROUND_EXERCISES=/data/exercises", ".venv/bin/python", "-c",
                        "from playground.settings import Settings; from playground.course import load_exercises; "
                        "print(sorted(load_exercises(Settings.from_env().exercises_dir)))")
    assert read.returncode == 0 and "vector_add" in read.stdout, read.stdout + read.stderr
    assert (Path(data) / "exercises" / "vector_add" / "exercise.toml").is_file()


@pytest.mark.image
def test_the_browser_test_passes_against_the_containers_page(container):
    _, url, _ = container
    proc = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                           str(ROOT / "tests" / "test_browser.py")],
                          env={**os.environ, "PLAYGROUND_URL": url}, cwd=ROOT, capture_output=True, text=True,
                          timeout=1800)
    (ARTIFACTS / "image-browser-test.log").write_text(proc.stdout + proc.stderr)
    tail = (proc.stdout + proc.stderr)[-4000:]
    # A browser test that needs the page in its own process skips against a URL; the rest must pass.
    assert proc.returncode == 0 and " passed" in tail.strip().splitlines()[-1], tail


def test_the_seccomp_profile_is_what_its_generator_writes():
    """deploy/seccomp-bwrap.json is written by deploy/seccomp.py: an edit of one without the other fails here."""
    headers = [Path(h) for h in ("/usr/include/x86_64-linux-gnu/asm/unistd_64.h", "/usr/include/asm-generic/unistd.h")]
    if not all(h.exists() for h in headers):
        pytest.skip("the kernel's system call tables are not here (apt-get install linux-libc-dev)")
    proc = subprocess.run([sys.executable, str(ROOT / "deploy" / "seccomp.py")], capture_output=True, text=True,
                          check=True)
    assert json.loads(proc.stdout) == json.loads((ROOT / "deploy" / "seccomp-bwrap.json").read_text()), \
        "run: python3 deploy/seccomp.py > deploy/seccomp-bwrap.json"
