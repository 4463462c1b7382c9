"""A sub-agent (`delegate` to a named agent that also has `handoff = true`) is never offered the handoff tool
(issue 34 review): `child_config` gave it the parent's tools with `handoff` among them, over what `sub_config`
filtered. The in-process scripted model."""

from __future__ import annotations

from shou import Agent, AgentSpec, ScriptedModel, tool
from shou.agent.delegate import child_config


@tool
def note(text: str) -> str:
    """Keep a note.

    Args:
        text: the note
    """
    return "noted"


AGENTS = {"b": AgentSpec("You are B.", handoff=True), "c": AgentSpec("You are C.", tools=("note", "handoff"))}


def test_a_named_sub_agent_gets_no_handoff_tool() -> None:
    parent = Agent(ScriptedModel([]), [note], agents=AGENTS, delegation=True).config
    assert "handoff" in parent.offered.names
    for name in AGENTS:
        child = child_config(parent, AGENTS[name])
        assert "handoff" not in child.offered.names and "handoff" not in child.code_tools.names, name


async def test_a_delegated_run_is_not_offered_a_handoff() -> None:
    model = ScriptedModel([{"tool_calls": [{"name": "delegate", "arguments": {"agent": "b", "task": "t"}}]},
                           {"text": "sub"}, {"text": "done"}])
    agent = Agent(model, [note], "front", agents=AGENTS, delegation=True)
    result = await agent.arun("x")
    assert result.status == "completed"
    sub_request = model.requests[1]
    assert [t["function"]["name"] for t in sub_request["tools"]] == ["note"]


async def test_a_handoff_past_the_agents_step_limit_says_how_many_steps_were_taken() -> None:
    """A handed-to agent's `max_steps` lowers the run's: handed the run after more steps than that, the run ends
    at once, and its error says the steps it took (not the lower limit, as if it had taken that many)."""
    note_call = {"tool_calls": [{"name": "note", "arguments": {"text": "a"}}]}
    model = ScriptedModel([note_call, note_call, note_call,
                           {"tool_calls": [{"name": "handoff", "arguments": {"agent": "tiny"}}]}, {"text": "done"}])
    agent = Agent(model, [note], "front", agents={"tiny": AgentSpec("tiny", handoff=True, max_steps=2)})
    result = await agent.arun("x")
    assert result.status == "max_steps" and result.error == "stopped after 4 steps without a final answer"
