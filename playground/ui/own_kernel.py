"""A kernel of one's own on the page: "New kernel" starts from a short template (templates/new_kernel.py) or a copy
of a shipped kernel, and the parameter controls are read from the source being edited (the `describe` job: the text
is only ever imported in a sandboxed job), never from a shipped kernel's file. A file with several kernels gets a
picker of them. The engine sees kernel "" with the source and, where the file has several kernels, `entry`.

The controls are read again whenever the source changed since they were last read: by "Read parameters" and before
every engine action (Compile, Run, ...), so what is sent always matches the text sent with it. The text is kept in
the page's draft (localStorage) and, when one switches to a shipped kernel, in a draft of its own, so switching back
to "my kernel" brings it back.

`OwnKernel` is this part of the page (layout.Page's section page.own_kernel): its components, its events, and what
the page's handlers hand over to it while the editor holds a kernel of one's own; the functions beside it are plain
(the template, reading a described kernel's controls, the note above them).
"""
from __future__ import annotations

import time
from pathlib import Path

import gradio as gr

from ..engine.answers import failed
from ..engine.errors import StageError
from . import controls as ctl, gateway, views
from .common import StagedProgress, engine_event, offer_kept, session_of, tab_of

OWN = "my_kernel"                  # the kernel dropdown's value while the editor holds a kernel of one's own
OWN_LABEL = "✎ my kernel"
OWN_DRAFT_KEY = "tilelang-playground-own-kernel"
TEMPLATE = "template"
TEMPLATE_PATH = Path(__file__).with_name("templates") / "new_kernel.py"


def template_source() -> str:
    return TEMPLATE_PATH.read_text()


def starting_source(start: str | None) -> str:
    """The text "New kernel" starts from: the template, or a copy of the shipped kernel `start`."""
    if start in (None, "", TEMPLATE) or start not in gateway.kernel_names():
        return template_source()
    return gateway.original_source(start)


def mostly_new(before: str, after: str) -> bool:
    """Does `after` share fewer than half its distinct non-blank lines with `before` (a file pasted in, not an edit)?
    Lines as sets: cheap at any length, and blind to a line moved."""
    old = {line.strip() for line in before.splitlines() if line.strip()}
    new = {line.strip() for line in after.splitlines() if line.strip()}
    return bool(new) and len(new & old) * 2 < len(new)


def start_choices(names: list[str]) -> list[tuple[str, str]]:
    return [("template: GEMM + ReLU", TEMPLATE)] + [(f"copy of {n}", n) for n in names]


# -- reading the source's parameters -----------------------------------------------------------------------------
def describe(source: str, entry: str | None, session: str) -> dict:
    """The parameters of the source's kernel `entry` (or the one the file's own code runs, or its only one). A file
    with several kernels is described with all of them in `entries`, which the picker lists."""
    d = gateway.describe_source("", source, {"entry": entry} if entry else {}, session=session)
    if not d.get("ok") and entry:  # the picked kernel was renamed or removed: read the file afresh
        again = describe(source, None, session)
        return again if again.get("ok") else d
    return d


def controls(described: dict | None) -> ctl.Controls:
    """The page's controls for a described kernel of one's own (none while it has not been read)."""
    if not described or not described.get("ok"):
        return ctl.Controls(OWN)
    c = ctl.controls_for(described)
    c.kernel = OWN
    if len(c.problem) > ctl.PROBLEM_SLOTS:  # a file may require more arguments than the sizes' row holds
        c.problem, c.tile = c.problem[:ctl.PROBLEM_SLOTS], c.problem[ctl.PROBLEM_SLOTS:] + c.tile
    return c


def required(described: dict | None) -> list[str]:
    return [n for n in (described or {}).get("required") or [] if n != "dtype"]


def entries(described: dict | None) -> list[str]:
    return [e["name"] for e in (described or {}).get("entries") or []]


def from_file(d: dict | None) -> dict:
    """{name: {"value", "from"}}: the values the file's own code gives (its call of the kernel, its script)."""
    return dict((d or {}).get("from_file") or {})


