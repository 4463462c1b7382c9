"""The model protocol: one async `stream()` from messages and tool specs to model events.

A model yields `TextChunk`s and `ToolCallChunk`s as they arrive and always ends with exactly one
`Completion` holding the assembled assistant message, usage and finish reason. Non-streaming backends
simply yield the `Completion` alone (optionally after one `TextChunk`). A backend that retries yields a
`Retrying` notice first; it may come after output (a reply cut off mid-stream is retried from scratch),
and then the chunks before it are void: only the `Completion` is the reply, and only a complete reply
(one the provider ended with a finish reason) yields one.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

from ..frozen import fast_init
from ..messages import Message
from ..usage import Usage


@dataclass(frozen=True, slots=True)
class ModelSettings:
    """Per-request knobs; `None` leaves the provider's default."""

    temperature: float | None = None
    max_tokens: int | None = None
    tool_choice: str | dict[str, Any] | None = None
    parallel_tool_calls: bool | None = None
    extra: dict[str, Any] = field(default_factory=dict)

    @classmethod
    def from_settings(cls, settings: Any) -> ModelSettings | None:
        """The per-request options `settings` ask for (temperature, max_tokens, top_p, seed), or None for none."""
        extra = {k: v for k in ("top_p", "seed") if (v := getattr(settings, k, None)) is not None}
        temperature, max_tokens = getattr(settings, "temperature", None), getattr(settings, "max_tokens", None)
        if temperature is None and max_tokens is None and not extra:
            return None
        return cls(temperature=temperature, max_tokens=max_tokens, extra=extra)


@dataclass(frozen=True, slots=True)
class TextChunk:
    """A piece of the assistant's text."""

    text: str


@dataclass(frozen=True, slots=True)
class ReasoningChunk:
    """A piece of the model's reasoning (`reasoning_content`, DeepSeek's and others'): not part of the reply,
    but billed as output, so it counts when an attempt fails and when a provider sends no counts."""

    text: str


@dataclass(frozen=True, slots=True)
class ToolCallChunk:
    """A fragment of tool call number `index`: the name when first seen, then argument pieces."""

    index: int
    name: str | None
    arguments: str


@fast_init
@dataclass(frozen=True, slots=True)
class Completion:
    """The end of a model response: the assembled message, usage and why it stopped. `model` is the model
    the provider says answered; `sent_model` the name the request asked for (what prices are keyed on);
    `cached` is true when the response came from shou's response cache, not the provider."""

    message: Message
    usage: Usage
    finish_reason: str | None
    model: str = ""
    sent_model: str = ""
    cached: bool = False


ModelEvent = TextChunk | ToolCallChunk | ReasoningChunk | Completion


@runtime_checkable
class Model(Protocol):
    """Anything that can answer a conversation. `name` shows in events and summaries."""

    name: str

    def stream(
        self, messages: list[Message], tools: list[dict[str, Any]], settings: ModelSettings | None = None
    ) -> AsyncIterator[ModelEvent | Retrying | Waiting]:
        """Stream one response to `messages`, offering `tools` (wire specs)."""
        ...

    async def aclose(self) -> None:
        """Release connections."""
        ...


@dataclass(frozen=True, slots=True)
class Retrying:
    """The model call failed with a retryable error and will be tried again after `delay` seconds.

    The attempt's text and call fragments streamed so far are void: the next attempt streams from scratch.
    """

    attempt: int
    delay: float
    reason: str
    model: str = ""  # the name the failed attempt was sent with (in a fallback chain, the model that failed)



@dataclass(frozen=True, slots=True)
class Waiting:
    """The request waits `delay` seconds before it is sent (a client-side rate limit, `reason` says which);
    nothing is void. Only long waits are announced, so that a run that seems stuck says why."""

    delay: float
    reason: str


def model_id(model: Model) -> str:
    """The model name a request is sent with (what prices are keyed on): `gpt-4o-mini`, not `openai:gpt-4o-mini`."""
    sent = getattr(model, "model", None)
    return sent if isinstance(sent, str) and sent else model.name


def model_ids(model: Model) -> tuple[str, ...]:
    """The names of every model that may answer a request to `model`: its own, or each of a fallback chain's
    (`models`), in order. A budget prices a call at the dearest of them."""
    chain = getattr(model, "models", None)
    if isinstance(chain, tuple) and chain:
        return tuple(name for m in chain for name in model_ids(m))
    return (model_id(model),)


def provider_of(model: Model) -> str:
    """The provider a model is served by (`openai`, `deepseek`, `local`, `scripted`, ...)."""
    provider = getattr(model, "provider", None)
    return provider if isinstance(provider, str) and provider else model.name.partition(":")[0]
