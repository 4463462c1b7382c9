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
