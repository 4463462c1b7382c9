"""A sync tool whose call timed out is told to stop, and `read_file` does stop: its thread does not go on
scanning a file for a result nobody waits for (three timed-out reads once ran 80 s more at 12.8 GB)."""

from __future__ import annotations

import asyncio
import os
import threading
from pathlib import Path

import pytest

from shou.messages import ToolCall
from shou.tools import linewindow
from shou.tools.base import Tool, ToolContext
from shou.tools.builtin.files import read_file
from shou.tools.executor import ToolExecutor
from shou.tools.registry import ToolSet
from shou.tools.threads import abandoned_calls, stop_requested, wait_abandoned

WAIT = 60.0  # only a bound for a broken build: the waits below end when the condition holds


async def test_a_timed_out_sync_tool_sees_the_stop_and_its_thread_ends() -> None:
    started, saw_stop = threading.Event(), threading.Event()

    def spin() -> str:
        """Work until told to stop."""
        started.set()
        while not stop_requested():
            threading.Event().wait(0.001)  # a piece of work
        saw_stop.set()
        return "stopped"

    executor = ToolExecutor(ToolSet([Tool("spin", "Spin.", None, spin)]), timeout=0.05)
    result = await executor.execute(ToolCall("c1", "spin", "{}"), None)
    assert result.is_error and "was stopped" in result.content
    assert started.wait(WAIT)  # a busy machine may start the thread only after the 0.05 s have passed
    assert saw_stop.wait(WAIT)
    assert wait_abandoned(WAIT, spin) and abandoned_calls(spin) == 0


async def test_a_call_that_finishes_in_time_is_never_told_to_stop() -> None:
    def quick() -> bool:
        """Say whether a stop was asked for."""
        return stop_requested()

    executor = ToolExecutor(ToolSet([Tool("quick", "Quick.", None, quick)]), timeout=WAIT)
    result = await executor.execute(ToolCall("c1", "quick", "{}"), None)
    assert result.content == "false" and abandoned_calls(quick) == 0


async def test_a_timed_out_read_stops_scanning(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # A file that takes far longer to scan than the timeout: text first, then a terabyte hole (no disk used).
    ws = tmp_path / "ws"
    ws.mkdir()
    path = ws / "huge.log"
    path.write_text("line\n" * 2000)
    os.truncate(path, 1 << 40)
    monkeypatch.setattr(linewindow, "MAX_SCAN_BYTES", 1 << 41)  # so that only the stop can end the scan
    executor = ToolExecutor(ToolSet([read_file]), timeout=0.2)
    call = ToolCall("c1", "read_file", '{"path": "huge.log", "offset": 1000000}')
    result = await executor.execute(call, ToolContext(workspace=ws))
    assert result.is_error and "was stopped" in result.content
    assert wait_abandoned(WAIT, read_file.handler), "the read went on scanning after its call was stopped"
    assert abandoned_calls(read_file.handler) == 0


async def test_an_idle_worker_keeps_nothing_of_its_last_call() -> None:
    """A worker waiting for its next job held its last one (arguments, result, an exception with its frames)
    until then: a big argument or result stayed alive, and its garbage surfaced in whatever ran next."""
    import gc
    import time
    import weakref

    from shou.tools.threads import run_in_daemon_thread

    class Big:
        pass

    def fails(big: Big) -> None:
        raise ValueError("no")

    big = Big()
    gone = weakref.ref(big)
    with pytest.raises(ValueError):
        await run_in_daemon_thread(fails, {"big": big})
    del big
    gc.collect()
    deadline = time.monotonic() + 10  # the worker lets go once it returns from the call: wait for that, bounded
    while gone() is not None and time.monotonic() < deadline:
        gc.collect()
        await asyncio.sleep(0.01)
    assert gone() is None, "an idle worker still holds its last call"
