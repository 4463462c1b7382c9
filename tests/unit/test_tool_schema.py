"""@tool: JSON schema from type hints and docstrings, validation messages, declaration errors."""

from __future__ import annotations

from enum import Enum
from typing import Annotated, Literal

import pytest
from pydantic import BaseModel, Field

from shou.errors import UserError
from shou.tools import Tool, ToolArgumentsError, ToolContext, tool
from shou.tools.base import parse_docstring


class Unit(Enum):
    C = "celsius"
    F = "fahrenheit"


class Point(BaseModel):
    x: float
    y: float = 0.0


def params(t: Tool) -> dict:
    return t.spec()["function"]["parameters"]


def test_defaults_required_and_descriptions() -> None:
    @tool
    def search(query: str, limit: int = 5, exact: bool = False) -> str:
        """Search the notes.

        Args:
            query: words to look for
            limit: how many hits
                at most (continued line)
            exact: match whole words only
        """
        return query

    p = params(search)
    assert search.spec()["function"]["description"] == "Search the notes."
    assert p["required"] == ["query"]
    assert p["properties"]["query"] == {"type": "string", "description": "words to look for"}
    assert p["properties"]["limit"] == {
        "type": "integer",
        "default": 5,
        "description": "how many hits at most (continued line)",
    }
    assert p["properties"]["exact"]["default"] is False
    assert p["additionalProperties"] is False
    assert "title" not in p and "title" not in p["properties"]["query"]


def test_enums_literals_lists_optional_and_nested_models() -> None:
    @tool
    def f(
        unit: Unit,
        mode: Literal["a", "b"],
        tags: list[str],
        points: list[Point],
        note: str | None = None,
        origin: Point | None = None,
    ) -> str:
        """Do f."""
        return "ok"

    p = params(f)
    assert p["$defs"]["Unit"] == {"enum": ["celsius", "fahrenheit"], "type": "string"}
    assert p["properties"]["unit"] == {"$ref": "#/$defs/Unit"}
    assert p["properties"]["mode"] == {"enum": ["a", "b"], "type": "string"}
    assert p["properties"]["tags"] == {"type": "array", "items": {"type": "string"}}
    assert p["properties"]["points"] == {"type": "array", "items": {"$ref": "#/$defs/Point"}}
    assert p["$defs"]["Point"]["required"] == ["x"]
    assert p["properties"]["note"] == {"anyOf": [{"type": "string"}, {"type": "null"}], "default": None}
    assert sorted(p["required"]) == ["mode", "points", "tags", "unit"]
    args = f.validate({"unit": "celsius", "mode": "a", "tags": [], "points": [{"x": 1}], "origin": {"x": 2, "y": 3}})
    assert args["unit"] is Unit.C
    assert args["points"][0] == Point(x=1)
    assert args["origin"] == Point(x=2, y=3)


def test_property_named_title_survives_cleaning() -> None:
    @tool
    def note(title: str, body: str) -> str:
        """Save a note."""
        return title

    assert set(params(note)["properties"]) == {"title", "body"}


def test_annotated_field_descriptions_and_sphinx_docstrings() -> None:
    @tool
    def g(n: Annotated[int, Field(description="how many", ge=1)], s: str = "x") -> str:
        """Do g.

        :param s: a string
        :returns: something
        """
        return s

    p = params(g)
    assert p["properties"]["n"] == {"type": "integer", "minimum": 1, "description": "how many"}
    assert p["properties"]["s"]["description"] == "a string"
    with pytest.raises(ToolArgumentsError, match="n: Input should be greater than or equal to 1"):
        g.validate({"n": 0})


def test_context_parameter_is_hidden_and_injected() -> None:
    @tool
    async def where(ctx: ToolContext, name: str) -> str:
        """Where is it."""
        return f"{ctx.workspace}/{name}"

    assert list(params(where)["properties"]) == ["name"]
    assert where.context_param == "ctx"
    assert where.is_async


async def test_sync_and_async_tools_are_called(tmp_path) -> None:
    @tool
    def sync_add(a: int, b: int) -> int:
        """Add."""
        return a + b

    @tool
    async def async_where(ctx: ToolContext) -> str:
        """Where."""
        return str(ctx.workspace)

    assert await sync_add.call(sync_add.validate({"a": 2, "b": "3"}), None) == 5
    assert await async_where.call({}, ToolContext(tmp_path)) == str(tmp_path)


def test_validation_messages_are_precise() -> None:
    @tool
    def h(count: int, items: list[int]) -> str:
        """H."""
        return ""

    with pytest.raises(ToolArgumentsError) as e:
        h.validate({"count": "many", "items": [1, "x"], "extra": 1})
    msg = str(e.value)
    assert "count: Input should be a valid integer" in msg and '"many"' in msg
    assert "items.1: Input should be a valid integer" in msg
    assert "extra: unexpected argument" in msg
    with pytest.raises(ToolArgumentsError, match="count: Field required"):
        h.validate({"items": []})


def test_declaration_errors_are_reported_together() -> None:
    with pytest.raises(UserError) as e:

        @tool
        def bad(a, *rest, b: int = 1):
            """Bad.

            Args:
                c: does not exist
            """

    msg = str(e.value)
    assert "'a' has no type hint" in msg and "*rest" in msg and "['c']" in msg


def test_missing_description_is_an_error() -> None:
    with pytest.raises(UserError, match="no description"):
        tool(lambda x: x)  # lambdas have no hints either


def test_runtime_tool_validates_with_json_schema() -> None:
    t = Tool(
        "lookup",
        "Look up a key.",
        {
            "type": "object",
            "properties": {"key": {"type": "string"}, "n": {"type": "integer", "minimum": 0}},
            "required": ["key"],
            "additionalProperties": False,
        },
        lambda key, n=0: f"{key}:{n}",
    )
    assert t.validate({"key": "a", "n": 2}) == {"key": "a", "n": 2}
    with pytest.raises(ToolArgumentsError) as e:
        t.validate({"n": -1, "zzz": 1})
    msg = str(e.value)
    assert "'key' is a required property" in msg
    assert "n: -1 is less than the minimum of 0" in msg
    assert "zzz" in msg


def test_bad_runtime_tools_are_refused() -> None:
    with pytest.raises(UserError, match="name"):
        Tool("has space", "d", None, print)
    with pytest.raises(UserError, match="type 'object'"):
        Tool("t", "d", {"type": "string"}, print)


def test_parse_docstring_google_and_sphinx() -> None:
    summary, args = parse_docstring("Top line.\n\nMore.\n\nArgs:\n    a (int): first\n    b: second\n\nReturns:\n    x")
    assert summary == "Top line.\n\nMore."
    assert args == {"a": "first", "b": "second"}
