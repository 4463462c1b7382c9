"""Runs composed of runs (agent/runs.py): each kind with a scripted model and what it emits, and the plain
loop naming neither plans nor reviews."""

from __future__ import annotations

import types
from pathlib import Path

import shou.agent.loop as loop
from shou import Agent, AgentSpec, ScriptedModel, Session, SQLiteStore, tool
from shou.agent.config import AgentConfig
from shou.agent.delegate import child_config
from shou.agent.emitter import Emitter
from shou.agent.review import Critic
from shou.agent.runs import PlannedRun, ReactRun, ReviewedRun, build_run, kind_of
from shou.events import (
    Event,
    Feedback,
    ModelRequest,
    PlanStep,
    PlanUpdated,
    Reviewed,
    RunFinished,
    RunResumed,
    RunStarted,
    StepFinished,
    ToolCallFinished,
)

DONE = {"tool_calls": [{"name": "step_verdict", "arguments": {"done": True, "reason": "done"}}]}


@tool
def note(text: str) -> str:
    """Keep a note."""
    return f"noted {text}"


def _own(events: list[Event]) -> list[str]:
    """The kinds of the events a run emits itself (not a sub-run's, not streaming fragments)."""
    return [type(e).__name__ for e in events if not e.parent and not type(e).__name__.endswith("Delta")]


def test_each_config_makes_its_kind_and_a_plan_s_steps_are_plain_loops() -> None:
    model = ScriptedModel([])
    assert kind_of(AgentConfig(model)) == ReactRun()
    assert kind_of(AgentConfig(model, reflect=True)) == ReviewedRun(ReactRun())
    assert kind_of(AgentConfig(model, reflect=True, max_reviews=0)) == ReactRun()  # no review allowed: none made
    # a plan's steps neither plan nor review: the planner does, for the whole run
    assert kind_of(AgentConfig(model, planning=True, reflect=True)) == PlannedRun(ReactRun())
    # a sub-agent's run is built from its narrowed config: a plain loop, whatever its parent is
    parent = AgentConfig(model, [note], planning=True, reflect=True, delegation=True)
    assert kind_of(child_config(parent, AgentSpec())) == ReactRun()


def test_the_plain_loop_names_no_planner_and_no_reviewer() -> None:
    """Structural: no code object of agent/loop.py (Run's methods and what they nest) names plans or reviews,
    and the module holds neither; what a run is made of is attached where it is built."""
    banned = {"plan", "Planner", "planning", "Critic", "critic", "review", "reflect", "max_reviews", "PlannedRun",
              "ReviewedRun"}

    def names(code: types.CodeType) -> set[str]:
        found = set(code.co_names) | set(code.co_varnames)
        for const in code.co_consts:
            if isinstance(const, types.CodeType):
                found |= names(const)
        return found

    for name, value in vars(loop.Run).items():
        code = getattr(getattr(value, "__func__", value), "__code__", None)
        if code is not None:
            assert not names(code) & banned, name
    assert not {"plan", "review", "Planner", "Critic"} & set(vars(loop))


async def test_a_react_run_asks_answers_and_finishes(tmp_path: Path) -> None:
    agent = Agent(ScriptedModel([{"tool_calls": [{"name": "note", "arguments": {"text": "x"}}]}, {"text": "done"}]),
                  [note], workspace=tmp_path)
    seen: list[Event] = []
    run = build_run(agent, "note x", Session("s", None), seen.append)
    assert run.drive is None and run.answer_checker is None  # the loop as it is
    done = await run.execute()
    assert done.status == "completed" and done.answer == "done"
    assert _own(seen) == ["RunStarted", "ModelRequest", "ModelResponse", "ToolCallStarted", "ToolCallFinished",
                          "StepFinished", "ModelRequest", "ModelResponse", "StepFinished", "RunFinished"]
    assert not [e for e in seen if e.parent]  # no sub-run: no review, no plan


async def test_a_reviewed_run_is_re_entered_with_the_reviewers_feedback(tmp_path: Path) -> None:
    model = ScriptedModel([
        {"text": "first"},
        {"tool_calls": [{"name": "review", "arguments": {"approved": False, "feedback": "note it first"}}]},
        {"tool_calls": [{"name": "note", "arguments": {"text": "x"}}]},
        {"text": "second"},
        {"tool_calls": [{"name": "review", "arguments": {"approved": True, "feedback": ""}}]},
    ])
    agent = Agent(model, [note], workspace=tmp_path, reflect=True, max_reviews=2)
    seen: list[Event] = []
    run = build_run(agent, "note x", Session("s", None), seen.append)
    assert run.answer_checker is Critic and run.drive is None
    done = await run.execute()
    assert done.status == "completed" and done.answer == "second" and done.steps == 3
    assert _own(seen) == ["RunStarted", "ModelRequest", "ModelResponse", "Reviewed", "Feedback", "StepFinished",
                          "ModelRequest", "ModelResponse", "ToolCallStarted", "ToolCallFinished", "StepFinished",
                          "ModelRequest", "ModelResponse", "Reviewed", "StepFinished", "RunFinished"]
    assert [e.approved for e in seen if isinstance(e, Reviewed)] == [False, True]
    assert "note it first" in next(e for e in seen if isinstance(e, Feedback)).text
    # each review is a model call of a sub-run of its own, never in the run's conversation
    reviews = [e for e in seen if isinstance(e, ModelRequest) and e.parent]
    assert [e.run_id for e in reviews] == [f"{run.run_id}.1", f"{run.run_id}.2"]
    assert [e.parent for e in reviews] == [run.run_id] * 2


