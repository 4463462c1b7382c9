"""A run's model call as the run's controls see it (`RunCall`), and its outcome (`Turn`).

`RunCall` is the models layer's `ModelCall` with what the run knows about it: the step, the run and
sub-run it is for, the prompt's estimate. The run's controls (`budget.Budgets`, `model_trace.Trace`) write
what they found back on it, so that `Caller.call` reads the outcome off the call and names no control: the
turn, or why the budget refused it, and what a failed attempt was billed (the trace counts it, the budget
holds it).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ..frozen import fast_init
from ..messages import Message, ToolCall
from ..models.pipeline import ModelCall

if TYPE_CHECKING:
    from ..models.base import Completion, ModelSettings
    from ..usage import Usage

__all__ = ["MAX_ARGUMENT_CHARS", "RunCall", "Turn", "bounded"]

MAX_ARGUMENT_CHARS = 1_000_000  # one tool call's arguments; past this the call is refused, not stored


@fast_init
@dataclass(frozen=True, slots=True)
class Turn:
    """A model call's outcome: the completion as the provider sent it and what it used (priced)."""

    completion: Completion
    usage: Usage
    message: Message  # the completion's, with arguments over MAX_ARGUMENT_CHARS replaced by a note
    oversized: frozenset[str]  # the ids of those calls: they are never run
    request_id: str = ""  # the call's id in the log (`ModelRequest.request_id`)


class RunCall(ModelCall):
    """One model call of a run. `tokens` is the prompt's estimate; `deltas` whether its fragments are shown.

    Set by the controls: `request_id` (the trace, once it is logged), `void` (what the failed attempt just
    retried, or the one that failed the call, was billed; None when it streamed nothing), `turn` (the
    outcome), `refused` (why the budget does not allow the call, or another attempt of it).
    """

    __slots__ = ("deltas", "parent", "purpose", "refused", "request_id", "run_id", "step", "tokens", "turn",
                 "void")

    def __init__(self, messages: list[Message], tools: list[dict[str, Any]], settings: ModelSettings | None,
                 model: Any, step: int, tokens: int, run_id: str, parent: str, purpose: str, deltas: bool) -> None:
        super().__init__(messages, tools, settings, model)
        self.step, self.tokens, self.run_id, self.parent, self.purpose, self.deltas = (
            step, tokens, run_id, parent, purpose, deltas)
        self.request_id = ""
        self.void: Usage | None = None
        self.turn: Turn | None = None
        self.refused = ""


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
