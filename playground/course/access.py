"""Who may do what: user names as the class knows them, the client address every per-address limit counts, the
counts of recent events those limits are kept with, and the teacher's check.

Plain Python: the page (playground/ui/classroom.py) and the server (playground/ui/server.py) call it.
"""
from __future__ import annotations

import contextvars
import hmac
import ipaddress
import math
import threading
import time

from ..engine.answers import failed
from ..engine.errors import StageError

TEACHER = "teacher"  # the teacher's user name at the login
# What a login stood on (Classroom.credential): the teacher's password, the class password, or a roster student's
# stored password hash (which starts "scrypt$").
TEACHER_LOGIN, CLASS_LOGIN = "the teacher password", "the class password"
# Set by the login's guard (server.py) around Gradio's login route: the login writes what it stood on there, for the
# session the route then opens.
LOGIN_SEEN: contextvars.ContextVar[dict | None] = contextvars.ContextVar("playground_login_seen", default=None)
ADDRESS_CHARS = 64  # of an address taken from a header: an entry of X-Forwarded-For is anyone's text
NAME_LIMIT = 64  # characters of a user name (the store keeps no longer ones)


def error(stage: str, message: str, **extra) -> dict:
    """A failed answer in the engine's one error shape (engine/answers.py)."""
    return failed(StageError(stage, message, extra.pop("line", None), extra.pop("log", "")), **extra)


class Recent:
    """Per key (a user), the times of recent events of one kind (wrong teacher passwords, new share links) within
    `window` seconds; thread-safe, and keys whose events have all aged out are forgotten once there are many."""

    def __init__(self, window: float, clock=time.monotonic):
        self.window, self.clock = window, clock
        self.times: dict[str, list[float]] = {}
        self.lock = threading.Lock()

    def wait(self, key: str, limit: int) -> float | None:
        """Seconds until `key` has fewer than `limit` events in the window again, or None if it has now."""
        with self.lock:
            return self._wait(key, limit, self.clock())

    def _wait(self, key: str, limit: int, now: float) -> float | None:
        recent = [t for t in self.times.get(key, []) if now - t < self.window]
        if recent:
            self.times[key] = recent
        else:
            self.times.pop(key, None)  # a key asked about with nothing in the window takes no room
        return recent[0] + self.window - now if len(recent) >= limit else None

    def take(self, key: str, limit: int) -> float | None:
        """`wait`, and if None, the event counted, in one step: two requests at once cannot both slip under the
        limit."""
        now = self.clock()
        with self.lock:
            wait = self._wait(key, limit, now)
            if wait is None:
                self.times.setdefault(key, []).append(now)
            return wait

    def take_all(self, limits: list[tuple]) -> tuple | None:
        """`take` for several (key, limit) at once: the event counted under every key only if each is under its
        limit, else (seconds to wait, the key that is full) and nothing counted."""
        now = self.clock()
        with self.lock:
            for key, limit in limits:
                if (wait := self._wait(key, limit, now)) is not None:
                    return wait, key
            for key, _ in limits:
                self.times.setdefault(key, []).append(now)
            self._forget_idle(now)
            return None

    def _forget_idle(self, now: float) -> None:
        if len(self.times) > 10000:
            self.times = {k: v for k, v in self.times.items() if v and now - v[-1] < self.window}

    def add(self, key: str) -> None:
        now = self.clock()
        with self.lock:
            self.times.setdefault(key, []).append(now)
            self._forget_idle(now)


def user_name(name) -> str:
    """A user name as the class knows it: runs of white space as one space, none at the ends."""
    return " ".join(str(name or "").split())


def plain_text(text, limit: int) -> str:
    """A student's or the teacher's text as the class keeps it: printable characters and line breaks only, each
    line's white space folded, at most `limit` characters."""
    lines = [" ".join("".join(c for c in line if c.isprintable()).split()) for line in str(text or "").splitlines()]
    return "\n".join(lines).strip()[:limit]


def resolve_client(peer: str, forwarded_for: list[str], trusted: tuple) -> str:
    """The client's address, the one rule for every limit counted per address: the connection's peer, unless the peer
    is one of the `trusted` proxies (Settings.trusted_proxy_networks); then the right-most address of X-Forwarded-For
    (`forwarded_for`: the header's values) that is not one of them. Each proxy appends the address it got the request
    from, so anything left of that is the client's own claim. (An entry that is no address is returned as it is, cut
    short: it is only a key of the limits.)"""
    if not in_networks(peer, trusted):
        return peer
    entries = [e.strip() for value in forwarded_for for e in str(value).split(",") if e.strip()]
    for entry in reversed(entries):
        if not in_networks(entry, trusted):
            return entry[:ADDRESS_CHARS]
    return entries[0][:ADDRESS_CHARS] if entries else peer


