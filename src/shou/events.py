"""The typed events a run is made of.

`Agent.stream()` yields these; the CLI and the session store read the same stream. Each event is a small
frozen dataclass with a `type` tag and a JSON form (`event.to_dict()` / `event_from_dict()`), and a
session's messages are a fold of its events (`shou.session.MessageFold`).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass, field
from operator import attrgetter
from typing import Any, ClassVar, Literal

from .frozen import fast_init, fits
from .messages import ImagePart, Message, ToolCall
from .usage import Usage

_FIELDS: dict[type, tuple[str, ...]] = {}
_READERS: dict[type, Callable[[Any], tuple[Any, ...]]] = {}
_PLAIN = frozenset({str, int, float, bool})
RunStatus = Literal["completed", "max_steps", "loop", "timeout", "budget", "truncated", "error", "cancelled",
                    "interrupted", "waiting_approval", "waiting_input", "blocked", "invalid_output"]
# How a run stops to wait for a person (an approval, or an answer to `ask_user`): it is not over, its calls'
# results are still to come, and `shou resume` (or the server, once decided) goes on.
WAITING: tuple[str, ...] = ("waiting_approval", "waiting_input")


def _reader(kind: type) -> Callable[[Any], tuple[Any, ...]]:
    """A function that reads every field of an event of class `kind`, as a tuple in field order."""
    # every event has `run_id` and `parent` at least: the getter of two names or more gives a tuple
    read: Callable[[Any], tuple[Any, ...]] = attrgetter(*field_names(kind))
    _READERS[kind] = read
    return read


def field_names(kind: type) -> tuple[str, ...]:
    """The field names of an event class, looked up once (every event is serialised and redacted)."""
    names = _FIELDS.get(kind)
    if names is None:
        names = _FIELDS[kind] = tuple(f.name for f in dataclasses.fields(kind))
    return names


@dataclass(frozen=True, slots=True)
class Event:
    """Base of all events. `type` is the tag used in JSON.

    `parent` is set on the events of a sub-run (a plan step, a sub-agent, a review): the run it works for.
    They are logged and traced with the session, and streamed to the consumer, but never folded into the
    session's conversation: a sub-run has its own context.
    """

    type: ClassVar[str] = "event"
    run_id: str
    parent: str = field(default="", kw_only=True)

    def to_dict(self) -> dict[str, Any]:
        """The JSON-ready dict of this event, with its `type` tag first."""
        kind = type(self)
        read = _READERS.get(kind)
        if read is None:
            read = _reader(kind)
        out: dict[str, Any] = {"type": self.type}
        # every field read in one call (every event is serialised once it is emitted)
        for name, value in zip(_FIELDS[kind], read(self), strict=True):
            out[name] = value if value is None or type(value) in _PLAIN else _encode(value)
        if not self.parent:  # most events have none: keep the log as it was
            del out["parent"]
        return out


@dataclass(frozen=True, slots=True)
class RunStarted(Event):
    """A run began on `session` with `task`."""

    type: ClassVar[str] = "run_started"
    session: str
    task: str
    model: str
    tools: tuple[str, ...] = ()
    started_at: float = 0.0


@dataclass(frozen=True, slots=True)
class RunResumed(Event):
    """A run that stopped without finishing (its process was killed) goes on from step `step`."""

    type: ClassVar[str] = "run_resumed"
    session: str
    step: int
    resumed_at: float = 0.0


@dataclass(frozen=True, slots=True)
class Feedback(Event):
    """A note shou adds to the conversation for the model (as a user message), e.g. that its reply was cut."""

    type: ClassVar[str] = "feedback"
    step: int
    text: str


@dataclass(frozen=True, slots=True)
class ModelRequest(Event):
    """The loop is asking the model for step `step`: the request's trace record.

    `request_id` names this model call (its `ModelResponse` carries the same id). The exact request is
    content-addressed: `messages` are the hashes of the messages sent, in order, and `tools_ref` the hash
    of the tool specs; `contents` holds the ones this session's log did not have yet (hash -> wire
    form), so a long run does not store its history again at every step, and the trace needs nothing but
    the log. Retention removes `contents` from old requests (`SQLiteStore.prune`). `params` are the
    request's other fields that change the answer (temperature, max_tokens, tool_choice, ...); `tokens`
    is shou's estimate of the prompt.
    """

    type: ClassVar[str] = "model_request"
    step: int
    message_count: int
    tool_count: int
    tokens: int = 0
    request_id: str = ""
    model: str = ""
    provider: str = ""
    messages: tuple[str, ...] = ()
    tools_ref: str = ""
    params: dict[str, Any] | None = None
    contents: dict[str, Any] | None = None
    purpose: str = ""  # "" for a ReAct step; "plan", "verdict", "review" or "answer" for the calls around a plan


@dataclass(frozen=True, slots=True)
class TextDelta(Event):
    """A piece of the model's text, as it streams."""

    type: ClassVar[str] = "text_delta"
    step: int
    text: str


