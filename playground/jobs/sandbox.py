"""The walls around one job: a folder of its own, a cleared environment, and a bubblewrap sandbox without network.

What a job can see (bwrap mode): /usr (compilers, CUDA, libraries), the few files of /etc the loader and Python need
(no /etc/shadow), the Python installation and the virtualenv, and of this repository only playground/ and kernels/
(all read-only); its own folder at /job (the only writable place; /tmp and /dev/shm are folders inside it); a /proc
of its own pid namespace; /dev/nvidia* for GPU jobs. Not: the rest of the repository, other jobs' folders, the
server's files, the network (a new, empty network namespace: even loopback is down).

Two ways to run bwrap, chosen by who the server is:
- server is root (a dev machine, CI, a container run as root): bwrap runs privileged without a user namespace, drops
  every capability except setuid/setgid, and the worker switches at once to a uid of its own (one per live job,
  from the job_uid_base setting), so RLIMIT_NPROC counts that job alone and the job cannot read the server's root-owned files.
- server is an ordinary user (the Docker image): bwrap makes a user namespace; RLIMIT_NPROC, set inside it by the
  worker, counts the processes of that namespace.
Where bwrap cannot create namespaces (a container started without the README's two `--security-opt` flags, a host
without bubblewrap), no job runs: every job answers why and how to fix it, and `health()`, the page's banner and the
start-up log say so. Only where the admin sets PLAYGROUND_SANDBOX=none on purpose do jobs run as plain processes in
their own session, with the same limits and a cleared environment (and everything says they are not sandboxed).
"""
from __future__ import annotations

import glob
import logging
import os
import shutil
import stat
import subprocess
import sys
import tempfile
import threading
from pathlib import Path

from ..settings import Settings, current

log = logging.getLogger("playground.jobs")
ROOT = Path(__file__).resolve().parents[2]
INSIDE = "/job"  # where a job sees its own folder in bwrap mode
JOB_UID_COUNT = 1000  # uids from the job_uid_base setting on


_root: Path | None = None


def server_jobs_dir(pid: int, settings: Settings | None = None) -> Path:
    """The folder of job folders of the server process `pid` (on this machine, for this user)."""
    base = (settings or current()).jobs_dir or Path(tempfile.gettempdir()) / f"playground-jobs-{os.geteuid()}"
    return base / f"server-{pid}"


def jobs_root(settings: Settings | None = None) -> Path:
    """Where this server's job folders live: outside the repository, a folder per server process (so that two
    servers, or a server and the tests, never clean up each other's jobs). Folders of servers that are gone (killed
    without cleaning up) are removed the first time this is called."""
    global _root
    if _root is None or not _root.exists():
        base = server_jobs_dir(os.getpid(), settings).parent
        base.mkdir(mode=0o711, parents=True, exist_ok=True)
        if base.stat().st_uid == os.geteuid() and base.stat().st_mode & 0o777 != 0o711:
            base.chmod(0o711)  # job uids pass through it to their own folders (and a 0700 left behind locks them out)
        for old in base.glob("server-*"):
            pid = old.name.removeprefix("server-")
            if pid.isdigit() and int(pid) != os.getpid() and not _alive(int(pid)):
                remove_job_dir(old)
        _root = server_jobs_dir(os.getpid(), settings)
        _root.mkdir(mode=0o711, exist_ok=True)
    return _root


def remove_jobs_root() -> None:
    """At shutdown: remove this server's (by then empty) folder of job folders."""
    global _root
    if _root is not None:
        try:
            _root.rmdir()
        except OSError:
            pass
        _root = None


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


_mode_lock = threading.Lock()


