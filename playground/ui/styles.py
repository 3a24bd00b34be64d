"""The page's theme, CSS and the little JavaScript it needs (hover links between CUDA lines of one source line,
and scrolling the editor to an error's line). Kept apart so the layout reads as a list of components."""
from __future__ import annotations

import gradio as gr

from .highlight import style_css

SYSTEM_FONTS = [gr.themes.Font("ui-sans-serif"), gr.themes.Font("system-ui"), gr.themes.Font("Segoe UI"),
                gr.themes.Font("Helvetica"), gr.themes.Font("Arial"), gr.themes.Font("sans-serif")]
MONO_FONTS = [gr.themes.Font("ui-monospace"), gr.themes.Font("SFMono-Regular"), gr.themes.Font("Menlo"),
              gr.themes.Font("Consolas"), gr.themes.Font("DejaVu Sans Mono"), gr.themes.Font("monospace")]


def theme() -> gr.themes.Base:
    # System fonts only: a class server may have no internet, and a page must not wait on a font download.
    # Every text at least 4.5:1 against its background (WCAG AA; tests/test_browser.py measures it): the default
    # subdued grey (slate-400 on white, 2.6:1) and white on orange-500 (2.8:1) are darkened in the light theme.
    return gr.themes.Default(primary_hue="orange", secondary_hue="blue", neutral_hue="slate",
                             font=SYSTEM_FONTS, font_mono=MONO_FONTS, radius_size="sm", spacing_size="sm").set(
        body_text_color_subdued="*neutral_600", body_text_color_subdued_dark="*neutral_400",
        block_info_text_color="*neutral_600", block_info_text_color_dark="*neutral_400",
        button_primary_background_fill="*primary_700", button_primary_background_fill_hover="*primary_800",
        button_primary_background_fill_dark="*primary_700", button_primary_background_fill_hover_dark="*primary_800",
        button_primary_text_color="white", button_primary_text_color_dark="white",
        color_accent="*primary_700", color_accent_soft="*primary_50")


