"""Docker cannot run on the development machines or in CI, so this is the guard: the Dockerfile is parsed and held
to the Makefile (the one install recipe the README and CI use) and to what the app and the job layer expect."""
import re
import shlex

from conftest import ROOT

DOCKERFILE = (ROOT / "Dockerfile").read_text()
MAKEFILE = (ROOT / "Makefile").read_text()


def instructions(text: str) -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) with continuation lines joined and comments dropped."""
    out, current = [], ""
    for line in text.splitlines():
        if not current and (not line.strip() or line.lstrip().startswith("#")):
            continue
        if line.lstrip().startswith("#"):
            continue
        current += line.rstrip()
        if current.endswith("\\"):
            current = current[:-1] + " "
            continue
        word, _, rest = current.strip().partition(" ")
        out.append((word.upper(), rest.strip()))
        current = ""
    return out


def recipe(target: str) -> list[str]:
    """The recipe lines of a Makefile target."""
    m = re.search(rf"^{re.escape(target)}:[^\n]*\n((?:\t[^\n]*\n?)*)", MAKEFILE, re.M)
    assert m, f"the Makefile has no {target} target"
    return [ln.strip() for ln in m.group(1).splitlines()]


DOCKER = instructions(DOCKERFILE)
RUNS = [args for word, args in DOCKER if word == "RUN"]


def test_base_is_cuda_devel_or_slim_python():
    base = next(args for word, args in DOCKER if word == "FROM")
    assert re.match(r"nvidia/cuda:[\d.]+-(cudnn-)?devel-ubuntu", base) or re.match(r"python:3\.\d+-slim", base), base


def test_the_image_installs_the_app_with_the_makefiles_setup():
    setup = [r for r in RUNS if re.search(r"\bmake setup\b", r)]
    assert setup, "the Dockerfile must install with `make setup`, the command the README and CI use"
    copies = [args for word, args in DOCKER if word == "COPY"]
    first = DOCKER.index(next(i for i in DOCKER if i[0] == "RUN" and "make setup" in i[1]))
    copied_before = " ".join(args for word, args in DOCKER[:first] if word == "COPY")
    assert "Makefile" in copied_before and "requirements.txt" in copied_before, copies
    assert "$(VENV)/.app-installed" in MAKEFILE and "system-packages" in MAKEFILE.split("\nsetup:")[1].split("\n")[0]


def test_no_install_step_of_its_own_beside_make_setup():
    """Every pip package and the sandbox come through `make setup`; the image's own apt line only brings make and
    Python, so a package added to the Makefile reaches the image and CI alike."""
    for r in RUNS:
        assert "pip install" not in r and "bubblewrap" not in r, f"install it in the Makefile instead: {r}"
        if "apt-get install" in r:
            packages = set(re.findall(r"apt-get install[^&;]*", r)[0].split()[2:]) - {"-y", "--no-install-recommends"}
            assert packages <= {"make", "python3", "python3-venv", "python3-dev", "python3-pip", "ca-certificates",
                                "git"}, packages
    assert "bubblewrap" in " ".join(recipe("system-packages")) + MAKEFILE.split("APP_PACKAGES")[1].split("\n")[0]


def test_ci_runs_make_test_which_sets_up_the_same_way():
    ci = (ROOT / ".ci" / "run").read_text()
    assert "make test" in ci
    assert re.search(r"^setup-test:.*system-packages", MAKEFILE, re.M)


def test_runs_as_non_root_on_port_7860_on_all_interfaces():
    users = [args for word, args in DOCKER if word == "USER"]
    assert users and users[-1] not in ("root", "0"), users
    last_install = max(i for i, (w, a) in enumerate(DOCKER) if w == "RUN")
    assert DOCKER.index(("USER", users[-1])) > last_install, "USER must come after every install step"
    env = " ".join(args for word, args in DOCKER if word == "ENV")
    assert "GRADIO_SERVER_NAME=0.0.0.0" in env
    assert any(word == "EXPOSE" and "7860" in args for word, args in DOCKER)


def test_healthcheck_hits_health_with_a_start_period_covering_imports():
    hc = next(args for word, args in DOCKER if word == "HEALTHCHECK")
    period = re.search(r"--start-period=(\d+)s", hc)
    assert period and int(period.group(1)) >= 60, hc
    assert "localhost:7860/health" in hc


def test_cmd_is_what_make_run_runs():
    cmd = next(args for word, args in DOCKER if word == "CMD")
    argv = shlex.split(cmd.strip("[]").replace('",', '"'))
    make_run = recipe("run")
    assert make_run == ["$(PY) app.py"], make_run
    venv = re.search(r"^VENV\s*\?=\s*(\S+)", MAKEFILE, re.M).group(1)
    assert argv == [f"{venv}/bin/python", "app.py"], argv


def test_dockerignore_keeps_the_local_venv_and_git_out():
    ignored = (ROOT / ".dockerignore").read_text().split()
    assert ".venv" in ignored and ".git" in ignored