# -- job uids (root servers only) ---------------------------------------------------------------------------------
class UidPool:
    """A uid per live job, so that per-uid limits (RLIMIT_NPROC) and file ownership separate jobs.

    Unique across every server process on the machine (two servers, or a server and the tests, may run at once):
    a uid is taken by holding an exclusive flock on its lock file, which the kernel releases if the server dies.
    Without that, one server cleaning up "its" uid would kill another server's job."""

    def __init__(self, base: int, count: int):
        self.base, self.count = base, count
        self.held: dict[int, int] = {}  # uid -> fd of its lock file
        self.given: set[int] = set()  # every uid this server has given a job (a finished job's process has one)
        self.lock = threading.Lock()

    def take(self) -> int:
        import fcntl
        folder = uid_lock_folder()
        with self.lock:
            for uid in range(self.base, self.base + self.count):
                if uid in self.held:
                    continue
                fd = os.open(folder / str(uid), os.O_RDWR | os.O_CREAT, 0o600)
                try:
                    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                except OSError:
                    os.close(fd)
                    continue
                self.held[uid] = fd
                self.given.add(uid)
                return uid
        raise RuntimeError("no free job uid")

    def give(self, uid: int) -> None:
        with self.lock:
            fd = self.held.pop(uid, None)
        if fd is not None:
            os.close(fd)  # closing the file releases the lock


def uid_lock_folder() -> Path:
    """Where the job uids' lock files are: one fixed folder for the whole machine, whatever folder each server keeps
    its jobs in (two servers with different job folders would otherwise hand out the same uids, and one's cleanup
    would kill the other's jobs). /run is root's (only a root server gives jobs uids); else a fixed folder in /tmp,
    used only if it is this user's own and nobody else may write in it."""
    run = Path("/run")
    folder = run / "playground-job-uids" if run.is_dir() and os.access(run, os.W_OK) else \
        Path("/tmp/playground-job-uids")
    folder.mkdir(mode=0o700, exist_ok=True)
    info = folder.lstat()
    if not stat.S_ISDIR(info.st_mode) or info.st_uid != os.geteuid() or info.st_mode & 0o022:
        raise RuntimeError(f"{folder} is not a folder of this user's that only it may write in: job uids cannot "
                           "be locked there safely (remove it and start the server again)")
    return folder


_uid_pools: dict[int, UidPool] = {}
_uid_pools_lock = threading.Lock()


def uid_pool(settings: Settings | None = None) -> UidPool:
    """The job uids of this server: JOB_UID_COUNT of them from the job_uid_base setting."""
    base = (settings or current()).job_uid_base
    with _uid_pools_lock:
        return _uid_pools.setdefault(base, UidPool(base, JOB_UID_COUNT))


def use_job_uids(settings: Settings | None = None) -> bool:
    """A root server gives each job a uid of its own. Without bwrap (which binds what a job needs under folders
    anyone may enter) only if the job can still reach its Python and the code as that uid."""
    settings = settings or current()
    if os.geteuid() != 0 or not settings.job_uids:
        return False
    if mode(settings).kind == "bwrap":
        return True
    return all(_others_can_enter(p) for p in (sys.base_prefix, sys.prefix, str(ROOT),
                                              os.path.realpath(sys.executable)))


def _others_can_enter(path: str) -> bool:
    p = Path(path)
    for folder in [*reversed(p.parents), p]:
        try:
            if folder.is_dir() and not folder.stat().st_mode & 0o001:
                return False
        except OSError:
            return False
    return True


# -- the job folder -----------------------------------------------------------------------------------------------
SUBDIRS = ("tmp", "shm", "cache", "tilelang-cache", "src")


def make_job_dir(uid: int | None, settings: Settings | None = None) -> Path:
    path = Path(tempfile.mkdtemp(prefix="job-", dir=jobs_root(settings)))
    for sub in SUBDIRS:
        (path / sub).mkdir()
    if uid is not None:
        for p in [path, *(path / s for s in SUBDIRS)]:
            os.chown(p, uid, uid)
    return path


def remove_job_dir(path: Path) -> None:
    """Remove a job folder even if the job made parts of it unreadable (chmod 000) before it ended. Nothing outside
    `path` is touched: a folder already gone (another server process cleaning the same leftover) must not make the
    folder of job folders 0700, which locks every job uid out of it."""
    top = os.path.realpath(path)

    def fix(func, p, exc):
        if isinstance(exc[1] if isinstance(exc, tuple) else exc, FileNotFoundError):
            return
        try:
            parent = os.path.dirname(p)
            if os.path.realpath(parent).startswith(top):
                os.chmod(parent, 0o700)
            os.chmod(p, 0o700)
            func(p)
        except OSError:
            pass
    shutil.rmtree(path, onexc=fix) if sys.version_info >= (3, 12) else shutil.rmtree(path, onerror=fix)


