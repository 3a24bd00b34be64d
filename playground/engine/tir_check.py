"""What a submitted kernel's TIR may hold: the kernel, and nothing that reaches the compilers or the host.

A submission reaches the grader as TIR serialized to JSON by the student's own process, so every part of it is the
student's input to a trusted process. The grader reads it as data and keeps only what a kernel is:

- **No settings of its own.** A PrimFunc's attributes can carry TileLang's compile flags and pass configs
  (`tilelang_compile_flags`, `tilelang_pass_configs`), which TileLang hands to nvcc and to its passes: a flag such
  as `-Xcompiler`, `-include` or `-o` lets the submission write what the grader runs or answers. A submission
  with any attribute but its name is refused; the grader compiles every submission with its own settings. Launch
  annotations that inject source (`T.Kernel(prelude=...)` → `pragma_import_c`, `T.CUDASourceCodeKernel` →
  `code_block_source`) or settings are refused wherever they sit.
- **Names, not text.** Every string in the TIR (buffer and variable names, annotation keys, extern function names,
  storage scopes, the source file's name) is generated into C++ and CUDA source; a name holding a quote, a brace,
  a `#` or a newline would write code of its own there. Strings may hold letters, digits and `_ . : / -` only.
- **Nothing on the host.** Code outside the kernel's thread-bound loops runs on the CPU of the grading process. An
  extern call there (`system`) is refused; inside the kernel an extern call is a CUDA device function, which nvcc
  resolves for the device only. The host part is found by cutting the kernel's loops out of the body and looking
  at what is left, so a call node that the TIR shares between the kernel and the host side (TIR is a graph, and
  its JSON keeps the sharing) is seen on the host side. Packed calls and LLVM intrinsics are refused anywhere.
- **Only TIR.** The JSON's node types are TIR's, the IR's and plain containers'; any other (a function, a module)
  is refused before TVM reads it.
"""
from __future__ import annotations

import json
import re

from .errors import StageError

TIR_LIMIT = 4 * 1024 * 1024  # bytes of TIR JSON per kernel: the shipped GEMM's is ~100 KB
NAME = re.compile(r"[A-Za-z0-9_.:/\-]{0,200}")
NODE_TYPES = re.compile(r"(tirx?|ir)\.[A-Za-z]+|relax\.(expr\.ShapeExpr|[A-Za-z]+StructInfo)|"
                        r"ffi\.(Array|Map|String|Shape)|None|bool|int|float")
# Calls out of the kernel (op names without their namespace: "tir." or, in the TVM TileLang 0.1.15 ships, "tirx.").
PACKED_CALLS = ("call_packed", "call_cpacked", "tvm_call_packed", "tvm_call_cpacked", "call_llvm_intrin",
                "call_llvm_pure_intrin", "tvm_call_packed_lowered", "tvm_call_cpacked_lowered",
                "tvm_call_trace_packed", "call_spirv_pure_glsl450")
EXTERN_CALLS = ("call_extern", "call_pure_extern")
# Keys that put source text or compiler settings into the build, on a launch block, a loop or an attribute.
INJECTING_KEYS = re.compile(r"pragma_import|code_block|compile_flags|pass_config|prelude|source", re.I)
FUNCTION_ATTRIBUTES = ("global_symbol", "tilelang_pass_configs")
# The pass configs a kernel may set for itself (`T.annotate_pass_configs`), on or off: switches of TileLang's own
# code generation, with no text and no path (fast math is how the shipped softmax and attention compute exp2).
# Any other (device compile flags, dumps to files, verbose logs) is refused.
SWITCHES = ("tl.enable_fast_math", "tl.disable_warp_specialized", "tl.disable_tma_lower", "tl.disable_wgmma",
            "tl.enable_async_copy", "tl.disable_shuffle_elect", "tl.disable_loop_unswitching",
            "tl.enable_aggressive_shared_memory_merge", "tl.disable_shared_memory_reuse")


def tir_module():
    """TVM's TIR module: `tvm.tirx` in the TVM TileLang 0.1.15 ships, `tvm.tir` before."""
    import tilelang  # noqa: F401  (TileLang puts its TVM on the path)
    import tvm
    return getattr(tvm, "tirx", None) or tvm.tir


def refuse(why: str) -> StageError:
    return StageError("definition", f"{why}; a submission must be TileLang code only: the grader compiles it with "
                                    "its own settings")


def check_json(text: str) -> None:
    """The JSON, read as data before TVM sees it: its size, its node types and every string in it."""
    if not isinstance(text, str) or len(text.encode(errors="replace")) > TIR_LIMIT:
        raise StageError("definition", f"a kernel's TIR must be text of at most {TIR_LIMIT // 2**20} MiB")
    try:
        graph = json.loads(text)
        nodes = graph["nodes"]
        assert isinstance(nodes, list)
    except Exception:
        raise StageError("definition", "the kernel's TIR could not be read") from None
    for node in nodes:
        kind = node.get("type") if isinstance(node, dict) else None
        if not isinstance(kind, str) or not NODE_TYPES.fullmatch(kind):
            raise refuse(f"the kernel's TIR holds a {str(kind)[:40]!r}, which is not TIR")
    for value in _strings(nodes):
        if not NAME.fullmatch(value):
            raise refuse(f"the kernel holds the text {value[:40]!r}: names in a kernel may hold letters, digits "
                         "and _ . : / - only")


