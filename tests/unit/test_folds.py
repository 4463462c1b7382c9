"""Property tests of the session's folds over generated logs: every prefix of a valid log (what a crash
leaves) folds to a valid state, and a log folded at once equals the same log folded as two processes saw it.

The logs are made by `logs()`, a small simulation of what the loop emits: runs with model calls, parallel tool
calls, approvals (decided at once or after the run stopped for them), cut replies, compaction, billed failed
attempts, sub-runs, `/clear`, and runs killed part way and closed as the emitter closes them.
"""

from __future__ import annotations

import tempfile
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from shou.events import (
    ApprovalDecided,
    ApprovalRequested,
    Compacted,
    Event,
    Feedback,
    Handoff,
    HistoryCleared,
    ModelRequest,
    ModelResponse,
    Notice,
    PlanStep,
    PlanUpdated,
    RunFinished,
    RunResumed,
    RunStarted,
    StepFinished,
    ToolCallFinished,
    ToolCallStarted,
)
from shou.messages import ImagePart, Message, ToolCall
from shou.session import MessageFold, Session
from shou.store.sqlite import SQLiteStore
from shou.usage import Usage

COSTS = (0.0, 0.25, 0.5, 1.0, None)  # exact in binary: sums in any grouping are equal; None is "unknown"
DETAILS = (None, {"working_memory": "remember: milk"}, {"skill": {"name": "style", "body": "one idea per line"}},
           {"lines": 3})
PNG = ImagePart("iVBORw0KGgo=", "image/png")
SETTINGS = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@dataclass
class Sim:
    """The generator's side of a session: the events so far and what it needs to stay valid."""

    draw: st.DrawFn
    events: list[Event] = field(default_factory=list)
    usage: Usage = field(default_factory=Usage)  # the current run's running total

    def add(self, event: Event) -> None:
        self.events.append(event)

    def spend(self) -> Usage:
        used = Usage(self.draw(st.integers(0, 50)), self.draw(st.integers(0, 20)), 1,
                     cached_tokens=self.draw(st.integers(0, 5)), cost=self.draw(st.sampled_from(COSTS)))
        self.usage = self.usage + used
        return used


def _sub_run(sim: Sim, run_id: str, n: int) -> None:
    """A sub-run of `run_id` (a plan call, a review, a sub-agent): its own context, its own spending."""
    me = f"{run_id}.{n}"
    sim.add(ModelRequest(me, 1, 1, 0, contents={f"h{me}": {"role": "user"}}, parent=run_id))
    if sim.draw(st.booleans()):
        sim.add(Notice(me, 1, "retry", "try again", usage=sim.spend(), parent=run_id))
    sim.add(ModelResponse(me, 1, Message.assistant("sub answer"), sim.spend(), 0.1, "stop", parent=run_id))
    sim.add(RunFinished(me, "completed", "sub answer", 1, sim.usage, 0.1, parent=run_id))


def _run_calls(sim: Sim, run_id: str, step: int, calls: list[ToolCall]) -> None:
    """Started in call order, finished in any order (parallel calls)."""
    for call in calls:
        sim.add(ToolCallStarted(run_id, step, call))
    for call in sim.draw(st.permutations(calls)):
        image = PNG if sim.draw(st.integers(0, 4)) == 0 else None
        details = sim.draw(st.sampled_from(DETAILS))
        sim.add(ToolCallFinished(run_id, step, call.id, call.name, f"result of {call.id}", image=image,
                                 details=details))