CSS = """
.gradio-container { max-width: 1800px !important; }
#pg-header { align-items: baseline; gap: 12px; margin-bottom: 2px; }
.pg-title { font-size: 1.45rem; font-weight: 700; letter-spacing: -0.01em; }
.pg-title .accent { color: #c2410c; }
.dark .pg-title .accent { color: #fb923c; }
.tab-container button.selected, button[role=tab].selected { color: #c2410c !important; }
.dark .tab-container button.selected, .dark button[role=tab].selected { color: #fb923c !important; }
/* Source and CUDA side by side down to a 1024 px window (a classroom projector); one above the other below it. */
@media (min-width: 1000px) { #pg-panes { flex-wrap: nowrap !important; } #pg-panes > .column { min-width: 0 !important; } }
@media (max-width: 1199px) { .gradio-container { padding-left: 8px !important; padding-right: 8px !important; } }
/* Table headers break between words, never inside one */
#pg-results th, #pg-results th * { word-break: keep-all !important; overflow-wrap: normal !important;
                                   hyphens: none !important; }
.pg-sub { color: var(--body-text-color-subdued); font-size: 0.92rem; }
#pg-toolbar { align-items: end; }
#pg-toolbar button { min-height: 40px; }
.pg-banner { border: 1px solid #d97706; background: rgba(217,119,6,0.10); border-radius: 6px;
             padding: 8px 12px; font-size: 0.9rem; }
.pg-banner.good { border-color: #16a34a; background: rgba(22,163,74,0.08); }
.pg-status { font-size: 0.92rem; padding: 6px 10px; border-radius: 6px; border-left: 4px solid #64748b;
             background: var(--block-background-fill); }
.pg-status.ok { border-left-color: #16a34a; }
.pg-status.fail { border-left-color: #dc2626; }
.pg-status.idle { color: var(--body-text-color-subdued); }
.pg-pane-label { font-weight: 600; font-size: 0.85rem; color: var(--body-text-color-subdued);
                 text-transform: uppercase; letter-spacing: 0.05em; }

/* code panes: dark whatever the theme, like a terminal or Compiler Explorer */
.pg-code { background: #0d1117; color: #e6edf3; border-radius: 6px; border: 1px solid #30363d;
           max-height: 68vh; overflow: auto; font-family: ui-monospace, SFMono-Regular, Menlo, Consolas,
           "DejaVu Sans Mono", monospace; font-size: 12.5px; line-height: 1.45; }
.pg-code pre { margin: 0; padding: 6px 0; background: transparent !important; border: 0 !important;
               white-space: pre; overflow: visible; font: inherit; color: inherit; }
.pg-line { display: flex; min-width: max-content; padding-right: 12px; border-left: 3px solid transparent; }
.pg-line .pg-no { flex: none; width: 3.6em; padding-right: 10px; text-align: right; color: #8b949e;
                  user-select: none; }
.pg-line .pg-tx { white-space: pre; color: #e6edf3; }  /* text outside any token: Gradio's prose colour is dark */
.pg-line.pg-cut .pg-tx, .pg-diff .pg-dhdr .pg-tx { color: #8b949e; }
.pg-diff .pg-dhunk .pg-tx { color: #79c0ff; }
.pg-line.pg-has-src, .pg-line.pg-has-origin { cursor: help; }
.pg-line.pg-has-origin .pg-no { color: #a371f7; }  /* made by a kernel module the file imports: hover says which line */
.pg-line.pg-mark { background: rgba(56,139,253,0.20); border-left-color: #388bfd; }
.pg-line.pg-sel { background: rgba(163,113,247,0.24); border-left-color: #a371f7; }
.pg-nomap { position: sticky; top: 0; z-index: 1; padding: 4px 10px; background: #30363d; color: #e6edf3;
            border-left: 3px solid #a371f7; font-family: var(--font); font-size: 12px; }
.pg-line.pg-hover { background: rgba(210,153,34,0.20); border-left-color: #d29922; }
.pg-line.pg-error { background: rgba(248,81,73,0.22); border-left-color: #f85149; }
.pg-line.pg-error .pg-no, .pg-line.pg-mark .pg-no, .pg-line.pg-sel .pg-no { color: #c9d1d9; }
.pg-line.pg-cut { color: #8b949e; font-style: italic; }
.pg-code.pg-empty, .pg-placeholder { padding: 18px; color: #8b949e; font-style: italic; }
.pg-placeholder { border: 1px dashed var(--border-color-primary); border-radius: 6px;
                  color: var(--body-text-color-subdued); }
.pg-code.pg-snippet { max-height: none; margin-top: 8px; }
.pg-diff .pg-line { padding-left: 10px; }
.pg-diff .pg-dadd { background: rgba(46,160,67,0.22); border-left-color: #3fb950; }
.pg-diff .pg-ddel { background: rgba(248,81,73,0.20); border-left-color: #f85149; }
.pg-diff .pg-dhunk { color: #79c0ff; background: rgba(56,139,253,0.10); margin-top: 4px; }
.pg-diff .pg-dhdr { color: #8b949e; font-weight: 600; }
.pg-legend { font-size: 0.82rem; color: var(--body-text-color-subdued); }
.pg-legend .sw { display: inline-block; width: 10px; height: 10px; border-radius: 2px; margin: 0 4px 0 10px;
                 vertical-align: middle; }

/* resources */
.pg-resources { display: grid; grid-template-columns: repeat(3, minmax(0, 1fr)); gap: 8px; }
.pg-stat { border: 1px solid var(--border-color-primary); border-radius: 6px; padding: 6px 10px;
           background: var(--block-background-fill); }
.pg-stat .k { display: block; font-size: 0.75rem; color: var(--body-text-color-subdued); }
.pg-stat .v { display: block; font-size: 1.05rem; font-weight: 650; font-variant-numeric: tabular-nums; }
.pg-stat small { display: block; font-weight: 400; font-size: 0.72rem; color: var(--body-text-color-subdued); }
.pg-stat.bad { border-color: #dc2626; } .pg-stat.bad .v { color: #b91c1c; }
.pg-stat.warn { border-color: #d97706; }
.pg-stat.good .v { color: #15803d; }
.dark .pg-stat.bad .v { color: #f87171; } .dark .pg-stat.good .v { color: #4ade80; }
.pg-meta { margin-top: 6px; font-size: 0.8rem; color: var(--body-text-color-subdued); }

/* errors */
.pg-error-box { border: 1px solid #dc2626; border-left-width: 5px; border-radius: 6px; padding: 10px 12px;
                background: rgba(220,38,38,0.07); }
.pg-error-head { display: flex; gap: 10px; align-items: center; flex-wrap: wrap; }
.pg-badge { background: #dc2626; color: white; font-weight: 700; font-size: 0.78rem; padding: 2px 8px;
            border-radius: 999px; text-transform: uppercase; letter-spacing: 0.04em; }
.pg-stage-help { color: var(--body-text-color-subdued); font-size: 0.88rem; }
.pg-error-line { margin-left: auto; font-weight: 700; color: #b91c1c; }
.dark .pg-error-line { color: #f87171; }
.pg-error-useful { margin-top: 8px; font-size: 0.85rem; }
.pg-error-useful .k { color: var(--body-text-color-subdued); }
.pg-error-useful pre { margin: 2px 0 0; white-space: pre-wrap; word-break: break-word; font-size: 0.82rem; }
.pg-stale { background: #3d2e00; color: #f2cc60; border: 1px solid #9e6a03; border-radius: 6px 6px 0 0;
            padding: 4px 10px; font-size: 0.85rem; }
#pg-logged-out { position: fixed; top: 0; left: 0; right: 0; z-index: 1000; padding: 8px 16px; font-weight: 600;
                 background: #fef3c7; color: #78350f; border-bottom: 2px solid #b45309; text-align: center; }
/* A phone's width: the kernel and "New kernel from" pickers take a row of their own, so their names show whole
   (side by side they were cut under the dropdown arrow: "flash_attentio"). */
@media (max-width: 520px) { #pg-kernel, .form:has(> #pg-new-from) { min-width: 100% !important; } }
.pg-edited { border-left: 4px solid #b45309; padding: 3px 10px; font-size: 0.85rem; }
#pg-code-note:not(:has(.pg-edited)) { display: none; }  /* (Gradio's block keeps its height when empty) */
.pg-params-note:empty { display: none; }
.pg-param-error { border: 1px solid #dc2626; border-left-width: 5px; border-radius: 6px; padding: 6px 10px;
                  background: rgba(220,38,38,0.07); font-size: 0.9rem; margin-bottom: 6px; }
.pg-param-warn { border-left: 4px solid #b45309; padding: 4px 10px; font-size: 0.85rem; margin-bottom: 6px; }
.pg-group-label { font-size: 0.8rem; font-weight: 600; color: var(--body-text-color-subdued);
                  text-transform: uppercase; letter-spacing: 0.04em; margin: 4px 0 -4px; }
.pg-group-label small { text-transform: none; letter-spacing: 0; font-weight: 400; }
#pg-problem, #pg-tile { flex-wrap: wrap; gap: 8px; }
.pg-param-help { font-size: 0.85rem; }
.pg-param-help summary { cursor: pointer; color: var(--body-text-color-subdued); }
.pg-param-help ul { margin: 4px 0 0 1.2em; padding: 0; }
.pg-param-help li { margin: 2px 0; }
.pg-slot.pg-bad { box-shadow: 0 0 0 2px #dc2626; border-radius: 6px; }
.pg-slot.pg-warn { box-shadow: 0 0 0 2px #b45309; border-radius: 6px; }
.pg-error-msg { margin-top: 6px; font-family: ui-monospace, Menlo, Consolas, monospace; font-size: 0.9rem;
                white-space: pre-wrap; word-break: break-word; }
.pg-error-where { margin-top: 8px; font-size: 0.9rem; }
.pg-error-where code { background: rgba(220,38,38,0.12); padding: 1px 5px; border-radius: 4px; }

/* tables and cards */
.pg-table { width: 100%; border-collapse: collapse; font-size: 0.88rem; font-variant-numeric: tabular-nums;
            border: 0 !important; }
.pg-table tr { border: 0 !important; }
.pg-table th, .pg-table td { border-top: 0 !important; border-left: 0 !important; border-right: 0 !important; }
.pg-table th { text-align: left; font-weight: 600; color: var(--body-text-color-subdued);
               border-bottom: 1px solid var(--border-color-primary); padding: 6px 8px; }
.pg-table td { border-bottom: 1px solid var(--border-color-primary); padding: 6px 8px; vertical-align: top; }
.pg-table small { color: var(--body-text-color-subdued); }
.pg-pill { display: inline-block; white-space: nowrap; padding: 1px 8px; border-radius: 999px; font-weight: 650; font-size: 0.8rem; }
.pg-pill.good { background: rgba(22,163,74,0.15); color: #15803d; }
.pg-pill.bad { background: rgba(220,38,38,0.15); color: #b91c1c; }
.dark .pg-pill.good { color: #4ade80; } .dark .pg-pill.bad { color: #f87171; }
.pg-verdict { font-weight: 600; margin-bottom: 8px; }
.pg-verdict.good { color: #15803d; } .pg-verdict.bad { color: #b91c1c; }
.dark .pg-verdict.good { color: #4ade80; } .dark .pg-verdict.bad { color: #f87171; }
.pg-cards { display: grid; grid-template-columns: repeat(auto-fit, minmax(180px, 1fr)); gap: 10px;
            margin-bottom: 10px; }
.pg-card { border: 1px solid var(--border-color-primary); border-radius: 8px; padding: 10px 14px;
           background: var(--block-background-fill); }
.pg-card .k { font-size: 0.78rem; color: var(--body-text-color-subdued); }
.pg-card .v { font-size: 1.4rem; font-weight: 700; color: #c2410c; font-variant-numeric: tabular-nums; }
.dark .pg-card .v { color: #fb923c; }
.pg-card .sub { font-size: 0.82rem; color: var(--body-text-color-subdued); }
.pg-share { font-size: 0.82rem; color: var(--body-text-color-subdued); word-break: break-all; }
#pg-editor .cm-editor { font-size: 12.5px; }
/* The first screen is the workspace: the source from its kernel's first line, the kernel's controls under it and
   the CUDA from its first __global__ beside it, in view at once from a 1024×768 window up. The page's script
   (fitWorkspace) sizes the editor and the code pane to the window: --pg-editor-h and --pg-code-h. Without it, the
   editor grows with its text to most of the window, then scrolls, like the CUDA pane beside it. */
#pg-editor .cm-scroller { min-height: min(340px, var(--pg-editor-h, 340px)) !important;
                          max-height: var(--pg-editor-h, 72vh) !important; }
#pg-code-tabs .pg-code { max-height: var(--pg-code-h, 68vh); }
.pg-fold > summary { list-style: none; cursor: pointer; }
.pg-fold > summary::-webkit-details-marker { display: none; }
.pg-fold > summary .pg-tx, .pg-fold > summary .pg-no { color: #8b949e; font-style: italic; }
.pg-fold[open] > summary { border-bottom: 1px dashed #30363d; }
/* Less room around the blocks above the panes, so that more of the window is the workspace */
#pg-header { margin: 0 !important; }
#pg-header .html-container { padding: 0 4px !important; }
#pg-header .prose { display: flex; flex-wrap: wrap; align-items: baseline; gap: 2px 14px; }
.pg-title { font-size: 1.3rem; line-height: 1.3; }
#pg-banner .html-container, #pg-status .html-container { padding: 0 !important; }
.pg-banner { padding: 3px 10px; font-size: 0.82rem; }
.pg-status { padding: 4px 10px; }
#pg-toolbar, #pg-own { gap: 8px !important; }
#pg-toolbar .block, #pg-own .block, #pg-params .pg-slot, #pg-srcline { padding: 3px 8px !important; }
#pg-own button, #pg-toolbar button { min-height: 38px; }
#pg-toolbar > button { flex: 0 0 auto !important; }
#pg-toolbar > .form { flex: 1 1 0 !important; }
@media (max-width: 1299px) and (min-width: 641px) {
  #pg-toolbar > button { min-width: 0 !important; padding: 6px 10px !important; }
  #pg-toolbar > .form { min-width: 470px !important; }
  #pg-toolbar #pg-kernel { min-width: 120px !important; } #pg-toolbar #pg-preset { min-width: 130px !important; }
  #pg-toolbar #pg-dtype { min-width: 108px !important; } #pg-toolbar #pg-arch { min-width: 108px !important; } }
#pg-params, #pg-params .column { gap: 4px !important; }
#pg-params { border: 1px solid var(--border-color-primary); border-radius: var(--block-radius); padding: 4px 6px; }
#pg-params .html-container { padding: 0 4px !important; }
#pg-params-note:not(:has(div)) { display: none; }
#pg-params .pg-group-label { margin: 0; }
/* wide enough for "auto" beside a dropdown's arrow; a long name (swizzle_panel) breaks, never clipped */
#pg-params .pg-slot { min-width: 104px !important; }
#pg-params .pg-slot label > span:first-child { overflow-wrap: anywhere; white-space: normal; }
#pg-params .pg-slot span[data-testid=block-info], #pg-params .pg-slot .info-text { font-size: 0.78rem;
                                                                                   line-height: 1.2; margin: 0; }
/* An exercise's statement scrolls in a box of its own: open, it would push the CUDA below the fold */
#pg-exercise-statement { max-height: 18em; overflow-y: auto; }
/* "What these parameters do" at the panel's top right, over the controls when opened (each is a tooltip too) */
#pg-params { position: relative; }
#pg-param-help { position: absolute !important; top: 2px; right: 6px; z-index: 5; max-width: calc(100% - 12px); }
#pg-param-help .pg-param-help[open] { background: var(--block-background-fill); border: 1px solid
                                      var(--border-color-primary); border-radius: 6px; padding: 4px 8px; }
#pg-param-help summary { text-align: right; }
/* the note (what the file gives, no reference) keeps clear of that summary, whose line it shares */
#pg-params-note:has(div) { padding-right: min(15em, 45%) !important; }
/* A phone's width: source, controls and code stacked, the code scrolling inside its pane, never the page sideways */
@media (max-width: 640px) {
  #pg-toolbar > .form { min-width: 100% !important; display: grid !important;
                        grid-template-columns: 1fr 1fr; }
  #pg-toolbar > .form > .block { min-width: 0 !important; }
  #pg-toolbar > button { flex: 1 1 auto !important; min-width: 0 !important; padding: 6px 5px !important;
                         font-size: 0.88rem !important; }
  #pg-own > button { flex: 1 1 40% !important; min-width: 0 !important; font-size: 0.88rem !important;
                     min-height: 0 !important; }
  #pg-params .pg-slot { min-width: calc(33% - 6px) !important; flex: 1 1 calc(33% - 6px) !important; }
  .pg-sub { font-size: 0.82rem; }
}
#pg-panes, #pg-panes > .column { max-width: 100%; }
#pg-panes .pg-code { max-width: 100%; }
#pg-editor .cm-gutterElement { color: var(--body-text-color-subdued); }
#pg-editor .pg-err-gutter { background: #dc2626; color: white !important; border-radius: 3px; }
"""


