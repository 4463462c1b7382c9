"""The default sandbox on Linux: bubblewrap namespaces, rlimits, a cgroup, no network.

Inside: the system directories read-only, the workspace read-write at `/workspace` (its `shou.toml` and
`.env` read-only, its `.shou/` hidden), private `/tmp` and `/dev/shm`, new user/pid/net/ipc/uts/cgroup
namespaces, no capabilities, a cleared environment. Nothing else of the host is mounted.

Who the code runs as: a normal user's sandbox runs as that user (it sees nothing of theirs but the
workspace). As root it runs as `SANDBOX_UID`, a dedicated unprivileged uid, and sees the workspace through
an idmapped mount (`idmap.py`) in which the owner's files are its own; no mode or ACL is ever changed.

Before the program's first instruction the process tree is in the run's cgroup (bwrap reports its child's
pid on `--info-fd` and holds it on `--block-fd` until shou has moved both into the cgroup), so memory
(including /tmp and /dev/shm, which are memory) and process limits hold for every child. The rlimits are
set by the sandbox's init shell (`ulimit`, a builtin) before it starts the program: no exec is spent on
wrappers but `setpriv` (as root). A watcher stops the run when the workspace's file system grows past the disk or inode
allowance. When the sandbox's first process ends, the kernel kills everything left in its pid namespace,
so `setsid`, `nohup ... &` and double forks cannot outlive it.
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
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING

from ..errors import UserError
from ..git_cells import Tidy
from ..git_protect import GIT_ENV, Protected, fd_room, open_pin, protect, remove_planted
from ..workspace import hidden_config, read_only_tops, state_dir
from .base import ExecResult, Limits, new_output_path
from .bubblewrap_warm import WarmSlot, run_warm
from .cgroup import CgroupHold, RunCgroup
from .languages import program
from .process import HOST_ENV, close_fds, exec_result, kill_group, processes_of, spawn_and_wait
from .quota import DiskAllowance, current_allowance
from .seccomp import filter_fd
from .started import Started
from .warm_link import NotStarted

if TYPE_CHECKING:
    from .idmap import IdmappedWorkspace

SANDBOX_UID = 1_999_000_000  # used by nothing else, so nothing else can enter the idmapped workspace
SYSTEM_DIRS = ("/usr", "/etc/alternatives", "/etc/ld.so.cache", "/etc/localtime", "/etc/ssl/certs")
NETWORK_FILES = ("/etc/resolv.conf", "/etc/hosts", "/etc/nsswitch.conf")
READ_ONLY_FILES = ("shou.toml", ".env")  # the workspace's settings: the program must not rewrite them
ENV = {"PATH": "/usr/local/bin:/usr/bin:/bin", "HOME": "/tmp", "LANG": "C.UTF-8", "TMPDIR": "/tmp",
       "PYTHONDONTWRITEBYTECODE": "1", **GIT_ENV}
_HOST_ENV = HOST_ENV  # for finding setpriv and bwrap only
# The init shell: lowers the rlimits (soft CPU before hard: a hard limit under the soft one is refused), then
# runs the program as its child. Exit status 125: a limit could not be set, so nothing ran.
_INIT = 'ulimit -S -t {cpu} && ulimit -H -t {cpu_hard} && ulimit -d {data_kb} && ulimit -f {fsize_blocks} && ' \
        'ulimit -c 0 && ulimit -p {nproc} || exit 125; "$@"; exit $?'


class BubblewrapSandbox:
    """Runs commands under bubblewrap, as `SANDBOX_UID` when shou is root, else as the caller."""

    name = "bubblewrap"

    def __init__(self, workspace: str | Path, limits: Limits | None = None, *, use_cgroup: bool = True,
                 warm: bool = True) -> None:
        self.workspace = Path(workspace).resolve()
        self.limits = limits or Limits()
        self.use_cgroup = use_cgroup
        self.as_root = os.geteuid() == 0
        self.uid = SANDBOX_UID if self.as_root else os.geteuid()
        self._mount: IdmappedWorkspace | None = None  # as root
        self.warm = warm  # calls go to a resident executor in one long-lived sandbox (bubblewrap_warm.py)
        self.warm_slot = WarmSlot()
        # Calls made outside any agent run share this one (see quota.py).
        self.allowance = DiskAllowance(self.limits.disk_mb * 2**20, self.limits.inodes)

    @staticmethod
    @functools.cache
    def available() -> tuple[bool, str]:
        """Whether bubblewrap works here, and if not, why."""
        for tool in ("bwrap", "setpriv"):
            if shutil.which(tool) is None:
                pkg = "bubblewrap" if tool == "bwrap" else "util-linux"
                return False, f"{tool} is not installed (Debian/Ubuntu: apt-get install {pkg})"
        probe = BubblewrapSandbox("/tmp", use_cgroup=False)
        argv = probe.command(["true"], probe.limits, workspace_fd=None)
        try:
            r = subprocess.run(argv, capture_output=True, text=True, timeout=20, env=_HOST_ENV)
        except (OSError, subprocess.SubprocessError) as e:
            return False, f"bwrap could not start: {e}"
        if r.returncode != 0:
            return False, f"bwrap fails here: {r.stderr.strip() or r.returncode} (are user namespaces enabled?)"
        if probe.as_root:
            from .idmap import idmap_supported

            ok, why = idmap_supported()
            if not ok:
                return False, why
        return True, "bubblewrap works (user, pid, net, ipc namespaces; rlimits" + (
            "; cgroup limits)" if _cgroup_works() else "; no writable cgroup, rlimits only)") + (
            f"; as root: runs as uid {SANDBOX_UID} on an idmapped workspace" if probe.as_root else "")

    def command(self, argv: list[str], limits: Limits, *, workspace_fd: int | None,
                masks: tuple[tuple[int, str], ...] = (), files: dict[str, int] | None = None,
                sync_fds: tuple[int, int] | None = None, seccomp_fd: int | None = None,
                pinned: tuple[tuple[int, str], ...] = (), executor: bool = False,
                hidden: tuple[str, ...] = ()) -> list[str]:
        """The full command line: [setpriv] bwrap ... sh-init (rlimits) argv.

        `workspace_fd` is an open directory fd bound at /workspace (None binds nothing: used by the
        probe); `pinned` are (fd, name) folders bound read-write over themselves (before the masks, which
        may lie inside them); `masks` are (fd, name) files bound read-only over the workspace's own; `files` maps
        names under /code to open fds whose content is copied in; `seccomp_fd` holds the filter of
        `seccomp.py`; `hidden` are workspace folders covered (after the masks) by an empty read-only one;
        `sync_fds` (info, block) are the pipe ends bwrap reports its child's pid on and holds
        that child on until the caller has moved it into the run's cgroup (`CgroupHold`). With `executor`,
        `argv` is a warm sandbox's resident executor (`bubblewrap_warm.py`): the namespace's PID 1 itself,
        setting each call's rlimits, with a /code and a POSIX message queue folder it empties between calls.
        """
        mb = 1024 * 1024
        nproc = limits.processes + processes_of(self.uid)
        cmd: list[str] = []
        if self.as_root:
            cmd += ["setpriv", f"--reuid={self.uid}", f"--regid={self.uid}", "--clear-groups", "--"]
        cmd.append("bwrap")
        for path in (*SYSTEM_DIRS, *sorted(glob.glob("/etc/java-*")),
                     *(NETWORK_FILES if limits.network else ())):
            if os.path.exists(path):
                cmd += ["--ro-bind", path, path]
        for link in ("/bin", "/lib", "/lib64", "/sbin", "/lib32", "/libx32"):
            if os.path.islink(link):
                cmd += ["--symlink", os.readlink(link), link]
            elif os.path.isdir(link):
                cmd += ["--ro-bind", link, link]
        size = str(limits.memory_mb * mb)  # both are memory, counted by the cgroup too
        cmd += ["--proc", "/proc", "--dev", "/dev", "--size", size, "--tmpfs", "/dev/shm", "--size", size,
                "--tmpfs", "/tmp"]
        if workspace_fd is not None:
            cmd += _workspace_args(workspace_fd, masks, pinned, hidden)
        if files:
            cmd += ["--dir", "/code"]
            for name, fd in files.items():
                cmd += ["--perms", "0444", "--file", str(fd), f"/code/{name}"]
        if executor:
            cmd += ["--size", size, "--tmpfs", "/code", "--mqueue", "/dev/mqueue"]
        cmd += ["--remount-ro", "/"]  # the sandbox's own root too: only /workspace and /tmp take writes
        # --as-pid-1: without it bwrap's own init is orphaned at exit, and where PID 1 of the host is slow
        # to reap (containers, VMs with a minimal init) the zombies pile up against RLIMIT_NPROC.
        # No user namespaces inside: capabilities there could set file capabilities on workspace files.
        cmd += ["--unshare-all", "--unshare-user", "--disable-userns", *(["--share-net"] if limits.network else []),
                "--die-with-parent", "--new-session", "--as-pid-1", "--cap-drop", "ALL", "--clearenv"]
        if seccomp_fd is not None:
            cmd += ["--seccomp", str(seccomp_fd)]
        if sync_fds is not None:
            cmd += ["--info-fd", str(sync_fds[0]), "--block-fd", str(sync_fds[1])]
        for key, value in ENV.items():
            cmd += ["--setenv", key, value]
        # sh is the namespace's PID 1 and reaps orphans; the program runs as its child, because the kernel
        # shields PID 1 from signals it has no handler for (SIGXCPU would never arrive). A soft CPU limit
        # below the hard one: SIGXCPU says "CPU time" where a bare SIGKILL says nothing.
        if executor:
            return [*cmd, "--", *argv]
        init = _INIT.format(cpu=limits.cpu, cpu_hard=limits.cpu + 1, data_kb=limits.memory_mb * 1024,
                            fsize_blocks=limits.file_size_mb * mb // 512, nproc=nproc)
        return [*cmd, "--", "/bin/sh", "-c", init, "shou-init", *argv]

    def _source(self) -> Path:
        """The folder the sandbox binds at /workspace: the idmapped view as root, else the workspace."""
        if not self.as_root:
            return self.workspace
        if self._mount is None:
            from .idmap import IdmappedWorkspace

            self._mount = IdmappedWorkspace.create(self.workspace, self.uid)
        return self._mount.path

    def close(self) -> None:
        """Stop the warm sandbox and release the idmapped mount (both made again on the next run)."""
        self.warm_slot.close()
        if self._mount is not None:
            mount, self._mount = self._mount, None
            mount.close()

    def _config_masks(self, ws_fd: int, fds: list[int]) -> list[tuple[int, str]]:
        """Read-only binds over each top folder (or file) of the workspace holding what the host trusts or
        runs code from: the user's shou config, the Python running shou (a `.venv` in the project), and, in
        a workspace of `$HOME`, the shells' start-up files, `~/.ssh`, `~/.local`, `~/.cache/shou`
        (`workspace.read_only_tops`, shared with the Docker sandbox and the warm one's key).

        Binding the whole top folder (not just the path) leaves the program no way to rename a parent away
        and put a folder of its own in its place. A start-up file missing there cannot be bound without
        making it; `remove_planted` removes one the program makes.
        """
        masks = []
        tops, _ = read_only_tops(self.workspace)
        for top in tops:
            fd = os.open(top, os.O_PATH | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=ws_fd)
            fds.append(fd)
            mode = os.fstat(fd).st_mode
            if not (stat.S_ISDIR(mode) or stat.S_ISREG(mode)):  # swapped since read_only_tops looked
                raise UserError(f"{self.workspace / top} leads to what the host trusts (shou's configuration, "
                                "its Python, shell start-up files) but is not a plain file or folder (a "
                                "symlink?): sandboxed code could redirect it. Run shou in another folder")
            masks.append((fd, top))
        return masks

    def _prepare(self, argv: list[str], limits: Limits, files: dict[str, bytes] | None, *, executor: bool = False
                 ) -> tuple[list[str], tuple[int, ...], RunCgroup | None, Protected, CgroupHold | None]:
        """The command, the fds it inherits (the caller closes them after spawning), the cgroup, what of
        the repository is protected, and the hold that moves the sandbox into the cgroup once spawned."""
        state_dir(self.workspace)  # a real folder, made by shou, before the program could make a link there
        tops, absent = read_only_tops(self.workspace)  # its missing start-up files: `missing_host_files`
        protected = protect(self.workspace, absent=tuple(absent), skip=tuple(tops))
        fd_room(len(protected.git_dirs) + len(protected.read_only))  # before any is open: a refusal leaks none
        source = self._source()
        ws_fd = os.open(source, os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC)
        fds: list[int] = [ws_fd]
        masks = []
        for name in READ_ONLY_FILES:
            with contextlib.suppress(OSError):
                fd = os.open(name, os.O_PATH | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=ws_fd)
                if stat.S_ISREG(os.fstat(fd).st_mode):
                    masks.append((fd, name))
                fds.append(fd)
        masks += self._config_masks(ws_fd, fds)
        pinned = []
        for rel in protected.git_dirs:  # so that .git cannot be renamed away from the binds in it
            if (fd := open_pin(ws_fd, rel)) is not None:
                fds.append(fd)
                if stat.S_ISDIR(os.fstat(fd).st_mode):
                    pinned.append((fd, rel))
        for rel in protected.read_only:  # a repository's config and hooks (git_protect.py)
            if (fd := open_pin(ws_fd, rel)) is not None:
                fds.append(fd)
                masks.append((fd, rel))
        code: dict[str, int] = {}
        for name, data in (files or {}).items():
            fd = os.memfd_create(name)  # code goes in as file content, never through a shell
            os.write(fd, data)
            os.lseek(fd, 0, os.SEEK_SET)
            code[name] = fd
            fds.append(fd)
        seccomp_fd = filter_fd()
        fds.append(seccomp_fd)
        cgroup = RunCgroup.create(limits.memory_mb * 1024 * 1024, limits.processes) if self.use_cgroup else None
        hold = CgroupHold(cgroup) if cgroup is not None else None
        cmd = self.command(argv, limits, workspace_fd=ws_fd, masks=tuple(masks), files=code, seccomp_fd=seccomp_fd,
                           pinned=tuple(pinned), sync_fds=hold.child_fds if hold else None, executor=executor,
                           hidden=tuple(hidden_config(self.workspace)))
        if len(cmd) > BWRAP_MAX_ARGS:  # bwrap would refuse ("Exceeded maximum number of arguments")
            close_fds(tuple(fds))
            if hold:
                hold.close()
            if cgroup:
                cgroup.remove()
            raise UserError(f"the workspace holds {len(protected.git_dirs)} git repositories, each of whose config "
                            "and hooks the sandbox binds read-only: more binds than bubblewrap takes. The command "
                            "was not run; run shou in a folder that holds fewer repositories")
        return cmd, tuple(fds), cgroup, protected, hold

    async def run(self, argv: list[str], *, stdin: bytes | None = None, limits: Limits | None = None,
                  files: dict[str, bytes] | None = None) -> ExecResult:
        """Run `argv` in the sandbox (see `Sandbox.run`)."""
        limits = (limits or self.limits).within(self.limits)
        allowance = current_allowance(self.allowance)
        if spent := allowance.spent():
            return ExecResult("", "", None, 0.0, "disk", note=spent)
        if self.warm and (warm := await self.warm_slot.get(self, limits)) is not None:
            with contextlib.suppress(NotStarted):  # its executor died after its last call: one of its own
                return await run_warm(self, warm, argv, stdin, limits, files, allowance)
        cmd, fds, cgroup, protected, hold = self._prepare(argv, limits, files)
        disk = allowance.watch(self.workspace, limits.disk_mb * 2**20, limits.inodes)
        try:
            done = await spawn_and_wait(
                cmd, cwd="/", env=_HOST_ENV, stdin=stdin, timeout=limits.timeout,
                pass_fds=fds + (hold.child_fds if hold else ()),
                spill=(new_output_path(self.workspace, "stdout"), new_output_path(self.workspace, "stderr")),
                disk=disk, started=hold.release if hold else None,
            )
            oom = cgroup.oom_killed() if cgroup else False
        finally:
            allowance.charge(disk)
            close_fds(fds)
            if hold:
                hold.close()
            if cgroup:
                cgroup.remove()
            planted = remove_planted(self.workspace, protected)
        result = exec_result(done, self.workspace, limits, oom)
        return replace(result, note="; ".join(x for x in (result.note, planted) if x)) if planted else result

    async def start(self, argv: list[str], *, limits: Limits | None = None,
                    files: dict[str, bytes] | None = None) -> Started:
        """Start a long-lived process in the sandbox with stdin/stdout pipes (the stateful interpreter)."""
        limits = (limits or self.limits).within(self.limits)
        cmd, fds, cgroup, protected, hold = self._prepare(argv, limits, files)
        try:
            proc = await asyncio.create_subprocess_exec(
                *cmd, stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE,
                stderr=asyncio.subprocess.DEVNULL, env=_HOST_ENV, start_new_session=True,
                pass_fds=fds + (hold.child_fds if hold else ()), limit=2**24, cwd="/",
            )
            if hold:
                await hold.release(proc.pid)
        except BaseException:
            if cgroup:
                cgroup.remove()
            raise
        finally:
            close_fds(fds)
            if hold:
                hold.close()
        # A long-lived process can write long after its call returned: the allowance covers its whole life,
        # charged to the run that started it.
        allowance = current_allowance(self.allowance)
        disk = allowance.watch(self.workspace, limits.disk_mb * 2**20, limits.inodes)
        started = Started(proc, cgroup, asyncio.ensure_future(disk.guard(lambda: kill_group(proc.pid))),
                          (allowance, disk), limits.memory_mb)
        tidy = Tidy(self.workspace, protected)
        started.tidy, started.begin = tidy, tidy.begin
        return started

    async def run_code(self, language: str, code: str, *, limits: Limits | None = None) -> ExecResult:
        """Run a program in python, bash, node or java."""
        effective = (limits or self.limits).within(self.limits)
        argv, files = program(language, code, effective)
        return await self.run(argv, limits=effective, files=files)


BWRAP_MAX_ARGS = 9000  # bubblewrap's MAX_ARGS


def _workspace_args(workspace_fd: int, masks: tuple[tuple[int, str], ...], pinned: tuple[tuple[int, str], ...],
                    hidden: tuple[str, ...] = ()) -> list[str]:
    """bwrap's arguments for the workspace at /workspace, its repository folders pinned and its masks."""
    args = ["--bind-fd", str(workspace_fd), "/workspace", "--chdir", "/workspace"]
    # shou's own state (the session log, spilled outputs) is not the program's to read or rewrite.
    args += ["--tmpfs", "/workspace/.shou", "--remount-ro", "/workspace/.shou"]
    for fd, name in pinned:
        args += ["--bind-fd", str(fd), f"/workspace/{name}"]
    for fd, name in masks:
        args += ["--ro-bind-fd", str(fd), f"/workspace/{name}"]
    # The user's shou config folder (API keys, the key that signs approvals) is not the program's to read:
    # the read-only bind of its top folder (a mask) stops writes, this empty folder over it stops reads.
    for rel in hidden:
        args += ["--tmpfs", f"/workspace/{rel}", "--remount-ro", f"/workspace/{rel}"]
    return args


@functools.cache
def _cgroup_works() -> bool:
    cg = RunCgroup.create(64 * 1024 * 1024, 16)
    if cg is None:
        return False
    cg.remove()
    return True