def _tool_turn(sim: Sim, run_id: str, step: int, calls: list[ToolCall]) -> list[ToolCall]:
    """The calls of a model turn: some ask a person first. Returns those left waiting for a decision."""
    ready, waiting = [], []
    for call in calls:
        ask = sim.draw(st.sampled_from(("no", "no", "allow", "deny", "wait")))
        if ask == "no":
            ready.append(call)
            continue
        sim.add(ApprovalRequested(run_id, step, call, "writes files", rule=f"{call.name}:*"))
        if ask == "wait":
            waiting.append(call)
            continue
        scope = sim.draw(st.sampled_from(("once", "session")))
        sim.add(ApprovalDecided(run_id, step, call.id, call.name, ask == "allow", "user:ann", scope,
                                f"{call.name}:*"))
        if ask == "allow":
            ready.append(call)
        else:
            sim.add(ToolCallFinished(run_id, step, call.id, call.name, "Error: denied", is_error=True))
    _run_calls(sim, run_id, step, ready)
    return waiting


def _step(sim: Sim, run_id: str, step: int) -> bool:
    """One model call and its tool calls. Returns whether the run is over (a final answer)."""
    if sim.draw(st.integers(0, 3)) == 0:
        _sub_run(sim, run_id, step)
    sim.add(ModelRequest(run_id, step, 2, 1, request_id=f"r{run_id}.{step}",
                         contents=sim.draw(st.sampled_from((None, {f"k{step}": {"role": "user"}, "shared": {}})))))
    if sim.draw(st.integers(0, 3)) == 0:  # a failed attempt that streamed part of a reply: billed
        sim.add(Notice(run_id, step, "retry", "429", usage=sim.spend()))
    n = sim.draw(st.integers(0, 3))
    calls = [ToolCall(f"c{run_id}.{step}.{j}", sim.draw(st.sampled_from(("read", "write", "shell"))), "{}")
             for j in range(n)]
    cut = sim.draw(st.integers(0, 5)) == 0
    message = Message.assistant("thinking" if calls else "the answer", calls)
    sim.add(ModelResponse(run_id, step, message, sim.spend(), 0.1, "length" if cut else "tool_calls" if calls
                          else "stop", request_id=f"r{run_id}.{step}"))
    if cut:  # its calls never run; the model is told
        for call in calls:
            sim.add(ToolCallFinished(run_id, step, call.id, call.name, "Error: not run: cut", is_error=True))
        sim.add(Feedback(run_id, step, "[shou] your reply was cut"))
    elif calls:
        waiting = _tool_turn(sim, run_id, step, calls)
        if waiting:  # the run stops for approvals; decided later, it goes on where it stopped
            sim.add(StepFinished(run_id, step, sim.usage))
            sim.add(RunFinished(run_id, "waiting_approval", "", step, sim.usage, 0.1))
            sim.add(RunResumed(run_id, "s", step))
            allowed = []
            for call in waiting:
                allow = sim.draw(st.booleans())
                sim.add(ApprovalDecided(run_id, step, call.id, call.name, allow, "user:ann"))
                if allow:
                    allowed.append(call)
                else:
                    sim.add(ToolCallFinished(run_id, step, call.id, call.name, "Error: denied", is_error=True))
            _run_calls(sim, run_id, step, allowed)
        if sim.draw(st.integers(0, 3)) == 0:  # one of the calls handed the run over to another agent
            sim.add(Handoff(run_id, step, "main", sim.draw(st.sampled_from(("billing", "support", "main"))), "why"))
    if sim.draw(st.integers(0, 4)) == 0:
        from_calls = sim.draw(st.booleans())
        sim.add(Compacted(run_id, "summary so far", sim.draw(st.integers(0, 3)), 100, 10, sim.spend(),
                          calls=("sum1",) if from_calls else ()))
    sim.add(StepFinished(run_id, step, sim.usage))
    return not calls and not cut


