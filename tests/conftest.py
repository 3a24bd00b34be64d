import os
import re
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

# The tests that edit kernels/gemm.py edit its first, T.Pipelined, schedule, and compile or run that one.
GEMM = (ROOT / "kernels" / "gemm.py").read_text()
PIPELINED = {"warp_specialized": False}


def has_gpu() -> bool:
    try:
        import torch
        return torch.cuda.is_available()
    except Exception:
        return False


def pytest_collection_modifyitems(config, items):
    if has_gpu():
        return
    skip = pytest.mark.skip(reason="needs a CUDA GPU (none on this machine)")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)


@pytest.fixture(autouse=True, scope="session")
def _private_cache(tmp_path_factory):
    """Tests compile into their own cache folders, so a stale cache can neither hide nor cause a failure; and keep
    their data (a tuning run's best config, the class's database) in a folder of their own, not in ./data."""
    if "PLAYGROUND_CACHE_DIR" not in os.environ:
        os.environ["PLAYGROUND_CACHE_DIR"] = str(tmp_path_factory.mktemp("playground-cache"))
    if "PLAYGROUND_DATA" not in os.environ:
        os.environ["PLAYGROUND_DATA"] = str(tmp_path_factory.mktemp("playground-data"))
    # A server started by a test compiles no shipped kernels ahead of it (the pre-warm's own test asks for one):
    # the suite's timings on two cores are the tests' own.
    os.environ.setdefault("PLAYGROUND_PREWARM", "0")
    # Nor more spare workers than a test's few compiles use: each is about 5 s of CPU to start, and the suite starts
    # dozens of servers (the spares' default is for a class's burst of compiles).
    os.environ.setdefault("PLAYGROUND_SPARES", "3")
    yield


def pytest_terminal_summary(terminalreporter):
    """Print the figures the GPU tests recorded (`record_property("gpu_summary", ...)`): one line per timed kernel."""
    lines = [value for report in terminalreporter.stats.get("passed", [])
             if report.when == "call" for name, value in report.user_properties if name == "gpu_summary"]
    if lines:
        terminalreporter.section("GPU timings")
        for line in lines:
            terminalreporter.write_line("SUMMARY " + line)


# -- the browser the page's end-to-end tests drive ----------------------------------------------------------------
CHROMIUM = os.environ.get("PLAYGROUND_CHROMIUM", "/usr/bin/chromium")
ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
        "--disable-background-networking", "--disable-component-update", "--disable-sync"]


def need_browser() -> None:
    """Skip the calling fixture's tests where chromium or playwright is missing (make setup-test installs both)."""
    import shutil
    if not (Path(CHROMIUM).exists() or shutil.which(CHROMIUM)):
        pytest.skip(f"chromium is not installed at {CHROMIUM} (apt-get install chromium; make setup-test does)")
    pytest.importorskip("playwright.sync_api", reason="playwright is not installed (requirements-dev.txt)")


def launch_browser(playwright):
    """Headless chromium, talking to nothing but the page under test."""
    return playwright.chromium.launch(executable_path=CHROMIUM, args=ARGS, timeout=60_000)


# -- browser tests wait for the page's answers, not for a while --------------------------------------------------------
QUEUE_REQUEST = re.compile(r"/queue/(join|data)\b")


# Which events the page has joined and which the stream has answered, read by the page itself (a fetch wrapper in
# place before the page's scripts): Gradio's server sometimes keeps a session's stream open after its last answer,
# until the session's next event ends (the page's announcement timer, up to a minute later).
ANSWERS_SEEN_JS = r"""(() => {
  const joined = new Set(), answered = new Set();
  let sent = 0;  // joins sent from this document: each is in `joined` once its answer (its event's id) is read
  window.pgQueueSeen = () => sent === joined.size && [...joined].every((id) => answered.has(id));
  const fetchFirst = window.fetch;
  window.fetch = async (...args) => {
    const url = String((args[0] && args[0].url) || args[0]);
    const join = /\/queue\/join\b/.test(url);
    if (join) sent += 1;
    const number = sent;
    const response = await fetchFirst(...args).catch((e) => { if (join) joined.add(`failed-${number}`); throw e; });
    try {
      if (join) {
        const failed = `failed-${number}`;  // (never answered: the stream's close is then what settles)
        response.clone().json().then((j) => joined.add(j && j.event_id ? j.event_id : failed), () => joined.add(failed));
      } else if (/\/queue\/data\b/.test(url) && response.body) {
        const reader = response.clone().body.getReader(), text = new TextDecoder();
        let buffer = "";
        const read = () => reader.read().then(({done, value}) => {
          if (done) return;
          buffer += text.decode(value, {stream: true});
          const lines = buffer.split("\n");
          buffer = lines.pop();
          for (const line of lines) {
            if (!line.startsWith("data:")) continue;
            try {
              const message = JSON.parse(line.slice(5));
              if (message.msg === "process_completed" && message.event_id) answered.add(message.event_id);
            } catch (e) {}
          }
          return read();
        }).catch(() => {});
        read();
      }
    } catch (e) {}
    return response;
  };
})();"""


