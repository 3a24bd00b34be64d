"""Why a kernel is fast or slow, and whether it reads out of bounds: Nsight Compute and compute-sanitizer over one
launch of the user's kernel, each finding mapped back to the user's TileLang line.

    profile:   ncu ─► speed of light, occupancy, memory workload, warp-state stall reasons (per kernel)
                   └► source counters: stall samples per SASS instruction ─► CUDA line ─► TileLang line
    memcheck:  compute-sanitizer --tool memcheck (and racecheck) ─► each error's SASS offset ─► TileLang line

How a SASS instruction finds its TileLang line. TileLang compiles with `-lineinfo` always. For these runs the kernel
is compiled with a CUDA post-processing hook (TileLang's `tilelang_callback_cuda_postproc`) that strips the `#line`
directives from the generated CUDA, keeping their line map (compile.split_line_directives, the same map the page's
CUDA pane uses). So nvcc's line table points into the CUDA text itself: SASS offset → CUDA line (ptxas
`--generate-line-info` on the kept PTX, exactly as nvcc runs it, then `nvdisasm -gi`, which also resolves inlined
template code to the CUDA line that called it) → line_map → TileLang line.

Both tools run a small launcher (`python -m playground.engine.profile_target SPEC`) that compiles and launches the
kernel; the profiler sees only the one launch between cudaProfilerStart and cudaProfilerStop.

TileLang guards every global access it cannot prove in bounds (its LegalizeSafeMemoryAccess pass: the load becomes
`cond ? A[i] : 0`). A kernel that forgets to mask a ragged tile therefore never reads out of bounds as compiled: it
silently computes with zeros. memcheck runs twice for that reason: as compiled, and with TileLang's automatic guards
turned off (`tl.disable_safe_memory_legalize`), which shows the accesses that only TileLang's guards keep in bounds,
i.e. the places where the kernel's own masking is missing.

The parsing functions are pure and tested on the CPU; running needs a GPU, `ncu` and `compute-sanitizer`.
"""
from __future__ import annotations

import base64
import csv
import difflib
import io
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

from .compile import find_cuda_tool, resolve_arch
from .errors import StageError, clip
from .kernel import Config, Kernel

ROOT = Path(__file__).resolve().parents[2]
NCU_SECTIONS = ("SpeedOfLight", "Occupancy", "LaunchStats", "MemoryWorkloadAnalysis", "WarpStateStats",
                "SourceCounters")
SANITIZER_TOOLS = ("memcheck", "racecheck")
REPORT_LIMIT = 16 * 2**20     # bytes of .ncu-rep sent back (base64, 4/3 of that) for download; a GEMM's is a few MiB
ERROR_LIMIT = 100             # sanitizer errors kept (the tool is told to print no more than this)
GUARDS_OFF = {"tl.disable_safe_memory_legalize": True}
SANITIZER_PADDING = 1 << 20   # bytes watched after each allocation: a ragged tile overruns by less than a tile

# What each warp stall reason means, in a student's words (the names Nsight Compute uses in its source view).
STALL_MEANING = {
    "long_sb": "waiting for a global or local memory load (long scoreboard)",
    "short_sb": "waiting for shared memory or a special-function result (short scoreboard)",
    "barrier": "waiting at a block barrier (__syncthreads / T.sync_threads)",
    "membar": "waiting for a memory fence",
    "wait": "a fixed-latency dependency (the previous instruction's result)",
    "math": "the math pipe is busy",
    "mio": "the shared-memory / special-function instruction queue is full",
    "lg": "the global/local memory instruction queue is full",
    "tex": "the texture / L1TEX pipe is busy",
    "dispatch": "the dispatcher could not issue",
    "drain": "draining memory stores at exit",
    "imc": "waiting for the constant cache",
    "branch_resolving": "resolving a branch target",
    "no_instruction": "no instruction fetched yet (instruction cache)",
    "not_selected": "ready but another warp was picked",
    "selected": "issuing (not a stall)",
    "sleep": "sleeping (nanosleep / yield)",
    "gmma": "waiting for a warpgroup MMA (wgmma) to finish",
    "misc": "other",
}


# -- SASS offset → CUDA line (nvdisasm -gi) -------------------------------------------------------------------
_FUNCTION = re.compile(r"^//-+ \.text\.(\S+)\s+-+")
_INSTRUCTION = re.compile(r"^\s*/\*([0-9a-f]{4,})\*/\s+(.*?)\s*;?\s*(?:/\*.*)?$")
_FILE_LINE = re.compile(r'//## File "([^"]+)", line (\d+)(?: inlined at "([^"]+)", line (\d+))?')


