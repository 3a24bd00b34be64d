"""Compile a kernel for a target: generated CUDA, host code, PTX, SASS, ptxas figures and a CUDA → source line map.

Compiling needs no GPU: TileLang lowers on the CPU and nvcc runs there when the target arch is given explicitly.
"""
from __future__ import annotations

import base64
import contextlib
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Protocol

from . import compile_cache as cache, fragment_errors, limits
from .errors import StageError, clip, first_line, format_exception, user_line_from_text, user_line_from_traceback
from .kernel import KERNELS_DIR, Config, Kernel, concrete
from ..settings import environment_now

ARCHES = ("sm_90a", "sm_90", "sm_80", "sm_86", "sm_89", "sm_100a", "sm_120")
DEFAULT_ARCH = "sm_90a"  # Hopper: the H100/H200 a class server most likely has; wgmma needs the "a" variant


def tilelang_version() -> str:
    import tilelang
    return tilelang.__version__


def gpu_arch() -> str | None:
    """The arch of the GPU in this machine, or None without one (checked without creating a CUDA context)."""
    try:
        import torch
        if not torch.cuda.is_available():
            return None
        major, minor = torch.cuda.get_device_capability()
    except Exception:
        return None
    return f"sm_{major}{minor}" + ("a" if major in (9, 10) else "")


def resolve_arch(arch: str | None) -> str:
    arch = arch or gpu_arch() or DEFAULT_ARCH
    if not re.fullmatch(r"sm_\d+[af]?", arch):
        raise StageError("parameters", f"arch {arch!r} is not of the form sm_90a, sm_80, ...")
    return arch


# -- the line map ------------------------------------------------------------------------------------------------
LINE_DIRECTIVE = re.compile(r'^\s*#line\s+(\d+)\s+"([^"]*)"\s*$')


# TileLang's own files that expand one user operation; their directives are attributed back to that operation.
# (a word in the library file's name, the calls in the user's source that such a file expands)
GEMM_CALL = re.compile(r"\bT\.\w*gemm\w*\(")  # T.gemm, T.wgmma_gemm, T.gemm_sp, ...
COPY_CALL = re.compile(r"\bT\.(\w+_)?copy\(")  # T.copy, T.tma_copy, ...
LIBRARY_OPERATIONS = (("gemm", GEMM_CALL), ("mma", GEMM_CALL), ("copy", COPY_CALL), ("tma", COPY_CALL),
                      ("reduce", re.compile(r"\bT\.reduce")), ("atomic", re.compile(r"\bT\.atomic")))


def split_line_directives(cuda: str, user_file: str, source: str = "") -> tuple[str, list[int | None]]:
    """Drop TileLang's `#line` directives from the CUDA text and return, for each remaining line, the line of the
    user's file it came from (None for boilerplate).

    TileLang's directives are coarse: the body of an expanded `T.gemm` is attributed to TileLang's own macro files.
    Such a block is given to the next line of the user's `source`, after the current one, that calls the operation
    the macro file implements (`wgmma_macro_generator.py` → the next `T.gemm(`), so a student who picks the
    `T.gemm` line sees the wgmma instructions it became."""
    cuda, line_map, _, _ = split_line_directives_with_origins(cuda, user_file, source)
    return cuda, line_map


def split_line_directives_with_origins(cuda: str, user_file: str, source: str = "",
                                       sibling_dirs: tuple[Path, ...] = ()) -> tuple[str, list, list, dict]:
    """As split_line_directives, and for each CUDA line also where it came from when that is a kernel module beside
    the user's file rather than the file itself ("flash_attention_hopper.py:169", else None): a kernel file that
    keeps a schedule in a helper module (kernels/flash_attention.py's Hopper schedules) has that code's lines there.
    `sibling_dirs`: the folders whose .py files count (the user file's own folder always does). Last, the files
    those names stand for ({"flash_attention_hopper.py": its path}), for origin_quotes; a server's paths are not
    in the names."""
    user_lines = source.splitlines()
    user = os.path.realpath(user_file)
    folders = {os.path.realpath(d) for d in (Path(user_file).parent, *sibling_dirs)}
    out: list[str] = []
    line_map: list[int | None] = []
    origins: list[str | None] = []
    files: dict[str, str] = {}
    current: int | None = None
    origin: str | None = None
    last_user: int | None = None  # the last line a directive named in the user's file
    in_module: tuple[str, int] | None = None  # the kernel module and line the last directive of a kernel file named,
    module_lines: dict[str, list[str]] = {}  # if not the user's file; that module's lines
    for text in cuda.splitlines():
        m = LINE_DIRECTIVE.match(text)
        if m:
            named = os.path.realpath(m.group(2))
            origin = None
            if named == user:
                current = last_user = int(m.group(1))
                in_module = None
            elif named.endswith(".py") and os.path.dirname(named) in folders:  # a kernel module beside the user's
                current, in_module = None, None
                name = os.path.basename(named)
                if files.setdefault(name, named) == named:  # a second file of that name stays unnamed
                    origin = f"{name}:{int(m.group(1))}"
                    in_module = (name, int(m.group(1)))
            elif in_module is not None:  # a library macro expanded for an operation of that module: that module's
                name, after = in_module  # next line calling such an operation (as for the user's file below)
                if name not in module_lines:
                    try:
                        module_lines[name] = Path(files[name]).read_text().splitlines()
                    except OSError:
                        module_lines[name] = []
                current = None
                origin = f"{name}:{_operation_line(Path(m.group(2)).stem, module_lines[name], after) or after}"
            else:
                current = _operation_line(Path(m.group(2)).stem, user_lines, last_user)
            continue
        out.append(text)
        blank = text.strip() in ("}", "{", "")
        line_map.append(None if blank else current)
        origins.append(None if blank else origin)
    return "\n".join(out) + "\n", line_map, origins, files


