"""The "Profile" tab: Nsight Compute's profile and compute-sanitizer's checks (playground/engine/profile.py) as HTML.
Pure functions of the engine's JSON; everything from the tools or the user's source is escaped.

The table a student reads first is "where the warps wait": the stall samples of every SASS instruction added up per
line of their TileLang source, with the reasons (long scoreboard = waiting for global memory, barrier, ...).
"""
from __future__ import annotations

import base64
import html

SOL = ("Duration", "Compute (SM) Throughput", "Memory Throughput", "DRAM Throughput", "L1/TEX Cache Throughput",
       "L2 Cache Throughput")
TOP_LINES = 15


def _esc(value) -> str:
    return html.escape("" if value is None else str(value))


def _value(metric: dict) -> str:
    v = metric.get("value")
    text = f"{v:,.4g}" if isinstance(v, float) else str(v)
    return f"{text} {metric.get('unit') or ''}".strip()


def _table(headers: list[str], rows: list[list[str]], cls: str = "") -> str:
    head = "".join(f"<th>{h}</th>" for h in headers)
    body = "".join("<tr>" + "".join(f"<td>{c}</td>" for c in row) + "</tr>" for row in rows)
    return f'<table class="pg-table {cls}"><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>'


def _bar(share: float) -> str:
    pct = max(0.0, min(100.0, 100 * share))
    return (f'<span class="pg-bar" style="display:inline-block;width:80px;height:8px;background:rgba(139,148,158,.25);'
            f'margin-right:6px"><span style="display:block;height:8px;width:{pct:.0f}%;background:#f97316">'
            f'</span></span>{pct:.1f} %')


def _error(result: dict, what: str) -> str:
    err = result.get("error") or {}
    where = f" (line {err['line']})" if err.get("line") else ""
    return (f'<div class="pg-error-box"><b>{_esc(what)}: {_esc(err.get("stage", "error"))}{_esc(where)}</b>: '
            f'{_esc(err.get("message", ""))}</div>')


def _line_cell(line) -> str:
    """A line of the file in the editor links to it; "module.py:N" (a kernel module the file imports) is named."""
    if isinstance(line, int):
        return f'<a class="pg-src-link" data-line="{line}">{line}</a>'
    if line:
        return f'<span title="a line of a kernel module your file imports">{_esc(line)}</span>'
    return "–"


