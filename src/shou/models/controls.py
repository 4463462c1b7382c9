"""The controls around each attempt of a model backend (`backend.pipeline`): prepare, retry, rate limit.

Each reads its configuration from the call's backend (`limiter`, `retry`), so one pipeline serves every
backend of the process. What is retryable is decided by the error's class (`provider_errors.py` for the
wire client), never here.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from typing import TYPE_CHECKING

from ..errors import ModelError, ModelUnreachableError
from .base import Completion, Retrying, Waiting, model_id
from .pipeline import ModelCall, Next, StreamEvent

if TYPE_CHECKING:
    from .ratelimit import RateLimiter
    from .runtime import RetryPolicy

__all__ = ["ANNOUNCED_WAIT", "Prepare", "RateLimit", "Retry"]

ANNOUNCED_WAIT = 5.0  # seconds: a rate-limit wait this long is announced (`Waiting`), so a run never seems stuck


class Prepare:
    """Lets the backend the call reached do once what all its attempts share (`Backend.prepare`: the wire
    client encodes the request body, which the rate limit then counts). A model without `prepare` (one that
    is not a `Backend`) passes through."""

    __slots__ = ()

    def __call__(self, call: ModelCall, next: Next) -> AsyncIterator[StreamEvent]:
        """The call's events, once it is prepared (no generator of its own: this runs on every call)."""
        prepare = getattr(call.model, "prepare", None)
        if prepare is not None:
            prepare(call)
        return next(call)


class Retry:
    """Retries a retryable `ModelError` from scratch after the policy's delay, announcing each retry as a
    `Retrying` (what the failed attempt streamed is void). Past the policy's count the error is raised,
    saying how many attempts were made."""

    __slots__ = ()

    def __call__(self, call: ModelCall, next: Next) -> AsyncIterator[StreamEvent]:
        """The events of the first attempt that completes (no generator of its own for a model without a
        retry policy: its errors pass unchanged)."""
        policy = getattr(call.model, "retry", None)
        if policy is None:
            return next(call)
        return _retried(call, next, policy)


async def _retried(call: ModelCall, next: Next, policy: RetryPolicy) -> AsyncIterator[StreamEvent]:
    """`call`'s events, its failed attempts retried as `policy` says."""
    attempt = 1
    while True:
        try:
            events = next(call)
            try:
                async for event in events:
                    yield event
            finally:  # closed here, not by the loop's finalizer (a wake-up and a task per call)
                await events.aclose()
            return
        except ModelError as e:
            error = e
        most = policy.max_unreachable_retries if isinstance(error, ModelUnreachableError) else policy.max_retries
        if not error.retryable or attempt > most:
            if error.retryable:
                tries = f"{attempt} attempts" if attempt > 1 else "1 attempt"
                raise type(error)(f"{error} (gave up after {tries})", status=error.status,
                                  retry_after=error.retry_after) from None
            raise error from None
        delay = policy.delay(attempt - 1, error.retry_after)
        yield Retrying(attempt, delay, str(error), model_id(call.model))
        await asyncio.sleep(delay)
        attempt += 1


class RateLimit:
    """Waits until the backend's limiter lets the attempt go (every attempt: a retry is a request the
    provider counts), announces a long wait as `Waiting`, and settles the grant with the reply's real
    token count."""

    __slots__ = ()

    def __call__(self, call: ModelCall, next: Next) -> AsyncIterator[StreamEvent]:
        """The attempt's events, once the limits allow it (no generator of its own without a limiter: this
        runs on every attempt)."""
        limiter = getattr(call.model, "limiter", None)
        if limiter is None:
            return next(call)
        return _limited(call, next, limiter)


async def _limited(call: ModelCall, next: Next, limiter: RateLimiter) -> AsyncIterator[StreamEvent]:
    """`call`'s events once `limiter` lets it go, its grant settled with the reply's real token count."""
    estimate = call.model.rate_tokens(call)
    wait = limiter.expected_wait(estimate)
    if wait >= ANNOUNCED_WAIT:
        yield Waiting(wait, limiter.why(estimate))
    grant = await limiter.acquire(estimate)
    async with contextlib.aclosing(next(call)) as events:
        async for event in events:
            if type(event) is Completion and event.usage.total_tokens:
                grant.settle(event.usage.total_tokens)
            yield event
