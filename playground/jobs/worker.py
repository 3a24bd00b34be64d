"""One job in its own process: read a request (JSON) on stdin, answer with JSON lines on stdout.

    {"progress": {"what": "compiling", "fraction": 0.0}}      zero or more
    {"result": {...}}                                         exactly one, last

Everything else the job prints (the user's print(), TileLang's logs, nvcc) goes to stderr: fd 1 is pointed at fd 2
before any user code runs, so even output from C code cannot corrupt the protocol.
"""
from __future__ import annotations

import json
import os
import sys


def main() -> int:
    protocol = os.fdopen(os.dup(1), "w", buffering=1)
    os.dup2(2, 1)
    sys.stdout = sys.stderr
    request = json.loads(sys.stdin.read())

    def send(obj: dict) -> None:
        protocol.write(json.dumps(obj) + "\n")
        protocol.flush()

    def progress(what: str, fraction: float, *_) -> None:
        send({"progress": {"what": what, "fraction": fraction}})

    from playground.cli import execute
    result = execute(request["action"], request["kernel"], request.get("source"), request.get("params") or {},
                     request.get("arch"), request.get("workdir"), progress=progress, **request.get("options", {}))
    send({"result": result})
    return 0


if __name__ == "__main__":
    sys.exit(main())