def css() -> str:
    return CSS + "\n" + style_css(".pg-code")


HEAD = r"""
<style>
/* (here, not in CSS: Gradio scopes the page's CSS inside .contain, which the app's own padding is outside of) */
@media (max-width: 1399px) { .gradio-container .main.fillable.app { padding: 8px 12px !important; } }
@media (max-width: 640px) { .gradio-container .main.fillable.app { padding: 6px 6px !important; } }
</style>
<script>
(() => {
  // Hovering a CUDA line lights up every CUDA line that came from the same line of the kernel's source.
  const lit = [];
  document.addEventListener("mouseover", (ev) => {
    const line = ev.target.closest && ev.target.closest(".pg-line[data-src]");
    while (lit.length) lit.pop().classList.remove("pg-hover");
    if (!line) return;
    const pane = line.closest(".pg-code");
    if (!pane || pane.classList.contains("pg-snippet")) return;
    pane.querySelectorAll(`.pg-line[data-src="${line.dataset.src}"]`).forEach((el) => {
      el.classList.add("pg-hover"); lit.push(el);
    });
  });

  // The cursor or selection in the editor marks the CUDA lines generated from those source lines. CodeMirror
  // keeps the DOM selection in step, and its gutter tells a line element's number (lines are rendered lazily, so
  // counting .cm-line elements would be wrong).
  const lineOf = (node) => {
    const el = node && (node.nodeType === 1 ? node : node.parentElement);
    const line = el && el.closest(".cm-line");
    if (!line) return null;
    const top = line.getBoundingClientRect().top;
    let best = null, dist = 1e9;
    line.closest(".cm-editor").querySelectorAll(".cm-lineNumbers .cm-gutterElement").forEach((g) => {
      const d = Math.abs(g.getBoundingClientRect().top - top);
      if (d < dist && /^\d+$/.test(g.textContent.trim())) { dist = d; best = parseInt(g.textContent.trim(), 10); }
    });
    return dist < 4 ? best : null;
  };
  const markSelection = () => {
    const sel = window.getSelection();
    const editor = document.querySelector("#pg-editor");
    if (!sel || !sel.anchorNode || !editor || !editor.contains(sel.anchorNode)) return;
    let a = lineOf(sel.anchorNode), b = lineOf(sel.focusNode);
    if (a === null) return;
    if (b === null) b = a;
    if (a > b) [a, b] = [b, a];
    const pane = document.querySelector("#pg-cuda .pg-code");
    if (!pane) return;
    pane.querySelectorAll(".pg-sel").forEach((el) => el.classList.remove("pg-sel"));
    let first = null, mapped = false;
    pane.querySelectorAll(".pg-line[data-src]").forEach((el) => {
      const src = parseInt(el.dataset.src, 10);
      mapped = true;
      if (src >= a && src <= b) { el.classList.add("pg-sel"); first = first || el; }
    });
    // Say so when the chosen lines made no CUDA (a comment, or code of a schedule this compile did not build),
    // rather than leave the pane as it was.
    // Where the kernel's body is in a module the file imports (gemm.py's in gemm_hopper.py), most lines of the file
    // make none: say where the CUDA comes from and how to reach those lines.
    const modules = [...new Set([...pane.querySelectorAll(".pg-line[data-origin]")].map((el) => el.dataset.origin))];
    let note = pane.querySelector(".pg-nomap");
    if (!first && (mapped || modules.length)) {
      if (!note) { note = document.createElement("div"); note.className = "pg-nomap"; pane.prepend(note); }
      note.textContent = (a === b ? `Line ${a} made` : `Lines ${a}–${b} made`) + " no CUDA in this compile" +
        (modules.length ? `: this kernel's CUDA comes also from ${modules.join(", ")}, which the file imports. ` +
                          "Hover a CUDA line for the line it came from, or pick one under " +
                          "\u201cMark the CUDA of source line\u201d."
                        : " (a comment, or code this configuration does not build).");
    } else if (note) note.remove();
    if (first) pane.scrollTop = Math.max(0, first.offsetTop - pane.clientHeight / 4);
  };
  // The editor's highlight style (Gradio's CodeMirror theme: Nord colours on white) puts some tokens at 2:1.
  // Darken (or, on a dark editor, lighten) each token colour of its rules until it reads at 4.5:1 (WCAG AA).
  const rgb = (c) => { const m = c.match(/rgba?\(([^)]+)\)/); if (!m) return null;
    const p = m[1].split(/[ ,\/]+/).filter(Boolean).map(Number); return [p[0], p[1], p[2], p.length > 3 ? p[3] : 1]; };
  const lum = (c) => { const f = (v) => { v /= 255; return v <= 0.03928 ? v / 12.92 : ((v + 0.055) / 1.055) ** 2.4; };
    return 0.2126 * f(c[0]) + 0.7152 * f(c[1]) + 0.0722 * f(c[2]); };
  const ratio = (a, b) => { const x = lum(a), y = lum(b); return (Math.max(x, y) + 0.05) / (Math.min(x, y) + 0.05); };
  const fixed = new WeakSet();
  const fixEditorContrast = () => {
    const editor = document.querySelector("#pg-editor .cm-editor");
    if (!editor) return;
    let bg = null;  // the first opaque background at or above the editor
    for (let e = editor; e && !bg; e = e.parentElement) {
      const c = rgb(getComputedStyle(e).backgroundColor);
      if (c && c[3] >= 1) bg = c;
    }
    bg = bg || (document.documentElement.classList.contains("dark") || document.body.classList.contains("dark")
                ? [11, 15, 25, 1] : [255, 255, 255, 1]);
    const toward = lum(bg) > 0.4 ? 0 : 255;
    const probe = document.createElement("span");
    editor.appendChild(probe);
    for (const sheet of [...(document.adoptedStyleSheets || []), ...document.styleSheets]) {
      let rules;
      try { rules = sheet.cssRules; } catch (e) { continue; }
      for (const rule of rules || []) {
        if (fixed.has(rule) || !rule.selectorText || !rule.selectorText.includes("\u037c") || !rule.style.color) continue;
        probe.style.color = rule.style.color;
        let c = rgb(getComputedStyle(probe).color);
        if (!c) continue;
        for (let i = 0; i < 20 && ratio(c, bg) < 4.6; i++) c = c.map((v, k) => k < 3 ? v + (toward - v) * 0.12 : v);
        if (ratio(c, bg) >= 4.6) rule.style.color = `rgb(${c.slice(0, 3).map(Math.round).join(",")})`;
        fixed.add(rule);
      }
    }
    probe.remove();
  };
  // Each parameter's help (listed under the controls) as the tooltip of its control.
  const titleControls = () => {
    document.querySelectorAll("#pg-param-help li[data-param]").forEach((li) => {
      const input = document.querySelector(`.pg-slot input[aria-label="${li.dataset.param}"]`);
      const block = input && input.closest(".pg-slot");
      if (block && block.title !== li.dataset.help) {
        block.title = li.dataset.help;
        input.title = li.dataset.help;
      }
    });
  };
  // Ctrl+Enter (Cmd+Enter on a Mac) compiles and Ctrl+Shift+Enter runs, from anywhere on the page, the editor
  // included: the keys of Compiler Explorer and of notebooks. Caught in the capture phase, before CodeMirror, whose
  // own Mod-Enter would insert a blank line into the source.
  const KEYS = {"#pg-compile": "Compile (Ctrl+Enter)", "#pg-run": "Compile, verify and time (Ctrl+Shift+Enter)"};
  document.addEventListener("keydown", (ev) => {
    if (ev.key !== "Enter" || !(ev.ctrlKey || ev.metaKey) || ev.altKey || ev.repeat) return;
    const target = ev.target instanceof Element ? ev.target : null;
    const inSlot = target && target.closest(".pg-slot");
    // Not from other text boxes (a roster, a password, the JSON of a submission): the editor, the parameters,
    // or the page itself.
    if (target && target.closest("input, textarea, [contenteditable=true]") && !inSlot &&
        !target.closest("#pg-editor")) return;
    const button = document.querySelector(ev.shiftKey ? "#pg-run" : "#pg-compile");
    if (!button || button.disabled || !button.offsetParent) return;  // busy, or not on this page
    ev.preventDefault();
    ev.stopPropagation();
    if (inSlot) {  // a value typed into a parameter counts once its box lets go of it: then compile
      target.blur();
      setTimeout(() => button.click(), 60);
    } else {
      button.click();
    }
  }, true);
  // A value typed into a parameter and entered is that value: Gradio's dropdown would take the first choice that
  // starts with it instead (100000 became the preset 1000003). A choice reached with the arrow keys is still taken.
  const picked = new WeakSet();
  document.addEventListener("keydown", (ev) => {
    const input = ev.target;
    if (!(input instanceof HTMLInputElement) || !input.closest(".pg-slot")) return;
    if (ev.key === "ArrowDown" || ev.key === "ArrowUp") { picked.add(input); return; }
    if (ev.key !== "Enter" || ev.ctrlKey || ev.metaKey) return;
    if (picked.has(input)) { picked.delete(input); return; }
    ev.preventDefault();
    ev.stopPropagation();
    input.blur();  // Gradio keeps a custom value as typed when the box loses focus
  }, true);
  document.addEventListener("input", (ev) => { if (ev.target instanceof HTMLInputElement) picked.delete(ev.target); }, true);
  const titleButtons = () => {
    for (const [sel, title] of Object.entries(KEYS)) {
      const button = document.querySelector(sel);
      if (button && button.title !== title) button.title = title;
    }
  };
  // The workspace fits the window (CSS: --pg-editor-h, --pg-code-h): on a desktop the editor takes the height
  // the window leaves once the kernel's controls under it are in view, and the code pane beside it ends at the
  // window's bottom too; on a phone, where the three are stacked, each takes part of a screen and scrolls inside.
  const fitWorkspace = () => {
    const root = document.documentElement, panes = document.querySelector("#pg-panes");
    const scroller = document.querySelector("#pg-editor .cm-scroller");
    if (!panes || !scroller) return;
    let editorH, codeH;
    if (innerWidth >= 1000) {
      const panesTop = panes.getBoundingClientRect().top;
      const avail = Math.max(420, innerHeight - (panesTop + scrollY) - 10);
      const params = document.querySelector("#pg-params");
      const s = scroller.getBoundingClientRect();
      const above = s.top - panesTop;  // the editor's label (and an error shown over it)
      const below = params && params.offsetParent ? params.getBoundingClientRect().bottom - s.bottom : 0;
      editorH = Math.max(120, Math.min(avail - above - below, innerHeight * 0.75));
      const code = [...document.querySelectorAll("#pg-code-tabs .pg-code")].find((e) => e.offsetParent);
      const codeTop = code ? code.getBoundingClientRect().top - panesTop : 160;
      codeH = Math.max(200, avail - codeTop - 4);
    } else {
      editorH = innerHeight * 0.45;
      codeH = innerHeight * 0.6;
    }
    for (const [name, value] of [["--pg-editor-h", editorH], ["--pg-code-h", codeH]]) {
      const now = parseFloat(root.style.getPropertyValue(name)) || 0;
      if (Math.abs(now - value) > 2) {
        root.style.setProperty(name, `${Math.round(value)}px`);  // (an error's line follows: SCROLL_TO_ERROR_JS)
      }
    }
  };
  window.pgFitWorkspace = fitWorkspace;
  addEventListener("resize", () => setTimeout(fitWorkspace, 50));
  let pending = null;
  new MutationObserver(() => { clearTimeout(pending); pending = setTimeout(() => { fixEditorContrast(); titleControls(); titleButtons(); fitWorkspace(); }, 150); })
    .observe(document.documentElement, {childList: true, subtree: true});

  // A kernel newly in the editor opens at its first line (its decorator or def): the module docstring and the
  // imports are scrolled above it, one scroll away. KERNEL_START_JS calls this after a kernel takes the editor.
  // CodeMirror's view hangs on its content element: `cmTile` in CodeMirror 6.38+, `cmView` before.
  const editorView = () => {
    const content = document.querySelector("#pg-editor .cm-content");
    return content && ((content.cmTile && content.cmTile.view) ||
                       (content.cmView && (content.cmView.view || (content.cmView.root || {}).view)));
  };
  window.pgEditorView = editorView;  // (SCROLL_TO_ERROR_JS asks it too)
  const kernelStart = (doc) => {
    let n = 1, quote = null;
    for (; n <= doc.lines; n++) {  // past the module docstring
      const text = doc.line(n).text.trim();
      if (quote) { if (text.includes(quote)) { quote = null; } continue; }
      const open = text.match(/^[rRbBuU]?(\"\"\"|\'\'\')/);
      if (open) { if (text.length < 6 || !text.slice(open[0].length).includes(open[1])) quote = open[1]; continue; }
      if (text && !text.startsWith("#")) break;
    }
    for (let m = n; m <= Math.min(doc.lines, n + 3000); m++) {
      if (/^(@|def |async def |class )/.test(doc.line(m).text)) return m;
    }
    return 1;
  };
  window.pgShowKernelStart = () => {
    let shown = null;
    window.pgErrorPinned = false;  // a new kernel's text: an error's line shown before was the old text's
    const go = (tries) => {
      if (window.pgErrorPinned) return;  // an error came since (the user compiled at once): its line comes first
      const view = editorView();
      if (!view || !view.state || !view.constructor.scrollIntoView) {
        if (tries > 0) setTimeout(() => go(tries - 1), 100);
        return;
      }
      const doc = view.state.doc, text = doc.toString();
      if (text === shown) return;  // (the same text: the user may have scrolled since)
      shown = text;
      const line = kernelStart(doc);
      view.dispatch({effects: view.constructor.scrollIntoView(doc.line(line).from, {y: "start"})});
      root().dataset.pgKernelStart = String(line);
    };
    const root = () => document.querySelector("#pg-editor");
    setTimeout(() => go(20), 60);
    setTimeout(() => go(0), 700);  // Gradio may set the editor's text after this event's own step
  };

  document.addEventListener("mouseup", () => setTimeout(markSelection, 0));
  document.addEventListener("keyup", (ev) => {
    if (/^(Arrow|Page|Home|End)/.test(ev.key)) setTimeout(markSelection, 0);
  });

  // A session the server ended (a roster import that left this name out, a restart) answers 401, which Gradio
  // shows as a bare "Error". Say what happened and what to do; the draft stays in this browser.
  const fetchFirst = window.fetch;
  window.fetch = async (...args) => {
    const response = await fetchFirst(...args);
    if (response.status === 401 && !document.getElementById("pg-logged-out")) {
      const note = document.createElement("div");
      note.id = "pg-logged-out";
      note.setAttribute("role", "alert");
      note.textContent = "You are logged out: your session on the server has ended. Reload the page to log in " +
        "again; your draft is kept in this browser.";
      document.body.prepend(note);
    }
    return response;
  };
})();
</script>
"""

