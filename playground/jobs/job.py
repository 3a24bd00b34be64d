"""One sandboxed worker process from its start to its removal: spawn, hand it a request, watch it, clean up.

The watch, every WATCH_EVERY seconds while the job runs: wall clock, resident memory of all its processes, bytes in
its folder, bytes it printed. Crossing any bound kills the whole job (every process of its tree, its pid namespace,
and in uid mode every process of its uid) and answers with an error that says which bound and how to stay under it.
Nothing of a job outlives `close()`: processes are waited for (so a GPU is free again when the next job starts) and
the folder is removed.
"""
from __future__ import annotations

import concurrent.futures
import functools
import json
import logging
import os
import queue
import re
import signal
import subprocess
import sys
import threading
import time
from typing import Callable

import psutil

from ..engine.answers import failed
from ..engine.errors import StageError, clip
from ..settings import Settings, current
from . import limits, sandbox

log = logging.getLogger("playground.jobs")


class Exchange:
    """What a compile job and the server say besides its progress and its answer: the job's TIR (before lowering) to
    `known_tir` (where set), whose reply goes back to the job (an answer the server keeps for that TIR, or None); the
    job's partial answer (its CUDA and line map, the moment lowering ends) to `partial`, and where `known` is set,
    its reply to the job (nvcc's output the server keeps for that CUDA, or None); what the job sent, kept for the
    server: `tir` ({"digest", "spans"}), `lowered` (the partial) and `made` (nvcc ran: {"cubin_b64"})."""

    def __init__(self, partial: Callable[[dict], None] | None = None,
                 known: Callable[[dict], dict | None] | None = None,
                 known_tir: Callable[[dict], dict | None] | None = None):
        self.partial, self.known, self.known_tir = partial, known, known_tir
        self.tir: dict | None = None
        self.lowered: dict | None = None
        self.made: dict | None = None


# bwrap --die-with-parent (and PR_SET_PDEATHSIG in general) fires when the *thread* that started the process ends,
# not the process. Request threads and the pool's fill threads come and go, so every job is started from one thread
# that lives as long as the server.
_spawn_queue: queue.Queue = queue.Queue()
_spawn_lock = threading.Lock()
_spawner: threading.Thread | None = None


def _spawner_loop() -> None:
    while True:
        future, argv, kwargs = _spawn_queue.get()
        try:
            future.set_result(subprocess.Popen(argv, **kwargs))
        except BaseException as exc:
            future.set_exception(exc)


def _spawn(argv: list[str], **kwargs) -> subprocess.Popen:
    global _spawner
    with _spawn_lock:
        if _spawner is None:
            _spawner = threading.Thread(target=_spawner_loop, daemon=True, name="job-spawner")
            _spawner.start()
    future: concurrent.futures.Future = concurrent.futures.Future()
    _spawn_queue.put((future, argv, kwargs))
    return future.result()


def _gib(n: float) -> str:
    return f"{n / limits.GiB:g} GiB" if n >= limits.GiB else f"{n / limits.MiB:g} MiB"


# -- an answer, bounded -----------------------------------------------------------------------------------------------
# A job's answer is read into the server once, and whatever a job sends costs the server a small multiple of its size:
# the line is held once as bytes and once as text (ASCII only: the worker writes JSON with every other character
# escaped, so a raw UTF-8 byte, which would make the text four bytes a character, is no answer); a large one's values
# are counted before it is parsed (a list of 4 million empty lists is 8 MiB of JSON and 300 MiB of objects); parsed,
# each large text is cut (limits.TEXT_CAPS) before anything else sees it; and no more than LARGE_AT_ONCE large answers
# are read and parsed at once, whatever the number of jobs.
_large_answers = threading.BoundedSemaphore(limits.LARGE_AT_ONCE)
_JSON_TEXT = re.compile(r'"[^"\\]*(?:\\.[^"\\]*)*"')
_CHECKED_FROM = 64 * 1024  # lines shorter than this are parsed without counting (they cannot hold many objects)


def _give_back_freed_memory() -> None:
    """Hand the memory a large answer was read and parsed in back to the system (glibc's malloc keeps what a thread
    freed in that thread's arena, where the next large answer, read by another thread, cannot reuse it)."""
    try:
        _libc().malloc_trim(0)
    except (OSError, AttributeError):  # not glibc
        pass


@functools.lru_cache(maxsize=1)
def _libc():
    import ctypes
    return ctypes.CDLL(None)


