"""Traces of runs, rebuilt from the session log: each step's model call and tool calls, compactions, the end.

The event log is the one source of truth: a trace holds what was logged and nothing else, so a run whose
process was killed ends where its log does, with status `unfinished` (it may also still be running). A
model call's request is stored by content hash (`ModelRequest.messages`, see shou.agent.recorder) and read
only when wanted (`resolve()`); retention may have deleted a message since, and logs written before
requests were recorded have no hashes at all (`recorded` is false). Costs are never made up: a call of
unknown price makes every sum it is part of unknown (`cost` None), with the known part kept beside it.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any

import orjson

from .event_codec import event_from_dict
from .events import (
    CALL_NOTICES,
    FAILED_CALL_NOTICES,
    ApprovalDecided,
    ApprovalRequested,
    Compacted,
    Event,
    ModelRequest,
    ModelResponse,
    Notice,
    RunFinished,
    RunResumed,
    RunStarted,
    ToolCallFinished,
    ToolCallStarted,
)
from .messages import Message
from .usage import Usage

if TYPE_CHECKING:
    from .store.sqlite import SQLiteStore

__all__ = ["INTERRUPTED", "UNFINISHED", "CompactionTrace", "ModelCallTrace", "RunTrace", "StepTrace", "ToolCallTrace",
           "call_json", "find_model_call", "find_run", "recent_outcomes", "resolve", "run_json", "total", "traces",
           "usage_json"]

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


# ---------------------------------------------------------------------------------------------- reading


def logged_rows(store: SQLiteStore, where: str, params: Sequence[Any] = ()) -> list[tuple[str, float, Event]]:
    """`(session, ts, event)` of the stored events matching `where` (a fixed clause from this module),
    oldest first. The one place that reads the events table directly: `SQLiteStore.rows()` leaves out the
    time each event was logged, which traces and the usage report need."""
    store.commit()
    out = []
    for session, ts, data in store._db.execute(
            f"SELECT session, ts, data FROM events WHERE {where} ORDER BY id", tuple(params)):
        try:
            out.append((session, ts, event_from_dict(orjson.loads(data))))
        except (ValueError, TypeError, KeyError, AttributeError):  # a newer shou's event, or damage: left out
            continue
    return out


def recent_outcomes(store: SQLiteStore, limit: int) -> list[Event]:
    """The workspace's last `limit` events that say how a model or tool call went (responses, tool results,
    failed attempts), oldest first: what a process's failure-rate alert starts from."""
    store.commit()
    rows = store._db.execute(
        "SELECT data FROM events WHERE type IN ('model_response', 'tool_call_finished') OR (type = 'notice' AND "
        f"json_valid(data) AND json_extract(data, '$.kind') IN ({', '.join('?' * len(FAILED_CALL_NOTICES))})) "
        "ORDER BY id DESC LIMIT ?", (*FAILED_CALL_NOTICES, limit)).fetchall()
    out = []
    for (data,) in reversed(rows):
        try:
            out.append(event_from_dict(orjson.loads(data)))
        except (ValueError, TypeError, KeyError, AttributeError):
            continue
    return out


