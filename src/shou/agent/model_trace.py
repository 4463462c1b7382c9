"""The trace control of the model pipeline: what a run's model call leaves in the run's event log.

Before the call goes on, a `ModelRequest` records exactly what is sent (the settings as the budget set them)
and is made durable; while it streams, its text and call fragments go to the consumer and a long rate-limit
wait or a retry is a `Notice`; at the end a `ModelResponse` records the reply, its tokens and cost. An
attempt that streamed part of a reply before it failed was billed: the trace estimates what it used and
counts it on the notice that says so (`retry`, `model_error`, `interrupted`) and in the run's usage; the
budget control above it reads the same estimate off the call (`RunCall.void`) to hold it against the budgets.

It sits inside the budget (a refused call leaves no request in the log) and outside the models layer's
controls, so one request is logged per call, whichever model of a fallback chain answers it and however
many attempts it takes.
"""

from __future__ import annotations

import itertools
import secrets
import time
from collections.abc import AsyncIterator
from typing import TYPE_CHECKING

from ..errors import ModelError
from ..events import ModelRequest, ModelResponse, Notice, TextDelta, ToolCallDelta
from ..models.base import (
    Completion,
    ReasoningChunk,
    Retrying,
    TextChunk,
    ToolCallChunk,
    Waiting,
    model_id,
    model_ids,
    provider_of,
)
from ..usage import Usage
from .modelcall import RunCall, Turn, bounded
from .recorder import RequestRecorder, request_params

if TYPE_CHECKING:
    from ..messages import Message
    from ..models.pipeline import Next, StreamEvent
    from .loop import Run

__all__ = ["Trace"]

# Model call ids: unique per process by a counter, across processes by a random prefix (a resumed run's
# calls, made by another process, must not take the ids of the killed one's).
_PROCESS = secrets.token_hex(4)
_CALLS = itertools.count(1)


class _Watch:
    """What the attempt in flight streamed (for the estimate if it turns out void), and the call's timing."""

    __slots__ = ("completion", "reasoning", "retries", "streamed", "t0", "ttft")

    def __init__(self) -> None:
        self.streamed: list[str] = []
        self.reasoning: list[str] = []
        self.completion: Completion | None = None
        self.retries = 0
        self.ttft: float | None = None
        self.t0 = time.perf_counter()

    def first(self) -> None:
        """A fragment came: the first one of the attempt sets the time to the first token."""
        if self.ttft is None:
            self.ttft = time.perf_counter() - self.t0


