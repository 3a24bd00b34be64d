"""One of each: the failed answer made by one function in the one JSON shape the README documents, the typed answers
covering what the engine answers, and one CUDA tool finder for the compile and the profiler. No process, no GPU."""
from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from conftest import ROOT
from playground.engine import answers
from playground.engine.answers import failed
from playground.engine.errors import StageError
from playground import settings
from playground.settings import Settings


def declared(kind) -> set[str]:
    """Every key a TypedDict declares, its bases' included."""
    return set(kind.__annotations__)


def test_a_failed_answer_is_the_readmes_shape_and_echoes_a_name_no_longer_than_a_name():
    answer = failed(StageError("busy", "the queue is full: try again in 5 s"), "compile", "gemm")
    assert answer == {"ok": False, "kernel": "gemm", "action": "compile",
                      "error": {"stage": "busy", "message": "the queue is full: try again in 5 s", "line": None,
                                "log": ""}}
    assert list(answer) == ["ok", "kernel", "action", "error"]
    assert list(answer["error"]) == ["stage", "message", "line", "log"]  # README: `{"stage", "message", "line", "log"}`
    assert json.loads(json.dumps(answer)) == answer
    assert failed(StageError("parameters", "no"), "compile", "x" * 10_000)["kernel"] == "x" * answers.NAME_ECHO
    # a class's answers are about no kernel: neither key, and what else they carry after the error
    assert failed(StageError("permission", "only the teacher may do this"), hidden=True) == {
        "ok": False, "error": {"stage": "permission", "message": "only the teacher may do this", "line": None,
                               "log": ""}, "hidden": True}
    with pytest.raises(AssertionError):
        StageError("no such stage", "x")


def test_nothing_in_the_playground_types_a_failed_answer_by_hand():
    """The error answer is made by answers.failed only (an error alone by StageError): no `"ok": False` beside an
    `"error"` dict typed out, no error's JSON written as a default."""
    wrong = []
    for path in (ROOT / "playground").rglob("*.py"):
        if path.name == "answers.py":  # (its docstring shows the shape)
            continue
        text = path.read_text()
        for needle in ('"error": {"stage"', "\"error\": {'stage'", '"ok": False, "kernel"', '"ok": False, "error": {',
                       'or {"stage"'):
            if needle in text:
                wrong.append(f"{path.relative_to(ROOT)}: {needle}")
    assert not wrong, wrong


def test_the_typed_answers_cover_what_a_run_tune_and_sweep_answered_on_a_gpu():
    """The page's sample answers (recorded from an H200's jobs) hold no key their TypedDict leaves out."""
    samples = json.loads((ROOT / "playground" / "ui" / "samples" / "h200.json").read_text())
    kinds = {"run_gemm": answers.RunAnswer, "run_gemm_bad": answers.RunAnswer, "run_vadd": answers.RunAnswer,
             "tune_gemm": answers.TuneAnswer, "sweep_gemm": answers.SweepAnswer}
    assert set(kinds) == set(samples)
    for name, kind in kinds.items():
        assert set(samples[name]) <= declared(kind), (name, set(samples[name]) - declared(kind))
    assert set(samples["run_gemm_bad"]["error"]) == declared(answers.ErrorJSON)
    assert declared(answers.CompileAnswer) < declared(answers.RunAnswer)


def fake_tool(folder: Path, name: str) -> str:
    path = folder / "bin" / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("#!/bin/sh\n")
    path.chmod(0o755)
    return str(path)


def test_the_profiler_finds_the_very_ptxas_the_compile_runs(tmp_path, monkeypatch):
    """TileLang's toolkit (where the compile's nvcc and ptxas come from) first; a full toolkit named by CUDA_HOME
    next, for the tools the nvcc wheel lacks (ncu). The profiler asks the same finder."""
    import sys
    import tilelang.env  # noqa: F401  (the module: the package's attribute `env` is an object of that module)
    from playground.engine import compile as compile_step, profile
    compiles, full = tmp_path / "tilelang-toolkit", tmp_path / "full-toolkit"
    ptxas = fake_tool(compiles, "ptxas")
    fake_tool(full, "ptxas")
    ncu = fake_tool(full, "ncu")
    monkeypatch.setattr(sys.modules["tilelang.env"], "CUDA_HOME", str(compiles))
    monkeypatch.setattr(settings, "_current", Settings.from_env({**os.environ, "CUDA_HOME": str(full)}))
    assert compile_step.find_cuda_tool("ptxas") == ptxas
    assert profile._need("ptxas") == ptxas  # (what the profiler runs over the PTX to map SASS to lines)
    assert compile_step.find_cuda_tool("ncu") == profile._need("ncu") == ncu
