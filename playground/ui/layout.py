"""The page: components laid out like Compiler Explorer (source left, generated code right, results below), and
the handlers that wire them to the gateway. Handlers are thin: engine JSON goes through the pure view functions of
highlight/views/charts/history; every engine call goes through `gateway.call` (run_job).

Three parts of the page are sections of their own, each an object that owns its components and its events (as
Gradio's ChatInterface does), kept by the Page as one attribute each: page.course (classroom.ClassSection: share
links, the exercise, the boards, the teacher's view), page.own_kernel (own_kernel.OwnKernel: "New kernel") and
page.insight (insight_tabs.InsightTabs: the Lowering and Profile tabs). The Page calls their builders where each
part stands and their `wire` at the end of its own; they read the page's components through it, and the helpers
they share with it are common.py's."""
from __future__ import annotations

import contextvars
import json
import queue
import re
import threading
import time

import gradio as gr

from . import api, charts, controls as ctl, downloads, gateway, history as hist, views
from .common import StagedProgress, download_path, engine_event, plot, session_of, table, tab_of
from . import insight_tabs  # the Lowering and Profile tabs, the roofline (issue 21)
from . import classroom  # share links, the exercise beside the editor, the board, the teacher's view (issue 19)
from . import own_kernel  # "New kernel": a kernel of one's own, its controls read from its source (issue 18)
from ..settings import Settings, current as current_settings
from .highlight import code_html, source_line_choices
from .styles import (FORGET_LINK_JS, KERNEL_START_JS, SAVE_TAB_DRAFT_JS, SCROLL_TO_ERROR_JS, SCROLL_TO_MARK_JS,
                     TAB_DRAFT_JS, TYPED_TO_TAB_DRAFT_JS)

DRAFT_KEY = "tilelang-playground-draft"
EDITS_KEY = "tilelang-playground-edits"  # {shipped kernel: the user's edited text of it}
AUTO = "auto"
COMPARE_HINT = "Compile twice (say, before and after an edit) and pick the two here to see how the CUDA changed."
LEGEND = ('<div class="pg-legend">Click or select lines in the editor, or hover a CUDA line, to see what came '
          'from where.'
          '<span class="sw" style="background:#388bfd"></span>chosen source line'
          '<span class="sw" style="background:#a371f7"></span>editor selection'
          '<span class="sw" style="background:#d29922"></span>hover'
          '<span class="sw" style="background:#f85149"></span>error line</div>')


class SourceEditor(gr.Code):
    """The source editor: a gr.Code whose text goes to the browser as it is. Gradio's strips the leading and
    trailing whitespace of every value it sends, so a kernel, a draft or a share link came back without its final
    newline."""

    def get_block_name(self) -> str:
        return "code"  # (the browser's component is gr.Code's own)

    def postprocess(self, value):
        return value if isinstance(value, str) else super().postprocess(value)


def opened_share_text(what: str, shared: dict) -> str:
    """The status line of a page opened from a share link: "Opened <what>", the result it was shared with."""
    said = classroom.summary_text(shared.get("summary"))
    return f"Opened {what}" + (f"; {said}." if said else ".") + " Compile or Run to see it here."


