"""Code → HTML: Pygments highlighting, one <div> per line, so that lines can carry marks and their source line.

Every function here is pure (text in, HTML out) and escapes everything it is given: the generated CUDA is full of
`<`, `>` and `&`, and a user's source may hold anything.
"""
from __future__ import annotations

import difflib
import html
import re
from typing import Iterable

from pygments import lex
from pygments.formatters import HtmlFormatter
from pygments.lexer import RegexLexer, bygroups
from pygments.lexers import CudaLexer, CppLexer, DiffLexer, PtxLexer, PythonLexer, TextLexer
from pygments.token import Comment, Keyword, Name, Number, Punctuation, STANDARD_TYPES, Text, Token, Whitespace

STYLE = "github-dark"  # the code panes are dark whatever the page's theme, as in most code viewers


class SassLexer(RegexLexer):
    """NVIDIA SASS as nvdisasm prints it (Pygments has none): the address comment, an optional predicate, the
    opcode with its modifiers, then registers, constants and labels."""
    name = "SASS"
    tokens = {
        "root": [
            (r"\s+", Whitespace),
            (r"/\*[0-9a-f]+\*/", Comment.Special),  # the instruction's address
            (r"//.*?$", Comment.Single),
            (r"(@!?U?P[0-9T])(\s+)", bygroups(Keyword.Pseudo, Whitespace)),  # predicate guard
            (r"[A-Z][A-Z0-9_]*(\.[A-Za-z0-9_]+)*", Keyword, "operands"),
            (r"\.[A-Za-z_][\w.]*", Name.Builtin),  # directives (.section, .align, ...)
            (r"[^\s]+", Text),
        ],
        "operands": [
            (r"\n", Whitespace, "#pop"),
            (r";", Punctuation, "#pop"),
            (r"[ \t]+", Whitespace),
            (r"!?U?(R[0-9]+|RZ|P[0-9T]|PT|UR[0-9]+|URZ|UP[0-9T]|SR_[A-Z_.0-9]+|B[0-9]+)\b", Name.Variable),
            (r"-?0x[0-9a-fA-F]+|-?[0-9]+(\.[0-9]+)?(e[-+]?[0-9]+)?", Number),
            (r"`\(\.[\w]+\)|\.L_[\w]+", Name.Label),
            (r"[\w.]+", Name),
            (r"[\[\](),|~+\-`]", Punctuation),
            (r".", Text),
        ],
    }


LEXERS = {"cuda": CudaLexer, "cpp": CppLexer, "ptx": PtxLexer, "python": PythonLexer, "diff": DiffLexer,
          "sass": SassLexer, "text": TextLexer}
MAX_LINES = 20_000  # past this, a pane shows the head and says so: a browser chokes on megabytes of spans


def _css_class(ttype) -> str:
    while ttype not in STANDARD_TYPES:
        ttype = ttype.parent
    return STANDARD_TYPES[ttype]


def token_lines(text: str, language: str = "cuda") -> list[str]:
    """The text as highlighted HTML, one string per line (tokens spanning lines are split at the newlines)."""
    lexer = LEXERS.get(language, TextLexer)(stripnl=False, ensurenl=False, tabsize=4)
    lines: list[str] = [""]
    for ttype, value in lex(text, lexer):
        cls = _css_class(ttype) if ttype is not Token.Text else ""
        for i, part in enumerate(value.split("\n")):
            if i:
                lines.append("")
            if part:
                esc = html.escape(part, quote=False)
                lines[-1] += f'<span class="{cls}">{esc}</span>' if cls else esc
    if text.endswith("\n") and lines and lines[-1] == "":
        lines.pop()
    return lines


# A CUDA file's opening lines that are only the preprocessor's (TileLang's #include and #define preamble)
PREAMBLE_LINE = re.compile(r"\s*(#.*|//.*|/\*.*|\*.*|)$")


def preamble_lines(text: str) -> int:
    """How many opening lines of generated CUDA come before its first `__global__` and are all preprocessor lines,
    comments or blank (TileLang's #include/#define preamble): what a pane folds, so it opens at the kernel. 0 where
    there is no such preamble (or it is too short to be worth a fold)."""
    lines = text.splitlines()
    first = next((i for i, line in enumerate(lines) if "__global__" in line), None)
    if first is None or first < 3 or not all(PREAMBLE_LINE.match(line) for line in lines[:first]):
        return 0
    return first


