"""What a first visit sees, in a real browser (Debian's chromium, playwright) against the app launched in-process:
after a compile at 1024×768 the editor shows the kernel from its first line, its controls are in view under it and
the CUDA pane starts at `__global__`; on a phone (390×844) source, controls and CUDA are stacked, the code scrolls
inside its pane and nothing overflows the page sideways; and TileLang's README quick-start, pasted unchanged into a
kernel of one's own, compiles with no value typed. Each test prints what it measured; screenshots go to
tests/artifacts/ (git-ignored)."""
import os
import re
import socket
from pathlib import Path

import pytest

from conftest import ROOT, choose, launch_browser, layout_still, need_browser, open_page, sending, wait_idle, watch
from tilelang_readme import QUICKSTART

pytestmark = [pytest.mark.browser, pytest.mark.timeout(600),
              pytest.mark.filterwarnings("ignore::pandas.errors.Pandas4Warning")]

ARTIFACTS = Path(__file__).resolve().parent / "artifacts"
GEMM_DEF = next(i for i, text in enumerate((ROOT / "kernels" / "gemm.py").read_text().splitlines(), 1)
                if text.startswith("def gemm("))


@pytest.fixture(scope="module")
def url():
    need_browser()
    if os.environ.get("PLAYGROUND_URL"):
        yield os.environ["PLAYGROUND_URL"].rstrip("/") + "/"
        return
    from playground.ui import serve
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    demo, _, local = serve("127.0.0.1", port, prevent_thread_lock=True, quiet=True)
    yield local
    demo.close()


@pytest.fixture(scope="module")
def browser(url):
    from playwright.sync_api import sync_playwright
    with sync_playwright() as p:
        b = launch_browser(p)
        yield b
        b.close()


def new_page(browser, width: int, height: int):
    phone = width < 500
    context = browser.new_context(viewport={"width": width, "height": height}, is_mobile=phone, has_touch=phone,
                                  device_scale_factor=1)
    page = watch(context.new_page())
    page.set_default_timeout(120_000)
    return context, page


def compile_and_wait(page) -> str:
    sending(page, lambda: page.click("#pg-compile"))
    status = wait_idle(page, timeout=240)
    page.wait_for_selector("#pg-cuda .pg-line")
    layout_still(page)  # (the workspace is fitted to the window once the code is in)
    page.evaluate("() => window.scrollTo(0, 0)")
    return status


# What is in view: the editor's lines inside its scroller and the window, the CUDA lines inside their pane and the
# window, the parameter controls and where each block is.
IN_VIEW_JS = """
() => {
  const box = (e) => { const r = e.getBoundingClientRect(); return {top: r.top, bottom: r.bottom, left: r.left,
                                                                   right: r.right, width: r.width, height: r.height}; };
  const inside = (r, o) => r.height > 0 && r.top >= Math.max(0, o.top) - 1 && r.bottom <= Math.min(innerHeight, o.bottom) + 1;
  const scroller = document.querySelector('#pg-editor .cm-scroller');
  const sc = box(scroller);
  const gutters = [...document.querySelectorAll('#pg-editor .cm-lineNumbers .cm-gutterElement')]
      .filter((g) => /^\\d+$/.test(g.textContent.trim()) && inside(box(g), sc)).map((g) => parseInt(g.textContent, 10));
  const editorLines = [...document.querySelectorAll('#pg-editor .cm-line')].filter((l) => inside(box(l), sc))
      .map((l) => l.innerText);
  const pane = document.querySelector('#pg-cuda .pg-code');
  const pc = box(pane);
  const cudaLines = [...pane.querySelectorAll('.pg-line')]
      .filter((l) => (l.matches('summary') || !l.closest('details:not([open])')) && inside(box(l), pc))
      .map((l) => l.innerText.replace(/\\s+/g, ' ').trim());
  const slots = [...document.querySelectorAll('#pg-problem .pg-slot, #pg-tile .pg-slot')]
      .filter((s) => s.offsetParent).map((s) => ({name: (s.querySelector('input') || {}).ariaLabel, ...box(s)}));
  return {width: innerWidth, height: innerHeight, pageWidth: document.documentElement.scrollWidth,
          editor: sc, gutters, editorLines, cuda: pc, cudaLines, slots,
          cudaScroll: [pane.scrollWidth, pane.clientWidth],
          params: box(document.querySelector('#pg-params')), panes: box(document.querySelector('#pg-panes'))};
}
"""


