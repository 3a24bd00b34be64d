"""Show the page's answers recorded on a GPU machine in a real browser, and screenshot them.

    .venv/bin/python tests/gpu/replay_page.py [bench/page-h200]

`tests/gpu/page_on_gpu.py` serves the page from a GPU machine and saves what its endpoints answered (compile, run,
tune, sweep), e.g. to bench/page-h200/. A GPU server often has no browser, so the pictures are taken on any machine
that has one: this script starts the page with the job layer's answers taken from those files (nothing is
recomputed, and a request that was not recorded gets an error), opens it in chromium, presses Run, Autotune,
Sweep, Profile and Check memory as a student would, and saves screenshots next to the answers. Needs chromium and playwright
(`make setup-test`).
"""
from __future__ import annotations

import json
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))

from conftest import launch_browser  # noqa: E402  (the browser tests' own chromium)
from test_browser import free_port, wait_idle  # noqa: E402  (the browser test's own helpers)


def recorded_answers(folder: Path):
    answers = {tuple(p.stem.split("_", 1)): json.loads(p.read_text())
               for p in folder.glob("*.json") if p.stem.split("_", 1)[0] in ("compile", "run", "tune", "sweep", "profile", "memcheck")}

    def run_job(action, kernel, source, params, **_):
        found = answers.get((action, kernel))
        if found is None:
            return {"ok": False, "kernel": kernel, "action": action,
                    "error": {"stage": "internal", "message": f"no {action} of {kernel} was recorded",
                              "line": None, "log": ""}}
        return found
    return run_job


def main(folder: Path) -> None:
    from playground.ui import gateway as engine, serve
    health = json.loads((folder / "health.json").read_text())
    run_job = recorded_answers(folder)
    engine._run_job = lambda: run_job
    engine.health = lambda: health
    demo, _, url = serve("127.0.0.1", free_port(), prevent_thread_lock=True, quiet=True)
    from playwright.sync_api import sync_playwright
    try:
        with sync_playwright() as p:
            browser = launch_browser(p)
            page = browser.new_context(viewport={"width": 1600, "height": 1100}).new_page()
            page.set_default_timeout(60_000)
            page.goto(url + "?kernel=gemm", wait_until="domcontentloaded")
            page.wait_for_selector("#pg-editor .cm-content")
            wait_idle(page)

            page.click("#pg-run")
            print("run:", wait_idle(page))
            page.locator("#pg-srcline input").click()  # mark the CUDA of the line that multiplies (wgmma)
            page.locator("ul[role=listbox] li", has_text="T.wgmma_gemm").first.click()
            page.wait_for_selector("#pg-cuda .pg-line.pg-mark")
            page.get_by_role("tab", name="Speed").click()
            time.sleep(1.5)
            page.screenshot(path=str(folder / "page-run.png"), full_page=True)
            page.wait_for_selector("#pg-roofline-plot .js-plotly-plot")
            page.locator("#pg-roofline-plot").screenshot(path=str(folder / "page-roofline.png"))

            if (folder / "profile_gemm.json").exists():
                page.get_by_role("tab", name="Profile").click()
                page.click("#pg-profile-btn")
                print("profile:", wait_idle(page))
                if (folder / "memcheck_gemm.json").exists():
                    page.click("#pg-memcheck-btn")
                    print("memcheck:", wait_idle(page))
                time.sleep(1.5)
                page.screenshot(path=str(folder / "page-profile.png"), full_page=True)

            page.click("#pg-tune")
            print("tune:", wait_idle(page))
            time.sleep(1.5)
            page.screenshot(path=str(folder / "page-tune.png"), full_page=True)

            page.get_by_role("tab", name="Size sweep").click()
            page.click("#pg-sweep")
            print("sweep:", wait_idle(page))
            time.sleep(1.5)
            page.screenshot(path=str(folder / "page-sweep.png"), full_page=True)
            browser.close()
    finally:
        demo.close()
    print("screenshots in", folder)


if __name__ == "__main__":
    main(Path(sys.argv[1]) if len(sys.argv) > 1 else ROOT / "bench" / "page-h200")
