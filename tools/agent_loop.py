"""An agent at the bench: the tiled-GEMM exercise solved through the playground's MCP tools, as a kernel-writing agent
would (README: Agents at the bench).

    .venv/bin/python tools/agent_loop.py                          # a local server without a login
    PLAYGROUND_TOKEN=pgt_... .venv/bin/python tools/agent_loop.py --url http://SERVER:7860

It takes the exercise's starter (list_exercises), compiles it at a few tile configurations (compile: registers,
shared memory, spills; a configuration that does not compile is dropped), times each one that compiled at the
exercise's timed size on the server's GPU (run), submits the fastest (submit: verified on the visible and hidden
shapes, timed, on the board as your agent's) and prints the agents' board (leaderboard). On a server without a GPU it
stops after the compiles, saying so. The token (made on the page, under Agents (MCP)) comes from --token or
PLAYGROUND_TOKEN; a server without a login needs none.

Exit status: 0 when the loop did what the server allows (submitted, or compiled on a server without a GPU), 1 when
nothing compiled or the submission was refused, 2 when the server could not be reached or refused the token.
"""
from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys

EXERCISE = "tiled_gemm"
# Tile configurations to try, the starter's own first (its defaults: {}). Hopper likes wide tiles and a deeper
# pipeline; the last two are smaller tiles for more blocks in flight.
CANDIDATES = [
    {},
    {"block_M": 128, "block_N": 256, "block_K": 32, "num_stages": 3, "threads": 256},
    {"block_M": 128, "block_N": 128, "block_K": 64, "num_stages": 3, "threads": 128},
    {"block_M": 64, "block_N": 128, "block_K": 32, "num_stages": 4, "threads": 128},
]


def say(text: str) -> None:
    print(text, flush=True)


async def call(session, tool: str, **arguments) -> dict:
    """One tool's answer: the engine's JSON."""
    result = await session.call_tool(tool, arguments)
    text = result.content[0].text if result.content else "{}"
    if result.isError:
        raise RuntimeError(f"{tool}: {text[:500]}")
    return json.loads(text)


def label(tile: dict) -> str:
    return ", ".join(f"{k}={v}" for k, v in tile.items()) or "the starter's own tiles"


def why(answer: dict) -> str:
    err = answer.get("error") or {}
    line = f" (line {err['line']})" if err.get("line") else ""
    return f"{err.get('stage', '?')}{line}: {str(err.get('message', ''))[:300]}"


