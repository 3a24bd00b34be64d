"""Engine JSON → Plotly figures (gr.Plot renders them). Pure functions; no Gradio here.

Plotly because it draws asymmetric error bars (the p20–p80 whiskers) natively, its figures are interactive in the
page (hover shows the exact numbers), and Gradio's Plot component renders them with the plotly.js it bundles, so no
page fetches anything from the internet. Transparent backgrounds and a mid-grey font read on light and dark themes.
"""
from __future__ import annotations

import plotly.graph_objects as go

from .views import TUNE_RESULT_KEYS, esc

KERNEL_COLOR = "#f97316"     # the student's kernel: one colour everywhere
BASELINE_COLORS = ["#60a5fa", "#a78bfa", "#34d399", "#f472b6", "#facc15"]
FONT = dict(family="ui-sans-serif, system-ui, sans-serif", size=12, color="#8b949e")
GRID = "rgba(139,148,158,0.25)"


def chart_layout(fig: go.Figure, title: str, height: int = 320, **kw) -> go.Figure:
    fig.update_layout(title=dict(text=title, x=0.01, font=dict(size=14)), height=height, font=FONT,
                      paper_bgcolor="rgba(0,0,0,0)", plot_bgcolor="rgba(0,0,0,0)",
                      margin=dict(l=60, r=20, t=44, b=50), legend=dict(orientation="h", y=-0.2), **kw)
    fig.update_xaxes(gridcolor=GRID, zerolinecolor=GRID)
    fig.update_yaxes(gridcolor=GRID, zerolinecolor=GRID)
    return fig


def speed_figure(result: dict | None) -> go.Figure | None:
    """Median time of the kernel and of each baseline, whiskers from p20 to p80, TFLOP/s written on the bars."""
    t = (result or {}).get("timing")
    if not t:
        return None
    names, med, lo, hi, colors, text = [], [], [], [], [], []
    series = [("this kernel", {**t, "tflops": result.get("tflops"), "gbps": result.get("gbps")})]
    series += list((result.get("baselines") or {}).items())
    for i, (name, s) in enumerate(series):
        m = s.get("median_ms")
        if m is None:
            continue
        names.append(name)
        med.append(m)
        lo.append(max(0.0, m - (s.get("p20_ms") if s.get("p20_ms") is not None else m)))
        hi.append(max(0.0, (s.get("p80_ms") if s.get("p80_ms") is not None else m) - m))
        colors.append(KERNEL_COLOR if i == 0 else BASELINE_COLORS[(i - 1) % len(BASELINE_COLORS)])
        rate = s.get("tflops")
        text.append(f"{rate:.1f} TFLOP/s" if rate and rate >= 1 else f"{s.get('gbps') or 0:,.0f} GB/s")
    fig = go.Figure(go.Bar(
        x=[esc(n) for n in names], y=med, marker_color=colors, text=text, textposition="inside",
        insidetextanchor="middle",
        textfont=dict(color="white", size=13),
        error_y=dict(type="data", symmetric=False, array=hi, arrayminus=lo, color="#8b949e", thickness=1.5,
                     width=8),
        hovertemplate="%{x}<br>median %{y:.4f} ms<br>%{text}<extra></extra>"))
    fig.update_yaxes(title_text="time per call (ms), lower is better", rangemode="tozero")
    return chart_layout(fig, "Kernel vs baselines: median with p20–p80", showlegend=False)


