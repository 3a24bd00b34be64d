"""The page's shared helpers, public to layout.Page and every section of it (own_kernel.OwnKernel,
classroom.ClassSection, insight_tabs.InsightTabs): who a request is (`session_of`: the student the limits count
against; `tab_of`: the browser tab its Stop stops), the keywords of an event that runs an engine job, downloads in
the student's private folder, the "kept" download of text about to be replaced, plot and table updates that hide
when empty, and the staged progress line of a running job."""
from __future__ import annotations

import contextvars
import re
import threading
import time

import gradio as gr

from . import downloads, gateway, views


def engine_event(page) -> dict:
    """The keywords of a page event that runs an engine job (Compile, Run, New kernel, Show lowering, ...): one
    `engine` concurrency group for them all (Gradio takes the lowest limit any of them gives it), the progress drawn
    on the page's status line, no API of its own (api.py names the engine's endpoints)."""
    return dict(concurrency_limit=page.settings.ui_concurrency, concurrency_id="engine", show_progress="full",
                show_progress_on=[page.status], api_visibility="private")


def download_path(session: str | None, filename: str, text: str) -> str:
    """Write a download in this student's own folder, 0700, removed when old (downloads.py; Gradio copies it)."""
    return downloads.write(session, filename, text)


def offer_kept(request: gr.Request | None, kernel: str, suffix: str, text: str, label: str):
    """The "kept" download button (page.course.kept_draft) offering the user's text that something is about to
    replace (a share link, an exercise's starter, New kernel): `<kernel><suffix>` in this tab's download folder."""
    filename = re.sub(r"[^A-Za-z0-9_-]", "", str(kernel)) + suffix
    return gr.update(value=download_path(getattr(request, "session_hash", None), filename, text), visible=True,
                     label=label)


def plot(figure):
    """A gr.Plot update: the figure, or hidden when there is nothing to draw (an empty plot is a grey box)."""
    return gr.update(value=figure, visible=figure is not None)


def table(frame):
    """A gr.Dataframe update: the frame, or hidden when it has no rows (an empty one draws columns "1 2 3")."""
    return gr.update(value=frame, visible=frame is not None and not frame.empty)


def session_of(request: gr.Request | None) -> str:
    return gateway.student_of(request)  # the logged-in student, else the client's address (not the session id)


def tab_of(request: gr.Request | None) -> str | None:
    """This browser tab (Gradio's session id): whose jobs its Stop button stops (never those of classmates behind
    the same address, who share `session_of`)."""
    return getattr(request, "session_hash", None) or None


class StagedProgress:
    """The job's progress messages → the stages met so far, each with the seconds spent in it, shown in the status
    line while the job runs; a ticker redraws it each second so the current stage's time moves during a long nvcc."""

    def __init__(self, progress, action: str):
        self.progress, self.action = progress, action
        self.stages: list[tuple[str, float]] = [("queued", time.monotonic())]
        self.fraction, self.detail = 0.0, ""
        self.lock = threading.Lock()
        self.done = threading.Event()

    def __call__(self, what, fraction) -> None:
        now = time.monotonic()
        with self.lock:
            stage = views.progress_stage(str(what))
            if stage.startswith("queued") and self.stages[-1][0].startswith("queued"):
                self.stages[-1] = (stage, self.stages[-1][1])  # "queued" learns its place in line
            elif stage != self.stages[-1][0]:
                self.stages.append((stage, now))
            self.fraction = self.fraction if fraction is None else float(fraction)
            self.detail = str(what)
        self.show()

    def show(self) -> None:
        with self.lock:
            text = views.progress_text(self.stages, time.monotonic(), self.detail)
            fraction = self.fraction
        try:
            self.progress(fraction, desc=f"{self.action}: {text}")
        except Exception:
            pass

    def __enter__(self):
        def tick():
            while not self.done.wait(1.0):
                self.show()
        self.show()
        # Gradio finds the event a progress update belongs to through context variables: the ticker runs in a copy
        # of this handler's context.
        threading.Thread(target=contextvars.copy_context().run, args=(tick,), daemon=True).start()
        return self

    def __exit__(self, *_):
        self.done.set()