def _close(sim: Sim, run_id: str, start: int) -> None:
    """What `Emitter.close_interrupted` logs for a run a killed process left open, from the log alone."""
    last: ModelResponse | None = None
    done: set[str] = set()
    step = 0
    for event in sim.events[start:]:
        if event.parent:
            continue
        if isinstance(event, ModelRequest):
            last, step = None, event.step
        elif isinstance(event, ModelResponse):
            last, done, step = event, set(), event.step
        elif isinstance(event, ToolCallFinished):
            done.add(event.call_id)
    for call in last.message.tool_calls if last is not None else ():
        if call.id not in done:
            sim.add(ToolCallFinished(run_id, step, call.id, call.name, "Error: interrupted", is_error=True))
    sim.add(RunFinished(run_id, "interrupted", "", step, sim.usage, 0.0, "its process stopped"))


@st.composite
def logs(draw: st.DrawFn) -> list[Event]:
    """A session's log: one to three runs, each finished, or killed part way (and closed before the next)."""
    sim = Sim(draw)
    for i in range(draw(st.integers(1, 3))):
        if i and draw(st.integers(0, 4)) == 0:
            sim.add(HistoryCleared(run_id=""))
        run_id, start, sim.usage = f"run_{i}", len(sim.events), Usage()
        sim.add(RunStarted(run_id, "s", f"task {i}", "m"))
        if draw(st.booleans()):
            sim.add(PlanUpdated(run_id, 1, (PlanStep("look"), PlanStep("answer"))))
        finished = False
        for step in range(1, draw(st.integers(1, 3)) + 1):
            if _step(sim, run_id, step):
                sim.add(RunFinished(run_id, "completed", "the answer", step, sim.usage, 0.1))
                finished = True
                break
        if not finished:
            sim.add(RunFinished(run_id, "max_steps", "", step, sim.usage, 0.1))
        if draw(st.integers(0, 3)) == 0:  # killed part way: the log stops somewhere in the run
            del sim.events[draw(st.integers(start + 1, len(sim.events) - 1)):]
            _close(sim, run_id, start)
    return sim.events


# ------------------------------------------------------------------ what a valid state is


def check_conversation(session: Session) -> None:
    """Valid for Chat Completions: every assistant tool call is answered by the tool messages right after it,
    in call order, or (the last turn only) is still the open run's: unanswered, or its result held back
    until its turn is done. No tool message without its call."""
    msgs, run = session.messages, session.open_run
    held = set(session._fold.conversation.held)
    i = 0
    while i < len(msgs):
        m = msgs[i]
        assert m.role != "tool", f"message {i} answers no call"
        i += 1
        if m.role != "assistant" or not m.tool_calls:
            continue
        ids = [c.id for c in m.tool_calls]
        answers = []
        while i < len(msgs) and msgs[i].role == "tool":
            answers.append(msgs[i].tool_call_id)
            i += 1
        if answers:
            assert answers == ids, f"calls {ids} answered by {answers}"
            continue
        assert i == len(msgs), f"calls {ids} have no answer, and the conversation goes on"
        assert run is not None and run.calls == m.tool_calls, f"calls {ids} are nobody's"
        assert {c.id for c in run.unanswered} | held == set(ids), f"calls {ids}: some are lost"


def spent_in(events: list[Event]) -> Usage:
    total = Usage()
    for e in events:
        if isinstance(e, ModelResponse):
            total = total + e.usage
        elif isinstance(e, Compacted):
            total = total + e.spent
        elif isinstance(e, Notice) and e.usage is not None:
            total = total + e.usage
    return total


def check_spending(session: Session, prefix: list[Event], before: Usage) -> None:
    spent = session.spent
    assert spent == spent_in(prefix)
    assert spent.input_tokens >= before.input_tokens and spent.output_tokens >= before.output_tokens
    assert spent.requests >= before.requests and spent.cached_tokens >= before.cached_tokens
    if before.cost is None:  # unknown stays unknown
        assert spent.cost is None
    elif spent.cost is not None:
        assert spent.cost >= before.cost