def _strings(value):
    """Every string value in the JSON (keys are the format's own field names)."""
    if isinstance(value, str):
        yield value
    elif isinstance(value, list):
        for v in value:
            yield from _strings(v)
    elif isinstance(value, dict):
        for v in value.values():
            yield from _strings(v)


def _calls(node, tir, tvm) -> list[str]:
    """The op names of the calls in `node` (a statement or an expression)."""
    found = []

    def visit(n):
        if isinstance(n, tir.Call) and isinstance(n.op, tvm.ir.Op):
            found.append(n.op.name.split(".", 1)[-1])
    tir.stmt_functor.post_order_visit(node, visit)
    return found


def _values(obj):
    """The PrimExprs and statements inside an annotation's value (maps and arrays opened)."""
    import tvm
    from collections.abc import Mapping, Sequence
    tir = tir_module()
    if isinstance(obj, (tvm.ir.PrimExpr, tir.Stmt)):
        yield obj
    elif isinstance(obj, Sequence) and not isinstance(obj, str):
        for v in obj:
            yield from _values(v)
    elif isinstance(obj, Mapping):
        for k, v in obj.items():
            yield from _values(k)
            yield from _values(v)


def check_func(func) -> None:
    """The PrimFunc read back: its attributes, what its host part calls, its annotations and buffers."""
    import tvm
    tir = tir_module()
    attrs = dict(func.attrs) if func.attrs is not None else {}
    extra = sorted(k for k in attrs if k not in FUNCTION_ATTRIBUTES)
    if extra:
        raise refuse(f"the kernel carries settings of its own ({', '.join(extra)})")
    configs = dict(attrs.get("tilelang_pass_configs") or {})
    odd = sorted(str(k) for k, v in configs.items() if str(k) not in SWITCHES or not isinstance(v, (bool, int))
                 or int(v) not in (0, 1))
    if odd:
        raise refuse(f"the kernel sets pass configs the grader does not take ({', '.join(odd)}); it takes "
                     f"{', '.join(SWITCHES)}, on or off")

    # The host part: the body with every thread-bound loop's body cut out (its extent, computed on the host to
    # launch the kernel, stays). Built as a new tree, so a node shared with the kernel still appears here.
    def cut(node):
        if isinstance(node, tir.For) and node.kind == tir.ForKind.THREAD_BINDING:
            return tir.For(node.loop_var, node.min, node.extent, node.kind, tir.Evaluate(0), node.thread_binding)
        return None
    host = tir.stmt_functor.ir_transform(func.body, cut, None)
    everywhere = _calls(func.body, tir, tvm)
    packed = sorted({c for c in everywhere if c in PACKED_CALLS})
    if packed:
        raise refuse(f"the kernel calls out of itself ({', '.join(packed)})")
    on_host = sorted({c for c in _calls(host, tir, tvm) if c in EXTERN_CALLS})
    if on_host:
        raise refuse(f"the kernel calls out of itself on the host ({', '.join(on_host)})")

    # Annotations (of launch blocks, loops, attribute statements) are read by passes and code generators, some on
    # the host (the launch's thread counts): no key that injects, and no call at all in their values.
    keys, calls = [], []

    def visit(n):
        annotated = []
        if isinstance(n, tir.AttrStmt):
            keys.append(str(n.attr_key))
            annotated.append(n.value)
        for field in ("annotations",):
            table = getattr(n, field, None) if isinstance(n, (tir.For, _sblock(tir))) else None
            if table is not None:
                keys.extend(str(k) for k in table.keys())
                annotated.append(table)
        for value in annotated:
            for part in _values(value):
                calls.extend(_calls(part, tir, tvm))
    tir.stmt_functor.post_order_visit(func.body, visit)
    bad = sorted({k for k in keys if INJECTING_KEYS.search(k)})
    if bad:
        raise refuse(f"the kernel carries source or settings for the compiler ({', '.join(bad)})")
    if any(c in EXTERN_CALLS or c in PACKED_CALLS for c in calls):
        raise refuse("the kernel calls out of itself in an annotation")
    # The buffers' shapes, strides and offsets are computed on the host to check the arguments.
    for buffer in func.buffer_map.values():
        for expr in [*buffer.shape, *buffer.strides, buffer.elem_offset]:
            if expr is not None and _calls(expr, tir, tvm):
                raise refuse(f"buffer {buffer.name}'s shape calls a function")


def _sblock(tir):
    return getattr(tir, "SBlock", None) or tir.Block


def load_tir(text: str):
    """A PrimFunc from TIR JSON (data: nothing runs), refused unless it is a kernel and nothing else (above); its
    name set by the grader."""
    tir = tir_module()
    import tvm
    check_json(text)
    try:
        func = tvm.ir.load_json(text)
    except Exception as exc:
        raise StageError("definition", f"the kernel's TIR could not be read: {type(exc).__name__}") from None
    if not isinstance(func, tir.PrimFunc):
        raise StageError("definition", f"the kernel is a {type(func).__name__}, not a PrimFunc")
    check_func(func)
    return func.with_attr("global_symbol", "main")
