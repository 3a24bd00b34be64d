"""Writes deploy/seccomp-bwrap.json, the seccomp profile the container runs under:

    python3 deploy/seccomp.py > deploy/seccomp-bwrap.json

An allowlist, as a container engine's default profile is: every Linux system call named in the kernel's headers
(x86-64 and the generic table arm64 uses) is allowed except those in DENIED below; a call the headers do not name (one
added to a later kernel) fails with ENOSYS. DENIED holds what Docker's or podman's default profile refuses a
container without extra capabilities, and ptrace and its relatives, which nothing in the image needs. What those
defaults allow only with CAP_SYS_ADMIN but bubblewrap needs to build each job's sandbox is in BWRAP, allowed here;
deploy/README.md says why that is safe.
"""
import json
import re
import sys
from pathlib import Path

HEADERS = ["/usr/include/x86_64-linux-gnu/asm/unistd_64.h", "/usr/include/asm-generic/unistd.h"]

# Refused with EPERM, with what each would give a process in the container.
DENIED = {
    "load or replace the kernel, or change the host's settings": [
        "kexec_load", "kexec_file_load", "init_module", "finit_module", "delete_module", "create_module",
        "query_module", "get_kernel_syms", "reboot", "swapon", "swapoff", "acct", "quotactl", "quotactl_fd",
        "settimeofday", "stime", "clock_settime", "clock_settime64", "clock_adjtime", "clock_adjtime64",
        "setdomainname", "syslog", "nfsservctl", "bdflush", "_sysctl", "sysfs", "ustat", "uselib",
        "lookup_dcookie", "vhangup"],
    "reach hardware directly": ["ioperm", "iopl", "pciconfig_iobase", "pciconfig_read", "pciconfig_write",
                                "vm86", "vm86old"],
    "read or change other processes, or measure them (side channels)": [
        "ptrace", "process_vm_readv", "process_vm_writev", "process_madvise", "kcmp", "perf_event_open"],
    "open files by handle, around the container's mounts (the known escape)": ["open_by_handle_at",
                                                                              "name_to_handle_at"],
    "the kernel keyring, which is not per container": ["add_key", "keyctl", "request_key"],
    "load programs into the kernel, or watch the host's file systems": ["bpf", "fanotify_init"],
    "kernel interfaces that served as exploit primitives": ["userfaultfd", "vmsplice", "io_uring_setup",
                                                            "io_uring_enter", "io_uring_register"],
    "move memory between NUMA nodes (other processes' too)": ["mbind", "set_mempolicy", "get_mempolicy",
                                                              "migrate_pages", "move_pages",
                                                              "set_mempolicy_home_node"],
    "the new mount API (bubblewrap uses mount(2); these would bypass what is said below)": [
        "fsopen", "fsconfig", "fsmount", "fspick", "move_mount", "open_tree", "mount_setattr"],
    "enter another process's namespaces (bubblewrap makes new ones and never joins one)": ["setns"],
}

# Allowed by Docker's default profile mostly only with CAP_SYS_ADMIN, allowed here: bubblewrap runs each job in
# new namespaces, as the app's own non-root user. Inside a new user namespace these act on the job's own namespaces
# only; the kernel checks the capabilities bubblewrap holds there, not the container's.
BWRAP = {
    "unshare": "makes the job's user, mount, pid, network, IPC, UTS and cgroup namespaces",
    "clone": "the same, for the job's first process (CLONE_NEW* flags)",
    "clone3": "the same through the newer call, which glibc tries first",
    "mount": "binds the read-only and the job's own folders into the job's mount namespace, mounts its /proc",
    "umount2": "detaches the container's tree from the job's mount namespace once the job's root is built",
    "pivot_root": "makes the job's new root its root",
    "chroot": "enters it",
    "sethostname": "names the job's own UTS namespace 'job'",
}


def syscall_names() -> list[str]:
    names = set()
    for header in HEADERS:
        names |= set(re.findall(r"#define __NR_(\w+)\s", Path(header).read_text()))
    return sorted(n for n in names if n not in ("syscalls", "arch_specific_syscall"))


def profile() -> dict:
    known = syscall_names()
    denied = {n for group in DENIED.values() for n in group}
    missing = set(BWRAP) - set(known)
    assert not missing, f"the kernel headers name no {missing}"
    return {
        "defaultAction": "SCMP_ACT_ERRNO",
        "defaultErrnoRet": 38,  # ENOSYS: a call unknown here looks unimplemented, so libraries fall back
        "archMap": [
            {"architecture": "SCMP_ARCH_X86_64", "subArchitectures": ["SCMP_ARCH_X86", "SCMP_ARCH_X32"]},
            {"architecture": "SCMP_ARCH_AARCH64", "subArchitectures": ["SCMP_ARCH_ARM"]},
        ],
        "syscalls": [
            {"names": [n for n in known if n not in denied and n not in BWRAP], "action": "SCMP_ACT_ALLOW",
             "comment": "what a container's processes use; the denied calls below are left out"},
            *({"names": [n], "action": "SCMP_ACT_ALLOW", "comment": f"bubblewrap: {why}"}
              for n, why in BWRAP.items()),
            # Named as well, so that each refusal says EPERM and why; calls the headers do not name are refused
            # by the default action anyway.
            *({"names": sorted(set(names) & set(known)), "action": "SCMP_ACT_ERRNO", "errnoRet": 1,
               "comment": f"denied: {why}"} for why, names in DENIED.items()),
        ],
    }


if __name__ == "__main__":
    json.dump(profile(), sys.stdout, indent=1)
    sys.stdout.write("\n")