async def loop(session, candidates: list[dict]) -> int:
    exercises = (await call(session, "list_exercises"))["exercises"]
    ex = next((e for e in exercises if e["name"] == EXERCISE), None)
    if ex is None:
        say(f"the server has no exercise {EXERCISE}: it has {', '.join(e['name'] for e in exercises) or 'none'}")
        return 1
    if ex.get("agents") is False:
        say(f"{ex['title']}: the teacher does not take agents' submissions on it; stopping.")
        return 1
    starter, dtype = ex["starter"], ex["dtype"]
    visible, timed = ex["visible"][0], ex["timed"]
    say(f"{ex['title']}: the factory {ex['factory']}, {dtype}, timed at {timed}")

    compiled = []
    for tile in candidates:
        answer = await call(session, "compile", kernel="", source=starter,
                            params={**visible, "dtype": dtype, **tile}, lines=0)
        if not answer.get("ok"):
            say(f"  compile, {label(tile)}: refused, {why(answer)}")
            continue
        r = answer.get("resources") or {}
        say(f"  compile, {label(tile)}: {r.get('registers')} registers a thread, {r.get('shared_bytes')} bytes of "
            f"shared memory, {r.get('spill_bytes') or 0} spilled ({answer.get('compile_seconds')} s)")
        compiled.append(tile)
    if not compiled:
        say("no configuration compiled; stopping.")
        return 1

    timings = []
    for tile in compiled:
        answer = await call(session, "run", kernel="", source=starter, params={**timed, "dtype": dtype, **tile},
                            lines=0)
        if not answer.get("ok") and (answer.get("error") or {}).get("stage") == "device":
            say(f"this server has no GPU: {len(compiled)} of {len(candidates)} configurations compiled, and timing "
                "and submitting need a GPU. Stopping at compile.")
            return 0
        median = ((answer.get("timing") or {}).get("median_ms")) if answer.get("ok") else None
        if median is None:
            say(f"  run, {label(tile)}: {why(answer) if not answer.get('ok') else 'no time'}")
            continue
        say(f"  run, {label(tile)}: {median:.4f} ms" + (f", {answer['tflops']:.0f} TFLOP/s"
                                                         if answer.get("tflops") else ""))
        timings.append((median, tile))
    if not timings:
        say("nothing ran; stopping.")
        return 1

    best_ms, best = min(timings, key=lambda t: t[0])
    say(f"the fastest: {label(best)} at {best_ms:.4f} ms; submitting it")
    submitted = await call(session, "submit", exercise=EXERCISE, source=starter, params=best)
    if not submitted.get("ok"):
        say(f"refused: {why(submitted)}")
        return 1
    say(f"accepted: {submitted['message']}; rank {submitted.get('rank')} among the agents' and students' entries")
    board = await call(session, "leaderboard", exercise=EXERCISE, who="agents")
    for row in board.get("rows", [])[:10]:
        say(f"  #{row['rank']} {row['student']} ({row['agent']}): {row['median_ms']:.4f} ms on {row.get('gpu')}")
    return 0


async def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description="Try tile values of the tiled-GEMM exercise through the "
                                                 "playground's MCP tools and submit the fastest.")
    parser.add_argument("--url", default=os.environ.get("PLAYGROUND_URL", "http://127.0.0.1:7860"),
                        help="the playground's address (default: $PLAYGROUND_URL or http://127.0.0.1:7860)")
    parser.add_argument("--token", default=os.environ.get("PLAYGROUND_TOKEN"),
                        help="a token made on the page (default: $PLAYGROUND_TOKEN; none for a server without a login)")
    parser.add_argument("--candidates", type=int, default=len(CANDIDATES),
                        help=f"how many of the {len(CANDIDATES)} tile configurations to try")
    args = parser.parse_args(argv)

    import httpx
    from mcp import ClientSession
    from mcp.client.streamable_http import streamable_http_client

    headers = {"Authorization": f"Bearer {args.token}"} if args.token else {}
    url = args.url.rstrip("/") + "/gradio_api/mcp/"
    # A compile may wait in the server's queue and a run takes up to minutes: a long read timeout.
    try:
        async with httpx.AsyncClient(headers=headers, timeout=httpx.Timeout(30, read=900)) as http:
            async with streamable_http_client(url, http_client=http) as (read, write, _):
                async with ClientSession(read, write) as session:
                    await session.initialize()
                    return await loop(session, CANDIDATES[:max(1, args.candidates)])
    except BaseException as exc:  # (the SDK raises inside exception groups)
        leaves = list(getattr(exc, "exceptions", ())) or [exc]
        while any(getattr(e, "exceptions", None) for e in leaves):
            leaves = [x for e in leaves for x in (getattr(e, "exceptions", None) or [e])]
        if isinstance(exc, (KeyboardInterrupt, SystemExit)):
            raise
        for e in leaves:
            response = getattr(e, "response", None)
            if response is not None and response.status_code == 401:
                try:
                    detail = str(response.json().get("detail"))
                except Exception:  # (a streamed answer not read)
                    detail = "401 Unauthorized: " + ("the token is not valid" if args.token else "a token is needed")
                say(f"the server refused the call: {detail[:300]}")
                return 2
        say(f"could not talk to {url}: {'; '.join(f'{type(e).__name__}: {e}' for e in leaves)[:500]}")
        return 2


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
