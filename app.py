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
import time
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


class StopRequest:
    """What SIGTERM (`docker stop`, service managers) and SIGINT (Ctrl-C) do: ask the server to stop.

    The first signal only records the request; the main thread acts on it once the page is up (or at once, if it
    already is). Raising KeyboardInterrupt from the handler instead, as Python does by default, lets the stop land
    anywhere: CI saw it swallowed inside an event loop's `__del__` ("Exception ignored", the server kept running) and
    end the process by SIGINT after it had been handled (status -2). A second signal does not wait: it raises
    KeyboardInterrupt as Ctrl-C always has, for a start-up that hangs. SIGINT gets a handler even where it started
    ignored (a server started as a background job of a non-interactive shell inherits SIGINT ignored); SIGTERM
    would otherwise end Python at once, and PID 1 in a container ignores it."""

    def __init__(self) -> None:
        self.signals: list[str] = []

    def __call__(self, signum, frame) -> None:
        self.signals.append(signal.Signals(signum).name)
        if len(self.signals) > 1:
            raise KeyboardInterrupt

    @property
    def requested(self) -> bool:
        return bool(self.signals)

    def install(self) -> "StopRequest":
        signal.signal(signal.SIGTERM, self)
        signal.signal(signal.SIGINT, self)
        return self

    def wait(self, poll_s: float = 0.2) -> None:
        # A sleep, not a lock: the handler runs between bytecodes of this loop and only appends to a list.
        while not self.requested:
            time.sleep(poll_s)


def main(argv=None) -> None:
    args = parse_args(argv)
    stop = StopRequest().install()
    demo = None
    try:
        from playground.ui import serve
        from playground.ui.server import password_from_env
        password = password_from_env()
        print(f"TileLang Playground on http://{args.host}:{args.port}/"
              + (" (password login on)" if password else ""), flush=True)
        demo, _, _ = serve(args.host, args.port, password, prevent_thread_lock=True)
        stop.wait()
        print(f"{stop.signals[0]}: closing the server.", flush=True)
    except KeyboardInterrupt:  # a second stop signal while starting or closing
        print("Stopped; closing the server.", flush=True)
    finally:
        # Close the page, then return normally: the job layer's exit handler stops its workers and removes their
        # folders as the interpreter exits.
        if demo is not None:
            demo.close()


if __name__ == "__main__":
    main()
