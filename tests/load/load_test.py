"""Load test: N concurrent browser sessions (gradio_client) compiling on CPU for a bounded time.

    python tests/load/load_test.py [--sessions 30] [--seconds 180] [--out bench/load.json] [--edit comment|code]
                                   [--login password|roster]

Starts `python app.py --port PORT` on the loopback, waits for /health, then runs N sessions side by side, each a
tab of its own (`Tab`: a login, a keep-alive connection, Gradio's queue protocol as the page speaks it; so a session
of its own on the server, as 30 students' tabs are; all in one event loop, light on the cores the server shares). Each session,
until the time is up, edits and compiles like a student: mostly parameter changes of the built-in vector_add (which
the class shares, so many answers come from the result cache), and every third request an edit of its own to the
source: a comment (`--edit comment`, the default: the same program laid out anew, answered from the compile cache
with its lines moved) or a line of code (`--edit code`: another program with the same TIR, a job that builds the
kernel's TIR, finds an answer kept for it and lowers nothing; bench/load-live-code.json was measured before that,
when such a job lowered and skipped only nvcc). It waits for each answer before sending the next, as a page does. The app gets a data folder (and so a
compile cache) of this run's own unless PLAYGROUND_DATA is set; it pre-warms the shipped kernels as it starts, and the
class comes once that is done and every spare worker is ready, as to a server started before the lesson.

How the class logs in: `--login password` (the default) is a class password under any name, where one person could
be many names, so the class, all behind the loopback's one address, shares the per-address limits as a lab behind
one NAT would; `--login roster` is a class for a term: the teacher imports a roster of the N students and each logs
in with the password it got, so each is held to a student's own limits only.

Counts as failed: an exception from the client, or an answer that is not ok (busy and timeouts included). Reports
p50/p95/max latency (all, cold, cached), throughput, the CPU seconds the server (with its jobs) and the load test each
used, and whether any job process or folder outlived the server.
Traffic goes to 127.0.0.1 only; the loops are bounded in count and time and stop by themselves.
"""
from __future__ import annotations

import argparse
import datetime
import json
import os
import random
import signal
import socket
import statistics
import subprocess
import sys
import time
import urllib.request
import uuid
from pathlib import Path

import psutil

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
from playground.jobs.sandbox import server_jobs_dir  # noqa: E402
UID_BASE = 64000  # a uid range of its own, apart from a developer's server and the tests
# The class logs in (any user name, this password): the per-student limits count each student by that name, and
# students behind one address (here all of them, on the loopback) would otherwise share one student's limits.
LOAD_PASSWORD = "load-test"
LOAD_TEACHER_PASSWORD = "load-test-teacher"  # the teacher imports the roster (--login roster)
VARIANTS = [{"block_N": b, "threads": t} for b in (4096, 8192, 16384) for t in (128, 256, 512)]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_app(port: int, log_path: Path, ui_concurrency: int | None = None,
              ignore_sigint: bool = False) -> subprocess.Popen:
    env = {**os.environ, "PLAYGROUND_JOB_UID_BASE": str(UID_BASE), "GRADIO_ANALYTICS_ENABLED": "False",
           "PYTHONUNBUFFERED": "1"}
    if ui_concurrency:
        env["PLAYGROUND_UI_CONCURRENCY"] = str(ui_concurrency)
    env["PLAYGROUND_PASSWORD"] = LOAD_PASSWORD
    env["PLAYGROUND_TEACHER_PASSWORD"] = LOAD_TEACHER_PASSWORD
    env.pop("PLAYGROUND_PASSWORD_FILE", None)
    log = open(log_path, "w")
    # ignore_sigint: start the app as a script's background job would (SIGINT inherited ignored)
    return subprocess.Popen([sys.executable, "app.py", "--host", "127.0.0.1", "--port", str(port)], cwd=ROOT,
                            env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
                            preexec_fn=(lambda: signal.signal(signal.SIGINT, signal.SIG_IGN)) if ignore_sigint else None)


