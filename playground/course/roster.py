"""The roster: the class list the teacher pastes (one name a line, or a CSV with a column of names), the passwords an
import makes, and which logged-in sessions an import would end (the teacher is told before it does)."""
from __future__ import annotations

import csv
import io
import secrets

from .access import NAME_LIMIT, TEACHER, spreadsheet_safe, user_name


# A first row naming one of these columns is a header, the names read from that column (a CSV of a school's
# systems: Canvas's roster and gradebook exports name it "Student", Moodle's give "First name" and "Surname").
NAME_HEADERS = ("name", "student", "student name", "full name", "display name", "sortable name")
FIRST_HEADERS, LAST_HEADERS = ("first name", "given name"), ("surname", "last name", "family name")
# A first row with one of these but no column above is a header too: the import is refused, not given to a student
# named "Email".
OTHER_HEADERS = ("id", "email", "e-mail", "section", "sis user id", "sis login id", "login", "login id", "username",
                 "user name", "student id", "group")
NOT_A_STUDENT = ("points possible",)  # the row under a Canvas gradebook export's header


def read(roster_csv: str) -> tuple[list[str], str | None, str]:
    """The names of a pasted roster, each once, or why there are none, and where they were read from (for the
    preview: "the column 'Student'", "the first column")."""
    text = str(roster_csv or "").lstrip("\ufeff")  # (a byte-order mark, as a spreadsheet's CSV may begin)
    rows = [r for r in csv.reader(io.StringIO(text)) if any(c.strip() for c in r)]
    head = [" ".join(c.split()).lower() for c in rows[0]] if rows else []
    named = [i for i, c in enumerate(head) if c in NAME_HEADERS]
    first = [i for i, c in enumerate(head) if c in FIRST_HEADERS]
    last = [i for i, c in enumerate(head) if c in LAST_HEADERS]
    if named or first and last:
        cols = named[:1] or [first[0], last[0]]  # (a name is its columns' cells, joined by a space)
        where = " and ".join(repr(rows[0][i].strip()) for i in cols)
        where, rows = f"the column{'s' if len(cols) > 1 else ''} {where}", rows[1:]
    elif any(c in OTHER_HEADERS for c in head):
        return [], ("the first row looks like a header (" + ", ".join(c.strip() for c in rows[0][:6]) + ") but names "
                    "no column of names: call that column 'name'"), ""
    else:
        cols, where = [0], "the first column"
    names = []
    for r in rows:
        name = user_name(" ".join(r[i] for i in cols if i < len(r)))
        if not name or name.lower() in NOT_A_STUDENT:
            continue
        if name.lower() == TEACHER:
            return [], "'teacher' is the teacher's user name; rename that student", where
        if len(name) > NAME_LIMIT or not name.isprintable():  # (a login refuses both: a name no one could use)
            return [], (f"{name[:40]!r} cannot log in: a name is at most {NAME_LIMIT} printable characters "
                        "(no zero-width or control characters)"), where
        if name not in names:
            names.append(name)
    if not names:
        return [], "the roster has no names: one name a line, or a CSV with a 'name' column", where
    return names, None, where


def names_in(roster_csv: str) -> tuple[list[str], str | None]:
    """The names of a pasted roster (read()), each once, or why there are none."""
    names, why, _ = read(roster_csv)
    return names, why


def new_passwords(names: list[str]) -> dict[str, str]:
    return {n: secrets.token_urlsafe(8) for n in names}


def passwords_csv(passwords: dict[str, str]) -> str:
    out = io.StringIO()
    writer = csv.writer(out)
    writer.writerow(["name", "password"])
    writer.writerows((spreadsheet_safe(name), password) for name, password in passwords.items())  # (a name
    # "=WEBSERVICE(...)" from a school's export would run as a formula where the teacher opens the passwords)
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
