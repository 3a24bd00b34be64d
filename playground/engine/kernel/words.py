"""The words every part of the kernel model shares: where the kernels live, a resolved configuration (`Config`),
how a kernel file's functions are called (`call_with`), and how a problem is named to a person (`problem_label`).
The bottom of the package: it imports nothing of the playground.
"""
from __future__ import annotations

import inspect
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

ROOT = Path(__file__).resolve().parents[3]
KERNELS_DIR = ROOT / "kernels"
# The catalogue's kernels, in the order a student meets them, are the CATALOGUE list of this file. It is read as
# data (loader.builtin_names): the kernels are the tutorial's, a folder the engine loads files from, never a
# package it imports.
CATALOGUE_FILE = KERNELS_DIR / "__init__.py"


# -- calling a kernel file's functions ----------------------------------------------------------------------------
def call_with(fn: Callable, *args, **params):
    """Call `fn` with the positional `args` and those of `params` it names (all of them if it takes **kwargs)."""
    sig = inspect.signature(fn)
    if not any(p.kind is p.VAR_KEYWORD for p in sig.parameters.values()):
        params = {k: v for k, v in params.items() if k in sig.parameters}
    return fn(*args, **params)


# -- a resolved configuration ---------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Config:
    """One fully resolved choice of everything a compile depends on, besides the source text and the target."""
    problem: dict[str, Any]
    dtype: str
    tile: dict[str, Any]
    # Where the tile came from (config_choice.py): `choice` is the engine's source for what the request left out
    # ("preset", "table", "rule" or "default"; "file" for a kernel of one's own whose code gives values), `tuned_for`
    # what a preset or table config was tuned for ("4096×32768 on NVIDIA H200"), `set_by_user` the names the request
    # set. Not part of what a compile depends on: two Configs
    # with the same tile are equal whoever picked it.
    choice: str = field(default="default", compare=False)
    tuned_for: str | None = field(default=None, compare=False)
    set_by_user: tuple[str, ...] = field(default=(), compare=False)
    # What was read into the request's values ("causal='no' taken as false"): said in the answer
    notes: tuple[str, ...] = field(default=(), compare=False)

    @property
    def picked_by(self) -> str:
        """"user" when the request set a tile parameter (a value the user sets always wins), else the engine's."""
        return "user" if self.set_by_user else self.choice

    def why(self) -> str:
        """One line for the page: "block_M set by you; the rest tuned for 4096×32768 on NVIDIA H200"."""
        rest = {"preset": f"tuned for {self.tuned_for}", "table": f"tuned for {self.tuned_for}",
                "rule": "by the rule in the kernel's file (pick_config)",
                "default": "the kernel's defaults",
                "file": "from the file (the values its own code gives)"}.get(self.choice, self.choice)
        if not self.set_by_user:
            return rest
        if self.choice == "user":  # every tile parameter set by the request
            return "set by you"
        return f"{', '.join(self.set_by_user)} set by you; the rest {rest}"

    def factory_kwargs(self) -> dict[str, Any]:
        return {**self.problem, "dtype": self.dtype, **self.tile}

    def to_json(self) -> dict:
        return {"problem": dict(self.problem), "dtype": self.dtype, "tile": dict(self.tile),
                "picked_by": self.picked_by, "tuned_for": self.tuned_for, "set_by_user": list(self.set_by_user),
                "why": self.why(), **({"notes": list(self.notes)} if self.notes else {})}


# -- a problem, named --------------------------------------------------------------------------------------------
def problem_label(problem: dict) -> str:
    """"4096×4096×4096", "8×32×4096×128 causal": the sizes before the first switch in the file's order, then the
    switches that are on; a number after a switch is a variant's count (flash_attention's group_size), written with
    its name, and not at all when it is 1, the plain case ("8×32×4096×128 causal group_size=4")."""
    words, numbers, after_switch = [], [], False
    for name, v in problem.items():
        if isinstance(v, int) and not isinstance(v, bool):
            if not after_switch:
                numbers.append(str(v))
            elif v != 1:
                words.append(f"{name}={v}")
        else:
            after_switch = True
            if v is True or isinstance(v, str):
                words.append(name if v is True else v)
    return " ".join(["×".join(numbers)] + words)
