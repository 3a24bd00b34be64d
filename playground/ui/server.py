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
    """Failed logins slowed down per (client address, user name), under a larger ceiling per address, in front of
    Gradio's POST /login.

    Why both counts: a class often reaches the server from one address (a school's NAT or proxy). Counted per address
    alone, one student mistyping a password LIMIT times locked every classmate out for up to WINDOW seconds. Counted
    per name alone, a guesser would get a fresh allowance with each new name (the class password takes any name).
    So each name from an address gets the small allowance below, and the address as a whole ADDRESS_LIMIT failures:
    a class fumbling a new password (40 students failing 5 times each) stays under it, a guesser cycling names from
    one address meets it (and then the class behind that address waits too: the price of stopping them).

    Per (address, name), the first FREE failures in WINDOW seconds answer at once; each later one waits
    DELAY * 2**k seconds (at most MAX_DELAY) before the password is even looked at; past LIMIT failures that name is
    answered 429 with Retry-After until its oldest failure is WINDOW seconds old, and so is every name from an
    address past ADDRESS_LIMIT. An attempt counts as a failure from the moment it arrives (so 50 guesses sent at once
    are counted as 50) and is forgotten if it succeeds; a success never clears the failures of another name. Names
    are compared as the login compares them, white space folded, and without case (the teacher logs in as 'teacher'
    in any case: a name's case is not a fresh allowance). Passwords are compared in constant time (checker below,
    classroom.py)."""

    FREE, DELAY, MAX_DELAY, LIMIT, ADDRESS_LIMIT, WINDOW = 5, 0.25, 8.0, 40, 200, 600.0
    BODY_LIMIT = 64 * 1024  # bytes of a login form: a name and a password

    def __init__(self, clock=time.monotonic):
        self.clock = clock
        self.failures: dict[tuple[str, str], collections.deque] = {}  # (address, name) → failure times
        self.by_address: dict[str, collections.deque] = {}
        self.lock = threading.Lock()

    @staticmethod
    def key(name) -> str:
        return classroom.user_name(name)[:classroom.NAME_LIMIT + 1].casefold()

    def _recent(self, table: dict, key, now: float) -> collections.deque:
        recent = table.setdefault(key, collections.deque())
        while recent and now - recent[0] > self.WINDOW:
            recent.popleft()
        return recent

    def admit(self, address: str, name: str = "") -> tuple[float, float | None, float, str]:
        """(seconds to wait before checking, seconds until allowed again or None, this attempt's stamp, whose
        failures refused it: "name" or "address", "" when admitted)."""
        now = self.clock()
        with self.lock:
            mine = self._recent(self.failures, (address, self.key(name)), now)
            everyone = self._recent(self.by_address, address, now)
            if len(mine) >= self.LIMIT:
                return 0.0, mine[0] + self.WINDOW - now, now, "name"
            if len(everyone) >= self.ADDRESS_LIMIT:
                return 0.0, everyone[0] + self.WINDOW - now, now, "address"
            n = len(mine)
            mine.append(now)
            everyone.append(now)
            if len(self.failures) > 10000:  # forget the names and addresses whose failures have all aged out
                self.failures = {k: q for k, q in self.failures.items() if q and now - q[-1] <= self.WINDOW}
                self.by_address = {k: q for k, q in self.by_address.items() if q and now - q[-1] <= self.WINDOW}
        return (0.0 if n < self.FREE else min(self.MAX_DELAY, self.DELAY * 2 ** (n - self.FREE))), None, now, ""

    def succeeded(self, address: str, name: str, stamp: float) -> None:
        with self.lock:
            for recent in (self.failures.get((address, self.key(name))), self.by_address.get(address)):
                if recent and stamp in recent:
                    recent.remove(stamp)

    @staticmethod
    async def login_name(scope, body: bytes) -> str:
        """The user name in a login form's `body` (URL-encoded, or multipart as the login page sends it); "" if it
        has none or does not parse."""
        async def receive():
            return {"type": "http.request", "body": body, "more_body": False}
        form = None
        try:
            form = await Request(scope, receive).form()
            name = form.get("username")
            return name if isinstance(name, str) else ""
        except Exception:  # a form Gradio will refuse on its own: counted under no name
            return ""
        finally:
            if form is not None:
                await form.close()

    def wrap(self, inner):
        """An ASGI app: `inner` (the login route) behind the throttle."""
        async def guarded(scope, receive, send):
            address = (scope.get("client") or ("unknown",))[0]
            chunks, size, more = [], 0, True
            while more:  # the form is read here, for its name, and handed on to the login as it came
                message = await receive()
                if message["type"] != "http.request":
                    return  # the client went away
                chunks.append(message.get("body", b""))
                size += len(chunks[-1])
                more = message.get("more_body", False)
                if size > self.BODY_LIMIT:
                    await JSONResponse({"detail": "a login form is a name and a password"},
                                       status_code=413)(scope, receive, send)
                    return
            body = b"".join(chunks)
            name = await self.login_name(scope, body)
            delay, retry_after, stamp, whose = self.admit(address, name)
            if retry_after is not None:
                wait = max(1, math.ceil(retry_after))
                who = "for this name" if whose == "name" else "from this address"
                response = JSONResponse({"detail": f"too many failed logins {who}: try again in {wait} s"},
                                        status_code=429, headers={"Retry-After": str(wait)})
                await response(scope, receive, send)
                return
            if delay:
                await asyncio.sleep(delay)
            status, replayed = {}, []

            async def replay():
                if not replayed:
                    replayed.append(True)
                    return {"type": "http.request", "body": body, "more_body": False}
                return await receive()

            async def watch(message):
                if message["type"] == "http.response.start":
                    status["code"] = message["status"]
                await send(message)
            await inner(scope, replay, watch)
            if status.get("code") == 200:
                self.succeeded(address, name, stamp)
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


def protect(demo: gr.Blocks, app, room: classroom.Classroom, throttle: LoginThrottle | None = None) -> None:
    """What serve() puts around Gradio's routes once the page is up (tests start their servers through it too):
    /health, the login's throttle, and the end of sessions a roster import no longer accepts."""
    add_health_route(app)
    throttle_logins(app, throttle or LoginThrottle())
    classroom.end_sessions_off_the_roster(app, room)


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
    protect(demo, app, room)
    gateway.start_jobs(settings)
    if not prevent_thread_lock:
        demo.block_thread()
    return demo, app, url
