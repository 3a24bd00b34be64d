"""TileLang Playground: the web page.

    python app.py [--host 0.0.0.0] [--port 7860]

Host and port also come from GRADIO_SERVER_NAME / GRADIO_SERVER_PORT (flags win; default 0.0.0.0:7860). Set
PLAYGROUND_PASSWORD (or PLAYGROUND_PASSWORD_FILE, a file holding it) to ask for a password at login, any user name;
GET /health answers without one.
"""
from __future__ import annotations

import argparse
import os
import signal
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))


def parse_args(argv=None, env=None) -> argparse.Namespace:
    env = os.environ if env is None else env
    parser = argparse.ArgumentParser(description="Start the TileLang Playground web page.")
    parser.add_argument("--host", default=env.get("GRADIO_SERVER_NAME") or "0.0.0.0",
                        help="address to listen on (default: $GRADIO_SERVER_NAME or 0.0.0.0)")
    parser.add_argument("--port", type=int, default=int(env.get("GRADIO_SERVER_PORT") or 7860),
                        help="port (default: $GRADIO_SERVER_PORT or 7860)")
    return parser.parse_args(argv)


def stop_like_ctrl_c() -> None:
    """`docker stop` and service managers send SIGTERM, which by default ends Python at once (and PID 1 in a container
    ignores it): take it as Ctrl-C instead, so that Gradio closes and the job layer's exit handler stops its workers
    and removes their folders. SIGINT gets Python's handler back even where it started ignored (a server started as
    a background job of a non-interactive shell inherits SIGINT ignored)."""
    def interrupt(signum, frame):
        raise KeyboardInterrupt
    signal.signal(signal.SIGTERM, interrupt)
    signal.signal(signal.SIGINT, signal.default_int_handler)


def main(argv=None) -> None:
    args = parse_args(argv)
    stop_like_ctrl_c()
    try:
        from playground.ui import serve
        from playground.ui.server import password_from_env
        password = password_from_env()
        print(f"TileLang Playground on http://{args.host}:{args.port}/"
              + (" (password login on)" if password else ""), flush=True)
        serve(args.host, args.port, password)
    except KeyboardInterrupt:
        # Stopped before Gradio's own wait took over (while importing, during launch, or while the job layer starts
        # its workers): close as that wait would on Ctrl-C, then exit normally so that the exit handlers stop the
        # workers. Uncaught, Python would end by SIGINT (status -2) instead.
        print("Stopped while starting; closing the server.", flush=True)
        gradio = sys.modules.get("gradio")  # not imported yet (or half-imported when the stop came): nothing runs
        if hasattr(gradio, "close_all"):
            try:
                gradio.close_all()
            except Exception as exc:  # a half-built server: the process ends anyway
                print(f"while closing: {exc!r}", flush=True)


if __name__ == "__main__":
    main()
