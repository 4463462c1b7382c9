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
    Retrying,
    TextChunk,
    ToolCallChunk,
    model_id,
    provider_of,
)
from ..usage import Usage
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
        settings, held = accounts.reserve(tokens, settings if settings is not None else agent.model_settings, name)
        if isinstance(held, str):  # before the call that could break a budget, not after it
            return held
        recorder = self.recorder
        request_id = f"mc_{_PROCESS}{next(_CALLS):x}"
        keys, tools_ref = recorder.messages(messages), recorder.tools(list(specs))
        run.emit(ModelRequest(run_id, step, len(messages), len(specs), tokens, request_id, name, provider, keys,
                              tools_ref, request_params(settings), recorder.take(), purpose, parent=parent))
        run.commit()  # every tool result and the request itself are durable before the model sees them
        t0 = time.perf_counter()
        try:
            completion, ttft, retries = await self._stream(model, messages, list(specs), step, settings, run_id,
                                                           parent, deltas)
        except BaseException:
            for r in held:
                r.release()
            raise
        usage = completion.usage
        if completion.cached:  # answered from shou's response cache: nothing was sent or spent
            usage = Usage(cost=0.0)
        else:
            if not usage.input_tokens and not usage.output_tokens:  # the provider sent no counts
                usage = Usage(tokens, _output_tokens(run, completion.message), usage.requests or 1, estimated=True)
            elif not usage.input_tokens:  # no prompt was free: a missing (or garbled) count is estimated
                usage = Usage(tokens, usage.output_tokens, usage.requests, True, usage.cached_tokens)
            else:
                accounts.calibrate(tokens, usage.input_tokens)
            usage = accounts.priced(usage, completion.sent_model or name)
        for r in held:
            r.settle(usage)
        run.usage = run.usage + usage
        message, oversized = bounded(completion.message)
        run.emit(ModelResponse(run_id, step, message, usage, time.perf_counter() - t0,
                               completion.finish_reason, completion.model, request_id, ttft, retries,
                               completion.cached, parent=parent))
        return Turn(completion, usage, message, oversized)

    async def _stream(self, model: Model, messages: list[Message], specs: list[dict[str, Any]], step: int,
                      settings: ModelSettings | None, run_id: str, parent: str,
                      deltas: bool) -> tuple[Completion, float | None, int]:
        """One model turn, streamed to the consumer as it comes; with the time to its first token and how
        many failed attempts came before it."""
        emit = self.run.emit
        completion: Completion | None = None
        t0 = time.perf_counter()
        ttft: float | None = None
        retries = 0
        async for ev in model.stream(messages, specs, settings):
            if isinstance(ev, TextChunk):
                if ttft is None:
                    ttft = time.perf_counter() - t0
                if deltas:
                    emit(TextDelta(run_id, step, ev.text, parent=parent))
            elif isinstance(ev, ToolCallChunk):
                if ttft is None:
                    ttft = time.perf_counter() - t0
                if deltas:
                    emit(ToolCallDelta(run_id, step, ev.index, ev.name, ev.arguments, parent=parent))
            elif isinstance(ev, Completion):
                completion = ev
            elif isinstance(ev, Retrying):
                retries += 1
                ttft = None  # what streamed is void; the reply that counts starts again
                emit(Notice(run_id, step, "retry", f"{ev.reason}; retry {ev.attempt} in {ev.delay:.1f} s",
                            parent=parent))
        if completion is None:
            raise ModelError("the model stream ended without a response")
        return completion, ttft, retries


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