class _Builder:
    """Folds a session's events, in log order, into run traces."""

    def __init__(self) -> None:
        self.contents: dict[str, Any] = {}  # every request content the log holds, by hash
        self.runs: dict[str, RunTrace] = {}
        self.steps: dict[tuple[str, int], StepTrace] = {}
        self.calls: dict[str, ModelCallTrace] = {}
        self.tools: dict[tuple[str, str], ToolCallTrace] = {}
        self.last_step: dict[str, int] = {}

    def run(self, session: str, run_id: str, ts: float) -> RunTrace:
        run = self.runs.get(run_id)
        if run is None:
            run = self.runs[run_id] = RunTrace(run_id, session, started=ts)
        run.ended = ts
        return run

    def step(self, run: RunTrace, n: int) -> StepTrace:
        step = self.steps.get((run.run_id, n))
        if step is None:
            step = self.steps[(run.run_id, n)] = StepTrace(n)
            run.steps.append(step)
        self.last_step[run.run_id] = max(n, self.last_step.get(run.run_id, 0))
        return step

    def new_call(self, run: RunTrace, step: StepTrace, request_id: str) -> ModelCallTrace:
        # Logs from before calls were named: the step names it (a resumed run can ask for a step twice).
        call_id = request_id or f"{run.run_id}:{step.step}"
        n = 1
        while call_id in self.calls:
            n += 1
            call_id = f"{request_id or f'{run.run_id}:{step.step}'}.{n}"
        call = self.calls[call_id] = ModelCallTrace(call_id, run.run_id, step.step)
        step.model_calls.append(call)
        return call

    def tool(self, run: RunTrace, step: StepTrace, call_id: str, name: str, arguments: str) -> ToolCallTrace:
        found = self.tools.get((run.run_id, call_id))
        if found is None or found.content is not None:  # a new call (ids can repeat when a provider reuses them)
            found = self.tools[(run.run_id, call_id)] = ToolCallTrace(call_id, name, arguments, step.step)
            step.tool_calls.append(found)
        return found

    def add(self, session: str, ts: float, ev: Event) -> None:
        if not ev.run_id:
            return  # session bookkeeping (a cleared history), no run's
        run = self.run(session, ev.run_id, ts)
        if ev.parent:
            run.parent = ev.parent
        if isinstance(ev, RunStarted):
            run.task, run.model, run.started = ev.task, ev.model, ts
        elif isinstance(ev, RunResumed):
            run.resumed += 1
            run.resumed_at = ts
            for call in run.model_calls:  # asked when the process was killed: the resumed run asks again
                if not call.answered and call.error is None:
                    call.error = "no answer: the process stopped before it came (the run was resumed)"
            run.status, run.error, run.wall_time = UNFINISHED, None, None
        elif isinstance(ev, RunFinished):
            run.status, run.answer, run.error, run.wall_time = ev.status, ev.answer, ev.error, ev.wall_time
            for call in run.model_calls:  # a request the run ended without an answer to
                if not call.answered and call.error is None:
                    call.error = ev.error or f"the run ended ({ev.status}) before the model answered"
        elif isinstance(ev, ModelRequest):
            call = self.new_call(run, self.step(run, ev.step), ev.request_id)
            call.model, call.purpose = ev.model, ev.purpose
            call.provider, call.message_refs, call.tools_ref, call.params = (
                ev.provider, ev.messages, ev.tools_ref, ev.params)
            if ev.contents:
                self.contents.update(ev.contents)
            call.contents = self.contents
            call.prompt_tokens, call.message_count, call.tool_count, call.at = (
                ev.tokens, ev.message_count, ev.tool_count, ts)
        elif isinstance(ev, ModelResponse):
            step = self.step(run, ev.step)
            call = self.calls.get(ev.request_id) if ev.request_id else None
            if call is None:
                waiting = [c for c in step.model_calls if not c.answered]
                call = waiting[-1] if waiting else self.new_call(run, step, ev.request_id)
            call.response_model, call.message, call.usage, call.latency = ev.model, ev.message, ev.usage, ev.latency
            call.ttft, call.retries, call.finish_reason, call.cached = ev.ttft, ev.retries, ev.finish_reason, ev.cached
            call.sent_model = ev.sent_model
            call.model = call.model or ev.model  # logs from before requests named their model
            call.error = None
            for tc in ev.message.tool_calls:
                self.tool(run, step, tc.id, tc.name, tc.arguments)
        elif isinstance(ev, ToolCallStarted):
            self.tool(run, self.step(run, ev.step), ev.call.id, ev.call.name, ev.call.arguments).started = True
        elif isinstance(ev, ToolCallFinished):
            tc = self.tool(run, self.step(run, ev.step), ev.call_id, ev.name, "")
            tc.content, tc.is_error, tc.latency = ev.content, ev.is_error, ev.latency
        elif isinstance(ev, ApprovalRequested):
            self.tool(run, self.step(run, ev.step), ev.call.id, ev.call.name, ev.call.arguments).approval = \
                "waiting for approval"
        elif isinstance(ev, ApprovalDecided):
            tc = self.tools.get((run.run_id, ev.call_id))
            if tc is not None:
                tc.approval = f"{'allowed' if ev.allow else 'denied'} by {ev.by}"
        elif isinstance(ev, Notice):
            run.notices.append((ev.step, ev.kind, ev.text))
            step = self.steps.get((run.run_id, ev.step))
            call = step.model_calls[-1] if step is not None and step.model_calls else None
            if call is not None and not call.answered and ev.kind in CALL_NOTICES:
                if ev.kind == "retry":
                    call.notes.append(ev.text)
                else:
                    call.error = ev.text
                if ev.usage is not None:
                    call.void_usage = ev.usage if call.void_usage is None else call.void_usage + ev.usage
            elif ev.usage is not None:  # its call is not in the log (damage): still counted
                run.stray.append(ev.usage)
        elif isinstance(ev, Compacted):
            run.compactions.append(compaction_trace(ev, self.last_step.get(run.run_id, 0) + 1))


def compaction_trace(ev: Compacted, step: int = 0) -> CompactionTrace:
    """A compaction as a trace entry (its usage None when the log predates accounting for summaries)."""
    logged = bool(ev.usage.requests or ev.model)  # logs from before summaries were accounted have neither
    return CompactionTrace(step, ev.upto, ev.tokens_before, ev.tokens_after, ev.summary, ev.model, ev.latency,
                           ev.usage if logged else None, ev.calls)


