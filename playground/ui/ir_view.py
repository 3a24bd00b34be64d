"""The "Lowering" view: the IR after each lowering pass that changed it, as a diff against the step before.

A pure function of the engine's `ir` answer (`python -m playground ir KERNEL --json`, playground/engine/ir.py):
{"passes": [{"name", "phase", "folded", "ir"}, ...], "unchanged_at_end", "pass_count", ...}. The first pass is the
program as written, shown whole; each later one is a unified diff (difflib, through highlight.diff_html: added lines
green, removed red) against the previous one, folded in a <details> so the page lists the dozen steps first. The
passes that changed nothing are named but collapsed, as a count.
"""
from __future__ import annotations

import difflib
import html

from .highlight import code_html, diff_html

IR_LANGUAGE = "python"  # TVMScript is Python syntax


def _esc(value) -> str:
    return html.escape(str(value))


def line_changes(before: str, after: str) -> tuple[int, int]:
    """(lines added, lines removed) from `before` to `after`."""
    added = removed = 0
    for line in difflib.unified_diff(before.splitlines(), after.splitlines(), lineterm="", n=0):
        if line.startswith("+") and not line.startswith("+++"):
            added += 1
        elif line.startswith("-") and not line.startswith("---"):
            removed += 1
    return added, removed


def folded_html(names: list[str], where: str) -> str:
    """The passes that changed nothing, collapsed to a count that opens to their names."""
    if not names:
        return ""
    items = "".join(f"<li><code>{_esc(n)}</code></li>" for n in names)
    word = "pass" if len(names) == 1 else "passes"
    return (f'<details class="pg-ir-folded"><summary>{len(names)} {word} {where} changed nothing</summary>'
            f'<ul>{items}</ul></details>')


def ir_html(result: dict | None) -> str:
    """The whole Lowering tab for an `ir` answer; a placeholder or the error for anything else."""
    if not result:
        return ('<div class="pg-placeholder">Click “Show lowering” to see the IR after each pass of TileLang\'s '
                'lowering pipeline (no GPU needed).</div>')
    error = result.get("error")
    passes = result.get("passes") or []
    if error or not passes:
        err = error or {}
        where = f" (line {err['line']})" if err.get("line") else ""
        return (f'<div class="pg-error-box pg-ir-error"><b>{_esc(err.get("stage", "error"))}{_esc(where)}</b>: '
                f'{_esc(err.get("message", "no passes in this answer"))}</div>')
    changed = passes[1:]
    folded_total = sum(len(p.get("folded") or []) for p in changed) + len(result.get("unchanged_at_end") or [])
    out = [f'<div class="pg-ir" data-passes="{len(changed)}">',
           f'<div class="pg-meta">{_esc(result.get("kernel", ""))} for {_esc(result.get("arch", ""))}: '
           f'{len(changed)} of {_esc(result.get("pass_count", len(changed) + folded_total))} passes changed the IR; '
           f'{folded_total} changed nothing (folded). Each step shows its diff against the step before.</div>']
    first = passes[0]
    out.append(f'<details class="pg-ir-pass pg-ir-first"><summary><b>0. {_esc(first["name"])}</b> '
               f'({len(first["ir"].splitlines())} lines)</summary>{code_html(first["ir"], IR_LANGUAGE)}</details>')
    previous = first
    for i, p in enumerate(changed, 1):
        out.append(folded_html(p.get("folded") or [], "before it"))
        added, removed = line_changes(previous["ir"], p["ir"])
        phase = f' <span class="pg-ir-phase">{_esc(p["phase"])}</span>' if p.get("phase") else ""
        out.append(
            f'<details class="pg-ir-pass" data-pass="{_esc(p["name"])}"><summary><b>{i}. {_esc(p["name"])}</b>'
            f'{phase} <span class="pg-ir-add">+{added}</span> <span class="pg-ir-del">−{removed}</span></summary>'
            f'{diff_html(previous["ir"], p["ir"], previous["name"], p["name"], language=IR_LANGUAGE)}</details>')
        previous = p
    out.append(folded_html(result.get("unchanged_at_end") or [], "after the last change"))
    out.append("</div>")
    return "".join(out)