class Page:
    """The components of one page, and the handlers over them. `build` lays the page out in sections (toolbar,
    source column, code column, results), each a method, so a new element goes into the section it belongs to; the
    class, a kernel of one's own and the Lowering and Profile tabs are section objects (self.course,
    self.own_kernel, self.insight) that own their components and their events."""

    def __init__(self, settings: Settings | None = None):
        # ui_concurrency: engine requests handed on at once (the job layer queues CPU and GPU itself, bench/load.json);
        # draft_secret: obfuscates the draft in localStorage only.
        self.settings = settings or current_settings()
        self.names = gateway.kernel_names()
        if not self.names:
            raise RuntimeError("no kernel of the catalogue loads; check kernels/")
        self.default_kernel = "gemm" if "gemm" in self.names else self.names[0]
        self.arch_choices = [AUTO] + gateway.arches()
        self.arch_options = [("auto", AUTO)] + [(a, a) for a in gateway.arches()]
        # The page's sections: each makes its components as the page calls its builders (build) and wires them.
        self.course = classroom.ClassSection(self)
        self.own_kernel = own_kernel.OwnKernel(self)
        self.insight = insight_tabs.InsightTabs(self)

    # -- building ---------------------------------------------------------------------------------------------
    def build(self) -> gr.Blocks:
        first = ctl.controls_for(gateway.describe(self.default_kernel))
        # analytics_enabled=False: Gradio's telemetry (usage reports to its servers) is on unless turned off, and the
        # playground phones nowhere.
        with gr.Blocks(title="TileLang Playground", analytics_enabled=False) as demo:
            self.draft = gr.BrowserState(None, storage_key=DRAFT_KEY, secret=self.settings.draft_secret)
            # A user's edits of each shipped kernel, kept when another kernel takes the editor and given back when
            # they return to it (Reset gives the original); `shown`: the kernel whose text the editor holds.
            self.edited = gr.BrowserState({}, storage_key=EDITS_KEY, secret=self.settings.draft_secret)
            self.shown = gr.State(None)
            self.history = gr.State([])
            self.last = gr.State(None)        # what the code panes show: cuda, line_map, ptx, sass, host, source
            self.tuned = gr.State(None)       # the last autotune result
            self.swept = gr.State(None)       # the last sweep result
            self.error_line = gr.Number(None, visible=False)

            with gr.Row(elem_id="pg-header"):
                gr.HTML('<div class="pg-title">TileLang <span class="accent">Playground</span></div>'
                        '<div class="pg-sub">Edit a TileLang kernel, see the CUDA it becomes, check it and time it '
                        'against PyTorch.</div>')
            self.course.build_who()  # who is logged in, and Log out
            self.banner = gr.HTML("", elem_id="pg-banner")
            self.build_toolbar(first)
            self.own_kernel.build()
            self.status = gr.HTML(views.status_html("", None), elem_id="pg-status")
            with gr.Row(equal_height=False, elem_id="pg-panes"):
                with gr.Column(scale=1, min_width=300, elem_id="pg-left"):
                    self.build_source_column()
                    self.course.build_share()
                with gr.Column(scale=1, min_width=300, elem_id="pg-right"):
                    self.course.build_exercise()
                    self.build_code_column()
            self.build_results()
            self.course.build_class()

            api.register(self.settings.ui_concurrency, "engine")
            classroom.register(self.settings.ui_concurrency, "engine")
            self.wire(demo)
        return demo

    def build_toolbar(self, first: ctl.Controls) -> None:
        with gr.Row(elem_id="pg-toolbar", equal_height=True):
            self.kernel = gr.Dropdown([(n, n) for n in self.names] + [(own_kernel.OWN_LABEL, own_kernel.OWN)],
                                      value=self.default_kernel, label="Kernel", scale=2,
                                      min_width=140, elem_id="pg-kernel", interactive=True)
            self.preset = gr.Dropdown(list(first.presets) + [ctl.CUSTOM],
                                      value=ctl.preset_for(first, first.defaults()), label="Problem size",
                                      scale=3, min_width=150, elem_id="pg-preset")
            self.dtype = gr.Dropdown(first.dtypes, value=first.dtype, label="dtype", scale=1, min_width=128,
                                     elem_id="pg-dtype")
            self.arch = gr.Dropdown(self.arch_options, value=AUTO, label="Target arch", scale=1,
                                    min_width=110, elem_id="pg-arch")
            button = dict(scale=0, min_width=100)  # the dropdowns take the width left, so their values read whole
            self.compile_btn = gr.Button("Compile", variant="primary", elem_id="pg-compile", **button)
            self.run_btn = gr.Button("Run ▶", variant="primary", elem_id="pg-run", **button)
            self.tune_btn = gr.Button("Autotune", elem_id="pg-tune", **button)
            small = dict(button, min_width=76)  # (so that the dropdowns keep the width to show their values whole)
            self.stop_btn = gr.Button("Stop", variant="secondary", elem_id="pg-stop", **small)
            self.reset_btn = gr.Button("Reset", variant="secondary", elem_id="pg-reset", **small)

    def build_source_column(self) -> None:
        """The error, the editor, the parameters (problem sizes apart from tile parameters), downloads, the link."""
        self.error_box = gr.HTML("", elem_id="pg-error", visible=False)
        with gr.Accordion("Full log", open=False, visible=False, elem_id="pg-log") as self.log_acc:
            self.log = gr.Code("", language=None, lines=12, max_lines=30, show_label=False, interactive=False,
                               wrap_lines=True)
        # Long lines wrap (a kernel's docstring is ~118 characters; the column is half a screen) and the editor
        # grows with the file up to about a screen before it scrolls.
        self.editor = SourceEditor(gateway.original_source(self.default_kernel), language="python", lines=24,
                              max_lines=48, label="TileLang source (Python)", elem_id="pg-editor",
                              interactive=True, wrap_lines=True)
        with gr.Column(elem_id="pg-params"):  # (no accordion: the controls stay in view under the editor)
            self.params_note = gr.HTML("", elem_id="pg-params-note", elem_classes="pg-params-note")
            gr.HTML('<div class="pg-group-label">Problem size</div>')
            with gr.Row(elem_id="pg-problem"):
                self.p_slots = [self.slot(f"p{i}") for i in range(ctl.PROBLEM_SLOTS)]
            gr.HTML('<div class="pg-group-label">Tile parameters and options '
                    '<small>(hover a name for what it does)</small></div>')
            with gr.Row(elem_id="pg-tile"):
                self.t_slots = [self.slot(f"t{i}") for i in range(ctl.TILE_SLOTS)]
            self.param_help = gr.HTML("", elem_id="pg-param-help")
        with gr.Row():
            self.py_dl = gr.DownloadButton("Download .py", size="sm", elem_id="pg-dl-py")
            self.cu_dl = gr.DownloadButton("Download .cu", size="sm", interactive=False, elem_id="pg-dl-cu")
        self.share = gr.HTML("", elem_id="pg-share")

    @staticmethod
    def slot(label: str) -> gr.Dropdown:
        # Every slot takes any value: a value of the kernel shown before cannot fail Gradio's choice check while a
        # switch is under way, and out-of-space values are marked on the page rather than refused.
        return gr.Dropdown(choices=[], label=label, visible=False, allow_custom_value=True, min_width=110,
                           elem_classes="pg-slot")

    def build_code_column(self) -> None:
        self.src_line = gr.Dropdown([], value=None, label="Mark the CUDA of source line", elem_id="pg-srcline",
                                    interactive=True)
        self.code_note = gr.HTML("", elem_id="pg-code-note", elem_classes="pg-code-note")  # views.edited_note
        with gr.Tabs(elem_id="pg-code-tabs"):
            with gr.Tab("CUDA", id="cuda"):
                self.cuda = gr.HTML(code_html("", empty="Compile to see the generated CUDA."), elem_id="pg-cuda")
            with gr.Tab("PTX", id="ptx"):
                self.ptx = gr.HTML(code_html("", empty="Compile to see the PTX."), elem_id="pg-ptx")
            with gr.Tab("SASS", id="sass"):  # what ptxas made of the PTX: what the GPU runs
                self.sass = gr.HTML(code_html("", empty="Compile to see the SASS."), elem_id="pg-sass")
            with gr.Tab("Host code", id="host"):
                self.host = gr.HTML(code_html("", empty="Compile to see the host code."), elem_id="pg-host")
        gr.HTML(LEGEND)  # under the code, so the code starts level with the editor
        self.resources = gr.HTML(views.resources_html(None), elem_id="pg-resources")

    def build_results(self) -> None:
        with gr.Tabs(elem_id="pg-results") as self.results_tabs:
            with gr.Tab("Correctness", id="correctness"):
                self.verify = gr.HTML(views.verification_html(None), elem_id="pg-verify")
            with gr.Tab("Speed", id="speed"):
                with gr.Row(equal_height=False):
                    with gr.Column(scale=3):
                        self.speed_plot = gr.Plot(label="Kernel vs baselines", visible=False,
                                                  elem_id="pg-speed-plot")
                        self.roofline_plot = gr.Plot(label="Roofline", visible=False, elem_id="pg-roofline-plot")
                    with gr.Column(scale=4):
                        self.speed = gr.HTML(views.speed_html(None), elem_id="pg-speed")
            with gr.Tab("Size sweep", id="sweep"):
                with gr.Row():
                    self.sweep_btn = gr.Button("Sweep problem sizes", scale=0, min_width=220, elem_id="pg-sweep")
                    self.sweep_metric = gr.Radio([("TFLOP/s", "tflops"), ("GB/s", "gbps"), ("time", "median_ms")],
                                                 value="tflops", show_label=False, scale=2)
                self.sweep_error = gr.HTML("", elem_id="pg-sweep-error")
                self.sweep_plot = gr.Plot(label="Sweep", visible=False, elem_id="pg-sweep-plot")
                self.sweep_table = gr.Dataframe(interactive=False, wrap=False, max_height=300, visible=False,
                                                elem_id="pg-sweep-table")
            with gr.Tab("Autotune", id="tune"):
                self.tune_summary = gr.HTML(views.tune_summary_html(None), elem_id="pg-tune-summary")
                with gr.Row():
                    self.apply_best = gr.Button("Apply best config to the controls", interactive=False, scale=0,
                                                min_width=300, elem_id="pg-apply-best")
                self.tune_plot = gr.Plot(label="Configurations", visible=False, elem_id="pg-tune-plot")
                self.tune_table = gr.Dataframe(interactive=False, wrap=False, max_height=360, visible=False,
                                               elem_id="pg-tune-table")
            with gr.Tab("History", id="history"):
                self.hist_plot = gr.Plot(label="Runs of this session", visible=False, elem_id="pg-hist-plot")
                self.hist_table = gr.Dataframe(hist.frame([]), interactive=False, wrap=True, max_height=360,
                                               elem_id="pg-hist-table")
            with gr.Tab("Compare", id="compare"):
                with gr.Row():
                    self.cmp_a = gr.Dropdown([], label="Older", elem_id="pg-cmp-a")
                    self.cmp_b = gr.Dropdown([], label="Newer", elem_id="pg-cmp-b")
                self.diff = gr.HTML(views.placeholder(COMPARE_HINT), elem_id="pg-diff")
            self.insight.build()

    # -- shared pieces of handlers ------------------------------------------------------------------------------
    @property
    def setup(self) -> set:
        return {self.kernel, self.editor, self.dtype, self.arch, *self.p_slots, *self.t_slots, self.own_kernel.own,
                self.own_kernel.entry}

    @property
    def action_outputs(self) -> set:
        """What every engine action may change (Compile, Run, Show lowering, ...): the status, the error, the draft
        and the links, and the controls of a kernel of one's own, read again first where its text changed."""
        return {self.status, self.error_box, self.log_acc, self.log, self.error_line, self.draft, self.share,
                self.py_dl, self.params_note, *self.p_slots, *self.t_slots, *self.own_kernel.outputs()}

    def read(self, data: dict):
        if self.own_kernel.is_own(data):
            return self.own_kernel.read(data)
        kernel = data[self.kernel] if data[self.kernel] in self.names else self.default_kernel
        c = ctl.controls_for(gateway.describe(kernel))
        values = ctl.values_from_slots(c, [data[s] for s in self.p_slots], [data[s] for s in self.t_slots])
        dtype = data[self.dtype] or c.dtype
        arch = data[self.arch]
        return kernel, data[self.editor] or "", c, values, dtype, (None if arch in (None, "", AUTO) else arch)

    def slot_updates(self, c: ctl.Controls, values: dict) -> dict:
        """Every slot set for kernel `c` in one update (label, choices, value together), the rest hidden; the
        parameters' tooltips and marks with them."""
        out = {}
        for slots, group in ((self.p_slots, c.problem), (self.t_slots, c.tile)):
            for i, slot in enumerate(slots):
                if i < len(group):
                    control = group[i]
                    value = str(values.get(control.name, control.default))
                    choices = control.choices + ([value] if value not in control.choices else [])
                    out[slot] = gr.update(visible=True, label=control.name, choices=choices, value=value, info=None)
                else:
                    out[slot] = gr.update(visible=False, value=None, choices=[])
        out[self.param_help] = views.param_help_html([(x.name, ctl.help_text(c.kernel, x)) for x in c.problem + c.tile])
        marks = self.param_marks(c, values)
        for slot, update in marks.items():
            out[slot] = {**out[slot], **update} if slot in out else update
        return out

    def param_marks(self, c: ctl.Controls, values: dict, error: dict | None = None,
                    config: dict | None = None) -> dict:
        """The note beside the parameters and each slot's mark: a resource error on the controls it names (red),
        values outside the tuned space (amber); under each tile control left at "auto", the value the engine picked
        for it in the answer whose `config` is given, "set by you" under the others (cleared on the next edit: it
        was for that request)."""
        outside = ctl.outside_space(c, values)
        error = error if (error or {}).get("stage") == "resources" else None
        # The controls a resource error is about: those its message names (num_stages, say) and the tile values the
        # user moved off the defaults, which made the tiles bigger than the kernel's own choice.
        named = ctl.named_in(c, error.get("message", "")) if error else []
        if error:
            moved = [x.name for x in c.tile if x.name in ctl.changed(c, values) and x.name not in named]
            named = [n for n in c.names if n in named or n in moved]
        out = {self.params_note: views.params_note_html(error, named, outside)}
        picked = ctl.auto_picks(c, values, config)
        for slots, group in ((self.p_slots, c.problem), (self.t_slots, c.tile)):
            for slot, control in zip(slots, group):
                mark = ["pg-bad"] if control.name in named else ["pg-warn"] if control.name in outside else []
                out[slot] = gr.update(elem_classes=["pg-slot", *mark])
                if control.auto:  # what "auto" became; beside it, a value the user set says so
                    out[slot]["info"] = (f"{ctl.AUTO_TILE} → {picked[control.name]}" if control.name in picked else
                                         "set by you" if picked else None)
        return out

    def draft_and_links(self, kernel: str, source: str, c: ctl.Controls, values: dict, dtype: str, arch,
                        session: str) -> dict:
        draft = {"kernel": kernel, "source": source, "values": values, "dtype": dtype, "arch": arch or AUTO,
                 "tile_auto": True}  # saved since the tile controls have "auto" (see on_load)
        query = views.share_query(kernel, {**values, "dtype": dtype, **({"arch": arch} if arch else {})},
                                  c.defaults())
        share = (f'<div class="pg-share">Link to this setup (not the edits): <a href="?{views.esc(query)}">'
                 f'?{views.esc(query)}</a></div>')
        return {self.draft: draft, self.share: share,
                self.py_dl: gr.update(value=download_path(session, f"{kernel}.py", source),
                                      label=f"Download {kernel}.py")}

    def panes(self, last: dict | None, selected: int | None = None) -> dict:
        """The CUDA, PTX, SASS and host panes and the source-line picker for `last` (a compile-bearing result)."""
        if not last or not last.get("cuda"):
            return {self.cuda: code_html("", empty="Compile to see the generated CUDA."),
                    self.ptx: code_html("", empty="Compile to see the PTX."),
                    self.sass: code_html("", empty="Compile to see the SASS."),
                    self.host: code_html("", empty="Compile to see the host code."),
                    self.src_line: gr.update(choices=[], value=None)}
        stale = self.stale(last)
        return {self.cuda: self.cuda_view(last, selected),
                self.ptx: stale + code_html(last.get("ptx") or "", "ptx", empty="No PTX in this result."),
                self.sass: stale + code_html(last.get("sass") or "", "sass",
                                             empty="No SASS in this result (the server has no nvdisasm)."),
                self.host: stale + code_html(last.get("host") or "", "cpp", empty="No host code in this result."),
                self.src_line: gr.update(choices=source_line_choices(
                    last.get("source") or "", last.get("line_map"), last.get("line_origins"),
                    last.get("origin_lines")), value=selected)}

    @staticmethod
    def cuda_view(last: dict | None, selected) -> str:
        if not last or not last.get("cuda"):
            return code_html("", empty="Compile to see the generated CUDA.")
        err = last.get("error_line")
        return Page.stale(last) + code_html(
            last["cuda"], "cuda", line_map=last.get("line_map"), origins=last.get("line_origins"),
            origin_lines=last.get("origin_lines"),
            marked=[] if selected in (None, "") else [int(selected) if str(selected).isdigit() else str(selected)],
            error_lines=[err] if err else [],
            source_lines=(last.get("source") or "").splitlines(), fold_preamble=True)

    @staticmethod
    def stale(last: dict | None) -> str:
        return views.stale_note(last.get("label")) if last and last.get("stale") else ""

    def error_outputs(self, result: dict | None, source: str) -> dict:
        err = (result or {}).get("error")
        if not err:
            return {self.error_box: gr.update(value="", visible=False), self.log_acc: gr.update(visible=False),
                    self.log: "", self.error_line: None}
        return {self.error_box: gr.update(value=views.error_html(err, source), visible=True),
                self.log_acc: gr.update(visible=bool(err.get("log")), open=False),
                self.log: err.get("log") or "", self.error_line: err.get("line")}

    def history_outputs(self, history: list) -> dict:
        choices = hist.choices(history)
        a = choices[1][1] if len(choices) > 1 else None
        b = choices[0][1] if choices else None
        return {self.history: history, self.hist_table: hist.frame(history),
                self.hist_plot: plot(charts.history_figure(history)),
                self.cmp_a: gr.update(choices=choices, value=a), self.cmp_b: gr.update(choices=choices, value=b),
                self.diff: self.on_compare(history, a, b)}

    def fresh_kernel_outputs(self, kernel: str, source: str, c: ctl.Controls, values: dict, dtype: str, arch,
                             session: str, status: str) -> dict:
        """Everything a newly chosen (or restored, or reset) kernel shows."""
        out = {self.kernel: kernel, self.editor: source, self.shown: kernel,
               self.preset: gr.update(choices=list(c.presets) + [ctl.CUSTOM], value=ctl.preset_for(c, values)),
               self.dtype: gr.update(choices=c.dtypes, value=dtype if dtype in c.dtypes else c.dtype),
               self.arch: arch or AUTO, self.status: status, self.last: None, self.code_note: "",
               self.resources: views.resources_html(None),
               self.cu_dl: gr.update(value=None, interactive=False)}
        out.update({self.verify: views.verification_html(None), self.speed: views.speed_html(None),
                    self.speed_plot: plot(None), self.roofline_plot: plot(None)})  # another kernel's would mislead
        out.update(self.slot_updates(c, values))
        out.update(self.panes(None))
        out.update(self.error_outputs(None, source))
        out.update(self.draft_and_links(kernel, source, c, values, dtype, arch, session))
        return out

    # -- handlers ---------------------------------------------------------------------------------------------
    def on_load(self, data: dict, request: gr.Request):
        query = dict(request.query_params) if request is not None else {}
        draft = data[self.draft] if isinstance(data[self.draft], dict) else None
        shared, share_note = classroom.shared_draft(query.pop("s", None))  # /?s=ID: exactly what was shared
        for key in classroom.QUERY_KEYS:  # the class section's own (a board's re-run link), not a kernel's value
            query.pop(key, None)
        if shared and shared["kernel"] == own_kernel.OWN:  # a kernel of one's own: opened as one's own
            return self.opened_own_share(shared, data, request)
        if shared:
            draft, query = shared, {"kernel": shared["kernel"]}
        kernel = query.get("kernel") if query.get("kernel") in self.names else None
        notes = [share_note] if share_note else []
        if query.get("kernel") and not kernel:
            notes.append(f"no kernel named {query['kernel']!r}")
        if kernel is None and draft and draft.get("kernel") == own_kernel.OWN and not notes:
            return self.own_kernel.on_load(draft, data, request)
        if kernel is None:
            kernel = draft["kernel"] if draft and draft.get("kernel") in self.names else self.default_kernel
        c = ctl.controls_for(gateway.describe(kernel))
        base, source, arch = c.defaults(), gateway.original_source(kernel), AUTO
        restored = bool(draft and draft.get("kernel") == kernel)
        from_link = query.get("kernel") == kernel and not shared
        if restored:
            source = draft.get("source") or source
        if restored and not from_link:  # a link is a setup: what it leaves out is the default, not the draft's
            saved = {k: str(v) for k, v in (draft.get("values") or {}).items() if k in base}
            base.update(saved if draft.get("tile_auto") else ctl.from_draft_before_auto(c, saved))
            if draft.get("dtype") in c.dtypes:
                base["dtype"] = draft["dtype"]
            arch = draft.get("arch") if draft.get("arch") in self.arch_choices else AUTO
        values, unknown = ctl.from_query(c, {k: v for k, v in query.items()}, base)
        if query.get("arch") in self.arch_choices:
            arch = query["arch"]
        if unknown:
            notes.append("ignored unknown parameters: " + ", ".join(unknown))
        dtype = values.pop("dtype", c.dtype)
        edited = not gateway.is_original(kernel, source)
        # (a draft that holds only the defaults, as after a first visit, is nothing to tell of)
        restored_something = restored and bool(edited or ctl.changed(c, values, dtype) or arch != AUTO)
        text = (f"Loaded {kernel} from the link" + ("; your edited text of it is kept." if restored and edited
                                                    else ".") if from_link else
                f"Restored your draft of {kernel}" + (" (edited)." if edited else ".") if restored_something else
                views.READY)
        if shared:
            text = opened_share_text(f"the shared {kernel} ({shared['shared']})" + (", edited" if edited else ""),
                                     shared)
        if notes:
            text += " " + "; ".join(notes) + "."
        status = f'<div class="pg-status {"fail" if notes else "idle"}">{views.esc(text)}</div>'
        out = self.fresh_kernel_outputs(kernel, source, c, values, dtype, None if arch == AUTO else arch,
                                        session_of(request), status)
        out[self.banner] = views.banner_html(gateway.health())
        return out

    def opened_own_share(self, shared: dict, data: dict, request: gr.Request) -> dict:
        """A share link of a kernel of one's own: its text in the editor as one's own kernel, its parameters read
        from it and the shared values set (what the browser held before is offered as a download: classroom's
        keep_draft)."""
        arch = shared.get("arch") if shared.get("arch") in self.arch_choices else AUTO
        data = {**data, self.arch: arch}  # (the link's target, as a shipped kernel's link sets it)
        out = self.own_kernel.on_load(shared, data, request)
        if (data.get(self.own_kernel.own) or {}).get("source") is not None:  # (else: why it could not be read)
            text = opened_share_text(f"the shared kernel ({shared['shared']}) as your own kernel", shared)
            out[self.status] = f'<div class="pg-status idle">{views.esc(text)}</div>'
        return out

    def on_kernel(self, data: dict, request: gr.Request):
        """One event for a kernel switch: it reads only the kernel and the target, and sets every control of the
        new kernel (choices and value together), so nothing of the kernel before is checked against it."""
        if self.own_kernel.is_own(data):
            return {**self.own_kernel.on_select(data, request), **self.keep_leaving(data)}
        kernel = data[self.kernel] if data[self.kernel] in self.names else self.default_kernel
        kept = self.edits(data).get(kernel)
        if kept and kept != data.get(self.editor):
            status = (f'<div class="pg-status idle">Your edits of {views.esc(kernel)} are back; Reset gives the '
                      'original.</div>')
            return self.switch_to(kernel, kept, data, request, status)
        return self.switch_to(kernel, gateway.original_source(kernel), data, request, views.status_html("", None))

    def edits(self, data: dict) -> dict:
        kept = data.get(self.edited)
        return {k: v for k, v in kept.items() if k in self.names and isinstance(v, str)} if isinstance(kept, dict) \
            else {}

    def keep_leaving(self, data: dict) -> dict:
        """The editor's text about to be replaced by another kernel's: the user's edits of a shipped kernel are kept
        for when they come back to it (its original text needs no keeping)."""
        shown, text, edits = data.get(self.shown), data.get(self.editor) or "", self.edits(data)
        if shown in self.names:
            if text.strip() and not gateway.is_original(shown, text):
                edits[shown] = text
            else:
                edits.pop(shown, None)
        return {self.edited: edits}

    def switch_to(self, kernel: str, source: str, data: dict, request: gr.Request, status: str,
                  dtype: str | None = None) -> dict:
        """Everything for a shipped kernel newly in the editor with `source` (a switch, or an exercise's starter):
        its controls at their defaults (`dtype` if it is one of the kernel's), the target kept."""
        c = ctl.controls_for(gateway.describe(kernel))
        values = c.defaults()
        default_dtype = values.pop("dtype")
        arch = None if data[self.arch] in (None, "", AUTO) else data[self.arch]
        out = self.fresh_kernel_outputs(kernel, source, c, values, dtype if dtype in c.dtypes else default_dtype,
                                        arch, session_of(request), status)
        out.update(self.own_kernel.leave(data))  # one's own kernel's text kept, its controls gone
        if self.shown in data:  # (an exercise's starter and a switch know what the editor held)
            out.update(self.keep_leaving(data))
        return out

    def on_reset(self, data: dict, request: gr.Request):
        if self.own_kernel.is_own(data):
            out = self.on_kernel(data, request)  # no original of one's own kernel: its text stays, its controls reset
            out[self.status] = ('<div class="pg-status idle">Reset the parameters to your source\'s defaults; '
                                'your text is kept.</div>')
            return out
        kernel = data[self.kernel] if data[self.kernel] in self.names else self.default_kernel
        out = self.switch_to(kernel, gateway.original_source(kernel), data, request,
                             f'<div class="pg-status idle">Reset {views.esc(kernel)} to the original source and '
                             'parameters.</div>')
        out[self.edited] = {k: v for k, v in self.edits(data).items() if k != kernel}  # its edits asked away
        return out

    def on_stop(self, request: gr.Request):
        """Stop: this tab's job ends now (its process killed), and one still queued will not start."""
        stopped = gateway.stop(tab_of(request))
        if stopped["killed"]:
            text = "Stopped: your job was killed; the code and what was shown before it are as they were."
        elif stopped["left"]:  # on a Ray node: not killed from here
            text = "Stopped: your job runs on a node of the cluster to its end there; its answer will be dropped."
        elif stopped["waiting"]:
            text = "Stopped: your job was about to start and will not."
        else:
            text = "Stopped: nothing of yours was running (a job still queued will not start)."
        return f'<div class="pg-status idle">{views.esc(text)}</div>'

    def on_preset(self, data: dict, request: gr.Request):
        kernel, source, c, values, dtype, arch = self.read(data)
        label = data[self.preset]
        if label in c.presets:
            values.update(ctl.preset_values(c, label))
        out = self.slot_updates(c, values)
        out.update(self.draft_and_links(kernel, source, c, values, dtype, arch, session_of(request)))
        return out

    def on_edit(self, data: dict, request: gr.Request):
        """A user edit of the source or a control: save the draft, refresh the link, the .py and the preset, and
        mark values outside the tuned space."""
        kernel, source, c, values, dtype, arch = self.read(data)
        out = self.draft_and_links(kernel, source, c, values, dtype, arch, session_of(request))
        out[self.preset] = gr.update(value=ctl.preset_for(c, values))
        out.update(self.param_marks(c, values))
        out[self.code_note] = views.edited_note((data.get(self.last) or {}).get("setup"),
                                                self.setup_key(kernel, source, values, dtype, arch))
        return out

    @staticmethod
    def setup_key(kernel: str, source: str, values: dict, dtype: str, arch) -> str:
        """What a compile is asked: the code shown is of this setup, until an edit changes it."""
        return json.dumps([kernel, source, values, dtype, arch or AUTO], sort_keys=True, default=str)

    def engine_action(self, action: str, data: dict, request: gr.Request, progress: gr.Progress,
                      options: dict | None = None, on_partial=None) -> tuple[dict, dict]:
        if self.own_kernel.is_own(data):
            return self.own_kernel.engine_action(action, data, request, progress, options, on_partial)
        kernel, source, c, values, dtype, arch = self.read(data)
        started = time.monotonic()
        with StagedProgress(progress, action) as staged:
            result = gateway.call(action, kernel, source, ctl.engine_params(values, dtype),
                                  session=session_of(request), arch=arch, options=options, on_progress=staged,
                                  owner=tab_of(request), on_partial=on_partial)
        result = views.with_own_file_hint(result, kernel)
        out = {self.status: views.status_html(action, result, waited=time.monotonic() - started)}
        out.update(self.error_outputs(result, source))
        out.update(self.draft_and_links(kernel, source, c, values, dtype, arch, session_of(request)))
        return result, out

    def apply_compiled(self, action: str, data: dict, result: dict, request: gr.Request) -> dict:
        """Panes, resources, history and downloads after a compile or a run."""
        kernel, source, c, values, dtype, arch = self.read(data)
        out = {}
        err = result.get("error") or {}
        previous = data[self.last]
        if result.get("cuda"):
            last = {"cuda": result["cuda"], "line_map": result.get("line_map"), "ptx": result.get("ptx"),
                    "line_origins": result.get("line_origins"), "origin_lines": result.get("origin_lines"),
                    "sass": result.get("sass"), "host": result.get("host"), "source": source, "kernel": kernel,
                    "error_line": err.get("line"), "setup": self.setup_key(kernel, source, values, dtype, arch),
                    "label": f"{kernel} {hist.short_config(result.get('config'), c.factory_defaults())}".strip()}
            selected = err.get("line") if err.get("line") in (result.get("line_map") or []) else None
            out.update(self.panes(last, selected))
            out[self.last] = last
            out[self.code_note] = ""
            out[self.resources] = views.resources_html(result)
            out[self.cu_dl] = gr.update(value=download_path(session_of(request), f"{kernel}.cu", result["cuda"]),
                                        interactive=True, label=f"Download {kernel}.cu")
        elif previous and previous.get("cuda") and err and not gateway.refused_for_no_gpu(result):
            # No new CUDA (the compile failed): the CUDA still shown is the last good compile's, and says so; the
            # error's line is marked in it where it maps there. (A run turned away for want of a GPU compiled
            # nothing and failed nothing: the CUDA shown stays as it is.)
            last = {**previous, "error_line": err.get("line"), "stale": True}
            out[self.last] = last
            out.update(self.panes(last, None))
        if result.get("cuda") or err.get("stage") in ("python", "definition", "tilelang", "nvcc", "timeout",
                                                      "verify"):
            history = hist.add(data[self.history], action, kernel, result,
                               gateway.normalize_source(kernel, source) is not None, ctl.config_of(c, values, dtype),
                               c.factory_defaults())  # labels name the tile that ran, as it differs from these
            out.update(self.history_outputs(history))
        return out

    def marks_after(self, data: dict, result: dict) -> dict:
        """The parameters' note and marks after an action: a resource error beside the controls it names."""
        if self.own_kernel.is_own(data):  # its controls may just have been read again: set whole, then marked
            return self.own_kernel.marks_after(data, result)
        _, _, c, values, _, _ = self.read(data)
        return self.param_marks(c, values, result.get("error"), result.get("config"))

    def on_compile(self, data: dict, request: gr.Request, progress=gr.Progress()):
        """CUDA first: the generated CUDA and its line map are shown the moment lowering ends (the job's partial
        answer), the PTX, SASS and resources when the whole answer comes; the status line names the stage meanwhile.
        The job runs in a thread of this handler's context (Gradio's progress finds its event through it)."""
        events: queue.Queue = queue.Queue()

        def work():
            try:
                events.put(("done", self.engine_action("compile", data, request, progress,
                                                       on_partial=lambda partial: events.put(("partial", partial)))))
            except BaseException as exc:  # (engine_action answers every failure; this is a bug of the page)
                events.put(("raised", exc))
        threading.Thread(target=contextvars.copy_context().run, args=(work,), daemon=True).start()
        while True:
            what, value = events.get()
            if what == "partial":
                yield self.partial_outputs(data, value)
                continue
            if what == "raised":
                raise value
            result, out = value
            self.course.note_activity(data, "compile", result, request)  # (with an exercise picked: the class's)
            out.update(self.marks_after(data, result))
            out.update(self.apply_compiled("compile", data, result, request))
            yield out
            return

    def partial_outputs(self, data: dict, partial: dict) -> dict:
        """A compile's partial answer on the page: its CUDA with the line map, the PTX and SASS still to come."""
        kernel, source, *_ = self.read(data)
        if not isinstance(partial, dict) or not partial.get("cuda"):
            return {}
        shown = {"cuda": partial["cuda"], "line_map": partial.get("line_map"), "source": source, "kernel": kernel,
                 "line_origins": partial.get("line_origins"), "origin_lines": partial.get("origin_lines")}
        # (Gradio draws no progress on the status line once a handler has yielded: the line says what is still on)
        return {self.status: ('<div class="pg-status pending">waiting for nvcc and ptxas (the PTX, the SASS, '
                              'registers and shared memory): lowering is done, its CUDA is shown…</div>'),
                self.cuda: self.cuda_view(shown, None),
                self.ptx: code_html("", empty="nvcc is compiling this CUDA: its PTX comes next."),
                self.sass: code_html("", empty="nvcc is compiling this CUDA: the SASS comes after ptxas."),
                self.src_line: gr.update(choices=source_line_choices(source, partial.get("line_map"),
                                                                     partial.get("line_origins"),
                                                                     partial.get("origin_lines")), value=None),
                self.code_note: ""}

    def on_run(self, data: dict, request: gr.Request, progress=gr.Progress()):
        result, out = self.engine_action("run", data, request, progress)
        self.course.note_activity(data, "run", result, request)
        out.update(self.marks_after(data, result))
        out.update(self.apply_compiled("run", data, result, request))
        out[self.verify] = views.verification_html(result)
        out[self.speed] = views.speed_html(result)
        out[self.speed_plot] = plot(charts.speed_figure(result))
        out[self.roofline_plot] = insight_tabs.roofline_update(result)
        failed = any(not v.get("passed") for v in result.get("verification") or [])
        if result.get("timing") or failed:
            out[self.results_tabs] = gr.Tabs(selected="correctness" if failed else "speed")
        return out

    def on_tune(self, data: dict, request: gr.Request, progress=gr.Progress()):
        result, out = self.engine_action("tune", data, request, progress)
        out.update(self.marks_after(data, result))
        out[self.tuned] = result
        out[self.tune_summary] = views.tune_summary_html(result)
        out[self.tune_plot] = plot(charts.tune_figure(result))
        out[self.tune_table] = table(views.tune_frame(result))
        out[self.apply_best] = gr.update(interactive=bool((result.get("best") or {}).get("tile")))
        out[self.results_tabs] = gr.Tabs(selected="tune")
        return out

    def on_apply_best(self, data: dict, request: gr.Request):
        kernel, source, c, values, dtype, arch = self.read(data)
        best = ((data[self.tuned] or {}).get("best") or {}).get("tile") or {}
        values = ctl.apply_tile(c, values, best)
        out = self.slot_updates(c, values)
        out.update(self.draft_and_links(kernel, source, c, values, dtype, arch, session_of(request)))
        out[self.status] = (f'<div class="pg-status ok">Applied the best config: '
                            f'<code>{views.esc(views.tile_label(best))}</code>. Run it to see it here.</div>')
        return out

    def on_sweep(self, data: dict, request: gr.Request, progress=gr.Progress()):
        result, out = self.engine_action("sweep", data, request, progress)
        out.update(self.marks_after(data, result))
        metric = data[self.sweep_metric]
        kernel_rates = [(r.get("series") or {}).get("kernel", {}).get("tflops") for r in result.get("rows") or []]
        if metric == "tflops" and kernel_rates and all((x or 0) < 1 for x in kernel_rates):
            metric = "gbps"  # memory-bound kernels: bandwidth is the figure that means something
        out[self.swept] = result
        out[self.sweep_metric] = metric
        out[self.sweep_plot] = plot(charts.sweep_figure(result, metric))
        out[self.sweep_table] = table(views.sweep_frame(result))
        out[self.sweep_error] = views.action_error_html("sweep", result)  # in the tab the user is looking at
        return out

    def on_sweep_metric(self, swept, metric):
        return plot(charts.sweep_figure(swept, metric))

    def on_compare(self, history, a, b):
        ea, eb = hist.find(history, a), hist.find(history, b)
        if not ea or not eb:
            return views.placeholder(COMPARE_HINT if len(hist.choices(history)) < 2 else
                                     "Pick two entries of the history.")
        from .highlight import diff_html
        return diff_html(ea["cuda"], eb["cuda"], f"#{ea['n']} {ea['label']}", f"#{eb['n']} {eb['label']}")

    # -- wiring -----------------------------------------------------------------------------------------------
    def wire(self, demo: gr.Blocks) -> None:
        light = dict(concurrency_limit=None, show_progress="hidden")
        self.everything = everything = {
                      self.kernel, self.editor, self.preset, self.dtype, self.arch, self.status, self.last,
                      self.resources, self.cu_dl, self.cuda, self.ptx, self.sass, self.host, self.src_line,
                      self.error_box,
                      self.log_acc, self.log, self.error_line, self.draft, self.share, self.py_dl, *self.p_slots,
                      *self.t_slots, self.params_note, self.param_help, self.verify, self.speed, self.speed_plot,
                      self.roofline_plot, self.own_kernel.own, self.own_kernel.entry, self.own_kernel.own_draft,
                      self.shown, self.edited, self.code_note}
        # The tab's own draft first, where it has one (styles.TAB_DRAFT_JS says why), then the page from it.
        demo.load(None, [self.draft], [self.draft], js=TAB_DRAFT_JS).then(
            self.on_load, {self.draft, *self.setup}, everything | {self.banner}, api_visibility="private",
            **light).then(None, None, None, js=FORGET_LINK_JS).then(None, None, None, js=KERNEL_START_JS)
        self.draft.change(None, [self.draft], None, js=SAVE_TAB_DRAFT_JS)
        self.editor.input(None, [self.editor], None, js=TYPED_TO_TAB_DRAFT_JS)
        edits = {self.draft, self.share, self.py_dl, self.preset, self.params_note, *self.p_slots, *self.t_slots,
                 self.code_note}
        self.editor.input(self.on_edit, self.setup | {self.last}, edits, api_visibility="private",
                          trigger_mode="always_last", **light)
        for comp in (self.dtype, self.arch, *self.p_slots, *self.t_slots):
            comp.input(self.on_edit, self.setup | {self.last}, edits, api_visibility="private",
                       trigger_mode="always_last", **light)
        self.preset.input(self.on_preset, self.setup | {self.preset},
                          {*self.p_slots, *self.t_slots, self.params_note, self.param_help, self.draft, self.share,
                           self.py_dl}, api_visibility="private", **light)

        engine_kw = engine_event(self)
        common = self.action_outputs
        compiled = {self.cuda, self.ptx, self.sass, self.host, self.src_line, self.last, self.resources, self.cu_dl,
                    self.history, self.hist_table, self.hist_plot, self.cmp_a, self.cmp_b, self.diff,
                    self.code_note}
        inputs = self.setup | {self.last, self.history, self.course.exercise}  # (the exercise: note_activity)
        compile_job = self.compile_btn.click(self.on_compile, inputs, common | compiled, **engine_kw)
        compile_job.then(None, [self.error_line], None, js=SCROLL_TO_ERROR_JS).then(None, None, None,
                                                                                    js=SCROLL_TO_MARK_JS)
        run_job = self.run_btn.click(self.on_run, inputs, common | compiled | {
            self.verify, self.speed, self.speed_plot, self.roofline_plot, self.results_tabs}, **engine_kw)
        run_job.then(None, [self.error_line], None, js=SCROLL_TO_ERROR_JS)
        tune_job = self.tune_btn.click(self.on_tune, self.setup, common | {
            self.tuned, self.tune_summary, self.tune_plot, self.tune_table, self.apply_best, self.results_tabs},
            **engine_kw)
        sweep_job = self.sweep_btn.click(self.on_sweep, self.setup | {self.sweep_metric}, common | {
            self.swept, self.sweep_metric, self.sweep_plot, self.sweep_table, self.sweep_error},
            **{**engine_kw, "show_progress_on": [self.status, self.sweep_plot]})
        # A kernel switch is one event: `select` fires once per choice (`input` fires twice), and it reads only the
        # kernel and the target, never the previous kernel's controls. It (and Reset) cancels this user's job still
        # queued or running: a compile of the kernel before, answering late, would write its CUDA, status and
        # controls over the new kernel's. (A job already running finishes on the server; its answer is dropped.)
        self.jobs = jobs = [compile_job, run_job, tune_job, sweep_job]  # (New kernel and an exercise's starter too)
        self.kernel.select(self.on_kernel, {self.kernel, self.arch, self.editor, self.own_kernel.own,
                                            self.own_kernel.own_draft, self.shown, self.edited},
                           everything, api_visibility="private", trigger_mode="always_last", cancels=jobs,
                           **light).then(None, None, None, js=KERNEL_START_JS)  # the editor at the kernel's start
        self.reset_btn.click(self.on_reset, self.setup | {self.shown, self.edited}, everything,
                             api_visibility="private", cancels=jobs, **light).then(None, None, None,
                                                                                   js=KERNEL_START_JS)
        self.stop_btn.click(self.on_stop, None, self.status, api_visibility="private", cancels=jobs, **light)
        self.sweep_metric.input(self.on_sweep_metric, [self.swept, self.sweep_metric], self.sweep_plot,
                                api_visibility="private", **light)
        self.apply_best.click(self.on_apply_best, self.setup | {self.tuned},
                              {*self.p_slots, *self.t_slots, self.params_note, self.param_help, self.draft, self.share,
                               self.py_dl, self.status},
                              api_visibility="private", **light)
        self.src_line.input(self.cuda_view, [self.last, self.src_line], self.cuda, api_visibility="private",
                            **light).then(None, None, None, js=SCROLL_TO_MARK_JS)
        # The compile that adds an entry shows its own diff (above); a pick here is the user's. Listening to `change`
        # instead raced: setting both dropdowns at once fired two events, and the one sent while the second dropdown
        # still held its old value could answer last with "the same CUDA".
        for comp in (self.cmp_a, self.cmp_b):
            comp.input(self.on_compare, [self.history, self.cmp_a, self.cmp_b], self.diff,
                        api_visibility="private", **light)
        self.insight.wire()
        self.course.wire(demo)
        self.own_kernel.wire()


def build_demo(settings: Settings | None = None) -> gr.Blocks:
    return Page(settings).build()
