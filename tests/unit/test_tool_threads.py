"""Sync tools on worker threads: quick calls are waited for on the spot, slow ones never stall the loop for
more than the short wait, results and errors arrive exactly once either way, and timeouts still hold."""

from __future__ import annotations

import asyncio
import random
import threading
import time

import pytest

from shou import tool
from shou.tools.threads import run_in_daemon_thread


def add(a: int, b: int) -> int:
    """Add."""
    return a + b


async def test_a_quick_call_is_answered_on_the_spot() -> None:
    future = run_in_daemon_thread(add, {"a": 2, "b": 3}, wait=5.0)
    assert future.done()  # no trip through the loop: the result is there when the call returns
    assert await future == 5


async def test_without_a_wait_the_loop_is_woken_with_the_result() -> None:
    gate = threading.Event()

    def held() -> str:
        gate.wait(60)
        return "done"

    future = run_in_daemon_thread(held, {})
    assert not future.done()
    gate.set()
    assert await asyncio.wait_for(future, 30) == "done"  # the loop is woken at once; 30 s only for a broken one


async def test_errors_arrive_on_both_paths() -> None:
    def boom() -> None:
        raise ValueError("no")

    for wait in (0.0, 5.0):
        with pytest.raises(ValueError, match="no"):
            await run_in_daemon_thread(boom, {}, wait=wait)


async def test_results_that_come_just_as_the_wait_ends_are_delivered_once() -> None:
    # Calls that finish around the wait's end: before, during and after the hand-back to the loop.
    rng = random.Random(7)
    delays = [rng.uniform(0, 0.002) for _ in range(300)]

    def slow(i: int, d: float) -> int:
        time.sleep(d)
        return i

    results = [await asyncio.wait_for(run_in_daemon_thread(slow, {"i": i, "d": d}, wait=0.001), 5)
               for i, d in enumerate(delays)]
    assert results == list(range(len(delays)))


async def test_a_tool_turned_slow_stalls_the_loop_once_by_the_short_wait_only() -> None:
    slow, released = threading.Event(), threading.Event()

    def sometimes_slow() -> str:
        """Quick, then slow until the event loop has gone on without it."""
        if slow.is_set():
            released.wait(30)  # a loop blocked for the whole call never sets it: the call would take 30 s
        return "ok"

    t = tool(sometimes_slow)
    for _ in range(200):  # quick means its last call took under 0.5 ms: on a busy machine one may not
        assert await t.call({}, None) == "ok"
        if t._quick:
            break
    assert t._quick  # answered quickly: the next call is waited for on the spot, briefly
    ticks = 0

    async def ticker() -> None:
        nonlocal ticks
        while ticks < 10:  # the loop keeps turning while the worker is busy; then the tool may finish
            await asyncio.sleep(0)
            ticks += 1
        released.set()

    slow.set()
    ticking = asyncio.create_task(ticker())
    try:
        assert await t.call({}, None) == "ok"
    finally:
        ticking.cancel()
    assert released.is_set() and ticks >= 10  # the tool finished because the loop ran beside it
    assert not t._quick


async def test_a_hanging_quick_tool_still_times_out() -> None:
    release, hang = threading.Event(), threading.Event()

    def hangs_second_time() -> str:
        """Quick, then hangs."""
        if hang.is_set():
            release.wait(10)
        return "ok"

    t = tool(hangs_second_time)
    for _ in range(200):  # quick means its last call took under 0.5 ms: on a busy machine one may not
        await t.call({}, None)
        if t._quick:
            break
    assert t._quick
    hang.set()
    started = time.perf_counter()
    with pytest.raises(TimeoutError):
        async with asyncio.timeout(0.1):
            await t.call({}, None)
    release.set()
    assert time.perf_counter() - started < 5
    assert not t._quick