def too_many_values(text: str) -> bool:
    """Does the JSON `text` hold more than limits.ANSWER_VALUES values? Counted without a copy of it: its strings,
    and the commas outside them (every value of a list or object but its last is followed by one)."""
    if len(text) < _CHECKED_FROM:
        return False
    values, at = 0, 0
    for string in _JSON_TEXT.finditer(text):
        values += 1 + text.count(",", at, string.start())
        if values > limits.ANSWER_VALUES:
            return True
        at = string.end()
    return values + text.count(",", at) > limits.ANSWER_VALUES


def _cut(text: str, cap: int) -> str:
    if len(text) <= cap:
        return text
    note = f"\n... (cut at {_gib(cap)})\n"
    return text[:cap - len(note)] + note


def bound_answer(value, key: str | None = None):
    """`value` (an answer, as parsed) with each large text cut where no shipped kernel's reaches, saying so: the named
    texts (cuda, ptx, sass, host, logs) at limits.TEXT_CAPS, any other at OTHER_TEXT_CAP; a file's bytes in base64
    (`..._b64`: a profile's report) are left whole. Cutting what is already cut changes nothing."""
    if isinstance(value, str):
        if key is not None and key.endswith("_b64"):
            return value
        return _cut(value, limits.TEXT_CAPS.get(key, limits.OTHER_TEXT_CAP))
    if isinstance(value, dict):
        return {k: bound_answer(v, k if isinstance(k, str) else None) for k, v in value.items()}
    if isinstance(value, list):
        return [bound_answer(v, key) for v in value]
    return value