async def test_a_planned_run_drives_its_steps_as_plain_sub_runs(tmp_path: Path) -> None:
    model = ScriptedModel([
        {"tool_calls": [{"name": "submit_plan", "arguments": {"steps": ["note a", "note b"]}}]},
        {"tool_calls": [{"name": "note", "arguments": {"text": "a"}}]}, {"text": "a is noted"}, DONE,
        {"text": "b is noted"}, DONE,
        {"text": "Both."},
    ])
    # reflect as well: a planned run's steps and answer are not reviewed (the plan's verdicts judge the steps)
    agent = Agent(model, [note], workspace=tmp_path, planning=True, reflect=True)
    seen: list[Event] = []
    run = build_run(agent, "note a and b", Session("s", None), seen.append)
    assert run.drive == PlannedRun(ReactRun()) and run.answer_checker is None
    done = await run.execute()
    assert done.status == "completed" and done.answer == "Both."
    assert not [e for e in seen if isinstance(e, Reviewed)]
    steps = [e for e in seen if isinstance(e, RunStarted) and e.parent]
    assert [(e.run_id, e.parent) for e in steps] == [(f"{run.run_id}.s1.1", run.run_id),
                                                     (f"{run.run_id}.s1.2", run.run_id)]
    ends = [e for e in seen if isinstance(e, RunFinished) and e.parent]
    assert [(e.status, e.answer) for e in ends] == [("completed", "a is noted"), ("completed", "b is noted")]
    plans = [e for e in seen if isinstance(e, PlanUpdated)]
    assert [[s.status for s in p.steps] for p in plans] == [
        ["pending", "pending"], ["running", "pending"], ["done", "pending"], ["done", "running"], ["done", "done"]]
    assert _own(seen)[-3:] == ["ModelResponse", "StepFinished", "RunFinished"]


async def test_a_resumed_plan_is_planned_whatever_the_config_says(tmp_path: Path) -> None:
    """A killed planned run resumes as a planned run, from its log: the plan goes on at its first open step."""
    store = SQLiteStore(tmp_path / "db")
    session = Session("s", store)
    emitter = Emitter(session)
    emitter.emit(RunStarted("r1", "s", "note a and b", "m"))
    emitter.emit(PlanUpdated("r1", 1, (PlanStep("note a", "done", "a is noted", "r1.s1.1"), PlanStep("note b")), ""))
    session.commit()
    session = Session("s", store)
    assert session.open_run is not None and session.open_run.plan is not None
    model = ScriptedModel([{"tool_calls": [{"name": "note", "arguments": {"text": "b"}}]}, {"text": "b is noted"},
                           DONE, {"text": "Both."}])
    agent = Agent(model, [note], workspace=tmp_path, store=store)  # planning is off
    assert isinstance(kind_of(agent.config, session.open_run), PlannedRun)
    seen = [e async for e in agent.stream_resume(session)]
    assert isinstance(seen[0], RunResumed) and seen[0].run_id == "r1"
    plans = [e for e in seen if isinstance(e, PlanUpdated)]
    assert plans[0].note == "resumed" and [s.status for s in plans[-1].steps] == ["done", "done"]
    assert [e.run_id for e in seen if isinstance(e, RunStarted)] == ["r1.s1.2"]  # step 1 is not run again
    assert any(isinstance(e, ToolCallFinished) and e.content == "noted b" for e in seen)
    assert seen[-1].status == "completed" and seen[-1].answer == "Both."
    assert isinstance(seen[-2], StepFinished)


async def test_a_sub_agent_is_built_like_any_run_and_streams_inside_its_parent(tmp_path: Path) -> None:
    model = ScriptedModel([
        {"tool_calls": [{"name": "delegate", "arguments": {"task": "note z"}}]},
        {"tool_calls": [{"name": "note", "arguments": {"text": "z"}}]}, {"text": "z done"},
        {"text": "all done"},
        {"tool_calls": [{"name": "review", "arguments": {"approved": True, "feedback": ""}}]},
    ])
    # the parent's answer is reviewed; its child is a plain loop (its answer is not: the script has no review for it)
    agent = Agent(model, [note], workspace=tmp_path, delegation=True, reflect=True)
    seen: list[Event] = []
    done = await build_run(agent, "have z noted", Session("s", None), seen.append).execute()
    assert done.status == "completed" and done.answer == "all done"
    child = [e for e in seen if e.run_id == f"{done.run_id}.1" and not type(e).__name__.endswith("Delta")]
    assert {e.parent for e in child} == {done.run_id}
    assert [type(e).__name__ for e in child] == ["RunStarted", "ModelRequest", "ModelResponse", "ToolCallStarted",
                                                 "ToolCallFinished", "StepFinished", "ModelRequest", "ModelResponse",
                                                 "StepFinished", "RunFinished"]
    assert child[-1].answer == "z done"
    result = next(e for e in seen if isinstance(e, ToolCallFinished) and e.name == "delegate")
    assert result.content == "z done" and not result.parent
    assert [(e.run_id, e.approved) for e in seen if isinstance(e, Reviewed)] == [(done.run_id, True)]
