"""A plain function in `tools=` is a tool, as `@tool` would make it; a lambda or a non-function is refused
clearly. Through Agent, with the scripted model calling the function."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from shou import Agent, ScriptedModel, Tool, ToolSet, UserError, tool
from shou.tools.registry import as_tool

SEEN: list[tuple[str, int]] = []


def repeat(word: str, times: int = 2) -> str:
    """Say a word several times.

    Args:
        word: The word to say.
        times: How many times.
    """
    SEEN.append((word, times))
    return " ".join([word] * times)


async def shout(text: str) -> str:
    """Upper-case a text."""
    return text.upper()


def test_a_plain_function_is_wrapped_as_tool_would_wrap_it() -> None:
    made = as_tool(repeat)
    assert isinstance(made, Tool)
    assert made.spec() == tool(repeat).spec()
    assert made.spec()["function"]["description"] == "Say a word several times."
    assert made.spec()["function"]["parameters"]["properties"]["word"]["description"] == "The word to say."
    assert ToolSet([repeat, shout]).names == ["repeat", "shout"]


def test_the_agent_runs_a_plain_function_the_model_calls(tmp_path: Path) -> None:
    SEEN.clear()
    model = ScriptedModel([
        {"tool_calls": [{"name": "repeat", "arguments": {"word": "hey", "times": 3}},
                        {"name": "shout", "arguments": {"text": "quiet"}}]},
        {"expect": ["hey hey hey", "QUIET"], "text": "done: hey hey hey, QUIET",
         "otherwise": {"text": "the tools' results never came back"}},
    ])
    agent = Agent(model, tools=[repeat, shout], workspace=tmp_path)
    result = agent.run("say hey three times, then shout quiet")
    assert result.ok, result.error
    assert result.answer == "done: hey hey hey, QUIET"
    assert SEEN == [("hey", 3)]
    offered = {t["function"]["name"]: t["function"] for t in model.requests[0]["tools"]}
    assert offered["repeat"]["description"] == "Say a word several times."
    assert json.dumps(offered["shout"]["parameters"]["required"]) == '["text"]'
    assert agent.tools.names == ["repeat", "shout"]


def test_a_lambda_is_refused_with_what_to_do_instead() -> None:
    with pytest.raises(UserError, match=r"lambda.*define it with def"):
        Agent(ScriptedModel([{"text": "hi"}]), tools=[lambda x: x])


@pytest.mark.parametrize("thing", ["repeat", 42, str.upper, print])
def test_an_object_that_is_not_a_function_is_refused(thing: object) -> None:
    with pytest.raises(UserError, match="is not a tool: pass a function"):
        Agent(ScriptedModel([{"text": "hi"}]), tools=[thing])  # type: ignore[list-item]


def test_a_plain_function_without_a_docstring_gets_tools_own_error() -> None:
    def bare(a: int) -> int:
        return a

    with pytest.raises(UserError, match="no description"):
        Agent(ScriptedModel([{"text": "hi"}]), tools=[bare])
