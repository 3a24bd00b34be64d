"""TileLang Playground: the web page.

    python app.py [--host 0.0.0.0] [--port 7860]
    python app.py --prewarm          # compile the shipped kernels into the data folder's compile cache, then exit

Host and port also come from GRADIO_SERVER_NAME / GRADIO_SERVER_PORT (flags win; default 0.0.0.0:7860). Set
PLAYGROUND_PASSWORD (or PLAYGROUND_PASSWORD_FILE, a file holding it) to ask for a password at login, any user name;
GET /health answers without one. Every setting: playground/settings.py (read here, once, and passed down).
"""
from __future__ import annotations

import argparse
import signal
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from playground.settings import Settings, SettingsError  # noqa: E402


def parse_args(argv=None, env=None, settings: Settings | None = None) -> argparse.Namespace:
    """The flags, with defaults from the settings (those of `env` if given, else of this process's environment)."""
    if settings is None:
        settings = Settings.from_env() if env is None else Settings.from_env(env)
    parser = argparse.ArgumentParser(description="Start the TileLang Playground web page.")
    parser.add_argument("--host", default=settings.host,
                        help="address to listen on (default: $GRADIO_SERVER_NAME or 0.0.0.0)")
    parser.add_argument("--port", type=int, default=settings.port,
                        help="port (default: $GRADIO_SERVER_PORT or 7860)")
    parser.add_argument("--prewarm", action="store_true",
                        help="compile the shipped kernels at the page's first request of each into the compile "
                             "cache of the data folder ($PLAYGROUND_DATA/compile-cache), then exit: the image's "
                             "build does, so that the first student's first compile is warm")
    return parser.parse_args(argv)


def prewarm(settings: Settings) -> int:
    """`--prewarm`: each shipped kernel compiled (or found kept), one line each; 1 if any failed."""
    from playground.jobs import shutdown, start
    from playground.ui import gateway
    start(settings)
    try:
        answers = gateway.prewarm(settings, wait=True)
    finally:
        shutdown()
    for answer in answers:
        how = "kept" if answer.get("ok") else f"FAILED: {(answer.get('error') or {}).get('message')}"
        print(f"pre-warm: {answer.get('kernel') or '?'} ({answer.get('arch') or '?'}): {how}", flush=True)
    return 0 if answers and all(a.get("ok") for a in answers) else 1


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
    try:
        settings = Settings.from_env().install()  # the one read of the environment; passed down from here
        args = parse_args(argv, settings=settings)
        password = settings.login_password()  # before the page is built: a bad password file stops at once
    except SettingsError as exc:
        sys.exit(f"TileLang Playground: not started: {exc}")
    if args.prewarm:
        sys.exit(prewarm(settings))
    stop = StopRequest().install()
    demo = None
    try:
        from playground.ui import serve
        print(f"TileLang Playground on http://{args.host}:{args.port}/"
              + (" (password login on)" if password else ""), flush=True)
        demo, _, _ = serve(args.host, args.port, password, prevent_thread_lock=True, settings=settings)
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
