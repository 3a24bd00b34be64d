"""A small version of the load test (tests/load/load_test.py) in CI: a few concurrent gradio_client sessions
compiling through the real app for a few seconds; no failed request and nothing left behind."""
import importlib.util
from pathlib import Path

import pytest

from conftest import ROOT

APP = ROOT / "app.py"


def load_test_module():
    spec = importlib.util.spec_from_file_location("load_test", ROOT / "tests" / "load" / "load_test.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.skipif(not APP.exists(), reason="app.py is not there yet")
@pytest.mark.timeout(600)
def test_a_few_sessions_compile_at_once_without_failures_or_leaks():
    report = load_test_module().run(sessions=4, seconds=10, out=None)
    assert report["requests"] >= 4
    assert report["failed"] == 0, report["failures"]
    log_tail = Path(report["app_log"]).read_text()[-3000:]
    assert report["leaked_processes"] == [], (report["leaked_processes"], log_tail)
    assert not report["leaked_job_folder"], (report["leaked_job_folder"], log_tail)
    assert report["cached_answers"] > 0, "repeated requests must come from the result cache"