def opcode(text: str) -> str:
    """The mnemonic of a SASS instruction without predicate and modifiers: `@!P0 LDG.E.128 R4, ...` → `LDG`."""
    words = text.strip().split()
    if words and words[0].startswith("@"):
        words = words[1:]
    return words[0].split(".")[0].rstrip(";") if words else ""


def sass_line_table(disassembly: str) -> dict[str, list[dict]]:
    """{function: [{"offset", "opcode", "text", "cuda_line"}, ...]} from `nvdisasm -gi -c` output.

    Each instruction's line is the line of the main CUDA file it belongs to: for inlined code (TileLang's templates,
    cuda_fp16.hpp) the line of the main file it was inlined at. The main file is the one the outermost annotations
    (those not inlined anywhere) name most often."""
    parsed: dict[str, list[tuple[int, str, list[tuple[str, int, str | None, int | None]]]]] = {}
    outer: dict[str, int] = {}
    function, pending, last = None, [], []
    for raw in disassembly.splitlines():
        m = _FUNCTION.match(raw.strip())
        if m:
            function, pending, last = m.group(1), [], []
            parsed.setdefault(function, [])
            continue
        m = _FILE_LINE.search(raw)
        if m:
            f, line, at_f, at_line = m.group(1), int(m.group(2)), m.group(3), m.group(4)
            pending.append((f, line, at_f, int(at_line) if at_line else None))
            if at_f is None:
                outer[f] = outer.get(f, 0) + 1
            continue
        m = _INSTRUCTION.match(raw)
        if m and function is not None:
            if pending:
                last, pending = pending, []
            parsed[function].append((int(m.group(1), 16), m.group(2).strip(), last))
    main = max(outer, key=outer.get) if outer else None
    table: dict[str, list[dict]] = {}
    for fn, rows in parsed.items():
        out = []
        for offset, text, notes in rows:
            line = None
            for f, ln, at_f, at_ln in notes:
                if f == main and at_f is None:
                    line = ln
                elif at_f == main and line is None:
                    line = at_ln
            out.append({"offset": offset, "opcode": opcode(text), "text": text, "cuda_line": line})
        table[fn] = out
    return table


def code_of(line: int | str | None, source_lines: list[str], origin_lines: dict | None) -> str | None:
    """The text of a line a finding is on: of the user's file (a number), or of a kernel module it imports
    ("module.py:N", quoted in `origin_lines`)."""
    if isinstance(line, str):
        return (origin_lines or {}).get(line)
    return source_lines[line - 1].strip() if line and 0 < line <= len(source_lines) else None


def user_line(cuda_line: int | None, line_map: list) -> int | None:
    """The TileLang line a line of the generated CUDA (1-based, directives stripped) came from."""
    if cuda_line is None or not line_map or not 1 <= cuda_line <= len(line_map):
        return None
    return line_map[cuda_line - 1]


def align(instructions: list[dict], table: list[dict]) -> list[int | None]:
    """For each profiled instruction ({"offset", "opcode"}), the index of the same instruction in our table.

    By offset when the opcodes agree there (the same cubin: they do); otherwise by aligning the opcode sequences,
    which survives an address base or a few differing instructions."""
    by_offset = {row["offset"]: i for i, row in enumerate(table)}
    direct = [by_offset.get(ins["offset"]) for ins in instructions]
    agree = sum(1 for ins, j in zip(instructions, direct) if j is not None and table[j]["opcode"] == ins["opcode"])
    if instructions and agree >= 0.9 * len(instructions):
        return [j if j is not None and table[j]["opcode"] == ins["opcode"] else None
                for ins, j in zip(instructions, direct)]
    out: list[int | None] = [None] * len(instructions)
    matcher = difflib.SequenceMatcher(None, [i["opcode"] for i in instructions], [r["opcode"] for r in table],
                                      autojunk=False)
    for block in matcher.get_matching_blocks():
        for k in range(block.size):
            out[block.a + k] = block.b + k
    return out


# -- Nsight Compute's CSV pages -------------------------------------------------------------------------------------
def number(text) -> float | None:
    """A CSV cell as a number: "1,234.5" → 1234.5; "" or "n/a" → None."""
    if text is None:
        return None
    try:
        return float(str(text).replace(",", "").strip())
    except ValueError:
        return None


