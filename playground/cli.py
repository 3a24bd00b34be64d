"""The command line: list, compile, run, tune, sweep, bench, and backup (the class's database). JSON on stdout with
--json; exit status 1 when not ok.

    python -m playground list --json
    python -m playground compile gemm --set block_M=64 --arch sm_90a --json
    python -m playground run gemm --source my_gemm.py --set preset=8192³ --json
    python -m playground backup class-backup.sqlite3

Arguments in, the engine's answer out: what each action does is engine/actions.py's `execute`.
"""
from __future__ import annotations

import argparse
import contextlib
import json
import sys
from pathlib import Path

from .engine.actions import execute, jsonable, time_limit
from .engine.answers import failed
from .engine.errors import StageError


def parse_sets(pairs: list[str]) -> dict:
    values = {}
    for pair in pairs:
        name, sep, value = pair.partition("=")
        if not sep or not name:
            raise StageError("parameters", f"--set takes NAME=VALUE, not {pair!r}")
        values[name.strip()] = value.strip()
    return values


# -- human-readable output --------------------------------------------------------------------------------------
def _print_error(err: dict) -> None:
    where = f" at line {err['line']}" if err.get("line") else ""
    print(f"error [{err['stage']}]{where}: {err['message']}")


def print_human(result: dict) -> None:
    if result.get("resources"):
        r = result["resources"]
        print(f"{result['kernel']} {result['config']} → {result['arch']}: compiled in {result['compile_seconds']} s"
              f"{' (cached)' if result.get('cached') else ''}")
        print(f"  registers {r['registers']}, shared memory {r['shared_bytes']} B, spills {r['spill_bytes']} B, "
              f"grid {r.get('grid')}, block {r.get('block')}")
    for v in result.get("verification") or []:
        verdict = ("FAIL" if not v["passed"] else "PASS" if v.get("verified", True) else "RAN, NOT VERIFIED")
        print(f"  {verdict} {v['label']}: rel error {v['rel_error']}, "
              f"max abs {v['max_abs_error']}" + ("" if v["passed"] else f", {v['message']}"))
    if result.get("timing"):
        t = result["timing"]
        print(f"  kernel   {t['median_ms']:.4f} ms [{t['p20_ms']:.4f}, {t['p80_ms']:.4f}]  "
              + (f"{result['tflops']:.1f} TFLOP/s  " if result.get("tflops") is not None else "")
              + f"{result['gbps']:.0f} GB/s")
        if result.get("verified") is False:
            print(f"  NOT VERIFIED: {result.get('verification_note')}")
        for name, b in result.get("baselines", {}).items():
            print(f"  {name}: {b['median_ms']:.4f} ms  (kernel is {b['speedup']:.2f}× its speed)")
    for row in result.get("table") or []:
        print("  " + "  ".join(f"{k}={v}" for k, v in row.items() if v is not None))
    if result.get("best"):
        print(f"  best: {result['best']}")
    for p in result.get("passes") or []:
        folded = f"  (after {len(p['folded'])} passes that changed nothing)" if p["folded"] else ""
        print(f"  {p['name']}: {len(p['ir'].splitlines())} lines{folded}")
    for e in ((result.get("source") or {}).get("lines") or [])[:10]:  # profile: where the warps wait
        reasons = ", ".join(f"{k} {v:.0f}" for k, v in list(e["stalls"].items())[:3])
        print(f"  line {e['line']:>4} {e['share']:6.1%} of stall samples  {reasons:<36} {e['code']}")
    for run in result.get("runs") or []:  # memcheck
        print(f"  {run['tool']}{'' if run['guards'] else ' without TileLang guards'}: {run['error_count']} error(s)")
        for e in run["errors"][:10]:
            print(f"    line {e.get('line')}: {e['message']}  {e.get('code') or ''}")
    for row in result.get("rows") or []:
        series = ", ".join(f"{n} {s['median_ms']:.4f} ms" for n, s in (row.get("series") or {}).items())
        print(f"  {row['label']}: {series or row.get('error')}")
    for w in result.get("warnings") or []:
        where = f" at line {w['line']}" if w.get("line") else ""
        print(f"  warning{where}: {w['message']}")
    if result.get("error"):
        _print_error(result["error"])