@dataclass(frozen=True, slots=True)
class ToolCallDelta(Event):
    """A fragment of a tool call as it streams (name first, then argument pieces)."""

    type: ClassVar[str] = "tool_call_delta"
    step: int
    index: int
    name: str | None
    arguments: str


@dataclass(frozen=True, slots=True)
class ModelResponse(Event):
    """The model's complete answer for a step, with usage (tokens and cost) and latency (seconds).

    `ttft` is the time to the first streamed token, `retries` how many attempts failed before this one,
    `cached` whether shou's response cache answered (no provider request, no cost). `model` is the model the
    provider says answered; `sent_model` the name the answering request was sent with, when it is not the
    request's own (a fallback model answered): what its cost was priced at.
    """

    type: ClassVar[str] = "model_response"
    step: int
    message: Message
    usage: Usage
    latency: float
    finish_reason: str | None = None
    model: str = ""
    request_id: str = ""
    ttft: float | None = None
    retries: int = 0
    cached: bool = False
    sent_model: str = ""


@dataclass(frozen=True, slots=True)
class ToolCallStarted(Event):
    """A tool call is about to run."""

    type: ClassVar[str] = "tool_call_started"
    step: int
    call: ToolCall


@dataclass(frozen=True, slots=True)
class ToolCallFinished(Event):
    """A tool call ended. `content` is exactly what the model is shown; `details` is for people."""

    type: ClassVar[str] = "tool_call_finished"
    step: int
    call_id: str
    name: str
    content: str
    is_error: bool = False
    latency: float = 0.0
    image: ImagePart | None = None
    details: dict[str, Any] | None = None


@dataclass(frozen=True, slots=True)
class Notice(Event):
    """Something the loop decided that a person should see (a guard warning, a retry, a model error).

    `usage` is what a void attempt of a model call used when it streamed part of a reply before it failed
    (kinds `retry`, `model_error`, `interrupted`), or what a call a killed process left under way may have
    cost (`unanswered`): a provider bills it, so it counts toward what was spent (shou's estimate), priced
    as `model` (the name that attempt was sent with, when known)."""

    type: ClassVar[str] = "notice"
    step: int
    kind: str
    text: str
    usage: Usage | None = None
    model: str = ""


# Notice kinds about one model call. A failed attempt or call (the failure-rate alert counts these); those
# that end a call without an answer; and all of them, which a trace shows on their call.
FAILED_CALL_NOTICES = ("retry", "model_error")
ENDED_CALL_NOTICES = ("model_error", "interrupted", "unanswered")
CALL_NOTICES = ("retry", "model_error", "interrupted", "unanswered")


@dataclass(frozen=True, slots=True)
class HistoryCleared(Event):
    """The conversation was cleared (`/clear`); earlier messages stay in the log but leave the context."""

    type: ClassVar[str] = "history_cleared"


@dataclass(frozen=True, slots=True)
class Compacted(Event):
    """Older history was summarised: `summary` stands for the session's first `upto` messages in the
    context from now on (the log keeps them all). Token counts are of the context before and after.

    `calls` names the summary's model calls, logged as calls of their own (a sub-run, purpose `summary`);
    then `usage` is their sum, for people, and counted there, not here. Logs from before that have no
    `calls`, and `usage` is the summary's spending itself."""

    type: ClassVar[str] = "compacted"
    summary: str
    upto: int
    tokens_before: int
    tokens_after: int
    usage: Usage = field(default_factory=Usage)
    model: str = ""
    latency: float = 0.0
    calls: tuple[str, ...] = ()

    @property
    def spent(self) -> Usage:
        """What this event itself adds to what was spent (nothing when its calls are logged on their own)."""
        return Usage() if self.calls else self.usage


@dataclass(frozen=True, slots=True)
class StepFinished(Event):
    """A step (one model call and its tool calls) ended; `usage` is the run's running total."""

    type: ClassVar[str] = "step_finished"
    step: int
    usage: Usage = field(default_factory=Usage)


@dataclass(frozen=True, slots=True)
class ApprovalRequested(Event):
    """A call waits for a person (`--approvals defer`): `why` says which rule asked; `rule` is the narrow
    rule an "always" answer would add."""

    type: ClassVar[str] = "approval_requested"
    step: int
    call: ToolCall
    why: str
    rule: str = ""
    at: float = 0.0


@dataclass(frozen=True, slots=True)
class ApprovalDecided(Event):
    """Who decided a call that needed a decision, what, and when. `scope`: this call only (`once`), every
    call the rule covers for the rest of the session (`session`), or from now on (`rule`, written to the
    user's config). `by` is a person (`user:NAME`), `--yes`, or `policy` (nobody could be asked)."""

    type: ClassVar[str] = "approval_decided"
    step: int
    call_id: str
    name: str
    allow: bool
    by: str
    scope: str = "once"
    rule: str = ""
    reason: str = ""
    at: float = 0.0
    sig: str = ""  # an allow counts only when signed with the user's key (agent/approvals.py)


