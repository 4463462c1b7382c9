"""A run's share of the disk: how much the workspace's file system may grow while sandboxed code runs.

The allowance is the run's, not one call's: a `DiskAllowance` adds up the growth of every sandboxed call
of one agent run (the shell tool picks it by run id and makes it current with `charging`), and each call
may only use what the earlier ones left. A sandbox used outside any run charges its own allowance, so all
of its calls count as one run.

There is no per-run file-system quota to lean on (project quotas need a prepared file system), so a
watcher samples `statvfs` of the workspace's file system every few tens of milliseconds and stops the run
when it has grown by more than the byte or inode allowance. It is a bound with some slack, not an exact
quota: writes made between two samples land (at most one interval's worth, on top of RLIMIT_FSIZE per
file), and anything else writing to the same file system during the run counts too.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import os
import threading
from collections import OrderedDict
from collections.abc import Callable, Iterator
from pathlib import Path

INTERVAL = 0.05
KEPT_RUNS = 1024  # allowances remembered for this many recent runs (a server runs many)
MiB = 2**20


class DiskWatch:
    """Measures growth of the file system holding `path` since the watch started."""

    def __init__(self, path: Path, max_bytes: int, max_inodes: int, *, used: tuple[int, int] = (0, 0)) -> None:
        self.path = path
        self.max_bytes = max_bytes
        self.max_inodes = max_inodes
        self.used = used  # bytes and files earlier calls of the run already took from the allowance
        self.exceeded = ""
        self._start = self._usage()
        self.discount = 0  # bytes shou itself writes meanwhile (spilled output), not the program's

    def _usage(self) -> tuple[int, int]:
        try:
            st = os.statvfs(self.path)
        except OSError:
            return 0, 0
        return (st.f_blocks - st.f_bfree) * st.f_frsize, st.f_files - st.f_ffree

    def check(self) -> str:
        """Why the run must stop ("" while it is within bounds)."""
        grown, files = self.growth()
        if self.used[0] + grown > self.max_bytes:
            self.exceeded = f"it wrote more than the {self.max_bytes // MiB} MB disk allowance of a run" + (
                f" (earlier calls of this run used {self.used[0] / MiB:.1f} MB of it)" if self.used[0] > 0 else "")
        elif self.used[1] + files > self.max_inodes:
            self.exceeded = f"it created more than the {self.max_inodes} files allowed in a run" + (
                f" (earlier calls of this run made {self.used[1]})" if self.used[1] > 0 else "")
        return self.exceeded

    def growth(self) -> tuple[int, int]:
        """Bytes and files the file system grew by since the watch started (shou's own writes aside)."""
        used, inodes = self._usage()
        return used - self._start[0] - self.discount, inodes - self._start[1]

    def room(self) -> int:
        """Bytes the allowance has left now, shou's own writes counted (spilled output is bounded by it)."""
        used, _ = self._usage()
        return self.max_bytes - self.used[0] - (used - self._start[0])

    async def guard(self, stop: Callable[[], None]) -> None:
        """Call `stop` (and return) once the allowance is passed; runs until cancelled."""
        while not self.check():  # noqa: ASYNC110 - polling is the point: nothing signals disk growth
            await asyncio.sleep(INTERVAL)
        with contextlib.suppress(Exception):
            stop()


class DiskAllowance:
    """What one run may add to the disk across all its sandboxed calls, and how much it has added."""

    def __init__(self, max_bytes: int, max_inodes: int) -> None:
        self.max_bytes = max_bytes
        self.max_inodes = max_inodes
        self.used_bytes = 0
        self.used_inodes = 0
        self._lock = threading.Lock()

    def spent(self) -> str:
        """Why no further call may run ("" while some allowance is left)."""
        if self.used_bytes >= self.max_bytes:
            return (f"this run has used its {self.max_bytes // MiB} MB disk allowance "
                    f"({self.used_bytes / MiB:.1f} MB written by its earlier calls); the command was not run")
        if self.used_inodes >= self.max_inodes:
            return (f"this run has created the {self.max_inodes} files it is allowed "
                    f"({self.used_inodes} by its earlier calls); the command was not run")
        return ""

    def watch(self, path: Path, max_bytes: int, max_inodes: int) -> DiskWatch:
        """A watch for one call: at most the call's own limits, and never more than the run has left."""
        with self._lock:
            used = (self.used_bytes, self.used_inodes)
        return DiskWatch(path, min(max_bytes, self.max_bytes), min(max_inodes, self.max_inodes), used=used)

    def charge(self, watch: DiskWatch) -> None:
        """Add what the call behind `watch` wrote (net: a call that deletes files gives room back), its
        spilled output included: that is on the disk too, and a run printing without end must not fill it."""
        grown, files = watch.growth()
        grown += watch.discount
        with self._lock:
            self.used_bytes = max(0, self.used_bytes + grown)
            self.used_inodes = max(0, self.used_inodes + files)


_current: contextvars.ContextVar[DiskAllowance | None] = contextvars.ContextVar("shou_disk_allowance", default=None)
_runs: OrderedDict[str, DiskAllowance] = OrderedDict()
_runs_lock = threading.Lock()


def current_allowance(fallback: DiskAllowance) -> DiskAllowance:
    """The allowance of the run this call belongs to (`charging`), else the sandbox's own `fallback`."""
    return _current.get() or fallback


def run_allowance(run_id: str, max_bytes: int, max_inodes: int) -> DiskAllowance:
    """The allowance of run `run_id`, made on its first sandboxed call."""
    with _runs_lock:
        found = _runs.get(run_id)
        if found is None:
            found = _runs[run_id] = DiskAllowance(max_bytes, max_inodes)
            while len(_runs) > KEPT_RUNS:
                _runs.popitem(last=False)
        _runs.move_to_end(run_id)
        return found


@contextlib.contextmanager
def charging(allowance: DiskAllowance | None) -> Iterator[None]:
    """Sandboxed calls made inside this block count against `allowance` (None: the sandbox's own)."""
    token = _current.set(allowance)
    try:
        yield
    finally:
        _current.reset(token)
