"""`python kernels/<name>.py`: check the kernel against its reference and time it, as TileLang's examples do."""
from __future__ import annotations

import sys

from .cli import print_human
from .engine.actions import execute


def main(name: str) -> None:
    import torch
    action = "run" if torch.cuda.is_available() else "compile"
    if action == "compile":
        print("no CUDA GPU here: compiling only (for sm_90a)", file=sys.stderr)
    result = execute(action, name, progress=lambda what, frac, *_: print(f"[{frac:4.0%}] {what}", file=sys.stderr))
    print_human(result)
    sys.exit(0 if result.get("ok") else 1)