class QueueWatch:
    """What a page has asked of Gradio's queue and not yet been answered, read from its requests: each event is sent
    with a queue/join request and answered on the queue/data stream, which the server ends once the session has no
    event pending. So the page has every answer once no join or stream is open and a stream ended after the last join
    did, or once no join is open and the stream has brought the end of every event the page joined (ANSWERS_SEEN_JS,
    which counts in the page, so a new document counts afresh)."""

    def __init__(self, page):
        self.page = page
        self.open: set = set()
        self.count = self.last_join = self.last_stream = 0
        page.add_init_script(script=ANSWERS_SEEN_JS)
        page.on("request", self.started)
        page.on("requestfinished", self.ended)
        page.on("requestfailed", self.ended)  # (the page aborts the stream when the server says it is done)

    def started(self, request) -> None:
        if QUEUE_REQUEST.search(request.url):
            self.open.add(request)

    def ended(self, request) -> None:
        if request in self.open:
            self.open.discard(request)
            self.count += 1
            if "/queue/join" in request.url:
                self.last_join = self.count
            else:
                self.last_stream = self.count

    def answered(self) -> bool:
        if not self.open and self.last_stream >= self.last_join:
            return True
        if any("/queue/join" in r.url for r in self.open):
            return False
        try:
            return self.page.evaluate("() => Boolean(window.pgQueueSeen && window.pgQueueSeen())")
        except Exception:  # (the page navigating away)
            return False


WATCHES: dict = {}
# Two frames drawn and a task after them: what the page does in answer to an answer (its callbacks run in a task of
# their own, Gradio's client: setTimeout(callback, 0); a `.then` event it sends), a key or a click (a focus handler,
# a redraw) has run.
AFTER_TWO_FRAMES_JS = ("() => new Promise((done) => requestAnimationFrame(() => requestAnimationFrame(() => "
                       "setTimeout(done, 0))))")


def settle(page, timeout: float = 150) -> None:
    """Until every event the page has sent is answered and drawn."""
    watch = WATCHES[page]
    deadline = time.monotonic() + timeout
    while True:
        while not watch.answered():
            assert time.monotonic() < deadline, f"no answer within {timeout:g} s to {[r.url for r in watch.open]}"
            page.wait_for_timeout(20)  # (playwright hands over the page's request events while it waits)
        # The answers' callbacks have run and sent what they chain (a `.then` event) by two frames later: answered
        # still, nothing more is coming.
        page.evaluate(AFTER_TWO_FRAMES_JS)
        if watch.answered():
            return


def sending(page, action) -> None:
    """Do `action` (a click, a key, a pick), which sends the page's event to the server, and wait for the answers.
    (The event's request is waited for first: until it is sent, the page has nothing pending and looks answered.)"""
    with page.expect_request(lambda r: "/queue/join" in r.url):
        action()
    settle(page)


def watch(page):
    """`page`, its requests to Gradio's queue watched from now on (QueueWatch): what `settle` and `sending` read."""
    WATCHES[page] = QueueWatch(page)
    return page


# No job shows as pending in the status line (Gradio draws a job's progress there). The status's own text may say
# "waiting" or "%" once done ("answered after 8.4 s: 5.7 s waiting in the queue"): the answers are what settle awaits.
IDLE_JS = """() => {
  const status = document.querySelector("#pg-status");
  return Boolean(status) && !status.querySelector(".wrap.pending, .progress-text, .eta-bar");
}"""


def wait_idle(page, timeout: float = 150) -> str:
    """The status line once every answer has come and no job shows as pending."""
    settle(page, timeout)
    try:
        page.wait_for_function(IDLE_JS, timeout=timeout * 1000)
    except Exception as exc:
        raise AssertionError(f"the page stayed busy: {page.inner_html('#pg-status')[:3000]!r}") from exc
    return page.inner_text("#pg-status")


def open_page(page, url: str, query: str = "") -> None:
    """Load the page and wait for what its load sends (the draft or the link applied, the class's lists)."""
    sending(page, lambda: page.goto(url + query, wait_until="domcontentloaded"))
    page.wait_for_selector("#pg-editor .cm-content")
    wait_idle(page)


# The page fits its workspace to the window and scrolls the editor to the kernel after the DOM changes (debounced, up
# to 0.7 s later): counted in drawn frames, so a busy machine, which draws fewer of them, waits longer.
LAYOUT_STILL_JS = """([selectors, frames]) => new Promise((done) => {
  let last = "", same = 0;
  const step = () => {
    const now = selectors.map((s) => { const e = document.querySelector(s); if (!e) return "-";
      const r = e.getBoundingClientRect(); return [r.top, r.height, e.scrollTop].join(","); }).join(";");
    same = now === last ? same + 1 : 0;
    last = now;
    if (same >= frames) done(); else requestAnimationFrame(step);
  };
  requestAnimationFrame(step);
})"""


def layout_still(page, selectors=("#pg-editor .cm-scroller", "#pg-params", "#pg-cuda .pg-code"), frames: int = 45):
    """Until the page's main blocks have kept their place and scroll position for `frames` drawn frames."""
    page.evaluate(LAYOUT_STILL_JS, [list(selectors), frames])


def choose(page, dropdown, option: str, sends: bool = True) -> None:
    """Pick `option` from a Gradio dropdown (given by a locator of its block); wait for what the pick sends, or, for a
    dropdown whose change asks nothing of the server (`sends` False), until it shows the option."""
    from playwright.sync_api import expect
    # Gradio draws the list where the box is when it opens: opened while the page still moves (it scrolls to the
    # editor after a kernel switch), the list is left outside the window (the walk flaked so, its options unclickable)
    layout_still(page)
    dropdown.locator("input").click()

    def pick():
        page.get_by_role("option", name=option, exact=True).first.click()
    if sends:
        sending(page, pick)
    else:
        pick()
        expect(dropdown.locator("input")).to_have_value(option)


def type_value(page, dropdown, value: str) -> None:
    """Type a custom value into a Gradio dropdown that allows one; wait for what it sends."""
    box = dropdown.locator("input")
    box.click()

    def enter():
        box.fill(value)
        box.press("Enter")
    sending(page, enter)


def slot(page, name: str):
    """The parameter control labelled `name`."""
    return page.locator(".pg-slot").filter(has=page.locator(f"input[aria-label='{name}']")).first