def nvcc_user_lines(cuda: str, user_file: str) -> list[int | None]:
    """For each CUDA line that is not a `#line` directive, the line of the user's file nvcc counts it as (a directive
    names the line after it; each line after that counts one more), None where the last directive named another
    file: what the PTX's `.loc` lines come from. Two layouts of one source that give one CUDA text pair up line by
    line, which says where each line a `.loc` may name went (a kept PTX moved to the edited source)."""
    user = os.path.realpath(user_file)
    out: list[int | None] = []
    line: int | None = None
    for text in cuda.splitlines():
        m = LINE_DIRECTIVE.match(text)
        if m:
            line = int(m.group(1)) if os.path.realpath(m.group(2)) == user else None
            continue
        out.append(line)
        line = None if line is None else line + 1
    return out


def kernel_module_dirs(user_file: str) -> tuple[Path, ...]:
    """Where the kernel modules a kernel file may import live: beside it, and the shipped kernels' folder."""
    return (Path(user_file).parent, KERNELS_DIR)


def origin_quotes(origins: list[str | None], files: dict[str, str]) -> dict[str, str]:
    """{"file.py:N": that line's text} for each origin named, read from the file the directive named (`files`)."""
    quotes: dict[str, str] = {}
    texts: dict[str, list[str]] = {}
    for o in dict.fromkeys(o for o in origins if o):
        name, _, number = o.rpartition(":")
        if name not in texts:
            try:
                texts[name] = Path(files[name]).read_text().splitlines()
            except (KeyError, OSError):
                texts[name] = []
        lines = texts[name]
        if 0 < int(number) <= len(lines):
            quotes[o] = lines[int(number) - 1].strip()[:200]
    return quotes


def _operation_line(library_file: str, user_lines: list[str], after: int | None) -> int | None:
    """The first line from `after` on (the last user line seen) that calls the operation `library_file` expands."""
    for key, call in LIBRARY_OPERATIONS:
        if key in library_file:
            for n in range(after or 1, len(user_lines) + 1):
                if call.search(user_lines[n - 1]) and not user_lines[n - 1].lstrip().startswith("#"):
                    return n
            return None
    return None


# -- ptxas figures ---------------------------------------------------------------------------------------------
def find_cuda_tool(name: str) -> str | None:
    """A CUDA binary (ptxas, nvdisasm, ncu, compute-sanitizer), the one finder of the compile and the profiler, so
    the profiler's SASS is made by the very ptxas the compile ran. First the toolkit TileLang's nvcc comes from;
    then the server's CUDA_HOME, CUDA_PATH and /usr/local/cuda (ncu and compute-sanitizer ship with a full toolkit,
    not with the nvcc wheel); then PATH; then a NVIDIA pip wheel (nvdisasm comes that way)."""
    from ..settings import current
    env = current().inherited_env
    folders = []
    try:
        from tilelang.env import CUDA_HOME
        folders.append(CUDA_HOME)
    except Exception:
        pass
    for folder in (*folders, env.get("CUDA_HOME"), env.get("CUDA_PATH"), "/usr/local/cuda"):
        if folder and (Path(folder) / "bin" / name).exists():
            return str(Path(folder) / "bin" / name)
    found = shutil.which(name)
    if found:
        return found
    try:
        import nvidia
        for root in nvidia.__path__:
            for candidate in sorted(Path(root).glob(f"cu*/bin/{name}")):
                return str(candidate)
    except ImportError:
        pass
    return None


def parse_ptxas(log: str, kernel_name: str | None = None) -> dict[str, int]:
    """Registers, static shared memory, spills and stack of the kernel entry in `ptxas -v` output."""
    entries: dict[str, dict[str, int]] = {}
    name = None
    for line in log.splitlines():
        m = re.search(r"(?:Compiling entry function|Function properties for) '?([\w$]+)'?", line)
        if m:
            name = m.group(1)
            entries.setdefault(name, {})
        if name is None:
            continue
        e = entries[name]
        for key, pattern in (("stack_bytes", r"(\d+) bytes stack frame"), ("spill_stores", r"(\d+) bytes spill stores"),
                             ("spill_loads", r"(\d+) bytes spill loads"), ("registers", r"Used (\d+) registers"),
                             ("static_shared_bytes", r"(\d+) bytes smem"), ("barriers", r"used (\d+) barriers")):
            m = re.search(pattern, line)
            if m:
                e[key] = int(m.group(1))
    if not entries:
        return {}
    chosen = entries.get(kernel_name) or next((v for v in entries.values() if "registers" in v), {})
    return chosen


def ptxas_resources(ptx_path: Path, arch: str) -> tuple[dict[str, int], str, str]:
    """ptxas's figures and log for the PTX, and the SASS it assembled (what the GPU runs; "" without nvdisasm)."""
    ptxas = find_cuda_tool("ptxas")
    if ptxas is None:
        return {}, "ptxas not found: register and spill figures unavailable", ""
    cubin = ptx_path.with_suffix(".sass.cubin")
    proc = subprocess.run([ptxas, f"-arch={arch}", "-v", str(ptx_path), "-o", str(cubin)],
                          capture_output=True, text=True, timeout=120)
    log = proc.stdout + proc.stderr
    return parse_ptxas(log), log, disassemble(cubin) if proc.returncode == 0 else ""


# The instruction mix of the SASS, in the classes a student looks for (by opcode, modifiers dropped).
SASS_CLASSES = {
    "tensor core": {"HGMMA", "HMMA", "IMMA", "QGMMA"},
    "MUFU (exp, rcp)": {"MUFU"},
    "FP32 math": {"FFMA", "FADD", "FMUL", "FMNMX", "FSETP"},
    "TMA and bulk copies": {"UTMALDG", "UTMASTG", "UTMAPF", "UTMAREDG", "UBLKCP"},
    "global memory": {"LDG", "STG", "RED", "ATOMG"},
    "shared memory": {"LDS", "STS", "LDSM", "STSM"},
    "local memory (spills)": {"LDL", "STL"},
    "barriers and waits": {"BAR", "SYNCS", "WARPGROUP", "MEMBAR", "UCGABAR_ARV", "UCGABAR_WAIT", "DEPBAR"},
}
_SASS_OPCODE = re.compile(r"/\*[0-9a-f]{4,}\*/\s+(?:@!?U?P[0-9T]\s+)?([A-Z][A-Z0-9_]*)")


