"""Errors a user can cause, each tagged with the stage it came from and the user's line.

Every step of the engine (load, compile, verify, time) raises `StageError` for a problem in the user's kernel,
so that the command line, the page and the job runner all show the same thing: a short message first, the full log
behind it, and the line in the user's file to jump to.
"""
from __future__ import annotations

import re
import traceback
from dataclasses import asdict, dataclass
from typing import TypedDict

# The stages, in the order a job meets them.
STAGES = (
    "python",      # the file does not import: syntax error, exception at top level
    "definition",  # the file imports but lacks what the playground needs (factory, reference, ...)
    "parameters",  # a parameter value is not one the kernel accepts
    "tilelang",    # building or lowering the kernel failed inside TileLang
    "nvcc",        # the generated CUDA did not compile
    "resources",   # it compiled but no GPU of the target can launch it (shared memory, threads per block)
    "timeout",     # a step ran past its time limit
    "device",      # no GPU, or the GPU failed while running the kernel
    "verify",      # the kernel ran but its output is wrong
    "busy",        # the server is full: the queue or the rate limit turned the job away
    "stopped",     # the user stopped the job (the page's Stop) while it ran or waited
    "internal",    # a bug in the playground itself
)
# A class's actions (course/: shares, submissions, the teacher's tools) answer in the same shape, with two more.
CLASS_STAGES = (
    "permission",  # the user may not do this (not the teacher, not logged in, another student's work)
    "deadline",    # the exercise's deadline has passed
)

LOG_LIMIT = 20_000  # characters of log kept: enough to read, small enough to ship to a browser


class ErrorJSON(TypedDict):
    """An error as every answer carries it (answers.py; the README's "An error is ..."): one shape everywhere."""
    stage: str          # one of STAGES (or, for a class's action, CLASS_STAGES)
    message: str        # the short message, shown first
    line: int | None    # the line of the user's file to jump to
    log: str            # the full log behind the message ("" when there is none)


@dataclass
class StageError(Exception):
    stage: str
    message: str
    line: int | None = None
    log: str = ""

    def __post_init__(self):
        assert self.stage in STAGES + CLASS_STAGES, self.stage
        super().__init__(self.message)

    def __str__(self) -> str:
        where = f" (line {self.line})" if self.line else ""
        return f"[{self.stage}]{where} {self.message}"

    def to_json(self) -> ErrorJSON:
        return asdict(self)  # type: ignore[return-value]  (its fields are ErrorJSON's keys, in that order)


def clip(text: str, limit: int = LOG_LIMIT) -> str:
    """Keep the head and the tail of a long log: the cause is usually at one end."""
    if len(text) <= limit:
        return text
    half = limit // 2
    return f"{text[:half]}\n... [{len(text) - limit} characters cut] ...\n{text[-half:]}"


def user_line_from_traceback(exc: BaseException, user_file: str) -> int | None:
    """The innermost line of the user's file in the exception's traceback (or its SyntaxError position)."""
    if isinstance(exc, SyntaxError) and exc.filename == user_file:
        return exc.lineno
    line = None
    seen = set()
    while exc is not None and id(exc) not in seen:
        seen.add(id(exc))
        for frame in traceback.extract_tb(exc.__traceback__):
            if frame.filename == user_file:
                line = frame.lineno
        if line is not None:
            return line
        exc = exc.__cause__ or exc.__context__
    return None


def user_line_from_text(text: str, user_file: str) -> int | None:
    """TileLang's parser and nvcc (through #line directives) name the user's file and line in their messages; nvcc
    names it as "at line N of FILE" where a template of TileLang's own fails for the user's call of it."""
    name = re.escape(user_file)
    for pattern in (rf'{name}"?, line (\d+)', rf"{name}\((\d+)\)", rf"{name}:(\d+)", rf"at line (\d+) of {name}\b"):
        m = re.search(pattern, text)
        if m:
            return int(m.group(1))
    return None


def quoted(value, limit: int = 64) -> str:
    """A value someone sent, quoted for a message and cut to `limit` characters: a name of 100,000 characters
    echoed back is a flood, not a message."""
    return repr(str(value)[:limit])


def first_line(text: str, limit: int = 300) -> str:
    for line in text.strip().splitlines():
        if line.strip():
            return line.strip()[:limit]
    return ""


def format_exception(exc: BaseException) -> str:
    return "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))
