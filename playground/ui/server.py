"""Start the page: Gradio's server with the queue, optional password login, and GET /health (no login needed)."""
from __future__ import annotations

import asyncio
import base64
import collections
import hashlib
import hmac
import inspect
import logging
import math
import os
import threading
import time
from urllib.parse import urlsplit

import gradio as gr
from fastapi import Request
from fastapi.responses import JSONResponse

from ..course import agents
from ..settings import Settings, current
from . import classroom, gateway, mcp_tools, styles

log = logging.getLogger("playground.server")


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
    Gradio's POST /login; a browser that logged in as a name before is counted on its own failures only.

    Why both counts: a class often reaches the server from one address (a school's NAT or proxy). Counted per address
    alone, one student mistyping a password LIMIT times locked every classmate out for up to WINDOW seconds. Counted
    per name alone, a guesser would get a fresh allowance with each new name (the class password takes any name).
    So each name from an address gets the small allowance below, and the address as a whole ADDRESS_LIMIT failures:
    a class fumbling a new password (40 students failing 5 times each) stays under it, a guesser cycling names from
    one address meets it (and then the class behind that address waits too: the price of stopping them).

    Device cookies (OWASP's "Slow down online guessing attacks with device cookies"): those counts are filled by
    anyone, students failing as 'teacher' from the class's address included, and would lock the real teacher out.
    So a successful login hands the browser a cookie signed by the server for that user and the password it logged in
    with (`device_cookie`; `standing`, Classroom.standing_of, says what a name's login stands on now); an attempt
    that presents a valid one for the name it logs in as is counted only on that cookie's own failures (DEVICE_LIMIT
    in WINDOW, slowed as below), never refused by the counts others fill. A cookie is minted only by a login that knew
    the name's password, and stands for nothing once that password changes (the class password's cookies once a
    roster holds the name, a student's once an import gives them a new one): it buys no guesses at a password its
    holder did not already know.

    Per (address, name), or per device cookie, the first FREE failures in WINDOW seconds answer at once; each later
    one waits DELAY * 2**k seconds (at most MAX_DELAY) before the password is even looked at; past LIMIT failures
    that name is answered 429 with Retry-After until its oldest failure is WINDOW seconds old, and so is every name
    from an address past ADDRESS_LIMIT, and a device cookie past DEVICE_LIMIT. An attempt counts as a failure from the
    moment it arrives (so 50 guesses sent at once are counted as 50) and is forgotten if it succeeds; a success never
    clears the failures of another name. Names are compared as the login compares them, white space folded, and
    without case (the teacher logs in as 'teacher' in any case: a name's case is not a fresh allowance). Passwords
    are compared in constant time (checker below, classroom.py). The address is classroom.client_address's."""

    FREE, DELAY, MAX_DELAY, LIMIT, ADDRESS_LIMIT, WINDOW = 5, 0.25, 8.0, 40, 200, 600.0
    DEVICE_LIMIT = 10  # failures of one device cookie in the window
    DEVICE_DAYS = 180  # a device cookie's life
    BODY_LIMIT = 64 * 1024  # bytes of a login form: a name and a password

    def __init__(self, clock=time.monotonic, secret=None, standing=None):
        self.clock = clock
        self.secret = secret  # the device cookies' key: bytes, or a function that gives it (read once), or None
        self.standing = standing  # name → what a login as that name stands on now (signed into its device cookies)
        self._key: bytes | None = None
        self.failures: dict[tuple[str, str], collections.deque] = {}  # (address, name) → failure times
        self.by_address: dict[str, collections.deque] = {}
        self.by_device: dict[str, collections.deque] = {}  # a device cookie's nonce → failure times
        self.lock = threading.Lock()

    @staticmethod
    def key(name) -> str:
        return classroom.user_name(name)[:classroom.NAME_LIMIT + 1].casefold()

    # -- device cookies --------------------------------------------------------------------------------------------
    def _signing_key(self) -> bytes:
        with self.lock:
            if self._key is None:
                key = None
                try:
                    key = self.secret() if callable(self.secret) else self.secret
                except Exception:  # the class's database unreadable: this process's own key (forgotten at restart)
                    log.exception("the device cookies' key could not be read; using one of this process")
                self._key = bytes(key) if key else os.urandom(32)
            return self._key

    def _sign(self, what: str) -> str:
        digest = hmac.new(self._signing_key(), what.encode(), hashlib.sha256).digest()
        return base64.urlsafe_b64encode(digest[:16]).decode().rstrip("=")

    def device_cookie_name(self, name: str) -> str:
        """The cookie that stands for `name` (one per name, so a browser shared by the teacher and a student keeps
        both); its name says nothing of the user's."""
        return "pg-device-" + self._sign("name|" + self.key(name))[:16]

    def _standing(self, name: str) -> str:
        if self.standing is None:
            return ""
        try:
            return str(self.standing(name) or "")
        except Exception:  # the class's database unreadable: no cookie matches (every attempt counted as untrusted)
            log.exception("what a login as %r stands on could not be read", name)
            return "unreadable:" + os.urandom(8).hex()

    def _device_signature(self, name: str, nonce: str) -> str:
        return self._sign("device|" + self.key(name) + "|" + self._standing(name) + "|" + nonce)

    def device_cookie(self, name: str, secure: bool = False) -> str:
        """A Set-Cookie value: a fresh nonce for `name` and what its login stands on now, signed."""
        nonce = base64.urlsafe_b64encode(os.urandom(16)).decode().rstrip("=")
        value = f"v1.{nonce}.{self._device_signature(name, nonce)}"
        return (f"{self.device_cookie_name(name)}={value}; Max-Age={self.DEVICE_DAYS * 86400}; Path=/; HttpOnly; "
                f"SameSite=Strict" + ("; Secure" if secure else ""))

    def device_of(self, cookies: dict[str, str], name: str) -> str | None:
        """The nonce of the valid device cookie for `name` among a request's `cookies`, else None."""
        value = cookies.get(self.device_cookie_name(name), "")
        parts = value.split(".")
        if len(parts) != 3 or parts[0] != "v1" or not parts[1] or len(parts[1]) > 32:
            return None
        expected = self._device_signature(name, parts[1])
        return parts[1] if hmac.compare_digest(expected.encode(), parts[2].encode()) else None

    # -- counting --------------------------------------------------------------------------------------------------
    def _recent(self, table: dict, key, now: float) -> collections.deque:
        recent = table.setdefault(key, collections.deque())
        while recent and now - recent[0] > self.WINDOW:
            recent.popleft()
        return recent

    def _delay(self, n: int) -> float:
        return 0.0 if n < self.FREE else min(self.MAX_DELAY, self.DELAY * 2 ** (n - self.FREE))

    def admit(self, address: str, name: str = "", device: str | None = None
              ) -> tuple[float, float | None, float, str]:
        """(seconds to wait before checking, seconds until allowed again or None, this attempt's stamp, whose
        failures refused it: "name", "address" or "device", "" when admitted). `device`: the nonce of a valid device
        cookie for `name` (device_of): then only that cookie's failures count."""
        now = self.clock()
        with self.lock:
            if device is not None:
                mine = self._recent(self.by_device, device, now)
                if len(mine) >= self.DEVICE_LIMIT:
                    return 0.0, mine[0] + self.WINDOW - now, now, "device"
                n = len(mine)
                mine.append(now)
                self._forget(now)
                return self._delay(n), None, now, ""
            mine = self._recent(self.failures, (address, self.key(name)), now)
            everyone = self._recent(self.by_address, address, now)
            if len(mine) >= self.LIMIT:
                return 0.0, mine[0] + self.WINDOW - now, now, "name"
            if len(everyone) >= self.ADDRESS_LIMIT:
                return 0.0, everyone[0] + self.WINDOW - now, now, "address"
            n = len(mine)
            mine.append(now)
            everyone.append(now)
            self._forget(now)
        return self._delay(n), None, now, ""

    def _forget(self, now: float) -> None:
        """Forget the names, addresses and cookies whose failures have all aged out (once there are many)."""
        for attr in ("failures", "by_address", "by_device"):
            table = getattr(self, attr)
            if len(table) > 10000:
                setattr(self, attr, {k: q for k, q in table.items() if q and now - q[-1] <= self.WINDOW})

    def succeeded(self, address: str, name: str, stamp: float, device: str | None = None) -> None:
        with self.lock:
            tables = ((self.by_device.get(device),) if device is not None else
                      (self.failures.get((address, self.key(name))), self.by_address.get(address)))
            for recent in tables:
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

    def wrap(self, inner, room: classroom.Classroom | None = None, app=None):
        """An ASGI app: `inner` (the login route of Gradio's `app`) behind the throttle, refused to other sites
        (from_another_site); a successful login gets a device cookie, and the session it opens (Gradio's access
        token cookie) is told to `room` with what the login stood on (Classroom.session_opened)."""
        cookie_id = getattr(app, "cookie_id", None)

        async def guarded(scope, receive, send):
            if (why := from_another_site(scope)) is not None:
                await refuse_other_sites(why, scope, receive, send)
                return
            address = classroom.client_address(scope) or "unknown"
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
            device = self.device_of(Request(scope).cookies, name) if name else None
            delay, retry_after, stamp, whose = self.admit(address, name, device)
            if retry_after is not None:
                wait = max(1, math.ceil(retry_after))
                who = {"name": "for this name", "address": "from this address",
                       "device": "from this browser"}[whose]
                response = JSONResponse({"detail": f"too many failed logins {who}: try again in {wait} s"},
                                        status_code=429, headers={"Retry-After": str(wait)})
                await response(scope, receive, send)
                return
            if delay:
                await asyncio.sleep(delay)
            status, replayed, token = {}, [], []

            async def replay():
                if not replayed:
                    replayed.append(True)
                    return {"type": "http.request", "body": body, "more_body": False}
                return await receive()

            async def watch(message):
                if message["type"] == "http.response.start":
                    status["code"] = message["status"]
                    if message["status"] == 200:
                        headers = list(message.get("headers") or [])
                        token.extend(_cookie_values(headers, f"access-token-unsecure-{cookie_id}"))
                        cookie = self.device_cookie(name, secure=scope.get("scheme") == "https")
                        message = {**message, "headers": headers + [(b"set-cookie", cookie.encode("latin-1"))]}
                await send(message)
            seen = classroom.LOGIN_SEEN.set({})
            try:
                await inner(scope, replay, watch)
                credential = classroom.LOGIN_SEEN.get().get("credential")
            finally:
                classroom.LOGIN_SEEN.reset(seen)
            if status.get("code") == 200:
                self.succeeded(address, name, stamp, device)
                if room is not None and token:  # (a database write: off the event loop, as the login's hash is)
                    await asyncio.to_thread(room.session_opened, app, token[0], name.strip(), credential)
        return guarded


def _cookie_values(headers, name: str) -> list[str]:
    """The values a response's Set-Cookie headers give cookie `name`."""
    found = []
    for key, value in headers:
        if key.lower() == b"set-cookie":
            text = value.decode("latin-1")
            cookie, _, _ = text.partition(";")
            k, _, v = cookie.partition("=")
            if k.strip() == name and v.strip():
                found.append(v.strip().strip('"'))
    return found


def from_another_site(scope) -> str | None:
    """Why a request to the login or the logout came from a page of another site, or None. A browser says where a
    request comes from (Sec-Fetch-Site; Origin on a POST; Referer, unless a page asks it not to): a page of another
    site could otherwise log a student's browser in under a name of its choosing, or out. Where nothing says (a
    script, gradio_client), the request is let through: it has no victim's browser to ride. The page's own address
    is the Host header (and X-Forwarded-Host from a trusted proxy)."""
    headers = {}
    for key, value in scope.get("headers") or []:
        headers.setdefault(key.decode("latin-1").lower(), value.decode("latin-1").strip())
    fetch_site = headers.get("sec-fetch-site", "").lower()
    if fetch_site in ("cross-site", "same-site"):
        return f"Sec-Fetch-Site: {fetch_site}"
    if fetch_site in ("same-origin", "none"):
        return None
    hosts = {headers.get("host", "").lower()}
    if scope.get(PROXIED) and headers.get("x-forwarded-host"):
        hosts.add(headers["x-forwarded-host"].split(",")[0].strip().lower())
    origin = headers.get("origin")
    if origin is not None:
        return None if origin.lower() != "null" and _host_of(origin) in hosts else "Origin"
    referer = headers.get("referer")
    if referer and _host_of(referer) not in hosts:
        return "Referer"
    return None


def _host_of(url: str) -> str | None:
    """The host[:port] of a URL a browser sent, or None where it names none (a malformed one)."""
    try:
        return urlsplit(url).netloc.lower() or None
    except ValueError:
        return None


async def refuse_other_sites(why: str, scope, receive, send) -> None:
    await JSONResponse({"detail": f"refused: this came from a page of another site ({why}); log in and out on "
                                  "the playground's own page"}, status_code=403)(scope, receive, send)


def throttle_logins(app, throttle: LoginThrottle, room: classroom.Classroom | None = None) -> None:
    """Put Gradio's login routes (POST /login, /login/) behind `throttle`, and its logout (/logout) behind the same
    refusal of other sites."""
    for route in app.router.routes:
        path, methods = getattr(route, "path", None), getattr(route, "methods", None) or ()
        if not hasattr(route, "app") or getattr(route.app, "throttled", False):
            continue
        if path in ("/login", "/login/") and "POST" in methods:
            route.app = throttle.wrap(route.app, room, app)
            route.app.throttled = True
        elif path in ("/logout", "/logout/"):
            route.app = same_site_only(route.app)
            route.app.throttled = True


def same_site_only(inner):
    """An ASGI app: `inner`, refused (403) to a request from a page of another site (from_another_site)."""
    async def guarded(scope, receive, send):
        if (why := from_another_site(scope)) is not None:
            await refuse_other_sites(why, scope, receive, send)
            return
        await inner(scope, receive, send)
    return guarded


# -- whose address ----------------------------------------------------------------------------------------------------
PEER, PROXIED = "playground.peer", "playground.proxied"  # keys PeerAddress adds to a request's scope


class PeerAddress:
    """The server's outermost layer: each request's client address (scope["client"], what Gradio's request.client
    and classroom.client_address read) set by classroom.resolve_client, the one rule: the connection's peer, or
    where that is a trusted proxy (Settings.trusted_proxies) the address it forwards. Uvicorn's own layer, which
    believes X-Forwarded-For from loopback by default (so `ssh -L` and any same-host process could claim any
    address), believes nobody once this is in place (trust_only).

    It also bounds each request's body (`max_body`, Settings.request_bytes): Gradio reads and parses a body whole
    before it asks whether the sender is logged in, so one anonymous POST of 300 MiB held the event loop for
    seconds and the server's memory for good. A larger declared length is answered 413 unread; a body without one
    (chunked) is counted as it comes, and at the limit the app is told the client left and the sender gets 413."""

    def __init__(self, app, trusted: tuple, max_body: int | None = None):
        self.app, self.trusted, self.max_body = app, tuple(trusted), max_body

    async def __call__(self, scope, receive, send):
        if scope.get("type") == "http" and self.max_body:
            declared = [v for k, v in scope.get("headers") or [] if k == b"content-length"]
            if declared and (not declared[0].strip().isdigit() or int(declared[0]) > self.max_body):
                await self._too_large(scope, receive, send)
                return
            receive, send = self._counted(scope, receive, send)
        if scope.get("type") in ("http", "websocket") and PEER not in scope:
            peer = scope.get("client") or ("unknown", 0)
            forwarded = [v.decode("latin-1") for k, v in scope.get("headers") or [] if k == b"x-forwarded-for"]
            host = classroom.resolve_client(str(peer[0]), forwarded, self.trusted)
            scope[PEER] = peer[0]
            scope[PROXIED] = classroom.in_networks(peer[0], self.trusted)
            scope["client"] = (host, peer[1] if host == peer[0] else 0)
            if scope[PROXIED]:
                proto = dict(scope.get("headers") or []).get(b"x-forwarded-proto", b"").decode("latin-1").strip()
                if proto in ("http", "https"):
                    scope["scheme"] = proto if scope["type"] == "http" else proto.replace("http", "ws")
        await self.app(scope, receive, send)

    async def _too_large(self, scope, receive, send) -> None:
        await JSONResponse({"error": f"a request's body is limited to {self.max_body // 1024} KiB"}, status_code=413,
                           headers={"connection": "close"})(scope, receive, send)

    def _counted(self, scope, receive, send):
        state = {"read": 0, "refused": False, "answered": False}

        async def counted_receive():
            message = await receive()
            if message.get("type") == "http.request" and not state["refused"]:
                state["read"] += len(message.get("body") or b"")
                if state["read"] > self.max_body:
                    state["refused"] = True
                    if not state["answered"]:
                        state["answered"] = True
                        await self._too_large(scope, receive, send)
            return {"type": "http.disconnect"} if state["refused"] else message

        async def guarded_send(message):
            if state["refused"]:
                return  # (the 413 is the answer; what the app says after being told the client left is dropped)
            if message.get("type") == "http.response.start":
                state["answered"] = True
            await send(message)
        return counted_receive, guarded_send


def trust_only(demo: gr.Blocks, trusted: tuple, max_body: int | None = None) -> bool:
    """Put PeerAddress in front of the running server of `demo`; False (logged) where there is none to wrap."""
    config = getattr(getattr(demo, "server", None), "config", None)
    outer = getattr(config, "loaded_app", None)
    if outer is None:
        log.warning("no running server to take client addresses from: the limits per address count what it says")
        return False
    if isinstance(outer, PeerAddress) or isinstance(getattr(outer, "app", None), PeerAddress):
        return True
    try:
        from uvicorn.middleware.proxy_headers import ProxyHeadersMiddleware
    except ImportError:
        ProxyHeadersMiddleware = ()
    if ProxyHeadersMiddleware and isinstance(outer, ProxyHeadersMiddleware):
        outer.trusted_hosts = ()  # uvicorn's layer (shared by every connection, open or to come) believes nobody
        outer.app = PeerAddress(outer.app, trusted, max_body)
    else:
        config.loaded_app = PeerAddress(outer, trusted, max_body)
    return True


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
        if not await logged_in(app, request):  # (why no job runs, where none does, is for anyone to read)
            body = {"ok": bool(body.get("ok", True)), **({"jobs_refused": body["jobs_refused"]}
                                                           if body.get("jobs_refused") else {})}
        return JSONResponse(body, status_code=code)
    app.add_api_route("/health", health, methods=["GET"], include_in_schema=False)
    # Gradio has no catch-all route today; put ours first anyway so that none added later can shadow it.
    app.router.routes.insert(0, app.router.routes.pop())


# -- agents: MCP clients -----------------------------------------------------------------------------------------------
def _unauthorized(message: str, invalid: bool):
    """401 with the header RFC 6750 asks of a Bearer-protected resource."""
    challenge = 'Bearer realm="TileLang Playground"' + (', error="invalid_token"' if invalid else "")
    return JSONResponse({"detail": message}, status_code=401, headers={"WWW-Authenticate": challenge})


def agents_only(inner, room: classroom.Classroom, app=None):
    """An ASGI app: `inner` (Gradio's MCP routes: streamable HTTP, SSE and its messages, the tools' schema) refused
    (401) without `Authorization: Bearer <token>` of a valid token (Classroom.agent_of) wherever the page asks for a
    login; the page's own login is no way in (Gradio does not carry it to the tools), except to read the tools'
    schema, which the page's API view shows to a logged-in user. The token itself is never logged."""
    async def guarded(scope, receive, send):
        if scope.get("type") not in ("http", "websocket") or not room.agents_need_token():
            await inner(scope, receive, send)
            return
        request = Request(scope)
        token = agents.bearer(request.headers.get("authorization"))
        if token is None:
            if scope.get("method") == "GET" and scope.get("path", "").endswith(mcp_tools.PATH + "/schema") \
                    and app is not None and await logged_in(app, request):
                await inner(scope, receive, send)
                return
            await _unauthorized("this server's MCP tools need a token: make one on the page (Agents (MCP), while "
                                "logged in) and send it as 'Authorization: Bearer <token>'", False)(
                scope, receive, send)
            return
        found = await asyncio.to_thread(room.agent_of, token)  # (the store's read off the event loop)
        if found is None:
            log.warning("an MCP request from %s with a token that is not valid was refused",
                        classroom.client_address(scope) or "an unknown address")
            await _unauthorized("this token is not valid: revoked, its user may no longer log in here, or "
                                "mistyped; make a new one on the page", True)(scope, receive, send)
            return
        await inner(scope, receive, send)
    return guarded


def guard_mcp(app, room: classroom.Classroom) -> bool:
    """Put Gradio's MCP routes (mounted at mcp_tools.PATH) behind agents_only; False where the app serves none."""
    found = False
    for route in app.router.routes:
        if getattr(route, "path", None) == mcp_tools.PATH and hasattr(route, "app"):
            found = True
            if not getattr(route.app, "agents_only", False):
                route.app = agents_only(route.app, room, app)
                route.app.agents_only = True
    return found


UPLOADS_REFUSED = "this server takes no file uploads: the page sends kernels as text"


def refuse_uploads(app) -> None:
    """Answer Gradio's upload route (POST /gradio_api/upload) with a refusal: the page has no control that uploads,
    and the route keeps whatever a logged-in client sends (any size, any count) in Gradio's temporary folder for as
    long as the server runs, so a student's script could fill the disk the jobs, the compile cache and the class's
    database are on. The refusal is a route of its own put first, so it is matched before Gradio's (which sits in
    an included router). Where Gradio has no upload route there (a new version moved it), the server does not start:
    it fails closed rather than leave a route open that this cannot close."""
    from fastapi.routing import APIRoute
    from gradio.route_utils import API_PREFIX
    path = API_PREFIX + "/upload"

    def routes(router):
        for route in getattr(router, "routes", ()):
            yield route
            yield from routes(getattr(route, "original_router", None))
    # (Gradio's own route is in an included router, with its whole path: exactly the one refused)
    if not any(str(getattr(r, "path", "")) == path and "POST" in (getattr(r, "methods", None) or ())
               and getattr(r, "endpoint", None) is not refuse_upload for r in routes(app.router)):
        raise RuntimeError(f"Gradio's upload route was not found (POST {path}): refusing to start with an upload "
                           "route this server cannot close")
    if not any(getattr(r, "endpoint", None) is refuse_upload for r in app.router.routes):
        app.router.routes.insert(0, APIRoute(path, refuse_upload, methods=["POST"], include_in_schema=False))


async def refuse_upload() -> JSONResponse:
    return JSONResponse({"error": UPLOADS_REFUSED}, status_code=403)


def protect(demo: gr.Blocks, app, room: classroom.Classroom, throttle: LoginThrottle | None = None) -> None:
    """What serve() puts around Gradio's routes once the page is up (tests start their servers through it too):
    /health; whose address a request is (PeerAddress); the login's throttle with its device cookies, and the login
    and logout refused to other sites; the end of sessions a roster import no longer accepts, and the login page's
    line told again after one; the MCP tools offered (mcp_tools.expose) and their routes behind the agents' tokens
    (guard_mcp); Gradio's upload route refused (refuse_uploads); the roster's students' sessions kept across restarts
    (keep_sessions_across_restarts)."""
    trust_only(demo, room.settings.trusted_proxy_networks(), room.settings.request_bytes)
    add_health_route(app)
    refuse_uploads(app)
    guard_mcp(app, room)
    mcp_tools.expose(demo)
    throttle = throttle or LoginThrottle()
    if throttle.secret is None:  # kept with the class's data: a browser the teacher used stays known after a restart
        throttle.secret = lambda: room.store.secret("device cookies")
    if throttle.standing is None:
        throttle.standing = room.standing_of
    classroom.keep_sessions_across_restarts(app, room)  # (before the login's guard reads the cookie's name)
    throttle_logins(app, throttle, room)
    classroom.end_sessions_off_the_roster(app, room)

    def tell_the_login_page():
        demo.auth_message = room.login_message()
    room.on_roster.append(tell_the_login_page)


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
    mcp_tools.add(demo)  # the MCP tools' endpoints (Gradio's MCP server offers them: README, Agents at the bench)
    demo.queue(max_size=settings.ui_queue, default_concurrency_limit=None)
    # Gradio's queue makes a pandas table of its last events' times after every event (for a monitoring page this
    # server does not offer): a seventh of the server's time for a cached answer. Once in a thousand events instead.
    if hasattr(demo._queue, "ANAYLTICS_CACHE_FREQUENCY"):
        demo._queue.ANAYLTICS_CACHE_FREQUENCY = 1000
    app, url, _ = demo.launch(
        server_name=host, server_port=port, auth=auth, auth_dependency=auth_dependency,
        auth_message=room.login_message(), prevent_thread_lock=True,
        quiet=quiet, show_error=True, theme=styles.theme(), css=styles.css(), head=styles.HEAD, ssr_mode=False,
        footer_links=["api", "gradio"], mcp_server=True)
    protect(demo, app, room)
    gateway.start_jobs(settings)
    if not prevent_thread_lock:
        demo.block_thread()
    return demo, app, url
