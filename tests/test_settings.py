"""Settings in one place: one module reads the environment, the README's table is the dataclass's, and a setting
given to the server reaches the job it starts (the process limit, through the real job layer)."""
import os
import ast
import dataclasses
import errno
import json
from pathlib import Path

import pytest

from conftest import ROOT
from playground.jobs.job import Job
from playground.settings import Settings, SettingsError, markdown_table

VECTOR_ADD = (ROOT / "kernels" / "vector_add.py").read_text()


def environment_readers() -> list[str]:
    """Files of app.py + playground/ that touch os.environ or os.getenv (read, write or pass it on)."""
    found = []
    for path in [ROOT / "app.py", *sorted((ROOT / "playground").rglob("*.py"))]:
        tree = ast.parse(path.read_text())
        for node in ast.walk(tree):
            if isinstance(node, ast.Attribute) and node.attr in ("environ", "getenv", "environb") and \
                    isinstance(node.value, ast.Name) and node.value.id == "os":
                found.append(str(path.relative_to(ROOT)))
                break
            if isinstance(node, ast.ImportFrom) and node.module == "os" and \
                    {a.name for a in node.names} & {"environ", "getenv"}:
                found.append(str(path.relative_to(ROOT)))
                break
    return found


def test_only_the_settings_module_reads_the_environment():
    assert environment_readers() == ["playground/settings.py"]


def test_readme_lists_exactly_the_settings_with_their_variables_and_defaults():
    readme = (ROOT / "README.md").read_text()
    table = markdown_table()
    assert table in readme, "README.md's table of settings differs from playground/settings.py: " \
                            "paste the output of `python -m playground.settings` over it"
    rows = [ln for ln in table.splitlines()[2:]]
    assert [r.split("|")[1].strip().strip("`") for r in rows] == [f.name for f in dataclasses.fields(Settings)]
    for f in dataclasses.fields(Settings):
        assert f.metadata["env"] and f.metadata["doc"], f"{f.name} has no variable or no description"


def test_settings_come_from_the_environment_given_and_bad_values_are_named():
    s = Settings.from_env({"PLAYGROUND_PROCESSES": "64", "PLAYGROUND_NO_GPU": "1", "PLAYGROUND_CPU_SLOTS": "",
                           "PLAYGROUND_SESSION_RATE": "2.5", "PLAYGROUND_JOBS_DIR": "/srv/jobs", "HOME": "/x"})
    assert (s.processes, s.no_gpu, s.cpu_slots, s.session_rate, s.jobs_dir) == (64, True, None, 2.5,
                                                                                 Path("/srv/jobs"))
    assert Settings.from_env({}) == Settings()
    assert Settings.from_env(s.to_env("processes", "no_gpu")).processes == 64
    with pytest.raises(SettingsError, match="PLAYGROUND_PROCESSES='lots'"):
        Settings.from_env({"PLAYGROUND_PROCESSES": "lots"})
    assert "hunter2" not in repr(Settings.from_env({"PLAYGROUND_PASSWORD": "hunter2"}))
    with pytest.raises(dataclasses.FrozenInstanceError):
        s.processes = 1


# A job that starts as many threads as it can (threads are tasks, which RLIMIT_NPROC counts with processes), then
# forks children that stay alive until a fork is refused; it answers with what it saw, as an error message.
COUNT_TASKS = '''
import json, os, resource, threading
stop = threading.Event()
started = 0
try:
    for _ in range(TRY):
        threading.Thread(target=stop.wait, daemon=True).start()
        started += 1
except RuntimeError:
    pass
gate_r, gate_w = os.pipe()
children, refused = [], None
for _ in range(20):
    try:
        pid = os.fork()
    except OSError as exc:
        refused = exc.errno
        break
    if pid == 0:
        os.close(gate_w)
        os.read(gate_r, 1)  # until the parent closes its end
        os._exit(0)
    children.append(pid)
threads = int(next(l for l in open("/proc/self/status") if l.startswith("Threads:")).split()[1])
os.close(gate_w)
for pid in children:
    os.waitpid(pid, 0)
stop.set()
raise RuntimeError("SEEN" + json.dumps({"started": started, "tasks": threads + len(children),
                                        "forked": len(children), "refused": refused,
                                        "limit": resource.getrlimit(resource.RLIMIT_NPROC)[0]}))
'''


def seen_by_job(settings: Settings, tries: int) -> dict:
    text = VECTOR_ADD.replace("import tilelang.language as T\n",
                              "import tilelang.language as T\n" + COUNT_TASKS.replace("TRY", str(tries)), 1)
    job = Job(False, None, settings)
    try:
        assert job.wait_ready(settings.ready_timeout), job.log()
        result = job.run({"action": "compile", "kernel": "vector_add", "source": text, "params": {},
                          "arch": "sm_90a", "options": {}}, 60, lambda *_: None)
    finally:
        job.close()
    message = result["error"]["message"]
    assert "SEEN" in message, result["error"]
    return json.loads(message.split("SEEN", 1)[1])


@pytest.mark.timeout(300)
def test_the_process_limit_of_the_settings_reaches_the_job_and_holds():
    base = Settings.from_env()
    small = seen_by_job(base.replace(processes=48), 400)
    assert small["limit"] == 48 and small["started"] < 48, small
    assert small["refused"] == errno.EAGAIN, f"a job at its process limit of 48 forked on: {small}"
    assert small["tasks"] <= 48, small
    roomy = seen_by_job(base.replace(processes=512), 100)
    assert roomy["limit"] == 512 and roomy["started"] == 100, roomy
    assert roomy["forked"] == 20 and roomy["refused"] is None, roomy


def test_compiles_at_once_are_the_cpu_slots_setting_else_the_cores_this_process_may_use(monkeypatch):
    # One number for the job queue's compile slots and a tuning run's parallel compile inside a job.
    from playground.engine.parallel_compile import default_workers
    assert Settings(cpu_slots=3).compile_processes == 3
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {0, 1}, raising=False)  # a container's 2 of 64 cores
    assert Settings().compile_processes == 2
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: set(range(64)), raising=False)
    assert Settings().compile_processes == 16
    import playground.settings as settings_module
    monkeypatch.setattr(settings_module, "_current", Settings(cpu_slots=5))  # as a job's worker installs its own
    assert default_workers() == 5
