"""The model backends' base: a model whose `attempt()` is one request, and the models layer's pipeline every
backend's `stream()` runs: the wire client, the local model and the scripted model alike, and each model of a
fallback chain. Apart from `pipeline.py` so the controls can import the pipeline's types without a circle.

The order, outermost first, and why:
- `Fallback`: a chain's models each get the rest of the pipeline of their own; the chain moves on only
  once a model's own retries gave up (a switch is not spent on a blip one retry fixes).
- `Cache`: a hit is answered before anything below spends a request slot or waits; inside fallback, so an
  entry is keyed on the model that really gets the request.
- `Prepare`: what every attempt shares is made once (the encoded body), before the rate limit counts it.
- `Retry`: a failed attempt is tried again from scratch; outside the rate limit, because...
- `RateLimit`: every attempt is a request the provider counts, a retry included.
The run's controls (budget, trace: `agent/`) are composed around this same head (`agent/turn.py`).
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import TYPE_CHECKING, Any

from .base import ModelSettings
from .cache import Cache
from .controls import Prepare, RateLimit, Retry
from .fallback import Fallback
from .pipeline import ModelCall, Next, StreamEvent, compose

if TYPE_CHECKING:
    from ..messages import Message
    from .ratelimit import RateLimiter
    from .runtime import RetryPolicy

__all__ = ["Backend", "pipeline"]


def _attempt(call: ModelCall) -> AsyncIterator[StreamEvent]:
    """One request of the backend the call reached; a model that is no `Backend` (any object with the
    `Model` protocol) answers with its own `stream()`."""
    attempt = getattr(call.model, "attempt", None)
    if attempt is None:
        return call.model.stream(call.messages, call.tools, call.settings)
    return attempt(call)


_pipeline: Next | None = None


def pipeline() -> Next:
    """The head of the models layer's pipeline (fallback, cache, prepare, retry, rate limit, one attempt).
    Made once per process: the controls read each model's own chain, cache, limiter and retry policy from
    the call."""
    global _pipeline
    if _pipeline is None:
        _pipeline = compose([Fallback(), Cache(), Prepare(), Retry(), RateLimit()], _attempt)
    return _pipeline


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
        return pipeline()(ModelCall(messages, tools, settings, self))

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