def parse_details(text: str) -> dict:
    """`ncu --import R --csv --page details`: one row per (section, metric) of each profiled kernel, and the rules
    Nsight Compute applied (with their advice). The first kernel's: {"kernel", "grid", "block", "device",
    "sections": {section: [{"name", "unit", "value"}]}, "rules": [{"section", "name", "type", "text", "speedup"}]}."""
    rows = _rows_after_header(text, "ID")
    out: dict = {"kernel": None, "sections": {}, "rules": []}
    first_id = None
    for row in rows:
        if first_id is None:
            first_id = row.get("ID")
            out.update(kernel=row.get("Kernel Name"), grid=row.get("Grid Size"), block=row.get("Block Size"),
                       device=row.get("Device"), cc=row.get("CC"))
        if row.get("ID") != first_id:
            continue
        section = row.get("Section Name") or ""
        if row.get("Rule Name"):
            rule = {"section": section, "name": row["Rule Name"], "type": row.get("Rule Type") or "",
                    "text": row.get("Rule Description") or "", "speedup": number(row.get("Estimated Speedup"))}
            if rule not in out["rules"]:
                out["rules"].append(rule)
            continue
        name = row.get("Metric Name")
        if not name:
            continue
        metrics = out["sections"].setdefault(section, [])
        if not any(m["name"] == name for m in metrics):
            value = row.get("Metric Value")
            metrics.append({"name": name, "unit": row.get("Metric Unit") or "",
                            "value": number(value) if number(value) is not None else value})
    return out


def parse_raw(text: str) -> list[dict]:
    """`ncu --import R --csv --page raw`: a header of metric names, a row of units, then one row per kernel.
    Each kernel as {metric: value} (numbers where they are numbers)."""
    rows = _rows_after_header(text, "ID")
    if rows and not (rows[0].get("ID") or "").strip():
        rows = rows[1:]  # the units
    return [{k: (number(v) if number(v) is not None else v) for k, v in row.items() if k} for row in rows]


_RAW_STALL = re.compile(r"^smsp__average_warps?_issue_stalled_(\w+?)_per_issue_active\.ratio$")
_RAW_SAMPLED = re.compile(r"^smsp__pcsamp_warps_issue_stalled_(\w+?)(?:\.sum)?$")


def stall_reasons(raw: dict, groups: list[dict] | None = None) -> dict[str, float]:
    """Warp-state stall reasons of one kernel, largest first: {reason: cycles a warp spends in that state per issued
    instruction} from the Warp State section's metrics; where the report lacks those, the sampled stalls (the
    Source Counters' totals, else the source page's stall columns added up), as sample counts."""
    found, sampled = {}, {}
    for name, value in raw.items():
        if not isinstance(value, (int, float)):
            continue
        m = _RAW_STALL.match(name)
        if m and not m.group(1).endswith("not_issued"):
            found[m.group(1)] = float(value)
        m = _RAW_SAMPLED.match(name)
        if m and not m.group(1).endswith("not_issued"):
            sampled[m.group(1)] = float(value)
    if not found and not sampled:
        for g in groups or []:
            for row in g["rows"]:
                for k, v in row["stalls"].items():
                    sampled[k] = sampled.get(k, 0.0) + v
    return dict(sorted((found or sampled).items(), key=lambda kv: -kv[1]))


def parse_source(text: str) -> list[dict]:
    """`ncu --import R --csv --page source --print-source sass`: for each kernel a `"Kernel Name","<name>"` row, a
    header row starting with "Address", then one row per SASS instruction. Each kernel as {"function", "rows":
    [{"address", "offset", "source", "opcode", "samples", "not_issued", "executed", "stalls": {reason: n}}]}, the
    offset counted from the kernel's first instruction."""
    groups: list[dict] = []
    header: list[str] | None = None
    for row in csv.reader(io.StringIO(text)):
        if not row:
            continue
        head = row[0].strip().lstrip("#").strip()
        if head == "Kernel Name" and len(row) > 1:
            groups.append({"function": row[1].strip(), "rows": []})
            header = None
        elif head == "Address":
            header = [c.strip().lstrip("#").strip() for c in row]
            if not groups:
                groups.append({"function": None, "rows": []})
        elif header and head.lower().startswith("0x"):
            cells = dict(zip(header, row))
            stalls = {}
            for col, value in cells.items():
                if col.startswith("stall_") and "not_issued" not in col:
                    v = number(value)
                    if v:
                        stalls[col.removeprefix("stall_")] = v
            source = cells.get("Source", "").strip()
            groups[-1]["rows"].append({
                "address": int(head, 16), "source": source, "opcode": opcode(source),
                "samples": number(cells.get("Warp Stall Sampling (All Samples)")) or 0.0,
                "not_issued": number(cells.get("Warp Stall Sampling (Not-issued Samples)")) or 0.0,
                "executed": number(cells.get("Instructions Executed")) or 0.0,
                "stalls": stalls})
    for g in groups:
        base = min((r["address"] for r in g["rows"]), default=0)
        for r in g["rows"]:
            r["offset"] = r["address"] - base
    return [g for g in groups if g["rows"]]