def backup(settings, dest: Path) -> int:
    """Copy the class's database while the server may be running (store.db.backup), and say what it holds."""
    from .store.db import FILE_NAME, StoreError
    from .store.db import backup as copy_database
    try:
        written = copy_database(settings.data_dir, dest)
    except StoreError as exc:
        print(exc, file=sys.stderr)
        return 1
    import sqlite3
    with contextlib.closing(sqlite3.connect(written)) as copy:
        students = copy.execute("SELECT count(*) FROM students WHERE removed_at IS NULL").fetchone()[0]
        submissions = copy.execute("SELECT count(*) FROM submissions").fetchone()[0]
    print(f"{written}: {students} students on the roster, {submissions} submissions "
          f"(to restore: stop the server, put this file at {Path(settings.data_dir) / FILE_NAME}, "
          "and remove the -wal and -shm files beside it)")
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m playground", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="action", required=True)
    p_list = sub.add_parser("list", help="the kernels, their parameters, spaces and presets")
    p_list.add_argument("--json", action="store_true")
    for action, text in (("describe", "a kernel's parameters, read from its source (no GPU needed)"),
                         ("compile", "compile to CUDA/PTX (no GPU needed)"), ("run", "compile, verify and time"),
                         ("tune", "search the tile space on this GPU"), ("sweep", "time across problem sizes"),
                         ("ir", "the IR after each lowering pass that changed it (no GPU needed)"),
                         ("profile", "Nsight Compute over one launch: stall reasons per TileLang line"),
                         ("memcheck", "compute-sanitizer memcheck and racecheck on the check shapes")):
        p = sub.add_parser(action, help=text)
        p.add_argument("kernel", help="a kernel of the catalogue, or the path of any TileLang file")
        p.add_argument("--source", type=Path, help="an edited copy of the kernel file")
        p.add_argument("--entry", help="which kernel of a file that defines several (its function's name)")
        p.add_argument("--set", dest="sets", action="append", default=[], metavar="NAME=VALUE",
                       help="a parameter: a problem size, dtype, a tile parameter or preset=LABEL")
        p.add_argument("--params", help="parameters as a JSON object (merged under --set)")
        p.add_argument("--arch", help="target, e.g. sm_90a (default: the GPU present, else sm_90a)")
        p.add_argument("--workdir", help="where edited sources are written (default: the cache folder)")
        p.add_argument("--timeout", type=float, help="seconds before the job stops with a timeout error")
        p.add_argument("--json", action="store_true")
        if action == "run":
            p.add_argument("--seed", type=int)
            p.add_argument("--graph", action="store_true", help="time CUDA-graph replays (microsecond kernels)")
        if action == "tune":
            from .engine.tune import DEFAULT_MAX_CONFIGS
            p.add_argument("--max-configs", type=int, default=DEFAULT_MAX_CONFIGS)
    from .engine.bench import add_arguments as add_bench
    add_bench(sub.add_parser("bench", help="every kernel against its baselines and the GPU's ceilings"))
    p_backup = sub.add_parser("backup", help="a copy of the class's database (PLAYGROUND_DATA), safe while the "
                                             "server runs")
    p_backup.add_argument("dest", type=Path, help="the file to write, e.g. backup-2027-01-15.sqlite3")
    args = parser.parse_args(argv)
    from .settings import Settings
    settings = Settings.from_env()
    settings.install()  # the one read of the environment; the engine asks `current()` from here on

    if args.action == "backup":
        return backup(settings, args.dest)

    if args.action == "list":
        from .engine.kernel import builtin_names, load
        kernels = [load(n).describe() for n in builtin_names()]
        if args.json:
            print(json.dumps(jsonable(kernels), indent=1))
        else:
            for k in kernels:
                print(f"{k['name']:16} {k['description']}")
        return 0
    if args.action == "bench":
        from .engine.bench import main as bench_main
        return bench_main(args)

    try:
        params = json.loads(args.params) if args.params else {}
        params.update(parse_sets(args.sets))
        if args.entry:
            params["entry"] = args.entry
        from .engine.source import read_source
        source = read_source(args.source) if args.source else None
    except (OSError, ValueError, StageError) as exc:
        err = exc if isinstance(exc, StageError) else StageError("parameters", str(exc))
        result = failed(err, args.action, args.kernel)
    else:
        options = {k: getattr(args, k) for k in ("seed", "graph", "max_configs") if hasattr(args, k)}
        if args.action in ("profile", "memcheck"):
            options["timeout"] = args.timeout  # the tools run as child processes the alarm cannot reach
        if not args.json:
            options["progress"] = lambda what, frac, *_: print(f"[{frac:4.0%}] {what}", file=sys.stderr)
        with time_limit(args.timeout):
            try:
                result = execute(args.action, args.kernel, source, params, args.arch, args.workdir, **options)
            except StageError as err:  # the alarm can fire outside execute's own handler
                result = failed(err, args.action, args.kernel)
    if args.json:
        print(json.dumps(result))
    else:
        print_human(result)
    return 0 if result.get("ok") else 1
