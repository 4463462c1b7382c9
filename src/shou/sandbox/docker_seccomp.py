"""The seccomp profile of the Docker sandbox: an allow-list, plus the set-id fence of `seccomp.py`.

`--security-opt seccomp=PROFILE` replaces the engine's default profile rather than adding to it, so this
profile has to be a whole wall by itself: like the engine's default it names the system calls a program
may make and refuses every other one (ENOSYS, so programs fall back to older calls), including those
that reach the kernel's mount, module, key, BPF, perf, clock, reboot and namespace machinery. `clone`
is allowed only without namespace flags; `unshare`, `setns` and `clone3` (whose flags live in memory the
filter cannot read) are refused.

On top of that, the same fence as the bubblewrap sandbox's filter: what sandboxed code writes into the
workspace outlives the run and belongs on disk to the workspace's owner (often root), so `chmod`,
`fchmod`, `fchmodat`, creating a file (`open`/`openat` with O_CREAT or O_TMPFILE, `creat`) and `mknod`
with a set-user-ID or set-group-ID bit answer EPERM; `openat2` and io_uring answer ENOSYS (their modes
are out of the filter's sight); `fallocate` answers EOPNOTSUPP (the disk allowance sees writes, not
reservations). Setting file capabilities (`security.capability`) needs CAP_SETFCAP, which no run has.
"""

from __future__ import annotations

import errno
import functools
import json
import platform
from typing import Any

__all__ = ["profile", "profile_json"]

S_SETID = 0o6000
S_ISUID, S_ISGID = 0o4000, 0o2000
O_CREAT, O_TMPFILE = 0o100, 0o20000000
# The flags of clone(2) that make new namespaces (CLONE_NEWNS ... CLONE_NEWNET, CLONE_NEWCGROUP, CLONE_NEWTIME).
CLONE_NAMESPACES = 0x7E020080

# One string, not a list literal: 300 names read better as text.
_ALLOWED = frozenset("""
accept accept4 access alarm arch_prctl bind brk capget capset chdir chown clock_getres clock_gettime
clock_nanosleep close close_range connect copy_file_range dup dup2 dup3 epoll_create epoll_create1 epoll_ctl
epoll_pwait epoll_pwait2 epoll_wait eventfd eventfd2 execve execveat exit exit_group faccessat faccessat2
fadvise64 fchdir fchown fchownat fcntl fdatasync fgetxattr flistxattr flock fork fremovexattr fsetxattr fstat
fstatfs fsync ftruncate futex futex_waitv futimesat get_mempolicy get_robust_list get_thread_area getcpu getcwd
getdents getdents64 getegid geteuid getgid getgroups getitimer getpeername getpgid getpgrp getpid getppid
getpriority getrandom getresgid getresuid getrlimit getrusage getsid getsockname getsockopt gettid gettimeofday
getuid getxattr inotify_add_watch inotify_init inotify_init1 inotify_rm_watch io_cancel io_destroy io_getevents
io_pgetevents io_setup io_submit ioctl ioprio_get ioprio_set kill landlock_add_rule landlock_create_ruleset
landlock_restrict_self lchown lgetxattr link linkat listen listxattr llistxattr lremovexattr lseek lsetxattr
lstat madvise mbind membarrier memfd_create mincore mkdir mkdirat mlock mlock2 mlockall mmap mprotect
mq_getsetattr mq_notify mq_open mq_timedreceive mq_timedsend mq_unlink mremap msgctl msgget msgrcv msgsnd msync
munlock munlockall munmap nanosleep newfstatat pause pidfd_open pidfd_send_signal pipe pipe2 pkey_alloc
pkey_free pkey_mprotect poll ppoll prctl pread64 preadv preadv2 prlimit64 process_mrelease pselect6 pwrite64
pwritev pwritev2 read readahead readlink readlinkat readv recvfrom recvmmsg recvmsg remap_file_pages removexattr
rename renameat renameat2 restart_syscall rmdir rseq rt_sigaction rt_sigpending rt_sigprocmask rt_sigqueueinfo
rt_sigreturn rt_sigsuspend rt_sigtimedwait rt_tgsigqueueinfo sched_get_priority_max sched_get_priority_min
sched_getaffinity sched_getattr sched_getparam sched_getscheduler sched_rr_get_interval sched_setaffinity
sched_setattr sched_setparam sched_setscheduler sched_yield seccomp select semctl semget semop semtimedop
sendfile sendmmsg sendmsg sendto set_mempolicy set_mempolicy_home_node set_robust_list set_thread_area
set_tid_address setfsgid setfsuid setgid setgroups setitimer setpgid setpriority setregid setresgid setresuid
setreuid setrlimit setsid setsockopt setuid setxattr shmat shmctl shmdt shmget shutdown sigaltstack signalfd
signalfd4 socket socketpair splice stat statfs statx symlink symlinkat sync sync_file_range syncfs sysinfo tee
tgkill time timer_create timer_delete timer_getoverrun timer_gettime timer_settime timerfd_create
timerfd_gettime timerfd_settime times tkill truncate umask uname unlink unlinkat utime utimensat utimes vfork
vmsplice wait4 waitid write writev
""".split())  # noqa: SIM905

