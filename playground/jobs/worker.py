"""One job in its own sandboxed process, started before its request arrives (see pool.py) and used once.

    argv:     --job-dir PATH (its folder, as it sees it) [--uid UID] (a root server's job uid) [--gpu] (a GPU job: no
              address-space bound) [--nice N] (how far it yields the CPU)
    env:      the job's settings (sandbox.job_env: its limits, its cache folder), read by Settings.from_env
    started:  drops to its job uid, sets its bounds (limits.apply_rlimits, set_nproc), imports torch + TileLang
              (the 3-4 s a cold job would otherwise pay after the click), then says {"ready": true} and waits
    stdin:    one request line (JSON): action, kernel, source, params, arch, options, timeout, ask_server; then,
              where ask_server is true, a reply line to each question of the job's: {"tir": {"answer", "spans"} or
              null} to its TIR, {"nvcc": {...} or null} to its partial answer
    stdout:   {"progress": {"what", "fraction"}} lines, a compile's {"tir": {"digest", "spans"}} (before lowering),
              {"partial": {...}} (its CUDA and line map, the moment lowering ends) and {"made": {"cubin_b64"}} (nvcc
              ran), then exactly one {"result": {...}}

Everything else the job prints (the user's print(), TileLang's logs, nvcc) goes to stderr: fd 1 is pointed at fd 2
before any user code runs, so even output from C code cannot corrupt the protocol.
"""
from __future__ import annotations

import argparse
import json
import os
import sys


def drop_privileges(uid: int | None) -> None:
    """A root server's sandbox starts us as root with only CAP_SETUID/SETGID: become the job's own uid at once."""
    if uid is not None and os.geteuid() == 0:
        os.setgroups([])
        os.setgid(uid)
        os.setuid(uid)
    if os.geteuid() == 0 and uid is not None:
        raise SystemExit("could not leave root")


class ServerCacheClient:
    """The engine's ServerCache (engine/compile.py) over this job's pipes: the kernel's TIR and its partial answer go
    to the server, and where the request asked, the server's replies (an answer it keeps for that TIR, nvcc's output
    it keeps for that CUDA, or null) are read back, one line each."""

    def __init__(self, send, replies):
        self.send, self.replies = send, replies

    def _ask(self, what: str, question: dict, reply_of: str):
        self.send({what: question})
        if self.replies is None:
            return None
        try:
            reply = json.loads(self.replies.readline() or "null")
        except (OSError, ValueError):
            return None
        return reply.get(reply_of) if isinstance(reply, dict) else None

    def lowered_before(self, tir: dict):
        return self._ask("tir", tir, "tir")

    def lowered(self, partial: dict):
        return self._ask("partial", partial, "nvcc")

    def compiled(self, made: dict) -> None:
        self.send({"made": made})


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m playground.jobs.worker")
    parser.add_argument("--job-dir", required=True)
    parser.add_argument("--uid", type=int)
    parser.add_argument("--gpu", action="store_true")
    parser.add_argument("--nice", type=int, default=0)
    args = parser.parse_args(argv)
    drop_privileges(args.uid)
    os.chdir(args.job_dir)
    from playground.settings import Settings
    from playground.jobs.limits import apply_rlimits, set_nproc
    settings = Settings.from_env().install()  # what the server handed this job: its limits, its cache folder
    apply_rlimits(settings, args.gpu, args.nice)  # before any user code: every process of the job inherits them
    set_nproc(settings.processes)
    protocol = os.fdopen(os.dup(1), "w", buffering=1)
    os.dup2(2, 1)
    sys.stdout = sys.stderr

    def send(obj: dict) -> None:
        protocol.write(json.dumps(obj) + "\n")
        protocol.flush()

    # The warm part: what every job needs, imported before the user is waiting.
    import torch  # noqa: F401
    import tilelang  # noqa: F401
    from playground.engine.actions import execute, time_limit
    from playground.engine.answers import failed
    from playground.engine.errors import StageError
    import playground.engine.compile, playground.engine.run, playground.engine.tune, playground.engine.sweep  # noqa: F401,E401
    playground.engine.compile.remember_lowering_context()  # (before any user code: what it may change)
    send({"ready": True, "pid": os.getpid()})

    requests = os.fdopen(os.dup(0), "r")  # the server's lines: the request, and the reply to a partial answer
    line = requests.readline()
    if not line:
        return 0  # the server shut down or retired this worker unused
    request = json.loads(line)

    def progress(what: str, fraction: float, *_) -> None:
        send({"progress": {"what": str(what)[:200], "fraction": float(fraction)}})

    action, kernel = request["action"], request["kernel"]
    workdir = os.path.join(args.job_dir, "src")
    server = ServerCacheClient(send, requests if request.get("ask_server") else None) if action == "compile" else None
    try:
        with time_limit(request.get("timeout")):
            result = execute(action, kernel, request.get("source"), request.get("params") or {},
                             request.get("arch"), workdir, progress=progress, server_cache=server,
                             **(request.get("options") or {}))
    except StageError as err:  # the alarm fired outside execute's own handler
        result = failed(err, action, kernel)
    send({"result": result})
    sys.stderr.flush()
    os._exit(0)  # threads or atexit handlers the user's code left behind must not hold the job open


if __name__ == "__main__":
    sys.exit(main())
