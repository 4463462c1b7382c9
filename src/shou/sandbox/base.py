"""What every sandbox backend shares: limits, results, the backend protocol and bounded output capture.

```
Sandbox (protocol)
├── BubblewrapSandbox  default on Linux: namespaces, rlimits, cgroup, no network
├── DockerSandbox      when a Docker engine answers
└── LocalSandbox       no isolation; only when the user opts in
```
"""

from __future__ import annotations

import codecs
import contextlib
import os
import secrets
from collections.abc import Callable
from dataclasses import dataclass, fields, replace
from pathlib import Path
from typing import Any, BinaryIO, Literal, Protocol, runtime_checkable

from ..errors import ShouError
from ..workspace import STATE_DIR, open_state

ExitReason = Literal["exit", "timeout", "memory", "cpu", "disk", "killed", "error"]
LANGUAGES = ("python", "bash", "node", "java")


@dataclass(frozen=True, slots=True)
class Limits:
    """Resource limits of one sandboxed run.

    `memory_mb` caps the data segment (RLIMIT_DATA; RLIMIT_AS would stop node and java from starting)
    and a cgroup where one is writable; `cpu_seconds` defaults to the wall-clock `timeout`;
    `processes` is how many processes the run may add; `disk_mb` and `inodes` bound how much the
    workspace's file system may grow during the run; `network` is off unless asked for.
    """

    timeout: float = 300.0
    memory_mb: int = 512
    cpu_seconds: int | None = None
    processes: int = 64
    file_size_mb: int = 512
    disk_mb: int = 1024
    inodes: int = 100_000
    network: bool = False

    @classmethod
    def from_settings(cls, settings: Any) -> Limits:
        """The limits `settings` ask for. A tool_timeout someone set governs shell and run_code too; left at
        its default, those two get sandbox_timeout (builds and test suites outlast 30 s)."""
        timeout = settings.sandbox_timeout
        if "tool_timeout" in settings.sources:
            timeout = min(timeout, settings.tool_timeout)
        return cls(timeout=timeout, memory_mb=settings.sandbox_memory_mb, disk_mb=settings.sandbox_disk_mb,
                   network=settings.sandbox_network)

    def within(self, ceiling: Limits) -> Limits:
        """These limits, but never looser than `ceiling` (a call cannot exceed what the agent allows)."""
        cpu = self.cpu_seconds if ceiling.cpu_seconds is None else min(self.cpu_seconds or 10**9, ceiling.cpu_seconds)
        return Limits(
            timeout=min(self.timeout, ceiling.timeout), memory_mb=min(self.memory_mb, ceiling.memory_mb),
            cpu_seconds=cpu, processes=min(self.processes, ceiling.processes),
            file_size_mb=min(self.file_size_mb, ceiling.file_size_mb), disk_mb=min(self.disk_mb, ceiling.disk_mb),
            inodes=min(self.inodes, ceiling.inodes), network=self.network and ceiling.network,
        )

    def with_(self, **changes: object) -> Limits:
        """A copy with some limits changed."""
        known = {f.name for f in fields(self)}
        unknown = set(changes) - known
        if unknown:
            raise ValueError(f"unknown limit(s) {sorted(unknown)}; known: {sorted(known)}")
        return replace(self, **changes)  # type: ignore[arg-type]

    @property
    def cpu(self) -> int:
        """CPU seconds allowed (the timeout, rounded up, when not set)."""
        return self.cpu_seconds if self.cpu_seconds is not None else int(self.timeout) + 1


@dataclass(frozen=True, slots=True)
class ExecResult:
    """How a sandboxed run ended. Output is capped: `*_omitted` bytes were dropped from the middle, and
    `output_path` (relative to the workspace) holds the full output when it did not fit."""

    stdout: str
    stderr: str
    exit_code: int | None
    duration: float
    reason: ExitReason = "exit"
    stdout_omitted: int = 0
    stderr_omitted: int = 0
    output_path: str | None = None
    note: str = ""

    @property
    def ok(self) -> bool:
        """Exited by itself with status 0."""
        return self.reason == "exit" and self.exit_code == 0

    def for_model(self) -> str:
        """The result as the model sees it: how it ended, then stdout and stderr."""
        if self.reason == "exit":
            head = f"exit code {self.exit_code}"
        elif self.reason == "timeout":
            head = "stopped: it ran past the time limit"
        elif self.reason == "memory":
            head = "stopped: out of memory"
        elif self.reason == "cpu":
            head = "stopped: it used up its CPU-time limit"
        elif self.reason == "disk":
            head = "stopped: it wrote too much to the disk"
        else:
            head = f"ended: {self.reason}"
        lines = [f"{head} ({self.duration:.2f} s)"]
        if self.note:
            lines.append(self.note)
        if self.stdout:
            lines += ["--- stdout ---", self.stdout.rstrip("\n")]
        if self.stderr:
            lines += ["--- stderr ---", self.stderr.rstrip("\n")]
        if not self.stdout and not self.stderr:
            lines.append("(no output)")
        if self.output_path:
            lines.append(f"[the full output is in {self.output_path}; read it with read_file]")
        return "\n".join(lines)