def sass_mix(sass: str) -> dict[str, int]:
    """How many instructions the SASS has in all ("instructions") and in each of SASS_CLASSES (static counts: an
    instruction in a loop counts once)."""
    counts = {"instructions": 0, **{name: 0 for name in SASS_CLASSES}}
    for m in _SASS_OPCODE.finditer(sass):
        counts["instructions"] += 1
        for name, opcodes in SASS_CLASSES.items():
            if m.group(1) in opcodes:
                counts[name] += 1
    return counts if counts["instructions"] else {}


def disassemble(cubin: Path) -> str:
    """The SASS of a cubin: the instructions as scheduled by ptxas, the last compiler stage (where it places a
    wait, for one, shows only here)."""
    nvdisasm = find_cuda_tool("nvdisasm")
    if nvdisasm is None or not cubin.exists():
        return ""
    proc = subprocess.run([nvdisasm, "-c", str(cubin)], capture_output=True, text=True, timeout=120)
    return proc.stdout if proc.returncode == 0 else ""


# -- errors ---------------------------------------------------------------------------------------------------
def nvcc_error(text: str, user_file: str) -> StageError:
    """nvcc's RuntimeError carries the whole .cu first; keep what follows `Compilation error:`."""
    body = text.split("Compilation error:", 1)[-1]
    body = body.split("\nCommand:", 1)[0].strip()
    lines = body.splitlines()
    # nvcc prints each diagnostic as a header line, the offending code and a caret; warnings from TileLang's own
    # headers are many and rarely the cause, so the errors come first and the whole output after them.
    blocks, i = [], 0
    while i < len(lines):
        if re.search(r": (fatal )?error\b", lines[i]):
            j = i + 1
            while j < len(lines) and lines[j].strip() and not re.search(r"\(\d+\): (warning|error)", lines[j]):
                j += 1
            blocks.append("\n".join(lines[i:j]))
            i = j
        else:
            i += 1
    header = blocks[0].splitlines()[0] if blocks else first_line(body)
    message = re.sub(r"^\S+?\((\d+)\): ", "", header)  # the file name is a temporary path; the line is kept below
    log = ("\n\n".join(blocks) + "\n\n---- full nvcc output ----\n" + body) if blocks else body
    line = user_line_from_text(blocks[0] if blocks else body, user_file)
    return StageError("nvcc", message[:500], line, clip(log))


def tilelang_error(exc: BaseException, user_file: str) -> StageError:
    text = str(exc)
    if "Compilation error:" in text:
        return nvcc_error(text, user_file)
    if "timed out" in text and "NVCC" in text:
        return StageError("timeout", first_line(text), None, clip(text))
    # TVM errors put a C++ backtrace first and the message last; take the last line that names an error.
    lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
    named = [ln for ln in lines if re.match(r"^[\w.]*(Error|Exception)\b", ln)]
    message = named[-1] if named else (lines[-1] if lines and lines[0].startswith("Traceback") else first_line(text))
    if not re.match(r"^[\w.]*(Error|Exception)", message):
        message = f"{type(exc).__name__}: {message}"
    message = compact_target(message)
    helper = _helper_location(text, user_file)
    if helper is not None:  # in a file the kernel imports (kernels/gemm_hopper.py): named, at the user's import of it
        path, line_there, import_line = helper
        line_there = _line_of_named_op(message, path, line_there)
        return StageError("tilelang", f"{message[:440]} (in {Path(path).name}, line {line_there})", import_line,
                          clip(format_exception(exc)))
    line = user_line_from_text(text, user_file) or user_line_from_traceback(exc, user_file)
    return StageError("tilelang", message[:500], _line_of_named_op(message, user_file, line), clip(format_exception(exc)))


def _helper_location(text: str, user_file: str) -> tuple[str, int, int | None] | None:
    """TileLang's diagnostic points (`--> FILE:LINE:COL`) into a module the user's file imports, not into the file
    itself: that module's path and line, and the line of the user's file that imports it (None if no line names
    it). A line of the user's file chosen by the failing operation's or buffer's name would be another schedule's
    (gemm.py's own A_shared, not gemm_hopper.py's). The message names the module by its name only: its path is a
    server's folder."""
    m = re.search(r"-->\s*(\S+?\.py):(\d+)", text)
    if m is None or m.group(1) == user_file:
        return None
    module = Path(m.group(1)).stem
    try:
        lines = Path(user_file).read_text().splitlines()
    except OSError:
        lines = []
    importing = re.compile(rf"^\s*(from\s+[\w.]*\b{re.escape(module)}\b\s+import|import\s+[\w.]*\b{re.escape(module)}\b)")
    return m.group(1), int(m.group(2)), next((i for i, text in enumerate(lines, 1) if importing.match(text)), None)


def compact_target(message: str) -> str:
    """TVM writes a target as its whole JSON (host, keys, limits: a line of noise); the arch is what the user chose."""
    start = message.find("target={")
    if start < 0:
        return message
    depth = 0
    for end in range(start + len("target="), len(message)):
        depth += {"{": 1, "}": -1}.get(message[end], 0)
        if depth == 0:
            arch = re.search(r'"arch":\s*"(\w+)"', message[start:end + 1])
            return (message[:start] + "target=cuda" + (f" {arch.group(1)}" if arch else "")
                    + compact_target(message[end + 1:]))
    return message


