"""Sub-runs in the session fold and the Python API: plans, reviews and delegates keep their own context."""

from __future__ import annotations

from pathlib import Path

from shou import Agent, AgentSpec, ScriptedModel, Session, SQLiteStore, tool
from shou.agent.emitter import Emitter
from shou.events import Feedback, ModelRequest, ModelResponse, PlanStep, PlanUpdated, RunStarted, ToolCallFinished
from shou.messages import Message
from shou.usage import Usage


def test_a_sub_runs_events_count_but_never_join_the_conversation(tmp_path: Path) -> None:
    store = SQLiteStore(tmp_path / "db")
    session = Session("s", store)
    Emitter(session).emit(RunStarted("r1", "s", "the task", "m"))
    Emitter(session).emit(RunStarted("r1.1", "s", "a child's task", "m", parent="r1"))
    Emitter(session).emit(ModelResponse("r1.1", 1, Message.assistant("child says"), Usage(100, 5, 1, cost=0.5), 0.1,
                                 "stop", parent="r1"))
    Emitter(session).emit(ToolCallFinished("r1.1", 1, "c9", "nap", "zzz", parent="r1"))
    Emitter(session).emit(ModelResponse("r1", 1, Message.assistant("parent says"), Usage(10, 1, 1, cost=0.25), 0.1,
                                        "stop"))
    session.commit()
    for s in (session, Session("s", store)):  # as recorded, and as loaded again from the log
        assert [m.text for m in s.messages] == ["the task", "parent says"]
        assert s.spent.total_tokens == 116 and s.spent.cost == 0.75
        assert s.open_run is not None and s.open_run.run_id == "r1"


# a plan step's verdict, which the step's model is asked for once the step's run completes
DONE = {"tool_calls": [{"name": "step_verdict", "arguments": {"done": True, "reason": "done"}}]}


@tool
def note(text: str) -> str:
    """Keep a note."""
    return f"noted {text}"


async def test_a_planned_run_through_the_python_api(tmp_path: Path) -> None:
    model = ScriptedModel([
        {"tool_calls": [{"name": "submit_plan", "arguments": {"steps": ["note a", "note b"]}}]},
        {"tool_calls": [{"name": "note", "arguments": {"text": "a"}}]},
        {"text": "a is noted"},
        DONE,
        {"tool_calls": [{"name": "note", "arguments": {"text": "b"}}]},
        {"text": "b is noted"},
        DONE,
        {"text": "Both notes are kept."},
    ])
    store = SQLiteStore(tmp_path / "db")
    agent = Agent(model, [note], workspace=tmp_path, store=store, planning=True)
    seen = [e async for e in agent.stream("note a and b", "plan")]
    assert seen[-1].status == "completed" and seen[-1].answer == "Both notes are kept."
    plans = [e for e in seen if isinstance(e, PlanUpdated)]
    assert [s.status for s in plans[-1].steps] == ["done", "done"]
    assert plans[-1].steps[1].result == "b is noted"
    # the session's conversation is the task and the answer; the steps live in the log as sub-runs
    assert [m.text for m in Session("plan", store).messages] == ["note a and b", "Both notes are kept."]
    # step 2 knew step 1's result and nothing of the planner's conversation
    step2 = model.requests[4]["messages"]
    assert "a is noted" in step2[-1]["content"] and all(m["role"] != "tool" for m in step2)
    verdict = model.requests[3]
    assert [t["function"]["name"] for t in verdict["tools"]] == ["step_verdict"]
    assert "note a" in verdict["messages"][-1]["content"] and "noted a" in verdict["messages"][-1]["content"]
    assert seen[-1].usage.requests == 8  # the plan, both steps, their verdicts and the answer count for the run


async def test_delegate_through_the_python_api_with_a_named_agent(tmp_path: Path) -> None:
    model = ScriptedModel([
        {"tool_calls": [{"name": "delegate", "arguments": {"task": "keep a note of x", "agent": "scribe"}}]},
        {"tool_calls": [{"name": "note", "arguments": {"text": "x"}}]},
        {"text": "x is noted"},
        {"text": "The scribe noted x."},
    ])
    scribe = AgentSpec(instructions="You keep notes.", tools=("note",), max_steps=3, description="keeps notes")
    agent = Agent(model, [note], workspace=tmp_path, agents={"scribe": scribe}, delegation=True)
    result = await agent.arun("have x noted")
    assert result.ok and result.answer == "The scribe noted x."
    child = model.requests[1]["messages"]
    assert child[0]["content"].startswith("You keep notes.") and [m["content"] for m in child[1:]] == [
        "keep a note of x"]
    assert [t["function"]["name"] for t in model.requests[1]["tools"]] == ["note"]
    assert result.usage.requests == 4


