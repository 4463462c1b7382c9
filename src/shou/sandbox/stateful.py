"""Stateful Python: one persistent interpreter per session inside the sandbox, like a notebook kernel.

Variables and imports survive between calls. A call that runs past its time limit kills the
interpreter; so does a crash. The next call starts a fresh one and says so, so the model knows its
earlier variables are gone.

An interpreter remembers whether outside content entered it (`tainted`): a web page a tool call of code
mode returned, or anything at all when the sandbox has the network. Any variable may hold it from then on,
so the output of every later cell is untrusted too, whichever tool runs the cell (code mode's `python`,
`run_code(stateful=True)`). The mark stays with the session, also when its interpreter is restarted or
retired: the code may have written the content to the workspace, for a later cell to read back.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any, Protocol

from ..errors import ToolError
from .base import ExecResult, ExitReason, Limits

KERNEL_SOURCE = (Path(__file__).parent / "kernel.py").read_bytes()
OnCall = Callable[[dict[str, Any]], Awaitable[dict[str, Any]]]


def _decode(line: bytes) -> dict[str, Any] | None:
    try:
        value = json.loads(line)
    except ValueError:
        return None
    return value if isinstance(value, dict) else None


class Starter(Protocol):
    """A sandbox that can start a long-lived process (bubblewrap and local can)."""

    limits: Limits

    async def start(self, argv: list[str], *, limits: Limits | None = None,
                    files: dict[str, bytes] | None = None) -> Any:
        """Start `argv` with stdin/stdout pipes; the handle has `.proc` and `async stop()`."""
        ...


class StatefulPython:
    """A persistent interpreter in `sandbox`; `execute()` runs one cell."""

    def __init__(self, sandbox: Starter, limits: Limits | None = None) -> None:
        self.sandbox = sandbox
        self.limits = limits or sandbox.limits
        self._handle: Any = None
        self._lock = asyncio.Lock()
        self._restart_note = ""
        self.tainted = bool(self.limits.network)  # code that can reach the network can fetch anything
        self.marker: tuple[Path, str] | None = None  # (workspace, session): where the taint is kept on disk

    def taint(self) -> None:
        """Note that outside content entered the interpreter: every later cell's output is untrusted, in
        this process and in any later one of the session (shou.sandbox.taintmark)."""
        self.tainted = True
        if self.marker is not None:
            from .taintmark import mark

            mark(*self.marker)

    async def _ensure(self) -> None:
        if self._handle is not None and self._handle.proc.returncode is None:
            return
        if self._handle is not None:
            code = self._handle.proc.returncode
            await self._handle.stop()
            self._handle = None
            self._restart_note = (f"[the Python interpreter had exited (code {code}) and was restarted: "
                                  "variables and imports from earlier calls are gone]")
        # The kernel lives as long as the session, so its CPU budget is not one call's timeout.
        limits = self.limits.with_(timeout=10**9, cpu_seconds=10**6)
        self._handle = await self.sandbox.start(["python3", "-u", "/code/kernel.py"], limits=limits,
                                                files={"kernel.py": KERNEL_SOURCE})
        ready = await asyncio.wait_for(self._handle.proc.stdout.readline(), 30)
        if not ready:
            await self._handle.stop()
            self._handle = None
            raise ToolError("the Python interpreter could not start in the sandbox")

    async def execute(self, code: str, time_limit: float | None = None, *, tools: list[dict[str, Any]] | None = None,
                      on_call: OnCall | None = None) -> ExecResult:
        """Run `code` in the session's interpreter; a timeout or crash restarts it on the next call.

        `tools` (`{"name", "params", "doc"}`) become functions in the cell; each call they make is handed to
        `on_call({"name", "arguments"})`, whose `{"value": ...}` or `{"error": "..."}` goes back to the code.
        The time limit covers the whole cell, the calls it makes included.
        """
        limit = time_limit or self.limits.timeout
        async with self._lock:
            await self._ensure()
            proc = self._handle.proc
            start = time.perf_counter()
            note, self._restart_note = self._restart_note, ""
            # The walk this cell's tidy compares with (`git_cells.Tidy`), taken while the sandbox's processes are
            # paused (`Started.pause`, after the last cell): whatever the program does happens within a cell.
            if callable(begin := getattr(self._handle, "begin", None)):
                begin()
            if callable(resume := getattr(self._handle, "resume", None)):
                resume()
            try:
                proc.stdin.write(json.dumps({"code": code, "tools": tools or []}).encode() + b"\n")
                await proc.stdin.drain()
                async with asyncio.timeout(limit):
                    while True:
                        line = await proc.stdout.readline()
                        reply = _decode(line) if line else None
                        if reply is None or "call" not in reply:
                            break
                        answer = await on_call(reply["call"]) if on_call is not None else {
                            "error": "tools cannot be called from this code"}
                        proc.stdin.write(json.dumps(answer).encode() + b"\n")
                        await proc.stdin.drain()
            except TimeoutError:
                await self.close()
                self._restart_note = ("[the previous call timed out, so the Python interpreter was restarted: "
                                      "variables and imports from earlier calls are gone]")
                return ExecResult("", "", None, time.perf_counter() - start, "timeout",
                                  note=f"the time limit is {limit:g} s; the interpreter was stopped")
            except (BrokenPipeError, ConnectionResetError):
                line, reply = b"", None
            except BaseException:
                await self.close()  # cancelled mid-cell: the interpreter's state is unknown
                raise
            duration = time.perf_counter() - start
            if reply is None:
                if line:  # not the protocol: the interpreter is in a state nothing can trust
                    await self.close()
                    return ExecResult("", "", None, duration, "killed", note="the interpreter broke its protocol")
                await proc.wait()
                code_ = proc.returncode
                reason, why = _why_ended(self._handle, code_)
                await self.close()
                self._restart_note = (f"[the Python interpreter crashed (exit code {code_}) and was restarted: "
                                      "variables and imports from earlier calls are gone]")
                return ExecResult("", "", code_, duration, reason,
                                  note="; ".join(x for x in ("the interpreter crashed during this call", why) if x))
            error = reply.get("error")
            stderr = str(reply.get("stderr", "")) + (error or "")
            if callable(pause := getattr(self._handle, "pause", None)) and not await pause():
                # What this code left running could not be stopped: it is killed, never left running unseen.
                handle, self._handle = self._handle, None
                planted = await handle.stop()
                self._restart_note = ("[the Python interpreter was stopped after the previous call: what it left "
                                      "running could not be paused between calls; variables and imports are gone]")
                note = "; ".join(x for x in (note, "processes this code left running could not be paused, so the "
                                             "interpreter was stopped (its variables are gone)", planted) if x)
            elif callable(tidy := getattr(self._handle, "tidy", None)) and (planted := tidy()):
                note = "; ".join(x for x in (note, planted) if x)
            return ExecResult(str(reply.get("stdout", "")), stderr, 1 if error else 0, duration, "exit", note=note)

    async def close(self) -> None:
        """Stop the interpreter."""
        if self._handle is not None:
            handle, self._handle = self._handle, None
            await handle.stop()


def _why_ended(handle: Any, code: int | None) -> tuple[ExitReason, str]:
    """Why a kernel died: what its sandbox knows (disk allowance, memory), else a guess from the signal."""
    why = getattr(handle, "why_ended", None)
    if why is not None:
        reason, note = why()
        if reason != "killed":
            return reason, note
    return ("memory" if code in (-9, 137) else "killed"), ""


_KERNELS: dict[tuple[int, str], StatefulPython] = {}  # oldest use first
_USED: dict[tuple[int, str], float] = {}
_CLOSING: set[asyncio.Future[None]] = set()
_TAINTED: set[tuple[int, str]] = set()  # sessions whose retired interpreter had taken in outside content
MAX_KERNELS = 16  # interpreters kept at once in a process; the least recently used one is stopped past it
IDLE_SECONDS = 900.0  # an interpreter unused this long is stopped (its session starts a fresh one)


def kernel_for(sandbox: Starter, session: str, workspace: Path | None = None) -> StatefulPython:
    """The session's interpreter in `sandbox`, made on first use. Interpreters idle for `IDLE_SECONDS`, and
    the least recently used past `MAX_KERNELS`, are stopped: each holds a process and up to the sandbox's
    memory, and a server has many sessions."""
    if not hasattr(sandbox, "start"):
        raise ToolError(f"stateful Python needs the bubblewrap or local backend, not {sandbox.__class__.__name__}")
    key = (id(sandbox), session)
    now = time.monotonic()
    kernel = _KERNELS.pop(key, None)
    if kernel is None:
        from .taintmark import is_marked

        kernel = StatefulPython(sandbox)
        kernel.marker = (Path(workspace), session) if workspace is not None else None
        if key in _TAINTED or kernel.tainted or is_marked(workspace, session):
            kernel.taint()
    _KERNELS[key] = kernel  # now the most recently used
    _USED[key] = now
    for old in [k for k in _KERNELS if k != key and (now - _USED.get(k, now) > IDLE_SECONDS)]:
        _retire(old)
    while len(_KERNELS) > MAX_KERNELS:
        _retire(next(iter(_KERNELS)))
    return kernel


def _retire(key: tuple[int, str]) -> None:
    kernel = _KERNELS.pop(key, None)
    _USED.pop(key, None)
    if kernel is not None:
        if kernel.tainted:
            _TAINTED.add(key)
        task = asyncio.ensure_future(kernel.close())
        _CLOSING.add(task)  # held until done: the loop keeps only weak references to tasks
        task.add_done_callback(_CLOSING.discard)


async def close_session(session: str) -> None:
    """Stop the interpreters of `session` (it was deleted: a new session of the same name starts afresh)."""
    _TAINTED.difference_update([k for k in _TAINTED if k[1] == session])
    for key in [k for k in _KERNELS if k[1] == session]:
        kernel = _KERNELS.pop(key)
        _USED.pop(key, None)
        await kernel.close()
