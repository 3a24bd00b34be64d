"""The page's "why is it fast or slow" parts, added to layout.Page by two calls: `build(page)` inside the results
tabs (the Lowering and Profile tabs) and `wire(page)` at the end of Page.wire; the roofline under a run's speed
chart is `roofline_update(result)`. Handlers go through Page.engine_action (gateway.call → run_job) like every
button; the HTML comes from the pure views ir_view, profile_view and roofline."""
from __future__ import annotations

import gradio as gr

from . import downloads, gateway, ir_view, profile_view, roofline


def roofline_update(result: dict | None):
    figure = roofline.roofline_figure(result)
    return gr.update(value=figure, visible=figure is not None)


def build(page) -> None:
    """The Lowering and Profile tabs (call inside the results gr.Tabs)."""
    with gr.Tab("Lowering", id="lowering"):
        page.ir_btn = gr.Button("Show lowering", scale=0, min_width=220, elem_id="pg-ir-btn")
        page.ir_view = gr.HTML(ir_view.ir_html(None), elem_id="pg-ir")
    with gr.Tab("Profile", id="profile"):
        with gr.Row():
            page.profile_btn = gr.Button("Profile (Nsight Compute)", scale=0, min_width=240,
                                         elem_id="pg-profile-btn")
            page.memcheck_btn = gr.Button("Check memory (compute-sanitizer)", scale=0, min_width=280,
                                          elem_id="pg-memcheck-btn")
            page.ncu_dl = gr.DownloadButton("Download .ncu-rep", size="sm", interactive=False,
                                            elem_id="pg-dl-ncu")
        page.profile_view = gr.HTML(profile_view.profile_html(None), elem_id="pg-profile")
        page.memcheck_view = gr.HTML(profile_view.memcheck_html(None), elem_id="pg-memcheck")


def _engine_concurrency(page) -> int | None:
    """The limit the page's other engine buttons share (the `engine` concurrency group takes the lowest given)."""
    settings = getattr(page, "settings", None)
    return settings.ui_concurrency if settings is not None else None


def wire(page) -> None:
    """The three buttons (call at the end of Page.wire)."""
    from .own_kernel import outputs as own_kernel_outputs  # a kernel of one's own: its controls read again first
    common = {page.status, page.error_box, page.log_acc, page.log, page.error_line, page.draft, page.share,
              page.py_dl, *own_kernel_outputs(page)}
    engine_kw = dict(concurrency_limit=_engine_concurrency(page), concurrency_id="engine", show_progress="full",
                     show_progress_on=[page.status], api_visibility="private")

    def on_ir(data: dict, request: gr.Request, progress=gr.Progress()):
        result, out = page.engine_action("ir", data, request, progress)
        out[page.ir_view] = ir_view.ir_html(result)
        out[page.results_tabs] = gr.Tabs(selected="lowering")
        return out

    def on_profile(data: dict, request: gr.Request, progress=gr.Progress()):
        result, out = page.engine_action("profile", data, request, progress)
        out[page.profile_view] = profile_view.profile_html(result)
        report = profile_view.report_file(result)
        # the student's own private folder, pruned when old, as every download (downloads.py)
        out[page.ncu_dl] = (gr.update(value=downloads.write(gateway.student_of(request), report[0], report[1]),
                                      interactive=True)
                            if report else gr.update(value=None, interactive=False))
        out[page.results_tabs] = gr.Tabs(selected="profile")
        return out

    def on_memcheck(data: dict, request: gr.Request, progress=gr.Progress()):
        result, out = page.engine_action("memcheck", data, request, progress)
        out[page.memcheck_view] = profile_view.memcheck_html(result)
        out[page.results_tabs] = gr.Tabs(selected="profile")
        return out

    page.ir_btn.click(on_ir, page.setup, common | {page.ir_view, page.results_tabs}, **engine_kw)
    page.profile_btn.click(on_profile, page.setup, common | {page.profile_view, page.ncu_dl, page.results_tabs},
                           **engine_kw)
    page.memcheck_btn.click(on_memcheck, page.setup, common | {page.memcheck_view, page.results_tabs}, **engine_kw)
