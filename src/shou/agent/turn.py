"""One model call of a run, whatever it is for: a ReAct step, a plan, a review, a plan's final answer.

Every call goes the same way, so every call is budgeted, logged and traced alike: its worst case is
reserved against the budgets, a `ModelRequest` records exactly what is sent (and is durable before it is
sent), the reply streams to the consumer, and a `ModelResponse` records the reply, its tokens and cost.
"""

from __future__ import annotations

import itertools
import json
import secrets
import time
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

from ..errors import ModelError
from ..events import ModelRequest, ModelResponse, Notice, TextDelta, ToolCallDelta
from ..messages import Message, ToolCall
from ..models.base import (
    Completion,
    Model,
    ModelSettings,
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
from .budget import Reservation
from .recorder import RequestRecorder, request_params

if TYPE_CHECKING:
    from .loop import Run

# Model call ids: unique per process by a counter, across processes by a random prefix (a resumed run's
# calls, made by another process, must not take the ids of the killed one's).
_PROCESS = secrets.token_hex(4)
_CALLS = itertools.count(1)
MAX_ARGUMENT_CHARS = 1_000_000  # one tool call's arguments; past this the call is refused, not stored


@dataclass(frozen=True, slots=True)
class Turn:
    """A model call's outcome: the completion as the provider sent it and what it used (priced)."""

    completion: Completion
    usage: Usage
    message: Message  # the completion's, with arguments over MAX_ARGUMENT_CHARS replaced by a note
    oversized: frozenset[str]  # the ids of those calls: they are never run
    request_id: str = ""  # the call's id in the log (`ModelRequest.request_id`)


class Caller:
    """Makes a run's model calls: one per step of its ReAct loop, and the calls around it (plans, reviews)."""

    def __init__(self, run: Run) -> None:
        self.run = run
        agent = run.agent
        self.recorder = RequestRecorder(run.session.trace_keys, agent.redactor)

    async def call(self, messages: list[Message], specs: Sequence[dict[str, Any]], step: int,
                   tokens: int | None = None, *,
                   settings: ModelSettings | None = None, model: Model | None = None, run_id: str = "",
                   parent: str = "", purpose: str = "", deltas: bool = True) -> Turn | str:
        """Ask `model` (default: the agent's) for a reply to `messages` with tools `specs`; `tokens` is the
        prompt's estimate (counted here when None). Returns the turn, or why the budget does not allow the
        call (nothing was sent). Events carry `run_id` (default: the run's) and `parent` (set for a call made
        for a sub-run)."""
        run = self.run
        agent = run.agent
        model = model or agent.model
        name, provider = model_id(model), provider_of(model)
        run_id = run_id or run.run_id
        if tokens is None:
            counter = agent.token_counter
            tokens = counter.messages(messages) + (counter.text(json.dumps(list(specs))) if specs else 0)
        accounts = run.accounts
        settings, held = accounts.reserve(tokens, settings if settings is not None else agent.model_settings,
                                          model_ids(model))
        if isinstance(held, str):  # before the call that could break a budget, not after it
            return held
        recorder = self.recorder
        request_id = f"mc_{_PROCESS}{next(_CALLS):x}"
        keys, tools_ref = recorder.messages(messages), recorder.tools(list(specs))
        run.emit(ModelRequest(run_id, step, len(messages), len(specs), tokens, request_id, name, provider, keys,
                              tools_ref, request_params(settings), recorder.take(), purpose, parent=parent))
        run.commit()  # every tool result and the request itself are durable before the model sees them
        t0 = time.perf_counter()
        attempt = _Attempt(model, tokens, settings)
        try:
            completion, ttft, retries = await self._stream(model, messages, list(specs), step, settings, run_id,
                                                           parent, deltas, attempt, held)
        except _OverBudget as e:  # a billed attempt failed and another would not fit the budget
            for r in held:
                r.release()
            return str(e)
        except BaseException as e:
            # The attempt in flight was billed for what it streamed, whatever stopped it (an error no retry
            # fixes, the last retry, a deadline, a cancel): it counts, on the notice that says so.
            void, priced_as = self._void(attempt)
            for r in held:
                r.settle(void or Usage())
            if void is not None:
                run.usage = run.usage + void
            if isinstance(e, ModelError):  # a failed call: the failure-rate alert counts it
                run.emit(Notice(run_id, step, "model_error", f"{name}: {e}", void, priced_as, parent=parent))
            elif void is not None:
                run.emit(Notice(run_id, step, "interrupted", f"{name}: the call stopped after it streamed about "
                                f"{void.output_tokens:,} tokens, which count", void, priced_as, parent=parent))
            raise
        usage = completion.usage
        if completion.cached:  # answered from shou's response cache: nothing was sent or spent
            usage = Usage(cost=0.0)
        else:
            # A count the provider did not send (or sent garbled) is estimated, each side on its own: no
            # prompt is free, and a reply with any text, call or reasoning has output tokens.
            inputs, outputs, estimated = usage.input_tokens, usage.output_tokens, usage.estimated
            sent_as = completion.sent_model or name
            if not inputs:
                inputs, estimated = tokens, True
            else:
                accounts.calibrate(tokens, inputs, sent_as)
            if not outputs and (completion.message.text or completion.message.tool_calls or attempt.reasoning):
                outputs, estimated = _output_tokens(run, completion.message) + self._count(attempt.reasoning), True
            if estimated != usage.estimated or inputs != usage.input_tokens or outputs != usage.output_tokens:
                usage = Usage(inputs, outputs, usage.requests or 1, estimated, usage.cached_tokens)
            usage = accounts.priced(usage, sent_as)
        for r in held:
            r.settle(usage)
        run.usage = run.usage + usage
        message, oversized = bounded(completion.message)
        sent = completion.sent_model if completion.sent_model != name else ""
        run.emit(ModelResponse(run_id, step, message, usage, time.perf_counter() - t0,
                               completion.finish_reason, completion.model, request_id, ttft, retries,
                               completion.cached, sent, parent=parent))
        return Turn(completion, usage, message, oversized, request_id)

    async def _stream(self, model: Model, messages: list[Message], specs: list[dict[str, Any]], step: int,
                      settings: ModelSettings | None, run_id: str, parent: str, deltas: bool, attempt: _Attempt,
                      held: list[Reservation]) -> tuple[Completion, float | None, int]:
        """One model turn, streamed to the consumer as it comes; with the time to its first token and how
        many failed attempts came before it. An attempt that streamed part of a reply before it failed was
        billed: what it used is counted (estimated) against the budgets at once, and when another attempt's
        worst case no longer fits, none is made (`_OverBudget`)."""
        emit = self.run.emit
        completion: Completion | None = None
        t0 = time.perf_counter()
        ttft: float | None = None
        retries = 0
        streamed = attempt.streamed  # what this attempt streamed, for the estimate if it turns out void
        shown = _Deltas(self.run, run_id, step, parent, deltas)
        events = model.stream(messages, specs, settings)
        try:
            async for ev in events:
                if isinstance(ev, TextChunk):
                    if ttft is None:
                        ttft = time.perf_counter() - t0
                    streamed.append(ev.text)
                    shown.text(ev.text)
                elif isinstance(ev, ToolCallChunk):
                    if ttft is None:
                        ttft = time.perf_counter() - t0
                    streamed.append(ev.arguments)
                    shown.call(ev.index, ev.name, ev.arguments)
                elif isinstance(ev, ReasoningChunk):  # billed as output, shown to nobody
                    if ttft is None:
                        ttft = time.perf_counter() - t0
                    streamed.append(ev.text)
                    attempt.reasoning.append(ev.text)
                elif isinstance(ev, Completion):
                    shown.end()
                    completion = ev
                elif isinstance(ev, Waiting):
                    emit(Notice(run_id, step, "rate_limit", f"waiting {ev.delay:.0f} s before the request: {ev.reason}",
                                parent=parent))
                elif isinstance(ev, Retrying):
                    retries += 1
                    shown.end()  # what the failed attempt streamed is shown whole before the retry's notice
                    shown = _Deltas(self.run, run_id, step, parent, deltas)
                    ttft = None  # what streamed is void; the reply that counts starts again
                    self._retried(ev, attempt, step, run_id, parent, held)
        finally:
            close = getattr(events, "aclose", None)
            if close is not None:
                await close()
        if completion is None:
            raise ModelError("the model stream ended without a response")
        streamed.clear()  # it completed: nothing of it is void
        return completion, ttft, retries

    def _retried(self, ev: Retrying, attempt: _Attempt, step: int, run_id: str, parent: str,
                 held: list[Reservation]) -> None:
        """A failed attempt is retried: what it streamed was billed, so it is counted on the retry's notice
        and against the budgets; `_OverBudget` when the next attempt's worst case no longer fits."""
        void, priced_as = self._void(attempt, ev.model)
        attempt.streamed.clear()
        attempt.reasoning.clear()
        text = f"{ev.reason}; retry {ev.attempt} in {ev.delay:.1f} s"
        if void is not None:
            text += f" (the failed attempt used about {void.total_tokens:,} tokens)"
        self.run.emit(Notice(run_id, step, "retry", text, void, priced_as if void else "", parent=parent))
        if void is None:
            return
        self.run.usage = self.run.usage + void
        over = [r.budget for r in held if not r.spend(void)]
        if over:
            raise _OverBudget(f"a failed attempt of the call used about {void.total_tokens:,} "
                              f"tokens, and another attempt no longer fits the "
                              f"{over[0].describe()}; {over[0].spent_text()}")

    def _count(self, pieces: list[str]) -> int:
        return self.run.agent.token_counter.text("".join(pieces)) if pieces else 0

    def _void(self, attempt: _Attempt, sent_as: str = "") -> tuple[Usage | None, str]:
        """What the current attempt was billed if it streamed and turns out void, as shou estimates it (the
        prompt and the part of the reply it sent, at most the reply limit: no provider bills past it), and
        the model it is priced as: `sent_as` (the attempt's own, when the model said), else the only one, or
        the dearest a fallback chain may have used. None when it streamed nothing."""
        if not attempt.streamed:
            return None, ""
        output = self._count(attempt.streamed)
        limit = attempt.settings.max_tokens if attempt.settings is not None else None
        if limit:
            output = min(output, limit)
        usage = Usage(attempt.tokens, output, 0, estimated=True)
        accounts = self.run.accounts
        if sent_as:
            price = accounts.prices.lookup(sent_as)
        else:
            ids = model_ids(attempt.model)
            price, _ = accounts.dearest(ids)
            sent_as = ids[0] if len(ids) == 1 else ""
        return Usage(usage.input_tokens, output, 0, True, 0, None if price is None else price.cost(usage)), sent_as


class _Deltas:
    """An attempt's text and call fragments as the consumer is shown them. The run's emitter redacts them,
    holding back what could start a secret split across fragments until the stream ends."""

    __slots__ = ("on", "parent", "run", "run_id", "step")

    def __init__(self, run: Run, run_id: str, step: int, parent: str, on: bool) -> None:
        self.run, self.run_id, self.step, self.parent, self.on = run, run_id, step, parent, on

    def text(self, piece: str) -> None:
        """A text fragment."""
        if self.on and piece:
            self.run.emit(TextDelta(self.run_id, self.step, piece, parent=self.parent))

    def call(self, index: int, name: str | None, piece: str) -> None:
        """A fragment of call `index` (its name comes with the first)."""
        if self.on and (piece or name):
            self.run.emit(ToolCallDelta(self.run_id, self.step, index, name, piece, parent=self.parent))

    def end(self) -> None:
        """The stream ended: the emitter gives out what it held back before the run's next event."""


class _Attempt:
    """The model call's attempt in flight: what it streamed (text, call arguments, reasoning) and what it was
    asked with, for the estimate of what it cost if it fails."""

    __slots__ = ("model", "reasoning", "settings", "streamed", "tokens")

    def __init__(self, model: Model, tokens: int, settings: ModelSettings | None) -> None:
        self.model, self.tokens, self.settings = model, tokens, settings
        self.streamed: list[str] = []
        self.reasoning: list[str] = []


class _OverBudget(Exception):
    """A billed failed attempt left no room in a budget for the next one (the text says why)."""


def bounded(message: Message) -> tuple[Message, frozenset[str]]:
    """The message with over-long call arguments replaced by a short note (they are never run or stored),
    and the ids of those calls."""
    big = frozenset(c.id for c in message.tool_calls if len(c.arguments) > MAX_ARGUMENT_CHARS)
    if not big:
        return message, big
    calls = tuple(
        ToolCall(c.id, c.name, json.dumps({"_omitted": f"{len(c.arguments)} characters of arguments, over the "
                                                       f"{MAX_ARGUMENT_CHARS} limit"}))
        if c.id in big else c for c in message.tool_calls)
    return Message(message.role, message.content, calls, message.tool_call_id, message.name), big


def tool_arguments(message: Message, name: str) -> dict[str, Any] | None:
    """The arguments of the first call of tool `name` in `message` that are a JSON object (None: no such call)."""
    for call in message.tool_calls:
        if call.name != name:
            continue
        try:
            args = json.loads(call.arguments or "{}")
        except ValueError:
            continue
        if isinstance(args, dict):
            return args
    return None


def must_call(settings: ModelSettings | None) -> ModelSettings:
    """`settings` asking the model to answer with a tool call (the one tool a plan or review call offers)."""
    return replace(settings or ModelSettings(), tool_choice="required")


def _output_tokens(run: Run, message: Message) -> int:
    counter = run.agent.token_counter
    return counter.text(message.text) + sum(counter.text(c.name + c.arguments) for c in message.tool_calls)
