"""Where a fork cuts a session's log (`shou.folds.forkpoint`): the session-wide step numbers, `RUN:STEP`, a run's
own ending kept or a synthetic one added, and steps that are no clean cut refused; then, over generated logs,
every step either forks to a session whose conversation is exactly the source's at that step, with no run left
to resume, or is refused because a call there has no result."""

from __future__ import annotations

import pytest
from hypothesis import given

from shou.errors import UserError
from shou.events import (
    ApprovalRequested,
    Event,
    InputRequested,
    ModelRequest,
    ModelResponse,
    Notice,
    RunFinished,
    RunStarted,
    StepFinished,
    ToolCallFinished,
    ToolCallStarted,
)
from shou.folds.forkpoint import fork_point
from shou.messages import Message, ToolCall
from shou.session import Session
from shou.usage import Usage

from .test_folds import SETTINGS, check_conversation, logs


def _step(run: str, step: int, call: str | None) -> list[Event]:
    """One model step: a call and its result, or (call None) a final answer."""
    calls = (ToolCall(call, "calculator", '{"expression": "1+1"}'),) if call else ()
    out: list[Event] = [ModelRequest(run, step, 1, 1),
                        ModelResponse(run, step, Message.assistant(None if call else "done", calls), Usage(), 0.1)]
    if call:
        out += [ToolCallStarted(run, step, calls[0]), ToolCallFinished(run, step, call, "calculator", "2")]
    return [*out, StepFinished(run, step, Usage(requests=step))]


def _two_runs() -> list[tuple[int, Event]]:
    """Run A: two steps, completed (a notice between its last step and its end); run B: two steps, then a
    third under way (its request made, no answer)."""
    events: list[Event] = [RunStarted("run_a", "s", "task a", "m"), *_step("run_a", 1, "a1"), *_step("run_a", 2, None),
                           Notice("run_a", 2, "warning", "note"),
                           RunFinished("run_a", "completed", "done", 2, Usage(requests=2), 1.0),
                           RunStarted("run_b", "s", "task b", "m"), *_step("run_b", 1, "b1"), *_step("run_b", 2, "b2"),
                           ModelRequest("run_b", 3, 5, 1)]
    return list(enumerate(events, 1))


def test_steps_count_across_the_sessions_runs() -> None:
    rows = _two_runs()
    end_a = next(i for i, e in rows if isinstance(e, RunFinished))
    point = fork_point(rows, "2", "s")  # A's last step: its own ending (and the notice before it) is kept
    assert (point.through, point.closing, point.status, point.step) == (end_a, (), "completed", 2)
    point = fork_point(rows, "3", "s")  # B's first step: B went on, so the fork closes it
    assert rows[point.through - 1][1] == StepFinished("run_b", 1, Usage(requests=1))
    [closing] = point.closing
    assert isinstance(closing, RunFinished) and closing.run_id == "run_b" and closing.status == "cancelled"
    assert closing.steps == 1 and "forked from session s at step 3" in (closing.error or "")
    assert fork_point(rows, "run_b:2", "s").step == 4
    assert fork_point(rows, None, "s").step == 4  # the last finished step (B's third is under way)


@pytest.mark.parametrize(("at", "why"), [("5", "has 4 finished step(s)"), ("0", "give a step number"),
                                         ("two", "give a step number"), ("run_b:9", "no step 9 of run 'run_b'"),
                                         ("run_b:x", "give a step number")])
def test_a_step_that_does_not_exist_is_refused_with_why(at: str, why: str) -> None:
    with pytest.raises(UserError) as e:
        fork_point(_two_runs(), at, "s")
    assert why in str(e.value)


def test_a_step_whose_calls_wait_for_approval_is_no_cut() -> None:
    call = ToolCall("c1", "shell", '{"command": "rm x"}')
    events: list[Event] = [RunStarted("run_a", "s", "task", "m"), ModelRequest("run_a", 1, 1, 1),
                           ModelResponse("run_a", 1, Message.assistant(None, (call,)), Usage(), 0.1),
                           ApprovalRequested("run_a", 1, call, "shell asks"), StepFinished("run_a", 1),
                           RunFinished("run_a", "waiting_approval", "", 1, Usage(), 0.1)]
    with pytest.raises(UserError, match="waiting for a person"):
        fork_point(list(enumerate(events, 1)), "1", "s")
    with pytest.raises(UserError, match="no clean point"):  # the same step, the run's end not logged yet
        fork_point(list(enumerate(events[:-1], 1)), "1", "s")


def test_a_step_whose_question_waits_for_an_answer_is_no_cut() -> None:
    # a fork there would hold an ask_user call that `shou answer` could go on with in the copy
    call = ToolCall("c1", "ask_user", '{"question": "which file?"}')
    events: list[Event] = [RunStarted("run_a", "s", "task", "m"), ModelRequest("run_a", 1, 1, 1),
                           ModelResponse("run_a", 1, Message.assistant(None, (call,)), Usage(), 0.1),
                           InputRequested("run_a", 1, "c1", "which file?"), StepFinished("run_a", 1),
                           RunFinished("run_a", "waiting_input", "", 1, Usage(), 0.1)]
    with pytest.raises(UserError, match="answer them first"):
        fork_point(list(enumerate(events, 1)), "1", "s")


def test_a_session_without_a_finished_step_cannot_be_forked() -> None:
    with pytest.raises(UserError, match="no finished step"):
        fork_point([(1, RunStarted("run_a", "s", "task", "m"))], None, "s")


@given(logs())
@SETTINGS
def test_every_step_forks_to_the_conversation_at_that_step_or_is_refused(log: list[Event]) -> None:
    rows = list(enumerate(log, 1))
    ends = [i for i, (_, e) in enumerate(rows) if isinstance(e, StepFinished) and not e.parent]
    for number, index in enumerate(ends, 1):
        source = Session()
        for _, event in rows[:index + 1]:
            source._fold.apply(event)
        try:
            point = fork_point(rows, str(number), "s")
        except UserError:
            run = source.open_run  # refused only where a call of the step has no result
            assert run is not None and (run.unanswered or run.awaiting_response)
            continue
        fork = Session()
        for _, event in rows[:point.through]:
            fork._fold.apply(event)
        for event in point.closing:
            fork._fold.apply(event)
        assert fork.open_run is None  # nothing for `shou resume` to go on with
        assert fork.messages == source.messages  # steps 1..number, and nothing after them
        check_conversation(fork)