def check_approvals(session: Session, prefix: list[Event]) -> None:
    asked = {e.call.id for e in prefix if isinstance(e, ApprovalRequested) and not e.parent}
    ended = {e.call_id for e in prefix if isinstance(e, ToolCallFinished) and not e.parent}
    assert set(session.decisions) <= asked, "a decision without its request"
    assert set(session.pending_approvals) <= asked - set(session.decisions) - ended
    assert all(d.allow and d.scope != "once" and d.rule for d in session.granted)


def check_open_run(session: Session, prefix: list[Event]) -> None:
    """The open run is None exactly when the last run finished (stopping for approvals is not finishing)."""
    expected, agent = None, "main"
    for e in prefix:
        if e.parent:
            continue
        if isinstance(e, RunStarted):
            expected, agent = e.run_id, "main"
        elif (isinstance(e, RunFinished) and e.status != "waiting_approval") or isinstance(e, HistoryCleared):
            expected = None
        elif isinstance(e, Handoff):
            agent = e.target
    run = session.open_run
    assert (run.run_id if run is not None else None) == expected
    if run is not None:
        assert all(call.id not in run.finished for call in run.unanswered)
        assert run.agent == agent, "the agent answering the open run is its last handoff's"


@given(logs())
@SETTINGS
def test_every_prefix_of_a_log_folds_to_a_valid_state(log: list[Event]) -> None:
    session = Session()
    before = Usage()
    for n, event in enumerate(log, 1):
        session._fold.apply(event)  # the state after n events is the fold of the log's first n
        prefix = log[:n]
        check_conversation(session)
        check_spending(session, prefix, before)
        check_approvals(session, prefix)
        check_open_run(session, prefix)
        before = session.spent
    assert session.open_run is None  # the generated sessions end with every run finished or closed


def state(session: Session) -> tuple[object, ...]:
    """Everything a session shows of its fold."""
    return (session.messages, session.summary, session.summary_upto, session.trace_keys, session.spent,
            session.loaded_skills, session.working_memory, session.pending_approvals, session.decisions,
            session.granted, session.open_run, session.unanswered_requests())


@given(logs(), st.data())
@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
def test_a_log_folded_at_once_equals_it_folded_by_two_processes(log: list[Event], data: st.DataObject) -> None:
    """A process writes part of a log and stops; another loads it from SQLite and writes the rest; the first
    catches up (`refresh`); a third loads it all. All see what one fold of the whole log sees."""
    cut = data.draw(st.integers(0, len(log)))
    whole = Session()
    for event in log:
        whole._fold.apply(event)
    with tempfile.TemporaryDirectory() as tmp:
        store = SQLiteStore(Path(tmp) / "shou.db", retention_days=None)
        try:
            first = Session("s", store)
            for event in log[:cut]:
                first._write(event)
                first.commit()
            second = Session("s", store)  # a resumed process: the prefix, read back from the log
            for event in log[cut:]:
                second._write(event)
                second.commit()
            first.refresh()
            third = Session("s", store)
            assert state(first) == state(whole)
            assert state(second) == state(whole)
            assert state(third) == state(whole)
        finally:
            store.close()


def test_a_sub_runs_events_feed_only_spending_requests_and_the_open_runs_subs() -> None:
    session = Session()
    fold = session._fold
    fold.apply(RunStarted("run_a", "s", "task", "m"))
    fold.apply(ModelRequest("run_a.4", 1, 1, 0, contents={"h": {}}, parent="run_a"))
    fold.apply(ModelResponse("run_a.4", 1, Message.assistant("hi", [ToolCall("x", "read", "{}")]),
                             Usage(3, 2, 1, cost=0.5), 0.1, parent="run_a"))
    fold.apply(ToolCallFinished("run_a.4", 1, "x", "read", "r", details={"working_memory": "no"}, parent="run_a"))
    assert [m.role for m in session.messages] == ["user"]
    assert session.working_memory == ""
    assert session.trace_keys == {"h"} and session.spent == Usage(3, 2, 1, cost=0.5)
    assert session.open_run is not None and session.open_run.subs == 4
    assert session.open_run.usage == Usage(3, 2, 1, cost=0.5)