def note_html(d: dict, values: dict, exercises: bool = False) -> str:
    """What the page says above the controls of a kernel of one's own: the values taken from the file and where,
    which arguments it still needs, which kernel of several, and whether a run is verified (`exercises`: the class
    has exercises, whose starters have no reference of their own: Check and Submit use the exercise's)."""
    parts = []
    given = from_file(d)
    if given:
        by_place: dict[str, list[str]] = {}
        for name, item in given.items():
            by_place.setdefault(item.get("from") or "the file", []).append(f"{name}={item.get('value')}")
        said = "; ".join(f"{', '.join(names)} ({place})" for place, names in by_place.items())
        parts.append(f'<div class="pg-params-note from-file">From the file: {views.esc(said)}.</div>')
    missing = [n for n in required(d) if values.get(n) in (None, "")]
    if missing:
        parts.append(f'<div class="pg-params-note bad">Give {views.esc(", ".join(missing))}: neither the source\'s '
                     "defaults nor its own code give " + ("it" if len(missing) == 1 else "them") + " a value.</div>")
    if d and d.get("entry_needed"):
        parts.append(f'<div class="pg-params-note">This file defines {len(entries(d))} kernels: pick one in '
                     f'"Kernel in the file" (showing {views.esc(d.get("name") or "")}).</div>')
    if d and not d.get("verified"):
        parts.append('<div class="pg-params-note">This file has no <code>reference(*inputs)</code>: a run is timed, '
                     "not verified" + ("; an exercise's Check and Submit verify it against the exercise's reference"
                                       if exercises else "") + ".</div>")
    return "".join(parts)


