"""The run a session's log shows started and not finished: where it got to, and its unanswered calls.

A run whose process was killed leaves an `OpenRun`: its task, the last step, and the calls of its last model
turn that have no result yet (`started` ones may have had effects). `shou resume` continues it; starting
anything else on the session first closes it (`Emitter.close_interrupted()`).
"""

from __future__ import annotations

from collections.abc import Callable
from collections.abc import Set as AbstractSet
from dataclasses import dataclass
from typing import Any

from ..events import (
    WAITING,
    Event,
    GuardrailTripped,
    Handoff,
    HistoryCleared,
    ModelRequest,
    ModelResponse,
    Notice,
    PlanUpdated,
    RunFinished,
    RunStarted,
    StepFinished,
    ToolCallFinished,
    ToolCallStarted,
)
from ..messages import Message, ToolCall
from ..setting_tables import MAIN_AGENT
from ..usage import NO_USAGE, Usage
from .spending import spent_by

__all__ = ["OpenRun", "OpenRunFold"]


_NONE: frozenset[str] = frozenset()


@dataclass(slots=True)
class OpenRun:
    """A run the log shows started and not finished: where it got to, and its unanswered calls.

    `started` and `finished` are sets once a call of the last turn started or finished; until then one shared
    empty set, so a run waiting for the model holds none of its own (issue 35: every in-flight session has one)."""

    run_id: str
    task: str
    step: int = 0
    usage: Usage = NO_USAGE
    calls: tuple[ToolCall, ...] = ()
    started: AbstractSet[str] = _NONE
    finished: AbstractSet[str] = _NONE
    answer: Message | None = None  # the last model turn, when it had no calls (a final answer not yet closed)
    awaiting_response: bool = False  # a request was made and its answer never recorded
    cut: bool = False  # the last model turn was cut at the output limit: its calls must never run
    waiting: bool = False  # it stopped for a person (`waiting_approval`/`waiting_input`), not because its process died
    plan: PlanUpdated | None = None  # a planned run's plan as last logged
    blocked: GuardrailTripped | None = None  # a guardrail stopped it: resumed, it ends `blocked` at once
    subs: int = 0  # the highest number of its sub-runs' ids (`run_x.3`): a resumed run's go on from there
    agent: str = MAIN_AGENT  # the agent that answers it: the last handoff's (agent/handoff.py)

    @property
    def unanswered(self) -> list[ToolCall]:
        """Calls of the last model turn with no result, in call order."""
        return [c for c in self.calls if c.id not in self.finished]


class OpenRunFold:
    """`run`: the session's run not finished yet (None when the last one finished, or after `/clear`).
    A sub-run's events only tell it how far its sub-runs got (`subs`) and what they spent (`usage`)."""

    __slots__ = ("run",)

    def __init__(self) -> None:
        self.run: OpenRun | None = None

    def on_started(self, event: RunStarted) -> None:
        """A run began: it is the open one."""
        self.run = OpenRun(event.run_id, event.task)

    def on_finished(self, event: RunFinished) -> None:
        """A run ended; one that stopped for approvals stays open, its calls' results still to come."""
        if event.status in WAITING and self.run is not None:
            self.run.waiting = True
        else:
            self.run = None

    def on_cleared(self, event: HistoryCleared) -> None:
        """`/clear`: no run goes on from a cleared conversation."""
        self.run = None

    def on_request(self, event: ModelRequest) -> None:
        """A model call was made for a step: its answer is awaited."""
        run = self.run
        if run is not None:
            run.step, run.awaiting_response = event.step, True
            run.calls, run.answer = (), None

    def on_response(self, event: ModelResponse) -> None:
        """The model answered: its calls are the ones to run (never, when its reply was cut)."""
        run = self.run
        if run is not None:
            run.step, run.calls, run.awaiting_response = event.step, event.message.tool_calls, False
            run.started = run.finished = _NONE
            run.cut = event.finish_reason == "length"
            run.answer = None if event.message.tool_calls or run.cut else event.message
            run.usage = run.usage + event.usage

    def on_call_started(self, event: ToolCallStarted) -> None:
        """A call is about to run: from now on it may have had its effect."""
        if self.run is not None:
            self.run.started = _with(self.run.started, event.call.id)

    def on_call_finished(self, event: ToolCallFinished) -> None:
        """A call has its result."""
        if self.run is not None:
            self.run.finished = _with(self.run.finished, event.call_id)

    def on_step(self, event: StepFinished) -> None:
        """A step ended: its usage is the run's running total, compaction included."""
        if self.run is not None:
            self.run.usage = event.usage

    def on_notice(self, event: Notice) -> None:
        """A void attempt that was billed counts toward what the run spent."""
        if event.usage is not None and self.run is not None:
            self.run.usage = self.run.usage + event.usage

    def on_plan(self, event: PlanUpdated) -> None:
        """A planned run's plan as it stands."""
        if self.run is not None:
            self.run.plan = event

    def on_handoff(self, event: Handoff) -> None:
        """The run was handed over: that agent answers its next steps, a resumed run's too."""
        if self.run is not None and event.run_id == self.run.run_id:
            self.run.agent = event.target
    def on_tripped(self, event: GuardrailTripped) -> None:
        """A guardrail stopped the run: nothing of it may run again."""
        if self.run is not None:
            self.run.blocked = event

    def on_sub(self, event: Event) -> None:
        """Any event of a sub-run: if it is the open run's (a plan call, a review, a summary, a plan step, a
        sub-agent), how far its sub-runs' numbers got and what they spent, should it be resumed."""
        run = self.run
        if run is None:
            return
        prefix = run.run_id + "."
        if not event.run_id.startswith(prefix):
            return
        head = event.run_id[len(prefix):].split(".", 1)[0]
        if head.isdigit() and int(head) > run.subs:
            run.subs = int(head)
        spent = spent_by(event)
        if spent is not None:  # its next StepFinished agrees
            run.usage = run.usage + spent

    def handlers(self) -> dict[type, Callable[[Any], None]]:
        """Event type -> handler, for a run's own events (`on_sub` takes every sub-run's event)."""
        return {RunStarted: self.on_started, RunFinished: self.on_finished, HistoryCleared: self.on_cleared,
                ModelRequest: self.on_request, ModelResponse: self.on_response,
                ToolCallStarted: self.on_call_started, ToolCallFinished: self.on_call_finished,
                StepFinished: self.on_step, Notice: self.on_notice, PlanUpdated: self.on_plan,
                Handoff: self.on_handoff, GuardrailTripped: self.on_tripped}


def _with(ids: AbstractSet[str], new: str) -> set[str]:
    """`ids` with `new` added: the same set when it is one of its own, a new one instead of the shared empty one."""
    own = ids if isinstance(ids, set) else set(ids)
    own.add(new)
    return own
