"""A warm bubblewrap sandbox: one long-lived bwrap per sandbox, whose resident executor runs each call.

Making the namespaces and mounts of a bwrap sandbox, and the execs before the program, cost several
milliseconds a call; a call to a resident executor (`warm_executor.py`, the sandbox's PID 1) costs a fork
and an exec. The sandbox is made exactly as a per-call one (same binds, masks, seccomp filter, uid, no
network, run cgroup with the same memory and process limits) plus a /code tmpfs and a POSIX message queue
folder, on the first call. Each call starts in a fresh session with its own rlimits (CPU, data, file size,
processes) and time limit; when its first process ends (or it is killed) the executor kills every other
process of the namespace (as PID 1 it is out of the program's reach) and empties /tmp, /dev/shm,
/dev/mqueue, /code and System V IPC, so nothing of one call is left to the next but the workspace.

The sandbox is replaced when it dies, when the workspace's protected paths change (its binds are fixed when
it is made) and when the event loop changes. It dies with shou (`--die-with-parent`, and the executor exits
when its socket closes). Calls with other memory, process or network limits than the warm sandbox's, and
calls made while it is busy, get a sandbox of their own, as before.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
from base64 import b64encode
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from ..git_protect import Protected, protect, remove_planted
from ..workspace import hidden_config, read_only_tops, state_dir
from .base import ExecResult, Limits, OutputCapture, new_output_path
from .process import HOST_ENV, Finished, close_fds, exec_result, kill_group, processes_of
from .quota import DiskAllowance
from .warm_link import ExecutorLink, LinkBroken, executor_argv, rlimits, signature

if TYPE_CHECKING:
    from .bubblewrap import BubblewrapSandbox
    from .cgroup import RunCgroup

START_TIMEOUT = 20.0
STDIN_FILE = ".shou-stdin"


class WarmFailed(Exception):
    """The warm sandbox could not be made: calls get a sandbox each."""


class WarmBubblewrap:
    """A running warm sandbox: the bwrap process, its executor's link, its cgroup."""

    def __init__(self, proc: asyncio.subprocess.Process, link: ExecutorLink, cgroup: RunCgroup | None,
                 key: tuple[Any, ...]) -> None:
        self.proc = proc
        self.link = link
        self.cgroup = cgroup
        self.key = key
        link.ooms = cgroup.oom_kills if cgroup is not None else (lambda: -1)

    @classmethod
    async def start(cls, sb: BubblewrapSandbox, limits: Limits, key: tuple[Any, ...]) -> WarmBubblewrap:
        """Start bwrap with the executor as its PID 1 and wait until it answers (WarmFailed if it does not)."""
        ours, theirs = socket.socketpair()
        cmd, fds, cgroup, _, hold = sb._prepare(executor_argv(f"fd:{theirs.fileno()}"), limits, None, executor=True)
        proc = None
        try:
            proc = await asyncio.create_subprocess_exec(
                *cmd, stdin=asyncio.subprocess.DEVNULL, stdout=asyncio.subprocess.DEVNULL,
                stderr=asyncio.subprocess.DEVNULL, env=HOST_ENV, start_new_session=True, cwd="/",
                pass_fds=(*fds, *(hold.child_fds if hold else ()), theirs.fileno()),
            )
            if hold:
                await hold.release(proc.pid)
            theirs.close()
            reader, writer = await asyncio.open_unix_connection(sock=ours, limit=2**20)
            link = ExecutorLink(reader, writer, lambda: -1)
            async with asyncio.timeout(START_TIMEOUT):
                await link.hello()
        except (OSError, TimeoutError, asyncio.IncompleteReadError, LinkBroken) as exc:
            ours.close()
            if proc is not None:
                kill_group(proc.pid)
            if cgroup is not None:
                cgroup.remove()
            raise WarmFailed(str(exc) or type(exc).__name__) from exc
        finally:
            theirs.close()
            close_fds(fds)
            if hold:
                hold.close()
        return cls(proc, link, cgroup, key)

    def close(self) -> None:
        """Kill the sandbox (the executor and whatever runs) and remove its cgroup."""
        with contextlib.suppress(Exception):
            self.link.abort()
        kill_group(self.proc.pid)  # bwrap; its child dies with it (--die-with-parent)
        if self.cgroup is not None:
            self.cgroup.remove()


