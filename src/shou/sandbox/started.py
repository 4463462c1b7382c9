"""A long-lived process in the bubblewrap sandbox (the stateful interpreter): paused between its calls, tidied
after each, killed whole."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
from collections.abc import Callable
from pathlib import Path

from .base import ExitReason
from .cgroup import RunCgroup
from .process import kill_group
from .quota import DiskAllowance, DiskWatch

__all__ = ["Started", "children"]

_PAUSE_ROUNDS = 4
_PAUSE_POLLS = 1000  # looks, a millisecond apart, for every process to have stopped


def children(pid: int) -> list[int]:
    """The processes each thread of `pid` forked (Linux files a child under the thread that made it)."""
    found: list[int] = []
    try:
        tids = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return found
    for tid in tids:
        with contextlib.suppress(OSError, ValueError):
            found += [int(w) for w in Path(f"/proc/{pid}/task/{tid}/children").read_text().split()]
    return found


def _all_stopped(pid: int) -> bool:
    """Whether every thread of `pid` is stopped (or it is gone). A thread in an uninterruptible wait whose child
    is stopped counts: it is the parent of a vfork, held until its child (stopped) execs or exits."""
    try:
        tids = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return True
    for tid in tids:
        state = _state(f"/proc/{pid}/task/{tid}")
        if state in (b"T", b"t", b"Z", b"X", None):
            continue
        if state == b"D" and any(_state(f"/proc/{child}") in (b"T", b"t") for child in _thread_children(pid, tid)):
            continue
        return False
    return True


def _state(proc: str) -> bytes | None:
    try:
        return Path(f"{proc}/stat").read_bytes().rsplit(b")", 1)[1].split()[0]
    except (OSError, IndexError):
        return None


def _thread_children(pid: int, tid: str) -> list[int]:
    try:
        return [int(w) for w in Path(f"/proc/{pid}/task/{tid}/children").read_text().split()]
    except (OSError, ValueError):
        return []


class Started:
    """A long-lived sandboxed process; `stop()` kills all of it."""

    def __init__(self, proc: asyncio.subprocess.Process, cgroup: RunCgroup | None,
                 watcher: asyncio.Future[None] | None = None,
                 charge: tuple[DiskAllowance, DiskWatch] | None = None, limits_mb: int = 0) -> None:
        self.proc = proc
        self.limits_mb = limits_mb
        # Undoes what the process planted in the repository (protect.remove_planted), after each of its calls.
        self.tidy: Callable[[], str] = lambda: ""
        # Takes the walk of the workspace that the next `tidy` compares with: before each cell.
        self.begin: Callable[[], None] = lambda: None
        self.cgroup = cgroup
        self.watcher = watcher
        self._charge = charge
        self._stopped: list[int] = []  # the processes `pause` stopped, for `resume`

    def _processes(self) -> set[int]:
        """Every process of the sandbox: the ones in its cgroup, and the descendants of bwrap (in its pid
        namespace, an orphan is handed to bwrap's init, which stays bwrap's child)."""
        found = set(self.cgroup.pids()) if self.cgroup is not None else set()
        todo = [self.proc.pid]
        while todo:
            pid = todo.pop()
            for child in children(pid):
                if child not in found:
                    found.add(child)
                    todo.append(child)
            found.add(pid)
        found.discard(self.proc.pid)  # bwrap itself runs nothing of the program's
        return found

    async def pause(self) -> bool:
        """Stop every process of the sandbox (SIGSTOP) after a cell, so that nothing the program left running
        (a thread, a child in the background) changes the workspace until the next cell: what it writes is
        then always within a cell, judged by that cell's tidy. False when some process could not be stopped:
        the caller then kills the interpreter (what runs unseen is never left running).

        Sent one by one, stops race a process that forks or sends SIGCONT meanwhile; so the cgroup is frozen
        while they are sent (no process runs, none forks), then thawed at once: each handles its SIGSTOP before
        running anything again. A frozen task of v1's freezer ignores SIGKILL, so nothing stays frozen longer
        than that (a stopped process, unlike a frozen one, dies of the SIGKILL --die-with-parent sends when shou
        dies). Without a freezer, signals alone, until one look finds every process stopped."""
        stopped: set[int] = set()
        for _ in range(_PAUSE_ROUNDS):
            cgroup = self.cgroup if self.cgroup is not None and self.cgroup.can_freeze() else None
            try:
                if cgroup is not None:
                    cgroup.freeze(True)  # done or not (a task in an uninterruptible wait delays it): stops follow
                found = self._processes()
                for pid in found:
                    with contextlib.suppress(ProcessLookupError, PermissionError):
                        os.kill(pid, signal.SIGSTOP)
            finally:
                if cgroup is not None:
                    cgroup.freeze(False)  # always: a cgroup left freezing holds its tasks past shou's death
            stopped |= found
            self._stopped = sorted(stopped)
            # Each stops at its next return from the kernel; nothing signals it to us (they are not our children).
            for _ in range(_PAUSE_POLLS):
                now = self._processes()
                if not now <= stopped:
                    break  # one more than was signalled: another round
                if all(_all_stopped(pid) for pid in now):
                    return True
                await asyncio.sleep(0.001)
        return False

    def resume(self) -> None:
        """Let the processes `pause` stopped run again (before the next cell)."""
        stopped, self._stopped = self._stopped, []
        for pid in stopped:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, signal.SIGCONT)

    def why_ended(self) -> tuple[ExitReason, str]:
        """Why the process died on its own (call before `stop`): the disk allowance, memory, or unknown."""
        if self._charge is not None and self._charge[1].check():
            return "disk", self._charge[1].exceeded
        if self.cgroup is not None and self.cgroup.oom_killed():
            return "memory", f"the memory limit is {self.limits_mb} MB" if self.limits_mb else "out of memory"
        return "killed", ""

    async def stop(self) -> str:
        """Kill the process group and the cgroup's processes, reap, and tidy: the tidy's note."""
        if self.watcher is not None:
            self.watcher.cancel()
        kill_group(self.proc.pid)
        if self.cgroup:
            self.cgroup.kill_all()
        for pid in self._processes() if self._stopped else ():  # SIGKILL ends a stopped process too
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, signal.SIGKILL)
        self._stopped = []
        with contextlib.suppress(TimeoutError, ProcessLookupError):
            async with asyncio.timeout(5):
                await self.proc.wait()
        if self.cgroup:
            self.cgroup.remove()
        # What a thread of the program wrote after the last cell's tidy: undone now that nothing runs (a workspace
        # gone meanwhile is no reason to leave the rest of the stop undone).
        note = ""
        with contextlib.suppress(OSError):
            note = self.tidy()
        if self._charge is not None:
            allowance, disk = self._charge
            self._charge = None
            allowance.charge(disk)
        return note