def _line_of_named_op(message: str, user_file: str, line: int | None) -> int | None:
    """A lowering error that names the operation it failed on (`T.wgmma_gemm() requires ...`) can carry the span of
    an operand instead (the line allocating its first buffer); then point at the operation's first use instead."""
    m = re.search(r"\b(T\.\w+)\(\)", message)
    if not m:
        return line
    try:
        lines = Path(user_file).read_text().splitlines()
    except OSError:
        return line
    call = m.group(1) + "("
    if line is not None and 0 < line <= len(lines) and call in lines[line - 1]:
        return line
    return next((i for i, text in enumerate(lines, 1) if call in text and not text.lstrip().startswith("#")), line)


# TileLang errors worth a shorter message, a line and a hint
HOPPER_ONLY = re.compile(r"wgmma|\bTMA\b|tma_|mbarrier|cp\.async\.bulk|setmaxnreg|warpgroup|fence_proxy", re.I)
COPY_MISMATCH = re.compile(r"shape mismatch|s_extent == g_extent|extent.*mismatch", re.I)
IN_HELPER = re.compile(r"\(in [\w.-]+\.py, line \d+\)$")


def explain(err: StageError, kernel: Kernel, prim_func, arch: str) -> StageError:
    """A `tilelang` error made to say what failed, where: a T.copy between tiles of different shapes named with
    both shapes at its line (the copy's, not a buffer's allocation); TVM's shape check of a copy said as its two
    shapes; a fragment indexed two ways, or two fragments of different layouts, in one T.Parallel loop said at
    the loop (fragment_errors); another error naming a buffer pointed at that buffer's allocation; a Hopper-only
    schedule compiled for another GPU (found by TileLang, or by nvcc in TileLang's headers) told so."""
    if err.stage == "nvcc":
        return hopper_only(err, kernel, arch)
    if err.stage != "tilelang":
        return err
    if IN_HELPER.search(err.message):  # (tilelang_error): the lines and buffers below are the user's file's, not its
        return hopper_only(err, kernel, arch)
    err = copy_shapes_error(err, kernel)
    text = f"{err.message}\n{err.log}"
    if COPY_MISMATCH.search(err.message) and prim_func is not None:
        found = _mismatched_copy(kernel, prim_func)
        if found:
            message, line = found
            err.message, err.line = f"{message} ({err.message[:200]})", line or err.line
        else:  # (extents TileLang knows only as expressions): the copy of a buffer the message names, not its alloc
            named = set(re.findall(r"\w+", err.message))
            err.line = next((line for line, a, b in _copy_calls(kernel) if {a, b} & named), err.line)
    err = fragment_errors.explain(err, kernel.source)
    if err.line is None:
        err.line = _named_buffer_line(err.message, kernel.source)
    return hopper_only(err, kernel, arch)


def hopper_only(err: StageError, kernel: Kernel, arch: str) -> StageError:
    """Hopper's own instructions (TMA, wgmma, setmaxnreg) for another target: say which target has them."""
    if arch == "sm_90a" or not HOPPER_ONLY.search(f"{err.message}\n{err.log}"):
        return err
    if re.match(r"sm_[5-8]\d", arch):
        alternative = " or warp_specialized=False" if "warp_specialized" in getattr(kernel, "tile_names", []) else ""
        err.message = f"{err.message} — this schedule needs Hopper (sm_90a){alternative}; {arch} has no TMA or wgmma"
    elif arch == "sm_90":  # the same chip, without the features that are Hopper's alone (the "a" targets have them)
        err.message = (f"{err.message} — sm_90 leaves out Hopper's own instructions (wgmma, setmaxnreg), which this "
                       "kernel uses on Hopper: pick sm_90a")
    else:
        err.message = (f"{err.message} — this kernel uses Hopper's own instructions (wgmma, setmaxnreg), made for "
                       f"sm_90a; {arch} lacks some of them")
    return err


def _regions(call) -> list[tuple[str, list[int]]]:
    out = []
    for arg in call.args[:2]:
        try:
            load = arg.args[0]
            extents = [int(e) for e in arg.args[2:]]
            out.append((load.buffer.name, extents))
        except (AttributeError, IndexError, TypeError, ValueError):
            return []
    return out


def check_copies(kernel: Kernel, prim_func) -> None:
    """Before anything compiles: a T.copy between tiles whose shapes cannot match (128×32 into 128×128, global to
    global included) is an error at its line. TileLang compiles some of these without a word and copies a part."""
    found = _mismatched_copy(kernel, prim_func)
    if found:
        message, line = found
        raise StageError("tilelang", f"{message} (checked before compiling)", line)


def _mismatched_copy(kernel: Kernel, prim_func) -> tuple[str, int | None] | None:
    """The first T.copy whose source and destination tiles differ in shape (dimensions of 1 aside), as a message,
    and its line: the `T.copy(` of the kernel's function that names the same two buffers (else the n-th one, n its
    place among the copies)."""
    from tilelang import tvm
    copies: list = []

    def visit(node):
        if isinstance(node, tvm.tirx.Evaluate) and isinstance(node.value, tvm.tirx.Call) \
                and getattr(node.value.op, "name", "") == "tl.tileop.copy":
            copies.append(node.value)
    try:
        tvm.tirx.stmt_functor.post_order_visit(prim_func.body, visit)
    except Exception:
        return None
    for i, call in enumerate(copies):
        regions = _regions(call)
        if len(regions) != 2:
            continue
        (src, a), (dst, b) = regions
        if [e for e in a if e != 1] == [e for e in b if e != 1]:
            continue
        shape = "×".join(map(str, a)), "×".join(map(str, b))
        message = (f"T.copy from a {shape[0]} tile of {src} into a {shape[1]} tile of {dst}: the two tiles must "
                   "have the same shape")
        return message, _copy_line(kernel, src, dst) or _nth_call_line(kernel, "T.copy(", i)
    return None


