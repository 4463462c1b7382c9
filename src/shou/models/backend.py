"""The model backends' base: a model whose `attempt()` is one request, and the resilience pipeline
(rate limit, retry) every backend's `stream()` runs: the wire client, the local model and the scripted
model alike. Apart from `pipeline.py` so the controls can import the pipeline's types without a circle.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import TYPE_CHECKING, Any

from .base import ModelSettings
from .controls import RateLimit, Retry
from .pipeline import ModelCall, Next, StreamEvent, compose

if TYPE_CHECKING:
    from ..messages import Message
    from .ratelimit import RateLimiter
    from .runtime import RetryPolicy

__all__ = ["Backend", "resilient"]


def _attempt(call: ModelCall) -> AsyncIterator[StreamEvent]:
    return call.model.attempt(call)


_resilient: Next | None = None


def resilient() -> Next:
    """The pipeline every backend's `stream()` runs: rate limit and retry around one attempt. Made once per
    process: the controls read each backend's own limiter and retry policy from the call."""
    global _resilient
    if _resilient is None:
        _resilient = compose([Retry(), RateLimit()], _attempt)
    return _resilient


class Backend:
    """A model whose `attempt()` makes one request; `stream()` runs it through the resilience pipeline.

    `limiter` keeps the provider's requests and tokens per minute (None: no limit; every attempt counts);
    `retry` says how often and how patiently a retryable error (as the provider's error classes decide)
    is tried again (None: never).
    """

    limiter: RateLimiter | None = None
    retry: RetryPolicy | None = None

    def stream(self, messages: list[Message], tools: list[dict[str, Any]], settings: ModelSettings | None = None
               ) -> AsyncIterator[StreamEvent]:
        """One complete response; after a `Retrying`, what the failed attempt streamed is void."""
        call = ModelCall(messages, tools, settings, self)
        self.prepare(call)
        return resilient()(call)

    def prepare(self, call: ModelCall) -> None:
        """Work done once for every attempt of `call` (nothing by default)."""

    def rate_tokens(self, call: ModelCall) -> int:
        """The tokens `call` counts for under a tokens-per-minute limit before its usage is known: about 4
        characters a token of what is sent, plus all the output it may write."""
        chars = sum(len(m.text or "") + len(m.tool_calls) * 64 for m in call.messages)
        limit = call.settings.max_tokens if call.settings is not None and call.settings.max_tokens else 0
        return chars // 4 + limit

    def attempt(self, call: ModelCall) -> AsyncIterator[StreamEvent]:
        """One request: its fragments, then the `Completion`, or a `ModelError`."""
        raise NotImplementedError