# -- the environment ------------------------------------------------------------------------------------------------
# Settings a job's worker reads back from its environment (Settings.from_env): its bounds (the worker sets its rlimits
# from them: limits.apply_rlimits) and its own cache folder.
JOB_SETTINGS = ("cache_dir", "data_dir", "processes", "threads", "no_gpu", "file_size", "open_files",
                "compile_address_space")


def job_env(job_dir: str, uid: int | None, gpu_index: int | None = None,
            settings: Settings | None = None) -> dict[str, str]:
    """Only what a job needs: no server secrets (a password, tokens) reach user code. The job's settings travel
    here, made by Settings.to_env, so that its worker sets the limits the server was given."""
    settings = settings or current()
    inherited = settings.inherited_env
    venv_bin = str(Path(sys.executable).parent)
    # The server's PATH too (a CUDA or a TileLang installed beside the venv); in bwrap only what is bound exists.
    path = [venv_bin, *inherited.get("PATH", "").split(":"), "/usr/local/cuda/bin", "/usr/local/bin", "/usr/bin",
            "/bin"]
    threads = str(settings.threads)
    env = {
        "PATH": ":".join(dict.fromkeys(p for p in path if p)),
        "HOME": job_dir, "TMPDIR": f"{job_dir}/tmp", "USER": "job", "LOGNAME": "job",
        "PYTHONPATH": ":".join([str(ROOT), *extra_pythonpath(settings)]), "PYTHONUNBUFFERED": "1",
        "PYTHONDONTWRITEBYTECODE": "1",
        "OMP_NUM_THREADS": threads, "MKL_NUM_THREADS": threads, "OPENBLAS_NUM_THREADS": threads,
        "TVM_NUM_THREADS": threads,
        # Its caches and its data folder are its own, inside its folder: the server's data (the class's database,
        # the table of tuned configs) is never in a job's reach; runner.py copies in what a job may read.
        **settings.replace(cache_dir=Path(job_dir) / "cache", data_dir=Path(job_dir) / "data").to_env(*JOB_SETTINGS),
    }
    for k, v in inherited.items():  # PATH and PYTHONPATH are set above, from the server's own
        env.setdefault(k, v)
    # A job's TileLang kernel cache is its own (see result_cache.py for why it is not shared).
    env["TILELANG_CACHE_DIR"] = f"{job_dir}/tilelang-cache"
    env["TILELANG_TMP_DIR"] = f"{job_dir}/tmp"
    # A compile job sees no GPU (it compiles for an explicit arch); a GPU job sees exactly the one it was given.
    env["CUDA_DEVICE_ORDER"] = "PCI_BUS_ID"  # so CUDA numbers GPUs as nvidia-smi does
    env["CUDA_VISIBLE_DEVICES"] = "" if gpu_index is None else str(gpu_index)
    return env


def extra_pythonpath(settings: Settings | None = None) -> list[str]:
    """The server's own PYTHONPATH entries (packages installed beside the system Python, e.g. TileLang in a folder
    of its own), passed on to jobs and bound read-only into their sandbox."""
    root = str(ROOT)
    pythonpath = (settings or current()).inherited_env.get("PYTHONPATH", "")
    return [p for p in pythonpath.split(":") if p and os.path.isdir(p)
            and os.path.realpath(p) != root and not os.path.realpath(p).startswith(root + "/")]