def _copy_calls(kernel: Kernel) -> list[tuple[int, str | None, str | None]]:
    """Each `T.copy(src, dst)` in the kernel's function (else the file) as written: (line, the buffer each side
    names: `A` of `A[by * 64, k]`, `C_shared` of `C_shared[0:32, :]`)."""
    import ast

    def base(node) -> str | None:
        while isinstance(node, ast.Subscript):
            node = node.value
        return node.id if isinstance(node, ast.Name) else None
    try:
        tree = ast.parse(kernel.source)
    except SyntaxError:
        return []
    scope = next((n for n in tree.body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))
                  and n.name == kernel.name), tree)
    out = []
    for node in ast.walk(scope):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "copy" \
                and isinstance(node.func.value, ast.Name) and node.func.value.id == "T" and len(node.args) >= 2:
            out.append((node.lineno, base(node.args[0]), base(node.args[1])))
    return sorted(out)


def _copy_line(kernel: Kernel, src: str, dst: str) -> int | None:
    """The line of the T.copy from buffer `src` into `dst` (the TIR names a buffer as the source's variable does)."""
    return next((line for line, a, b in _copy_calls(kernel) if (a, b) == (src, dst)), None)


# TVM's check that T.copy's two regions have one shape, as it fails: "StructuralEqual check failed, caused by lhs
# at <root>[1].value:\n(128, 128)\nand rhs at <root>[1].value:\n(128, 64)"
STRUCTURAL_SHAPES = re.compile(r"caused by lhs at [^\n]*:\s*\n\s*([(\[][^\n]*[)\]])\s*\n\s*and rhs at [^\n]*:\s*\n"
                               r"\s*([(\[][^\n]*[)\]])")


def copy_shapes_error(err: StageError, kernel: Kernel) -> StageError:
    """TVM's "StructuralEqual check failed" of a T.copy between regions of two shapes, said as the copy and the two
    shapes, at the copy's line."""
    text = f"{err.message}\n{err.log}"
    shapes = STRUCTURAL_SHAPES.search(text)
    if not shapes or "StructuralEqual" not in text or "copy" not in text:
        return err
    a, b = ("×".join(re.findall(r"-?\w+", s)) for s in shapes.groups())
    names = next(((x, y) for line, x, y in _copy_calls(kernel) if line == err.line), (None, None))
    src, dst = (f" {n}" if n else "" for n in names)
    err.message = f"T.copy from{src} ({a}) into{dst} ({b}): the source and the destination must have the same shape"
    return err


def _nth_call_line(kernel: Kernel, call: str, n: int) -> int | None:
    lines = kernel.source.splitlines()
    entry = getattr(kernel, "entry", None)
    start = entry.line if entry is not None and entry.line else 1
    hits = [i for i in range(start, len(lines) + 1)
            if call in lines[i - 1] and not lines[i - 1].lstrip().startswith("#")]
    return hits[n] if n < len(hits) else None


def _named_buffer_line(message: str, source: str) -> int | None:
    """The allocation line of the first buffer the message names (`A_shared = T.alloc_shared(...)`)."""
    allocated: dict[str, int] = {}
    for n, text in enumerate(source.splitlines(), 1):
        m = re.match(r"\s*(\w+)\s*=\s*T\.alloc_\w+\(", text)
        if m:
            allocated.setdefault(m.group(1), n)
    for word in re.findall(r"\w+", message):
        if word in allocated:
            return allocated[word]
    return None


# -- the compile step -------------------------------------------------------------------------------------------
@dataclass
class Built:
    """A compiled kernel: the TileLang JITKernel (runnable where a GPU is) and its JSON description."""
    jit: Any
    result: dict


def make_prim_func(kernel: Kernel, config: Config):
    """The kernel's prim_func at `config`, ready for tilelang.compile: the decorator's pass_configs attached, and
    every buffer a parameter of the compiled kernel (a `T.empty` output's out_idx is taken off, so that the engine
    passes poisoned outputs in and checks what was written)."""
    try:
        with contextlib.redirect_stdout(sys.stderr):
            func = kernel.prim_func(config)
    except StageError as exc:
        exc.line = exc.line or user_line_from_traceback(exc, str(kernel.path))
        raise
    except Exception as exc:  # (TileLang's builder checks a T.copy's two shapes here: said as the copy's shapes)
        raise copy_shapes_error(tilelang_error(exc, str(kernel.path)), kernel) from None
    except (SystemExit, KeyboardInterrupt) as exc:  # the user's code ending itself: its error, at its line
        raise StageError("python", f"the kernel's code raised {type(exc).__name__}({exc})",
                         user_line_from_traceback(exc, str(kernel.path)), clip(format_exception(exc))) from None
    attrs = func.attrs or {}
    if "tilelang_out_idx" in attrs:  # kept under our own name: which buffers are outputs (kernel/inferred.py)
        func = func.without_attr("tilelang_out_idx").with_attr("playground_out_idx", attrs["tilelang_out_idx"])
    if kernel.pass_configs:
        func = func.with_attr("tilelang_pass_configs", {**kernel.pass_configs,
                                                        **dict(attrs.get("tilelang_pass_configs") or {})})
    if kernel.compile_flags:  # @tilelang.jit(compile_flags=[...]): nvcc's flags, as TileLang would pass them
        func = func.with_attr("tilelang_compile_flags", kernel.compile_flags
                              + [str(f) for f in attrs.get("tilelang_compile_flags") or []])
    return func


def launch_info(jit, sizes: dict | None = None) -> dict[str, Any]:
    """Grid, block and dynamic shared memory from the lowered device module. A dynamic shape's (T.symbolic) extent
    is its value at `sizes` (the problem's), else its expression as text: the kernel launches for any value."""
    info: dict[str, Any] = {}
    device_mod = getattr(getattr(jit, "artifact", None), "device_mod", None)
    if device_mod is None:
        return info
    for _, func in device_mod.functions.items():
        attrs = func.attrs or {}
        if "thread_extent" not in attrs:
            continue
        ext = {str(k): e if (e := concrete(v, sizes)) is not None else str(v)
               for k, v in attrs["thread_extent"].items()}
        info["grid"] = [ext.get(f"blockIdx.{a}", 1) for a in "xyz"]
        info["block"] = [ext.get(f"threadIdx.{a}", 1) for a in "xyz"]
        info["dynamic_shared_bytes"] = int(attrs.get("dyn_shared_memory_buf", 0) or 0)
        break
    return info


