"""Start the page: Gradio's server with the queue, optional password login, and GET /health (no login needed)."""
from __future__ import annotations

import hmac

import gradio as gr
from fastapi.responses import JSONResponse

from ..settings import Settings, current
from . import classroom, gateway, styles


def password_of(settings: Settings) -> str | None:
    """The login's password (Settings.login_password: an empty or unreadable password file raises SettingsError)."""
    return settings.login_password()


def password_from_env(env: dict | None = None) -> str | None:
    """password_of the settings `env` gives (this process's settings when None)."""
    return password_of(current() if env is None else Settings.from_env(env))


def checker(password: str):
    """Gradio auth: any user name, this password (compared in constant time)."""
    def check(username: str, given: str) -> bool:
        return hmac.compare_digest(str(given).encode(), password.encode())
    return check


def add_health_route(app) -> None:
    """GET /health → playground.jobs.health() as JSON; 200 when ok, 503 when not. Gradio's login guards its own
    routes one by one, so a route added here answers without a login (Docker's HEALTHCHECK needs that)."""
    if any(getattr(r, "path", None) == "/health" for r in app.router.routes):
        return

    def health():
        body = gateway.health()
        return JSONResponse(body, status_code=200 if body.get("ok", True) else 503)
    app.add_api_route("/health", health, methods=["GET"], include_in_schema=False)
    # Gradio has no catch-all route today; put ours first anyway so that none added later can shadow it.
    app.router.routes.insert(0, app.router.routes.pop())


def serve(host: str = "0.0.0.0", port: int = 7860, password: str | None = None, *, demo: gr.Blocks | None = None,
          prevent_thread_lock: bool = False, quiet: bool = False, settings: Settings | None = None):
    """Build (unless given) and launch the page; returns (demo, app, local_url). Blocks unless prevent_thread_lock."""
    settings = settings or current()
    # Who is who (classroom.py): the roster's own passwords, the class password, the teacher's, or a proxy's header.
    room = classroom.install(classroom.Classroom(settings, class_password=password))
    auth, auth_dependency = room.gradio_auth()
    if demo is None:
        from .layout import build_demo
        demo = build_demo(settings)
    demo.queue(max_size=settings.ui_queue, default_concurrency_limit=None)
    app, url, _ = demo.launch(
        server_name=host, server_port=port, auth=auth, auth_dependency=auth_dependency,
        auth_message=room.login_message(), prevent_thread_lock=True,
        quiet=quiet, show_error=True, theme=styles.theme(), css=styles.css(), head=styles.HEAD, ssr_mode=False,
        footer_links=["api", "gradio"])
    add_health_route(app)
    gateway.start_jobs(settings)
    if not prevent_thread_lock:
        demo.block_thread()
    return demo, app, url
