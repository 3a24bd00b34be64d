"""The page served from a GPU machine, driven over HTTP the way its buttons drive it.

    .venv/bin/python tests/gpu/page_on_gpu.py OUTDIR        # e.g. bench/page-h200

Starts `app.py` as a real server (its job queue, workers and sandbox included), checks that `/health` and the page
itself answer, then calls the page's named endpoints with gradio_client: compile, run, tune and sweep, as the
Compile, Run, Autotune and Sweep buttons do, and profile and memcheck as the Profile tab's two buttons do. Every answer is written to OUTDIR as JSON, with the server's log and a
one-line summary per call (`summary.txt`); the exit status is non-zero unless every call answered ok. It needs no
browser: `tests/gpu/replay_page.py` shows the recorded answers in chromium, on any machine.
"""
from __future__ import annotations

import json
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
CALLS = [  # (endpoint, kernel, params): the default problem of each kernel, as a student's first click gives it
    ("compile", "gemm", {}),
    ("run", "gemm", {}),
    ("run", "softmax", {}),
    ("run", "flash_attention", {}),
    ("run", "vector_add", {}),
    ("run", "gemm_epilogue", {}),
    ("tune", "gemm", {"max_configs": 8}),
    ("sweep", "gemm", {}),
    ("profile", "gemm", {}),
    ("memcheck", "gemm", {}),
]
REPORT_KEPT = 256 * 1024  # a recorded .ncu-rep larger than this is left out of the JSON (its size is kept)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def get(url: str) -> tuple[int, str]:
    with urllib.request.urlopen(url, timeout=10) as r:
        return r.status, r.read().decode()


def main(out: Path) -> int:
    out.mkdir(parents=True, exist_ok=True)
    port = free_port()
    url = f"http://127.0.0.1:{port}/"
    log = open(out / "server.log", "w")
    server = subprocess.Popen([sys.executable, str(ROOT / "app.py"), "--host", "127.0.0.1", "--port", str(port)],
                              stdout=log, stderr=subprocess.STDOUT, cwd=ROOT)
    summary = []
    try:
        started = time.monotonic()
        while True:
            try:
                status, health = get(url + "health")
                if status == 200:
                    break
            except OSError:
                pass
            if server.poll() is not None or time.monotonic() - started > 180:
                print("the server did not come up; see server.log")
                return 1
            time.sleep(1)
        print(f"server up in {time.monotonic() - started:.1f} s; /health: {health}")
        (out / "health.json").write_text(health)
        status, page = get(url)
        print(f"GET / → {status}, {len(page)} bytes of page")

        from gradio_client import Client
        client = Client(url, verbose=False)
        for action, kernel, params in CALLS:
            t0 = time.monotonic()
            result = client.predict(kernel, "", params, api_name=f"/{action}")
            seconds = time.monotonic() - t0
            if len(result.get("report_b64") or "") > REPORT_KEPT:
                result["report_b64_left_out"] = len(result.pop("report_b64"))
            (out / f"{action}_{kernel}.json").write_text(json.dumps(result, indent=1))
            err = result.get("error") or {}
            line = f"{action:8} {kernel:16} ok={result.get('ok')!s:5} {seconds:6.1f} s"
            if result.get("timing"):
                line += f"  median {result['timing']['median_ms']:.4f} ms"
                best = max((b.get("speedup", 0) for b in (result.get("baselines") or {}).values()), default=0)
                line += f"  best baseline ratio {best:.2f}"
            if err:
                line += f"  {err.get('stage')}: {str(err.get('message'))[:120]}"
            print(line, flush=True)
            summary.append(line)
        (out / "summary.txt").write_text("\n".join(summary) + "\n")
        return 0 if all("ok=True" in s for s in summary) else 1
    finally:
        server.terminate()
        try:
            server.wait(20)
        except subprocess.TimeoutExpired:
            server.kill()


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    sys.exit(main(Path(sys.argv[1])))