def block_threads(launch: dict) -> int | None:
    """Threads a block, from `launch_info`; None where the block's size is a symbolic expression."""
    block = launch.get("block")
    if not block or not all(isinstance(b, int) for b in block):
        return None
    return block[0] * block[1] * block[2]


class ServerCache(Protocol):
    """The compile cache the server keeps, as a compile sees it: asked for an answer kept for this very TIR before
    lowering, it hears the generated CUDA the moment lowering ends and may hand back nvcc's output kept for that very
    CUDA text. A job's worker passes each on to the server (jobs/worker.py), which keeps answers keyed by the TIR
    (jobs/result_cache.tir_key) and nvcc's outputs keyed by the CUDA (compile_cache.nvcc_key), and answers only from
    entries it trusts (playground/jobs/README.md, the threat model)."""

    def lowered_before(self, tir: dict) -> dict | None:
        """`tir`: tir_identity's {"digest", "spans"} of the kernel about to be lowered. Returns {"answer", "spans"}:
        an ok answer kept for the same TIR and the spans of the TIR it came from; or None: lowering runs."""

    def lowered(self, partial: dict) -> dict | None:
        """`partial`: the CUDA (no `#line` directives), its line map and origins, the user's line of each CUDA
        line as nvcc counts it ("user_lines"), the arch and what nvcc would be handed ("nvcc": {"format", "arch",
        "options"}). Returns nvcc's output kept for that CUDA (compile_cache.NVCC_FIELDS), or None: nvcc runs."""

    def compiled(self, made: dict) -> None:
        """nvcc ran: {"cubin_b64"} (the PTX, SASS and ptxas's log are in the answer)."""


def _stable_options(options) -> list[str]:
    """nvcc's options as TileLang passes them, the job's own temporary folder (-keep-dir) left out: what nvcc's
    output depends on."""
    items = [options] if isinstance(options, str) else [str(o) for o in options or []]
    out, skip = [], False
    for item in items:
        if skip:
            out.append("KEEP_DIR")
            skip = False
            continue
        out.append(item)
        skip = item == "-keep-dir"
    return out


class _Nvcc:
    """TileLang's one call of nvcc in a compile, watched: the moment it comes (lowering has ended) the CUDA goes out
    as a partial answer, and nvcc runs unless the CUDA's output is handed back (`outputs.lowered`)."""

    def __init__(self, kernel: Kernel, arch: str, progress, outputs: ServerCache | None):
        self.kernel, self.arch, self.progress, self.outputs = kernel, arch, progress, outputs
        self.partial: dict | None = None
        self.known: dict | None = None
        self.cubin: bytes | None = None

    def compile_cuda(self, original, code, target_format="ptx", arch=None, options=None, *args, **kwargs):
        if self.partial is not None or (self.progress is None and self.outputs is None):
            return original(code, target_format, arch, options, *args, **kwargs)
        user_file = str(self.kernel.path)
        cuda, line_map, origins, files = split_line_directives_with_origins(
            code, user_file, self.kernel.source, kernel_module_dirs(user_file))
        self.partial = {"cuda": cuda, "line_map": line_map, "user_lines": nvcc_user_lines(code, user_file),
                        "line_origins": origins if any(origins) else None,
                        "origin_lines": origin_quotes(origins, files) if any(origins) else None, "arch": self.arch,
                        "nvcc": {"format": target_format, "arch": arch, "options": _stable_options(options)}}
        known = self.outputs.lowered(self.partial) if self.outputs is not None else None
        # (kept for this very CUDA text, so its lines pair up with this one's: a list of another length is not it)
        if cache.nvcc_output_ok(known) and len(known["user_lines"]) == len(self.partial["user_lines"]):
            try:
                cubin = base64.b64decode(known["cubin_b64"], validate=True)
            except ValueError:
                cubin = b""
            if cubin:
                self.known = known
                if self.progress:
                    self.progress("nvcc: skipped, this CUDA was compiled before (only the line map is new)", 0.8)
                return bytearray(cubin)
        if self.progress:
            self.progress("nvcc: compiling the generated CUDA", 0.5)
        out = original(code, target_format, arch, options, *args, **kwargs)
        self.cubin = bytes(out)
        return out

    @contextlib.contextmanager
    def hooked(self):
        """TileLang calls nvcc through its contrib module's compile_cuda, looked up at call time."""
        from tilelang.contrib import nvcc
        original = nvcc.compile_cuda

        def compile_cuda(*args, **kwargs):
            return self.compile_cuda(original, *args, **kwargs)
        nvcc.compile_cuda = compile_cuda
        try:
            yield self
        finally:
            nvcc.compile_cuda = original