def stalls_by_line(rows: list[dict], table: list[dict], line_map: list, source: str,
                   origins: list | None = None, origin_lines: dict | None = None) -> dict:
    """The profiled instructions' stall samples added up per TileLang line: {"lines": [{"line", "code",
    "samples", "share", "stalls", "executed", "instructions", "top"}], "unmapped": {...}, "mapped_share"}.
    `top` is the line's instruction with the most samples (its SASS text), so a student sees what waits.
    `origins` (compile.split_line_directives_with_origins): a CUDA line made by a kernel module the file imports
    (flash_attention's Hopper schedule) counts for that module's line, whose "line" is then "module.py:N"."""
    index = align(rows, table)
    lines_text = source.splitlines()
    per: dict[int | str | None, dict] = {}
    total = sum(r["samples"] for r in rows) or 0.0
    for r, j in zip(rows, index):
        line = user_line(table[j]["cuda_line"], line_map) if j is not None else None
        if line is None and j is not None:
            line = user_line(table[j]["cuda_line"], origins or [])
        e = per.setdefault(line, {"line": line, "samples": 0.0, "stalls": {}, "executed": 0.0, "instructions": 0,
                                  "top": None, "top_samples": -1.0})
        e["samples"] += r["samples"]
        e["executed"] += r["executed"]
        e["instructions"] += 1
        for k, v in r["stalls"].items():
            e["stalls"][k] = e["stalls"].get(k, 0.0) + v
        if r["samples"] > e["top_samples"]:
            e["top"], e["top_samples"] = r["source"], r["samples"]
    out = []
    for line, e in per.items():
        e.pop("top_samples")
        e["share"] = e["samples"] / total if total else 0.0
        e["stalls"] = dict(sorted(e["stalls"].items(), key=lambda kv: -kv[1]))
        e["code"] = code_of(line, lines_text, origin_lines)
        if line is not None:
            out.append(e)
    out.sort(key=lambda e: -e["samples"])
    unmapped = per.get(None)
    mapped = sum(e["samples"] for e in out)
    return {"lines": out, "unmapped": unmapped, "total_samples": total,
            "mapped_share": mapped / total if total else None}


def _rows_after_header(text: str, first_column: str) -> list[dict]:
    """CSV rows as dicts, from the first row whose first cell is `first_column` (ncu may print notes before it)."""
    lines = text.splitlines()
    for i, line in enumerate(lines):
        if line.startswith(f'"{first_column}"') or line.startswith(f"{first_column},"):
            return list(csv.DictReader(io.StringIO("\n".join(lines[i:]))))
    return []


# -- compute-sanitizer's report ----------------------------------------------------------------------------------
_PREFIX = "========="
_LOCATION = re.compile(r"\bat (?:(?P<fn>[^\s+]+)\+)?(?P<off>0x[0-9a-fA-F]+)(?: in (?P<file>[^\s:]+(?:[^:\n]*?)):"
                       r"(?P<line>\d+)(?::(?P<fn2>\S+))?)?")
_THREAD = re.compile(r"by thread \((\d+),(\d+),(\d+)\) in block \((\d+),(\d+),(\d+)\)")
_SUMMARY = re.compile(r"ERROR SUMMARY: (\d+) error")


