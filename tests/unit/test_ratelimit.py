"""RateLimiter: a sliding-window log of requests and tokens, served in arrival order."""

from __future__ import annotations

import asyncio
import threading
import time

import pytest

from shou.models.ratelimit import RateLimiter, limiter_for

PERIOD = 0.25
LONG = 60.0  # a window no test waits out: a request that must wait for it shows up as a 10 s timeout


def most_in_a_window(times: list[float], period: float) -> int:
    """The most of `times` that fall in any half-open window of `period` seconds (windows that start at a
    time are the fullest ones)."""
    times = sorted(times)
    return max(sum(1 for u in times if t <= u < t + period) for t in times)


async def granted_without_waiting(done: list[float], n: int) -> bool:
    """Whether `done` holds `n` grants while the loop only turns, before any timer of the limiter can fire:
    grants that go at once need no timer, so this holds however slow the machine is."""
    for _ in range(200):
        if len(done) >= n:
            return True
        await asyncio.sleep(0)
    return len(done) >= n


def tokens_in_windows(grants: list[tuple[float, int]], period: float) -> int:
    return max(sum(n for u, n in grants if t <= u < t + period) for t, _ in grants)


async def test_never_more_than_rpm_requests_in_any_window() -> None:
    limiter = RateLimiter(rpm=3, period=PERIOD)
    times: list[float] = []

    async def one() -> None:
        await limiter.acquire(1)
        times.append(time.monotonic())

    tasks = [asyncio.ensure_future(one()) for _ in range(10)]
    assert await granted_without_waiting(times, 3)  # the first three go at once ...
    await asyncio.gather(*tasks)
    assert len(times) == 10
    assert most_in_a_window(times, PERIOD) == 3
    times.sort()
    assert times[3] - times[0] >= PERIOD and times[6] - times[3] >= PERIOD  # ... the next wait for the window


async def test_never_more_than_tpm_tokens_in_any_window() -> None:
    limiter = RateLimiter(tpm=100, period=PERIOD)
    grants: list[tuple[float, int]] = []

    async def one(tokens: int) -> None:
        await limiter.acquire(tokens)
        grants.append((time.monotonic(), tokens))

    await asyncio.gather(*(one(n) for n in (40, 30, 20, 50, 10, 60, 40)))
    assert len(grants) == 7
    assert tokens_in_windows(grants, PERIOD) <= 100
    assert grants[3][0] - grants[0][0] >= PERIOD  # 40+30+20 fit; 50 more had to wait for the first to leave


async def test_both_limits_apply_together() -> None:
    limiter = RateLimiter(rpm=4, tpm=50, period=PERIOD)
    grants: list[tuple[float, int]] = []

    async def one(tokens: int) -> None:
        await limiter.acquire(tokens)
        grants.append((time.monotonic(), tokens))

    await asyncio.gather(*(one(n) for n in (1, 1, 1, 1, 1, 45, 1, 1)))
    times = [t for t, _ in grants]
    assert most_in_a_window(times, PERIOD) <= 4
    assert tokens_in_windows(grants, PERIOD) <= 50


async def test_settle_replaces_the_estimate() -> None:
    limiter = RateLimiter(tpm=100, period=LONG)
    grant = await limiter.acquire(90)
    assert grant.tokens == 90
    grant.settle(10)  # the reply was much shorter than its max_tokens
    await asyncio.wait_for(limiter.acquire(85), 10)  # 10 + 85 fits; 90 + 85 would wait out the long window
    assert limiter.usage() == (2, 95)
    grant.settle(40)  # and upwards: more than estimated counts too
    assert limiter.usage() == (2, 125)


async def test_settling_lower_lets_a_waiter_go_before_the_window_ends() -> None:
    limiter = RateLimiter(tpm=100, period=LONG)
    grant = await limiter.acquire(90)
    waiter = asyncio.ensure_future(limiter.acquire(50))
    await asyncio.sleep(0.05)
    assert not waiter.done()  # 90 + 50 > 100
    grant.settle(20)
    await asyncio.wait_for(waiter, 10)  # not the minute until the first request leaves the window