def wait_health(port: int, timeout: float = 180) -> dict:
    """Wait until /health answers, then its details (which it gives a logged-in user only)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=5) as r:
                json.loads(r.read())
            break
        except Exception:
            time.sleep(1)
    else:
        raise RuntimeError("the app did not answer /health")
    return health_details(port)


def health_details(port: int, login: tuple[str, str] = ("load-test", LOAD_PASSWORD)) -> dict:
    import http.cookiejar
    import urllib.parse
    opener = urllib.request.build_opener(urllib.request.HTTPCookieProcessor(http.cookiejar.CookieJar()))
    form = urllib.parse.urlencode({"username": login[0], "password": login[1]}).encode()
    opener.open(f"http://127.0.0.1:{port}/login", data=form, timeout=10).read()
    with opener.open(f"http://127.0.0.1:{port}/health", timeout=10) as r:
        return json.loads(r.read())


def busy_seconds() -> tuple[float, float]:
    """CPU seconds (user + system) the whole machine and this process have used so far: the server and its jobs
    are the difference (job processes come and go, and no one process's count holds them all)."""
    t, mine = psutil.cpu_times(), psutil.Process().cpu_times()
    return t.user + t.nice + t.system + getattr(t, "irq", 0.0) + getattr(t, "softirq", 0.0), mine.user + mine.system


def wait_settled(port: int, timeout: float = 300) -> float:
    """Until the server is as a class finds it, started a while before: every spare worker ready and the pre-warm
    done (the background slot idle for 5 s); the seconds that took."""
    began = time.monotonic()
    idle_since = None
    while time.monotonic() - began < timeout:
        health = health_details(port)
        spares = list((health.get("spares") or {}).values())
        ready = all(p.get("ready", 0) >= p.get("size", 0) for p in spares)
        background = (health.get("queue") or {}).get("background") or {}
        if ready and not background.get("running") and not background.get("waiting"):
            idle_since = idle_since or time.monotonic()
            if time.monotonic() - idle_since >= 5:
                break
        else:
            idle_since = None
        time.sleep(1)
    return round(time.monotonic() - began, 1)


def percentile(values: list[float], q: float) -> float | None:
    if not values:
        return None
    values = sorted(values)
    return round(values[min(len(values) - 1, int(round(q * (len(values) - 1))))], 3)


def import_roster(url: str, names: list[str]) -> dict[str, str]:
    """The teacher imports a roster of `names` (through the page's API, as the teacher's view does): each name's
    password, from the CSV the import answers once."""
    import csv
    import io
    from gradio_client import Client
    teacher = Client(url, auth=("teacher", LOAD_TEACHER_PASSWORD), verbose=False)
    answer = teacher.predict("name\n" + "\n".join(names) + "\n", "", api_name="/teacher_roster")
    if not answer.get("ok"):
        raise RuntimeError(f"the roster was not imported: {answer}")
    return {row["name"]: row["password"] for row in csv.DictReader(io.StringIO(answer["csv"]))}


class Tab:
    """One student's browser tab, as light on the load test's own cores as a browser is on the student's machine:
    one keep-alive connection, the login's cookie, and Gradio's queue protocol as the page speaks it (join the queue,
    then read the event's messages from the session's stream until it completes). gradio_client spends about twice
    the server's CPU time on each request (a new connection per request and per stream, threads per call); 30 of
    them on the server's two cores measured the load test more than the server."""

    def __init__(self, url: str, user: str, password: str):
        import httpx
        self.url, self.user, self.password = url, user, password
        self.http = httpx.AsyncClient(base_url=url, timeout=httpx.Timeout(600.0, connect=30.0))
        self.session_hash = uuid.uuid4().hex
        self.fn_index: dict[str, int] = {}

    async def open(self) -> None:
        login = await self.http.post("login", data={"username": self.user, "password": self.password})
        login.raise_for_status()
        config = (await self.http.get("config")).json()
        self.fn_index = {d["api_name"]: d.get("id", i) for i, d in enumerate(config["dependencies"])
                         if d.get("api_name")}

    async def predict(self, api_name: str, *data):
        joined = await self.http.post("gradio_api/queue/join", json={
            "data": list(data), "fn_index": self.fn_index[api_name], "session_hash": self.session_hash,
            "event_data": None, "trigger_id": None})
        if joined.status_code == 503:
            raise RuntimeError("Gradio's queue is full")
        joined.raise_for_status()
        event = joined.json()["event_id"]
        async with self.http.stream("GET", "gradio_api/queue/data",
                                    params={"session_hash": self.session_hash}) as stream:
            async for line in stream.aiter_lines():
                if not line.startswith("data:"):
                    continue
                msg = json.loads(line[5:])
                if msg.get("event_id") != event:
                    continue
                if msg.get("msg") == "process_completed":
                    if not msg.get("success", True):
                        raise RuntimeError(f"the event failed: {msg.get('output')}")
                    return msg["output"]["data"][0]
        raise RuntimeError("the stream ended before the answer")

    async def close(self) -> None:
        await self.http.aclose()


async def session(index: int, url: str, until: float, records: list, edit: str = "comment",
                  password: str = LOAD_PASSWORD) -> None:
    import asyncio
    rng = random.Random(index)
    source = (ROOT / "kernels" / "vector_add.py").read_text()
    tab = Tab(url, f"student{index}", password)
    try:
        await tab.open()
    except Exception as exc:
        records.append({"session": index, "ok": False, "error": f"connect: {type(exc).__name__}: {exc}",
                        "seconds": 0.0})
        await tab.close()
        return
    n = 0
    while time.monotonic() < until and n < 2000:  # (bounded in count too)
        n += 1
        own_edit = n % 3 == 0
        # An edit of one's own: a comment (the same program laid out anew: the compile cache moves its lines), or
        # with --edit code a line of code (another program with the same TIR: a job builds it and lowers nothing)
        mine = f"# session {index}, edit {n}" if edit == "comment" else f"_session_{index}_edit_{n} = 0"
        text = source + f"\n{mine}\n" if own_edit else ""
        # A class opens the page at once: every session's first compile is the same one, which runs once and answers
        # the others from the result cache (however slow the machine; later requests repeat one only by chance)
        params = VARIANTS[0] if n == 1 else rng.choice(VARIANTS)
        start = time.monotonic()
        try:
            result = await tab.predict("compile", "vector_add", text, params)
            ok = bool(result.get("ok"))
            error = None if ok else result.get("error")
            # an answer that waited for another student's compile of the same request was a compile for this one
            cached = bool(result.get("cached")) and not result.get("waited_s")
        except Exception as exc:
            ok, error, cached = False, f"{type(exc).__name__}: {exc}", False
        records.append({"session": index, "ok": ok, "error": error, "cached": cached, "own_edit": own_edit,
                        "seconds": time.monotonic() - start})
        await asyncio.sleep(0)
    await tab.close()


def run_class(url: str, passwords: dict[str, str], seconds: float, edit: str) -> list:
    """Every student's tab side by side in one event loop, until `seconds` have passed (each waits for its answer
    before it sends the next, as a page does)."""
    import asyncio
    records: list = []
    until = time.monotonic() + seconds

    async def everyone():
        await asyncio.gather(*(session(i, url, until, records, edit, password)
                               for i, password in enumerate(passwords.values())))
    asyncio.run(everyone())
    return records


def job_processes() -> list[str]:
    out = []
    for p in psutil.process_iter(["cmdline", "uids"]):
        try:
            uid = p.info["uids"].real
            if UID_BASE <= uid < UID_BASE + 1000:
                out.append(" ".join(p.info["cmdline"] or [])[:100])
        except (psutil.Error, AttributeError):
            pass
    return out


def run(sessions: int, seconds: float, out: Path | None, ui_concurrency: int | None = None,
        note: str = "", edit: str = "comment", login: str = "password") -> dict:
    port = free_port()
    log_path = Path(os.environ.get("TMPDIR", "/tmp")) / f"load-app-{port}.log"
    if "PLAYGROUND_DATA" not in os.environ:  # a data folder of this run's own: the class starts cold, no roster
        import tempfile
        os.environ["PLAYGROUND_DATA"] = tempfile.mkdtemp(prefix="load-test-data-")
    app = start_app(port, log_path, ui_concurrency)
    try:
        health = wait_health(port)
        settled = wait_settled(port)
        url = f"http://127.0.0.1:{port}/"
        names = [f"student{i}" for i in range(sessions)]
        passwords = import_roster(url, names) if login == "roster" else dict.fromkeys(names, LOAD_PASSWORD)
        machine_before, mine_before = busy_seconds()
        started = time.monotonic()
        records = run_class(url, passwords, seconds, edit)
        wall = time.monotonic() - started
        machine, mine = busy_seconds()
        cpu_used = {"machine": round(machine - machine_before, 1), "load_test": round(mine - mine_before, 1),
                    "cores_seconds": round((os.cpu_count() or 1) * wall, 1)}
        health_after = health_details(port, ("teacher", LOAD_TEACHER_PASSWORD))
        app_tree = {p.pid for p in psutil.Process(app.pid).children(recursive=True)}
    finally:
        app.send_signal(signal.SIGTERM)  # as docker stop does: the app shuts down as on Ctrl-C, and the
        # job layer's atexit handler removes its spares
        try:
            app.wait(timeout=60)
        except subprocess.TimeoutExpired:
            os.killpg(app.pid, signal.SIGKILL)
            app.wait()
    time.sleep(2)
    left = job_processes() + [f"pid {pid}" for pid in app_tree if psutil.pid_exists(pid)
                              and psutil.Process(pid).status() != psutil.STATUS_ZOMBIE]
    jobs_dir = server_jobs_dir(app.pid)
    times = [r["seconds"] for r in records]
    cold = [r["seconds"] for r in records if r["ok"] and not r["cached"]]
    cached = [r["seconds"] for r in records if r["ok"] and r["cached"]]
    failed = [r for r in records if not r["ok"]]
    report = {
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "commit": subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True,
                                 text=True).stdout.strip(),
        "machine": {"cores": os.cpu_count(), "gpu": health.get("gpu"), "sandbox": health.get("sandbox"),
                    "sandbox_why": health.get("sandbox_why"), "cpu_slots": health["queue"]["cpu"]["slots"]},
        "sessions": sessions, "seconds": seconds, "ui_concurrency": ui_concurrency or "app default", "note": note, "edit": edit, "login": login, "settled_seconds": settled, "wall_seconds": round(wall, 1),
        "requests": len(records), "failed": len(failed), "failures": failed[:10],
        "cold_compiles": len(cold), "cached_answers": len(cached),
        "cpu_seconds": cpu_used,
        "throughput_per_s": round(len(records) / wall, 2) if wall else None,
        "latency_s": {"p50": percentile(times, 0.5), "p95": percentile(times, 0.95), "max": percentile(times, 1.0)},
        "cold_latency_s": {"p50": percentile(cold, 0.5), "p95": percentile(cold, 0.95), "max": percentile(cold, 1.0)},
        "cached_latency_s": {"p50": percentile(cached, 0.5), "p95": percentile(cached, 0.95)},
        "mean_s": round(statistics.mean(times), 3) if times else None,
        "server_after": {"queue": health_after.get("queue"), "cache": health_after.get("cache")},
        "leaked_processes": left,
        "leaked_job_folder": sorted(str(q.relative_to(jobs_dir)) for q in jobs_dir.rglob("*"))[:20] or jobs_dir.exists(),
        "app_log": str(log_path),
    }
    if out:
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(json.dumps(report, indent=1) + "\n")
    return report


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sessions", type=int, default=30)
    parser.add_argument("--seconds", type=float, default=180)
    parser.add_argument("--out", type=Path, default=ROOT / "bench" / "load.json")
    parser.add_argument("--ui-concurrency", type=int, help="PLAYGROUND_UI_CONCURRENCY for the app (its engine "
                        "endpoints' gradio concurrency limit)")
    parser.add_argument("--note", default="")
    parser.add_argument("--edit", choices=("comment", "code"), default="comment",
                        help="what a session's own edit adds to the source: a comment, or a line of code")
    parser.add_argument("--login", choices=("password", "roster"), default="password",
                        help="a class password under any name (one address's limits), or a roster's own logins")
    args = parser.parse_args()
    report = run(args.sessions, args.seconds, args.out, args.ui_concurrency, args.note, args.edit, args.login)
    print(json.dumps({k: v for k, v in report.items() if k != "failures"}, indent=1))
    ok = report["failed"] == 0 and not report["leaked_processes"] and not report["leaked_job_folder"]
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