class Job:
    def __init__(self, gpu: bool, gpu_index: int | None = None, settings: Settings | None = None,
                 nice: int | None = None):
        self.gpu, self.gpu_index = gpu, gpu_index
        # A compile's processes yield the CPU to the web server, a background job's (the pre-warm's) to students'
        # jobs too; a GPU job's run at the server's own priority (its timings are taken on the CPU's launches).
        self.nice = nice if nice is not None else (0 if gpu else limits.COMPILE_NICE)
        self.settings = settings = settings or current()
        if sandbox.mode(settings).refused:  # the sandbox is wanted and cannot be made: no worker starts
            raise sandbox.Refused(sandbox.mode(settings).refused)
        self.uids = sandbox.uid_pool(settings)
        self.uid = self.uids.take() if sandbox.use_job_uids(settings) else None
        try:
            self.dir = sandbox.make_job_dir(self.uid, settings)
        except BaseException:
            if self.uid is not None:
                self.uids.give(self.uid)
            raise
        self.created = time.monotonic()
        self.ready = threading.Event()
        self.lines: queue.Queue = queue.Queue()
        self.reply_lock = threading.Lock()  # the server's replies to the job's questions: one line at a time
        self.stderr_tail = bytearray()
        self.stderr_total = 0
        self.stdout_total = 0
        self.overflow: str | None = None  # why the job was stopped by a reader thread
        self.answer_limit = settings.result_bytes  # bytes of its answer (a profile's is more: run() sets it)
        self.large_since: float | None = None  # when its answer's line took one of the places for large answers
        self._pss_lock = threading.Lock()
        self._pss_thread: threading.Thread | None = None
        self._pss_done: int | None = None  # the last PSS sum measured, not yet looked at
        self.closed = False
        inside = sandbox.inside(self.dir, settings)
        worker = [sys.executable, "-m", "playground.jobs.worker", "--job-dir", inside, "--nice", str(self.nice)]
        if gpu:
            worker.append("--gpu")
        if self.uid is not None:
            worker += ["--uid", str(self.uid)]
        seccomp_fd = sandbox.syscall_filter_fd() if sandbox.mode(settings).kind == "bwrap" else None
        argv = sandbox.command(self.dir, worker, gpu, settings, seccomp_fd)
        try:
            self.proc = self._start(argv, inside, gpu_index, () if seccomp_fd is None else (seccomp_fd,))
        except BaseException:
            sandbox.remove_job_dir(self.dir)
            if self.uid is not None:
                self.uids.give(self.uid)
            raise
        finally:
            if seccomp_fd is not None:
                os.close(seccomp_fd)
        self.readers = [threading.Thread(target=self._read_stdout, daemon=True, name="job-stdout"),
                        threading.Thread(target=self._read_stderr, daemon=True, name="job-stderr")]
        for t in self.readers:
            t.start()

    def _start(self, argv: list[str], inside: str, gpu_index: int | None, pass_fds: tuple = ()) -> subprocess.Popen:
        # No preexec_fn: the worker sets its own bounds first thing (limits.apply_rlimits says why).
        return _spawn(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, pass_fds=pass_fds,
                      env=sandbox.job_env(inside, self.uid, gpu_index, self.settings), cwd=self.dir,
                      start_new_session=True)  # its own group: one kill reaches every child

    # -- the two pipes --------------------------------------------------------------------------------------------
    def _read_stdout(self) -> None:
        """The protocol, read in bounded chunks: the job is stopped the moment its answer passes its limit
        (`result_bytes`), so a flood without a newline costs the server at most that much memory, never the whole
        line; a line past LARGE_ANSWER waits for one of the places for large answers before it is read on."""
        pending = bytearray()
        try:
            for chunk in iter(lambda: self.proc.stdout.read1(65536), b""):
                self.stdout_total += len(chunk)
                if self.stdout_total > self.answer_limit:
                    self._stop(f"its answer was larger than {_gib(self.answer_limit)}")
                    break
                start = len(pending)
                pending.extend(chunk)
                while (end := pending.find(b"\n", start)) >= 0:
                    with memoryview(pending) as view, view[:end] as line:
                        try:
                            text = str(line, "ascii")
                        except UnicodeDecodeError:
                            text = None  # not the worker's JSON (it escapes every other character)
                    pending, start = pending[end + 1:], 0  # (the line's bytes freed before it is parsed)
                    if text is not None:
                        self._message(text)
                        del text
                    self._leave_large()
                if len(pending) > limits.LARGE_ANSWER and self.large_since is None and not self._enter_large():
                    break
        finally:
            self._leave_large()
            self.lines.put(None)  # end of stream

    def _enter_large(self) -> bool:
        """Wait for a place among the large answers read at once; False if the job was stopped or closed meanwhile
        (one that ended by itself has the rest of its answer in the pipe: it is read once a place is free)."""
        while not _large_answers.acquire(timeout=0.5):
            if self.closed or self.overflow is not None:
                return False
        self.large_since = time.monotonic()
        return True

    def _leave_large(self) -> None:
        if self.large_since is not None:
            self.large_since = None
            _give_back_freed_memory()
            _large_answers.release()

    def _message(self, text: str) -> None:
        if too_many_values(text):
            self._stop(f"its answer held more than {limits.ANSWER_VALUES} values")
            return
        try:
            msg = json.loads(text)
        except (ValueError, RecursionError):
            return
        if isinstance(msg, dict) and msg.get("ready"):
            self.ready.set()
        elif isinstance(msg, dict):
            if isinstance(msg.get("result"), dict):
                try:
                    msg["result"] = bound_answer(msg["result"])
                except RecursionError:  # nested deeper than any answer is
                    return
            self.lines.put(msg)

    def _read_stderr(self) -> None:
        for chunk in iter(lambda: self.proc.stderr.read1(65536), b""):
            self.stderr_total += len(chunk)
            self.stderr_tail.extend(chunk)
            del self.stderr_tail[:-limits.STDERR_KEPT]
            if self.stderr_total > self.settings.stderr_bytes:
                self._stop(f"it printed more than {_gib(self.settings.stderr_bytes)} (print less, or print summaries)")
                break

    def _stop(self, why: str) -> None:
        if self.overflow is None:
            self.overflow = why
        self.kill()

    def log(self) -> str:
        return self.stderr_tail.decode(errors="replace")

    def alive(self) -> bool:
        return self.proc.poll() is None and not self.closed

    # -- the watch --------------------------------------------------------------------------------------------
    def tree(self) -> list[psutil.Process]:
        try:
            return psutil.Process(self.proc.pid).children(recursive=True)
        except psutil.Error:
            return []

    @staticmethod
    def resident_bytes(tree: list[psutil.Process]) -> int:
        total = 0
        for p in tree:
            try:
                total += p.memory_info().rss
            except psutil.Error:
                pass
        return total

    @staticmethod
    def proportional_bytes(tree: list[psutil.Process], bound: int) -> int:
        """Their proportional set sizes added up (stopping once past `bound`). A page shared by k processes counts
        1/k in each, so the pages a fork shares copy-on-write with its parent count once (summed RSS counted them once
        per child: 60 sleeping forks of a 1 GiB worker looked like 60 GiB)."""
        total = 0
        for p in tree:
            total += _pss_bytes(p)
            if total > bound:
                break
        return total

    def memory_over(self, tree: list[psutil.Process], bound: int) -> bool:
        """Do the job's processes hold more than `bound` together, counted as PSS?

        RSS is never less than PSS and costs one number a process, so PSS is asked for only when the RSS sum passes
        the bound. PSS walks each process's page tables under its memory lock, which a process that keeps forking
        holds (a fork bomb made one walk take 45 s): it is measured in a thread of its own, and the watch goes on
        (counting processes, files, time) until the answer is there."""
        if self.resident_bytes(tree) <= bound:
            return False
        with self._pss_lock:
            done, self._pss_done = self._pss_done, None
            if done is not None:
                return done > bound
            if self._pss_thread is None or not self._pss_thread.is_alive():
                def measure():
                    value = self.proportional_bytes(tree, bound)
                    with self._pss_lock:
                        self._pss_done = value
                self._pss_thread = threading.Thread(target=measure, daemon=True, name="job-pss")
                self._pss_thread.start()
        return False

    def disk_bytes(self) -> int:
        total = 0
        for dirpath, dirnames, filenames in os.walk(self.dir):
            for name in filenames + dirnames:
                try:
                    total += os.lstat(os.path.join(dirpath, name)).st_blocks * 512
                except OSError:
                    pass
        return total

    def check_bounds(self) -> str | None:
        tree = self.tree()
        # RLIMIT_NPROC already stops a fork bomb from growing; this ends the job instead of letting it spin.
        if len(tree) > self.settings.processes // 2:
            return f"it started more than {self.settings.processes // 2} processes"
        memory = self.settings.gpu_memory if self.gpu else self.settings.compile_memory
        if self.memory_over(tree, memory):
            many = f" in {len(tree)} processes" if len(tree) > 8 else ""
            return f"it used more than {_gib(memory)} of memory{many} (counted once where processes share it)"
        if self.disk_bytes() > self.settings.disk:
            return f"it wrote more than {_gib(self.settings.disk)} of files"
        return None

    # -- one request ------------------------------------------------------------------------------------------
    def wait_ready(self, timeout: float) -> bool:
        deadline = time.monotonic() + timeout
        while not self.ready.wait(0.1):
            if self.proc.poll() is not None or time.monotonic() > deadline:
                return False
        return True

    def run(self, request: dict, timeout: float, on_progress: Callable[[str, float], None],
            exchange: Exchange | None = None) -> dict:
        """Hand the job its request and watch it until it answers. `exchange`: a compile's TIR goes to
        `exchange.known_tir` and its partial answer to `exchange.partial`, and where `exchange.known` is set, the
        server's replies (an answer it keeps for the job's TIR, nvcc's output it keeps for the job's CUDA) go back to
        the job, the first of each only; what the job says it made is kept in `exchange.made`."""
        action, kernel = request["action"], request["kernel"]
        ask = exchange is not None and exchange.known is not None
        # The job's own alarm fires first and names the user's line; the kill from here is the backstop.
        request = {**request, "timeout": max(1.0, timeout - limits.GRACE), "ask_server": ask}
        self.answer_limit = limits.answer_bytes(self.settings, action)
        try:
            self.proc.stdin.write((json.dumps(request) + "\n").encode())
            self.proc.stdin.flush()
            if not ask:
                self.proc.stdin.close()
        except OSError:
            pass
        deadline = time.monotonic() + timeout
        next_look = 0.0
        stage = ""  # what the job said it was doing last: a timeout names it
        while True:
            try:
                msg = self.lines.get(timeout=limits.WATCH_EVERY)
            except queue.Empty:
                msg = {}
            if msg is None:
                break
            if "progress" in msg and isinstance(msg["progress"], dict):
                p = msg["progress"]
                stage = str(p.get("what", ""))[:200]
                try:
                    on_progress(stage, float(p.get("fraction", 0.0)))
                except Exception:
                    pass
            elif "tir" in msg and exchange is not None and exchange.tir is None and exchange.lowered is None:
                self._tir(msg["tir"], exchange, ask)
            elif "partial" in msg and exchange is not None and exchange.lowered is None:
                self._partial(msg["partial"], exchange, ask)
            elif "made" in msg and exchange is not None and isinstance(msg["made"], dict):
                cubin = msg["made"].get("cubin_b64")
                if isinstance(cubin, str) and len(cubin) <= limits.CUBIN_B64_BYTES:
                    exchange.made = {"cubin_b64": cubin}
            elif "result" in msg and isinstance(msg["result"], dict):
                return with_stage(msg["result"], action, timeout, stage)
            now = time.monotonic()
            if now > deadline:
                self.kill()
                if self.overflow:  # stopped for a bound already, its processes still exiting: say which bound
                    break
                return failed(StageError("timeout", timeout_message(action, timeout, stage), None, clip(self.log())),
                              action, kernel)
            large_since = self.large_since
            if large_since is not None and now - large_since > limits.ANSWER_STALL:
                self._stop(f"its answer stalled: more than {_gib(limits.LARGE_ANSWER)} of it arrived, then not the "
                           f"rest within {limits.ANSWER_STALL:g} s")
            if now >= next_look:
                next_look = now + limits.WATCH_EVERY
                why = self.check_bounds()
                if why:
                    self._stop(why)
        self.proc.wait()
        if self.overflow:
            return failed(StageError("python", f"the job was stopped: {self.overflow}", None, clip(self.log())),
                          action, kernel)
        return failed(StageError("internal", f"the job ended without an answer ({self.exit_text()})"
                                             + _last_line(self.log()), None, clip(self.log())), action, kernel)

    def _partial(self, partial, exchange: Exchange, ask: bool) -> None:
        """A compile's partial answer (its CUDA and line map): to the page, and where the job waits for one, the
        server's reply, written from a thread of its own (a job that does not read it must not hold the watch)."""
        reply = None
        if isinstance(partial, dict):
            try:
                partial = bound_answer(partial)
            except RecursionError:
                partial = None
        if isinstance(partial, dict) and isinstance(partial.get("cuda"), str):
            exchange.lowered = partial
            if exchange.partial is not None:
                try:
                    exchange.partial(partial)
                except Exception:  # a page whose browser went away must not break the job
                    pass
            if ask:
                try:
                    reply = exchange.known(partial)
                except Exception:
                    log.exception("looking up nvcc's output for a job failed")
        if ask:
            self._reply({"nvcc": reply}, last=True)

    def _tir(self, tir, exchange: Exchange, ask: bool) -> None:
        """A compile's TIR ({"digest", "spans"}, before lowering): kept for the server, and where the job waits for
        one, the server's reply (an answer kept for that TIR, or null)."""
        spans = tir.get("spans") if isinstance(tir, dict) else None
        ok = (isinstance(tir, dict) and isinstance(tir.get("digest"), str) and len(tir["digest"]) <= 128
              and isinstance(spans, list) and len(spans) <= limits.TIR_SPANS
              and all(sp is None or (isinstance(sp, list) and len(sp) == 2 and isinstance(sp[0], str)
                                     and len(sp[0]) <= 4096 and type(sp[1]) is int) for sp in spans))
        exchange.tir = {"digest": tir["digest"], "spans": spans} if ok else {}
        reply = None
        if ok and ask and exchange.known_tir is not None:
            try:
                reply = exchange.known_tir(exchange.tir)
            except Exception:
                log.exception("looking up an answer for a job's TIR failed")
        if ask:
            self._reply({"tir": reply}, last=False)

    def _reply(self, message: dict, last: bool) -> None:
        """A reply to the job, written from a thread of its own (a job that does not read it must not hold the
        watch), one whole line at a time; after the `last` one the job's stdin is closed."""
        data = (json.dumps(message) + "\n").encode()

        def write():
            with self.reply_lock:
                try:
                    self.proc.stdin.write(data)
                    self.proc.stdin.flush()
                    if last:
                        self.proc.stdin.close()
                except (OSError, ValueError):
                    pass
        threading.Thread(target=write, daemon=True, name="job-reply").start()

    def exit_text(self) -> str:
        code = self.proc.returncode
        if code is not None and code < 0:
            return f"killed by {signal.Signals(-code).name}"
        return f"exit status {code}"

    # -- the end ----------------------------------------------------------------------------------------------
    def kill(self) -> None:
        """SIGKILL every process of the job: its tree first (in bwrap the inner init), then the outer process."""
        for p in self.tree():
            try:
                p.kill()
            except psutil.Error:
                pass
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass

    def close(self) -> None:
        """Kill, wait until no process of the job is left (its GPU memory is then free), remove its folder."""
        if self.closed:
            return
        self.closed = True
        tree = self.tree()
        self.kill()
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            pass
        _wait_gone(tree, 10)
        leftover = self.uid is not None and _kill_uid(self.uid)
        for t in self.readers:  # the pipes reach EOF once every process holding them is gone
            t.join(timeout=5)
        # A pipe whose reader is still blocked (held open by a process that escaped, possible only without bwrap
        # and without a job uid) is left to its thread: closing it would wait for that read to end.
        pipes = [self.proc.stdin] + [f for f, t in zip((self.proc.stdout, self.proc.stderr), self.readers)
                                     if not t.is_alive()]
        for f in pipes:
            try:
                f.close()
            except Exception:
                pass
        sandbox.remove_job_dir(self.dir)
        if self.uid is not None and not leftover:
            self.uids.give(self.uid)  # a uid whose processes would not die is never handed out again


