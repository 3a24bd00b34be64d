"""Every setting of the playground in one place: what it is for, its default and the environment variable that sets it.

    settings = Settings.from_env()      # once, where a process starts: app.py, the command line, a job's worker
    serve(..., settings=settings)       # then passed down: the page, the job layer, the compile cache

This is the one module of the playground that reads the environment. The job layer hands a job the few settings it
needs through the job's own (cleared) environment, built by `to_env`, which the job's worker reads back with
`from_env`: that is how the process limit reaches the job.

Library callers that start nothing of their own (a test, `python kernels/gemm.py`) get `current()`: the settings a
starting process installed, else the environment read once on first use.

The README's table of settings is `markdown_table()`; tests/test_settings.py checks that they agree.
"""
from __future__ import annotations

import dataclasses
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Mapping

GiB = 2**30
MiB = 2**20

# What a job inherits from the server's environment (besides the settings handed to it): where the compilers,
# CUDA and Python packages are, the locale, and TileLang's, CUDA's and NVIDIA's own variables.
INHERITED_NAMES = ("PATH", "PYTHONPATH", "LD_LIBRARY_PATH", "LANG", "LC_ALL", "TZ", "CUDA_HOME", "CUDA_PATH")
INHERITED_PREFIXES = ("TILELANG_", "CUDA_", "NVIDIA_", "NVCC_")


class SettingsError(ValueError):
    """A setting's environment variable holds a value that cannot be used; the message names it."""


def setting(default, env: str, doc: str, shown: str | None = None, *, secret: bool = False, factory=None):
    """A field of Settings: its environment variable, what it is for, and its default as the README shows it."""
    meta = {"env": env, "doc": doc, "shown": shown}
    if factory is not None:
        return field(default_factory=factory, metadata=meta, repr=not secret)
    return field(default=default, metadata=meta, repr=not secret)


def _bytes(n: int) -> str:
    return f"{n // GiB} GiB" if n % GiB == 0 else f"{n // MiB} MiB"


