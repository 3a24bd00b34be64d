"""What the teacher takes away: every submission as CSV, every submission with its code (a zip: an index and one file
each), and the grades file a gradebook imports (Canvas and Moodle take a CSV of student and score). A student's text
in a cell never runs as a spreadsheet formula (access.spreadsheet_safe)."""
from __future__ import annotations

import csv
import io
import re
import time
import zipfile

from .access import spreadsheet_safe
from .exercises import Exercise

SUBMISSION_FIELDS = ["id", "exercise", "student", "agent", "status", "median_ms", "baseline_ms", "speedup", "gpu",
                     "sol_percent", "late", "flag", "message", "submitted_at"]


def utc(when: float | None) -> str:
    return "" if when is None else time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime(when))


def _csv(fields: list[str], rows: list[dict]) -> str:
    out = io.StringIO()
    writer = csv.DictWriter(out, fields, extrasaction="ignore")
    writer.writeheader()
    for row in rows:
        writer.writerow({k: spreadsheet_safe(v) for k, v in row.items()})
    return out.getvalue()


def submissions_csv(submissions: list[dict]) -> str:
    """One line per submission (no code), newest first."""
    return _csv(SUBMISSION_FIELDS, [{**s, "late": "yes" if s.get("late") else "", "flag": s.get("flag") or "",
                                     "agent": s.get("agent") or "",
                                     "submitted_at": utc(s["created_at"])} for s in submissions])


def file_name(submission: dict) -> str:
    """A submission's file in the code export: its number, exercise and student (and "-agent" for an agent's), in
    letters, digits, - and _."""
    student = re.sub(r"[^A-Za-z0-9_-]+", "_", submission["student"]).strip("_")[:40] or "student"
    exercise = re.sub(r"[^A-Za-z0-9_-]+", "_", submission["exercise"])[:40]
    agent = "-agent" if submission.get("agent") else ""  # (the token's name is in index.csv)
    return f"code/{submission['id']:06d}-{exercise}-{student}{agent}.py"


def code_zip(submissions: list[dict]) -> bytes:
    """Every submission with its code: index.csv (the submissions' CSV with each one's file) and code/*.py."""
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_DEFLATED) as z:
        rows = [{**s, "late": "yes" if s.get("late") else "", "flag": s.get("flag") or "",
                 "agent": s.get("agent") or "",
                 "submitted_at": utc(s["created_at"]), "file": file_name(s)} for s in submissions]
        z.writestr("index.csv", _csv(SUBMISSION_FIELDS + ["file"], rows))
        for s in submissions:
            z.writestr(file_name(s), s["source"])
    return buffer.getvalue()


def score(ex: Exercise, submissions: list[dict]) -> float:
    """A student's score on `ex` from their submissions to it: the exercise's points for an accepted one, less the
    late penalty where every accepted one came in the late window; 0 without one. Flagged submissions count for
    nothing, and so do an agent's: a grade is for the student's own work."""
    counted = [s for s in submissions if s["status"] == "accepted" and not s.get("flag") and not s.get("agent")]
    if not counted:
        return 0.0
    if any(not s.get("late") for s in counted):
        return ex.points
    return round(ex.points * (1 - ex.late_penalty), 4)


def grades(exercises: dict[str, Exercise], submissions: list[dict], students: list[str],
           removed: set[str]) -> list[dict]:
    """Per student (the roster's, and anyone else who submitted, less removed students), each exercise's score and
    the total: [{"student", <exercise>: score, ..., "total"}]."""
    names = sorted((set(students) | {s["student"] for s in submissions}) - set(removed))
    by = {}
    for s in submissions:
        by.setdefault((s["student"], s["exercise"]), []).append(s)
    out = []
    for name in names:
        row = {"student": name}
        for ex in exercises.values():
            row[ex.name] = score(ex, by.get((name, ex.name), []))
        row["total"] = round(sum(row[e] for e in exercises), 4)
        out.append(row)
    return out


def grades_csv(exercises: dict[str, Exercise], rows: list[dict]) -> str:
    """The grades as a gradebook imports them: a `student` column (the name the student logs in with: make the
    roster's names the gradebook's user names) and a column of scores per exercise (one exercise: `student,score`),
    then the total where there are several."""
    if len(exercises) == 1:
        (name,) = exercises
        return _csv(["student", "score"], [{"student": r["student"], "score": r[name]} for r in rows])
    return _csv(["student", *exercises, "total"], rows)