# -- the bwrap command line ---------------------------------------------------------------------------------------
def _readonly_paths(settings: Settings | None = None) -> list[str]:
    settings = settings or current()
    paths = ["/usr", "/etc/ld.so.cache", "/etc/ld.so.conf", "/etc/ld.so.conf.d", "/etc/alternatives",
             "/etc/passwd", "/etc/group", "/etc/nsswitch.conf", "/etc/localtime",
             sys.base_prefix, sys.prefix, str(ROOT / "playground"), str(ROOT / "kernels"),
             *extra_pythonpath(settings)]
    cuda = settings.inherited_env.get("CUDA_HOME") or settings.inherited_env.get("CUDA_PATH")
    if cuda:
        paths.append(cuda)
    real_python = os.path.dirname(os.path.dirname(os.path.realpath(sys.executable)))
    paths.append(real_python)
    out: list[str] = []
    for p in dict.fromkeys(os.path.normpath(p) for p in paths):
        # A path this server cannot read would make bwrap fail; its jobs could not have used it anyway.
        if not any(p == q or p.startswith(q + "/") for q in out if q != p) and os.access(p, os.R_OK):
            out.append(p)
    return out


def gpu_devices() -> list[str]:
    return sorted(glob.glob("/dev/nvidia*"))


def bwrap_command(job_dir: Path, argv: list[str], gpu: bool, privileged: bool,
                  settings: Settings | None = None, seccomp_fd: int | None = None) -> list[str]:
    cmd = ["bwrap", "--die-with-parent", "--new-session"]
    if seccomp_fd is not None:  # loaded by bwrap just before it starts argv: the sandbox is built, the job not yet
        cmd += ["--seccomp", str(seccomp_fd)]
    if privileged:
        # No user namespace: the worker becomes the job uid itself, keeping only the right to do that.
        cmd += ["--unshare-ipc", "--unshare-pid", "--unshare-net", "--unshare-uts", "--unshare-cgroup-try",
                "--cap-drop", "ALL", "--cap-add", "CAP_SETUID", "--cap-add", "CAP_SETGID"]
    else:
        cmd += ["--unshare-all", "--unshare-user", "--disable-userns", "--cap-drop", "ALL"]
    cmd += ["--hostname", "job"]
    for top in ("/bin", "/sbin", "/lib", "/lib64", "/lib32"):
        if os.path.islink(top):
            cmd += ["--symlink", os.readlink(top), top]
        elif os.path.isdir(top) and not top.startswith("/usr"):
            cmd += ["--ro-bind", top, top]
    # The writable places first, so that a read-only bind under /tmp (a PYTHONPATH entry there) lands on top.
    cmd += ["--proc", "/proc", "--dev", "/dev",
            "--bind", str(job_dir), INSIDE,
            "--bind", str(job_dir / "tmp"), "/tmp",
            "--bind", str(job_dir / "shm"), "/dev/shm"]
    made = {"/", "/tmp", "/dev", "/proc", INSIDE}
    for p in _readonly_paths(settings):
        # Folders above a bind are made world-traversable (bwrap would make them 0700 and root's in privileged mode,
        # closing them to the job uid); they hold nothing but the bind.
        for parent in list(reversed(Path(p).parents))[1:]:
            if str(parent) not in made and not os.path.islink(parent):
                made.add(str(parent))
                cmd += ["--perms", "0755", "--dir", str(parent)]
        cmd += ["--ro-bind", p, p]
    if gpu:
        for dev in gpu_devices():
            cmd += ["--dev-bind", dev, dev]
        cmd += ["--ro-bind", "/sys", "/sys"]  # CUDA reads the PCI topology and NUMA nodes
        cmd += ["--ro-bind-try", "/run/nvidia-persistenced", "/run/nvidia-persistenced"]
    # The root bwrap built the rest on is a tmpfs, which in a user namespace belongs to the job: read-only, so that a
    # job writes only into its own folder (bounded there), not into memory through folders such as /app.
    cmd += ["--remount-ro", "/"]
    # "/" and not the job folder: in privileged mode the folder belongs to the job uid (0700), which the worker
    # becomes only after bwrap; it changes into the folder itself.
    cmd += ["--chdir", "/", "--"] + argv
    return cmd


# -- which sandbox this host allows -----------------------------------------------------------------------------
class Refused(RuntimeError):
    """No job may start here: the sandbox is wanted but cannot be made (the message says why and how to fix it)."""