async def test_waiters_are_served_in_arrival_order() -> None:
    limiter = RateLimiter(tpm=100, period=1.0)  # long enough that the 90 is still in it when both have queued
    await limiter.acquire(90)
    order: list[str] = []

    async def one(tag: str, tokens: int) -> None:
        await limiter.acquire(tokens)
        order.append(tag)

    big = asyncio.ensure_future(one("big", 60))  # must wait for the 90 to leave the window
    await asyncio.sleep(0)  # it queues
    small = asyncio.ensure_future(one("small", 5))  # would fit now, but came later: it does not overtake
    await asyncio.sleep(0)
    assert order == []
    await asyncio.gather(big, small)
    assert order == ["big", "small"]


async def test_many_waiters_keep_their_order() -> None:
    limiter = RateLimiter(rpm=2, period=0.2)
    order: list[int] = []

    async def one(i: int) -> None:
        await limiter.acquire()
        order.append(i)

    tasks = []
    for i in range(7):
        tasks.append(asyncio.ensure_future(one(i)))
        await asyncio.sleep(0)  # each one queues before the next starts
    await asyncio.gather(*tasks)
    assert order == list(range(7))


async def test_a_request_bigger_than_tpm_waits_for_an_empty_window_then_goes() -> None:
    limiter = RateLimiter(tpm=100, period=PERIOD)
    t0 = time.monotonic()
    await limiter.acquire(10)
    await asyncio.wait_for(limiter.acquire(500), 10)  # never fits: no deadlock
    t1 = time.monotonic()
    assert t1 - t0 >= PERIOD  # but only once the 10 left the window
    await limiter.acquire(1)  # and the window is full of it now
    assert time.monotonic() - t1 >= PERIOD


async def test_a_request_bigger_than_tpm_goes_at_once_on_an_empty_window() -> None:
    limiter = RateLimiter(tpm=100, period=LONG)  # waiting for anything would mean a minute
    await asyncio.wait_for(limiter.acquire(10_000), 10)


async def test_a_cancelled_waiter_counts_for_nothing_and_blocks_no_one() -> None:
    limiter = RateLimiter(rpm=1, period=PERIOD)
    await limiter.acquire()
    waiter = asyncio.ensure_future(limiter.acquire())
    await asyncio.sleep(0.02)
    waiter.cancel()
    await asyncio.gather(waiter, return_exceptions=True)
    assert limiter.usage() == (1, 0)
    await asyncio.wait_for(limiter.acquire(), 10)  # the next one still gets through, once the window moves


def test_two_event_loops_share_one_log() -> None:
    limiter = RateLimiter(rpm=2, period=PERIOD)
    times: list[float] = []
    lock = threading.Lock()
    errors: list[BaseException] = []

    async def burst() -> None:
        for _ in range(3):
            await limiter.acquire(1)
            with lock:
                times.append(time.monotonic())

    def thread() -> None:
        try:
            asyncio.run(burst())
        except BaseException as e:
            errors.append(e)

    threads = [threading.Thread(target=thread) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert not errors
    assert len(times) == 6
    assert most_in_a_window(times, PERIOD) <= 2
    asyncio.run(limiter.acquire())  # a third loop, after the others closed: still works


def test_invalid_limits_are_refused() -> None:
    with pytest.raises(ValueError, match="rpm"):
        RateLimiter(rpm=0)
    with pytest.raises(ValueError, match="period"):
        RateLimiter(rpm=1, period=0)


def test_limiter_for_shares_one_limiter_per_provider() -> None:
    assert limiter_for("http://none.test/v1", None, None) is None
    a = limiter_for("http://a.test/v1", 10, None)
    assert a is not None
    assert limiter_for("http://a.test/v1", 10, None) is a
    assert limiter_for("http://b.test/v1", 10, None) is not a
    again = limiter_for("http://a.test/v1", 5, 1000)  # newest limits apply, on the same shared log
    assert again is a and (a.rpm, a.tpm) == (5, 1000)