def profile_html(result: dict | None) -> str:
    if not result:
        return ('<div class="pg-placeholder">Click “Profile” to run the kernel once under Nsight Compute (needs the '
                'GPU): where its warps wait, per line of your source.</div>')
    if not result.get("ok"):
        return _error(result, "Profile")
    details = result.get("details") or {}
    sections = details.get("sections") or {}
    meaning = result.get("stall_meaning") or {}
    out = [f'<div class="pg-meta">{_esc(result.get("kernel"))} · function {_esc(result.get("function"))} · grid '
           f'{_esc(details.get("grid"))} · block {_esc(details.get("block"))} · Nsight Compute '
           f'{_esc(result.get("ncu"))}, clocks not locked (as the kernel runs)</div>']
    sol = {m["name"]: m for m in sections.get("GPU Speed Of Light Throughput", [])}
    cards = [(name, _value(sol[name])) for name in SOL if name in sol]
    if cards:
        out.append('<div class="pg-cards">' + "".join(
            f'<div class="pg-card"><div class="k">{_esc(k)}</div><div class="v">{_esc(v)}</div></div>'
            for k, v in cards) + "</div>")

    src = result.get("source") or {}
    lines = src.get("lines") or []
    if lines:
        rows = []
        for e in lines[:TOP_LINES]:
            reasons = ", ".join(
                f'<span title="{_esc(meaning.get(k, k))}">{_esc(k)} {v / (e["samples"] or 1):.0%}</span>'
                for k, v in list(e["stalls"].items())[:3])
            rows.append([_line_cell(e["line"]),
                         f"<code>{_esc(e.get('code'))}</code>", _bar(e["share"]), reasons or "–",
                         f"<code>{_esc(e.get('top'))}</code>"])
        mapped = src.get("mapped_share")
        note = (f"{mapped:.0%} of the samples fall on a line of your source (or of a kernel module it imports, "
                f"named by file); the rest on code TileLang generated around it." if mapped is not None else "")
        out.append("<h4>Where the warps wait, per line of your source</h4>")
        out.append(_table(["line", "source", "share of stall samples", "why (top reasons)", "hottest instruction"],
                          rows, "pg-profile-lines"))
        out.append(f'<div class="pg-meta">{_esc(note)} Reasons: hover for what each means.</div>')

    reasons = result.get("stall_reasons") or {}
    if reasons:
        total = sum(reasons.values()) or 1.0
        rows = [[f'<span title="{_esc(meaning.get(k, ""))}">{_esc(k)}</span>', _esc(f"{v:.2f}"), _bar(v / total),
                 _esc(meaning.get(k, ""))] for k, v in list(reasons.items())[:10]]
        out.append("<h4>Warp states, whole kernel (cycles per issued instruction)</h4>")
        out.append(_table(["state", "cycles", "share", "meaning"], rows, "pg-profile-stalls"))

    for title, section in (("Occupancy", "Occupancy"), ("Launch", "Launch Statistics"),
                           ("Memory workload", "Memory Workload Analysis")):
        metrics = sections.get(section) or []
        if metrics:
            out.append(f"<details><summary><b>{_esc(title)}</b></summary>" + _table(
                ["metric", "value"], [[_esc(m["name"]), _esc(_value(m))] for m in metrics]) + "</details>")
    rules = [r for r in details.get("rules") or [] if r.get("text")]
    if rules:
        items = "".join(f"<li><b>{_esc(r['name'])}</b> ({_esc(r['type'])}"
                        + (f", est. speed-up {r['speedup']:.0f} %" if r.get("speedup") else "")
                        + f"): {_esc(r['text'])}</li>" for r in rules[:8])
        out.append(f"<details open><summary><b>Nsight Compute's advice</b></summary><ul>{items}</ul></details>")
    if result.get("report_b64") is None and result.get("report_bytes"):
        out.append(f'<div class="pg-meta">The report ({result["report_bytes"]:,} bytes) is too large to send; '
                   f'profile on the command line: python -m playground profile.</div>')
    return "".join(out)


def report_file(result: dict | None) -> tuple[str, bytes] | None:
    """The .ncu-rep to download (for Nsight Compute's own UI): (file name, bytes), or None."""
    data = (result or {}).get("report_b64")
    if not data:
        return None
    return result.get("report_name") or "profile.ncu-rep", base64.b64decode(data)


def memcheck_html(result: dict | None) -> str:
    if not result:
        return ('<div class="pg-placeholder">Click “Check memory” to run the kernel on its check shapes under '
                'compute-sanitizer (needs the GPU): out-of-bounds and misaligned accesses, shared-memory races, '
                'each with your line.</div>')
    if not result.get("ok"):
        return _error(result, "Memory check")
    out = []
    # (every field escaped: the answer comes from the job that imported the user's code, which can write it)
    for run in result.get("runs") or []:
        what = run["tool"] + ("" if run["guards"] else " without TileLang's automatic bounds guards")
        shapes = "; ".join(", ".join(f"{k}={v}" for k, v in p.items()) for p in run.get("problems") or [])
        if not run["error_count"]:
            out.append(f'<div class="pg-status ok">{_esc(what)}: no errors ({_esc(shapes)})</div>')
            continue
        rows = [[_line_cell(e.get("line")),
                 f"<code>{_esc(e.get('code'))}</code>", _esc(e["message"]),
                 _esc(f"thread {e['thread']} block {e['block']}" if e.get("thread") else ""),
                 "<br>".join(_esc(d) for d in e.get("details", [])[:3])] for e in run["errors"][:20]]
        out.append(f'<div class="pg-status fail">{_esc(what)}: {_esc(run["error_count"])} error(s) '
                   f'({_esc(shapes)})</div>')
        out.append(_table(["line", "source", "error", "where", "details"], rows, "pg-memcheck"))
    if any(not r["guards"] and r["error_count"] for r in result.get("runs") or []) and \
            not any(r["guards"] and r["tool"] == "memcheck" and r["error_count"] for r in result.get("runs") or []):
        out.append('<div class="pg-meta">As compiled the kernel stays in bounds only because TileLang guards those '
                   'accesses itself (it reads zeros there): the lines above are where your own masking is '
                   'missing, so the values read past the end take part in the result.</div>')
    return "".join(out) or '<div class="pg-placeholder">No checks ran.</div>'