REFUSED = ("no job runs on this server: the sandbox cannot be made here ({why}). The fix: start the container with "
           "the README's two flags, --security-opt seccomp=deploy/seccomp-bwrap.json --security-opt "
           "systempaths=unconfined (elsewhere: install bubblewrap and allow user namespaces); or, to run students' "
           "code without a sandbox on purpose, set PLAYGROUND_SANDBOX=none")


class Mode:
    """How jobs run here: kind "bwrap" (sandboxed) or "none" (plain processes); `refused`, where the sandbox is wanted
    and cannot be made: why no job runs (kind "none", and nothing starts)."""

    def __init__(self, kind: str, why: str, privileged: bool = False, refused: str | None = None):
        self.kind, self.why, self.privileged, self.refused = kind, why, privileged, refused

    @classmethod
    def refusing(cls, why: str) -> "Mode":
        message = REFUSED.format(why=why)
        return cls("none", message, refused=message)

    def to_json(self, settings: Settings | None = None) -> dict:
        return {"kind": self.kind, "why": self.why,
                "syscall_filter": self.kind == "bwrap" and syscall_filter() is not None,
                "job_uids": use_job_uids(settings), "user_namespace": self.kind == "bwrap" and not self.privileged}


_mode: Mode | None = None


def mode(settings: Settings | None = None) -> Mode:
    """Probe once whether bwrap can build the real sandbox here; warn loudly if not."""
    global _mode
    with _mode_lock:
        if _mode is None:
            _mode = _probe(settings or current())
            if _mode.refused:
                log.error("NO JOB RUNS: %s", _mode.refused)
            elif _mode.kind == "none":
                log.warning("JOBS ARE NOT SANDBOXED: %s. Student code runs as plain processes with resource limits "
                            "only: it can read what the server can read and reach the network.", _mode.why)
            else:
                log.info("jobs run in bubblewrap (%s)", _mode.why)
        return _mode


def _probe(settings: Settings) -> Mode:
    if settings.sandbox == "none":
        return Mode("none", "turned off by PLAYGROUND_SANDBOX=none: jobs run as plain processes with limits only")
    if settings.sandbox != "bwrap":
        return Mode.refusing(f"PLAYGROUND_SANDBOX={settings.sandbox!r} is neither bwrap nor none")
    if shutil.which("bwrap") is None:
        return Mode.refusing("bubblewrap (bwrap) is not installed: apt-get install bubblewrap")
    privileged = os.geteuid() == 0
    job_dir = make_job_dir(None, settings)
    try:
        check = "import os, socket; os.listdir('/job'); s = socket.socket(); s.settimeout(1)\n" \
                "try:\n s.connect(('10.255.255.1', 9)); print('NETWORK')\nexcept OSError: print('ok')"
        cmd = bwrap_command(job_dir, [sys.executable, "-c", check], False, privileged, settings)
        try:
            proc = subprocess.run(cmd, capture_output=True, text=True, timeout=30,
                                  env=job_env(INSIDE, None, None, settings))
        except (OSError, subprocess.SubprocessError) as exc:
            return Mode.refusing(f"bwrap failed to start: {exc}")
        if proc.returncode != 0 or proc.stdout.strip() != "ok":
            return Mode.refusing(f"bwrap cannot create the sandbox on this host: "
                                 f"{(proc.stderr.strip() or proc.stdout.strip())[-300:]}")
        how = "privileged, no user namespace, a uid per job" if privileged else "user namespace"
        return Mode("bwrap", f"bwrap {_bwrap_version()}, {how}, no network", privileged)
    finally:
        remove_job_dir(job_dir)


def _bwrap_version() -> str:
    try:
        return subprocess.run(["bwrap", "--version"], capture_output=True, text=True, timeout=5).stdout.split()[-1]
    except Exception:
        return "?"


def inside(job_dir: Path, settings: Settings | None = None) -> str:
    """The path of the job folder as the job sees it."""
    return INSIDE if mode(settings).kind == "bwrap" else str(job_dir)


