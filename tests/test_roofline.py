"""The roofline (playground/ui/roofline.py) on run answers recorded on an H200 (playground/ui/samples/h200.json)."""
import json

import pytest

from conftest import ROOT
from playground.ui.roofline import roofline_figure, roofline_point

SAMPLES = json.loads((ROOT / "playground" / "ui" / "samples" / "h200.json").read_text())


def test_the_gemm_sits_under_the_tensor_core_roof_and_says_how_close():
    run = SAMPLES["run_gemm"]
    p = roofline_point(run)
    assert p["intensity"] == pytest.approx(run["flops"] / run["bytes"])
    assert p["intensity"] > p["ridge"] and p["bound"] == "tensor-core peak"
    peak = run["ceilings"]["matmul_tflops"][run["config"]["dtype"]]
    assert p["roof_tflops"] == pytest.approx(peak)
    assert p["percent"] == pytest.approx(100 * run["tflops"] / peak)
    cublas = p["baselines"]["torch.matmul (cuBLAS)"]
    assert cublas["percent"] == pytest.approx(100 * run["baselines"]["torch.matmul (cuBLAS)"]["tflops"] / peak)


def test_vector_add_sits_under_the_bandwidth_roof_and_the_figure_labels_its_share():
    run = SAMPLES["run_vadd"]
    p = roofline_point(run)
    assert p["intensity"] < p["ridge"] and p["bound"] == "bandwidth"
    limit = p["intensity"] * run["ceilings"]["copy_gbps"] / 1000
    assert p["percent"] == pytest.approx(100 * run["tflops"] / limit)
    # Under the bandwidth roof the share of the limit is the share of the measured copy bandwidth.
    assert p["percent"] == pytest.approx(run["percent_of_copy_bandwidth"])
    fig = roofline_figure(run)
    kernel = next(t for t in fig.data if t.name == "this kernel")
    assert kernel.text[0] == f"{p['percent']:.0f} % of the bandwidth limit"
    assert kernel.x[0] == pytest.approx(p["intensity"]) and kernel.y[0] == pytest.approx(run["tflops"])
    assert {t.name for t in fig.data} >= {"torch.add", "this kernel"}
    roof = next(t for t in fig.data if t.name.startswith("this GPU's roofs"))
    assert max(roof.y) == pytest.approx(p["peak_tflops"]) and fig.layout.xaxis.type == "log"


def test_no_roofline_without_a_timing_or_ceilings():
    assert roofline_point(SAMPLES["run_gemm_bad"]) is None and roofline_figure(None) is None
    assert roofline_point({**SAMPLES["run_vadd"], "ceilings": None}) is None
