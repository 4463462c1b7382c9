"""A chain of models: when one provider is failing, the next one answers.

`FallbackModel([primary, backup, ...])` is a `Model`; the `Fallback` control of the model pipeline serves it.
It streams from the first; when that fails in a way
that says the provider is failing (down, overloaded, rate limiting, unreachable, cutting replies off, after
its own retries), it announces the switch as a `Retrying` and streams the next. An error that says the
configuration is wrong (a refused key, an unknown model, a rejected request) is raised at once: another
provider would not fix it, and falling back would hide it.

A model that failed is tried last for `cooldown` seconds (a circuit breaker): an agent asks its model every
step, and without it each step would first wait out the failing provider's retries again.
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator, Sequence
from dataclasses import replace
from typing import Any

from ..errors import ModelError, ModelRateLimitError, ModelUnavailableError, UserError
from ..messages import Message
from .base import Completion, Model, ModelSettings, Retrying, model_id, provider_of
from .pipeline import ModelCall, Next, StreamEvent, own_stream

__all__ = ["Fallback", "FallbackModel"]

# The provider is failing: another one may answer. ModelUnavailableError covers 5xx and timeouts, and its
# subclasses ModelCutOffError (replies cut off) and ModelUnreachableError (no connection).
FAILOVER_ERRORS = (ModelUnavailableError, ModelRateLimitError)


class FallbackModel:
    """`models` tried in order, each failing provider skipped for `cooldown` seconds. `name` is the first's.

    The `Completion` is the answering model's, with `sent_model` naming it. When every model fails, the
    last error is raised (same type) with a message naming each model and how it failed.
    """

    def __init__(self, models: Sequence[Model], cooldown: float = 60.0) -> None:
        if not models:
            raise UserError("FallbackModel needs at least one model")
        if cooldown < 0:
            raise UserError(f"cooldown must not be negative, not {cooldown}")
        self.models: tuple[Model, ...] = tuple(models)
        self.name = self.models[0].name
        # The name a request is first sent with, and its provider (what traces and prices go by); the model
        # that answered is named in its Completion (`sent_model`).
        self.model = model_id(self.models[0])
        self.provider = provider_of(self.models[0])
        self.cooldown = cooldown
        self._failed_at: dict[int, float] = {}  # model index → when it last failed (monotonic)

    def __repr__(self) -> str:
        return f"FallbackModel([{', '.join(m.name for m in self.models)}], cooldown={self.cooldown:g})"

    def order(self) -> list[Model]:
        """The models in the order the next call tries them: healthy ones first, then those cooling down
        (the one that failed longest ago first)."""
        return [self.models[i] for i in self._order()]

    def _order(self) -> list[int]:
        now = time.monotonic()
        cooling = {i: t for i, t in self._failed_at.items() if now - t < self.cooldown}
        healthy = [i for i in range(len(self.models)) if i not in cooling]
        return healthy + sorted(cooling, key=cooling.__getitem__)

    async def aclose(self) -> None:
        """Close every model's connections."""
        errors = []
        for model in self.models:
            try:
                await model.aclose()
            except Exception as e:  # close the others anyway
                errors.append(e)
        if errors:
            raise errors[0]

    def stream(
        self, messages: list[Message], tools: list[dict[str, Any]], settings: ModelSettings | None = None
    ) -> AsyncIterator[StreamEvent]:
        """The first model's reply that completes. A switch to the next model is a `Retrying`: what the
        failed one streamed is void."""
        return Fallback()(ModelCall(messages, tools, settings, self), own_stream)

    def failed(self, index: int) -> None:
        """Model `index` failed as a provider does: it is tried last for `cooldown` seconds."""
        self._failed_at[index] = time.monotonic()

    def answered(self, index: int) -> None:
        """Model `index` answered: healthy again."""
        self._failed_at.pop(index, None)


class Fallback:
    """The fallback chain as a control of the model pipeline: a call to a `FallbackModel` is passed on as a
    call to each of its models in turn (`FallbackModel.order`) until one completes. It is the outermost
    control of the models layer: each model of the chain then gets the rest of the pipeline of its own
    (its cache entries, its retries, its rate limit), and the chain moves on only once a model's own retries
    gave up.

    A call to any other model passes straight through (no generator of its own: this runs on every call).
    """

    __slots__ = ()

    def __call__(self, call: ModelCall, next: Next) -> AsyncIterator[StreamEvent]:
        """The call's events: those of the first model of the chain that answers."""
        chain = call.model
        if not isinstance(chain, FallbackModel):
            return next(call)
        return _through(chain, call, next)


async def _through(chain: FallbackModel, call: ModelCall, next: Next) -> AsyncIterator[StreamEvent]:
    order = chain._order()
    failures: list[tuple[Model, ModelError]] = []
    for n, index in enumerate(order):
        model = chain.models[index]
        events = next(ModelCall(call.messages, call.tools, call.settings, model))
        try:
            async for event in events:
                if isinstance(event, Completion):
                    chain.answered(index)
                    if not event.sent_model:
                        event = replace(event, sent_model=model_id(model))
                yield event
            return
        except FAILOVER_ERRORS as e:
            chain.failed(index)
            failures.append((model, e))
            if n + 1 < len(order):
                following = chain.models[order[n + 1]]
                yield Retrying(n + 1, 0.0, f"{model.name} failed ({e}); trying {following.name}", model_id(model))
        finally:
            close = getattr(events, "aclose", None)  # a model's own stream may be a plain async iterator
            if close is not None:
                await close()
    last = failures[-1][1]
    tried = "; ".join(f"{m.name}: {e}" for m, e in failures)
    raise type(last)(f"every model failed ({tried})", status=last.status, retry_after=last.retry_after) from None