def build(kernel: Kernel, config: Config, arch: str | None = None, use_tilelang_cache: bool = False,
          progress: Callable[[str, float], None] | None = None, server_cache: ServerCache | None = None) -> Built:
    """Compile `kernel` at `config` for `arch`. Without TileLang's cache (the default) every artifact is fresh:
    PTX, ptxas figures and the launch shape come from this compile, not from a stored library. `progress` hears
    the stages: lowering, nvcc, ptxas. `server_cache` may hand back an answer kept for the same TIR: then nothing
    is lowered or compiled (Built.jit is None) and only the lines are moved to this source; it hears the CUDA when
    lowering ends (a partial answer) and may hand back nvcc's output kept for that CUDA: then nvcc, ptxas and
    nvdisasm do not run, and only the line map (and the PTX's line information) is made anew."""
    import tilelang
    arch = resolve_arch(arch)
    user_file = str(kernel.path)
    if progress:
        progress("lowering: TileLang builds and lowers the kernel", 0.1)
    prim_func = make_prim_func(kernel, config)
    check_copies(kernel, prim_func)
    limits.before_lowering(prim_func, arch, user_file, kernel.source)
    start = time.perf_counter()
    if server_cache is not None:
        kept = _lowered_before(kernel, config, prim_func, arch, server_cache)
        if kept is not None:
            if progress:
                progress("lowering: skipped, this kernel's TIR was lowered before (only the line map is new)", 0.9)
            return Built(None, {**kept, "compile_seconds": round(time.perf_counter() - start, 3)})
    with tempfile.TemporaryDirectory(prefix="nvcc-keep-") as keep:
        pass_configs = {
            "tl.emit_line_directives": True,
            # -keep leaves nvcc's intermediate PTX behind, so PTX costs no second nvcc run.
            "tl.device_compile_flags": ["-keep", "-keep-dir", keep],
        }
        was_enabled = tilelang.env.is_cache_enabled()
        if not use_tilelang_cache:
            tilelang.env.disable_cache()
        try:
            with contextlib.redirect_stdout(sys.stderr), _Nvcc(kernel, arch, progress, server_cache).hooked() as nvcc, \
                    limits.while_lowered(arch, limits.shared_buffers(prim_func), user_file, kernel.source):
                jit = tilelang.compile(prim_func, target={"kind": "cuda", "arch": arch}, pass_configs=pass_configs)
        except StageError:
            raise
        except Exception as exc:
            raise explain(tilelang_error(exc, user_file), kernel, prim_func, arch) from None
        finally:
            if was_enabled:
                tilelang.env.enable_cache()
        seconds = time.perf_counter() - start
        if nvcc.known is not None:  # nvcc's output for this very CUDA, kept: its PTX's lines moved to this source
            known = nvcc.known
            moved = {a: b for a, b in zip(known["user_lines"], nvcc.partial["user_lines"])  # CUDA line by CUDA line
                     if isinstance(a, int) and isinstance(b, int)}
            ptx = cache.remap_loc(known["ptx"], str(known.get("source_file") or user_file), moved)
            ptxas_log, sass = known["ptxas_log"], known["sass"]
            figures = parse_ptxas(ptxas_log)
        else:
            ptx_files = sorted(Path(keep).glob("*.ptx"))
            if ptx_files:
                ptx = ptx_files[0].read_text()
            else:  # TileLang's cache served the binary: ask nvcc for the PTX
                ptx = jit._get_ptx()
                ptx_files = [Path(keep) / "kernel.ptx"]
                ptx_files[0].write_text(ptx)
            if progress:
                progress("ptxas: registers, shared memory and SASS", 0.85)
            figures, ptxas_log, sass = ptxas_resources(ptx_files[0], arch)
            if server_cache is not None and nvcc.cubin:
                server_cache.compiled({"cubin_b64": base64.b64encode(nvcc.cubin).decode()})

    kernel_dirs = kernel_module_dirs(user_file)
    cuda, line_map, origins, origin_files = split_line_directives_with_origins(
        jit.get_kernel_source(), user_file, kernel.source, kernel_dirs)
    launch = launch_info(jit, config.problem)
    dynamic = launch.pop("dynamic_shared_bytes", None)
    resources = {
        "registers": figures.get("registers"),
        "shared_bytes": (figures.get("static_shared_bytes") or 0) + (dynamic or 0),
        "static_shared_bytes": figures.get("static_shared_bytes"),
        "dynamic_shared_bytes": dynamic,
        "spill_bytes": (figures["spill_stores"] + figures["spill_loads"]) if "spill_stores" in figures else None,
        "spill_stores": figures.get("spill_stores"),
        "spill_loads": figures.get("spill_loads"),
        "stack_bytes": figures.get("stack_bytes"),
        "sass_mix": sass_mix(sass),
        "threads": block_threads(launch),
        **launch,
    }
    # What cannot launch is an error here, before anything is called compiled; what will be slow, a warning.
    warnings = ([kernel.import_warning] if kernel.import_warning else []) + limits.check(
        resources, arch, limits.shared_buffers(prim_func), user_file, kernel.source)
    result = {
        "ok": True,
        "kernel": kernel.name,
        "config": config.to_json(),
        "arch": arch,
        "tilelang_version": tilelang_version(),
        "source_file": user_file,
        "cuda": cuda,
        "host": jit.get_host_source(),
        "ptx": ptx,
        "ptxas_log": ptxas_log.strip(),
        "sass": sass,
        "resources": resources,
        "line_map": line_map,
        # CUDA lines made by a kernel module the file imports (a helper schedule), named "file.py:N" and quoted
        "line_origins": origins if any(origins) else None,
        "origin_lines": origin_quotes(origins, origin_files) if any(origins) else None,
        "compile_seconds": round(seconds, 3),
        "nvcc_reused": nvcc.known is not None,  # nvcc's output for this CUDA was kept: nvcc and ptxas did not run
        "lowering_reused": False,  # an answer kept for this TIR: nothing was lowered or compiled (_lowered_before)
        "warnings": warnings,
        "cached": False,
        "error": None,
    }
    return Built(jit, result)


