"""Start the page: Gradio's server with the queue, optional password login, and GET /health (no login needed)."""
from __future__ import annotations

import asyncio
import collections
import hmac
import inspect
import math
import threading
import time

import gradio as gr
from fastapi import Request
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


class LoginThrottle:
    """Failed logins slowed down per client address, in front of Gradio's POST /login.

    The first FREE failures of an address in WINDOW seconds answer at once; each later one waits DELAY * 2**k seconds
    (at most MAX_DELAY) before the password is even looked at; past LIMIT failures the address is answered 429 with
    Retry-After until its oldest failure is WINDOW seconds old. An attempt counts as a failure from the moment it
    arrives (so 50 guesses sent at once are counted as 50) and is forgotten if it succeeds. The numbers leave room for
    a classroom behind one NAT address: 30 students each mistyping once stay under LIMIT, and a success from one of
    them never clears the count an attacker beside them has run up. Passwords are compared in constant time (checker
    below, classroom.py)."""

    FREE, DELAY, MAX_DELAY, LIMIT, WINDOW = 5, 0.25, 8.0, 40, 600.0

    def __init__(self, clock=time.monotonic):
        self.clock = clock
        self.failures: dict[str, collections.deque] = {}
        self.lock = threading.Lock()

    def admit(self, address: str) -> tuple[float, float | None, float]:
        """(seconds to wait before checking, seconds until allowed again or None, this attempt's stamp)."""
        now = self.clock()
        with self.lock:
            recent = self.failures.setdefault(address, collections.deque())
            while recent and now - recent[0] > self.WINDOW:
                recent.popleft()
            if len(recent) >= self.LIMIT:
                return 0.0, recent[0] + self.WINDOW - now, now
            n = len(recent)
            recent.append(now)
            if len(self.failures) > 10000:  # forget addresses whose failures have all aged out
                self.failures = {a: q for a, q in self.failures.items() if q and now - q[-1] <= self.WINDOW}
        return (0.0 if n < self.FREE else min(self.MAX_DELAY, self.DELAY * 2 ** (n - self.FREE))), None, now

    def succeeded(self, address: str, stamp: float) -> None:
        with self.lock:
            recent = self.failures.get(address)
            if recent and stamp in recent:
                recent.remove(stamp)

    def wrap(self, inner):
        """An ASGI app: `inner` (the login route) behind the throttle."""
        async def guarded(scope, receive, send):
            address = (scope.get("client") or ("unknown",))[0]
            delay, retry_after, stamp = self.admit(address)
            if retry_after is not None:
                wait = max(1, math.ceil(retry_after))
                response = JSONResponse({"detail": f"too many failed logins from this address: try again in {wait} s"},
                                        status_code=429, headers={"Retry-After": str(wait)})
                await response(scope, receive, send)
                return
            if delay:
                await asyncio.sleep(delay)
            status = {}

            async def watch(message):
                if message["type"] == "http.response.start":
                    status["code"] = message["status"]
                await send(message)
            await inner(scope, receive, watch)
            if status.get("code") == 200:
                self.succeeded(address, stamp)
        return guarded


def throttle_logins(app, throttle: LoginThrottle) -> None:
    """Put Gradio's login routes (POST /login, /login/) behind `throttle`."""
    for route in app.router.routes:
        if getattr(route, "path", None) in ("/login", "/login/") and "POST" in (getattr(route, "methods", None) or ()):
            if not getattr(route.app, "throttled", False):
                route.app = throttle.wrap(route.app)
                route.app.throttled = True


async def logged_in(app, request) -> bool:
    """Whether `request` comes from a logged-in user, as Gradio decides it for its own routes (its token cookie, or
    the auth_dependency of a reverse proxy's user header); True on a server without a login."""
    if app.auth is None and getattr(app, "auth_dependency", None) is None:
        return True
    if getattr(app, "auth_dependency", None) is not None:
        user = app.auth_dependency(request)
        if inspect.isawaitable(user):
            user = await user
        return bool(user)
    token = request.cookies.get(f"access-token-{app.cookie_id}") or \
        request.cookies.get(f"access-token-unsecure-{app.cookie_id}")
    return token is not None and app.tokens.get(token) is not None


def add_health_route(app) -> None:
    """GET /health → 200 {"ok": true} or 503 {"ok": false}, without a login (Docker's HEALTHCHECK needs that: Gradio's
    login guards its own routes one by one, so a route added here answers without one). The details (the GPU, how
    jobs are sandboxed, the queue, the cache's counters) only to a logged-in user, or on a server without a login."""
    if any(getattr(r, "path", None) == "/health" for r in app.router.routes):
        return

    async def health(request: Request):
        body = gateway.health()
        code = 200 if body.get("ok", True) else 503
        if not await logged_in(app, request):
            body = {"ok": bool(body.get("ok", True))}
        return JSONResponse(body, status_code=code)
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
    throttle_logins(app, LoginThrottle())
    classroom.end_sessions_off_the_roster(app, room)
    gateway.start_jobs(settings)
    if not prevent_thread_lock:
        demo.block_thread()
    return demo, app, url
