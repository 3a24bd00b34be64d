"""The roster: the class list the teacher pastes (one name a line, or a CSV with a `name` column), the passwords an
import makes, and which logged-in sessions an import would end (the teacher is told before it does)."""
from __future__ import annotations

import csv
import io
import secrets

from .access import TEACHER, user_name


def names_in(roster_csv: str) -> tuple[list[str], str | None]:
    """The names of a pasted roster (a `name` column, else the first column), each once, or why there are none."""
    rows = list(csv.reader(io.StringIO(str(roster_csv or ""))))
    if rows and any(c.strip().lower() == "name" for c in rows[0]):
        col = [c.strip().lower() for c in rows[0]].index("name")
        rows = rows[1:]
    else:
        col = 0
    names = []
    for r in rows:
        if len(r) > col and r[col].strip():
            name = user_name(r[col])
            if name.lower() == TEACHER:
                return [], "'teacher' is the teacher's user name; rename that student"
            if name not in names:
                names.append(name)
    if not names:
        return [], "the roster has no names: one name a line, or a CSV with a 'name' column"
    return names, None


def new_passwords(names: list[str]) -> dict[str, str]:
    return {n: secrets.token_urlsafe(8) for n in names}


def passwords_csv(passwords: dict[str, str]) -> str:
    out = io.StringIO()
    writer = csv.writer(out)
    writer.writerow(["name", "password"])
    writer.writerows(passwords.items())
    return out.getvalue()


def sessions_ending(sessions: dict[str, str], credentials: dict[str, str | None], hashes: dict[str, str],
                    given_new: set[str]) -> list[str]:
    """The users of the logged-in `sessions` ({token: user}) an import giving `given_new` new passwords would end:
    every session but the teacher's and those that stood on a roster password the import leaves as it is
    (`credentials`: {token: what the login stood on}, `hashes`: the roster's stored hashes now). One name a
    session, sorted."""
    ending = []
    for token, user in sessions.items():
        name = user_name(user)
        if name.lower() == TEACHER:
            continue
        kept = name not in given_new and credentials.get(token) is not None and \
            credentials.get(token) == hashes.get(name)
        if not kept:
            ending.append(name)
    return sorted(ending)
