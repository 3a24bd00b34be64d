"""Agents at the bench: the tokens an MCP client (a kernel-writing agent) presents, and who a token acts as.

A student (or the teacher, for an agent of the class) makes a token on the page and sees it once; it acts as them,
with their limits (the job queue's fair share, the rate limits, the quotas: the same key as their own requests), and
whatever it does is marked as an agent's (a submission keeps the token it came with). A token is
"pgt_<selector>_<verifier>": the selector (48 random bits, shown in the list to tell tokens apart) finds its row, and
the verifier (256 random bits) is checked against the SHA-256 the store keeps, in constant time. The token itself is
never stored, logged or shown again. A revoked token, or one whose student may no longer log in (removed from the
roster, off a roster imported since, the class password gone), is refused.

Plain Python, no Gradio: the page (playground/ui/classroom.py) makes and lists tokens, the MCP guard
(playground/ui/server.py) and the MCP tools (playground/ui/mcp_tools.py) check them through Classroom.agent_of.
"""
from __future__ import annotations

import hashlib
import hmac
import re
import secrets

from .access import plain_text

PREFIX = "pgt_"
TOKEN = re.compile(r"pgt_([0-9a-f]{12})_([A-Za-z0-9_-]{43})")
NAME_LIMIT = 40      # characters of a token's name
TOKENS = 5           # live tokens one user may hold
_NOBODY = hashlib.sha256(b"no token has this verifier").hexdigest()


def new_token() -> tuple[str, str, str]:
    """(the token, its selector, its verifier's digest): the token for the user's eyes once, the rest to keep."""
    selector, verifier = secrets.token_hex(6), secrets.token_urlsafe(32)
    return f"{PREFIX}{selector}_{verifier}", selector, digest(verifier)


def digest(verifier: str) -> str:
    return hashlib.sha256(verifier.encode()).hexdigest()


def parse(token) -> tuple[str, str] | None:
    """(selector, verifier) of a well-formed token, else None."""
    match = TOKEN.fullmatch(str(token or "").strip()) if isinstance(token, str) and len(token) < 100 else None
    return (match.group(1), match.group(2)) if match else None


def matches(verifier: str, stored: str | None) -> bool:
    """Does `verifier` hash to `stored`? Compared in constant time, and a missing row costs the same hash."""
    return hmac.compare_digest(digest(verifier), stored or _NOBODY) and stored is not None


def bearer(authorization) -> str | None:
    """The token of an `Authorization: Bearer <token>` header's value, else None."""
    scheme, _, value = str(authorization or "").strip().partition(" ")
    return value.strip() or None if scheme.lower() == "bearer" else None


def check_name(name) -> tuple[str | None, str | None]:
    """(the token's name, None) or (None, why not): a name is plain text of 1 to 40 characters, kept as text (the
    page escapes it wherever it shows it)."""
    if not isinstance(name, str):
        return None, "a token's name is text"
    text = plain_text(name.replace("\n", " "), NAME_LIMIT + 1)
    if not text:
        return None, "give the token a name (what agent it is for, e.g. 'my claude at home')"
    if len(text) > NAME_LIMIT:
        return None, f"a token's name is at most {NAME_LIMIT} characters"
    return text, None


def listed(row: dict) -> dict:
    """A token as its owner (or the teacher) sees it in a list: never the token, only the selector's start."""
    return {"id": row["id"], "student": row["student"], "name": row["name"],
            "hint": f"{PREFIX}{row['selector'][:6]}…", "created_at": row["created_at"],
            "last_used": row.get("last_used"), "revoked": row.get("revoked_at") is not None}