def in_networks(address, networks: tuple) -> bool:
    """Is `address` (an IP, maybe with a port or in brackets) in one of `networks`?"""
    if not networks or not address:
        return False
    text = str(address).strip()
    if text.startswith("[") and "]" in text:
        text = text[1:text.index("]")]
    elif text.count(":") == 1:  # an IPv4 address with a port
        text = text.split(":")[0]
    try:
        ip = ipaddress.ip_address(text)
    except ValueError:
        return False
    return any(ip.version == n.version and ip in n for n in networks)


def client_address(request) -> str | None:
    """The client's address of a request (gr.Request, a Starlette request, or an ASGI scope), as every limit per
    address counts it: serve() puts resolve_client's answer in each request's scope (server.PeerAddress); a server
    started without that has the address its connection came from."""
    if request is None:
        return None
    if isinstance(request, dict):
        client = request.get("client")
        host = client[0] if client else None
    else:
        host = getattr(getattr(request, "client", None), "host", None)
    return str(host)[:ADDRESS_CHARS] if host else None


class TeacherGate:
    """The teacher's check: the teacher logged in as `teacher` (the login checked the password), or anyone giving
    the teacher password, which a student may guess only TRIES times in WINDOW seconds (per student, and per address:
    the class password lets one student log in under any number of names). Not counted for all users together:
    students could then deny the teacher, who types the password from elsewhere; and the teacher's own login as
    'teacher' never meets either limit."""

    TRIES, WINDOW = 5, 600.0  # wrong teacher passwords a student may give in the window
    TRIES_ADDRESS = 30  # and one address in all: one student under many names (the class password) meets it

    def __init__(self, teacher_password: str | None, user_header: str | None, log=None):
        self.password, self.user_header, self.log = teacher_password, user_header, log
        self.misses = Recent(self.WINDOW)  # who gave a wrong teacher password (and from where)

    def is_teacher(self, username: str | None, teacher_password: str | None = None) -> bool:
        if not self.password:
            return False
        if user_name(username).lower() == TEACHER and not self.user_header:
            return True  # logged in as the teacher (the login checked the password)
        return bool(teacher_password) and hmac.compare_digest(str(teacher_password).encode(), self.password.encode())

    def shows_view(self, username: str | None) -> bool:
        """Is the page's Teacher section for this user? Not for a student logged in under their own name (its
        actions refuse them); yes for the teacher, and wherever the teacher might be anyone: no login (the teacher
        types the password there), or a proxy's user header (a header never makes the teacher: the password
        does)."""
        if not self.password:
            return False
        name = user_name(username)
        return not name or bool(self.user_header) or name.lower() == TEACHER

    def refusal(self, username, teacher_password, address: str | None = None) -> dict | None:
        """None if this is the teacher, else the refusal to answer."""
        if not self.password:
            return error("permission", "the teacher's view is off: set PLAYGROUND_TEACHER_PASSWORD")
        if self.is_teacher(username, None):
            return None
        who = user_name(username)[:NAME_LIMIT] or f"someone at {address or 'an unknown address'}"  # (no login)
        where = ("address", address or "unknown")  # (a tuple: never equal to a user's name)
        if (wait := self.misses.wait(who, self.TRIES)) is not None:
            return error("permission", f"too many wrong teacher passwords from {who}: try again in "
                                       f"{math.ceil(wait)} s")
        if (wait := self.misses.wait(where, self.TRIES_ADDRESS)) is not None:
            return error("permission", f"too many wrong teacher passwords from this address: try again in "
                                       f"{math.ceil(wait)} s (the teacher may log in as '{TEACHER}')")
        if not self.is_teacher(None, teacher_password):
            if teacher_password:
                self.misses.add(who)
                self.misses.add(where)
                if self.log is not None:
                    self.log.warning("a wrong teacher password from %r at %s", who, address)
            return error("permission", "only the teacher may do this: log in as 'teacher' or give the teacher "
                                       "password")
        return None


def spreadsheet_safe(value):
    """A student's text as a spreadsheet shows it, not as a formula it would run: a cell starting with = + - @ (or a
    tab or carriage return) gets a leading apostrophe (OWASP's advice for CSV injection)."""
    if isinstance(value, str) and value[:1] in ("=", "+", "-", "@", "\t", "\r"):
        return "'" + value
    return value
