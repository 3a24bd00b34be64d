"""A student makes a token for their agent on the page, as a student would: logged in through the login page, in
chromium, the page served as serve() serves it (the MCP tools added, mcp_server=True, server.protect). The token is
shown once, works for an MCP request, never shows again, and stops working once revoked on the page."""
from __future__ import annotations

import re
import time

import httpx
import pytest

from conftest import launch_browser, need_browser
from ports import free_port

pytestmark = [pytest.mark.browser, pytest.mark.timeout(900),
              pytest.mark.filterwarnings("ignore::pandas.errors.Pandas4Warning")]
TEACHER_PW = "teacher-secret"
CLASS_PW = "class-secret"
INITIALIZE = {"jsonrpc": "2.0", "id": 1, "method": "initialize",
              "params": {"protocolVersion": "2025-06-18", "capabilities": {},
                         "clientInfo": {"name": "test", "version": "1"}}}


@pytest.fixture(scope="module")
def page_server(tmp_path_factory):
    need_browser()
    from playground.settings import Settings
    from playground.ui import classroom as cls, mcp_tools, server
    from playground.ui.layout import build_demo
    settings = Settings(data_dir=tmp_path_factory.mktemp("agents") / "data", teacher_password=TEACHER_PW,
                        password=CLASS_PW)
    room = cls.install(cls.Classroom(settings))
    demo = build_demo(settings)
    mcp_tools.add(demo)
    demo.queue(max_size=settings.ui_queue, default_concurrency_limit=None)
    app, local, _ = demo.launch(server_name="127.0.0.1", server_port=free_port(), auth=room.login_in_a_thread,
                                auth_message=room.login_message(), prevent_thread_lock=True, quiet=True,
                                ssr_mode=False, mcp_server=True)
    server.protect(demo, app, room)
    from playwright.sync_api import sync_playwright
    with sync_playwright() as p:
        browser = launch_browser(p)
        yield {"url": local.rstrip("/"), "room": room, "browser": browser}
        browser.close()
    demo.close()
    cls.install(None)


def mcp_status(url: str, token: str | None) -> int:
    headers = {"Accept": "application/json, text/event-stream"}
    if token:
        headers["Authorization"] = f"Bearer {token}"
    return httpx.post(url + "/gradio_api/mcp/", json=INITIALIZE, headers=headers, timeout=60).status_code


def open_agents(page) -> None:
    section = page.locator("#pg-agents")
    section.locator(".label-wrap").first.click()
    page.wait_for_selector("#pg-token-name textarea, #pg-token-name input", timeout=60_000)


def test_a_student_makes_a_token_on_the_page_sees_it_once_and_revokes_it(page_server):
    url = page_server["url"]
    page = page_server["browser"].new_page(viewport={"width": 1440, "height": 900})
    page.goto(url, wait_until="domcontentloaded")
    page.wait_for_selector("input[type=password]")
    page.fill("input[type=text]", "Ada")
    page.fill("input[type=password]", CLASS_PW)
    page.keyboard.press("Enter")
    page.wait_for_selector("#pg-agents", timeout=120_000)
    open_agents(page)
    page.wait_for_function("document.querySelector('#pg-agents-config') && "
                           "document.querySelector('#pg-agents-config').innerText.includes('/gradio_api/mcp/')",
                           timeout=60_000)
    config = page.inner_text("#pg-agents-config")
    assert f"{url}/gradio_api/mcp/" in config and "Bearer" in config
    assert "acts as you" in page.inner_text("#pg-agents-intro")

    name = page.locator("#pg-token-name textarea, #pg-token-name input").first
    name.fill('<img src=x onerror="window.pwned=1">')
    page.click("#pg-token-make")
    page.wait_for_function("document.querySelector('#pg-token-out') && "
                           "/pgt_[0-9a-f]{12}_/.test(document.querySelector('#pg-token-out').innerText)",
                           timeout=60_000)
    token = re.search(r"pgt_[0-9a-f]{12}_[A-Za-z0-9_-]{43}", page.inner_text("#pg-token-out")).group(0)
    assert "not shown again" in page.inner_text("#pg-token-note")
    listed = page.inner_text("#pg-token-list")
    assert '<img src=x onerror="window.pwned=1">' in listed and token not in listed  # the name as text
    assert page.evaluate("window.pwned") is None
    assert mcp_status(url, token) == 200 and mcp_status(url, None) == 401

    page.reload(wait_until="domcontentloaded")  # seen once: a reload shows the list, never the token
    page.wait_for_selector("#pg-agents", timeout=120_000)
    open_agents(page)
    page.wait_for_function("document.querySelector('#pg-token-list') && "
                           "document.querySelector('#pg-token-list').innerText.includes('#')", timeout=60_000)
    assert token not in page.content()
    token_id = re.search(r"#(\d+)", page.inner_text("#pg-token-list")).group(1)
    page.locator("#pg-token-id input").fill(token_id)
    page.click("#pg-token-revoke")
    page.wait_for_function("document.querySelector('#pg-token-note').innerText.includes('revoked')",
                           timeout=60_000)
    assert mcp_status(url, token) == 401
    deadline = time.monotonic() + 30
    while "No live token" not in page.inner_text("#pg-token-list") and time.monotonic() < deadline:
        time.sleep(0.3)
    assert "No live token" in page.inner_text("#pg-token-list")
    page.close()