def _build(rows: Iterable[tuple[str, float, Event]]) -> list[RunTrace]:
    builder = _Builder()
    for session, ts, ev in rows:
        builder.add(session, ts, ev)
    for run in builder.runs.values():
        run.steps.sort(key=lambda s: s.step)
        for call in run.model_calls:
            call.model = call.model or run.model
        calls = run.model_calls
        if run.parent and not run.task and run.status == UNFINISHED and calls and all(c.answered for c in calls):
            run.status = "completed"  # a plan or review call made for its parent: no run events of its own
    for run in builder.runs.values():
        parent = builder.runs.get(run.parent) if run.parent else None
        if run.status == UNFINISHED and parent is not None and (parent.status != UNFINISHED or
                                                                 parent.resumed_at > run.ended):
            # a sub-run the process stopped in: its parent went on (resumed, or ended) without it
            run.status = INTERRUPTED
            for call in run.model_calls:
                if not call.answered and call.error is None:
                    call.error = "no answer: the process stopped before it came"
    return list(builder.runs.values())


def traces(store: SQLiteStore, session: str) -> list[RunTrace]:
    """The traces of `session`'s runs, oldest first (requests not resolved)."""
    return _build(logged_rows(store, "session = ?", (session,)))


def find_run(store: SQLiteStore, run_id: str) -> RunTrace | None:
    """The trace of run `run_id`, or None when no such run is logged (read with its whole session, whose
    earlier requests may hold contents the run's requests refer to)."""
    store.commit()
    row = store._db.execute("SELECT session FROM events WHERE run_id = ? ORDER BY id LIMIT 1", (run_id,)).fetchone()
    if row is None:
        return None
    return next((r for r in traces(store, row[0]) if r.run_id == run_id), None)


def find_model_call(store: SQLiteStore, call_id: str) -> tuple[RunTrace, ModelCallTrace] | None:
    """The model call named `call_id` (a request id, or `RUN:STEP` in logs from before calls were named),
    with its request resolved, and its run; None when there is no such call."""
    run_id = call_id.split(":", 1)[0] if call_id.startswith("run_") else ""
    if not run_id:
        hits = logged_rows(store, "type IN ('model_request', 'model_response') AND "
                                  "json_extract(data, '$.request_id') = ?", (call_id,))
        run_id = hits[0][2].run_id if hits else ""
    run = find_run(store, run_id) if run_id else None
    call = next((c for c in run.model_calls if c.id == call_id), None) if run is not None else None
    if run is None or call is None:
        return None
    resolve(store, [call])
    return run, call


def resolve(store: SQLiteStore | None, calls: Iterable[ModelCallTrace]) -> None:
    """Fill in the requests of `calls` (their messages and tool specs) from the contents their session's
    log holds. A message whose contents retention removed reads `{"_pruned": hash}`."""
    for call in calls:
        if not call.recorded:
            continue
        found = call.contents
        call.messages = [found.get(k, {"_pruned": k}) for k in call.message_refs]
        tools = found.get(call.tools_ref, []) if call.tools_ref else []
        call.tools = tools if isinstance(tools, list) else None
        call.pruned = sum(k not in found for k in (*call.message_refs, call.tools_ref) if k)


def usage_json(usage: Usage | None, known: float | None = None) -> dict[str, Any] | None:
    """A usage as JSON; `known_cost` (when given) is the known part of an unknown total cost."""
    if usage is None:
        return None
    return asdict(usage) if known is None else {**asdict(usage), "known_cost": known}


def call_json(call: ModelCallTrace) -> dict[str, Any]:
    """A model call as JSON: the request's full messages when resolved (null when not recorded)."""
    return {
        "id": call.id, "run_id": call.run_id, "step": call.step, "model": call.model, "purpose": call.purpose,
        "response_model": call.response_model, "sent_model": call.sent_model, "provider": call.provider,
        "at": call.at,
        "request": {"recorded": call.recorded, "messages": call.messages, "tools": call.tools, "params": call.params,
                    "tokens_estimate": call.prompt_tokens, "message_count": call.message_count,
                    "tool_count": call.tool_count, "pruned": call.pruned},
        "response": None if call.message is None else {"message": call.message.to_wire(),
                                                       "finish_reason": call.finish_reason},
        "usage": usage_json(call.usage), "failed_attempts_usage": usage_json(call.void_usage),
        "latency": call.latency, "ttft": call.ttft, "retries": call.retries,
        "cached": call.cached, "error": call.error, "notes": call.notes,
    }


def run_json(run: RunTrace) -> dict[str, Any]:
    """A run as JSON (resolve its calls first for their requests' messages)."""
    usage, known = run.usage
    return {
        "run_id": run.run_id, "parent": run.parent, "session": run.session, "task": run.task, "model": run.model,
        "status": run.status,
        "answer": run.answer, "error": run.error, "started": run.started, "ended": run.ended,
        "wall_time": run.wall_time, "resumed": run.resumed, "steps": len(run.steps),
        "usage": usage_json(usage, known),
        "model_calls": [call_json(c) for c in run.model_calls],
        "tool_calls": [asdict(t) for t in run.tool_calls],
        "compactions": [{**asdict(c), "usage": usage_json(c.spent)} for c in run.compactions],
        "notices": [{"step": step, "kind": kind, "text": text} for step, kind, text in run.notices],
    }
