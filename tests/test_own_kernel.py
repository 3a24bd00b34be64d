"""A kernel of one's own on the page: the template is a kernel the engine reads and verifies, the controls come
from the described source (required arguments marked), a file with several kernels is read for a picker, and a run
without a reference is said to be timed, not verified, never shown with the green check."""
import pytest

from conftest import ROOT

pytestmark = pytest.mark.filterwarnings("ignore::pandas.errors.Pandas4Warning")

TEMPLATE = ROOT / "playground" / "ui" / "templates" / "new_kernel.py"


def test_the_template_is_a_verifiable_kernel_with_sizes_and_tile_controls():
    from playground.engine.kernel import loader
    from playground.ui import own_kernel
    d = loader.load(str(TEMPLATE)).describe()
    assert d["verified"] is True and d["required"] == [] and d["out_idx"] == [-1]
    c = own_kernel.controls({"ok": True, **d})
    assert [x.name for x in c.problem] == ["M", "N", "K"]
    assert {"block_M", "block_N", "block_K", "num_stages", "threads"} <= {x.name for x in c.tile}
    assert c.dtypes == ["float16", "bfloat16"] and c.dtype == "float16"


def test_a_kernel_of_ones_own_left_at_auto_gets_its_sources_defaults_and_a_typed_value_is_the_users():
    # The same "auto" tile controls as a shipped kernel's: left out of the request, the engine takes the source's
    # own defaults (no rule and no table for a kernel of one's own); a value typed in is sent as the user's.
    from types import SimpleNamespace
    from playground.engine.kernel import loader
    from playground.ui import controls as ctl, gateway, own_kernel, views
    kernel = loader.load(str(TEMPLATE))
    d = {"ok": True, **kernel.describe()}
    c = own_kernel.controls(d)
    assert all(x.auto and x.default == ctl.AUTO_TILE for x in c.tile)
    assert {x.name: x.factory for x in c.tile} == {n: str(v) for n, v in d["defaults"].items()
                                                   if n in {x.name for x in c.tile}}
    page = SimpleNamespace(dtype="dtype", arch="arch", editor="editor",
                           p_slots=[f"p{i}" for i in range(ctl.PROBLEM_SLOTS)],
                           t_slots=[f"t{i}" for i in range(ctl.TILE_SLOTS)])
    section = own_kernel.OwnKernel(page)
    section.own = "own"  # (the section's state, as its build makes it)
    data = {"own": {"source": TEMPLATE.read_text(), "entry": d["name"], "described": d}, "dtype": "float16",
            "arch": "auto", "editor": TEMPLATE.read_text(), **{s: None for s in page.p_slots + page.t_slots}}
    data.update({"p0": "256", "p1": "256", "p2": "256"})  # the sizes typed in; every tile slot left as it starts
    params = section.engine_params(data)
    assert params == {"M": "256", "N": "256", "K": "256", "dtype": "float16"}
    config = kernel.resolve(params).to_json()
    assert config["picked_by"] == "default" and config["set_by_user"] == []
    assert config["tile"] == {x.name: int(x.factory) for x in c.tile}
    result = gateway.call("compile", "", TEMPLATE.read_text(), params, arch="sm_90a")
    assert result["ok"], result.get("error")
    assert result["config"]["picked_by"] == "default" and "kernel's defaults" in views.tile_choice_text(
        result["config"])
    data["t0"] = "64"  # block_M typed in
    typed = section.engine_params(data)
    assert typed["block_M"] == "64" and set(typed) - set(params) == {"block_M"}
    config = kernel.resolve(typed).to_json()
    assert config["picked_by"] == "user" and config["tile"]["block_M"] == 64 and config["set_by_user"] == ["block_M"]


def test_required_arguments_are_controls_without_a_value_and_are_asked_for(tmp_path):
    from playground.engine.kernel import loader
    from playground.ui import own_kernel
    source = TEMPLATE.read_text().replace("M: int = 1024, N: int = 1024, K: int = 1024", "M: int, N: int, K: int")
    source = source.replace("PRESETS = ", "_UNUSED = ")
    file = tmp_path / "own_required.py"
    file.write_text(source)
    d = {"ok": True, **loader.load(str(file)).describe()}
    assert own_kernel.required(d) == ["M", "N", "K"]
    c = own_kernel.controls(d)
    assert [(x.name, x.default) for x in c.problem] == [("M", ""), ("N", ""), ("K", "")]
    note = own_kernel.note_html(d, c.defaults())
    assert "Give M, N, K" in note


def test_a_file_with_several_kernels_is_described_with_each_for_the_picker(tmp_path):
    from playground.engine.kernel import loader
    from playground.ui import own_kernel
    d = {"ok": True, **loader.load("", loader.builtin_source("softmax"), tmp_path).describe()}
    # (softmax_cluster, which softmax.py imports from softmax_long.py, is not a kernel of this file)
    assert own_kernel.entries(d) == ["softmax", "softmax_short_rows"]
    assert all(e["parameters"] and e["line"] for e in d["entries"])


