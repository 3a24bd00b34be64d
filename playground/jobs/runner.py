"""Start one worker process per job, feed it the request, relay its progress, and bound it in time and output."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Callable

from ..errors import StageError, clip

ROOT = Path(__file__).resolve().parents[2]
TIMEOUTS = {"compile": 120.0, "run": 300.0, "tune": 900.0, "sweep": 600.0}  # seconds, whole job
STDERR_LIMIT = 64 * 1024  # bytes of the job's own chatter kept for the error log
RESULT_LIMIT = 16 * 1024 * 1024  # bytes: a larger answer is an error, not something to send to a browser


def _error(action: str, kernel: str, stage: str, message: str, log: str = "") -> dict:
    return {"ok": False, "kernel": kernel, "action": action, "error": StageError(stage, message, None, clip(log)).to_json()}


def _kill_group(proc: subprocess.Popen) -> None:
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass


def run_job(action: str, kernel: str, source: str | None = None, params: dict | None = None, *,
            arch: str | None = None, options: dict | None = None, timeout: float | None = None,
            on_progress: Callable[[str, float], None] | None = None) -> dict:
    timeout = timeout or TIMEOUTS.get(action, 300.0)
    with tempfile.TemporaryDirectory(prefix="playground-job-") as workdir:
        request = {"action": action, "kernel": kernel, "source": source, "params": params or {}, "arch": arch,
                   "workdir": workdir, "options": options or {}}
        env = {**os.environ, "PYTHONPATH": str(ROOT), "PYTHONUNBUFFERED": "1"}
        proc = subprocess.Popen([sys.executable, "-m", "playground.jobs.worker"], cwd=workdir, env=env,
                                stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                start_new_session=True)  # its own process group: a kill reaches nvcc too
        stderr_tail = bytearray()

        def drain_stderr():
            for chunk in iter(lambda: proc.stderr.read(4096), b""):
                stderr_tail.extend(chunk)
                del stderr_tail[:-STDERR_LIMIT]
        threading.Thread(target=drain_stderr, daemon=True).start()
        timer = threading.Timer(timeout, _kill_group, [proc])
        timer.start()
        result, received = None, 0
        started = time.monotonic()
        try:
            proc.stdin.write(json.dumps(request).encode())
            proc.stdin.close()
            for line in proc.stdout:
                received += len(line)
                if received > RESULT_LIMIT:
                    _kill_group(proc)
                    return _error(action, kernel, "internal", "the job's answer was larger than the limit")
                try:
                    msg = json.loads(line)
                except ValueError:
                    continue
                if "progress" in msg and on_progress:
                    on_progress(msg["progress"]["what"], msg["progress"]["fraction"])
                elif "result" in msg:
                    result = msg["result"]
            proc.wait()
        finally:
            timer.cancel()
            _kill_group(proc)  # nothing the job started outlives it
        log = stderr_tail.decode(errors="replace")
        if result is not None:
            return result
        if time.monotonic() - started >= timeout - 0.5:
            return _error(action, kernel, "timeout", f"the {action} job ran past its {timeout:g} s limit and was "
                                                     "stopped", log)
        return _error(action, kernel, "internal", f"the job ended without an answer (exit status "
                                                  f"{proc.returncode})", log)
