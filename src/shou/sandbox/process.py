"""Spawning a process tree, reading its output with bounded memory, and killing all of it.

Shared by the bubblewrap and local backends: the process starts in its own session, so a timeout or a
cancellation kills the whole process group, not just the first process.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path

from .base import ExecResult, ExitReason, Limits, OutputCapture
from .languages import looks_out_of_memory
from .quota import DiskWatch

CHUNK = 65536
HOST_ENV = {"PATH": os.environ.get("PATH", "/usr/bin:/bin")}  # for finding setpriv and bwrap only


@dataclass(slots=True)
class Finished:
    """A spawned process after it ended (or was killed)."""

    returncode: int | None
    stdout: OutputCapture
    stderr: OutputCapture
    timed_out: bool
    duration: float
    over_disk: str = ""


async def spawn_and_wait(
    argv: list[str], *, cwd: str | Path | None, env: dict[str, str] | None, stdin: bytes | None,
    timeout: float,  # noqa: ASYNC109 - the sandbox's wall-clock limit, enforced with the kill below
    user: int | None = None, pass_fds: tuple[int, ...] = (), spill: tuple[Path | None, Path | None] = (None, None),
    keep: int = 32_000, on_spawn: Callable[[int], None] | None = None, disk: DiskWatch | None = None,
    started: Callable[[int], Awaitable[None]] | None = None,
) -> Finished:
    """Run `argv`, feed `stdin`, capture stdout/stderr, and kill the process group after `timeout` s
    (or as soon as `disk` says the run wrote too much). `started` is awaited with the pid once it is
    spawned, before its output is read (bubblewrap's move into the run's cgroup)."""
    start = time.perf_counter()
    ids = {"user": user, "group": user, "extra_groups": []} if user is not None else {}
    proc = await asyncio.create_subprocess_exec(
        *argv, stdin=asyncio.subprocess.PIPE if stdin is not None else asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE, cwd=None if cwd is None else str(cwd),
        env=env, start_new_session=True, pass_fds=pass_fds, **ids,
    )
    if on_spawn is not None:
        on_spawn(proc.pid)
    budget = disk.room if disk is not None else None
    out = OutputCapture(keep, spill[0], budget=budget)
    err = OutputCapture(keep, spill[1], budget=budget)

    async def pump(stream: asyncio.StreamReader | None, sink: OutputCapture) -> None:
        if stream is None:
            return
        while chunk := await stream.read(CHUNK):
            sink.feed(chunk)
            if disk is not None:
                disk.discount = out.spilled + err.spilled  # shou's own spill files are not the program's

    async def feed() -> None:
        if proc.stdin is None:
            return
        with contextlib.suppress(BrokenPipeError, ConnectionResetError):
            if stdin:
                proc.stdin.write(stdin)
                await proc.stdin.drain()
            proc.stdin.close()

    timed_out = False
    watcher = asyncio.ensure_future(disk.guard(lambda: kill_group(proc.pid))) if disk is not None else None
    try:
        async with asyncio.timeout(timeout):
            if started is not None:
                await started(proc.pid)
            await asyncio.gather(pump(proc.stdout, out), pump(proc.stderr, err), feed())
            await proc.wait()
    except TimeoutError:
        timed_out = True
    finally:
        if watcher is not None:
            watcher.cancel()
        kill_group(proc.pid)
        # Whatever still holds the pipes is dead now; reap without waiting forever on a stuck D-state child.
        with contextlib.suppress(TimeoutError, ProcessLookupError):
            async with asyncio.timeout(5):
                await proc.wait()
        out.close()
        err.close()
    return Finished(None if timed_out else proc.returncode, out, err, timed_out, time.perf_counter() - start,
                    disk.check() if disk is not None else "")


def kill_group(pid: int) -> None:
    """SIGKILL the process group `pid` leads (quietly, if it is already gone)."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pid, signal.SIGKILL)


SIGXCPU, SIGKILL = 24, 9


def exec_result(done: Finished, workspace: Path, limits: Limits, oom: bool = False) -> ExecResult:
    """Why a run ended (timeout, memory, CPU, killed, or its own exit), with a note naming the limit, and
    its output; spill files that turned out not to be needed are removed."""
    stderr = done.stderr.text()
    code = done.returncode
    reason: ExitReason = "exit"
    note = ""
    if done.timed_out:
        reason, note = "timeout", f"the time limit is {limits.timeout:g} s"
    elif done.over_disk:
        reason, note = "disk", done.over_disk
    elif oom:
        reason, note = "memory", f"the memory limit is {limits.memory_mb} MB"
    elif code in (SIGXCPU + 128, -SIGXCPU):
        reason, note = "cpu", f"the CPU-time limit is {limits.cpu} s"
    elif code in (SIGKILL + 128, -SIGKILL):
        reason = "killed"
    elif code and looks_out_of_memory(stderr):
        reason, note = "memory", f"it ran out of memory: the limit is {limits.memory_mb} MB"
    paths = [c.spill_path for c in (done.stdout, done.stderr) if c.omitted and c.spill_path]
    for capture in (done.stdout, done.stderr):
        if not capture.omitted and capture.spill_path and capture.spill_path.exists():
            capture.spill_path.unlink()  # everything fit in memory: no file needed
    output_path = " and ".join(str(p.relative_to(workspace)) for p in paths) or None
    unsaved = next((c.spill_error for c in (done.stdout, done.stderr) if c.spill_error), "")
    if unsaved:
        note = "; ".join(x for x in (note, f"the full output could not be saved ({unsaved})") if x)
    return ExecResult(done.stdout.text(), stderr, code, done.duration, reason, done.stdout.omitted,
                      done.stderr.omitted, output_path, note)


def close_fds(fds: tuple[int, ...]) -> None:
    """Close these fds (quietly, if one is closed already)."""
    for fd in fds:
        with contextlib.suppress(OSError):
            os.close(fd)


def processes_of(uid: int) -> int:
    """How many processes `uid` runs now (RLIMIT_NPROC counts them all, not just the sandbox's)."""
    count = 0
    for entry in os.scandir("/proc"):
        if entry.name.isdigit():
            with contextlib.suppress(OSError):
                if entry.stat().st_uid == uid:
                    count += 1
    return count
