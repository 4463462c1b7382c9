"""One model call of a run, whatever it is for: a ReAct step, a plan, a review, a plan's final answer.

Every call goes the same way, through one pipeline of controls composed once per run, so every call is
budgeted, logged and traced alike, whichever backend answers it. Outermost first, and why:
- `Budgets` (budget.py): the worst case is reserved before anything is sent or logged, and the reply limit
  lowered to what the budgets have left; a refused call leaves no request in the log.
- `Trace` (model_trace.py): the `ModelRequest` records exactly what is sent (the settings the budget set)
  and is durable before it is sent; fragments stream to the consumer; the `ModelResponse` records the reply,
  its tokens and cost; a billed failed attempt is counted on its notice. One request per call, whichever
  model of a fallback chain answers and however many attempts it takes.
- the models layer's pipeline (`models/backend.py`): fallback, cache, prepare, retry, rate limit, one
  attempt. The same head a backend's own `stream()` runs, so the wire client, the local and the scripted
  model, and each model of a fallback chain get every control.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from ..messages import Message
from ..models.backend import pipeline
from ..models.base import Model, ModelSettings
from ..wellformed import well_formed
from .budget import Budgets
from .model_trace import Trace
from .modelcall import MAX_ARGUMENT_CHARS, RunCall, Turn, bounded

if TYPE_CHECKING:
    from ..models.pipeline import Next
    from .loop import Run

# re-exported: they have been imported from here
__all__ = ["MAX_ARGUMENT_CHARS", "Caller", "Turn", "bounded", "must_call", "tool_arguments"]


class Caller:
    """Makes a run's model calls: one per step of its ReAct loop, and the calls around it (plans, reviews)."""

    __slots__ = ("budgets", "head", "models", "run", "trace")

    def __init__(self, run: Run) -> None:
        self.run = run
        # The run's controls hold the run; the models layer's head is the process's. Linked by two methods of
        # this caller, not composed into closures: every in-flight run has a caller (issue 35).
        self.budgets, self.trace, self.models = Budgets(run.accounts), Trace(run), pipeline()
        self.head: Next = self._budgeted  # the head a guarded run's controls go around (agent/guarded.py)

    def _budgeted(self, call: RunCall) -> Any:
        return self.budgets(call, self._traced)

    def _traced(self, call: RunCall) -> Any:
        return self.trace(call, self.models)

    def close(self) -> None:
        """The run has ended: drop it and its controls (they hold the run, which holds this caller). A call
        after this is a bug in shou and fails with an AttributeError naming `run`."""
        del self.run, self.head, self.budgets, self.trace

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
        if tokens is None:
            counter = agent.token_counter
            tokens = counter.messages(messages) + (counter.text(json.dumps(list(specs))) if specs else 0)
        call = RunCall(messages, list(specs), settings if settings is not None else agent.model_settings,
                       model or agent.model, step, tokens, run_id or run.run_id, parent, purpose, deltas)
        events = self.head(call)
        try:
            async for _ in events:
                pass
        finally:
            await events.aclose()
        return call.turn if call.turn is not None else call.refused


def tool_arguments(message: Message, name: str) -> dict[str, Any] | None:
    """The arguments of the first call of tool `name` in `message` that are a JSON object (None: no such call).
    A lone surrogate an escape makes (`"\\udcff"`) is U+FFFD here: these are shou's own calls (a plan, a
    verdict), whose text goes on into requests and the log."""
    for call in message.tool_calls:
        if call.name != name:
            continue
        try:
            args = json.loads(call.arguments or "{}")
        except (ValueError, RecursionError):  # not JSON, or nested past what the parser takes
            continue
        if isinstance(args, dict):
            return well_formed(args)
    return None


def must_call(settings: ModelSettings | None) -> ModelSettings:
    """`settings` asking the model to answer with a tool call (the one tool a plan or review call offers)."""
    return replace(settings or ModelSettings(), tool_choice="required")

