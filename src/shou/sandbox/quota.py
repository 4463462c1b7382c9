"""A run's share of the disk: how much the workspace's file system may grow while sandboxed code runs.

There is no per-run file-system quota to lean on (project quotas need a prepared file system), so a
watcher samples `statvfs` of the workspace's file system every few tens of milliseconds and stops the run
when it has grown by more than the byte or inode allowance. It is a bound with some slack, not an exact
quota: writes made between two samples land (at most one interval's worth, on top of RLIMIT_FSIZE per
file), and anything else writing to the same file system during the run counts too.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
from collections.abc import Callable
from pathlib import Path

INTERVAL = 0.05


class DiskWatch:
    """Measures growth of the file system holding `path` since the watch started."""

    def __init__(self, path: Path, max_bytes: int, max_inodes: int) -> None:
        self.path = path
        self.max_bytes = max_bytes
        self.max_inodes = max_inodes
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
        used, inodes = self._usage()
        grown = used - self._start[0] - self.discount
        if grown > self.max_bytes:
            self.exceeded = f"it wrote more than the {self.max_bytes // 2**20} MB disk allowance of a run"
        elif inodes - self._start[1] > self.max_inodes:
            self.exceeded = f"it created more than the {self.max_inodes} files allowed in a run"
        return self.exceeded

    async def guard(self, stop: Callable[[], None]) -> None:
        """Call `stop` (and return) once the allowance is passed; runs until cancelled."""
        while not self.check():  # noqa: ASYNC110 - polling is the point: nothing signals disk growth
            await asyncio.sleep(INTERVAL)
        with contextlib.suppress(Exception):
            stop()
