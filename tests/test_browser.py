"""The page in a real browser: Debian's chromium driven by playwright against the app launched in-process.

Opens a link that carries a kernel, picks another kernel, changes parameters, compiles, and checks the highlighted
CUDA and the resource table; then the error view for a broken source, and the draft surviving a reload. Screenshots
go to tests/artifacts/ (git-ignored)."""
import os
import shutil
import socket
import time
from pathlib import Path

import pytest

from conftest import ROOT

pytestmark = [pytest.mark.browser, pytest.mark.timeout(420),
              pytest.mark.filterwarnings("ignore::pandas.errors.Pandas4Warning")]

CHROMIUM = os.environ.get("PLAYGROUND_CHROMIUM", "/usr/bin/chromium")
ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
        "--disable-background-networking", "--disable-component-update", "--disable-sync"]
ARTIFACTS = Path(__file__).resolve().parent / "artifacts"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def url():
    if not (Path(CHROMIUM).exists() or shutil.which(CHROMIUM)):
        pytest.skip(f"chromium is not installed at {CHROMIUM} (apt-get install chromium; make setup-test does)")
    pytest.importorskip("playwright.sync_api", reason="playwright is not installed (requirements-dev.txt)")
    if os.environ.get("PLAYGROUND_URL"):  # a page served elsewhere: tests/test_docker.py points this at the image
        yield os.environ["PLAYGROUND_URL"].rstrip("/") + "/"
        return
    from playground.ui import serve
    demo, app, local = serve("127.0.0.1", free_port(), prevent_thread_lock=True, quiet=True)
    yield local
    demo.close()


@pytest.fixture(scope="module")
def browser(url):
    from playwright.sync_api import sync_playwright
    with sync_playwright() as p:
        b = p.chromium.launch(executable_path=CHROMIUM, args=ARGS, timeout=60_000)
        yield b
        b.close()


@pytest.fixture
def page(browser):
    context = browser.new_context(viewport={"width": 1600, "height": 1000})
    page = context.new_page()
    page.set_default_timeout(60_000)
    yield page
    context.close()


def open_page(page, url: str, query: str = "") -> None:
    page.goto(url + query, wait_until="domcontentloaded")
    page.wait_for_selector("#pg-editor .cm-content")
    wait_idle(page)


def wait_idle(page, timeout: float = 150) -> str:
    """The status line once no job is pending (Gradio shows the progress there while one is)."""
    deadline = time.monotonic() + timeout
    time.sleep(0.8)
    while time.monotonic() < deadline:
        pending = page.locator("#pg-status .wrap.pending, #pg-status .progress-text, #pg-status .eta-bar").count()
        text = page.inner_text("#pg-status")
        if not pending and "%" not in text and "waiting" not in text:
            return text
        time.sleep(0.4)
    raise AssertionError(f"the page stayed busy: {page.inner_text('#pg-status')!r}")


def editor_text(page) -> str:
    return "\n".join(page.locator("#pg-editor .cm-line").all_inner_texts())


def choose(page, dropdown, option: str) -> None:
    """Pick `option` from a Gradio dropdown (given by a locator of its block)."""
    dropdown.locator("input").click()
    page.get_by_role("option", name=option, exact=True).first.click()
    time.sleep(0.4)


def type_value(page, dropdown, value: str) -> None:
    """Type a custom value into a Gradio dropdown that allows one."""
    box = dropdown.locator("input")
    box.click()
    box.fill(value)
    box.press("Enter")
    time.sleep(0.3)


def slot(page, name: str):
    return page.locator(".pg-slot").filter(has=page.locator(f"input[aria-label='{name}']")).first


def test_pick_edit_compile_and_see_cuda_and_resources(page, url):
    open_page(page, url, "?kernel=vector_add")
    assert page.locator("#pg-kernel input").input_value() == "vector_add"  # the link chose the kernel
    assert "def vector_add" in editor_text(page)

    choose(page, page.locator("#pg-kernel"), "gemm")
    page.wait_for_function("() => document.querySelector('#pg-editor .cm-content').innerText.includes('def gemm')")
    for name in ("M", "N", "K"):
        type_value(page, slot(page, name), "256")
    choose(page, slot(page, "block_N"), "128")
    assert slot(page, "block_N").locator("input").input_value() == "128"

    page.click("#pg-compile")
    status = wait_idle(page)
    assert "compiled gemm" in status, status
    page.wait_for_selector("#pg-cuda .pg-line")
    cuda = page.inner_text("#pg-cuda")
    assert "wgmma" in cuda and "__global__" in cuda
    assert page.locator("#pg-cuda .pg-code span.k, #pg-cuda .pg-code span.kt").count() > 10  # highlighted
    assert page.locator("#pg-cuda .pg-line[data-src]").count() > 10  # lines carry their source line
    resources = page.inner_text("#pg-resources")
    for label in ("Registers", "Shared memory", "Spills", "Threads", "Grid"):
        assert label in resources, resources
    # 3 stages of 128 × 64 A and 64 × 128 B tiles and one 128 × 128 C tile, in fp16: block_N reached the engine
    assert "128 KiB dynamic" in resources, resources
    assert "SASS" in resources and "tensor core" in resources, resources  # the instruction mix

    # The SASS tab: what ptxas made of it, highlighted (opcodes as keywords)
    page.get_by_role("tab", name="SASS").click()
    page.wait_for_selector("#pg-sass .pg-line")
    assert "HGMMA" in page.inner_text("#pg-sass")
    assert page.locator("#pg-sass .pg-code span.k").count() > 100
    page.get_by_role("tab", name="CUDA").click()

    # Mark the CUDA of one source line through the picker.
    page.locator("#pg-srcline input").click()
    page.locator("ul[role=listbox] li", has_text="T.wgmma_gemm").first.click()
    page.wait_for_selector("#pg-cuda .pg-line.pg-mark")
    assert page.locator("#pg-cuda .pg-line.pg-mark").count() > 0

    # The cursor on a source line in the editor marks the CUDA generated from it (client-side, no request).
    # (the editor draws only the lines near its viewport: scroll to the shipped schedule's wgmma line first)
    line = next(i for i, text in enumerate((ROOT / "kernels" / "gemm.py").read_text().splitlines())
                if "T.wgmma_gemm(A_shared" in text)
    page.evaluate("""(line) => { const s = document.querySelector('#pg-editor .cm-scroller');
        s.scrollTop = Math.max(0, line - 8) * s.querySelector('.cm-line').offsetHeight; }""", line)
    page.locator("#pg-editor .cm-line", has_text="T.wgmma_gemm(A_shared").first.click()
    page.wait_for_selector("#pg-cuda .pg-line.pg-sel")

    ARTIFACTS.mkdir(exist_ok=True)
    page.screenshot(path=str(ARTIFACTS / "browser_compile.png"), full_page=True)

    # The draft (parameters too) survives a reload.
    open_page(page, url)
    assert "Restored your draft of gemm" in page.inner_text("#pg-status")
    assert slot(page, "block_N").locator("input").input_value() == "128"


