"""The class's exercises: one folder each under exercises/ (statement.md, starter.py, reference.py, exercise.toml),
read again at each use so that a folder the teacher adds is served at once; and each exercise's deadline, late window
and points.

exercise.toml holds, besides the problems (README: Teaching a class):

    deadline = 2026-03-01T23:59:00+01:00   # a TOML date-time with its offset (or the same as a string); none: open
    late_hours = 48                        # after the deadline, submissions are taken this long more ...
    late_penalty = 0.25                    # ... and their score loses this share of the points
    points = 10                            # what an accepted submission scores (the grades file)
    agents = false                         # agents' submissions (MCP clients with a student's token) refused, and
                                           # off the board; true (the default): taken, and marked as an agent's
"""
from __future__ import annotations

import datetime as dt
import json
import logging
import tomllib
from dataclasses import dataclass
from pathlib import Path

log = logging.getLogger("playground.course")
ROOT = Path(__file__).resolve().parents[2]
EXERCISES_DIR = ROOT / "exercises"
POINTS = 10.0  # an exercise's points when its exercise.toml names none


class ExerciseError(ValueError):
    pass


def parse_time(value, what: str = "a time") -> float:
    """A time as seconds since the epoch, from a TOML date-time with an offset, or text in ISO 8601
    ("2026-03-01T23:59:00+01:00", "2026-03-01 23:59Z"); text without an offset is UTC. A date alone is its end
    (23:59:59 UTC). A TOML date-time without an offset is refused: which zone it is in would be a guess."""
    if isinstance(value, dt.datetime):
        if value.tzinfo is None:
            raise ExerciseError(f"{what} needs its offset from UTC (2026-03-01T23:59:00+01:00, or Z for UTC)")
        return value.timestamp()
    if isinstance(value, dt.date):
        return dt.datetime.combine(value, dt.time(23, 59, 59), dt.timezone.utc).timestamp()
    text = str(value or "").strip()
    if not text:
        raise ExerciseError(f"{what} is empty: write a date and time such as 2026-03-01 23:59 (UTC)")
    try:
        parsed = dt.datetime.fromisoformat(text.replace("Z", "+00:00").replace("z", "+00:00"))
    except ValueError:
        raise ExerciseError(f"{what} {text[:40]!r} is no date and time: write it as 2026-03-01 23:59 (UTC) or "
                            "2026-03-01T23:59:00+01:00") from None
    if len(text) <= 10:  # a date alone
        parsed = dt.datetime.combine(parsed.date(), dt.time(23, 59, 59))
    if parsed.tzinfo is None:
        parsed = parsed.replace(tzinfo=dt.timezone.utc)
    return parsed.timestamp()


def time_text(when: float | None, zone: dt.tzinfo | None = None) -> str:
    """A time as the page shows it: "2026-03-01 22:59 UTC", or in the zone the teacher wrote the deadline in with
    UTC beside it: "2026-03-01 23:59 +01:00 (22:59 UTC)"."""
    if when is None:
        return ""
    utc = dt.datetime.fromtimestamp(when, dt.timezone.utc)
    local = utc.astimezone(zone) if zone is not None else utc
    if local.utcoffset() in (None, dt.timedelta(0)):
        return utc.strftime("%Y-%m-%d %H:%M UTC")
    offset = local.strftime("%z")
    return (f"{local.strftime('%Y-%m-%d %H:%M')} {offset[:3]}:{offset[3:]} "
            f"({utc.strftime('%H:%M' if utc.date() == local.date() else '%Y-%m-%d %H:%M')} UTC)")


def zone_of(value) -> dt.tzinfo | None:
    """The offset a TOML date-time of exercise.toml was written with (None for UTC, a date alone or text)."""
    return value.tzinfo if isinstance(value, dt.datetime) else None


def iso(when: float | None) -> str | None:
    return None if when is None else dt.datetime.fromtimestamp(when, dt.timezone.utc).isoformat()


