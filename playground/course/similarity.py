"""Which submissions of one exercise look alike, in a way that survives renaming and reformatting: each source is
read as Python tokens (the standard library's tokenize), names and literals made anonymous, comments and layout
dropped; then MOSS's method (Schleimer, Wilkerson, Aiken: "Winnowing: local algorithms for document fingerprinting",
SIGMOD 2003): hashes of every k tokens in a row, of which each window of w keeps its smallest, are a source's
fingerprints, and two sources are as alike as the fingerprints they share. The exercise's starter is the base every
student began from: its fingerprints count for nobody (MOSS's base file). Pairs of students are ranked by their most
alike pair of submissions; difflib shows the two side by side.

Nothing here runs a submission: tokenize reads text.
"""
from __future__ import annotations

import difflib
import hashlib
import html
import io
import itertools
import keyword
import re
import tokenize

K = 6          # tokens per k-gram: shorter matches are noise (`x = y + 1` is five)
WINDOW = 4     # k-grams per window: any run of WINDOW + K - 1 equal tokens is surely found
TOKENS = 50000  # tokens read of one source (a source is at most 256 KiB)
KEEP = 50      # pairs answered
PER_STUDENT = 20  # a student's newest submissions compared

_SKIP = {tokenize.COMMENT, tokenize.NL, tokenize.INDENT, tokenize.DEDENT, tokenize.ENCODING, tokenize.ENDMARKER}
_WORD = re.compile(r"[A-Za-z_]\w*|\d[\w.]*|'[^'\n]*'|\"[^\"\n]*\"|\S")


def tokens(source: str) -> list[str]:
    """The source's tokens with what renaming and reformatting change taken out: a name is "V" (keywords stay, and
    attributes after a dot, which name an API: T.alloc_shared), a number "N", a string "S" (docstrings too);
    comments, line breaks, semicolons and indentation are dropped. Text tokenize cannot read is split on its own."""
    out: list[str] = []
    try:
        previous = None
        for tok in tokenize.generate_tokens(io.StringIO(source).readline):
            kind = tok.type
            if kind in _SKIP or kind == getattr(tokenize, "FSTRING_MIDDLE", -1) \
                    or kind == getattr(tokenize, "FSTRING_END", -1):
                continue
            if kind == tokenize.NAME:
                out.append(tok.string if keyword.iskeyword(tok.string) or previous == "." else "V")
            elif kind == tokenize.NUMBER:
                out.append("N")
            elif kind == tokenize.STRING or kind == getattr(tokenize, "FSTRING_START", -1):
                out.append("S")
            elif kind == tokenize.NEWLINE or tok.string == ";":
                pass  # (statements on one line or several are the same code)
            else:
                out.append(tok.string)
            previous = tok.string
            if len(out) >= TOKENS:
                break
    except (tokenize.TokenError, SyntaxError, IndentationError):
        out = []
        for word in _WORD.findall(source)[:TOKENS]:
            out.append(word if keyword.iskeyword(word) or not (word[0].isalnum() or word[0] in "_'\"") else
                       "N" if word[0].isdigit() else "S" if word[0] in "'\"" else "V")
    return out


def _hash(gram: tuple[str, ...]) -> int:
    return int.from_bytes(hashlib.blake2b(" ".join(gram).encode(), digest_size=8).digest(), "big")


def fingerprints(source: str, k: int = K, window: int = WINDOW) -> set[int]:
    """The winnowed fingerprints of a source: of each `window` consecutive k-gram hashes, the smallest (the
    rightmost where several are)."""
    toks = tokens(source)
    hashes = [_hash(tuple(toks[i:i + k])) for i in range(len(toks) - k + 1)]
    if len(hashes) <= window:
        return set(hashes)
    picked, last = set(), -1
    for start in range(len(hashes) - window + 1):
        chunk = hashes[start:start + window]
        low = min(chunk)
        at = start + max(i for i, h in enumerate(chunk) if h == low)
        if at != last:
            picked.add(hashes[at])
            last = at
    return picked


def pairs(submissions: list[dict], base: str = "", keep: int = KEEP) -> list[dict]:
    """Pairs of students' submissions (each {"id", "student", "source", ...}) ranked by similarity, most alike
    first: per pair of students, their most alike pair of submissions. `similarity` is the share of the two
    sources' fingerprints (less the base's) they share (Jaccard's index), `contained` the larger share of either
    one's fingerprints found in the other (one copied into a longer file). Only pairs sharing a fingerprint."""
    base_prints = fingerprints(base) if base else set()
    newest: dict[str, list[dict]] = {}
    for s in sorted(submissions, key=lambda s: -s["id"]):
        if len(newest.setdefault(s["student"], [])) < PER_STUDENT:
            newest[s["student"]].append(s)
    prints = {s["id"]: fingerprints(s["source"]) - base_prints for subs in newest.values() for s in subs}
    owner = {s["id"]: s for subs in newest.values() for s in subs}
    index: dict[int, list[int]] = {}
    for sid, fp in prints.items():
        for h in fp:
            index.setdefault(h, []).append(sid)
    shared: dict[tuple[int, int], int] = {}
    for ids in index.values():
        if len(ids) > 200:  # a fingerprint most submissions have is boilerplate, not evidence
            continue
        for a, b in itertools.combinations(sorted(ids), 2):
            if owner[a]["student"] != owner[b]["student"]:
                shared[(a, b)] = shared.get((a, b), 0) + 1
    best: dict[tuple[str, str], dict] = {}
    for (a, b), n in shared.items():
        fa, fb = prints[a], prints[b]
        jaccard = n / len(fa | fb)
        contained = max(n / len(fa), n / len(fb))
        pair = tuple(sorted((owner[a]["student"], owner[b]["student"])))
        if pair not in best or (jaccard, contained) > (best[pair]["similarity"], best[pair]["contained"]):
            first, second = (owner[a], owner[b]) if owner[a]["student"] == pair[0] else (owner[b], owner[a])
            best[pair] = {"a": first["id"], "b": second["id"], "student_a": first["student"],
                          "student_b": second["student"], "similarity": jaccard, "contained": contained,
                          "shared": n}
    ranked = sorted(best.values(), key=lambda p: (-p["similarity"], -p["contained"], p["a"], p["b"]))
    for rank, p in enumerate(ranked[:keep], 1):
        p["rank"] = rank
    return ranked[:keep]


def side_by_side(a: str, b: str, title_a: str, title_b: str) -> str:
    """Both sources as one HTML table, side by side, their differing lines marked. difflib.HtmlDiff escapes the
    sources' lines (a source's `<script>` is shown, not run) but not the titles: those are escaped here."""
    return difflib.HtmlDiff(tabsize=4, wrapcolumn=90).make_table(
        a.splitlines(), b.splitlines(), html.escape(title_a), html.escape(title_b), context=False)
