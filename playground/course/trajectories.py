"""How students got there, per exercise: every compile and run a student did on it (the store's activity) and every
submission, read as each student's path: when they started, when their first correct submission came and how long
that took, their speed over time, and who is stuck (many errors since their last success, nothing accepted).

Plain data in and out: the page draws the lines (playground/ui/classroom.py, with plotly as its other charts)."""
from __future__ import annotations

import statistics

STUCK_ERRORS = 5  # failed compiles, runs and submissions in a row (since the last success) that make a student stuck


def trajectories(activity: list[dict], submissions: list[dict], names: dict[str, str] | None = None) -> dict:
    """{"students": [{"student", "started", "first_correct", "minutes_to_correct", "events", "errors",
    "failures_in_a_row", "accepted", "best_sol_percent", "best_ms", "stuck", "last_error", "points": [{"time",
    "kind", "ok", "sol_percent", "median_ms"}]}], "median_minutes_to_correct", "stuck": [names]}.
    `activity` is the store's rows of one exercise, `submissions` its submissions (any order)."""
    events: dict[str, list[dict]] = {}
    for a in activity:
        events.setdefault(a["student"], []).append(
            {"time": a["created_at"], "kind": a["action"], "ok": bool(a["ok"]), "stage": a.get("stage"),
             "message": a.get("message") or "", "median_ms": a.get("median_ms"), "sol_percent": a.get("sol_percent")})
    for s in submissions:
        accepted = s["status"] == "accepted" and not s.get("flag")
        events.setdefault(s["student"], []).append(
            {"time": s["created_at"], "kind": "submission", "ok": accepted, "stage": None if accepted else "refused",
             "message": s.get("message") or "", "median_ms": s.get("median_ms") if accepted else None,
             "sol_percent": s.get("sol_percent") if accepted else None, "submission": s["id"]})
    students = []
    for student, evs in sorted(events.items()):
        evs.sort(key=lambda e: e["time"])
        started = evs[0]["time"]
        correct = [e for e in evs if e["kind"] == "submission" and e["ok"]]
        first = correct[0]["time"] if correct else None
        in_a_row = 0
        for e in reversed(evs):
            if e["ok"]:
                break
            in_a_row += 1
        errors = [e for e in evs if not e["ok"]]
        timed = [e for e in evs if e["ok"] and (e["sol_percent"] or e["median_ms"])]
        sols = [e["sol_percent"] for e in correct if e["sol_percent"]]
        times = [e["median_ms"] for e in correct if e["median_ms"]]
        students.append({
            "student": student, "shown_as": (names or {}).get(student, student), "started": started,
            "first_correct": first, "minutes_to_correct": None if first is None else (first - started) / 60,
            "events": len(evs), "errors": len(errors), "failures_in_a_row": in_a_row, "accepted": len(correct),
            "best_sol_percent": max(sols) if sols else None, "best_ms": min(times) if times else None,
            "stuck": not correct and in_a_row >= STUCK_ERRORS,
            "last_error": next(({"stage": e["stage"], "message": e["message"][:200], "time": e["time"]}
                                for e in reversed(evs) if not e["ok"]), None),
            "points": [{k: e.get(k) for k in ("time", "kind", "ok", "sol_percent", "median_ms")} for e in timed]})
    waits = [s["minutes_to_correct"] for s in students if s["minutes_to_correct"] is not None]
    return {"students": students, "median_minutes_to_correct": statistics.median(waits) if waits else None,
            "stuck": [s["student"] for s in students if s["stuck"]]}