def code_html(text: str, language: str = "cuda", *, line_map: list | None = None,
              marked: Iterable[int] = (), error_lines: Iterable[int] = (), first_line: int = 1,
              source_lines: list[str] | None = None, elem_class: str = "", empty: str = "nothing yet",
              origins: list | None = None, origin_lines: dict | None = None, fold_preamble: bool = False) -> str:
    """A highlighted listing with line numbers.

    line_map:     for listing line i+1, the user source line it came from (or None); each line then carries
                  data-src and a tooltip quoting that source line (from `source_lines`, the user file's lines).
    marked:       source lines whose listing lines are marked (through line_map), e.g. the chosen one.
    error_lines:  source lines whose listing lines are marked as an error's.
    origins:      for a listing line made by a kernel module the file imports rather than the file itself,
                  "module.py:N" (compile's line_origins); the line then carries a tooltip quoting that line
                  (`origin_lines`) and the class pg-has-origin.
    fold_preamble: generated CUDA's #include/#define preamble (preamble_lines) folded under one line that opens
                  it, so the pane opens at the first `__global__`; its lines keep their numbers.
    """
    if not text:
        return f'<div class="pg-code pg-empty {elem_class}">{html.escape(empty)}</div>'
    rows = token_lines(text, language)
    cut = len(rows) - MAX_LINES
    rows = rows[:MAX_LINES]
    marked, error_lines = set(marked), set(error_lines)
    fold = preamble_lines(text) if fold_preamble else 0
    out = [f'<div class="pg-code {elem_class}"><pre>']
    for i, body in enumerate(rows):
        if fold and i == 0:
            out.append(f'<details class="pg-fold"><summary class="pg-line pg-fold-head"><span class="pg-no">'
                       f'1–{fold}</span><span class="pg-tx">#include and #define preamble: {fold} lines '
                       f'(show)</span></summary>')
        if fold and i == fold:
            out.append("</details>")
        number = i + first_line
        src = line_map[i] if line_map and i < len(line_map) else None
        src = src if isinstance(src, int) and not isinstance(src, bool) else None  # (a line number, nothing else)
        classes = ["pg-line"]
        attrs = ""
        if src is not None:
            classes.append("pg-has-src")
            if src in marked:
                classes.append("pg-mark")
            if src in error_lines:
                classes.append("pg-error")
            quote = ""
            if source_lines and 0 < src <= len(source_lines):
                quote = ": " + source_lines[src - 1].strip()
            attrs = f' data-src="{src}" title="{html.escape(f"from source line {src}{quote}")}"'
        elif origins and i < len(origins) and origins[i]:
            where = origins[i]
            module, _, module_line = where.rpartition(":")
            quote = (origin_lines or {}).get(where)
            classes.append("pg-has-origin")
            if where in marked:
                classes.append("pg-mark")
            attrs = (f' data-origin="{html.escape(module)}"'
                     f' title="{html.escape(f"from {module} line {module_line}" + (f": {quote}" if quote else ""))}"')
        out.append(f'<div class="{" ".join(classes)}"{attrs}><span class="pg-no">{number}</span>'
                   f'<span class="pg-tx">{body or " "}</span></div>')
    if fold and fold >= len(rows):
        out.append("</details>")
    if cut > 0:
        out.append(f'<div class="pg-line pg-cut"><span class="pg-no"></span><span class="pg-tx">… {cut} more '
                   f'lines: download the file to see them all</span></div>')
    out.append("</pre></div>")
    return "".join(out)


def snippet_html(source: str, line: int, context: int = 3) -> str:
    """The lines around `line` of a Python source, highlighted, with `line` marked as the error's."""
    lines = source.splitlines()
    if not line or line < 1 or line > len(lines):
        return ""
    lo, hi = max(1, line - context), min(len(lines), line + context)
    chunk = "\n".join(lines[lo - 1:hi])
    marks = [line if lo + i == line else None for i in range(hi - lo + 1)]
    return code_html(chunk, "python", line_map=marks, error_lines=[line], first_line=lo, elem_class="pg-snippet")


def _short(text: str, most: int = 70) -> str:
    return text if len(text) <= most else text[:most - 3] + "…"


def source_line_choices(source: str, line_map: list | None, origins: list | None = None,
                        origin_lines: dict | None = None) -> list[tuple[str, int | str]]:
    """(label, line) for every source line that generated CUDA, in source order: "31: for k in T.Pipelined(...)";
    then the lines of kernel modules the file imports that did (compile's line_origins), each as "module.py:N"."""
    lines = source.splitlines()
    used = sorted({m for m in (line_map or []) if isinstance(m, int)})
    out: list[tuple[str, int | str]] = []
    for n in used:
        text = lines[n - 1].strip() if 0 < n <= len(lines) else ""
        out.append((f"{n}: {_short(text)}", n))
    elsewhere = {o for o in (origins or []) if isinstance(o, str) and ":" in o}
    for o in sorted(elsewhere, key=lambda o: (o.rpartition(":")[0], int(o.rpartition(":")[2] or 0))):
        out.append((f"{o}: {_short((origin_lines or {}).get(o, ''), 60)}", o))
    return out


def cuda_lines_for(line_map: list | None, source_line: int | None) -> list[int]:
    """The CUDA line numbers (1-based) that came from `source_line`."""
    if not line_map or source_line is None:
        return []
    return [i + 1 for i, m in enumerate(line_map) if m == source_line]


def diff_html(a: str, b: str, name_a: str, name_b: str, context: int = 3, language: str = "cuda") -> str:
    """A unified diff of two texts: the code highlighted as `language`, added lines on green, removed on red."""
    if a == b:
        return (f'<div class="pg-code pg-empty">{html.escape(name_a)} and {html.escape(name_b)} generated the same '
                f'CUDA</div>')
    diff = list(difflib.unified_diff(a.splitlines(), b.splitlines(), name_a, name_b, n=context, lineterm=""))
    out = ['<div class="pg-code pg-diff"><pre>']
    for i, line in enumerate(diff[:MAX_LINES]):
        if line.startswith(("---", "+++")) and i < 2:
            cls, body = "pg-dhdr", html.escape(line, quote=False)
        elif line.startswith("@@"):
            cls, body = "pg-dhunk", html.escape(line, quote=False)
        else:
            sign, rest = line[:1], line[1:]
            cls = {"+": "pg-dadd", "-": "pg-ddel"}.get(sign, "pg-dctx")
            body = html.escape(sign or " ", quote=False) + "".join(token_lines(rest, language)[:1])
        out.append(f'<div class="pg-line {cls}"><span class="pg-tx">{body or " "}</span></div>')
    out.append("</pre></div>")
    return "".join(out)


def style_css(scope: str = ".pg-code") -> str:
    """Pygments' colours for the token classes, scoped to the code panes."""
    return HtmlFormatter(style=STYLE).get_style_defs(scope)