# -- the section ---------------------------------------------------------------------------------------------------
class OwnKernel:
    """The page's section for a kernel of one's own (layout.Page keeps it as page.own_kernel): the "New kernel" row
    and the state of one's own kernel (attributes of this section, made by `build`), its events (`wire`), and what
    the page's handlers hand over to it while the kernel dropdown says "my kernel" (Page.read, Page.engine_action,
    on_load, on_kernel, ...). The page's own components (the editor, the slots, the status, ...) are read through
    `self.page`."""

    def __init__(self, page):
        self.page = page

    def is_own(self, data: dict) -> bool:
        return data.get(self.page.kernel) == OWN

    def read(self, data: dict):
        """Page.read for a kernel of one's own: the controls from the last describe of its source."""
        page = self.page
        own = data.get(self.own) or {}
        c = controls(own.get("described"))
        values = ctl.values_from_slots(c, [data.get(s) for s in page.p_slots], [data.get(s) for s in page.t_slots])
        dtype = data.get(page.dtype) if data.get(page.dtype) in c.dtypes else c.dtype
        arch = data.get(page.arch)
        return OWN, data.get(page.editor) or "", c, values, dtype, (None if arch in (None, "", "auto") else arch)

    def engine_params(self, data: dict) -> dict:
        """What the engine gets: the described parameters only (never a shipped kernel's), dtype where the kernel has
        one, and the picked kernel where the file has several."""
        own = data.get(self.own) or {}
        _, _, c, values, dtype, _ = self.read(data)
        params = ctl.engine_params({k: v for k, v in values.items() if k in c.names}, dtype if c.dtypes else None)
        if len(entries(own.get("described"))) > 1:
            params["entry"] = own.get("entry")
        return params

    def stale(self, data: dict) -> bool:
        own = data.get(self.own) or {}
        picked = data.get(self.entry)
        return (not (own.get("described") or {}).get("ok") or own.get("source") != (data.get(self.page.editor) or "")
                or bool(picked and picked != own.get("entry")))

    def refresh(self, data: dict, session: str, fresh: bool = False) -> tuple[dict, dict]:
        """Read the editor's source's parameters. On success `data` is updated in place (the own state, the slots,
        the dtype), so Page.read sees the new controls; values the user had changed are kept where the parameter
        still exists. Returns the describe result and the controls' updates."""
        page = self.page
        source = data.get(page.editor) or ""
        own = {} if fresh else (data.get(self.own) or {})
        old_c = controls(own.get("described"))
        old_values = ctl.values_from_slots(old_c, [data.get(s) for s in page.p_slots],
                                           [data.get(s) for s in page.t_slots])
        kept = ctl.changed(old_c, old_values) if own.get("described") else {}
        before = own.get("described") or {}
        wanted = data.get(self.entry) or own.get("entry")
        d = describe(source, wanted, session)
        if not d.get("ok"):
            return d, {}
        if before.get("entry_needed") and wanted == before.get("name") and len(entries(d)) > 1:
            # The kernel the page showed of several, read again: still the user's to pick (the note says so), not
            # one they picked (on_entry reads afresh).
            d = {**d, "entry_needed": True}
        c = controls(d)
        values = c.defaults()
        values.update({k: v for k, v in kept.items() if k in values})
        old_dtype = data.get(page.dtype)
        dtype = old_dtype if old_dtype in c.dtypes and old_dtype != old_c.dtype and not fresh else c.dtype
        data[self.own] = {"source": source, "entry": d.get("name"), "described": d}
        data[self.entry] = d.get("name")
        data[page.dtype] = dtype
        for slots, group in ((page.p_slots, c.problem), (page.t_slots, c.tile)):
            for i, slot in enumerate(slots):
                data[slot] = values.get(group[i].name) if i < len(group) else None
        return d, self.control_outputs(c, values, dtype, data[self.own])

    def control_outputs(self, c: ctl.Controls, values: dict, dtype: str, own: dict) -> dict:
        """The controls of the described kernel: slots (the required ones marked), preset, dtype, the kernel
        picker."""
        page = self.page
        d = own.get("described") or {}
        out = page.slot_updates(c, values)
        need = required(d)
        given = from_file(d)
        for slots, group in ((page.p_slots, c.problem), (page.t_slots, c.tile)):
            for slot, control in zip(slots, group):
                if control.name in need:
                    out[slot] = {**out.get(slot, {}), "label": f"{control.name} (required)"}
                elif group is c.problem and control.name in given and str(values.get(control.name)) == str(
                        given[control.name]["value"]):
                    out[slot] = {**out.get(slot, {}), "info": "from the file"}
        out[page.preset] = gr.update(choices=list(c.presets) + [ctl.CUSTOM], value=ctl.preset_for(c, values))
        out[page.dtype] = gr.update(choices=c.dtypes, value=dtype or None)
        names = entries(d)
        out[self.entry] = gr.update(choices=names, value=own.get("entry"), visible=len(names) > 1)
        out[self.own] = own
        out[page.params_note] = note_html(d, values, page.course.offers_exercises())
        return out

    def marks_after(self, data: dict, result: dict) -> dict:
        """After an action: the controls as last read (the action may have read them again), with the marks of a
        resource error beside the controls it names (Page.param_marks) or the note on required arguments."""
        page = self.page
        _, _, c, values, dtype, _ = self.read(data)
        out = self.control_outputs(c, values, dtype, data.get(self.own) or {})
        marks = page.param_marks(c, values, (result or {}).get("error"), (result or {}).get("config"))
        for key, update in marks.items():
            out[key] = ({**out[key], **update} if isinstance(out.get(key), dict) and isinstance(update, dict)
                        else update)
        if ((result or {}).get("error") or {}).get("stage") != "resources":
            out[page.params_note] = note_html((data.get(self.own) or {}).get("described") or {}, values,
                                              page.course.offers_exercises()) + str(
                marks.get(page.params_note) or "")
        return out

    def missing_values(self, data: dict) -> list[str]:
        _, _, c, values, _, _ = self.read(data)
        return [n for n in required((data.get(self.own) or {}).get("described")) if values.get(n) in (None, "")]

    # -- handlers --------------------------------------------------------------------------------------------------
    def engine_action(self, action: str, data: dict, request, progress, options: dict | None = None,
                      on_partial=None):
        """Page.engine_action for a kernel of one's own: the parameters read again if the source changed, the
        required ones asked for, then kernel "" with the source (`on_partial`: a compile's CUDA, the moment lowering
        ends)."""
        session = session_of(request)
        started = time.monotonic()
        out = {}
        if self.stale(data):
            d, out = self.refresh(data, session)
            if not d.get("ok"):
                result = {**d, "ok": False, "action": action, "kernel": "my kernel"}
                return result, self.finish(action, data, result, out, session, started)
        missing = self.missing_values(data)
        if missing:
            result = failed(StageError("parameters", f"give a value for {', '.join(missing)}: neither the source's "
                                                     "defaults nor its own code give one"), action, "my kernel")
            return result, self.finish(action, data, result, out, session, started)
        kernel, source, c, values, dtype, arch = self.read(data)
        with StagedProgress(progress, action) as staged:
            result = gateway.call(action, "", source, self.engine_params(data), session=session, arch=arch,
                                  options=options, on_progress=staged, owner=tab_of(request), on_partial=on_partial)
        result["kernel"] = result.get("kernel") or (data.get(self.own) or {}).get("entry") or "my kernel"
        return result, self.finish(action, data, result, out, session, started)

    def finish(self, action: str, data: dict, result: dict, out: dict, session: str, started: float) -> dict:
        page = self.page
        kernel, source, c, values, dtype, arch = self.read(data)
        out = dict(out)
        out[page.status] = views.status_html(action, result, waited=time.monotonic() - started)
        out.update(page.error_outputs(result, source))
        out.update(page.draft_and_links(kernel, source, c, values, dtype, arch, session))
        out[page.share] = ""  # a link to a setup names a shipped kernel; Share (below) keeps one's own text
        return out

    def show(self, data: dict, source: str, request, status: str, fresh: bool = True) -> dict:
        """Everything the page shows for the kernel of one's own in `source`, its parameters read."""
        page = self.page
        session = session_of(request)
        data[page.editor] = source
        d, controls_out = self.refresh(data, session, fresh=fresh)
        kernel, _, c, values, dtype, arch = self.read(data)
        if not d.get("ok"):
            data[self.own] = {"source": None, "entry": None, "described": None}
            status = views.status_html("describe", {**d, "kernel": "my kernel"})
        out = page.fresh_kernel_outputs(OWN, source, c, values, dtype, arch, session, status)
        out.update(controls_out or self.control_outputs(c, values, dtype, data[self.own]))
        out.update(page.error_outputs(d if not d.get("ok") else None, source))
        out[page.share] = ""
        return out

    def on_new(self, data: dict, request, progress=gr.Progress()) -> dict:
        """"New kernel": the template or a copy of a shipped kernel in the editor, its parameters read."""
        page = self.page
        start = data.get(self.new_from) or TEMPLATE
        progress(None, desc="reading the new kernel's parameters")
        data[self.entry] = None
        what = "the template" if start == TEMPLATE else f"a copy of {start}"
        out = self.show(data, starting_source(start), request,
                        f'<div class="pg-status ok">New kernel from {views.esc(what)}: edit it, then Compile or Run. '
                        "The controls come from its arguments.</div>")
        if start != TEMPLATE and start in page.names:
            out.update(self.shipped_values(data, start, request))
        out.update(page.keep_leaving(data))  # edits of a shipped kernel, kept for when the user goes back to it
        out[page.course.kept_draft] = self.replaced(data, request)
        return out

    def replaced(self, data: dict, request):
        """One's own kernel replaced by a new one: its text, unless it is a start unchanged, offered as a
        download."""
        text = data.get(self.page.editor) or ""
        unchanged = text == template_source() or any(gateway.is_original(k, text) for k in self.page.names)
        if not self.is_own(data) or not text.strip() or unchanged:
            return gr.update(visible=False)
        return offer_kept(request, "my-kernel", "-before-new.py", text, "Your kernel before New kernel: download it")

    def shipped_values(self, data: dict, start: str, request) -> dict:
        """A copy of a shipped kernel, read as a plain TileLang file, may require arguments its factory gave
        defaults for (gemm's schedules take every size and tile): those start at the shipped kernel's defaults."""
        page = self.page
        own = data.get(self.own) or {}
        shipped = {k: str(v) for k, v in (gateway.describe(start).get("defaults") or {}).items()}
        _, source, c, values, dtype, arch = self.read(data)
        given = {n: shipped[n] for n in required(own.get("described")) if n in shipped and values.get(n) in (None, "")}
        if not given:
            return {}
        values = {**values, **given}
        out = self.control_outputs(c, values, dtype, own)
        out.update(page.draft_and_links(OWN, source, c, values, dtype, arch, session_of(request)))
        out[page.share] = ""
        return out

    def on_replaced_text(self, data: dict, request) -> dict:
        """An edit of one's own kernel that replaced most of its text (a file pasted over the template): its
        controls read again now, not at the next Compile, so they are the pasted file's while the user sets them.
        A smaller edit changes nothing here (the controls are read again before every engine action anyway)."""
        page = self.page
        if not self.is_own(data):
            return {}
        source, described = data.get(page.editor) or "", (data.get(self.own) or {}).get("source")
        if described is None or not mostly_new(described, source):
            return {}
        d, out = self.refresh(data, session_of(request))
        if d.get("ok"):  # (said beside the controls it changed: the status line is the engine's, see wire)
            out[page.params_note] = (f'<p class="pg-pasted">Read the parameters of the new text: '
                                     f'{views.esc(d.get("name") or "")}, {len(d.get("parameters") or [])} '
                                     f'argument(s).</p>' + str(out.get(page.params_note) or ""))
        return out

    def on_select(self, data: dict, request) -> dict:
        """The kernel dropdown set to "my kernel" (or Reset while it is): the editor's own text if it holds one,
        else the one kept when switching away, else the template."""
        was_own = bool((data.get(self.own) or {}).get("source") is not None and data.get(self.own))
        kept = (data.get(self.own_draft) or {}).get("source") if isinstance(data.get(self.own_draft), dict) else None
        source = data.get(self.page.editor) if was_own else kept or template_source()
        return self.show(data, source or template_source(), request,
                         '<div class="pg-status idle">Your kernel: the controls come from its source.</div>')

    def leave(self, data: dict) -> dict:
        """Switching from one's own kernel to a shipped one: its text kept, its controls gone."""
        if not data.get(self.own):
            return {self.entry: gr.update(visible=False, choices=[], value=None), self.own: None}
        return {self.own_draft: {"source": data.get(self.page.editor) or ""}, self.own: None,
                self.entry: gr.update(visible=False, choices=[], value=None)}

    def on_load(self, draft: dict, data: dict, request) -> dict:
        """The page opened over a draft of one's own kernel: its text, its parameters read again, its values."""
        page = self.page
        values = {k: str(v) for k, v in (draft.get("values") or {}).items()}
        out = self.show(data, draft.get("source") or template_source(), request,
                        '<div class="pg-status idle">Restored your draft of your own kernel.</div>')
        _, _, c, defaults, dtype, arch = self.read(data)
        if values:
            merged = {**defaults, **{k: v for k, v in values.items() if k in defaults}}
            dtype = draft.get("dtype") if draft.get("dtype") in c.dtypes else dtype
            out.update(self.control_outputs(c, merged, dtype, data[self.own]))
            out.update(page.draft_and_links(OWN, data[page.editor], c, merged, dtype, arch, session_of(request)))
            out[page.share] = ""
        out[page.banner] = views.banner_html(gateway.health())
        return out

    def on_read(self, data: dict, request, progress=gr.Progress()) -> dict:
        """"Read parameters": the controls rebuilt from the source as it is now."""
        page = self.page
        progress(None, desc="reading the parameters of the source")
        if not self.is_own(data):
            return {page.status: '<div class="pg-status idle">A shipped kernel\'s controls are its own; "New kernel" '
                                 "starts a kernel of your own.</div>"}
        d, out = self.refresh(data, session_of(request))
        _, source, c, values, dtype, arch = self.read(data)
        out.update(page.error_outputs(d if not d.get("ok") else None, source))
        if d.get("ok"):
            out[page.status] = (f'<div class="pg-status ok">Read the parameters of {views.esc(d.get("name") or "")}: '
                                f'{len(d.get("parameters") or [])} argument(s).</div>')
        else:
            out[page.status] = views.status_html("describe", {**d, "kernel": "my kernel"})
        return out

    def on_entry(self, data: dict, request) -> dict:
        """Another kernel of the file picked: its parameters."""
        if not self.is_own(data):
            return {}
        data[self.own] = {**(data.get(self.own) or {}), "entry": None}
        d, out = self.refresh(data, session_of(request), fresh=True)
        if not d.get("ok"):
            out[self.page.status] = views.status_html("describe", {**d, "kernel": "my kernel"})
        return out

    # -- building and wiring ---------------------------------------------------------------------------------------
    def build(self) -> None:
        """The "New kernel" row (under the toolbar) and the state of one's own kernel."""
        page = self.page
        self.own = gr.State(None)   # {"source": the text last described, "entry", "described": describe's answer}
        self.own_draft = gr.BrowserState(None, storage_key=OWN_DRAFT_KEY, secret=page.settings.draft_secret)
        with gr.Row(elem_id="pg-own", equal_height=True):
            self.new_from = gr.Dropdown(start_choices(page.names), value=TEMPLATE, label="New kernel from", scale=2,
                                        min_width=160, elem_id="pg-new-from")
            self.new_btn = gr.Button("New kernel", elem_id="pg-new", scale=0, min_width=120)
            self.entry = gr.Dropdown([], value=None, label="Kernel in the file", visible=False, scale=2,
                                     min_width=160, elem_id="pg-entry", allow_custom_value=True)
            self.read_btn = gr.Button("Read parameters from the source", elem_id="pg-read-params", scale=0,
                                      min_width=200)

    def wire(self) -> None:
        """The section's three events (call at the end of Page.wire: New kernel sets all the page shows,
        page.everything, and cancels the page's engine jobs, page.jobs)."""
        page = self.page
        engine_kw = engine_event(page)

        def new(data: dict, request: gr.Request, progress=gr.Progress()):
            return self.on_new(data, request, progress)

        def read_params(data: dict, request: gr.Request, progress=gr.Progress()):
            return self.on_read(data, request, progress)

        def pick(data: dict, request: gr.Request):
            return self.on_entry(data, request)

        from .styles import KERNEL_START_JS  # the editor at the new kernel's first line
        self.new_btn.click(new, page.setup | {self.new_from, self.own_draft, page.shown, page.edited},
                           page.everything | self.outputs() | {page.course.kept_draft},
                           cancels=page.jobs, **engine_kw).then(None, None, None, js=KERNEL_START_JS)
        # (cancels: a late answer of the kernel before must not land on it)
        self.read_btn.click(read_params, page.setup,
                            self.outputs() | {page.error_box, page.log_acc, page.log, page.error_line}, **engine_kw)
        self.entry.input(pick, page.setup, self.outputs(), **engine_kw)

        def replaced_text(data: dict, request: gr.Request):
            # (nothing to change is said with one output left as it is: an empty dict would be read as one value)
            return self.on_replaced_text(data, request) or {page.params_note: gr.skip()}
        # Outside the engine's concurrency group, like the page's other handler of each edit: a keystroke must not
        # wait for a classmate's compile, nor hold a compile's slot. Most edits answer from a comparison of lines; a
        # paste's reading of the parameters is a job, and the job layer counts it against the student's limits.
        # Not the status line among its outputs: Gradio marks every output of an event pending while it runs, and a
        # keystroke's event, fired again and again while typing (always_last), has left the status line's tracker
        # pending after the compile that followed it had answered.
        page.editor.input(replaced_text, page.setup, self.outputs() - {page.status}, trigger_mode="always_last",
                          concurrency_limit=None, show_progress="hidden", api_visibility="private")

    def outputs(self) -> set:
        """What reading the source's parameters may change."""
        page = self.page
        return {self.own, self.entry, page.dtype, page.preset, page.params_note, page.param_help, page.status,
                *page.p_slots, *page.t_slots}