@dataclass(frozen=True)
class Settings:
    # -- the page ------------------------------------------------------------------------------------------------
    host: str = setting("0.0.0.0", "GRADIO_SERVER_NAME", "the address the page listens on (`--host` wins)")
    port: int = setting(7860, "GRADIO_SERVER_PORT", "the page's port (`--port` wins)")
    password: str | None = setting(None, "PLAYGROUND_PASSWORD",
                                   "the class password (any user name); unset with no file: no login", "unset",
                                   secret=True)
    password_file: Path | None = setting(None, "PLAYGROUND_PASSWORD_FILE",
                                         "a file whose first line is the password (a Docker secret); an empty or "
                                         "unreadable one stops the server", "unset")
    ui_queue: int = setting(256, "PLAYGROUND_UI_QUEUE", "requests Gradio's own queue holds before it refuses more")
    request_bytes: int = setting(8 * MiB, "PLAYGROUND_REQUEST_BYTES",
                                 "bytes of one request's body the server reads; a larger one is answered 413 before "
                                 "anything parses it (a page's event carries a few sources of at most 256 KiB)")
    ui_concurrency: int = setting(64, "PLAYGROUND_UI_CONCURRENCY",
                                  "engine requests the page hands the job layer at once (the job layer queues "
                                  "CPU and GPU work itself)")
    draft_secret: str = setting("tilelang-playground", "PLAYGROUND_DRAFT_SECRET",
                                "key that obscures the draft kept in the browser's localStorage (not a security "
                                "boundary)")
    # -- a class (playground/store, playground/ui/classroom.py) ---------------------------------------------------
    data_dir: Path = setting(None, "PLAYGROUND_DATA", "the folder of the class's SQLite database (share links, the "
                             "roster, submissions, boards), of the tuning runs kept for everyone "
                             "(`tuned-configs.json`) and of the compile cache (`compile-cache/`)", "`./data`",
                             factory=lambda: Path("data"))
    exercises_dir: Path = setting(None, "PLAYGROUND_EXERCISES",
                                  "the folder of the class's exercises, one folder each (read at each look: a "
                                  "folder added shows without a restart); in the image, a folder of the `/data` "
                                  "volume (`/data/exercises`) keeps them across containers", "`exercises/` of the "
                                  "checkout", factory=lambda: Path(__file__).resolve().parents[1] / "exercises")
    teacher_password: str | None = setting(None, "PLAYGROUND_TEACHER_PASSWORD",
                                           "the teacher's password (user name `teacher`): the teacher's view; unset: "
                                           "no teacher's view", "unset", secret=True)
    user_header: str | None = setting(None, "PLAYGROUND_USER_HEADER",
                                      "a reverse proxy's authenticated-user header (e.g. `X-Forwarded-User`) "
                                      "trusted as the student's name instead of a login", "unset")
    trusted_proxies: str | None = setting(None, "PLAYGROUND_TRUSTED_PROXIES",
                                          "addresses or networks (`10.0.0.0/8`), comma-separated, of reverse "
                                          "proxies whose `X-Forwarded-For` names the client; any other peer (`ssh "
                                          "-L` and same-host proxies included) is itself the address the login's "
                                          "throttle and every per-address limit count", "unset")
    # -- the engine ----------------------------------------------------------------------------------------------
    cache_dir: Path = setting(None, "PLAYGROUND_CACHE_DIR", "where compile results and edited sources are kept",
                              "`~/.cache/tilelang-playground`",
                              factory=lambda: Path.home() / ".cache" / "tilelang-playground")
    no_gpu: bool = setting(False, "PLAYGROUND_NO_GPU", "`1`: act as if no GPU were present (compile-only server)",
                           "`0`")
    # -- the job layer -------------------------------------------------------------------------------------------
    sandbox: str = setting("bwrap", "PLAYGROUND_SANDBOX",
                           "`bwrap`: each job in a bubblewrap sandbox; where the host cannot make one, no job runs "
                           "(every job, the page and `/health` say why and how to fix it); `none`: jobs run as "
                           "plain processes with limits only, on purpose")
    job_uids: bool = setting(True, "PLAYGROUND_JOB_UIDS", "`0`: a root server does not give each job a uid of its own",
                             "`1`")
    job_uid_base: int = setting(61000, "PLAYGROUND_JOB_UID_BASE", "the first of the 1000 uids a root server gives jobs")
    jobs_dir: Path | None = setting(None, "PLAYGROUND_JOBS_DIR", "where the job folders are made",
                                    "`$TMPDIR/playground-jobs-<uid>`")
    cpu_slots: int | None = setting(None, "PLAYGROUND_CPU_SLOTS", "compiles that run at once",
                                    "the CPU cores, at most 16")
    spares: int | None = setting(None, "PLAYGROUND_SPARES", "pre-started compile workers waiting for a request",
                                 "2 × CPU slots + 2, at most 8")
    queue_limit: int = setting(100, "PLAYGROUND_QUEUE_LIMIT", "jobs that may wait in all; past it: busy, try again")
    session_inflight: int = setting(3, "PLAYGROUND_SESSION_INFLIGHT", "jobs one student may have running or waiting")
    address_inflight: int = setting(12, "PLAYGROUND_ADDRESS_INFLIGHT",
                                    "jobs one client address may have running or waiting where one person may log "
                                    "in under many names (a class password, no roster); its rate limit is a "
                                    "student's as many times over; high enough for a class behind one NAT")
    session_burst: float = setting(12.0, "PLAYGROUND_SESSION_BURST", "jobs one student may start back to back ...")
    session_rate: float = setting(0.5, "PLAYGROUND_SESSION_RATE", "... then this many a second")
    timeout_compile: float = setting(120.0, "PLAYGROUND_TIMEOUT_COMPILE", "seconds a compile job may take")
    timeout_run: float = setting(300.0, "PLAYGROUND_TIMEOUT_RUN", "seconds a run job may take")
    timeout_tune: float = setting(900.0, "PLAYGROUND_TIMEOUT_TUNE", "seconds a tune job may take")
    timeout_sweep: float = setting(600.0, "PLAYGROUND_TIMEOUT_SWEEP", "seconds a sweep job may take")
    timeout_ir: float = setting(120.0, "PLAYGROUND_TIMEOUT_IR", "seconds a lowering (IR pass by pass) job may take")
    timeout_profile: float = setting(300.0, "PLAYGROUND_TIMEOUT_PROFILE",
                                     "seconds an Nsight Compute profile job may take")
    timeout_memcheck: float = setting(600.0, "PLAYGROUND_TIMEOUT_MEMCHECK",
                                      "seconds a compute-sanitizer memcheck + racecheck job may take")
    ready_timeout: float = setting(120.0, "PLAYGROUND_READY_TIMEOUT",
                                   "seconds a pre-started worker may take to import TileLang before it counts as "
                                   "broken")
    compile_address_space: int = setting(8 * GiB, "PLAYGROUND_COMPILE_ADDRESS_SPACE",
                                         "bytes of address space per process of a compile job (RLIMIT_AS)")
    compile_memory: int = setting(6 * GiB, "PLAYGROUND_COMPILE_RESIDENT",
                                  "bytes of memory all processes of a compile job may hold")
    gpu_memory: int = setting(32 * GiB, "PLAYGROUND_GPU_RESIDENT",
                              "bytes of host memory all processes of a run, tune or sweep job may hold")
    file_size: int = setting(256 * MiB, "PLAYGROUND_FILE_SIZE", "bytes of one file a job writes (RLIMIT_FSIZE)")
    disk: int = setting(1 * GiB, "PLAYGROUND_DISK", "bytes of all a job's files")
    open_files: int = setting(1024, "PLAYGROUND_OPEN_FILES", "files a job's process may hold open")
    processes: int = setting(512, "PLAYGROUND_PROCESSES",
                             "processes and threads of one job (RLIMIT_NPROC inside its sandbox)")
    threads: int = setting(4, "PLAYGROUND_THREADS", "threads of a job's OpenMP, MKL and TVM pools")
    result_bytes: int = setting(8 * MiB, "PLAYGROUND_RESULT_BYTES",
                                "bytes of a job's answer (a profile's may carry its Nsight Compute report on top); "
                                "its texts are cut where no kernel's reach (playground/jobs/limits.py)")
    stderr_bytes: int = setting(8 * MiB, "PLAYGROUND_STDERR_BYTES", "bytes a job may print before it is stopped")
    compile_cache_bytes: int = setting(2 * GiB, "PLAYGROUND_COMPILE_CACHE_BYTES",
                                       "bytes of compile answers and nvcc outputs the server keeps in its data "
                                       "folder (`compile-cache/`: shared by the class, kept across restarts); the "
                                       "least recently used go first; `0`: in memory only")
    compile_cache_seed: Path | None = setting(None, "PLAYGROUND_COMPILE_CACHE_SEED",
                                              "a read-only folder of compile-cache entries made ahead of time "
                                              "(`python app.py --prewarm` into a data folder's `compile-cache/`: the "
                                              "image's build does): an entry the data folder lacks is taken from "
                                              "it", "unset")
    prewarm: bool = setting(True, "PLAYGROUND_PREWARM",
                            "`1`: once the server is up, compile the shipped kernels at the page's first request "
                            "into the compile cache, in the background (a slot of its own, niced); `0`: not", "`1`")
    ray: str | None = setting(None, "PLAYGROUND_RAY",
                              "a Ray cluster's head (`host:6379`): jobs run on its nodes (README: Several servers: "
                              "Ray); unset: on this server", "unset")
    # -- inherited -----------------------------------------------------------------------------------------------
    inherited: tuple[tuple[str, str], ...] = setting(
        (), ", ".join([*INHERITED_NAMES, *(p + "*" for p in INHERITED_PREFIXES)]),
        "passed on to jobs as they are: where compilers, CUDA and packages are, the locale, TileLang's and CUDA's "
        "own variables", "the server's")

    # -- reading and writing ---------------------------------------------------------------------------------------
    @classmethod
    def from_env(cls, env: Mapping[str, str] = os.environ) -> "Settings":
        """The settings the environment `env` gives (a variable unset or empty keeps the default)."""
        values: dict = {}
        for f in dataclasses.fields(cls):
            if f.name == "inherited":
                values[f.name] = tuple(sorted((k, v) for k, v in env.items()
                                              if k in INHERITED_NAMES or k.startswith(INHERITED_PREFIXES)))
                continue
            text = env.get(f.metadata["env"])
            if text is None or text.strip() == "":
                continue
            values[f.name] = _parse(f, text.strip())
        settings = cls(**values)
        settings.trusted_proxy_networks()  # a value that is no address stops here, named
        return settings

    def to_env(self, *names: str) -> dict[str, str]:
        """The environment that gives these settings back through `from_env` (for a job's worker)."""
        out = {}
        for f in dataclasses.fields(self):
            if f.name in names:
                value = getattr(self, f.name)
                if value is not None:
                    out[f.metadata["env"]] = ("1" if value else "0") if isinstance(value, bool) else str(value)
        return out

    def replace(self, **changes) -> "Settings":
        return dataclasses.replace(self, **changes)

    # -- derived ---------------------------------------------------------------------------------------------------
    @property
    def inherited_env(self) -> dict[str, str]:
        return dict(self.inherited)

    def timeout(self, action: str) -> float:
        return float(getattr(self, f"timeout_{action}"))

    def login_password(self) -> str | None:
        """The `password`, else the first line of the `password_file`, else None (no login).

        A password file that is named but empty or unreadable is a mistake that would otherwise open the class's
        server to anyone: it raises SettingsError, and the server does not start."""
        if self.password:
            return self.password
        path = self.password_file
        if path is None:
            return None
        try:
            text = path.read_text()
        except (OSError, UnicodeDecodeError) as exc:
            raise SettingsError(f"PLAYGROUND_PASSWORD_FILE={str(path)!r} cannot be read ({type(exc).__name__}: "
                                f"{getattr(exc, 'strerror', None) or exc}); the server does not start without the "
                                "password it names") from None
        first = text.strip().splitlines()[0].strip() if text.strip() else ""
        if not first:
            raise SettingsError(f"PLAYGROUND_PASSWORD_FILE={str(path)!r} is empty; the server does not start without "
                                "the password it names (unset the variable for a server without login)")
        return first

    def trusted_proxy_networks(self) -> tuple:
        """`trusted_proxies` as ipaddress networks (a single address is a network of one); a value that is no
        address raises SettingsError naming the variable."""
        import ipaddress
        networks = []
        for item in (self.trusted_proxies or "").split(","):
            if item.strip():
                try:
                    networks.append(ipaddress.ip_network(item.strip(), strict=False))
                except ValueError:
                    raise SettingsError(f"PLAYGROUND_TRUSTED_PROXIES: {item.strip()!r} is not an IP address or "
                                        "network (e.g. 127.0.0.1, 10.0.0.0/8, ::1)") from None
        return tuple(networks)

    @property
    def compile_processes(self) -> int:
        """Compiles that run at once, in the job queue and inside one job (a tuning run's parallel compile):
        `cpu_slots`, else the CPU cores this process may use (its affinity, which a container or taskset narrows,
        not the machine's count), at most 16."""
        return max(1, self.cpu_slots) if self.cpu_slots else max(1, min(16, usable_cores()))

    def install(self) -> "Settings":
        """Make these the settings `current()` answers in this process (a starting process calls it once)."""
        global _current
        _current = self
        return self