def parse_sanitizer(text: str) -> dict:
    """compute-sanitizer's log → {"errors": [{"message", "details", "locations": [{"function", "offset", "file",
    "line"}], "thread", "block"}], "error_count", "summary"}. An error is a `=========` line at the outer indent
    followed by its indented detail lines; host backtraces are dropped."""
    errors: list[dict] = []
    current = None
    in_backtrace = False
    count = None
    for raw in text.splitlines():
        if not raw.startswith(_PREFIX):
            continue
        body = raw[len(_PREFIX):]
        stripped = body.strip()
        m = _SUMMARY.search(stripped)
        if m:
            count = int(m.group(1))
            current = None
            continue
        if not stripped or stripped.startswith(("COMPUTE-SANITIZER", "RACECHECK SUMMARY", "LEAK SUMMARY")):
            continue
        outer = not body.startswith("  ")
        if outer:
            if stripped.startswith(("Program hit", "Target application returned")):
                current = None  # a host API error the launcher already reports; not a kernel access
                continue
            current = {"message": stripped, "details": [], "locations": [], "thread": None, "block": None}
            errors.append(current)
            in_backtrace = False
            _add_locations(current, stripped)  # racecheck names the first access on this line
            continue
        if current is None:
            continue
        if stripped.startswith(("Saved host backtrace", "Host Frame")):
            in_backtrace = True
            continue
        if in_backtrace:
            continue
        t = _THREAD.search(stripped)
        if t:
            current["thread"] = [int(x) for x in t.groups()[:3]]
            current["block"] = [int(x) for x in t.groups()[3:]]
        _add_locations(current, stripped)
        if len(current["details"]) < 8:
            current["details"].append(stripped)
    errors = errors[:ERROR_LIMIT]
    return {"errors": errors, "error_count": count if count is not None else len(errors)}


def _add_locations(error: dict, text: str) -> None:
    for loc in _LOCATION.finditer(text):
        error["locations"].append({"function": loc.group("fn") or loc.group("fn2"),
                                   "offset": int(loc.group("off"), 16), "file": loc.group("file"),
                                   "line": int(loc.group("line")) if loc.group("line") else None})


def locate(error: dict, tables: dict[str, list[dict]], line_map: list, cuda_file_names: tuple = (),
           origins: list | None = None) -> int | str | None:
    """The TileLang line of a sanitizer error: through its SASS offset (our line table), else through the CUDA file
    and line it names. A line of a kernel module the file imports comes back as "module.py:N" (`origins`)."""
    for maps in (line_map, origins or []):
        for loc in error["locations"]:
            table = tables.get(loc["function"] or "") or (next(iter(tables.values())) if len(tables) == 1 else None)
            if table:
                for row in table:
                    if row["offset"] == loc["offset"]:
                        line = user_line(row["cuda_line"], maps)
                        if line:
                            return line
            if loc["file"] and loc["line"] and (not cuda_file_names or Path(loc["file"]).name in cuda_file_names):
                line = user_line(loc["line"], maps)
                if line:
                    return line
    return None