def test_at_1024x768_a_compiled_gemm_shows_its_kernel_its_controls_and_its_first_global(browser, url):
    context, page = new_page(browser, 1024, 768)
    try:
        open_page(page, url, "?kernel=gemm&M=256&N=256&K=256")
        status = compile_and_wait(page)
        assert "compiled gemm" in status, status
        seen = page.evaluate(IN_VIEW_JS)
        ARTIFACTS.mkdir(exist_ok=True)
        page.screenshot(path=str(ARTIFACTS / "first_screen_1024x768.png"))
        # the editor: from the kernel's first line, the module docstring scrolled above it
        assert seen["gutters"] and seen["gutters"][0] == GEMM_DEF, seen["gutters"]
        assert seen["editorLines"][0].startswith("def gemm("), seen["editorLines"]
        # every control of the kernel in the window, under the editor
        assert len(seen["slots"]) >= 11, seen["slots"]  # M, N, K and gemm's 8 tile parameters
        late = [s["name"] for s in seen["slots"] if s["bottom"] > seen["height"] or s["top"] < seen["editor"]["bottom"]]
        assert not late, f"controls out of view at 1024×768: {late}"
        # the CUDA pane: the preamble folded, __global__ the first code line shown
        assert "preamble" in seen["cudaLines"][0], seen["cudaLines"][:3]
        assert "__global__" in seen["cudaLines"][1], seen["cudaLines"][:3]
        assert seen["cuda"]["bottom"] <= seen["height"] + 1 and seen["pageWidth"] <= 1024
        print(f"\n1024×768: editor lines {seen['gutters'][0]}–{seen['gutters'][-1]} in view "
              f"({len(seen['gutters'])} lines, {seen['editor']['height']:.0f} px), the {len(seen['slots'])} controls "
              f"down to y={max(s['bottom'] for s in seen['slots']):.0f}, CUDA lines in view "
              f"{len(seen['cudaLines'])} from y={seen['cuda']['top']:.0f}: {seen['cudaLines'][1][:60]!r}")
        # a kernel switch opens the new kernel at its first line too
        choose(page, page.locator("#pg-kernel"), "softmax")
        page.wait_for_function("() => document.querySelector('#pg-editor .cm-content').innerText.includes('def softmax')")
        layout_still(page)
        first = page.evaluate(IN_VIEW_JS)["editorLines"]
        assert first and re.match(r"(def |@)", first[0]), first[:3]
    finally:
        context.close()


def test_at_1440x900_the_same_and_the_editor_takes_the_height_left(browser, url):
    context, page = new_page(browser, 1440, 900)
    try:
        open_page(page, url, "?kernel=gemm&M=256&N=256&K=256")
        compile_and_wait(page)
        seen = page.evaluate(IN_VIEW_JS)
        assert seen["gutters"][0] == GEMM_DEF and all(s["bottom"] <= 900 for s in seen["slots"]), seen["slots"]
        assert "__global__" in seen["cudaLines"][1]
        assert seen["editor"]["height"] > 200
        print(f"\n1440×900: editor {len(seen['gutters'])} lines ({seen['editor']['height']:.0f} px), controls down to "
              f"y={max(s['bottom'] for s in seen['slots']):.0f}, {len(seen['cudaLines'])} CUDA lines in view")
    finally:
        context.close()