def test_broken_source_shows_stage_line_and_log(page, url):
    open_page(page, url, "?kernel=gemm&M=256&N=256&K=256")
    page.click("#pg-editor .cm-content")
    page.keyboard.press("Control+Home")
    page.keyboard.type("oops = undefined_name_in_line_one\n")
    page.click("#pg-compile")
    status = wait_idle(page)
    assert "failed at line 1" in status, status
    box = page.inner_text("#pg-error")
    assert "python" in box.lower() and "line 1" in box.lower() and "undefined_name_in_line_one" in box
    assert page.locator("#pg-log").is_visible()  # the full log folds out
    ARTIFACTS.mkdir(exist_ok=True)
    page.screenshot(path=str(ARTIFACTS / "browser_error.png"), full_page=True)
    page.click("#pg-reset")
    page.wait_for_function(
        "() => !document.querySelector('#pg-editor .cm-content').innerText.includes('undefined_name_in_line_one')")


def test_the_lowering_tab_shows_each_pass_with_its_diff(page, url):
    open_page(page, url, "?kernel=vector_add")
    page.get_by_role("tab", name="Lowering").click()
    page.click("#pg-ir-btn")
    status = wait_idle(page)
    page.wait_for_selector("#pg-ir details.pg-ir-pass[data-pass]")
    passes = page.locator("#pg-ir details.pg-ir-pass[data-pass]")
    assert passes.count() >= 5, status
    names = [passes.nth(i).get_attribute("data-pass") for i in range(passes.count())]
    assert names.index("tl.LayoutInference") < names.index("tl.LowerTileOp"), names
    assert "changed nothing" in page.inner_text("#pg-ir")  # the folded no-op passes, as a count
    lower = page.locator("#pg-ir details.pg-ir-pass[data-pass='tl.LowerTileOp']")
    lower.locator("summary").click()
    page.wait_for_selector("#pg-ir details[data-pass='tl.LowerTileOp'][open] .pg-dadd")
    assert lower.locator(".pg-dadd").first.is_visible() and lower.locator(".pg-ddel").count() > 0
    ARTIFACTS.mkdir(exist_ok=True)
    page.screenshot(path=str(ARTIFACTS / "browser_lowering.png"), full_page=True)


def test_a_share_link_opens_the_same_edits_in_another_browser(browser, url, tmp_path):
    """Share gives a link (/?s=ID) that restores the edited source and the parameters in a browser that has never
    seen them (a second context: no draft of its own)."""
    if not os.environ.get("PLAYGROUND_URL"):  # the page in-process: its class database in this test's folder
        from playground.settings import current
        from playground.ui import classroom
        classroom.install(classroom.Classroom(current().replace(data_dir=tmp_path)))
    first = browser.new_context(viewport={"width": 1600, "height": 1000})
    page = first.new_page()
    page.set_default_timeout(60_000)
    open_page(page, url, "?kernel=softmax&M=1000&N=1000")
    choose(page, slot(page, "threads"), "128")
    page.click("#pg-editor .cm-content")
    page.keyboard.press("Control+Home")
    page.keyboard.type("# shared edit, line one\n")
    time.sleep(1.0)
    page.click("#pg-share-btn")
    page.wait_for_selector("#pg-share-link a")
    link = page.locator("#pg-share-link a").get_attribute("href")
    assert "?s=" in link, link
    shared_lines = page.locator("#pg-editor .cm-line").all_inner_texts()[:12]
    first.close()

    second = browser.new_context(viewport={"width": 1600, "height": 1000})
    other = second.new_page()
    other.set_default_timeout(60_000)
    other.goto(link, wait_until="domcontentloaded")
    other.wait_for_selector("#pg-editor .cm-content")
    status = wait_idle(other)
    assert "Opened the shared softmax" in status, status
    assert other.locator("#pg-kernel input").input_value() == "softmax"
    assert other.locator("#pg-editor .cm-line").all_inner_texts()[:12] == shared_lines
    assert shared_lines[0] == "# shared edit, line one"
    assert [slot(other, n).locator("input").input_value() for n in ("M", "N", "threads")] == ["1000", "1000", "128"]
    second.close()