# -- running --------------------------------------------------------------------------------------------------------
def _run_tool(cmd: list[str], folder: Path, timeout: float, name: str) -> tuple[int, str]:
    """Run a profiler/sanitizer command in its own process group, its output in a file; kill the group on timeout."""
    log_path = folder / f"{name}.out"
    with open(log_path, "w") as log:
        proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, cwd=folder, start_new_session=True)
        try:
            rc = proc.wait(timeout=max(1.0, timeout))
        except subprocess.TimeoutExpired:
            raise StageError("timeout", f"{name} ran past its {timeout:.0f} s limit",
                             None, clip(log_path.read_text(errors="replace"))) from None
        finally:
            # The tool and the launcher it started are a process group of their own (so that both go together): on
            # a timeout, or the job's own alarm firing while we wait, end the whole group.
            if proc.poll() is None:
                try:
                    os.killpg(proc.pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
                proc.wait()
    return rc, log_path.read_text(errors="replace")


def _spec(kernel: Kernel, config: Config, arch: str, folder: Path, mode: str, problems: list[dict],
          guards: bool = True, seed: int = 0) -> Path:
    spec = {"kernel": kernel.name, "source_file": str(kernel.path), "dtype": config.dtype, "tile": config.tile,
            "problems": problems, "arch": arch, "out": str(folder), "mode": mode, "guards": guards, "seed": seed}
    path = folder / f"spec-{mode}-{'guarded' if guards else 'unguarded'}.json"
    path.write_text(json.dumps(spec))
    return path


LAUNCH = ("import sys; sys.path.insert(0, sys.argv.pop(1)); from playground.engine.profile_target import main; "
          "sys.exit(main(sys.argv[1:]))")


def _launcher(spec: Path) -> list[str]:
    """python -m playground.engine.profile_target SPEC, from this checkout whatever the tool's folder and path."""
    return [sys.executable, "-c", LAUNCH, str(ROOT), str(spec)]


def _launcher_outcome(folder: Path, log: str) -> list[dict]:
    """The builds the launcher recorded, or the StageError it recorded (or a device error with the tool's log)."""
    err = folder / "error.json"
    if err.exists():
        e = json.loads(err.read_text())
        raise StageError(e["stage"], e["message"], e.get("line"), clip(e.get("log") or "") + "\n" + clip(log, 4000))
    builds = sorted(folder.glob("build-*.json"), key=lambda p: int(p.stem.split("-")[1]))
    if not builds:
        raise StageError("device", "the kernel did not launch under the tool", None, clip(log))
    return [json.loads(p.read_text()) for p in builds]


def _folder(workdir: str | os.PathLike | None, what: str) -> Path:
    from .compile_cache import cache_dir
    base = Path(workdir) if workdir else cache_dir() / "profiles"
    folder = base / f"{what}-{os.getpid()}-{time.time_ns()}"
    folder.mkdir(parents=True, exist_ok=True)
    return folder


def _need(tool: str) -> str:
    path = find_cuda_tool(tool)
    if path is None:
        raise StageError("device", f"{tool} is not installed on this server (it ships with the CUDA toolkit, in "
                                   f"/usr/local/cuda/bin)")
    return path


def _deadline(timeout: float | None) -> float:
    """When the tools must be done: `timeout` from now, else a little before the job's own alarm (actions.time_limit),
    else in 10 minutes."""
    if not timeout:
        left = signal.getitimer(signal.ITIMER_REAL)[0]
        timeout = max(1.0, left - 2.0) if left > 0 else 600.0
    return time.monotonic() + timeout


def profile(kernel: Kernel, config: Config, arch: str | None = None, workdir=None, timeout: float | None = None,
            progress=lambda *_: None) -> dict:
    """Nsight Compute over one launch of the kernel at `config`. {"ok", "kernel", "config", "arch", "ncu": version,
    "details", "stall_reasons", "source": {"lines", "unmapped", "mapped_share"}, "report_b64", "report_name",
    "line_map"-free (the compile result carries that)}."""
    import torch
    if not torch.cuda.is_available():
        raise StageError("device", "profiling needs a CUDA GPU; none is present")
    arch = resolve_arch(arch)
    ncu = _need("ncu")
    deadline = _deadline(timeout)
    folder = _folder(workdir, "profile")
    spec = _spec(kernel, config, arch, folder, "profile", [config.problem])
    report = folder / "profile"
    cmd = [ncu, "--target-processes", "all", "--profile-from-start", "off", "--launch-count", "1",
           "--clock-control", "none", "--import-source", "no", "--force-overwrite", "--export", str(report)]
    for section in NCU_SECTIONS:
        cmd += ["--section", section]
    progress("profiling one launch under Nsight Compute (each counter pass replays the kernel)", 0.1)
    rc, log = _run_tool(cmd + _launcher(spec), folder, deadline - time.monotonic(), "ncu")
    if "ERR_NVGPUCTRPERM" in log:
        raise StageError("device", "this GPU's performance counters are reserved for administrators "
                                   "(NVreg_RestrictProfilingToAdminUsers=1)", None, clip(log))
    builds = _launcher_outcome(folder, log)
    rep = report.with_suffix(".ncu-rep")
    if not rep.exists():
        raise StageError("device", f"Nsight Compute wrote no report (exit status {rc})", None, clip(log))
    progress("reading the report", 0.8)
    pages = {}
    for page, extra in (("details", []), ("raw", []), ("source", ["--print-source", "sass"])):
        _, text = _run_tool([ncu, "--import", str(rep), "--csv", "--page", page, *extra], folder,
                            deadline - time.monotonic(), f"ncu-{page}")
        pages[page] = text
    build = builds[0]
    details = parse_details(pages["details"])
    raw = parse_raw(pages["raw"])
    groups = parse_source(pages["source"])
    if not groups:  # an ncu older than --print-source prints the SASS view by default
        _, pages["source"] = _run_tool([ncu, "--import", str(rep), "--csv", "--page", "source"], folder,
                                       deadline - time.monotonic(), "ncu-source")
        groups = parse_source(pages["source"])
    function = build["functions"][0] if build["functions"] else None
    group = next((g for g in groups if g["function"] and function and function in g["function"]),
                 groups[0] if groups else None)
    table = build["sass"].get(group["function"], []) if group and group["function"] in build["sass"] else \
        (build["sass"].get(function) or [])
    source = stalls_by_line(group["rows"], table, build["line_map"], kernel.source, build.get("origins"),
                            build.get("origin_lines")) if group else None
    data = rep.read_bytes()
    result = {"ok": True, "kernel": kernel.name, "config": config.to_json(), "arch": arch,
              "source_file": str(kernel.path), "ncu": _version(ncu), "function": function,
              "details": details, "stall_reasons": stall_reasons(raw[0] if raw else {}, [group] if group else []),
              "stall_meaning": STALL_MEANING, "source": source,
              "report_name": f"{kernel.name}.ncu-rep", "report_bytes": len(data),
              "report_b64": base64.b64encode(data).decode() if len(data) <= REPORT_LIMIT else None,
              "error": None}
    progress("done", 1.0)
    return result


def memcheck(kernel: Kernel, config: Config, arch: str | None = None, workdir=None, timeout: float | None = None,
             tools: tuple[str, ...] = SANITIZER_TOOLS, progress=lambda *_: None) -> dict:
    """compute-sanitizer over the kernel on its check shapes (small and ragged: where bounds go wrong). memcheck as
    compiled and without TileLang's automatic guards; racecheck (shared-memory hazards) as compiled.
    {"ok", "runs": [{"tool", "guards", "problems", "errors": [{..., "line", "code"}], "error_count"}], "clean"}."""
    import torch
    if not torch.cuda.is_available():
        raise StageError("device", "the memory checker needs a CUDA GPU; none is present")
    arch = resolve_arch(arch)
    sanitizer = _need("compute-sanitizer")
    deadline = _deadline(timeout)
    problems = [p for p in kernel.check_problems(config.problem) if p != config.problem] or [config.problem]
    plans = []
    for tool in tools:
        if tool not in SANITIZER_TOOLS:
            raise StageError("parameters", f"unknown checker {tool!r}; one of {', '.join(SANITIZER_TOOLS)}")
        if tool == "memcheck":
            plans += [(tool, True, problems), (tool, False, problems)]
        else:
            plans.append((tool, True, problems[:1]))  # racecheck is slow: one shape
    lines_text = kernel.source.splitlines()
    runs = []
    for n, (tool, guards, probs) in enumerate(plans):
        progress(f"{tool}{'' if guards else ' without TileLang guards'} on {len(probs)} shape(s)", n / len(plans))
        folder = _folder(workdir, f"{tool}-{'guarded' if guards else 'unguarded'}")
        spec = _spec(kernel, config, arch, folder, "check", probs, guards)
        log_file = folder / "sanitizer.log"
        cmd = [sanitizer, "--tool", tool, "--print-limit", str(ERROR_LIMIT), "--show-backtrace", "device",
               "--target-processes", "all", "--log-file", str(log_file)]
        if tool == "racecheck":
            cmd += ["--racecheck-report", "hazard"]
        # Reads just past a tensor must not land in the next one: PyTorch's caching allocator packs tensors into
        # large segments (memcheck sees one allocation), so it is turned off for the launcher, and each allocation
        # gets a padding the checker watches.
        launch = ["env", "PYTORCH_NO_CUDA_MEMORY_CACHING=1", *_launcher(spec)]
        padding = ["--padding", str(SANITIZER_PADDING)] if tool == "memcheck" else []
        rc, out = _run_tool(cmd + padding + launch, folder, deadline - time.monotonic(), tool)
        if padding and re.search(r"(?i)(unrecogni[sz]ed|unknown) option.*padding", out):
            rc, out = _run_tool(cmd + launch, folder, deadline - time.monotonic(), tool)  # an older sanitizer
        log = log_file.read_text(errors="replace") if log_file.exists() else out
        # A kernel that faults under the checker fails its launch (a `device` error): what it recorded before the
        # launch still maps the sanitizer's findings to lines. Any other error (a compile error) is the answer.
        builds = [json.loads(p.read_text()) for p in sorted(folder.glob("build-*.json"))]
        err = folder / "error.json"
        if err.exists() and json.loads(err.read_text()).get("stage") != "device":
            _launcher_outcome(folder, out)
        parsed = parse_sanitizer(log)
        tables, line_map, cuda_files, origins, quotes = {}, [], set(), [], {}
        for b in builds:
            tables.update(b["sass"])
            line_map = line_map or b["line_map"]
            origins = origins or b.get("origins") or []
            quotes.update(b.get("origin_lines") or {})
            cuda_files.update(b.get("cuda_files") or [])
        for e in parsed["errors"]:
            e["line"] = line = locate(e, tables, line_map, tuple(cuda_files), origins)
            e["code"] = code_of(line, lines_text, quotes)
        runs.append({"tool": tool, "guards": guards, "problems": probs, "errors": parsed["errors"],
                     "error_count": parsed["error_count"], "exit_status": rc,
                     "log": clip(log, 6000) if parsed["errors"] else ""})
    result = {"ok": True, "kernel": kernel.name, "config": config.to_json(), "arch": arch,
              "source_file": str(kernel.path), "sanitizer": _version(sanitizer), "runs": runs,
              "clean": all(r["error_count"] == 0 for r in runs), "error": None}
    progress("done", 1.0)
    return result


def _version(tool: str) -> str | None:
    try:
        out = subprocess.run([tool, "--version"], capture_output=True, text=True, timeout=30).stdout
    except (OSError, subprocess.SubprocessError):
        return None
    m = re.search(r"[Vv]ersion\s+([\w.\-]+)", out)
    return m.group(1) if m else (out.strip().splitlines() or [None])[-1]


# -- the build the launcher runs -----------------------------------------------------------------------------------
def build_with_line_table(kernel: Kernel, config: Config, arch: str, folder: Path, guards: bool = True):
    """Compile `kernel` at `config` for `arch` with the CUDA post-processing hook that strips TileLang's `#line`
    directives (keeping their map), so the cubin's line table points into the CUDA text. Returns the runnable
    kernel and {"line_map", "functions", "sass": {function: line table}, "cuda_files"}."""
    import tempfile
    import tilelang
    from .compile import kernel_module_dirs, make_prim_func, origin_quotes, split_line_directives_with_origins, \
        tilelang_error
    prim_func = make_prim_func(kernel, config)
    kept: dict = {}
    folders = kernel_module_dirs(str(kernel.path))

    def strip_directives(code: str, target) -> str:
        stripped, kept["line_map"], kept["origins"], kept["files"] = split_line_directives_with_origins(
            code, str(kernel.path), kernel.source, folders)
        return stripped

    with tempfile.TemporaryDirectory(prefix="nvcc-keep-", dir=folder) as keep:
        pass_configs = {"tl.emit_line_directives": True, "tl.device_compile_flags": ["-keep", "-keep-dir", keep]}
        if not guards:
            pass_configs.update(GUARDS_OFF)
        tilelang.register_cuda_postproc(strip_directives, override=True)
        tilelang.env.disable_cache()  # the hook must see this compile
        try:
            jit = tilelang.compile(prim_func, target={"kind": "cuda", "arch": arch}, pass_configs=pass_configs)
        except StageError:
            raise
        except Exception as exc:
            raise tilelang_error(exc, str(kernel.path)) from None
        ptx = sorted(Path(keep).glob("*.ptx"))
        sass: dict = {}
        cuda_files: list[str] = sorted(p.name for p in Path(keep).glob("*.cu"))
        if ptx:
            # ptxas exactly as nvcc runs it for `--cubin -lineinfo -arch=...` (nvcc --dryrun shows it), so the
            # offsets are those of the cubin that runs.
            cubin = ptx[0].with_suffix(".cubin")
            ptxas, nvdisasm = find_cuda_tool("ptxas"), find_cuda_tool("nvdisasm")  # the compile's own
            if ptxas and nvdisasm:
                made = subprocess.run([ptxas, f"-arch={arch}", "-m64", "--generate-line-info", str(ptx[0]), "-o",
                                       str(cubin)], capture_output=True, text=True, timeout=300)
                if made.returncode == 0:
                    dis = subprocess.run([nvdisasm, "-gi", "-c", str(cubin)], capture_output=True, text=True,
                                         timeout=300)
                    sass = sass_line_table(dis.stdout)
                    cuda_files += sorted({Path(m.group(1)).name for m in _FILE_LINE.finditer(dis.stdout)
                                          if m.group(1).endswith(".cu")})
    origins = kept.get("origins") or []
    info = {"line_map": kept.get("line_map") or [], "functions": list(sass), "sass": sass,
            "origins": origins, "origin_lines": origin_quotes(origins, kept.get("files") or {}) if any(origins) else {},
            "cuda_files": sorted(set(cuda_files)), "problem": config.problem, "guards": guards}
    return jit, info
