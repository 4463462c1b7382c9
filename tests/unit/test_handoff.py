"""Handoffs (agent/handoff.py): the config a handed-to agent answers with only narrows the run's; the table is
checked; sub-runs are never offered the tool; the open run's agent is a fold of the log; the trace names the
agent of each step; an in-process run switches instructions and tools at the step after the handoff."""

from __future__ import annotations

import asyncio
import json

import pytest

from shou import Agent, AgentSpec, ScriptedModel, tool
from shou.agent.config import AgentConfig
from shou.agent.handoff import MAIN_AGENT, handed_config, handoff_targets
from shou.agent.subrun import sub_config
from shou.errors import UserError
from shou.events import Handoff, ModelRequest, ModelResponse, RunFinished, RunStarted, ToolCallStarted
from shou.messages import Message, ToolCall
from shou.session import Session
from shou.setting_tables import check_agent_table
from shou.trace import build
from shou.usage import Usage


@tool
def note(text: str) -> str:
    """Keep a note.

    Args:
        text: the note
    """
    return f"noted {text}"


@tool
def lookup(key: str) -> str:
    """Look a key up.

    Args:
        key: the key
    """
    return key.upper()


AGENTS = {"billing": AgentSpec("You bill.", tools=("lookup",), max_steps=50, handoff=True, description="money"),
          "tiny": AgentSpec("You are brief.", max_steps=2, handoff=True),
          "helper": AgentSpec(description="delegate only")}


def _config(**fields: object) -> AgentConfig:
    return AgentConfig(ScriptedModel([{"text": "hi"}]), [note, lookup], **{"agents": AGENTS, **fields})  # type: ignore[arg-type]


def test_a_handed_config_only_narrows_the_runs_own() -> None:
    main = _config(max_steps=9)
    assert main.offered.names == ["note", "lookup", "handoff"]
    billing = handed_config(main, "billing")
    assert billing.offered.names == ["lookup", "handoff"] and billing.instructions == "You bill."
    assert billing.max_steps == 9  # 50 asked: a named agent's limit never widens the run's
    assert handed_config(main, "tiny").max_steps == 2
    assert handed_config(main, "tiny").offered.names == ["note", "lookup", "handoff"]  # default: the run's tools
    assert handed_config(main, MAIN_AGENT) is main
    assert billing.redactor is main.redactor
    with pytest.raises(UserError, match="no agent 'helper' with handoff"):
        handed_config(main, "helper")
    with pytest.raises(UserError, match="unknown tool"):  # a tool the run does not have is never given
        handed_config(_config(agents={"x": AgentSpec(tools=("shell",), handoff=True)}), "x")


def test_the_targets_are_the_other_handoff_agents_and_main() -> None:
    assert handoff_targets(AGENTS) == {"billing": "money", "tiny": ""}
    assert handoff_targets(AGENTS, "billing") == {MAIN_AGENT: "the agent this conversation started with", "tiny": ""}
    assert "handoff" not in _config(agents={"helper": AgentSpec()}).offered.names


def test_sub_runs_are_never_offered_a_handoff() -> None:
    step = sub_config(_config(delegation=True))
    assert "handoff" not in step.offered.names and not any(s.handoff for s in step.agents.values())


def test_the_agents_table_is_checked() -> None:
    with pytest.raises(UserError, match="handoff must be true or false"):
        check_agent_table("billing", {"handoff": "yes"})
    with pytest.raises(UserError, match="name of the run's own agent"):
        check_agent_table("main", {"handoff": True})
    check_agent_table("main", {"description": "delegate only is fine"})
    assert AgentSpec.from_table("b", {"handoff": True}).handoff


def _log() -> list:
    call = ToolCall("c1", "handoff", json.dumps({"agent": "billing"}))
    return [RunStarted("r", "s", "task", "m"), ModelRequest("r", 1, 2, 1, request_id="q1", model="m"),
            ModelResponse("r", 1, Message.assistant("", [call]), Usage(1, 1, 1), 0.1, "tool_calls", "m",
                          request_id="q1"),
            ToolCallStarted("r", 1, call), Handoff("r", 1, MAIN_AGENT, "billing", "money"),
            ModelRequest("r", 2, 4, 2, request_id="q2", model="m")]


def test_the_open_runs_agent_is_a_fold_of_the_log() -> None:
    log = _log()
    for n in range(1, len(log) + 1):  # every prefix a crash can leave
        session = Session("s")
        for event in log[:n]:
            session._fold.apply(event)
        assert session.open_run is not None
        assert session.open_run.agent == ("billing" if n >= 5 else MAIN_AGENT)
    session._fold.apply(RunFinished("r", "completed", "ok", 2, Usage(), 0.1))
    assert session.open_run is None


def test_the_trace_names_the_agent_of_each_step() -> None:
    [run] = build(("s", float(i), e) for i, e in enumerate(_log()))
    assert [c.agent for c in run.model_calls] == [MAIN_AGENT, "billing"]
    assert [s.agent for s in run.steps] == [MAIN_AGENT, "billing"]
    assert [(h.step, h.source, h.target) for h in run.handoffs] == [(1, MAIN_AGENT, "billing")]
    [plain] = build(("s", float(i), e) for i, e in enumerate(_log()[:4]))
    assert [c.agent for c in plain.model_calls] == [""]  # never handed over: nobody to tell apart


def test_an_in_process_run_switches_at_the_next_step() -> None:
    model = ScriptedModel([
        {"tool_calls": [{"name": "handoff", "arguments": {"agent": "billing", "reason": "money"}},
                        {"name": "handoff", "arguments": {"agent": "tiny"}}]},
        {"tool_calls": [{"name": "handoff", "arguments": {"agent": "billing"}}]},
        {"text": "done"},
    ])
    agent = Agent(model, [note, lookup], "You are the front desk.", agents=AGENTS)
    events = asyncio.run(_collect(agent))
    assert events[-1].status == "completed"
    assert [(e.source, e.target) for e in events if isinstance(e, Handoff)] == [(MAIN_AGENT, "billing")]
    results = [e.content for e in events if getattr(e, "type", "") == "tool_call_finished"]
    assert "one handoff per turn" in results[1] and "You are 'billing' already" in results[2]
    first, second, third = model.requests
    assert "You are the front desk." in first["messages"][0]["content"]
    for later in (second, third):
        assert "You bill." in later["messages"][0]["content"]
        assert [t["function"]["name"] for t in later["tools"]] == ["lookup", "handoff"]


async def _collect(agent: Agent) -> list:
    return [e async for e in agent.stream("charge me once")]


def test_an_a2a_task_update_says_who_took_over() -> None:
    from shou.serve.a2a_tasks import SHOWN, event_message

    message = event_message(7, Handoff("r", 1, MAIN_AGENT, "billing", "money"), "t", "c")
    assert Handoff.type in SHOWN and message.parts[0].text == "main hands over to billing: money"