@runtime_checkable
class Sandbox(Protocol):
    """Runs commands and code in isolation, in a working directory, under limits."""

    name: str
    workspace: Path
    limits: Limits

    async def run(self, argv: list[str], *, stdin: bytes | None = None, limits: Limits | None = None,
                  files: dict[str, bytes] | None = None) -> ExecResult:
        """Run `argv` with the workspace as the current directory.

        `files` are placed read-only under `/code/` inside the sandbox (how code gets in: by file,
        never through shell quoting). `limits` are clamped to the sandbox's own.
        """
        ...

    async def run_code(self, language: str, code: str, *, limits: Limits | None = None) -> ExecResult:
        """Run a program written in `language` (python, bash, node or java)."""
        ...


class OutputCapture:
    """Keeps the head and tail of a stream in memory and spills the whole of it to a file.

    Memory stays at about `2 * keep` bytes however much the program prints; the spill file (opened only
    once the output outgrows memory) stops at `spill_limit` bytes.
    """

    __slots__ = ("_full", "_spill", "_utf8", "budget", "head", "keep", "spill_error", "spill_limit", "spill_path",
                 "spilled", "tail", "total")

    def __init__(self, keep: int = 32_000, spill_path: Path | None = None, spill_limit: int = 50_000_000,
                 budget: Callable[[], int] | None = None) -> None:
        self.keep = keep
        self.head = bytearray()
        self.tail = bytearray()
        self.total = 0
        self.spill_path = spill_path
        self.spill_limit = spill_limit
        self.spilled = 0
        self.spill_error = ""
        self.budget = budget  # bytes the run's disk allowance has left for spilling (None: no bound)
        self._spill: BinaryIO | None = None
        # The spill is written as UTF-8, U+FFFD where the program printed bytes that are not: the model is told
        # to read it with read_file, which reads UTF-8 text only.
        self._utf8 = codecs.getincrementaldecoder("utf-8")("replace")
        self._full = False  # the spill reached its limit: nothing more is written (a spill has no gaps)

    def feed(self, data: bytes) -> None:
        """Take the next chunk of output."""
        limit = self.spill_limit
        if self.budget is not None:
            # Spilled output lands on the workspace's disk: it is part of the run's allowance.
            limit = min(limit, self.spilled + max(0, self.budget()))
            if self.spilled + len(data) > limit and not self.spill_error and self.total + len(data) > 2 * self.keep:
                self.spill_error = "the run's disk allowance has no room left for it"
        if self.spill_path is not None and self.spilled < limit and not self._full:
            if self._spill is None and self.total + len(data) > 2 * self.keep:
                try:
                    self._spill = open_output(self.spill_path)
                except (OSError, ShouError) as e:  # the output still comes back, head and tail, without a file
                    self.spill_error, self.spill_path = str(e), None
                else:
                    self._spill_out(self.head + self.tail, limit)  # everything so far is still in memory
            if self._spill is not None:
                self._spill_out(data, limit)
        self.total += len(data)
        room = self.keep - len(self.head)
        if room > 0:
            self.head += data[:room]
            data = data[room:]
        if data:
            self.tail += data
            if len(self.tail) > self.keep:
                del self.tail[: len(self.tail) - self.keep]

    def _spill_out(self, data: bytes | bytearray, limit: int) -> None:
        """Write `data` to the spill as UTF-8, up to `limit` bytes written in all (`spilled` counts what was
        written: a bad byte takes three as U+FFFD, and the disk watch counts the spill as shou's own)."""
        assert self._spill is not None
        out = self._utf8.decode(bytes(data)).encode()
        room = max(0, limit - self.spilled)
        if len(out) > room:
            while room and (out[room] & 0xC0) == 0x80:  # cut where a character begins, not inside one
                room -= 1
            out = out[:room]
            self._full = True
        self.spilled += len(out)
        self._spill.write(out)

    def close(self) -> None:
        """Close the spill file, if any."""
        if self._spill is not None:
            rest = self._utf8.decode(b"", final=True).encode()  # a character the output cut short
            if rest and not self._full and self.spilled + len(rest) <= self.spill_limit:
                with contextlib.suppress(OSError):
                    self._spill.write(rest)
                    self.spilled += len(rest)
            self._spill.close()
            self._spill = None

    @property
    def omitted(self) -> int:
        """Bytes not kept in memory."""
        return self.total - len(self.head) - len(self.tail)

    def text(self) -> str:
        """Head and tail, with a note where the middle was dropped."""
        head = self.head.decode("utf-8", "replace")
        if not self.omitted:
            return head + self.tail.decode("utf-8", "replace")
        note = f"\n[... {self.omitted} bytes omitted ...]\n"
        return head + note + self.tail.decode("utf-8", "replace")


def new_output_path(workspace: Path, label: str) -> Path:
    """A fresh file under `<workspace>/.shou/outputs/` for a run's full output (made when first written)."""
    return workspace / STATE_DIR / "outputs" / f"{label}-{secrets.token_hex(4)}.txt"


def open_output(path: Path) -> BinaryIO:
    """Create a file `new_output_path` named, following no symlink on the way and overwriting nothing."""
    workspace = path.parent.parent.parent
    fd = open_state(workspace, "outputs", path.name, flags=os.O_WRONLY | os.O_CREAT | os.O_EXCL)
    return os.fdopen(fd, "wb")
