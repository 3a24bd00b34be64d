"""TileLang's layout-inference failures on fragments, said in the user's terms at the loop that caused them.

A fragment (`T.alloc_fragment`) lives in registers, its elements spread over the block's threads by a layout that
TileLang infers: each element of a `T.Parallel` loop is computed by one thread, which can only combine elements it
holds itself. Two mistakes students make break that, and TileLang reports them from deep inside the pass, at the
fragment's allocation at best:

- one fragment indexed two ways in one loop (`A[i, j] = A[j, i]`, a transpose in registers):
  `Check failed: (StructuralEqual()(it->second.indices, indices)) is false: A_frag: (j, i) and (i, j)`
- two fragments whose layouts were fixed elsewhere (by two `T.gemm`s, say) combined element by element in a way
  that puts the two elements in different threads:
  `Layout infer conflict between D_frag and C_frag in T.Parallel loop`

`explain` names the buffers, says why, says what to do instead, and points at the loop's line (the first line that
uses both, or the fragment both ways); TileLang's own words stay at the end of the message.
"""
from __future__ import annotations

import ast
import re

from .errors import StageError

TWO_INDEXINGS = re.compile(r"StructuralEqual\(\)\(it->second\.indices, indices\)\) is false: (\w+): \(([^()]*)\) "
                           r"and \(([^()]*)\)")
TWO_LAYOUTS = re.compile(r"Layout infer conflict between (\w+) and (\w+) in T\.Parallel loop")


def _squash(text: str) -> str:
    return re.sub(r"\s+", "", text)


def _parallel_lines(source: str) -> list[tuple[int, str]]:
    """(line number, text) of every line of a `for ... in T.Parallel(...)` loop, its own line and its body's, in
    order; read with `ast` as compile.py reads the T.copy calls (a file that does not parse has none)."""
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return []
    numbers = set()
    for node in ast.walk(tree):
        call = node.iter if isinstance(node, ast.For) else None
        if isinstance(call, ast.Call) and isinstance(call.func, ast.Attribute) and call.func.attr == "Parallel" \
                and isinstance(call.func.value, ast.Name) and call.func.value.id == "T":
            numbers.update(range(node.lineno, node.end_lineno + 1))
    lines = source.splitlines()
    return [(n, lines[n - 1]) for n in sorted(numbers)]


def _line_using(source: str, *choices: tuple[str, ...]) -> int | None:
    """The first line inside a T.Parallel loop holding every text of the first choice that any line holds (spaces
    ignored): the most telling choice first, the barest last."""
    inside = [(n, _squash(text)) for n, text in _parallel_lines(source)]
    for wanted in choices:
        for n, text in inside:
            if all(_squash(w) in text for w in wanted):
                return n
    return None


def explain(err: StageError, source: str) -> StageError:
    """`err` (a tilelang-stage error) said plainly where it is one of the two fragment mistakes; else as it was."""
    said = f"{err.message}\n{err.log or ''}"
    m = TWO_INDEXINGS.search(said)
    if m:
        name, first, second = m.group(1), m.group(2), m.group(3)
        a, b = f"{name}[{first}]", f"{name}[{second}]"
        err.message = (f"{name} is used as {a} and as {b} in one T.Parallel loop: a fragment's elements are spread "
                       f"over the threads by one layout, and each element of the loop is computed by one thread, "
                       f"so the loop must index the fragment the same way everywhere. To rearrange it (a "
                       f"transpose), copy it into shared memory (T.alloc_shared, T.copy) and read it from there. "
                       f"(TileLang: {name}: ({first}) and ({second}))")
        err.line = _line_using(source, (a, b), (b,), (a,), (f"{name}[",)) or err.line
        return err
    m = TWO_LAYOUTS.search(said)
    if m:
        x, y = m.group(1), m.group(2)
        err.message = (f"{x} and {y} are fragments laid out over the threads in two different ways (each layout "
                       f"fixed where the fragment was made, by a T.gemm or a T.copy), and this T.Parallel loop "
                       f"combines them element by element: an element of {x} and the element of {y} it meets are "
                       f"held by different threads. Index both the same way, or copy one into shared memory "
                       f"(T.alloc_shared, T.copy) and read it from there. (TileLang: {m.group(0)})")
        err.line = _line_using(source, (f"{x}[", f"{y}["), (f"{x}[",)) or err.line
        return err
    return err