def test_on_a_phone_source_controls_and_cuda_are_stacked_and_the_code_scrolls_inside_its_pane(browser, url):
    context, page = new_page(browser, 390, 844)
    try:
        open_page(page, url, "?kernel=gemm&M=256&N=256&K=256")
        compile_and_wait(page)
        seen = page.evaluate(IN_VIEW_JS)
        ARTIFACTS.mkdir(exist_ok=True)
        page.screenshot(path=str(ARTIFACTS / "first_screen_390x844.png"), full_page=True)
        assert seen["pageWidth"] <= 390, f"the page is {seen['pageWidth']} px wide on a 390 px screen"
        assert seen["editor"]["bottom"] <= seen["params"]["top"] + 1 <= seen["cuda"]["top"] + 1, "stacked in order"
        assert seen["cuda"]["right"] <= 390 and seen["cuda"]["left"] >= 0
        assert seen["cudaScroll"][0] > seen["cudaScroll"][1], "long CUDA lines scroll inside the pane"
        assert seen["editor"]["height"] <= 0.5 * 844 + 2 and seen["cuda"]["height"] <= 0.62 * 844
        screens = seen["cuda"]["top"] / 844
        assert screens < 2.5, f"the CUDA pane starts {screens:.1f} screens down"
        assert seen["gutters"][0] == GEMM_DEF
        print(f"\n390×844: page {seen['pageWidth']} px wide; editor at y={seen['editor']['top']:.0f} "
              f"({seen['editor']['height']:.0f} px), controls at y={seen['params']['top']:.0f}, CUDA at "
              f"y={seen['cuda']['top']:.0f} ({screens:.2f} screens down), its text {seen['cudaScroll'][0]} px wide in "
              f"a {seen['cudaScroll'][1]} px pane")
    finally:
        context.close()


def test_the_readme_quick_start_pasted_unchanged_compiles_with_no_value_typed(browser, url):
    context, page = new_page(browser, 1280, 900)
    try:
        open_page(page, url)
        sending(page, lambda: page.click("#pg-new"))
        page.wait_for_function("() => document.querySelector('#pg-editor .cm-content').innerText.includes('gemm_relu')")
        page.click("#pg-editor .cm-content")
        page.keyboard.press("Control+a")
        page.keyboard.press("Delete")
        sending(page, lambda: page.keyboard.insert_text(QUICKSTART))  # (the draft: the server has the text)
        doc = page.evaluate("""() => { const c = document.querySelector('#pg-editor .cm-content');
            const v = (c.cmTile && c.cmTile.view) || (c.cmView && (c.cmView.view || (c.cmView.root || {}).view));
            return v ? v.state.doc.toString() : null; }""")
        assert doc is None or doc == QUICKSTART, "pasted unchanged"
        status = compile_and_wait(page)
        assert "compiled matmul_relu" in status, status
        assert not page.locator("#pg-error").is_visible(), page.inner_text("#pg-error")
        note = page.inner_text("#pg-params")
        assert "From the file: M=1024, N=1024, K=1024" in note, note
        assert "required" not in note and "Give" not in note, note
        assert "__global__" in page.inner_text("#pg-cuda")
        print(f"\nREADME quick-start pasted: {status.strip()}; {note.splitlines()[0]}")
    finally:
        context.close()


def test_a_shared_source_comes_back_with_its_final_newline(browser, url):
    """Gradio's code component strips the text it sends to the browser: a share link (and every kernel put in the
    editor) came back without the source's final newline."""
    from gradio_client import Client
    source = (ROOT / "kernels" / "vector_add.py").read_text().replace("Vector add", "My vector add", 1)
    assert source.endswith("\n")
    shared = Client(url, verbose=False).predict("vector_add", source, {}, None, api_name="/share")
    assert shared["ok"], shared
    context, page = new_page(browser, 1280, 900)
    try:
        open_page(page, url, "?s=" + shared["id"])
        doc = page.evaluate("""() => { const c = document.querySelector('#pg-editor .cm-content');
            const v = (c.cmTile && c.cmTile.view) || (c.cmView && (c.cmView.view || (c.cmView.root || {}).view));
            return v ? v.state.doc.toString() : null; }""")
        assert doc == source, (doc or "")[-40:]
    finally:
        context.close()