def _pss_bytes(p: psutil.Process) -> int:
    """A process's proportional set size, from /proc/PID/smaps_rollup (one summary line, cheap even for a big
    process); its resident size where that file cannot be read."""
    try:
        with open(f"/proc/{p.pid}/smaps_rollup") as f:
            for line in f:
                if line.startswith("Pss:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError):
        pass
    try:
        return p.memory_info().rss
    except psutil.Error:
        return 0


def _kill_uid(uid: int) -> bool:
    """Backstop for uid mode: any process still running as the job's uid escaped the tree; kill it.
    Returns True if some could not be reaped."""
    left = [p for p in psutil.process_iter(["uids"]) if p.info["uids"] and p.info["uids"].real == uid]
    for p in left:
        try:
            p.kill()
        except psutil.Error:
            pass
    return bool(_wait_gone(left, 5))


def _wait_gone(procs: list[psutil.Process], timeout: float) -> list[psutil.Process]:
    """Wait until each process has exited (a zombie counts as gone: it holds no memory, no GPU, no files)."""
    deadline = time.monotonic() + timeout
    while True:
        alive = []
        for p in procs:
            try:
                if p.is_running() and p.status() != psutil.STATUS_ZOMBIE:
                    alive.append(p)
            except psutil.Error:
                pass
        if not alive or time.monotonic() > deadline:
            return alive
        time.sleep(0.05)


def _last_line(text: str) -> str:
    lines = [ln.strip() for ln in text.strip().splitlines() if ln.strip()]
    return f": {lines[-1][:300]}" if lines else ""


# -- a timeout, said with the stage it came in -----------------------------------------------------------------------
# (a word of the job's last progress message, what the job was doing then, and the likely cause)
TIMEOUT_CAUSES = (
    ("importing", "while Python ran the file's top level",
     "a loop or a long computation at the file's top level (outside the kernel) runs before anything compiles"),
    ("lowering", "while TileLang lowered the kernel",
     "very large loop extents (T.Parallel, T.unroll, T.serial over big constants) or deep loop nests make "
     "TileLang's passes slow; smaller tiles, or a loop left rolled, lower faster"),
    ("nvcc", "while nvcc compiled the generated CUDA",
     "very large unrolled loops (T.unroll, big T.Parallel extents) make nvcc slow"),
    ("ptxas", "while ptxas assembled the PTX",
     "a very long kernel (many unrolled instructions, large register tiles) makes ptxas slow"),
    ("verif", "while the kernel was verified on the GPU",
     "a kernel that never finishes (a loop whose bound is never reached, a barrier some threads never reach) or too "
     "large a problem"),
    ("timing", "while the kernel was timed on the GPU", "a kernel that is very slow at this size"),
    ("starting", "before the job's code began", "the server is very busy (its worker was slow to start)"),
    ("queued", "before the job's code began", "the server is very busy (its worker was slow to start)"),
)


def _during(stage: str) -> tuple[str, str] | None:
    """(what the job was doing, the likely cause) for the job's last progress message, or None."""
    low = (stage or "").lower()
    return next(((doing, cause) for word, doing, cause in TIMEOUT_CAUSES if word in low), None)


def timeout_message(action: str, timeout: float, stage: str) -> str:
    """"the compile job ran past its 120 s limit while nvcc compiled the generated CUDA: very large unrolled loops
    (T.unroll, big T.Parallel extents) make nvcc slow" (`stage`: the job's last progress message)."""
    during = _during(stage)
    if during is None:
        return (f"the {action} job ran past its {timeout:g} s limit and was stopped (an endless loop, or too large a "
                "problem?)")
    return f"the {action} job ran past its {timeout:g} s limit {during[0]} and was stopped: {during[1]}"


def with_stage(result: dict, action: str, timeout: float, stage: str) -> dict:
    """A job's own timeout answer (its alarm, or nvcc's own limit) said with the stage it came in; the user's line
    and the log kept."""
    err = result.get("error")
    if result.get("ok") or not isinstance(err, dict) or err.get("stage") != "timeout" or _during(stage) is None:
        return result
    return {**result, "error": {**err, "message": timeout_message(action, timeout, stage)}}