@dataclass(frozen=True)
class Exercise:
    """One folder of exercises/: statement.md, starter.py, reference.py, exercise.toml."""
    name: str
    title: str
    statement: str
    starter: str
    reference: str       # reference.py's text: make_inputs, reference, BASELINES, flops, bytes_moved
    factory: str         # the function a submission defines
    dtype: str
    visible: tuple       # problems the students see
    hidden: tuple        # problems they do not
    timed: dict          # the problem the board is timed at (public)
    target_ms: float | None
    deadline: float | None = None   # seconds since the epoch; None: no deadline
    late_hours: float = 0.0         # submissions still taken this long after the deadline ...
    late_penalty: float = 0.0       # ... their score less this share
    points: float = POINTS
    agents: bool = True             # agents' submissions taken (the teacher's switch may say otherwise)
    zone: dt.tzinfo | None = None   # the offset the deadline was written with: the page shows it in that one too

    @property
    def problems(self) -> list[dict]:
        """What the grader checks, in order: visible, hidden, then the timed problem (checked and timed)."""
        return [dict(p) for p in self.visible] + [dict(p) for p in self.hidden] + [dict(self.timed)]

    def kind(self, index: int) -> str:
        return ("visible" if index < len(self.visible) else "hidden" if index < len(self.visible) + len(self.hidden)
                else "timed")

    def due(self, extension: float | None = None) -> tuple[float | None, float | None]:
        """(the deadline, the end of the late window) for a student whose deadline is `extension` if it was
        moved; (None, None) without a deadline."""
        deadline = extension if extension is not None else self.deadline
        if deadline is None:
            return None, None
        return deadline, deadline + self.late_hours * 3600

    def standing(self, when: float, extension: float | None = None) -> str:
        """"on time", "late" (in the late window: taken, with the penalty) or "closed" (refused) at `when`."""
        deadline, late_until = self.due(extension)
        if deadline is None or when <= deadline:
            return "on time"
        return "late" if when <= late_until else "closed"

    def deadline_text(self, extension: float | None = None) -> str:
        """The deadline in a sentence for the page ("" without one)."""
        deadline, late_until = self.due(extension)
        if deadline is None:
            return ""
        moved = " (moved for you)" if extension is not None else ""
        text = f"Due {time_text(deadline, self.zone)}{moved}"
        if self.late_hours > 0:
            text += (f"; late submissions are taken until {time_text(late_until, self.zone)}, scored "
                     f"{100 * self.late_penalty:g}% less")
        return text + "."

    def public(self) -> dict:
        """What students may see: never the hidden problems, the reference or a seed."""
        deadline, late_until = self.due()
        return {"name": self.name, "title": self.title, "statement": self.statement, "starter": self.starter,
                "factory": self.factory, "dtype": self.dtype, "visible": [dict(p) for p in self.visible],
                "timed": dict(self.timed), "target_ms": self.target_ms, "hidden_count": len(self.hidden),
                "deadline": iso(deadline), "late_until": iso(late_until) if self.late_hours > 0 else None,
                "late_penalty": self.late_penalty, "points": self.points, "agents": self.agents}


def _number(config: dict, key: str, default: float, folder: str, low: float = 0.0, high: float | None = None) -> float:
    value = config.get(key, default)
    if isinstance(value, bool) or not isinstance(value, (int, float)) or value < low or \
            (high is not None and value > high):
        bound = f"from {low:g} to {high:g}" if high is not None else f"of at least {low:g}"
        raise ExerciseError(f"{folder}/exercise.toml: {key} must be a number {bound}, not {value!r}")
    return float(value)


