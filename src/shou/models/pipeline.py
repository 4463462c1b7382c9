"""The model-call pipeline: an ordered list of small controls around one attempt of a model backend.

A control is an object with `__call__(call, next)` returning the call's event stream: it may act before the
call (wait for a rate limit), on each event (settle a grant), or around the whole stream (retry it). `next`
is the rest of the pipeline; calling it starts the stream, so streaming and cancellation pass straight
through (an `aclose()` on the head closes every control's generator in turn).

Pipelines are composed once (`compose`), never per call: a call costs one `ModelCall` and one generator per
control. The backends' shared pipeline (`backend.py`) is composed of the controls in `controls.py`, which
import this module's types; so it lives apart and this module imports no control.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from typing import TYPE_CHECKING, Any, Protocol

from ..chain import compose
from .base import ModelEvent, ModelSettings, Retrying, Waiting

if TYPE_CHECKING:
    from ..messages import Message

__all__ = ["Control", "ModelCall", "Next", "StreamEvent", "compose", "own_stream"]

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




def own_stream(call: ModelCall) -> AsyncIterator[StreamEvent]:
    """The rest of a pipeline as `call.model` runs it itself (its `stream()`): what a wrapper model used on
    its own (`CachedModel`, `FallbackModel`) passes on to the model it wraps."""
    return call.model.stream(call.messages, call.tools, call.settings)