@dataclass(frozen=True, slots=True)
class InputRequested(Event):
    """The model asked the person a question (`ask_user`, call `call_id`); `choices` are the answers it
    offered, if any. Under `defer` the run then stops `waiting_input` until it is answered."""

    type: ClassVar[str] = "input_requested"
    step: int
    call_id: str
    question: str
    choices: tuple[str, ...] = ()
    at: float = 0.0


@dataclass(frozen=True, slots=True)
class InputAnswered(Event):
    """A person's answer to the question of call `call_id` (it becomes that call's result). `by` is who
    answered (`user:NAME`)."""

    type: ClassVar[str] = "input_answered"
    step: int
    call_id: str
    answer: str
    by: str = ""
    at: float = 0.0


PlanStatus = Literal["pending", "running", "done", "failed"]


@dataclass(frozen=True, slots=True)
class PlanStep:
    """One step of a plan: what to do, how far it got, and what it returned (or why it failed)."""

    text: str
    status: PlanStatus = "pending"
    result: str = ""
    run_id: str = ""  # the sub-run that carried it out

    def to_wire(self) -> dict[str, Any]:
        """The JSON form."""
        return {"text": self.text, "status": self.status, "result": self.result, "run_id": self.run_id}

    @classmethod
    def from_wire(cls, data: dict[str, Any]) -> PlanStep:
        """Rebuild from `to_wire()` output."""
        status = data.get("status", "pending")
        return cls(str(data.get("text", "")), status if status in ("pending", "running", "done", "failed")
                   else "pending", str(data.get("result", "")), str(data.get("run_id", "")))


@dataclass(frozen=True, slots=True)
class PlanUpdated(Event):
    """The run's plan as it stands: revision 1 is the first plan, each re-plan adds one."""

    type: ClassVar[str] = "plan"
    revision: int
    steps: tuple[PlanStep, ...]
    note: str = ""  # why the plan changed (the failure that led to a re-plan)
    awaiting: int = 0  # the step (1-based) whose failure waits for a re-plan; 0: none


@dataclass(frozen=True, slots=True)
class Reviewed(Event):
    """A critic checked the answer of step `step`: approved, or not with feedback for the agent."""

    type: ClassVar[str] = "review"
    step: int
    approved: bool
    feedback: str = ""


@dataclass(frozen=True, slots=True)
class Handoff(Event):
    """At step `step` the run passed its conversation from agent `source` to agent `target` (`main`: the run's
    own agent), which answers the steps after it with its instructions, tools and model (agent/handoff.py)."""

    type: ClassVar[str] = "handoff"
    step: int
    source: str
    target: str
    reason: str = ""


@dataclass(frozen=True, slots=True)
class GuardrailTripped(Event):
    """Guardrail `name` (an `input` or `output` check) stopped the run at step `step`, for `reason`: the run
    ends `blocked`, and a resumed run never goes on from here."""

    type: ClassVar[str] = "guardrail_tripped"
    step: int
    kind: str
    name: str
    reason: str


@dataclass(frozen=True, slots=True)
class RunFinished(Event):
    """The run ended with `status`; `answer` is the final text (empty unless completed)."""

    type: ClassVar[str] = "run_finished"
    status: RunStatus
    answer: str
    steps: int
    usage: Usage
    wall_time: float
    error: str | None = None


EVENT_TYPES: dict[str, type[Event]] = {
    cls.type: cls
    for cls in (
        RunStarted,
        RunResumed,
        Feedback,
        ModelRequest,
        TextDelta,
        ToolCallDelta,
        ModelResponse,
        ToolCallStarted,
        ToolCallFinished,
        Notice,
        HistoryCleared,
        Compacted,
        StepFinished,
        ApprovalRequested,
        ApprovalDecided,
        InputRequested,
        InputAnswered,
        PlanUpdated,
        Reviewed,
        Handoff,
        GuardrailTripped,
        RunFinished,
    )
}
for _kind in EVENT_TYPES.values():  # ~15 events a task, up to 13 fields each: set by their slots' own setters
    if fits(_kind):
        fast_init(_kind)


def _encode(value: Any) -> Any:
    if isinstance(value, (Message, ToolCall, ImagePart, PlanStep)):
        return value.to_wire()
    if isinstance(value, Usage):
        out = {"input_tokens": value.input_tokens, "output_tokens": value.output_tokens, "requests": value.requests,
               "cost": value.cost}
        if value.estimated:
            out["estimated"] = True
        if value.cached_tokens:
            out["cached_tokens"] = value.cached_tokens
        return out
    if isinstance(value, tuple):
        return [_encode(v) if isinstance(v, PlanStep) else v for v in value]
    return value