def _parse(f: dataclasses.Field, text: str):
    kind = str(f.type)
    try:
        if kind.startswith("bool"):
            if text.lower() in ("1", "true", "yes", "on"):
                return True
            if text.lower() in ("0", "false", "no", "off"):
                return False
            raise ValueError(text)
        if kind.startswith("int"):
            return int(float(text)) if "e" in text.lower() else int(text)
        if kind.startswith("float"):
            return float(text)
        if kind.startswith("Path"):
            return Path(text).expanduser()
        return text
    except ValueError:
        raise SettingsError(f"{f.metadata['env']}={text!r} is not a valid value: {f.metadata['env']} is "
                            f"{f.metadata['doc']} ({kind.split(' ')[0]})") from None


def usable_cores() -> int:
    """The CPU cores this process may use: its affinity, which a container or taskset narrows, not the machine's
    count."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        return os.cpu_count() or 1


_current: Settings | None = None


def current() -> Settings:
    """The settings of this process: those a starting process installed, else the environment read once."""
    global _current
    if _current is None:
        _current = Settings.from_env()
    return _current


def shown_default(f: dataclasses.Field) -> str:
    if f.metadata["shown"] is not None:
        return f.metadata["shown"]
    value = f.default
    if isinstance(value, bool):
        return "`1`" if value else "`0`"
    if isinstance(value, int) and value >= MiB and "bytes" in f.metadata["doc"]:
        return f"`{value}` ({_bytes(value)})"
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    return f"`{value}`"


def markdown_table() -> str:
    """The README's table of settings, made from the fields above."""
    rows = ["| setting | environment variable | default | what it is for |", "|---|---|---|---|"]
    for f in dataclasses.fields(Settings):
        env = ", ".join(f"`{e}`" for e in f.metadata["env"].split(", "))
        rows.append(f"| `{f.name}` | {env} | {shown_default(f)} | {f.metadata['doc']} |")
    return "\n".join(rows) + "\n"


def library_default(name: str, value: str) -> None:
    """A library this process uses (Ray) reads a knob of its own from the environment: give it `value` unless the
    environment already does."""
    os.environ.setdefault(name, value)


def environment_now() -> dict[str, str]:
    """This process's environment as it is now (a compile job notes it before user code runs, to tell whether the
    user's file changed it: engine/compile.remember_lowering_context)."""
    return dict(os.environ)


def tell_tilelang_compile_timeout(seconds: float) -> None:
    """TileLang reads its nvcc time limit from its own environment variable: set it for this process."""
    os.environ["TILELANG_COMPILE_TIMEOUT_SECONDS"] = str(int(seconds))


if __name__ == "__main__":
    print(markdown_table(), end="")
