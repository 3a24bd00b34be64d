import os
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

# The tests that edit kernels/gemm.py edit its first, T.Pipelined, schedule, and compile or run that one.
GEMM = (ROOT / "kernels" / "gemm.py").read_text()
PIPELINED = {"warp_specialized": False}


def has_gpu() -> bool:
    try:
        import torch
        return torch.cuda.is_available()
    except Exception:
        return False


def pytest_collection_modifyitems(config, items):
    if has_gpu():
        return
    skip = pytest.mark.skip(reason="needs a CUDA GPU (none on this machine)")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)


@pytest.fixture(autouse=True, scope="session")
def _private_cache(tmp_path_factory):
    """Tests compile into their own cache folders, so a stale cache can neither hide nor cause a failure; and keep
    their data (a tuning run's best config, the class's database) in a folder of their own, not in ./data."""
    if "PLAYGROUND_CACHE_DIR" not in os.environ:
        os.environ["PLAYGROUND_CACHE_DIR"] = str(tmp_path_factory.mktemp("playground-cache"))
    if "PLAYGROUND_DATA" not in os.environ:
        os.environ["PLAYGROUND_DATA"] = str(tmp_path_factory.mktemp("playground-data"))
    # A server started by a test compiles no shipped kernels ahead of it (the pre-warm's own test asks for one):
    # the suite's timings on two cores are the tests' own.
    os.environ.setdefault("PLAYGROUND_PREWARM", "0")
    # Nor more spare workers than a test's few compiles use: each is about 5 s of CPU to start, and the suite starts
    # dozens of servers (the spares' default is for a class's burst of compiles).
    os.environ.setdefault("PLAYGROUND_SPARES", "3")
    yield


def pytest_terminal_summary(terminalreporter):
    """Print the figures the GPU tests recorded (`record_property("gpu_summary", ...)`): one line per timed kernel."""
    lines = [value for report in terminalreporter.stats.get("passed", [])
             if report.when == "call" for name, value in report.user_properties if name == "gpu_summary"]
    if lines:
        terminalreporter.section("GPU timings")
        for line in lines:
            terminalreporter.write_line("SUMMARY " + line)


# -- the browser the page's end-to-end tests drive ----------------------------------------------------------------
CHROMIUM = os.environ.get("PLAYGROUND_CHROMIUM", "/usr/bin/chromium")
ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
        "--disable-background-networking", "--disable-component-update", "--disable-sync"]


def need_browser() -> None:
    """Skip the calling fixture's tests where chromium or playwright is missing (make setup-test installs both)."""
    import shutil
    if not (Path(CHROMIUM).exists() or shutil.which(CHROMIUM)):
        pytest.skip(f"chromium is not installed at {CHROMIUM} (apt-get install chromium; make setup-test does)")
    pytest.importorskip("playwright.sync_api", reason="playwright is not installed (requirements-dev.txt)")


def launch_browser(playwright):
    """Headless chromium, talking to nothing but the page under test."""
    return playwright.chromium.launch(executable_path=CHROMIUM, args=ARGS, timeout=60_000)
