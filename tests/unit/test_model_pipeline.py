"""The model-call pipeline's controls one by one (compose, retry, rate limit), on a backend made for them.
Rate limits are checked on the limiter's own clock, never on wall time."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import pytest

from shou.errors import ModelAuthError, ModelUnavailableError
from shou.messages import Message
from shou.models.base import Completion, Retrying, TextChunk, Waiting
from shou.models.controls import RateLimit, Retry
from shou.models.pipeline import ModelCall, compose
from shou.models.ratelimit import Clock, RateLimiter
from shou.models.runtime import RetryPolicy
from shou.usage import Usage

DONE = Completion(Message.assistant("ok"), Usage(3, 2, 1), "stop", "m")


class StoppedClock(Clock):  # also in test_backends_keep_limits.py, which must import on older trees
    """A clock that moves only when the limiter waits: each wait is recorded and passes at once."""

    def __init__(self) -> None:
        self.t = 1000.0
        self.waits: list[float] = []

    def now(self) -> float:
        return self.t

    async def wait(self, changed: asyncio.Event, seconds: float) -> None:
        self.waits.append(seconds)
        self.t += seconds
        await asyncio.sleep(0)


class Flaky:
    """A backend whose first `fails` attempts raise `error`."""

    name = "flaky"
    model = "flaky"

    def __init__(self, fails: int, error: Exception, retry: RetryPolicy | None, limiter: RateLimiter | None = None):
        self.fails, self.error, self.retry, self.limiter, self.attempts = fails, error, retry, limiter, 0

    def rate_tokens(self, call: ModelCall) -> int:
        return 10

    async def attempt(self, call: ModelCall) -> AsyncIterator[Any]:
        self.attempts += 1
        yield TextChunk("partial")
        if self.attempts <= self.fails:
            raise self.error
        yield DONE


def run(model: Flaky, controls: list[Any]) -> list[Any]:
    head = compose(controls, lambda call: call.model.attempt(call))

    async def go() -> list[Any]:
        return [e async for e in head(ModelCall([Message.user("hi")], [], None, model))]

    return asyncio.run(go())


def test_compose_runs_controls_in_order_around_the_terminal() -> None:
    seen: list[str] = []

    class Mark:
        def __init__(self, name: str) -> None:
            self.name = name

        async def __call__(self, call: ModelCall, next: Any) -> AsyncIterator[Any]:
            seen.append(self.name)
            async for event in next(call):
                yield event
            seen.append("/" + self.name)

    events = run(Flaky(0, ValueError(), None), [Mark("a"), Mark("b")])
    assert events[-1] is DONE
    assert seen == ["a", "b", "/b", "/a"]


def test_retry_control_retries_what_the_error_class_says_is_retryable() -> None:
    model = Flaky(2, ModelUnavailableError("down", status=503), RetryPolicy(max_retries=3, base=0.0))
    events = run(model, [Retry()])
    assert model.attempts == 3
    assert [e.attempt for e in events if isinstance(e, Retrying)] == [1, 2]
    assert events[-1] is DONE


def test_retry_control_gives_up_and_never_retries_a_terminal_error() -> None:
    model = Flaky(5, ModelUnavailableError("down", status=503), RetryPolicy(max_retries=1, base=0.0))
    with pytest.raises(ModelUnavailableError, match="gave up after 2 attempts"):
        run(model, [Retry()])
    refused = Flaky(5, ModelAuthError("bad key", status=401), RetryPolicy(max_retries=5, base=0.0))
    with pytest.raises(ModelAuthError):
        run(refused, [Retry()])
    assert refused.attempts == 1
    unset = Flaky(1, ModelUnavailableError("down", status=503), None)  # no policy: never retried
    with pytest.raises(ModelUnavailableError):
        run(unset, [Retry()])
    assert unset.attempts == 1


def test_rate_limit_control_waits_on_its_clock_and_counts_every_attempt() -> None:
    clock = StoppedClock()
    limiter = RateLimiter(rpm=2, period=60.0, margin=1.0, clock=clock)
    model = Flaky(2, ModelUnavailableError("down", status=503), RetryPolicy(max_retries=3, base=0.0), limiter)
    events = run(model, [Retry(), RateLimit()])
    assert model.attempts == 3
    assert clock.waits == [61.0]  # the third attempt waited for the first to leave the window
    assert [e.delay for e in events if isinstance(e, Waiting)] == [61.0]
    # the first two left the window while the third waited; its grant settled with the real count
    assert limiter.usage() == (1, DONE.usage.total_tokens)