def command(job_dir: Path, argv: list[str], gpu: bool, settings: Settings | None = None,
            seccomp_fd: int | None = None) -> list[str]:
    """The command line that runs `argv` as this job (`seccomp_fd`: see syscall_filter_fd)."""
    m = mode(settings)
    if m.kind == "bwrap":
        return bwrap_command(job_dir, argv, gpu, m.privileged, settings, seccomp_fd)
    return argv


# -- the system call filter -----------------------------------------------------------------------------------------
# What a kernel job never needs, refused with EPERM inside the sandbox; everything else is allowed (TileLang, nvcc,
# CUDA, Nsight Compute and compute-sanitizer need the ordinary rest: threads, mmap, ioctl on /dev/nvidia*, ...).
DENIED_SYSCALLS = {
    "read or change another process": ["ptrace", "process_vm_readv", "process_vm_writev", "kcmp"],
    "mount or unmount file systems": ["mount", "umount2", "pivot_root", "fsopen", "fsmount", "fsconfig", "fspick",
                                      "move_mount", "open_tree", "mount_setattr"],
    "the kernel keyring (shared by the whole host)": ["keyctl", "add_key", "request_key"],
    "load programs into the kernel": ["bpf"],
    "new namespaces, or another process's (a user namespace gives its maker capabilities)": ["unshare", "setns"],
    "load or remove kernel modules, or a new kernel": ["init_module", "finit_module", "delete_module", "kexec_load",
                                                        "kexec_file_load"],
    "reboot, swap, the clock, accounting": ["reboot", "swapon", "swapoff", "settimeofday", "clock_settime",
                                            "clock_adjtime", "adjtimex", "acct"],
    "open files by handle, around the sandbox's mounts": ["open_by_handle_at", "name_to_handle_at"],
    "watch other processes' memory faults (an exploit primitive)": ["userfaultfd"],
}
CLONE_NEW_FLAGS = 0x7E020000  # CLONE_NEWNS | NEWCGROUP | NEWUTS | NEWIPC | NEWUSER | NEWPID | NEWNET: namespaces by clone
EPERM, ENOSYS = 1, 38
_filter: bytes | None = None
_filter_why = ""


def syscall_filter() -> bytes | None:
    """The job's seccomp filter as a BPF program (built once with libseccomp's Python bindings), or None where they
    or libseccomp are missing (then health() says so)."""
    global _filter, _filter_why
    with _mode_lock:
        if _filter is None and not _filter_why:
            try:
                _filter = _build_filter()
            except Exception as exc:  # ImportError, OSError (no libseccomp.so.2), a name this libseccomp lacks
                _filter_why = f"no system call filter: {type(exc).__name__}: {exc}"
                log.warning("jobs run without a system call filter: %s", _filter_why)
        return _filter


def _build_filter() -> bytes:
    import pyseccomp as seccomp
    f = seccomp.SyscallFilter(defaction=seccomp.ALLOW)
    for names in DENIED_SYSCALLS.values():
        for name in names:
            try:
                f.add_rule(seccomp.ERRNO(EPERM), name)
            except Exception:  # a call this architecture or libseccomp does not know: nothing to refuse
                log.debug("seccomp: no system call %s here", name)
    for bit in range(32):  # clone with any namespace flag (each flag a rule: libseccomp compares masked equal)
        flag = 1 << bit
        if CLONE_NEW_FLAGS & flag:
            f.add_rule(seccomp.ERRNO(EPERM), "clone", seccomp.Arg(0, seccomp.MASKED_EQ, flag, flag))
    # clone3 passes its flags in memory, where a filter cannot look: "not implemented" makes glibc fall back to
    # clone, which the rules above see (container engines do the same).
    f.add_rule(seccomp.ERRNO(ENOSYS), "clone3")
    with tempfile.TemporaryFile() as out:
        f.export_bpf(out)
        out.seek(0)
        return out.read()


def syscall_filter_fd() -> int | None:
    """A file descriptor to read the filter from, for bwrap --seccomp (the caller passes it on and closes it)."""
    program = syscall_filter()
    if program is None:
        return None
    fd = os.memfd_create("playground-seccomp", 0)
    os.write(fd, program)
    os.lseek(fd, 0, os.SEEK_SET)
    return fd