def test_a_subclass_of_an_event_type_is_folded_as_its_base() -> None:
    @dataclass(frozen=True, slots=True)
    class Started(RunStarted):
        pass

    session = Session()
    session._fold.apply(Started("run_b", "s", "a task", "m"))
    assert session.open_run is not None and session.open_run.task == "a task"
    assert session.messages == [Message.user("a task")]


def test_the_checks_catch_a_fold_that_adds_results_as_they_come(monkeypatch: pytest.MonkeyPatch) -> None:
    """The properties can fail: a conversation fold that adds each result when it arrives (not in call
    order, once the turn's results are all in) breaks the wire format on parallel calls finished out of order."""
    from shou.folds import ConversationFold, tool_messages

    calls = (ToolCall("a", "read", "{}"), ToolCall("b", "read", "{}"))
    log: list[Event] = [RunStarted("run_c", "s", "task", "m"),
                        ModelResponse("run_c", 1, Message.assistant("", calls), Usage(), 0.1, "tool_calls"),
                        ToolCallFinished("run_c", 1, "b", "read", "B"), ToolCallFinished("run_c", 1, "a", "read", "A")]
    good = Session()
    for event in log:
        good._fold.apply(event)
        check_conversation(good)
    monkeypatch.setattr(ConversationFold, "on_call_finished",
                        lambda self, event: self.messages.extend(tool_messages(event)))
    monkeypatch.setattr(MessageFold, "_tables", None)  # built once per process: again, with the broken handler
    broken = Session()
    with pytest.raises(AssertionError, match="answered by"):
        for event in log:
            broken._fold.apply(event)
            check_conversation(broken)


def test_sessions_share_one_dispatch_table_and_hold_only_their_folds() -> None:
    """Every in-flight session has a fold: its dispatch is the process's (issue 35), its state its own."""
    one, two = Session(), Session()
    one._fold.apply(RunStarted("run_d", "s", "one", "m"))
    assert one._fold._tables is two._fold._tables
    assert one.messages == [Message.user("one")] and two.messages == [] and two.open_run is None
    assert all(not callable(getattr(one._fold, name)) for name in MessageFold.__slots__)


def test_an_unanswered_request_is_kept_whole_but_for_its_contents() -> None:
    """The requests fold keeps each waiting request without the contents it logged (issue 35), and nothing else
    of it lost: every other field, a field added to `ModelRequest` later included, is the request's."""
    import dataclasses

    values: dict[str, object] = {}
    for f in dataclasses.fields(ModelRequest):
        values[f.name] = {"str": f"v-{f.name}", "int": len(f.name)}.get(str(f.type), (f"v-{f.name}",))
    values.update(params={"temperature": 0.5}, contents={"h1": {"role": "user", "content": "x"}}, run_id="run_e")
    request = ModelRequest(**values)  # type: ignore[arg-type]
    session = Session()
    session._fold.apply(request)
    kept = session._fold.requests.asked["run_e"]
    assert kept == dataclasses.replace(request, contents=None) and kept.contents is None
    assert session.trace_keys == {"h1"}


def test_empty_fold_tables_are_shared_and_never_filled() -> None:
    """The folds' empty tables are one shared dict (issue 35) that refuses to be filled: a session that adds to
    one gets a dict of its own, and every other session's stays empty."""
    import copy

    from shou.events import InputRequested
    from shou.folds.vacant import VACANT, owned

    with pytest.raises(TypeError):
        VACANT["x"] = 1
    assert owned(VACANT) is not VACANT and copy.deepcopy(VACANT) is VACANT
    one, two = Session(), Session()
    assert one.pending_questions is two.pending_questions is VACANT
    one._fold.apply(InputRequested("run_f", 1, "c1", "which one?"))
    assert list(one.pending_questions) == ["c1"] and two.pending_questions == {} and VACANT == {}
