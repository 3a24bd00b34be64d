"""The page's "why is it fast or slow" parts: `InsightTabs`, a section of layout.Page (page.insight) that owns the
Lowering and Profile tabs and their buttons' events: `build` inside the results tabs, `wire` at the end of
Page.wire. The roofline under a run's speed chart is `roofline_update(result)`. Handlers go through
Page.engine_action (gateway.call → run_job) like every button; the HTML comes from the pure views ir_view,
profile_view and roofline."""
from __future__ import annotations

import gradio as gr

from . import downloads, gateway, ir_view, profile_view, roofline
from .common import engine_event


def roofline_update(result: dict | None):
    figure = roofline.roofline_figure(result)
    return gr.update(value=figure, visible=figure is not None)


class InsightTabs:
    """The Lowering and Profile tabs: their buttons and views (attributes of this section), and the three buttons'
    events over the page's setup."""

    def __init__(self, page):
        self.page = page

    def build(self) -> None:
        """The Lowering and Profile tabs (call inside the results gr.Tabs)."""
        with gr.Tab("Lowering", id="lowering"):
            self.ir_btn = gr.Button("Show lowering", scale=0, min_width=220, elem_id="pg-ir-btn")
            self.ir_view = gr.HTML(ir_view.ir_html(None), elem_id="pg-ir")
        with gr.Tab("Profile", id="profile"):
            with gr.Row():
                self.profile_btn = gr.Button("Profile (Nsight Compute)", scale=0, min_width=240,
                                             elem_id="pg-profile-btn")
                self.memcheck_btn = gr.Button("Check memory (compute-sanitizer)", scale=0, min_width=280,
                                              elem_id="pg-memcheck-btn")
                self.ncu_dl = gr.DownloadButton("Download .ncu-rep", size="sm", interactive=False,
                                                elem_id="pg-dl-ncu")
            self.profile_view = gr.HTML(profile_view.profile_html(None), elem_id="pg-profile")
            self.memcheck_view = gr.HTML(profile_view.memcheck_html(None), elem_id="pg-memcheck")

    def wire(self) -> None:
        """The three buttons (call at the end of Page.wire: they change what every engine action does,
        Page.action_outputs, a kernel of one's own's controls among them, read again first)."""
        page = self.page
        common = page.action_outputs
        engine_kw = engine_event(page)

        def on_ir(data: dict, request: gr.Request, progress=gr.Progress()):
            result, out = page.engine_action("ir", data, request, progress)
            out[self.ir_view] = ir_view.ir_html(result)
            out[page.results_tabs] = gr.Tabs(selected="lowering")
            return out

        def on_profile(data: dict, request: gr.Request, progress=gr.Progress()):
            result, out = page.engine_action("profile", data, request, progress)
            out[self.profile_view] = profile_view.profile_html(result)
            report = profile_view.report_file(result)
            # the student's own private folder, pruned when old, as every download (downloads.py)
            out[self.ncu_dl] = (gr.update(value=downloads.write(gateway.student_of(request), report[0], report[1]),
                                          interactive=True)
                                if report else gr.update(value=None, interactive=False))
            out[page.results_tabs] = gr.Tabs(selected="profile")
            return out

        def on_memcheck(data: dict, request: gr.Request, progress=gr.Progress()):
            result, out = page.engine_action("memcheck", data, request, progress)
            out[self.memcheck_view] = profile_view.memcheck_html(result)
            out[page.results_tabs] = gr.Tabs(selected="profile")
            return out

        self.ir_btn.click(on_ir, page.setup, common | {self.ir_view, page.results_tabs}, **engine_kw)
        self.profile_btn.click(on_profile, page.setup, common | {self.profile_view, self.ncu_dl, page.results_tabs},
                               **engine_kw)
        self.memcheck_btn.click(on_memcheck, page.setup, common | {self.memcheck_view, page.results_tabs},
                                **engine_kw)
