"""The default sandbox on Linux: bubblewrap namespaces, rlimits, an optional cgroup, no network.

Inside: the system directories read-only, the workspace read-write at `/workspace`, a private `/tmp`,
new user/pid/net/ipc/uts/cgroup namespaces, no capabilities, a cleared environment. The run is an
unprivileged uid (as root, RLIMIT_NPROC would not apply, so root runs it as `nobody` and grants that
uid access to the workspace with a POSIX ACL). When the sandbox's first process ends, the kernel kills
everything left in its pid namespace, so `setsid`, `nohup ... &` and double forks cannot outlive it.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import glob
import os
import shutil
import stat
import subprocess
from pathlib import Path

from ..errors import UserError
from .base import ExecResult, Limits, new_output_path
from .cgroup import RunCgroup
from .languages import program
from .process import exec_result, kill_group, spawn_and_wait

NOBODY = 65534
SYSTEM_DIRS = ("/usr", "/etc/alternatives", "/etc/ld.so.cache", "/etc/localtime", "/etc/ssl/certs")
NETWORK_FILES = ("/etc/resolv.conf", "/etc/hosts", "/etc/nsswitch.conf")
ENV = {"PATH": "/usr/local/bin:/usr/bin:/bin", "HOME": "/tmp", "LANG": "C.UTF-8", "TMPDIR": "/tmp",
       "PYTHONDONTWRITEBYTECODE": "1"}
_HOST_ENV = {"PATH": os.environ.get("PATH", "/usr/bin:/bin")}  # for finding prlimit and bwrap only


class BubblewrapSandbox:
    """Runs commands under bubblewrap. `uid` defaults to `nobody` as root, else the caller's own uid."""

    name = "bubblewrap"

    def __init__(self, workspace: str | Path, limits: Limits | None = None, *, uid: int | None = None,
                 use_cgroup: bool = True) -> None:
        self.workspace = Path(workspace).resolve()
        self.limits = limits or Limits()
        self.use_cgroup = use_cgroup
        if uid is None:
            uid = NOBODY if os.geteuid() == 0 else os.geteuid()
        self.uid = uid
        self._switch_user = os.geteuid() == 0 and uid != 0
        self._acl_done = False

    @staticmethod
    @functools.cache
    def available() -> tuple[bool, str]:
        """Whether bubblewrap works here, and if not, why."""
        for tool in ("bwrap", "prlimit"):
            if shutil.which(tool) is None:
                pkg = "bubblewrap" if tool == "bwrap" else "util-linux"
                return False, f"{tool} is not installed (Debian/Ubuntu: apt-get install {pkg})"
        probe = BubblewrapSandbox("/tmp", use_cgroup=False)
        argv = probe.command(["true"], probe.limits, workspace_fd=None, files={})
        kw = {"user": NOBODY, "group": NOBODY, "extra_groups": []} if probe._switch_user else {}
        try:
            r = subprocess.run(argv, capture_output=True, text=True, timeout=20, **kw)  # type: ignore[call-overload]
        except (OSError, subprocess.SubprocessError) as e:
            return False, f"bwrap could not start: {e}"
        if r.returncode != 0:
            return False, f"bwrap fails here: {r.stderr.strip() or r.returncode} (are user namespaces enabled?)"
        return True, "bubblewrap works (user, pid, net, ipc namespaces; rlimits" + (
            "; cgroup limits)" if _cgroup_works() else "; no writable cgroup, rlimits only)")

    def command(self, argv: list[str], limits: Limits, *, workspace_fd: int | None,
                files: dict[str, int]) -> list[str]:
        """The full command line: prlimit (rlimits) wrapping bwrap (namespaces and mounts) wrapping argv.

        `workspace_fd` is an open directory fd bound at /workspace (None binds nothing: used by the
        probe); `files` maps names under /code to open fds whose content is copied in.
        """
        mb = 1024 * 1024
        nproc = limits.processes + (0 if self._switch_user else _processes_of(self.uid))
        # A soft CPU limit below the hard one: SIGXCPU says "CPU time" where a bare SIGKILL says nothing.
        cmd = ["prlimit", f"--data={limits.memory_mb * mb}", f"--cpu={limits.cpu}:{limits.cpu + 1}", f"--nproc={nproc}",
               f"--fsize={limits.file_size_mb * mb}", "--core=0", "--", "bwrap"]
        for path in (*SYSTEM_DIRS, *sorted(glob.glob("/etc/java-*")),
                     *(NETWORK_FILES if limits.network else ())):
            if os.path.exists(path):
                cmd += ["--ro-bind", path, path]
        for link in ("/bin", "/lib", "/lib64", "/sbin", "/lib32", "/libx32"):
            if os.path.islink(link):
                cmd += ["--symlink", os.readlink(link), link]
            elif os.path.isdir(link):
                cmd += ["--ro-bind", link, link]
        cmd += ["--proc", "/proc", "--dev", "/dev", "--size", str(limits.memory_mb * mb), "--tmpfs", "/tmp"]
        if workspace_fd is not None:
            cmd += ["--bind-fd", str(workspace_fd), "/workspace", "--chdir", "/workspace"]
            if (self.workspace / ".shou").is_dir():
                # shou's own state (the session log, spilled outputs) is not the program's to read or rewrite.
                cmd += ["--tmpfs", "/workspace/.shou", "--remount-ro", "/workspace/.shou"]
        if files:
            cmd += ["--dir", "/code"]
            for name, fd in files.items():
                cmd += ["--perms", "0444", "--file", str(fd), f"/code/{name}"]
        cmd += ["--remount-ro", "/"]  # the sandbox's own root too: only /workspace and /tmp take writes
        # --as-pid-1: without it bwrap's own init is orphaned at exit, and where PID 1 of the host is slow
        # to reap (containers, VMs with a minimal init) the zombies pile up against RLIMIT_NPROC.
        cmd += ["--unshare-all", *(["--share-net"] if limits.network else []), "--die-with-parent",
                "--new-session", "--as-pid-1", "--cap-drop", "ALL", "--clearenv"]
        for key, value in ENV.items():
            cmd += ["--setenv", key, value]
        # sh is the namespace's PID 1 and reaps orphans; the program runs as its child, because the kernel
        # shields PID 1 from signals it has no handler for (SIGXCPU would never arrive).
        return [*cmd, "--", "/bin/sh", "-c", '"$@"; exit $?', "shou-init", *argv]

    def _grant_workspace(self) -> None:
        """As root, let the sandbox uid read and write the workspace (default ACLs cover new files).

        Folders above the workspace that others cannot enter get a traverse-only (`x`) entry for that
        uid: it can pass through them, not list or read them.
        """
        if self._acl_done or not self._switch_user:
            return
        if shutil.which("setfacl") is None:
            raise UserError("running as root, the sandbox needs setfacl to share the workspace with uid "
                            f"{self.uid} (Debian/Ubuntu: apt-get install acl)")
        check = subprocess.run(["getfacl", "-pc", str(self.workspace)], capture_output=True, text=True)
        if f"default:user:{self.uid}:rwx" not in check.stdout and "default:user:nobody:rwx" not in check.stdout:
            r = subprocess.run(["setfacl", "-R", "-m", f"u:{self.uid}:rwX", "-m", f"d:u:{self.uid}:rwX",
                                str(self.workspace)], capture_output=True, text=True)
            if r.returncode != 0:
                raise UserError(f"cannot give the sandbox uid {self.uid} access to {self.workspace}: "
                                f"{r.stderr.strip()}")
        # bwrap, already running as that uid, must also be able to walk down to the workspace.
        for parent in self.workspace.parents:
            if parent != Path("/") and not parent.stat().st_mode & stat.S_IXOTH:
                subprocess.run(["setfacl", "-m", f"u:{self.uid}:x", str(parent)], capture_output=True)
        self._acl_done = True

    def _prepare(self, argv: list[str], limits: Limits, files: dict[str, bytes] | None
                 ) -> tuple[list[str], tuple[int, ...], RunCgroup | None]:
        """The command, the fds it inherits (the caller closes them after spawning) and the cgroup."""
        self._grant_workspace()
        fds: dict[str, int] = {}
        ws_fd = os.open(self.workspace, os.O_PATH | os.O_DIRECTORY)
        for name, data in (files or {}).items():
            fd = os.memfd_create(name)  # code goes in as file content, never through a shell
            os.write(fd, data)
            os.lseek(fd, 0, os.SEEK_SET)
            fds[name] = fd
        cgroup = RunCgroup.create(limits.memory_mb * 1024 * 1024, limits.processes) if self.use_cgroup else None
        return self.command(argv, limits, workspace_fd=ws_fd, files=fds), (ws_fd, *fds.values()), cgroup

    async def run(self, argv: list[str], *, stdin: bytes | None = None, limits: Limits | None = None,
                  files: dict[str, bytes] | None = None) -> ExecResult:
        """Run `argv` in the sandbox (see `Sandbox.run`)."""
        limits = (limits or self.limits).within(self.limits)
        cmd, fds, cgroup = self._prepare(argv, limits, files)
        try:
            done = await spawn_and_wait(
                cmd, cwd=None, env=_HOST_ENV, stdin=stdin, timeout=limits.timeout,
                user=self.uid if self._switch_user else None, pass_fds=fds,
                spill=(new_output_path(self.workspace, "stdout"), new_output_path(self.workspace, "stderr")),
                on_spawn=cgroup.add if cgroup else None,
            )
            oom = cgroup.oom_killed() if cgroup else False
        finally:
            _close(fds)
            if cgroup:
                cgroup.remove()
        return exec_result(done, self.workspace, limits, oom)

    async def start(self, argv: list[str], *, limits: Limits | None = None,
                    files: dict[str, bytes] | None = None) -> Started:
        """Start a long-lived process in the sandbox with stdin/stdout pipes (the stateful interpreter)."""
        limits = (limits or self.limits).within(self.limits)
        cmd, fds, cgroup = self._prepare(argv, limits, files)
        ids = {"user": self.uid, "group": self.uid, "extra_groups": []} if self._switch_user else {}
        try:
            proc = await asyncio.create_subprocess_exec(
                *cmd, stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE,
                stderr=asyncio.subprocess.DEVNULL, env=_HOST_ENV, start_new_session=True, pass_fds=fds,
                limit=2**24, **ids,
            )
        except BaseException:
            if cgroup:
                cgroup.remove()
            raise
        finally:
            _close(fds)
        if cgroup:
            cgroup.add(proc.pid)
        return Started(proc, cgroup)

    async def run_code(self, language: str, code: str, *, limits: Limits | None = None) -> ExecResult:
        """Run a program in python, bash, node or java."""
        effective = (limits or self.limits).within(self.limits)
        argv, files = program(language, code, effective)
        return await self.run(argv, limits=effective, files=files)


class Started:
    """A long-lived sandboxed process; `stop()` kills all of it."""

    def __init__(self, proc: asyncio.subprocess.Process, cgroup: RunCgroup | None) -> None:
        self.proc = proc
        self.cgroup = cgroup

    async def stop(self) -> None:
        """Kill the process group and the cgroup's processes, and reap."""
        kill_group(self.proc.pid)
        with contextlib.suppress(TimeoutError, ProcessLookupError):
            async with asyncio.timeout(5):
                await self.proc.wait()
        if self.cgroup:
            self.cgroup.remove()


def _close(fds: tuple[int, ...]) -> None:
    for fd in fds:
        with contextlib.suppress(OSError):
            os.close(fd)


def _processes_of(uid: int) -> int:
    """How many processes `uid` runs now (RLIMIT_NPROC counts them all, not just the sandbox's)."""
    count = 0
    for entry in os.scandir("/proc"):
        if entry.name.isdigit():
            with contextlib.suppress(OSError):
                if entry.stat().st_uid == uid:
                    count += 1
    return count


@functools.cache
def _cgroup_works() -> bool:
    cg = RunCgroup.create(64 * 1024 * 1024, 16)
    if cg is None:
        return False
    cg.remove()
    return True