def sweep_figure(result: dict | None, metric: str = "tflops") -> go.Figure | None:
    """One line per series (the kernel, each baseline) over the problem sizes: TFLOP/s, GB/s or time."""
    rows = [r for r in (result or {}).get("rows") or [] if r.get("series")]
    if not rows:
        return None
    labels = [r["label"] for r in rows]
    names: list[str] = []
    for r in rows:
        names += [n for n in r["series"] if n not in names]
    fig = go.Figure()
    for i, name in enumerate(names):
        ys, err_lo, err_hi = [], [], []
        for r in rows:
            s = r["series"].get(name) or {}
            if metric == "median_ms":
                m = s.get("median_ms")
                ys.append(m)
                err_lo.append(m - s["p20_ms"] if m is not None and s.get("p20_ms") is not None else 0)
                err_hi.append(s["p80_ms"] - m if m is not None and s.get("p80_ms") is not None else 0)
            else:
                ys.append(s.get(metric))
        color = KERNEL_COLOR if name == "kernel" else BASELINE_COLORS[i % len(BASELINE_COLORS)]
        fig.add_trace(go.Scatter(
            x=[esc(v) for v in labels], y=ys, mode="lines+markers",
            name="this kernel" if name == "kernel" else esc(name),
            line=dict(color=color, width=2.5 if name == "kernel" else 1.8),
            error_y=dict(type="data", symmetric=False, array=err_hi, arrayminus=err_lo, thickness=1)
            if metric == "median_ms" else None))
    title = {"tflops": "TFLOP/s", "gbps": "GB/s", "median_ms": "time per call (ms)"}.get(metric, metric)
    fig.update_yaxes(title_text=title, rangemode="tozero")
    fig.update_xaxes(title_text="problem size")
    return chart_layout(fig, f"Size sweep: {title}", height=340)


def history_figure(history: list[dict]) -> go.Figure | None:
    """Each timed run of the session in order: its median time (and TFLOP/s on hover), the best so far marked."""
    runs = [h for h in history or [] if h.get("median_ms") is not None]
    if not runs:
        return None
    x = [f"#{h['n']}" for h in runs]
    y = [h["median_ms"] for h in runs]
    best = min(range(len(y)), key=y.__getitem__)
    fig = go.Figure(go.Scatter(
        x=x, y=y, mode="lines+markers", line=dict(color=KERNEL_COLOR, width=2),
        marker=dict(size=[14 if i == best else 8 for i in range(len(y))],
                    symbol=["star" if i == best else "circle" for i in range(len(y))]),
        text=[esc(h.get("label", "")) for h in runs],
        customdata=[h.get("tflops") or 0 for h in runs],
        hovertemplate="%{x}: %{y:.4f} ms, %{customdata:.1f} TFLOP/s<br>%{text}<extra></extra>"))
    fig.update_yaxes(title_text="median time (ms)", rangemode="tozero")
    fig.update_xaxes(title_text="run of this session")
    return chart_layout(fig, "This session's runs (★ fastest)", height=280, showlegend=False)


def tune_figure(result: dict | None) -> go.Figure | None:
    """The verified configurations, fastest first, as bars of TFLOP/s (or GB/s), the best highlighted. A bar per
    kernel: a candidate that compiled into the same kernel as another (tune.twin_row) is that one's bar."""
    rows = [r for r in (result or {}).get("table") or []
            if r.get("median_ms") is not None and r.get("same_kernel_as") is None]
    if not rows:
        return None
    rows = sorted(rows, key=lambda r: r["median_ms"])[:30]
    space = [k for k in rows[0] if k not in TUNE_RESULT_KEYS]
    labels = [esc("/".join(str(r[k]) for k in space)) for r in rows]
    use_tflops = any((r.get("tflops") or 0) >= 1 for r in rows)
    values = [r.get("tflops") if use_tflops else r.get("gbps") for r in rows]
    colors = [KERNEL_COLOR if i == 0 else BASELINE_COLORS[0] for i in range(len(rows))]
    fig = go.Figure(go.Bar(
        x=labels, y=values, marker_color=colors, customdata=[r["median_ms"] for r in rows],
        hovertemplate="%{x}<br>%{y:.1f} " + ("TFLOP/s" if use_tflops else "GB/s") +
                      ", %{customdata:.4f} ms<extra></extra>"))
    fig.update_yaxes(title_text="TFLOP/s" if use_tflops else "GB/s", rangemode="tozero")
    fig.update_xaxes(title_text=" / ".join(space), tickangle=-40)
    return chart_layout(fig, "Configurations tried (verified ones, fastest first)", height=340, showlegend=False)