# name: index of the mode argument (refused with EPERM when it carries a set-id bit)
_MODE_ARG = {"chmod": 1, "fchmod": 1, "fchmodat": 2, "fchmodat2": 2, "creat": 1, "mknod": 1, "mknodat": 2}
# name: (index of the flags argument, index of the mode argument): the mode counts only when creating
_OPEN_ARGS = {"open": (1, 2), "openat": (2, 3)}
_REFUSED = {"openat2": errno.ENOSYS, "io_uring_setup": errno.ENOSYS, "io_uring_enter": errno.ENOSYS,
            "io_uring_register": errno.ENOSYS, "clone3": errno.ENOSYS, "fallocate": errno.EOPNOTSUPP}
_ARCHES = {"x86_64": "SCMP_ARCH_X86_64", "aarch64": "SCMP_ARCH_AARCH64"}
# Names an architecture lacks (aarch64 has no `open`, `chmod`, `creat`, `mknod`) are skipped by the engine.


def _masked(index: int, mask: int, value: int) -> dict[str, Any]:
    return {"index": index, "value": mask, "valueTwo": value, "op": "SCMP_CMP_MASKED_EQ"}


def _mode_rules(name: str, mode: int, flags: int | None) -> list[dict[str, Any]]:
    """Allow `name` when its mode has no set-id bit (or, for opens, when it creates nothing); EPERM else."""
    rules = [{"names": [name], "action": "SCMP_ACT_ALLOW", "args": [_masked(mode, S_SETID, 0)]}]
    if flags is not None:
        rules.append({"names": [name], "action": "SCMP_ACT_ALLOW", "args": [_masked(flags, O_CREAT | O_TMPFILE, 0)]})
        # Either creation bit with a set-id bit: one rule per pair, since arguments in a rule are ANDed.
        for bit in (O_CREAT, O_TMPFILE):
            for setid in (S_ISUID, S_ISGID):
                rules.append({"names": [name], "action": "SCMP_ACT_ERRNO", "errnoRet": errno.EPERM,
                              "args": [_masked(flags, bit, bit), _masked(mode, setid, setid)]})
        return rules
    for setid in (S_ISUID, S_ISGID):
        rules.append({"names": [name], "action": "SCMP_ACT_ERRNO", "errnoRet": errno.EPERM,
                      "args": [_masked(mode, setid, setid)]})
    return rules


def profile(machine: str | None = None) -> dict[str, Any]:
    """The profile as the engine takes it (the JSON of `docker run --security-opt seccomp=FILE`)."""
    arch = _ARCHES.get(machine or platform.machine())
    syscalls: list[dict[str, Any]] = [{"names": sorted(_ALLOWED), "action": "SCMP_ACT_ALLOW"}]
    syscalls.append({"names": ["clone"], "action": "SCMP_ACT_ALLOW", "args": [_masked(0, CLONE_NAMESPACES, 0)]})
    # personality(2): only the values programs use (the engine's default allows the same ones).
    for persona in (0x0, 0x8, 0x20000, 0x20008, 0xFFFFFFFF):
        syscalls.append({"names": ["personality"], "action": "SCMP_ACT_ALLOW",
                         "args": [{"index": 0, "value": persona, "op": "SCMP_CMP_EQ"}]})
    for name, mode in _MODE_ARG.items():
        syscalls += _mode_rules(name, mode, None)
    for name, (flags, mode) in _OPEN_ARGS.items():
        syscalls += _mode_rules(name, mode, flags)
    for name, code in _REFUSED.items():
        syscalls.append({"names": [name], "action": "SCMP_ACT_ERRNO", "errnoRet": code})
    return {
        "defaultAction": "SCMP_ACT_ERRNO",
        "defaultErrnoRet": errno.ENOSYS,
        # Only the native ABI: a 32-bit entry point (int 0x80) would bring other numbers; its calls are killed.
        "architectures": [arch] if arch else [],
        "syscalls": syscalls,
    }


@functools.cache
def profile_json() -> str:
    """`profile()` serialized, for `security_opt=["seccomp=" + profile_json()]`."""
    return json.dumps(profile(), separators=(",", ":"))
