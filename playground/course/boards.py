"""The boards: per exercise, each student's best accepted submission (the store ranks them: the share of the speed
of light first, which is fair between GPUs, then the time), shown under the name the student chose to show, with the
GPU it ran on and its measurement record; and the rules of those chosen names."""
from __future__ import annotations

import unicodedata

from .access import TEACHER, user_name
from .exercises import Exercise, label

ALIAS_LIMIT = 24
WHO = ("all", "students", "agents")  # what a board may be filtered to


def check_alias(alias, student: str, others: set[str],
                shown: set[str] = frozenset()) -> tuple[str | None, str | None]:
    """(the name to show, None) or (None, why not). A name is 2 to 24 printable characters (letters, digits, spaces
    and - _ . ' only), not 'teacher', not another student's own name (`others`: the names the class knows) nor a
    name another student shows on the boards (`shown`), each compared in NFKC form without case (the database's
    uniqueness folds ASCII case only: "Ｔop Coder", a full-width Ｔ, passed beside "Top Coder"), and starts with a
    letter or a digit (so no spreadsheet reads it as a formula). "" takes the chosen name away."""
    text = user_name(alias)
    if not text:
        return "", None
    if len(text) < 2 or len(text) > ALIAS_LIMIT:
        return None, f"a name on the boards is 2 to {ALIAS_LIMIT} characters"
    if not all(c.isalnum() or c in " -_.'" for c in text) or not text.isprintable():
        return None, "a name on the boards is letters, digits, spaces and - _ . ' only"
    if not text[0].isalnum():
        return None, "a name on the boards starts with a letter or a digit"
    if len(scripts(text)) > 1:  # "Grace Hopp\u0435r", Cyrillic е for e: a classmate's name to the eye
        return None, "a name on the boards is written in one alphabet (not Latin letters mixed with Cyrillic or Greek)"
    def folded(name: str) -> str:
        return unicodedata.normalize("NFKC", name).casefold()
    fold = folded(text)
    if fold == TEACHER or fold in {folded(o) for o in others if o != student}:
        return None, "that is someone else's name: choose one of your own"
    if fold in {folded(o) for o in shown}:
        return None, f"another student shows {text} already: choose another name"
    return text, None


# Names of letters written together in one language's names: Japanese mixes kanji (CJK, and IDEOGRAPHIC marks such
# as 々) with kana, half-width kana included; Korean, hangul with hanja.
_SCRIPT_OF = {"HIRAGANA": "CJK", "KATAKANA": "CJK", "HANGUL": "CJK", "CJK": "CJK", "KATAKANA-HIRAGANA": "CJK",
              "IDEOGRAPHIC": "CJK", "HALFWIDTH": "CJK"}


def scripts(text: str) -> set[str]:
    """The alphabets of the letters of `text`, by the first word of each letter's Unicode name (LATIN, CYRILLIC,
    GREEK, ...; the East Asian ones as one): a name of more than one can pass for another name (Unicode TR39's
    mixed-script look-alikes). Modifier letters (the Hawaiian ʻokina, 々) belong to no alphabet, and the text is
    read in NFKC form (µ, the micro sign, is the Greek μ). A name in one alphabet that looks like a Latin one
    ("Сосо" in Cyrillic beside "Coco") is not caught here."""
    found = set()
    for c in unicodedata.normalize("NFKC", text):
        if c.isalpha() and unicodedata.category(c) != "Lm":
            first = unicodedata.name(c, "UNKNOWN").split(" ")[0]
            found.add(_SCRIPT_OF.get(first, first))
    return found


def board(ex: Exercise, rows: list[dict], teacher: bool = False, who: str = "all") -> dict:
    """The board's answer: rows as the store ranked them, each `student` the name shown (the chosen one where there
    is one; the teacher sees both), `kind` "student" for a student's own entry and "agent" for their agents' (with
    `agent`, the name of the token its best came with), `target met` against the exercise's time target. `who`
    keeps "students" or "agents" only, ranked among themselves."""
    out = []
    if who != "all":
        rows = [r for r in rows if bool(r.get("agent")) == (who == "agents")]
    for rank, r in enumerate(rows, 1):
        shown = r["alias"] or r["student"]
        if teacher and r["alias"]:
            shown = f"{r['alias']} ({r['student']})"
        row = {k: v for k, v in r.items() if k not in ("alias", "student")}
        row["rank"] = rank
        row["student"] = shown
        row["kind"] = "agent" if r.get("agent") else "student"
        row["agent"] = r.get("agent")
        row["met_target"] = ex.target_ms is not None and r["median_ms"] <= ex.target_ms
        if teacher:
            row["rerun"] = f"?rerun={r['submission']}"
        out.append(row)
    return {"ok": True, "exercise": ex.name, "timed_at": label(ex.timed), "target_ms": ex.target_ms, "who": who,
            "rows": out}
