"""Compile many configurations of one kernel at once, one process per CPU core.

TileLang's lowering holds the GIL and nvcc is a child process, so processes (not threads) are what use the cores.
Each worker compiles into TileLang's kernel cache (TILELANG_CACHE_DIR); the parent then loads every kernel from that
cache in milliseconds. The edited source is written to the same content-addressed path in every process, so the
`#line` directives, and with them TileLang's cache keys, agree.
"""
from __future__ import annotations

import contextlib
import hashlib
import json
import multiprocessing
import sys
from concurrent.futures import ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from typing import Callable

from . import limits
from .compile import block_threads, explain, launch_info, make_prim_func, resolve_arch, tilelang_error
from .errors import StageError
from .kernel import Config, Kernel, load_file

CACHED_PASS_CONFIGS = {"tl.emit_line_directives": True}


def build_jit(kernel: Kernel, config: Config, arch: str | None):
    """A runnable kernel through TileLang's cache: the fast path once a worker (or an earlier job) compiled it."""
    import tilelang
    arch = resolve_arch(arch)
    prim_func = make_prim_func(kernel, config)
    limits.before_lowering(prim_func, arch, str(kernel.path), kernel.source)
    try:
        with contextlib.redirect_stdout(sys.stderr), \
                limits.while_lowered(arch, limits.shared_buffers(prim_func), str(kernel.path), kernel.source):
            jit = tilelang.compile(prim_func, target={"kind": "cuda", "arch": arch}, pass_configs=CACHED_PASS_CONFIGS)
    except StageError:
        raise
    except Exception as exc:
        raise explain(tilelang_error(exc, str(kernel.path)), kernel, prim_func, arch) from None
    # What cannot launch (shared memory, threads) fails here, as in the full compile, not as a refused launch.
    launch = launch_info(jit, config.problem)
    if (threads := block_threads(launch)) is not None:
        limits.check({"shared_bytes": launch.get("dynamic_shared_bytes"), "threads": threads},
                     arch, limits.shared_buffers(prim_func), str(kernel.path), kernel.source)
    return jit


def kernel_identity(jit) -> str:
    """A hash of what runs: the generated CUDA and the host code that checks the arguments and launches it (grid,
    block, shared memory). Two configs with the same identity are the same kernel (a parameter the schedule ignores
    at this size, such as softmax's num_stages for rows held whole), so one measurement answers for both."""
    text = jit.get_kernel_source() + "\n" + jit.get_host_source()
    return hashlib.sha256(text.encode()).hexdigest()[:20]


def _answer(error: StageError | None = None, identity: str | None = None) -> dict:
    """What compile_all answers for one config: {"error": a StageError's JSON or None, "identity": its
    kernel_identity, or None}."""
    return {"error": error.to_json() if error else None, "identity": identity}


def _compile_one(name: str, path: str, config: dict, arch: str) -> dict:
    try:
        kernel = load_file(name, path)
        jit = build_jit(kernel, Config(config["problem"], config["dtype"], config["tile"]), arch)
        try:
            return _answer(identity=kernel_identity(jit))
        except Exception:  # no source to read (another backend): the config is simply its own kernel
            return _answer()
    except StageError as err:
        return _answer(err)
    except Exception as exc:  # a worker must answer, whatever happened
        return _answer(StageError("internal", f"{type(exc).__name__}: {exc}"))


def default_workers() -> int:
    from ..settings import current
    return current().compile_processes


def compile_all(kernel: Kernel, configs: list[Config], arch: str | None = None, workers: int | None = None,
                on_done: Callable[[int, int], None] | None = None) -> list[dict]:
    """Compile `configs` in parallel into TileLang's cache; returns, per config, its `_answer` (the error, or what
    it compiled into). A config listed twice (the benchmark measures some problems twice) is compiled once."""
    arch = resolve_arch(arch)
    keys = [json.dumps(c.to_json(), sort_keys=True) for c in configs]
    distinct = list(dict.fromkeys(keys))
    if not distinct:
        return []
    workers = min(workers or default_workers(), len(distinct))
    done: dict[str, dict] = {}
    if workers <= 1:
        for i, key in enumerate(distinct):
            done[key] = _compile_one(kernel.name, str(kernel.path), json.loads(key), arch)
            if on_done:
                on_done(i + 1, len(distinct))
        return [done[k] for k in keys]
    ctx = multiprocessing.get_context("spawn")  # fork after TileLang or CUDA initialised is unsafe
    with ProcessPoolExecutor(max_workers=workers, mp_context=ctx) as pool:
        futures = {key: pool.submit(_compile_one, kernel.name, str(kernel.path), json.loads(key), arch)
                   for key in distinct}
        for i, (key, f) in enumerate(futures.items()):
            try:
                done[key] = f.result()
            except BrokenProcessPool:
                # A compile process died (killed for memory, a crash inside the compiler): the pool is gone, so the
                # configs it had not answered get that as their error; the others keep their answers.
                done[key] = _answer(StageError(
                    "tilelang", "the compile process died before it answered (out of memory, or a crash in the "
                    "compiler); try this config alone"))
            if on_done:
                on_done(i + 1, len(distinct))
    return [done[k] for k in keys]