# Once a link's setup is on the page (?kernel=...&N=..., or ?s=ID), the page is the user's: the address loses the
# link's query (Gradio's __theme stays), so a reload restores the draft with what they changed since, rather than
# applying the link over it again.
FORGET_LINK_JS = """
() => {
  const query = new URLSearchParams(location.search), kept = new URLSearchParams();
  if (query.has("__theme")) kept.set("__theme", query.get("__theme"));
  if (query.toString() === kept.toString()) return;
  const rest = kept.toString();
  history.replaceState(history.state, "", location.pathname + (rest ? "?" + rest : "") + location.hash);
}
"""

# One draft per tab. The draft in localStorage (a BrowserState) is shared by every tab of the browser, so a reload
# of one tab used to bring back what another tab wrote last. Each tab also keeps its own copy in sessionStorage
# (which a reload keeps and other tabs do not see): a reload starts from it, a new tab from the shared one. The
# editor's text goes there as it is typed, with no round trip to the server, so a reload straight after a keystroke
# keeps it.
TAB_DRAFT_KEY = "tilelang-playground-tab-draft"
SAVE_TAB_DRAFT_JS = """
(draft) => {
  // (not before TAB_DRAFT_JS has read the tab's copy: the shared draft, loaded first, would overwrite it)
  try { if (draft && window.pgTabDraftRead) sessionStorage.setItem("%(key)s", JSON.stringify(draft)); } catch (e) {}
  return [];
}
""" % {"key": TAB_DRAFT_KEY}
TAB_DRAFT_JS = """
(draft) => {
  window.pgTabDraftRead = true;
  try {
    const mine = JSON.parse(sessionStorage.getItem("%(key)s") || "null");
    if (mine && typeof mine === "object" && typeof mine.source === "string") return mine;
  } catch (e) {}
  return draft;
}
""" % {"key": TAB_DRAFT_KEY}
TYPED_TO_TAB_DRAFT_JS = """
(source) => {
  try {
    const mine = JSON.parse(sessionStorage.getItem("%(key)s") || "null");
    if (mine && typeof mine === "object" && typeof source === "string") {
      mine.source = source;
      sessionStorage.setItem("%(key)s", JSON.stringify(mine));
    }
  } catch (e) {}
  return [];
}
""" % {"key": TAB_DRAFT_KEY}

