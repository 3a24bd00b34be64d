"""The lowering view: TileLang's own pass instrumentation gives the IR after each pass, no GPU needed."""
import json
import subprocess
import sys

import pytest

from conftest import ROOT
from playground.engine.ir import fold_unchanged, lower_passes
from playground.engine.kernel import loader


@pytest.mark.parametrize("name", loader.builtin_names())
def test_every_shipped_kernel_shows_its_lowering_pass_by_pass(name):
    kernel = loader.load(name)
    result = lower_passes(kernel, kernel.default_config(), "sm_90a")
    passes = result["passes"]
    assert result["ok"] and passes[0]["name"] == "TileLang program"
    names = [p["name"] for p in passes]
    # The passes that shape every kernel appear, in pipeline order.
    for earlier, later in (("tl.LayoutInference", "tl.LowerTileOp"), ("tl.LowerTileOp", "tl.SplitHostDevice")):
        assert earlier in names and later in names and names.index(earlier) < names.index(later), names
    # Each kept pass changed the IR; the ones that did not are folded, and every pass run is accounted for.
    assert all(a["ir"] != b["ir"] for a, b in zip(passes, passes[1:]))
    assert sum(1 + len(p["folded"]) for p in passes[1:]) + len(result["unchanged_at_end"]) == result["pass_count"]
    assert any(p["folded"] for p in passes), "some passes change nothing on any kernel"


def test_fold_unchanged_keeps_changes_and_names_what_it_folded():
    passes = [{"name": "a", "ir": "x"}, {"name": "b", "ir": "y"}, {"name": "c", "ir": "y"}, {"name": "d", "ir": "z"}]
    out, at_end = fold_unchanged("x", passes + [{"name": "e", "ir": "z"}])
    assert [(p["name"], p["folded"]) for p in out] == [("b", ["a"]), ("d", ["c"])] and at_end == ["e"]


def test_ir_on_the_command_line_for_an_edited_kernel(tmp_path):
    edited = tmp_path / "gemm_edit.py"
    edited.write_text((ROOT / "kernels" / "gemm.py").read_text() + "\n# my edit\n")
    out = subprocess.run([sys.executable, "-m", "playground", "ir", "gemm", "--source", str(edited), "--arch",
                          "sm_90a", "--set", "M=256", "--set", "N=256", "--set", "K=256", "--json"],
                         cwd=ROOT, capture_output=True, text=True, timeout=600)
    result = json.loads(out.stdout)
    assert out.returncode == 0 and result["ok"], out.stderr[-2000:]
    assert result["source_file"] != str(ROOT / "kernels" / "gemm.py"), "the edited copy was lowered"
    ir = {p["name"]: p["ir"] for p in result["passes"]}
    # What the student wrote is there first; tile-op lowering turns its T.copy tiles into loops and copies.
    assert "T.copy(" in ir["TileLang program"] and "T.copy(" not in ir["tl.LowerTileOp"]


def test_an_ir_error_points_at_the_users_line(tmp_path):
    bad = tmp_path / "vector_add_bad.py"
    text = (ROOT / "kernels" / "vector_add.py").read_text()
    bad.write_text(text.replace("def vector_add(", "def vector_add(\n", 1).replace("T.Kernel(", "T.Kernel(undefined_name, ", 1))
    out = subprocess.run([sys.executable, "-m", "playground", "ir", "vector_add", "--source", str(bad), "--arch",
                          "sm_90a", "--json"], cwd=ROOT, capture_output=True, text=True, timeout=600)
    result = json.loads(out.stdout)
    assert out.returncode != 0 and not result["ok"]
    assert result["error"]["line"] and "undefined_name" in bad.read_text().splitlines()[result["error"]["line"] - 1]