def tir_identity(prim_func, config: Config, user_file: str) -> dict | None:
    """What lowering `prim_func` depends on that the kernel decides, as one digest (what a file may change besides,
    TileLang's callbacks and the environment, is checked apart: remember_lowering_context): its TVMScript with the
    objects it only refers to (layouts) written out, names included (they are the generated CUDA's), and the config
    (a dynamic shape's launch takes the problem's sizes). Beside it, where each of its statements and buffers came from, in one
    fixed order: [file, line], file "" for `user_file`, None where TileLang kept no span; two sources whose kernels
    have one digest pair their lines by these (compile_cache.span_mapping). None where TileLang cannot print it.
    (The server adds the arch, TileLang's version and the engine's own code to the key: jobs/result_cache.tir_key.)"""
    import tvm
    try:
        script = prim_func.script(show_meta=True)
    except Exception:
        return None
    spans: list = []

    def where(span) -> list | None:
        if span is None or span.source_name is None:
            return None
        name = str(span.source_name.name)
        return ["" if name == user_file else name, int(span.line)]

    block_type = getattr(tvm.tirx, "SBlock", None) or getattr(tvm.tirx, "Block", None)

    def visit(node) -> None:
        if isinstance(node, tvm.tirx.Stmt):
            spans.append(where(_span_of(node)))
        if block_type is not None and isinstance(node, block_type):
            spans.extend(where(getattr(b, "span", None)) for b in node.alloc_buffers)
    try:
        spans.append(where(getattr(prim_func, "span", None)))
        tvm.tirx.stmt_functor.post_order_visit(prim_func.body, visit)
    except Exception:
        return None
    digest = hashlib.sha256(json.dumps([script, config.to_json()], sort_keys=True, default=str).encode()).hexdigest()
    return {"digest": digest, "spans": spans}


_SPAN_FIELDS: dict[type, Any] = {}


def _span_of(node):
    """A statement's span: a field TileLang's TIR keeps (#line directives come from it) but its Python classes do not
    show as an attribute; read through the object's reflected fields."""
    kind = type(node)
    if kind not in _SPAN_FIELDS:
        getter, info = None, getattr(kind, "__tvm_ffi_type_info__", None)
        while info is not None and getter is None:
            getter = next((f.getter for f in info.fields if f.name == "span"), None)
            info = info.parent_type_info
        _SPAN_FIELDS[kind] = getter
    getter = _SPAN_FIELDS[kind]
    return getter(node) if getter is not None else getattr(node, "span", None)


_PRISTINE: tuple[dict, dict] | None = None


def _lowering_hooks() -> dict:
    """TileLang's callbacks as registered now (tilelang_callback_*: its call of nvcc, a post-processing of the CUDA)."""
    import tvm_ffi
    return {name: tvm_ffi.get_global_func(name, allow_missing=True)
            for name in tvm_ffi.registry.list_global_func_names() if name.startswith("tilelang_callback")}


def remember_lowering_context() -> None:
    """Take note of the environment and TileLang's callbacks before any user code runs (a job's worker calls it once
    TileLang is imported): a kernel's file that changes either (a CUDA post-processing callback, NVCC_APPEND_FLAGS)
    changes what its lowering makes without changing its TIR, and is never answered by an answer kept for that TIR."""
    global _PRISTINE
    _PRISTINE = (environment_now(), _lowering_hooks())


ENGINE_ENV = {"TILELANG_COMPILE_TIMEOUT_SECONDS"}  # set by the engine for each job (actions.time_limit): no change


def _lowering_context_untouched() -> bool:
    if _PRISTINE is None:
        return False
    environ, hooks = _PRISTINE
    now, env = _lowering_hooks(), environment_now()
    changed = {k for k in set(environ) | set(env) if environ.get(k) != env.get(k)} - ENGINE_ENV
    return (not changed and now.keys() == hooks.keys()
            and all(now[name].same_as(hooks[name]) for name in now))


def _lowered_before(kernel: Kernel, config: Config, prim_func, arch: str, server_cache: ServerCache) -> dict | None:
    """The answer the server kept for this very TIR, its lines moved to this source (an edit of a docstring, of a
    name the TIR does not keep, of the file's `__main__`); None where there is none, where its lines cannot all be
    paired with this source's, or where the file changed what lowering does besides its TIR (remember_lowering_context):
    then lowering runs."""
    if not _lowering_context_untouched():
        return None
    user_file = str(kernel.path)
    identity = tir_identity(prim_func, config, user_file)
    if identity is None:
        return None
    kept = server_cache.lowered_before(identity)
    answer = kept.get("answer") if isinstance(kept, dict) else None
    if not (isinstance(answer, dict) and answer.get("ok") is True and answer.get("arch") == arch
            and isinstance(answer.get("source_file"), str)):
        return None
    moved = cache.span_mapping(kept.get("spans"), identity["spans"])
    if moved is None or not cache.answer_lines(answer) <= moved.keys():  # (each line the answer names, paired)
        return None
    result = cache.moved_lines(answer, moved)
    result["ptx"] = cache.renamed_file(result.get("ptx"), answer["source_file"], user_file)
    warnings = [w for w in result.get("warnings") or [] if isinstance(w, dict) and w.get("stage") == "resources"]
    result.update({"kernel": kernel.name, "config": config.to_json(), "source_file": user_file,
                   "lowering_reused": True, "nvcc_reused": True,
                   "warnings": ([kernel.import_warning] if kernel.import_warning else []) + warnings,
                   "cached": False, "error": None})
    return result


RESULT_FORMAT = 6  # raised when a compile result gains a field (2: "sass", 3: resources.sass_mix, 4: warnings,
#                   5: nvcc_reused, 6: lowering_reused)


def compile_key(kernel: Kernel, config: Config, arch: str) -> str:
    return cache.key("compile", kernel.name, kernel.fingerprint, config.to_json(), arch, tilelang_version(),
                     RESULT_FORMAT)


def compile_kernel(kernel: Kernel, config: Config, arch: str | None = None,
                   progress: Callable[[str, float], None] | None = None,
                   server_cache: ServerCache | None = None) -> dict:
    """The compile result as JSON, from the cache when the same source, parameters, target and TileLang were
    compiled before. `progress` hears the stages of a compile that is not cached; `server_cache`: build's."""
    arch = resolve_arch(arch)
    k = compile_key(kernel, config, arch)
    hit = cache.get("compile", k)
    if hit is not None and hit.get("source_file") == str(kernel.path):
        return {**hit, "cached": True}
    result = build(kernel, config, arch, progress=progress, server_cache=server_cache).result
    cache.put("compile", k, result)
    return result
