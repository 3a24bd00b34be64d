"""A submission's rules, as plain functions over the grader's answers: the tile parameters it may set, what a student
may see of the verdicts (a hidden problem by number only), the refusal they read, and the grader's measurement
record as the board keeps it. The jobs themselves are run by Classroom.submit (room.py)."""
from __future__ import annotations

import json
import re

from ..engine.errors import StageError, quoted
from .access import error
from .exercises import Exercise, label

BUILD_TIMEOUT = 240.0   # seconds: the student's factory, once per problem (no compile)
GRADE_TIMEOUT = 600.0   # seconds: compile every problem's kernel, verify, time, verify again
NO_GPU = ("This server has no GPU, so it cannot take submissions: each one is verified and timed on a GPU. "
          "Compile works here; submit on the class's GPU server.")
NO_GPU_TO_CHECK = ("This server has no GPU, so it cannot check a solution: a check is verified and timed on a GPU. "
                   "Compile works here; check it on the class's GPU server.")
# What of the grade job's measurement record a submission keeps (all of it is the grader's, none the student's).
RECORD_KEYS = ("name", "capability", "multiprocessors", "memory_gib", "driver", "torch", "cuda", "tilelang",
               "clocks_mhz", "temperature_c", "power_w", "throttle_reasons", "ceilings", "measured_at")


def tile_params(ex: Exercise, params) -> tuple[dict, str | None]:
    """The tile parameters a submission sends its factory (the page's controls send text: numbers become numbers),
    or why they are refused: problem sizes and the dtype are the exercise's."""
    if params is not None and not isinstance(params, dict):
        return {}, f"params must be an object of NAME: VALUE, not {type(params).__name__}"
    params = dict(params or {})
    params.pop("arch", None)
    fixed = [k for k in params if k in ex.timed or k == "dtype"]
    if fixed:
        return {}, (f"{', '.join(fixed)} {'is' if len(fixed) == 1 else 'are'} set by the exercise; params are "
                    f"your kernel's tile parameters only")
    for k, v in params.items():
        if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]{0,63}", str(k)) or not isinstance(v, (int, float, bool, str)):
            return {}, f"parameter {quoted(k)}: a tile parameter is a name and a number, flag or word"
        if isinstance(v, str):
            try:
                params[k] = json.loads(v) if re.fullmatch(r"-?\d+(\.\d+)?|true|false", v) else v
            except ValueError:
                pass
    return params, None


def checks(ex: Exercise, verification: list[dict]) -> list[dict]:
    """The verdicts as a student may see them: a hidden problem by number only, pass or fail, no sizes."""
    out, hidden_seen = [], 0
    for v in verification:
        kind = ex.kind(int(v.get("problem", -1))) if isinstance(v.get("problem"), int) else "hidden"
        if kind == "hidden":
            hidden_seen += 1
            out.append({"problem": f"hidden shape {hidden_seen}", "passed": bool(v.get("passed")),
                        "message": "ok" if v.get("passed") else "wrong result"})
        else:
            out.append({"problem": label(ex.problems[v["problem"]]), "passed": bool(v.get("passed")),
                        "rel_error": v.get("rel_error"), "message": v.get("message")})
    return out


def refusal(ex: Exercise, err: dict | None, failed: int | None, what: str) -> dict:
    """The refusal a student sees: the engine's message for a visible problem, a plain one for a hidden one. (`err`
    already has the server's paths taken out: Classroom.in_users_terms.)"""
    err = dict(err or StageError("internal", "no answer from the grader").to_json())
    message = str(err.get("message") or "")
    match = re.match(r"problem (\d+): (.*)", message, re.S)  # the build job names the problem it failed at
    if match:
        failed, message = int(match.group(1)), match.group(2)
    if failed is not None and 0 <= failed < len(ex.problems) and ex.kind(failed) == "hidden":
        kinds = {"verify": "gives a wrong result", "tilelang": "does not compile", "nvcc": "does not compile",
                 "device": "fails on the GPU", "python": "raises an exception", "timeout": "runs too long"}
        text = (f"{what}: it passes the visible shapes but {kinds.get(err.get('stage'), 'fails')} at a hidden "
                f"shape. Check sizes that are not multiples of your tiles, and tiny or odd sizes.")
        return error(err.get("stage") or "verify", text, hidden=True)
    where = f" (at {label(ex.problems[failed])})" if failed is not None and 0 <= failed < len(ex.problems) \
        and f"{label(ex.problems[failed])}" not in message else ""
    return error(err.get("stage") or "internal", f"{what}{where}: {message}", line=err.get("line"),
                 log=err.get("log") or "", hidden=False)


def positive(value) -> float | None:
    """A positive finite number from an answer, else None."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return float(value) if 0 < float(value) < float("inf") else None


def speed_of_light(answer: dict) -> float | None:
    """A measurement's speed as a percentage of its problem's speed of light on the GPU it ran on: the larger of its
    share of the measured copy bandwidth and of the measured matmul peak (the bound is whichever of bytes at copy
    speed and FLOPs at matmul speed takes longer, and the kernel's time is at least that)."""
    shares = [positive(answer.get(k)) for k in ("percent_of_copy_bandwidth", "percent_of_matmul_peak")]
    shares = [s for s in shares if s is not None]
    return max(shares) if shares else None


def measurement_record(graded: dict) -> dict:
    """The grade job's record of where and how it measured (the GPU, its clocks, temperature and throttle reasons,
    the driver, TileLang, the measured ceilings), as kept with a submission: known keys only, each cut short."""
    device = graded.get("device") if isinstance(graded.get("device"), dict) else {}
    record = {k: device[k] for k in RECORD_KEYS if k in device}
    text = json.dumps(record, default=str)
    return json.loads(text) if len(text) <= 8192 else {k: record.get(k) for k in ("name", "driver", "tilelang")}


def accepted_answer(ex: Exercise, student: str, graded: dict, checks_seen: list[dict]) -> dict:
    """The answer to an accepted submission, from the grade job's."""
    baselines = graded.get("baselines") or {}
    baseline_name = next(iter(baselines), None)
    baseline_ms = positive(baselines.get(baseline_name))
    median_ms = float(graded["median_ms"])
    record = measurement_record(graded)
    sol = speed_of_light(graded)
    gpu = str(record.get("name") or "")[:128] or None
    on = f" on {gpu}" if gpu else ""
    share = f", {sol:.0f}% of the speed of light there" if sol else ""
    return {"ok": True, "exercise": ex.name, "student": student, "median_ms": median_ms,
            "baseline": baseline_name, "baseline_ms": baseline_ms,
            "speedup": (baseline_ms / median_ms) if baseline_ms else None, "target_ms": ex.target_ms,
            "met_target": ex.target_ms is not None and median_ms <= ex.target_ms,
            "timed_at": label(ex.timed), "checks": checks_seen, "gpu": gpu, "sol_percent": sol, "record": record,
            "message": f"accepted: verified on {len(ex.visible)} visible and {len(ex.hidden)} hidden shapes "
                       f"and again after timing; {median_ms:.4f} ms at {label(ex.timed)}{on}{share}"}
