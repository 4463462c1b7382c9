"""shou's end of a resident executor (`warm_executor.py`): send a call, stream its output, enforce its limits.

Shared by the warm Docker sandbox (`docker_warm.py`) and the warm bubblewrap sandbox (`bubblewrap_warm.py`).
The executor answers one call at a time; the time limit and the disk allowance are enforced here, by
asking the executor to kill the call (`k`), and by giving the executor up as dead when it does not answer.
"""

from __future__ import annotations

import asyncio
import json
import os
import stat
import struct
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from .base import ExitReason, Limits, OutputCapture
from .quota import DiskWatch

HEADER = struct.Struct(">cI")
_EXECUTOR = Path(__file__).with_name("warm_executor.py")
KILL_GRACE = 10.0  # seconds for the executor to report a killed call before it is given up as dead
READY_WAIT = 60.0  # seconds a call's tidy may take before the executor is given up (the next call goes elsewhere)
# The executor ends itself after 900 s without a call; shou replaces it a minute before that, so that a
# call never races its exit.
IDLE_REPLACE = 840.0


class LinkBroken(Exception):
    """The executor said something it should not have."""


class NotStarted(Exception):
    """The executor was gone, or never said it was ready again, before the call was sent: the command did not
    run, and may be run elsewhere."""


class ExecutorLink:
    """A connected executor. `ooms` counts the memory kills of its cgroup (-1 when unknown); `dead` is set
    once it stopped answering (or a call was cancelled mid-way): its owner replaces it."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, ooms: Callable[[], int]) -> None:
        self.reader = reader
        self.writer = writer
        self.ooms = ooms
        self.busy = False
        self.dead = False
        self.ready = False  # the executor said `r` since the last call: its leftovers are gone
        self.last_used = time.monotonic()

    def stale(self) -> bool:
        """Whether to replace it before the next call: dead, its connection closed, or about to idle out."""
        return self.dead or self.reader.at_eof() or time.monotonic() - self.last_used > IDLE_REPLACE

    async def hello(self) -> None:
        """Wait for the executor's first frame (it is up)."""
        kind, _ = await read_frame(self.reader)
        if kind != b"r":
            raise LinkBroken(f"the executor said {kind!r} first")
        self.ready = True

    async def _await_ready(self) -> None:
        """The executor's `r` after the last call's tidy. Without it the executor died after that call's end
        (its tidy failed): the next call was sent to nobody and reported killed, though it never ran."""
        if self.ready:
            return
        try:
            kind, _ = await asyncio.wait_for(read_frame(self.reader), READY_WAIT)
        except (asyncio.IncompleteReadError, OSError, TimeoutError, struct.error) as e:
            self.dead = True
            raise NotStarted(f"the sandbox's executor stopped after its last call ({type(e).__name__})") from e
        except BaseException:
            self.dead = True
            raise
        if kind != b"r":
            self.dead = True
            raise NotStarted(f"the sandbox's executor said {kind!r} between calls")
        self.ready = True

    async def call(self, request: dict[str, Any], limits: Limits, disk: DiskWatch, out: OutputCapture,
                   err: OutputCapture) -> tuple[int | None, ExitReason, bool]:
        """Run one command (`request`: argv, rlimits, files, stdin): (exit code, or None when stopped by
        us; why it ended; whether memory ran out)."""
        await self._await_ready()
        ooms = self.ooms()
        self.last_used = time.monotonic()
        self.ready = False
        self.send(b"c", json.dumps(request).encode())
        over = asyncio.Event()
        guard = asyncio.ensure_future(disk.guard(over.set))
        reading = asyncio.ensure_future(self._pump(out, err))
        stopper = asyncio.ensure_future(over.wait())
        stopped = False
        try:
            await asyncio.wait({reading, stopper}, timeout=limits.timeout, return_when=asyncio.FIRST_COMPLETED)
            if not reading.done():
                stopped = True
                self.send(b"k")
                await asyncio.wait({reading}, timeout=KILL_GRACE)
            if not reading.done() or reading.exception() is not None:
                # The executor died (the memory limit's killer took it, or the program killed it) or hangs.
                self.dead = True
                if self.ooms() > ooms:
                    return None, "memory", True
                return None, "disk" if over.is_set() else "timeout" if stopped else "killed", False
            end = reading.result()
        except BaseException:
            self.dead = True  # a cancelled call leaves the executor mid-call: replace it
            raise
        finally:
            guard.cancel()
            stopper.cancel()
            if not reading.done():
                reading.cancel()
        oom = self.ooms() > ooms
        if over.is_set() or disk.check():
            return None if end.get("killed") else exit_code(end["status"]), "disk", oom
        if end.get("killed"):
            return None, "timeout", oom
        return exit_code(end["status"]), "exit", oom

    def send(self, kind: bytes, payload: bytes = b"") -> None:
        """Queue one frame."""
        self.writer.write(HEADER.pack(kind, len(payload)) + payload)

    async def _pump(self, out: OutputCapture, err: OutputCapture) -> dict[str, Any]:
        while True:
            kind, data = await read_frame(self.reader)
            if kind == b"o":
                out.feed(data)
            elif kind == b"e":
                err.feed(data)
            elif kind == b"x":
                return dict(json.loads(data))
            else:
                raise LinkBroken(f"unexpected frame {kind!r}")

    def abort(self) -> None:
        """Drop the connection (the executor kills what runs and exits)."""
        self.dead = True
        self.writer.transport.abort()


async def read_frame(reader: asyncio.StreamReader) -> tuple[bytes, bytes]:
    """One frame: its type and payload."""
    kind, size = HEADER.unpack(await reader.readexactly(HEADER.size))
    return kind, await reader.readexactly(size)


def exit_code(status: int) -> int:
    """The wait status as an init reports it: the exit code, or 128 + the signal."""
    if os.WIFSIGNALED(status):
        return 128 + os.WTERMSIG(status)
    return os.WEXITSTATUS(status)


def rlimits(limits: Limits) -> dict[str, list[int]]:
    """The per-call rlimits the executor sets on the command: CPU (soft below hard: SIGXCPU says "CPU
    time" where a bare SIGKILL says nothing), file size, no core files."""
    mb = 1024 * 1024
    return {"cpu": [limits.cpu, limits.cpu + 1], "fsize": [limits.file_size_mb * mb] * 2, "core": [0, 0]}


def executor_argv(address: str) -> list[str]:
    """The command that starts the executor, connecting to `address` (a socket path, or `fd:N`), run by
    the sandbox's python3, isolated (-I: the workspace is the working folder and must not shadow a
    standard module)."""
    return ["python3", "-I", "-c", _EXECUTOR.read_text(), address]


def signature(workspace: Path, rels: tuple[str, ...]) -> tuple[tuple[str, int, int] | None, ...]:
    """Which of these workspace paths exist now, and which file each is: a warm sandbox's binds are fixed
    when it is made, so it is replaced when this changes."""
    marks: list[tuple[str, int, int] | None] = []
    for rel in rels:
        try:
            st = os.lstat(workspace / rel)
        except OSError:
            marks.append(None)
            continue
        marks.append((rel, st.st_ino, stat.S_IFMT(st.st_mode)))
    return tuple(marks)