class Trace:
    """Logs a run's model call: its request, its fragments, its notices, its response (see the module)."""

    __slots__ = ("recorder", "run")

    def __init__(self, run: Run) -> None:
        self.run = run
        self.recorder = RequestRecorder(run.session.trace_keys, run.agent.redactor)

    async def __call__(self, call: RunCall, next: Next) -> AsyncIterator[StreamEvent]:
        """The call's events, logged; the `Completion` comes last, once the `ModelResponse` is emitted and
        the call's `turn` set."""
        self._request(call)
        await self.run.commit_ahead()  # every tool result and the request itself are durable before the model sees them
        watch = _Watch()
        try:
            events = next(call)  # inside: a backend that fails before its first event failed this call too
            try:
                async for ev in events:
                    if isinstance(ev, TextChunk):
                        watch.first()
                        watch.streamed.append(ev.text)
                        self._text(call, ev.text)
                    elif isinstance(ev, ToolCallChunk):
                        watch.first()
                        watch.streamed.append(ev.arguments)
                        self._call(call, ev)
                    elif isinstance(ev, ReasoningChunk):  # billed as output, shown to nobody
                        watch.first()
                        watch.streamed.append(ev.text)
                        watch.reasoning.append(ev.text)
                    elif isinstance(ev, Completion):
                        watch.completion = ev  # held: it goes on once the response is logged
                        continue
                    elif isinstance(ev, Waiting):
                        self.run.emit(Notice(call.run_id, call.step, "rate_limit", f"waiting {ev.delay:.0f} s "
                                             f"before the request: {ev.reason}", parent=call.parent))
                    elif isinstance(ev, Retrying):
                        self._retried(call, watch, ev)
                    yield ev
            finally:
                close = getattr(events, "aclose", None)
                if close is not None:
                    await close()
            if watch.completion is None:
                raise ModelError("the model stream ended without a response")
        except BaseException as e:
            self._failed(call, watch, e)
            raise
        watch.streamed.clear()  # it completed: nothing of it is void
        yield self._response(call, watch, watch.completion)

    def _request(self, call: RunCall) -> None:
        """The `ModelRequest`, durable before the model sees it."""
        run, recorder, model = self.run, self.recorder, call.model
        call.request_id = f"mc_{_PROCESS}{next(_CALLS):x}"
        keys, tools_ref = recorder.messages(call.messages), recorder.tools(call.tools)
        run.emit(ModelRequest(call.run_id, call.step, len(call.messages), len(call.tools), call.tokens,
                              call.request_id, model_id(model), provider_of(model), keys, tools_ref,
                              request_params(call.settings), recorder.take(), call.purpose, parent=call.parent))

    def _text(self, call: RunCall, piece: str) -> None:
        # The run's emitter redacts fragments, holding back what could start a secret split across them.
        if call.deltas and piece:
            self.run.emit(TextDelta(call.run_id, call.step, piece, parent=call.parent))

    def _call(self, call: RunCall, ev: ToolCallChunk) -> None:
        if call.deltas and (ev.arguments or ev.name):
            self.run.emit(ToolCallDelta(call.run_id, call.step, ev.index, ev.name, ev.arguments, parent=call.parent))

    def _retried(self, call: RunCall, watch: _Watch, ev: Retrying) -> None:
        """A failed attempt is retried: what it streamed was billed, so it is counted on the retry's notice
        and in the run's usage, and left on the call for the budget."""
        watch.retries += 1
        watch.ttft = None  # what streamed is void; the reply that counts starts again
        void, priced_as = self._void(call, watch, ev.model)
        watch.streamed.clear()
        watch.reasoning.clear()
        call.void = void
        text = f"{ev.reason}; retry {ev.attempt} in {ev.delay:.1f} s"
        if void is not None:
            text += f" (the failed attempt used about {void.total_tokens:,} tokens)"
        run = self.run
        run.emit(Notice(call.run_id, call.step, "retry", text, void, priced_as if void else "", parent=call.parent))
        if void is not None:
            run.usage = run.usage + void

    def _failed(self, call: RunCall, watch: _Watch, error: BaseException) -> None:
        """The call failed or was stopped (an error no retry fixes, the last retry, a deadline, a cancel):
        the attempt in flight was billed for what it streamed, and it counts, on the notice that says so."""
        void, priced_as = self._void(call, watch)
        call.void = void
        run = self.run
        if void is not None:
            run.usage = run.usage + void
        name = model_id(call.model)
        if isinstance(error, ModelError):  # a failed call: the failure-rate alert counts it
            run.emit(Notice(call.run_id, call.step, "model_error", f"{name}: {error}", void, priced_as,
                            parent=call.parent))
        elif void is not None:
            run.emit(Notice(call.run_id, call.step, "interrupted", f"{name}: the call stopped after it streamed "
                            f"about {void.output_tokens:,} tokens, which count", void, priced_as, parent=call.parent))

    def _response(self, call: RunCall, watch: _Watch, completion: Completion) -> Completion:
        """The `ModelResponse`, with what the call used, counted in the run's usage; the call's `turn`."""
        run = self.run
        name = model_id(call.model)
        usage = completion.usage
        if completion.cached:  # answered from shou's response cache: nothing was sent or spent
            usage = Usage(cost=0.0)
        else:
            # A count the provider did not send (or sent garbled) is estimated, each side on its own: no
            # prompt is free, and a reply with any text, call or reasoning has output tokens.
            inputs, outputs, estimated = usage.input_tokens, usage.output_tokens, usage.estimated
            if inputs:  # how far the prompt's estimate falls short of the provider's count, for the budgets
                run.accounts.calibrate(call.tokens, inputs, completion.sent_model or name)
            if not inputs:
                inputs, estimated = call.tokens, True
            if not outputs and (completion.message.text or completion.message.tool_calls or watch.reasoning):
                outputs, estimated = self._output_tokens(completion.message) + self._count(watch.reasoning), True
            if estimated != usage.estimated or inputs != usage.input_tokens or outputs != usage.output_tokens:
                usage = Usage(inputs, outputs, usage.requests or 1, estimated, usage.cached_tokens)
            usage = run.accounts.priced(usage, completion.sent_model or name)
        run.usage = run.usage + usage
        message, oversized = bounded(completion.message)
        sent = completion.sent_model if completion.sent_model != name else ""
        run.emit(ModelResponse(call.run_id, call.step, message, usage, time.perf_counter() - watch.t0,
                               completion.finish_reason, completion.model, call.request_id, watch.ttft,
                               watch.retries, completion.cached, sent, parent=call.parent))
        call.turn = Turn(completion, usage, message, oversized, call.request_id)
        return completion

    def _count(self, pieces: list[str]) -> int:
        return self.run.agent.token_counter.text("".join(pieces)) if pieces else 0

    def _output_tokens(self, message: Message) -> int:
        counter = self.run.agent.token_counter
        return counter.text(message.text) + sum(counter.text(c.name + c.arguments) for c in message.tool_calls)

    def _void(self, call: RunCall, watch: _Watch, sent_as: str = "") -> tuple[Usage | None, str]:
        """What the current attempt was billed if it streamed and turns out void, as shou estimates it (the
        prompt and the part of the reply it sent, at most the reply limit: no provider bills past it), and
        the model it is priced as: `sent_as` (the attempt's own, when the model said), else the only one, or
        the dearest a fallback chain may have used. None when it streamed nothing."""
        if not watch.streamed:
            return None, ""
        output = self._count(watch.streamed)
        limit = call.settings.max_tokens if call.settings is not None else None
        if limit:
            output = min(output, limit)
        usage = Usage(call.tokens, output, 0, estimated=True)
        accounts = self.run.accounts
        if sent_as:
            price = accounts.prices.lookup(sent_as)
        else:
            ids = model_ids(call.model)
            price, _ = accounts.dearest(ids)
            sent_as = ids[0] if len(ids) == 1 else ""
        return Usage(usage.input_tokens, output, 0, True, 0, None if price is None else price.cost(usage)), sent_as