# Scroll the editor to an error's line and flag its line number: gr.Code has no API for it, CodeMirror's DOM does.
SCROLL_TO_ERROR_JS = """
(line) => {
  window.pgErrorLine = line || null;
  window.pgErrorPinned = !!line;
  const root = document.querySelector("#pg-editor");
  if (!root) return [];
  if (!line) {  // no error (or one of no line): no line number stays flagged
    root.querySelectorAll(".pg-err-gutter").forEach((el) => el.classList.remove("pg-err-gutter"));
    return [];
  }
  if (!root.pgUnpinOnUse) {  // the user's own scroll, click or key ends the pin (a timer would race a slow page)
    root.pgUnpinOnUse = true;
    for (const ev of ["wheel", "mousedown", "keydown", "touchstart"])
      root.addEventListener(ev, () => { window.pgErrorPinned = false; }, {passive: true, capture: true});
  }
  // CodeMirror's own view (HEAD's pgEditorView) scrolls to the line wherever it is; counting line heights instead
  // went wrong past a wrapped line (a long docstring line).
  const editorView = () => window.pgEditorView && window.pgEditorView();
  const linePos = (view) => view.state.doc.line(Math.max(1, Math.min(line, view.state.doc.lines))).from;
  const scroll = () => {
    const view = editorView();
    if (view && view.state && view.constructor.scrollIntoView) {
      view.dispatch({effects: view.constructor.scrollIntoView(linePos(view), {y: "center"})});
    } else {
      const scroller = root.querySelector(".cm-scroller");
      const anyLine = root.querySelector(".cm-line");
      if (scroller && anyLine) scroller.scrollTop = Math.max(0, (line - 6) * (anyLine.getBoundingClientRect().height || 18));
    }
    setTimeout(flag, 120);
  };
  const flag = () => {  // (CodeMirror draws the gutter anew as the view moves: the flag is set again each time)
    root.querySelectorAll(".pg-err-gutter").forEach((el) => el.classList.remove("pg-err-gutter"));
    root.querySelectorAll(".cm-lineNumbers .cm-gutterElement").forEach((el) => {
      if (el.textContent.trim() === String(line)) el.classList.add("pg-err-gutter");
    });
  };
  const inView = () => {  // the line's whole height within the editor's scrolled box
    const view = editorView(), box = root.querySelector(".cm-scroller");
    if (!view || !view.state || !box || !view.coordsAtPos) return true;  // (no view to ask: the one scroll above)
    const at = view.coordsAtPos(linePos(view)), s = box.getBoundingClientRect();
    return !!at && s.top - 1 <= at.top && at.bottom <= s.bottom + 1;
  };
  // The line stays in view while it is pinned, until the user scrolls, clicks or types in the editor (from then on
  // where it is is theirs). What moves it: the error's box over the editor shrinking the editor (fitWorkspace), in
  // one step or, on a slow page, in several (the editor's box changes size), and a scroll the page makes after this
  // one (a scroll event with the line out of view; the user's own scroll unpinned it first).
  window.pgRescrollError = () => {
    if (window.pgErrorPinned && window.pgErrorLine === line) { if (inView()) flag(); else scroll(); }
  };
  const box = root.querySelector(".cm-scroller");
  if (box && root.pgResizeWatched !== box) {
    root.pgResizeWatched = box;
    const follow = () => { if (window.pgRescrollError) requestAnimationFrame(window.pgRescrollError); };
    if (window.ResizeObserver) new ResizeObserver(follow).observe(box);
    box.addEventListener("scroll", follow, {passive: true});
  }
  scroll();
  return [];
}
"""

# After a kernel takes the editor (the page's load, a switch, Reset, New kernel, a kernel of the file picked): the
# editor at the kernel's first line (HEAD's pgShowKernelStart), the workspace fitted to the window.
KERNEL_START_JS = """
() => {
  if (window.pgShowKernelStart) window.pgShowKernelStart();
  if (window.pgFitWorkspace) setTimeout(window.pgFitWorkspace, 100);
  return [];
}
"""

# Bring the first marked CUDA line into view inside its pane (not the page), after a source line is chosen.
SCROLL_TO_MARK_JS = """
() => {
  setTimeout(() => {
    const pane = document.querySelector("#pg-cuda .pg-code");
    const mark = pane && (pane.querySelector(".pg-line.pg-mark") || pane.querySelector(".pg-line.pg-error"));
    if (pane && mark) pane.scrollTop = Math.max(0, mark.offsetTop - pane.clientHeight / 4);
  }, 60);
  return [];
}
"""
