"""Schemas from outside are checked in linear time (RE2), bounded in size and depth, and a pattern RE2 cannot
run is refused or taken out, never handed to Python's backtracking `re`."""

from __future__ import annotations

import jsonschema
import pytest

from shou.tools.base import Tool, ToolArgumentsError
from shou.tools.schema_regex import MAX_SCHEMA_DEPTH, UnsafePattern, install, safe_schema, unsafe_pattern

EVIL = "a" * 5000 + "!"  # with `^(a+)+$`, backtracking would take longer than the universe has


def _tool(schema: dict) -> Tool:
    return Tool("t", "a tool", schema, lambda **kw: "ok")


def test_a_catastrophic_pattern_is_checked_in_linear_time() -> None:
    tool = _tool({"type": "object", "properties": {"w": {"type": "string", "pattern": "^(a+)+$"}},
                  "patternProperties": {"^(x+)+$": {"type": "integer"}}, "additionalProperties": True})
    with pytest.raises(ToolArgumentsError, match="does not match"):
        tool.validate({"w": EVIL})
    assert tool.validate({"w": "aaaa"}) == {"w": "aaaa"}
    with pytest.raises(ToolArgumentsError, match="is not of type 'integer'"):
        tool.validate({"x" * 5000: "no"})
    # the MCP SDK checks results with jsonschema's own classes: those search in linear time too
    assert install()
    schema = {"type": "object", "properties": {"r": {"type": "string", "pattern": "^(a+)+$"}}}
    assert not jsonschema.validators.validator_for(schema)(schema).is_valid({"r": EVIL})


def test_a_pattern_re2_cannot_run_is_refused_not_backtracked() -> None:
    install()
    tool = _tool({"type": "object", "properties": {"w": {"type": "string", "pattern": r"^(a+)+\1$"}}})
    with pytest.raises(ToolArgumentsError, match="cannot be checked"):
        tool.validate({"w": EVIL})
    cleaned, why = safe_schema({"type": "object", "properties": {
        "w": {"type": "string", "pattern": r"(?=a)a"}, "pattern": {"type": "string", "pattern": "^[a-z]+$"}},
        "patternProperties": {r"(\w)\1": {}, "^ok$": {}}})
    assert why == ""
    assert "pattern" not in cleaned["properties"]["w"]  # left out: the server still checks its own
    assert cleaned["properties"]["pattern"] == {"type": "string", "pattern": "^[a-z]+$"}
    assert list(cleaned["patternProperties"]) == ["^ok$"]
    with pytest.raises(UnsafePattern):
        jsonschema.validate("a", {"pattern": r"(?<=a)b"})


def test_huge_and_deep_schemas_are_refused() -> None:
    huge = {"type": "object", "properties": {f"p{i}": {"type": "string", "description": "x" * 100}
                                              for i in range(1000)}}
    assert safe_schema(huge)[0] is None and "bytes" in safe_schema(huge)[1]
    deep: dict = {"type": "object"}
    for _ in range(MAX_SCHEMA_DEPTH):
        deep = {"type": "object", "properties": {"a": deep}}
    assert safe_schema(deep)[0] is None and "deeper" in safe_schema(deep)[1]
    assert safe_schema({"type": "object", "properties": {"a": {"type": "string"}}})[0] is not None


def test_arguments_nested_past_what_a_recursive_schema_can_check_are_refused() -> None:
    tool = _tool({"type": "object", "properties": {"a": {"$ref": "#/$defs/n"}},
                  "$defs": {"n": {"type": "array", "items": {"$ref": "#/$defs/n"}}}})
    deep: list = []
    for _ in range(2000):
        deep = [deep]
    with pytest.raises(ToolArgumentsError, match="nest too deeply"):
        tool.validate({"a": deep})
    assert tool.validate({"a": [[[]]]}) == {"a": [[[]]]}


def test_the_pattern_that_makes_a_schema_unsafe_is_named() -> None:
    # what refuses an output schema (its owner is told, the pattern not silently left out): any pattern RE2
    # cannot run, and without RE2 (`linear` False) any pattern at all, wherever in the schema it is
    nested = {"type": "object", "properties": {"enum": {"type": "array", "items": {"pattern": "^(a+)+$"}}}}
    assert unsafe_pattern(nested, True) is None
    why = unsafe_pattern(nested, False) or ""
    assert "'^(a+)+$'" in why and "not installed" in why
    why = unsafe_pattern({"anyOf": [{}, {"patternProperties": {"(?=x)": {}}}]}, True) or ""
    assert "'(?=x)' cannot be checked in linear time" in why and "invalid perl operator" in why  # RE2's reason
    assert unsafe_pattern({"properties": {"pattern": {"type": "string"}}}, False) is None  # a property's name
