"""The model-call pipeline: an ordered list of small controls around one attempt of a model backend.

A control is an object with `__call__(call, next)` returning the call's event stream: it may act before the
call (wait for a rate limit), on each event (settle a grant), or around the whole stream (retry it). `next`
is the rest of the pipeline; calling it starts the stream, so streaming and cancellation pass straight
through (an `aclose()` on the head closes every control's generator in turn).

Pipelines are composed once (`compose`), never per call: a call costs one `ModelCall` and one generator per
control. `Backend` gives a model whose own `attempt()` is one request the resilience controls every
backend shares (rate limit, retry): the wire client, the local model and the scripted model alike.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Sequence
from typing import TYPE_CHECKING, Any, Protocol

from .base import ModelEvent, ModelSettings, Retrying, Waiting

if TYPE_CHECKING:
    from ..messages import Message
    from .ratelimit import RateLimiter
    from .runtime import RetryPolicy

__all__ = ["Backend", "Control", "ModelCall", "Next", "StreamEvent", "compose"]

StreamEvent = ModelEvent | Retrying | Waiting


class ModelCall:
    """One model call as the controls see it: what is asked, of which backend, and what a backend prepared
    once for all its attempts (`prepared`, e.g. the encoded request body)."""

    __slots__ = ("messages", "model", "prepared", "settings", "tools")

    def __init__(self, messages: list[Message], tools: list[dict[str, Any]], settings: ModelSettings | None,
                 model: Any, prepared: Any = None) -> None:
        self.messages, self.tools, self.settings, self.model, self.prepared = messages, tools, settings, model, prepared


Next = Callable[[ModelCall], AsyncIterator[StreamEvent]]


class Control(Protocol):
    """One step of a pipeline: the call's events, made by calling `next` (or not: a cache hit)."""

    def __call__(self, call: ModelCall, next: Next) -> AsyncIterator[StreamEvent]:
        """The events of `call`."""
        ...


def compose(controls: Sequence[Control], terminal: Next) -> Next:
    """The head of `controls` in order (the first is outermost) ending in `terminal`."""
    head = terminal
    for control in reversed(controls):
        head = _link(control, head)
    return head


def _link(control: Control, rest: Next) -> Next:
    def step(call: ModelCall) -> AsyncIterator[StreamEvent]:
        return control(call, rest)

    return step


def _attempt(call: ModelCall) -> AsyncIterator[StreamEvent]:
    return call.model.attempt(call)


_resilient: Next | None = None


def resilient() -> Next:
    """The pipeline every backend's `stream()` runs: rate limit and retry around one attempt. Made once per
    process: the controls read each backend's own limiter and retry policy from the call."""
    global _resilient
    if _resilient is None:
        from .controls import RateLimit, Retry

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
