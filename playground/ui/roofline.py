"""A run on the GPU's roofline: how far the kernel is from the limit that applies to it. Pure functions of a run
answer; the figure is Plotly, drawn like charts.py's.

Arithmetic intensity is the kernel file's own FLOP count over its byte count (`flops`, `bytes` of the run answer:
the fewest bytes one call must move). The roofs are what the engine measured on this GPU (`ceilings`): the copy
bandwidth (a sloped roof, TFLOP/s = intensity × GB/s / 1000) and cuBLAS's matmul rate for the dtype (a flat roof,
the tensor cores' practical peak). The limit at the kernel's intensity is the lower of the two; the kernel's share
of it is what the point's label says ("84 % of the bandwidth limit"). The baselines solve the same problem, so they
sit at the same intensity, beside the kernel.
"""
from __future__ import annotations

import math

import plotly.graph_objects as go

from .charts import BASELINE_COLORS, KERNEL_COLOR, chart_layout
from .views import esc

ROOF_COLOR = "#8b949e"


def _matmul_peak(ceilings: dict, dtype: str | None) -> float | None:
    rates = ceilings.get("matmul_tflops") or {}
    return rates.get(dtype or "") or rates.get("float16") or (max(rates.values()) if rates else None)


def roofline_point(result: dict | None) -> dict | None:
    """{"intensity" (FLOP/byte), "tflops", "roof_tflops", "bound": "bandwidth" | "tensor-core peak", "percent",
    "ridge" (the intensity where the roofs meet), "copy_gbps", "peak_tflops", "baselines": {name: {"tflops",
    "percent"}}}, or None when the answer lacks a timing or the GPU's ceilings."""
    r = result or {}
    ceilings, flops, nbytes, tflops = r.get("ceilings") or {}, r.get("flops"), r.get("bytes"), r.get("tflops")
    bandwidth = ceilings.get("copy_gbps")
    peak = _matmul_peak(ceilings, (r.get("config") or {}).get("dtype"))
    if not (bandwidth and peak and flops and nbytes and tflops is not None):
        return None
    intensity = flops / nbytes

    def roof(x: float) -> tuple[float, str]:
        memory = x * bandwidth / 1000
        return (memory, "bandwidth") if memory < peak else (peak, "tensor-core peak")

    roof_tflops, bound = roof(intensity)
    baselines = {name: {"tflops": b.get("tflops"), "percent": 100 * b["tflops"] / roof_tflops}
                 for name, b in (r.get("baselines") or {}).items() if b.get("tflops") is not None}
    return {"intensity": intensity, "tflops": tflops, "roof_tflops": roof_tflops, "bound": bound,
            "percent": 100 * tflops / roof_tflops, "ridge": peak * 1000 / bandwidth, "copy_gbps": bandwidth,
            "peak_tflops": peak, "baselines": baselines}


def roofline_label(point: dict) -> str:
    return f"{point['percent']:.0f} % of the {point['bound']} limit"


def roofline_figure(result: dict | None) -> go.Figure | None:
    """The roofs (log-log), the kernel's point labelled with its share of the limit, the baselines beside it."""
    p = roofline_point(result)
    if p is None:
        return None
    lo = min(p["intensity"], p["ridge"]) / 20
    hi = max(p["intensity"], p["ridge"]) * 20
    xs = [lo * (hi / lo) ** (i / 120) for i in range(121)] + [p["ridge"]]
    xs.sort()
    ys = [min(x * p["copy_gbps"] / 1000, p["peak_tflops"]) for x in xs]
    fig = go.Figure()
    fig.add_trace(go.Scatter(
        x=xs, y=ys, mode="lines", name="this GPU's roofs (measured)", line=dict(color=ROOF_COLOR, width=2),
        hovertemplate="intensity %{x:.3g} FLOP/B<br>limit %{y:.3g} TFLOP/s<extra></extra>"))
    names = list(p["baselines"])
    for i, name in enumerate(names):
        b = p["baselines"][name]
        name = esc(name)  # (Plotly draws <a>, <b> and styles in a name: it is the answer's text)
        fig.add_trace(go.Scatter(
            x=[p["intensity"]], y=[b["tflops"]], mode="markers", name=name,
            marker=dict(size=11, symbol="diamond", color=BASELINE_COLORS[i % len(BASELINE_COLORS)]),
            hovertemplate=f"{name}<br>%{{y:.3g}} TFLOP/s, {b['percent']:.0f} % of the limit<extra></extra>"))
    fig.add_trace(go.Scatter(
        x=[p["intensity"]], y=[p["tflops"]], mode="markers+text", name="this kernel",
        marker=dict(size=14, color=KERNEL_COLOR, line=dict(color="white", width=1)),
        text=[roofline_label(p)], textposition="middle left", textfont=dict(color=KERNEL_COLOR, size=13),
        hovertemplate="this kernel<br>intensity %{x:.3g} FLOP/B<br>%{y:.3g} TFLOP/s<extra></extra>"))
    fig.add_annotation(x=math.log10(p["ridge"]), y=math.log10(p["peak_tflops"]), text="ridge", showarrow=False,
                       yshift=10, font=dict(size=11, color=ROOF_COLOR))
    fig.update_xaxes(type="log", title_text="arithmetic intensity (FLOP per byte moved)")
    fig.update_yaxes(type="log", title_text="TFLOP/s")
    title = (f"Roofline: {roofline_label(p)} (copy {p['copy_gbps']:,.0f} GB/s, "
             f"matmul {p['peak_tflops']:.0f} TFLOP/s, measured)")
    return chart_layout(fig, title, height=360)