def test_values_the_file_gives_are_shown_as_from_the_file_and_only_the_rest_asked_for(tmp_path):
    from playground.engine.kernel import loader
    from playground.ui import own_kernel
    source = TEMPLATE.read_text().replace("M: int = 1024, N: int = 1024, K: int = 1024", "M: int, N: int, K: int")
    source = source.replace("PRESETS = ", "_UNUSED = ") + "\n\nif __name__ == \"__main__\":\n    gemm_relu(M=512, N=256)\n"
    file = tmp_path / "own_from_file.py"
    file.write_text(source)
    d = {"ok": True, **loader.load(str(file)).describe()}
    assert own_kernel.required(d) == ["K"]
    c = own_kernel.controls(d)
    assert [(x.name, x.default) for x in c.problem] == [("M", "512"), ("N", "256"), ("K", "")]
    note = own_kernel.note_html(d, c.defaults())
    assert "From the file: M=512, N=256 (the call of the kernel in the __main__ block, line" in note
    assert "Give K" in note


def test_a_run_without_a_reference_is_timed_not_verified_never_a_green_check():
    from playground.ui import views
    note = "not verified: the file has no reference(*inputs) to compare the outputs with"
    result = {"ok": True, "kernel": "gemm_relu", "verified": False, "verification_note": note,
              "timing": {"median_ms": 0.05},
              "verification": [{"label": "256×256×256", "passed": True, "verified": False, "message": note}]}
    status = views.status_html("run", result)
    assert "timed, not verified" in status and "✓" not in status and "pg-status ok" not in status
    html = views.verification_html(result)
    assert "Timed, not verified" in html and "✓ pass" not in html and "pg-verdict good" not in html
    verified = {**result, "verified": True, "verification": [{"label": "256", "passed": True, "verified": True}]}
    assert "✓" in views.status_html("run", verified) and "✓ pass" in views.verification_html(verified)


@pytest.mark.gpu
def test_on_a_gpu_the_template_verifies_and_without_its_reference_is_timed_not_verified(tmp_path):
    from playground.engine.actions import execute
    from playground.ui import views
    source = TEMPLATE.read_text()
    sizes = {"M": 512, "N": 512, "K": 512}
    checked = execute("run", "", source, sizes, workdir=str(tmp_path / "checked"))
    assert checked["ok"] and checked["verified"] is True, checked.get("error")
    assert "✓" in views.status_html("run", checked) and "✓ pass" in views.verification_html(checked)
    unchecked = execute("run", "", source.replace("def reference(A, B):", "def expected(A, B):"), sizes,
                        workdir=str(tmp_path / "unchecked"))
    assert unchecked["ok"] and unchecked["verified"] is False and unchecked["timing"], unchecked.get("error")
    status, table = views.status_html("run", unchecked), views.verification_html(unchecked)
    assert "timed, not verified" in status and "✓" not in status
    assert "Timed, not verified" in table and "✓ pass" not in table
    print(f"template: {checked['timing']['median_ms']:.4f} ms verified; without reference: "
          f"{unchecked['timing']['median_ms']:.4f} ms, {status}")


def test_the_history_says_a_run_without_a_reference_was_timed_not_verified():
    from playground.ui import history
    run = {"ok": True, "verified": False, "timing": {"median_ms": 0.05},
           "verification": [{"label": "512", "passed": True, "verified": False}]}
    rows = history.frame(history.add([], "run", "my_kernel", run, True, {}, {}))
    assert list(rows["result"]) == ["timed, not verified"]
    rows = history.frame(history.add([], "run", "gemm", {**run, "verified": True}, False, {}, {}))
    assert list(rows["result"]) == ["ok"]


def test_a_file_requiring_more_arguments_than_the_sizes_row_holds_gets_a_control_for_each():
    from playground.ui import controls as ctl, own_kernel
    names = [f"a{i}" for i in range(ctl.PROBLEM_SLOTS + 2)]
    d = {"ok": True, "name": "k", "problem": names, "defaults": {}, "required": names,
         "parameters": [{"name": n, "kind": "int", "required": True} for n in names]}
    c = own_kernel.controls(d)
    assert len(c.problem) == ctl.PROBLEM_SLOTS and c.names == names


@pytest.mark.parametrize("name", ["gemm", "flash_attention", "softmax"])
def test_a_copy_of_a_shipped_kernel_is_its_factory_with_its_controls(tmp_path, name):
    """New kernel from a copy of gemm: sent as text (kernel.py), the file's factory, gemm, is named like no file and
    only calls its schedules; it was refused (several kernels, then gemm_pipelined refused for gemm's OPTIONS)."""
    from playground.engine.kernel import loader
    from playground.ui import own_kernel
    k = loader.load("", loader.builtin_source(name), tmp_path)
    d = {"ok": True, **k.describe()}
    assert k.name == name and not d["entry_needed"] and d["required"] == []
    shipped = loader.load(name)
    assert own_kernel.controls(d).names == shipped.problem_names + shipped.tile_names
    assert k.resolve({}).problem == {n: shipped.factory_defaults[n] for n in shipped.problem_names}
