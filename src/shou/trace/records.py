"""What a trace is made of: runs, their steps, model calls, tool calls and compactions, and summing usage.

Costs are never made up: a call of unknown price makes every sum it is part of unknown (`cost` None), with
the known part kept beside it.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from ..messages import Message
from ..usage import Usage

__all__ = ["INTERRUPTED", "UNFINISHED", "CompactionTrace", "HandoffTrace", "ModelCallTrace", "RunTrace", "StepTrace",
           "ToolCallTrace", "total"]

UNFINISHED = "unfinished"  # no run_finished after the run's last start: killed, or running now
INTERRUPTED = "interrupted"  # a sub-run its process stopped in, whose parent went on without it


@dataclass(slots=True)
class ModelCallTrace:
    """One model call: the request (by hash until `resolve()` fills `messages` and `tools`) and its response.

    `model` is the name the request asked for (what prices go by), `response_model` what the provider said
    answered. `usage` is None while no response was logged; `error` says why none will come.
    """

    id: str
    run_id: str
    step: int
    model: str = ""
    purpose: str = ""  # "" for a ReAct step; "plan", "verdict", "review" or "answer"
    agent: str = ""  # the agent that answered, in a run that was handed over (agent/handoff.py); "" otherwise
    response_model: str = ""
    sent_model: str = ""  # the name a fallback model that answered was asked with (its price went by it)
    provider: str = ""
    message_refs: tuple[str, ...] = ()
    tools_ref: str = ""
    params: dict[str, Any] | None = None
    prompt_tokens: int = 0  # shou's estimate of the prompt, made before sending it
    message_count: int = 0
    tool_count: int = 0
    at: float = 0.0  # when the request was logged (Unix time)
    message: Message | None = None
    usage: Usage | None = None
    latency: float | None = None
    ttft: float | None = None
    retries: int = 0
    finish_reason: str | None = None
    cached: bool = False
    error: str | None = None
    notes: list[str] = field(default_factory=list)  # retry notices logged while it ran
    void_usage: Usage | None = None  # what its failed attempts that streamed used (estimated), if any
    messages: list[dict[str, Any]] | None = None  # resolved: wire messages; {"_pruned": hash} where deleted
    tools: list[dict[str, Any]] | None = None  # resolved tool specs
    pruned: int = 0  # how many of the request's messages retention deleted
    contents: dict[str, Any] = field(default_factory=dict, repr=False)  # the session's logged contents, shared

    @property
    def recorded(self) -> bool:
        """Whether the log names the request's messages (logs before request tracing do not)."""
        return bool(self.message_refs)

    @property
    def answered(self) -> bool:
        """Whether the response was logged."""
        return self.message is not None


@dataclass(slots=True)
class ToolCallTrace:
    """One tool call the model asked for; `content` is None while no result was logged."""

    call_id: str
    name: str
    arguments: str
    step: int
    started: bool = False
    content: str | None = None
    is_error: bool = False
    latency: float | None = None
    approval: str = ""  # who allowed or denied it, when someone had to


@dataclass(slots=True)
class CompactionTrace:
    """A summary of older history, made before step `step`'s request; `usage` None when not logged (old)."""

    step: int
    upto: int
    tokens_before: int
    tokens_after: int
    summary: str
    model: str
    latency: float
    usage: Usage | None
    calls: tuple[str, ...] = ()  # its model calls, traced as calls of their own (a sub-run, purpose `summary`)

    @property
    def spent(self) -> Usage:
        """What it adds to a run's spending: nothing when its calls are traced on their own (they count
        there); from a log before summaries were accounted, one call of unknown tokens and cost."""
        if self.calls:
            return Usage()
        return self.usage if self.usage is not None else Usage(requests=1, cost=None)


@dataclass(slots=True)
class StepTrace:
    """A step: its model call (several when a resumed run asked again) and the tool calls it made."""

    step: int
    model_calls: list[ModelCallTrace] = field(default_factory=list)
    tool_calls: list[ToolCallTrace] = field(default_factory=list)
    agent: str = ""  # the agent that answered it, in a run that was handed over; "" otherwise


@dataclass(slots=True)
class HandoffTrace:
    """At step `step` the run was handed from agent `source` to agent `target`, for `reason`."""

    step: int
    source: str
    target: str
    reason: str = ""


@dataclass(slots=True)
class RunTrace:
    """A run as logged: `status` is the last `run_finished`'s, or `unfinished`."""

    run_id: str
    session: str
    task: str = ""
    model: str = ""
    parent: str = ""  # the run a sub-run (a plan step, a sub-agent, a review) worked for
    status: str = UNFINISHED
    answer: str = ""
    error: str | None = None
    started: float = 0.0
    ended: float = 0.0  # the last logged event's time
    wall_time: float | None = None
    resumed: int = 0
    resumed_at: float = 0.0  # when it was last resumed
    steps: list[StepTrace] = field(default_factory=list)
    compactions: list[CompactionTrace] = field(default_factory=list)
    notices: list[tuple[int, str, str]] = field(default_factory=list)  # (step or 0, kind, text): guards, retries
    stray: list[Usage] = field(default_factory=list)  # usage noticed for no logged call
    handoffs: list[HandoffTrace] = field(default_factory=list)  # who handed the run to whom, in order
    agent: str = ""  # the agent answering it as of the last handoff ("" when it was never handed over)

    @property
    def model_calls(self) -> list[ModelCallTrace]:
        """Every model call, in order."""
        return [c for s in self.steps for c in s.model_calls]

    @property
    def tool_calls(self) -> list[ToolCallTrace]:
        """Every tool call, in order."""
        return [c for s in self.steps for c in s.tool_calls]

    @property
    def usage(self) -> tuple[Usage, float]:
        """The run's tokens and cost (None if any call's is unknown), and the known part of the cost."""
        return total([c.usage for c in self.model_calls if c.usage is not None]
                     + [c.void_usage for c in self.model_calls if c.void_usage is not None]
                     + [c.spent for c in self.compactions] + self.stray)


def total(usages: Iterable[Usage]) -> tuple[Usage, float]:
    """The sum of `usages`, and the sum of their known costs."""
    out, known = Usage(), 0.0
    for u in usages:
        out = out + u
        known += u.cost or 0.0
    return out, known
