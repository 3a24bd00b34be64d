"""The lowering, pass by pass: the TileLang/TVM IR after each pass that changed it.

TileLang lowers a `T.prim_func` through a pipeline of TVM passes (layout inference, tile-op lowering, software
pipelining, warp specialization, TMA and mbarrier lowering, host/device split, ...). We do not re-run or re-list that
pipeline ourselves: TileLang's own pass instrumentation (`tilelang.instrumentation`, the hook its `lower_trace` tool
uses) calls us after every pass, and we keep the module's text whenever it changed. Passes that changed nothing are
folded into the next pass that did (`folded`), so a student reads the dozen steps that matter out of about eighty.

No GPU is needed: this stops at the generated IR and never calls nvcc.
"""
from __future__ import annotations

import contextlib
import sys
import time

from .compile import make_prim_func, resolve_arch, tilelang_error
from .errors import StageError
from .kernel import Config, Kernel

MAX_IR_CHARS = 400_000  # one pass's text; a flash-attention module is about 60 k characters


def _recorder():
    """A TileLang pass-instrumentation tool that records (pass name, IR text) after each top-level pass."""
    from tilelang.instrumentation import PassEventObserver, PassInstrumentationTool, StackedPassInstrument

    class Observer(PassEventObserver):
        def __init__(self, passes: list):
            self.passes = passes

        def pass_finished(self, mod, event, state) -> None:
            self.passes.append({"name": event.name, "phase": event.phase, "ir": str(mod)})

    class Recorder(PassInstrumentationTool):
        def __init__(self):
            self.passes: list[dict] = []

        def create_pass_instrument(self):
            # Nested passes (a Sequential's members) are reported by their parent's after-callback too; only the
            # top level is kept so that each change appears once.
            return StackedPassInstrument(Observer(self.passes), capture_nested=False)

    return Recorder()


def fold_unchanged(first_ir: str, passes: list[dict]) -> tuple[list[dict], list[str]]:
    """The passes that changed the IR, each with the names of the no-op passes run since the previous change; and
    the no-op passes after the last change."""
    out, folded, previous = [], [], first_ir
    for p in passes:
        if p["ir"] == previous:
            folded.append(p["name"])
            continue
        ir = p["ir"]
        clipped = len(ir) > MAX_IR_CHARS
        out.append({"name": p["name"], "phase": p.get("phase"), "folded": folded,
                    "ir": ir[:MAX_IR_CHARS] + ("\n# … clipped" if clipped else "")})
        folded, previous = [], ir
    return out, folded


def lower_passes(kernel: Kernel, config: Config, arch: str | None = None) -> dict:
    """{"ok", "kernel", "arch", "passes": [{"name", "phase", "folded", "ir"}, ...], "unchanged_at_end",
    "pass_count", "seconds"}.

    The first entry is the program as written ("TileLang program"); each next one is the IR after a pass that
    changed it."""
    import tvm
    from tilelang.engine.lower import create_backend_context, lower_with_context
    from tilelang.instrumentation import compile_pass_instrumentation, create_pass_instruments

    arch = resolve_arch(arch)
    prim_func = make_prim_func(kernel, config)
    recorder = _recorder()
    start = time.perf_counter()
    target = tvm.target.Target({"kind": "cuda", "arch": arch})
    try:
        with contextlib.redirect_stdout(sys.stderr), \
                compile_pass_instrumentation(name=f"playground-ir-{kernel.name}", tools=[recorder],
                                             include_default_tools=False, reuse_existing=False):
            # The same PassContext TileLang's JIT opens (opt level 3, our line directives), with our recorder as
            # its instrument; the target context is what the tile-op lowering asks for.
            instruments = create_pass_instruments(context=f"playground-ir, kernel={kernel.name}")
            with tvm.transform.PassContext(opt_level=3, config={"tl.emit_line_directives": True},
                                           instruments=instruments), target:
                lower_with_context(prim_func, create_backend_context(target, None, "auto"))
    except StageError:
        raise
    except Exception as exc:
        raise tilelang_error(exc, str(kernel.path)) from None
    first = str(prim_func)
    changed, unchanged_at_end = fold_unchanged(first, recorder.passes)
    passes = [{"name": "TileLang program", "phase": None, "folded": [], "ir": first[:MAX_IR_CHARS]}, *changed]
    return {"ok": True, "kernel": kernel.name, "config": config.to_json(), "arch": arch,
            "source_file": str(kernel.path), "passes": passes, "unchanged_at_end": unchanged_at_end,
            "pass_count": len(recorder.passes), "seconds": round(time.perf_counter() - start, 3), "error": None}