def load_exercise(folder: Path) -> Exercise:
    folder = Path(folder)
    try:
        config = tomllib.loads((folder / "exercise.toml").read_text())
        statement = (folder / "statement.md").read_text()
        starter = (folder / "starter.py").read_text()
        reference = (folder / "reference.py").read_text()
    except (OSError, tomllib.TOMLDecodeError) as exc:
        raise ExerciseError(f"{folder.name}: {exc}") from None
    for name, text in (("starter.py", starter), ("reference.py", reference)):
        try:  # (read, never run: the students' jobs run them, in their sandbox)
            compile(text, f"{folder.name}/{name}", "exec", dont_inherit=True)
        except (SyntaxError, ValueError) as exc:
            where = f" line {exc.lineno}" if getattr(exc, "lineno", None) else ""
            raise ExerciseError(f"{folder.name}/{name}{where}: {getattr(exc, 'msg', exc)}") from None
    missing = [k for k in ("factory", "visible", "hidden", "timed") if k not in config]
    if missing:
        raise ExerciseError(f"{folder.name}/exercise.toml lacks {', '.join(missing)}")
    problems = list(config["visible"]) + list(config["hidden"]) + [config["timed"]]
    names = set(problems[0])
    for p in problems:
        if not isinstance(p, dict) or set(p) != names or not all(isinstance(v, int) and v > 0 for v in p.values()):
            raise ExerciseError(f"{folder.name}: every problem must name the same sizes ({sorted(names)}) as "
                                f"positive integers, not {p}")
    keys = [json.dumps(p, sort_keys=True) for p in problems]
    if len(set(keys)) != len(keys):
        raise ExerciseError(f"{folder.name}: a problem is listed twice (visible, hidden and timed must differ)")
    deadline = (parse_time(config["deadline"], f"{folder.name}/exercise.toml: the deadline")
                if "deadline" in config else None)
    late_hours = _number(config, "late_hours", 0.0, folder.name)
    late_penalty = _number(config, "late_penalty", 0.0, folder.name, 0.0, 1.0)
    if deadline is None and ("late_hours" in config or "late_penalty" in config):
        raise ExerciseError(f"{folder.name}/exercise.toml: a late window needs a deadline")
    agents = config.get("agents", True)
    if not isinstance(agents, bool):
        raise ExerciseError(f"{folder.name}/exercise.toml: agents must be true or false, not {agents!r}")
    title = config.get("title") or statement.lstrip("# ").splitlines()[0]
    return Exercise(folder.name, str(title), statement, starter, reference, str(config["factory"]),
                    str(config.get("dtype", "float16")), tuple(config["visible"]), tuple(config["hidden"]),
                    dict(config["timed"]), float(config["target_ms"]) if "target_ms" in config else None,
                    deadline, late_hours, late_penalty, _number(config, "points", POINTS, folder.name), agents,
                    zone_of(config.get("deadline")))


# Each folder read, by what its files were when it was: the lists are asked for on many requests (the page's note
# on every own kernel's controls, each student's list), and a folder is parsed again only once a file of it changes.
_READ: dict[Path, tuple[tuple, Exercise | ExerciseError]] = {}


def _files_now(folder: Path) -> tuple:
    return tuple((f.name, st.st_mtime_ns, st.st_size) for f in sorted(folder.iterdir()) if f.is_file()
                 for st in (f.stat(),))


def _read_folder(folder: Path) -> Exercise | ExerciseError:
    """The folder's exercise, or why it is left out (logged when the folder is read, not at each look)."""
    try:
        now = _files_now(folder)
    except OSError as exc:
        return ExerciseError(f"{folder.name}: {exc}")
    kept = _READ.get(folder)
    if kept is not None and kept[0] == now:
        return kept[1]
    try:
        read: Exercise | ExerciseError = load_exercise(folder)
    except Exception as exc:  # (a file not in UTF-8, a .py too deep to parse: one folder left out, not all)
        read = exc if isinstance(exc, ExerciseError) else \
            ExerciseError(f"{folder.name}: {type(exc).__name__}: {str(exc)[:200]}")
        log.warning("exercise left out: %s", read)
    _READ[folder] = (now, read)
    return read


def load_exercises(folder: Path = EXERCISES_DIR, left_out: list[str] | None = None) -> dict[str, Exercise]:
    """Every exercise folder that loads; one that does not is left out (a teacher still writing it), and why goes to
    the log and to `left_out` (the teacher's view shows it)."""
    found = {}
    for sub in sorted(Path(folder).glob("*/exercise.toml")):
        read = _read_folder(sub.parent)
        if isinstance(read, ExerciseError):
            if left_out is not None:
                left_out.append(str(read))
            continue
        found[read.name] = read
    return found


def label(problem: dict) -> str:
    return " × ".join(f"{k}={v}" for k, v in problem.items())
