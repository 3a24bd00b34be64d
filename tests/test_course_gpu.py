"""On a GPU: a real submission graded through the job layer and put on the board with the GPU it ran on, its share of
the timed problem's speed of light there, and the measurement record (clocks, temperature, throttle reasons, driver,
TileLang). The class's rules only (playground/course/, no Gradio): this runs wherever the engine and the jobs do.

    python -m pytest -m gpu -v -s tests/test_course_gpu.py     (PLAYGROUND_SANDBOX=none where there is no bubblewrap)
"""
from __future__ import annotations

import json

import pytest

from playground.course import Classroom, load_exercises
from playground.settings import Settings

pytestmark = [pytest.mark.gpu, pytest.mark.timeout(900)]  # (skipped without a GPU: conftest.py)


def test_a_graded_submission_is_on_the_board_with_its_gpu_speed_of_light_share_and_record(tmp_path, record_property):
    room = Classroom(Settings.from_env().replace(data_dir=tmp_path, teacher_password="teacher-secret"))
    ex = load_exercises()["vector_add"]
    answer = room.submit("Ada", "vector_add", ex.starter, {"block_N": "2048", "threads": "256"})
    record_property("graded", json.dumps({k: answer.get(k) for k in ("ok", "median_ms", "gpu", "sol_percent",
                                                                      "message", "error", "record")}))
    print("\nSUMMARY course grade:", json.dumps({k: answer.get(k) for k in ("median_ms", "gpu", "sol_percent",
                                                                           "record")}))
    assert answer["ok"], answer.get("error")
    assert answer["gpu"].startswith("NVIDIA") and 1 < answer["sol_percent"] < 150
    assert "% of the speed of light there" in answer["message"]

    (row,) = room.leaderboard("vector_add")["rows"]
    assert (row["student"], row["gpu"], row["sol_percent"]) == ("Ada", answer["gpu"], answer["sol_percent"])
    record = row["record"]
    assert record["name"] == answer["gpu"] and record["driver"] and record["tilelang"]
    assert record["clocks_mhz"]["sm"] > 0 and record["clocks_mhz"]["memory"] > 0
    assert record["temperature_c"] is not None and isinstance(record["throttle_reasons"], list)
    assert record["ceilings"]["copy_gbps"] > 100 and record["ceilings"]["matmul_tflops"]["float16"] > 10
    # the share is the kernel's bytes at the measured copy bandwidth: vector add moves 3 * N * 2 bytes
    n = ex.timed["N"]
    bound_ms = 3 * n * 2 / (record["ceilings"]["copy_gbps"] * 1e6)
    assert row["sol_percent"] == pytest.approx(100 * bound_ms / row["median_ms"], rel=1e-6)


def test_the_teachers_re_run_measures_a_kept_submission_again_without_keeping_another(tmp_path, record_property):
    room = Classroom(Settings.from_env().replace(data_dir=tmp_path, teacher_password="teacher-secret"))
    kept = room.store.add_submission("vector_add", "Ada", load_exercises()["vector_add"].starter, {"block_N": 2048},
                                     accepted=True, median_ms=1.0, message="kept earlier")
    assert room.rerun("Ada", "", kept)["error"]["stage"] == "permission"
    again = room.rerun("teacher", "", kept)
    record_property("re-run", json.dumps({k: again.get(k) for k in ("ok", "median_ms", "sol_percent", "error")}))
    print("\nSUMMARY course re-run:", json.dumps({k: again.get(k) for k in ("median_ms", "gpu", "sol_percent")}))
    assert again["ok"] and again["rerun_of"]["id"] == kept and again["sol_percent"] > 1
    assert len(room.store.submissions()) == 1