async def test_sub_runs_store_each_request_content_once_in_the_log(tmp_path: Path) -> None:
    model = ScriptedModel([
        {"tool_calls": [{"name": "submit_plan", "arguments": {"steps": ["note a", "note b"]}}]},
        {"text": "a done"},
        DONE,
        {"text": "b done"},
        DONE,
        {"text": "Done."},
    ])
    store = SQLiteStore(tmp_path / "db")
    result = await Agent(model, [note], workspace=tmp_path, store=store, planning=True).arun("notes", "once")
    assert result.ok
    stored: list[str] = []
    for event in store.events("once"):
        if isinstance(event, ModelRequest) and event.contents:
            stored.extend(event.contents)
    assert stored and len(stored) == len(set(stored))  # both steps send the same instructions and tools


async def test_a_killed_planned_run_resumes_from_its_plan(tmp_path: Path) -> None:
    store = SQLiteStore(tmp_path / "db")
    session = Session("k", store)  # what a process killed during step 2 left in the log
    Emitter(session).emit(RunStarted("r1", "k", "note a, then b", "m"))
    Emitter(session).emit(PlanUpdated("r1", 1, (PlanStep("note a", "done", "a is noted", "r1.s1.1"),
                                         PlanStep("note b", "running", "", "r1.s1.2"))))
    session.commit()
    model = ScriptedModel([
        {"tool_calls": [{"name": "submit_plan", "arguments": {"steps": ["check whether b is noted, note it if not"]}}]},
        {"text": "b was not noted; now it is"},
        DONE,
        {"text": "a and b are noted."},
    ])
    agent = Agent(model, [note], workspace=tmp_path, store=store)  # not planning: the log says the run was
    seen = [e async for e in agent.stream_resume("k")]
    assert seen[-1].status == "completed" and seen[-1].answer == "a and b are noted."
    replan = model.requests[0]
    assert [t["function"]["name"] for t in replan["tools"]] == ["submit_plan"]
    assert "interrupted" in replan["messages"][-1]["content"]  # the planner is told, and decides
    last = [e for e in seen if isinstance(e, PlanUpdated)][-1]
    assert (last.revision, [s.status for s in last.steps]) == (2, ["done", "failed", "done"])
    assert "a is noted" in model.requests[1]["messages"][-1]["content"]  # step 1 was not done again


async def test_model_given_text_is_bounded(tmp_path: Path) -> None:
    huge = "x" * 50_000
    model = ScriptedModel([
        {"tool_calls": [{"name": "submit_plan", "arguments": {"steps": [huge, {"odd": "step"}, "  "]}}]},
        {"text": "one"},
        DONE,
        {"text": "two"},
        DONE,
        {"text": "answer"},
        {"text": "first answer"},
        {"tool_calls": [{"name": "review", "arguments": {"approved": False, "feedback": huge}}]},
        {"tool_calls": [{"name": "delegate", "arguments": {"task": "y" * 500_000}}]},
        {"text": "final"},
    ])
    agent = Agent(model, [note], workspace=tmp_path, planning=True)
    seen = [e async for e in agent.stream("plan it")]
    plan = [e for e in seen if isinstance(e, PlanUpdated)][-1]
    assert [len(s.text) for s in plan.steps] == [2006, len('{"odd": "step"}')]
    agent = Agent(model, [note], workspace=tmp_path, reflect=True, delegation=True)
    seen = [e async for e in agent.stream("answer it")]
    [feedback] = [e for e in seen if isinstance(e, Feedback)]
    assert len(feedback.text) < 5000
    [refused] = [e for e in seen if isinstance(e, ToolCallFinished)]
    assert refused.is_error and "at most 400,000" in refused.content
    assert seen[-1].answer == "final"
