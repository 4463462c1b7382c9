"""Building traces: a session's events, folded in log order into run traces.

The event log is the one source of truth: a trace holds what was logged and nothing else, so a run whose
process was killed ends where its log does, with status `unfinished` (it may also still be running).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

from ..events import (
    CALL_NOTICES,
    ApprovalDecided,
    ApprovalRequested,
    Compacted,
    Event,
    Handoff,
    ModelRequest,
    ModelResponse,
    Notice,
    RunFinished,
    RunResumed,
    RunStarted,
    ToolCallFinished,
    ToolCallStarted,
)
from .records import (
    INTERRUPTED,
    UNFINISHED,
    CompactionTrace,
    HandoffTrace,
    ModelCallTrace,
    RunTrace,
    StepTrace,
    ToolCallTrace,
)

__all__ = ["build", "compaction_trace"]


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
        """Fold one logged event (written at `ts`) into its run's trace."""
        if not ev.run_id:
            return  # session bookkeeping (a cleared history), no run's
        run = self.run(session, ev.run_id, ts)
        if ev.parent:
            run.parent = ev.parent
        handler = _HANDLERS.get(type(ev))
        if handler is not None:
            handler(self, run, ts, ev)

    def started(self, run: RunTrace, ts: float, ev: RunStarted) -> None:
        run.task, run.model, run.started = ev.task, ev.model, ts

    def resumed(self, run: RunTrace, ts: float, ev: RunResumed) -> None:
        run.resumed += 1
        run.resumed_at = ts
        # asked when the process was killed: the resumed run asks again
        _unanswered(run, "no answer: the process stopped before it came (the run was resumed)")
        run.status, run.error, run.wall_time = UNFINISHED, None, None

    def finished(self, run: RunTrace, ts: float, ev: RunFinished) -> None:
        run.status, run.answer, run.error, run.wall_time = ev.status, ev.answer, ev.error, ev.wall_time
        # a request the run ended without an answer to
        _unanswered(run, ev.error or f"the run ended ({ev.status}) before the model answered")

    def request(self, run: RunTrace, ts: float, ev: ModelRequest) -> None:
        call = self.new_call(run, self.step(run, ev.step), ev.request_id)
        call.model, call.purpose = ev.model, ev.purpose
        if run.agent and not ev.purpose:  # a step of a run that was handed over: the agent answering it now
            call.agent = self.step(run, ev.step).agent = run.agent
        call.provider, call.message_refs, call.tools_ref, call.params = (
            ev.provider, ev.messages, ev.tools_ref, ev.params)
        if ev.contents:
            self.contents.update(ev.contents)
        call.contents = self.contents
        call.prompt_tokens, call.message_count, call.tool_count, call.at = (
            ev.tokens, ev.message_count, ev.tool_count, ts)

    def response(self, run: RunTrace, ts: float, ev: ModelResponse) -> None:
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

    def tool_started(self, run: RunTrace, ts: float, ev: ToolCallStarted) -> None:
        self.tool(run, self.step(run, ev.step), ev.call.id, ev.call.name, ev.call.arguments).started = True

    def tool_finished(self, run: RunTrace, ts: float, ev: ToolCallFinished) -> None:
        tc = self.tool(run, self.step(run, ev.step), ev.call_id, ev.name, "")
        tc.content, tc.is_error, tc.latency = ev.content, ev.is_error, ev.latency

    def approval_requested(self, run: RunTrace, ts: float, ev: ApprovalRequested) -> None:
        self.tool(run, self.step(run, ev.step), ev.call.id, ev.call.name, ev.call.arguments).approval = \
            "waiting for approval"

    def approval_decided(self, run: RunTrace, ts: float, ev: ApprovalDecided) -> None:
        tc = self.tools.get((run.run_id, ev.call_id))
        if tc is not None:
            tc.approval = f"{'allowed' if ev.allow else 'denied'} by {ev.by}"

    def notice(self, run: RunTrace, ts: float, ev: Notice) -> None:
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

    def handoff(self, run: RunTrace, ts: float, ev: Handoff) -> None:
        if not run.handoffs:  # the steps so far were the first agent's: named now that there is another
            for step in run.steps:
                step.agent = ev.source
                for call in step.model_calls:
                    call.agent = call.agent or ("" if call.purpose else ev.source)
        run.handoffs.append(HandoffTrace(ev.step, ev.source, ev.target, ev.reason))
        run.agent = ev.target

    def compacted(self, run: RunTrace, ts: float, ev: Compacted) -> None:
        run.compactions.append(compaction_trace(ev, self.last_step.get(run.run_id, 0) + 1))


# One lookup by the event's exact type (event classes are not subclassed) instead of a chain of isinstance.
_HANDLERS: dict[type[Event], Callable[[_Builder, RunTrace, float, Any], None]] = {
    RunStarted: _Builder.started, RunResumed: _Builder.resumed, RunFinished: _Builder.finished,
    ModelRequest: _Builder.request, ModelResponse: _Builder.response, ToolCallStarted: _Builder.tool_started,
    ToolCallFinished: _Builder.tool_finished, ApprovalRequested: _Builder.approval_requested,
    ApprovalDecided: _Builder.approval_decided, Notice: _Builder.notice, Compacted: _Builder.compacted,
    Handoff: _Builder.handoff,
}


def _unanswered(run: RunTrace, error: str) -> None:
    """Give every call of `run` that has neither an answer nor an error yet `error`."""
    for call in run.model_calls:
        if not call.answered and call.error is None:
            call.error = error


def compaction_trace(ev: Compacted, step: int = 0) -> CompactionTrace:
    """A compaction as a trace entry (its usage None when the log predates accounting for summaries)."""
    logged = bool(ev.usage.requests or ev.model)  # logs from before summaries were accounted have neither
    return CompactionTrace(step, ev.upto, ev.tokens_before, ev.tokens_after, ev.summary, ev.model, ev.latency,
                           ev.usage if logged else None, ev.calls)


def build(rows: Iterable[tuple[str, float, Event]]) -> list[RunTrace]:
    """The run traces a session's `(session, ts, event)` rows make, in the order runs first appear."""
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
            _unanswered(run, "no answer: the process stopped before it came")
    return list(builder.runs.values())