class WarmSlot:
    """The warm sandbox of one BubblewrapSandbox: made on demand, replaced when stale or dead."""

    def __init__(self) -> None:
        self.warm: WarmBubblewrap | None = None
        self.failed = False  # no python3 here, or bwrap refused the executor: calls get a sandbox each
        self._starting = False
        # The walk of the workspace made for the coming call (`get`): what its tidy compares with. Not the
        # sandbox's key's, which is as old as the sandbox: a repository the person made since is theirs.
        self.protected: Protected | None = None

    async def get(self, sb: BubblewrapSandbox, limits: Limits) -> WarmBubblewrap | None:
        """The warm sandbox for a call with `limits`, or None when the call needs a sandbox of its own."""
        if self.failed or self._starting:
            return None
        # The same read-only tops as a per-call sandbox's (`_config_masks`); a missing start-up file
        # (protected.absent) that appears, or a top swapped, makes a new sandbox.
        tops, absent = read_only_tops(sb.workspace)  # its missing start-up files: `missing_host_files`
        protected = protect(sb.workspace, absent=tuple(absent), skip=tuple(tops))
        self.protected = protected
        # The config folder hidden under an empty one (`hidden_config`): made or swapped, a new sandbox.
        rels = (*protected.git_dirs, "shou.toml", ".env", *protected.read_only, *tops, *protected.absent,
                *hidden_config(sb.workspace))
        # Made with the sandbox's own limits (each call's rlimits are set by the executor, never raised past
        # these); a call with other container-wide limits gets a sandbox of its own.
        key = (sb.limits.memory_mb, sb.limits.processes, sb.limits.network, protected, signature(sb.workspace, rels),
               asyncio.get_running_loop())
        warm = self.warm
        if warm is not None and warm.link.busy:
            return None
        if warm is not None and (warm.link.stale() or warm.proc.returncode is not None or warm.key[3:] != key[3:]):
            self.close()
            warm = None
        if (limits.memory_mb, limits.processes, limits.network) != key[:3]:
            return None
        if warm is not None:
            return warm
        self._starting = True
        try:
            self.warm = await WarmBubblewrap.start(sb, sb.limits, key)
        except WarmFailed:
            self.failed = True
            return None
        finally:
            self._starting = False
        return self.warm

    def close(self) -> None:
        """Kill the warm sandbox, if any."""
        if self.warm is not None:
            warm, self.warm = self.warm, None
            warm.close()


async def run_warm(sb: BubblewrapSandbox, warm: WarmBubblewrap, argv: list[str], stdin: bytes | None,
                   limits: Limits, files: dict[str, bytes] | None, allowance: DiskAllowance) -> ExecResult:
    """Run one call in the warm sandbox: the same result, notes and bookkeeping as a per-call sandbox's."""
    # The pins are the sandbox's (its key's); the walk to compare with is this call's own.
    protected = replace(warm.key[3], repositories=fresh.repositories, before=fresh.before) if (
        fresh := sb.warm_slot.protected) is not None else warm.key[3]
    state_dir(sb.workspace)
    entries = {**(files or {}), **({STDIN_FILE: stdin} if stdin is not None else {})}
    limit = rlimits(limits)
    mb = 1024 * 1024
    limit["data"] = [limits.memory_mb * mb] * 2
    if warm.cgroup is None:  # else the cgroup's pids.max holds the sandbox to its processes exactly
        limit["nproc"] = [limits.processes + processes_of(sb.uid)] * 2
    request = {"argv": argv, "rlimits": limit, "stdin": STDIN_FILE if stdin is not None else None,
               "files": {name: b64encode(data).decode() for name, data in entries.items()}}
    disk = allowance.watch(sb.workspace, limits.disk_mb * 2**20, limits.inodes)
    out = OutputCapture(spill_path=new_output_path(sb.workspace, "stdout"), budget=disk.room)
    err = OutputCapture(spill_path=new_output_path(sb.workspace, "stderr"), budget=disk.room)
    loop = asyncio.get_running_loop()
    started = loop.time()
    warm.link.busy = True
    try:
        code, reason, oom = await warm.link.call(request, limits, disk, out, err)
    finally:
        warm.link.busy = False
        out.close()
        err.close()
        allowance.charge(disk)
        if warm.link.dead:
            sb.warm_slot.close()
        planted = remove_planted(sb.workspace, protected)
    returncode = -9 if reason == "killed" else code  # the executor was killed: as if the sandbox was
    done = Finished(returncode, out, err, reason == "timeout", loop.time() - started, disk.check())
    result = exec_result(done, sb.workspace, limits, oom)
    return replace(result, note="; ".join(x for x in (result.note, planted) if x)) if planted else result
