"""Typed answers' parts (agent/output.py, models/capabilities.py): what a type becomes on the wire, how an
answer is checked, which mechanism a model gets, bad types refused, and a resumed run's recorded answer checked."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from pydantic import BaseModel

from shou import Agent, JsonSchema, ScriptedModel, Session, SQLiteStore, UserError
from shou.agent.config import AgentConfig
from shou.agent.emitter import Emitter
from shou.agent.output import OutputCheck, output_spec
from shou.agent.subrun import sub_config
from shou.events import Feedback, ModelRequest, ModelResponse, RunFinished, RunStarted
from shou.messages import Message
from shou.models.cache import CachedModel
from shou.models.capabilities import output_mode
from shou.models.fallback import FallbackModel
from shou.models.local import answer_schema, bounded
from shou.models.openai_compat import OpenAICompatible
from shou.usage import Usage


class City(BaseModel):
    name: str
    population: int


def test_an_object_type_travels_as_it_is_and_anything_else_wrapped() -> None:
    spec = output_spec(City)
    assert not spec.wrapped and spec.wire_schema() == City.model_json_schema() and spec.name == "City"
    assert spec.check('{"name": "P", "population": 3}') == ({"name": "P", "population": 3}, None)
    assert spec.check('```json\n{"name": "P", "population": 3}\n```')[1] is None  # a fenced answer is read
    value, errors = spec.check('{"name": "P"}')
    assert value is None and errors is not None and "population: Field required" in errors
    assert "not JSON" in (spec.check("Paris, 3 people")[1] or "")
    many = output_spec(list[City])
    assert many.wrapped and many.wire_schema()["required"] == ["answer"] and "$defs" in many.wire_schema()
    assert "$defs" not in many.wire_schema()["properties"]["answer"]  # the refs still resolve from the root
    assert many.check('[{"name": "P", "population": 3}]', wire=False)[1] is None
    assert "key 'answer'" in (many.check('[{"name": "P", "population": 3}]')[1] or "")
    assert many.value('[{"name": "P", "population": 3}]') == [City(name="P", population=3)]


def test_raw_schemas_are_checked_with_jsonschema_and_bad_ones_refused() -> None:
    spec = output_spec(JsonSchema({"type": "object", "properties": {"n": {"type": "integer"}}, "required": ["n"]},
                                  "my schema!"))
    assert spec.name == "my_schema_" and spec.adapter is None
    assert spec.check('{"n": 1}') == ({"n": 1}, None)
    assert "(root): 'n' is a required property" in (spec.check("{}")[1] or "")
    assert "n: 'x' is not of type 'integer'" in (spec.check('{"n": "x"}')[1] or "")
    with pytest.raises(UserError, match="not a valid JSON schema"):
        output_spec({"type": 5})
    with pytest.raises(UserError, match="cannot be an answer's type"):
        Agent(ScriptedModel([]), output_type=object())
    with pytest.raises(UserError, match="planned run"):
        AgentConfig(ScriptedModel([]), output_type=City, planning=True)
    with pytest.raises(UserError, match="output_retries"):
        AgentConfig(ScriptedModel([]), output_type=City, output_retries=-1)


def test_the_mechanism_follows_what_the_model_takes() -> None:
    def wire(name: str, **kw: object) -> OpenAICompatible:
        return OpenAICompatible(name, base_url="http://127.0.0.1:9/v1", **kw)

    assert output_mode(wire("gpt-4o-mini")) == "response_format"  # known by name
    assert output_mode(wire("deepseek-chat")) == "tool"
    assert output_mode(wire("deepseek-chat", response_format=True)) == "response_format"  # said so
    assert output_mode(wire("gpt-4o", response_format=False)) == "tool"
    assert output_mode(ScriptedModel([])) == "tool"
    assert output_mode(FallbackModel([wire("gpt-4o"), wire("gpt-4.1")])) == "response_format"
    assert output_mode(FallbackModel([wire("gpt-4o"), wire("deepseek-chat")])) == "tool"  # a fallback must take it
    assert output_mode(CachedModel(wire("gpt-4o"), None, str)) == "response_format"  # type: ignore[arg-type]


def test_the_local_model_reads_the_schema_from_the_setting() -> None:
    from shou.models.base import ModelSettings

    fmt = output_spec(City).response_format()
    assert answer_schema(ModelSettings(extra={"response_format": fmt})) == City.model_json_schema()
    assert answer_schema(ModelSettings(extra={"response_format": {"type": "json_object", "schema": {"type": "x"}}})) \
        == {"type": "x"}
    assert answer_schema(None) is None and answer_schema(ModelSettings()) is None
    assert bounded(City.model_json_schema())["properties"]["name"]["maxLength"] == 300


def test_sub_runs_answer_in_text_and_the_spec_is_made_once_per_type() -> None:
    config = AgentConfig(ScriptedModel([]), output_type=City)
    assert config.output is not None and sub_config(config).output is None
    assert AgentConfig(ScriptedModel([]), output_type=City).output is config.output


async def test_a_resumed_run_s_recorded_answer_is_checked_before_it_stands(tmp_path: Path) -> None:
    """Killed after an invalid answer was recorded and before the run ended: the resumed run checks that answer,
    sends the errors back and asks again, instead of closing the run with it."""
    store = SQLiteStore(tmp_path / "db")
    session = Session("s", store)
    emitter = Emitter(session)
    emitter.emit(RunStarted("r1", "s", "a city", "m"))
    emitter.emit(ModelRequest("r1", 1, 1, 0))
    emitter.emit(ModelResponse("r1", 1, Message.assistant('{"name": "P"}'), Usage(), 0.1, "stop"))
    session.commit()
    session = Session("s", store)
    assert session.open_run is not None and session.open_run.answer is not None
    model = ScriptedModel([{"text": '{"name": "P", "population": 3}'}])
    model.output_mode = "response_format"  # type: ignore[attr-defined]  # as a provider that takes it
    agent = Agent(model, [], workspace=tmp_path, store=store, output_type=City)
    seen = [e async for e in agent.stream_resume(session)]
    done = seen[-1]
    assert isinstance(done, RunFinished) and done.status == "completed" and done.run_id == "r1"
    assert any(isinstance(e, Feedback) and "population" in e.text for e in seen)
    assert agent.config.output is not None and agent.config.output.value(done.answer) == City(name="P", population=3)
    assert model.requests[0]["response_format"]["json_schema"]["name"] == "City"


def test_a_finished_typed_run_is_freed_without_the_collector(tmp_path: Path) -> None:
    """The answer check holds the run and the run holds the check's `answer_call`: the run lets go when it ends."""
    from .test_run_frees import KEPT_BY_A_CYCLE, collector_off

    def one_run() -> None:
        model = ScriptedModel([{"tool_calls": [{"name": "final_answer", "arguments": {"name": "P"}}]},
                               {"tool_calls": [{"name": "final_answer", "arguments": {"name": "P", "population": 1}}]}])
        agent = Agent(model, [], workspace=tmp_path, output_type=City)
        try:
            result = agent.run("a city")
        finally:
            agent.close()
        assert result.output == City(name="P", population=1)

    with collector_off() as found:
        one_run()
    left = sorted({type(o).__name__ for o in found if isinstance(o, (*KEPT_BY_A_CYCLE, OutputCheck))})
    assert not left, f"a finished typed run left these to the garbage collector: {left}"


def test_what_the_schema_is_called_on_the_wire() -> None:
    assert output_spec(City).name == "City" and output_spec(list[City]).name == "answer"
    assert output_spec(int | City).name == "answer"


async def test_a_resumed_run_takes_the_answer_call_its_killed_process_left_unanswered(tmp_path: Path) -> None:
    """Killed after the model's final_answer call was recorded and before its result: the resumed run takes
    that call as the answer (checked), instead of running it as an unknown tool and asking again."""
    from shou.messages import ToolCall

    store = SQLiteStore(tmp_path / "db")
    session = Session("s", store)
    emitter = Emitter(session)
    emitter.emit(RunStarted("r1", "s", "a city", "m"))
    emitter.emit(ModelRequest("r1", 1, 1, 0))
    call = ToolCall("c1", "final_answer", '{"name": "P", "population": 3}')
    emitter.emit(ModelResponse("r1", 1, Message.assistant(None, [call]), Usage(), 0.1, "tool_calls"))
    session.commit()
    session = Session("s", store)
    assert session.open_run is not None and [c.id for c in session.open_run.unanswered] == ["c1"]
    model = ScriptedModel([])  # asked nothing
    agent = Agent(model, [], workspace=tmp_path, store=store, output_type=City)
    seen = [e async for e in agent.stream_resume(session)]
    done = seen[-1]
    assert isinstance(done, RunFinished) and done.status == "completed" and model.requests == []
    assert agent.config.output is not None and agent.config.output.value(done.answer) == City(name="P", population=3)
    assert Session("s", store).messages[-1].role == "tool"  # the call has its result: the conversation is valid


@pytest.mark.parametrize("kind", ["model", "list", "raw"])
def test_an_answer_nested_too_deep_is_feedback_for_the_model_not_a_crash(kind: str) -> None:
    # the model's text: 100,000 nested arrays raised RecursionError out of the answer check, ending the run
    # `error` ("internal error") instead of going back to the model like any other invalid answer
    from pydantic import BaseModel

    from shou.agent.output import JsonSchema, output_spec

    class City(BaseModel):
        name: str

    kinds: dict[str, Any] = {"model": City, "list": list[City], "raw": JsonSchema({"type": "object"})}
    spec = output_spec(kinds[kind])
    deep = "[" * 100_000 + "]" * 100_000
    for text in (deep, '{"answer": ' + deep + "}"):
        value, why = spec.check(text)
        assert value is None and why is not None and "too deeply" in why


@pytest.mark.timeout(60)  # the old check ran Python's `re`, which never finishes these: a timeout, not a hang
def test_an_output_schema_s_patterns_are_searched_in_linear_time() -> None:
    # `^(a+)+$` against 28 characters held `shou serve`'s event loop for 8.8 s (doubling with each one): an
    # output schema's patterns are searched with RE2, as tools' arguments are
    import json

    evil = "a" * 5000 + "!"
    spec = output_spec(JsonSchema({"type": "string", "pattern": "^(a+)+$"}))
    _, errors = spec.check(json.dumps(evil), wire=False)  # the message quotes the answer, cut short
    assert errors is not None and errors.startswith("- (root): 'aaaa") and errors.endswith("[...]")
    assert "does not match '^(a+)+$'" in (spec.check('"ab"', wire=False)[1] or "")
    assert spec.check('"aaa"', wire=False)[1] is None
    keys = output_spec({"type": "object", "patternProperties": {"^(a+)+$": {}}, "additionalProperties": False})
    _, errors = keys.check(json.dumps({evil: 1}))
    assert errors is not None and errors.startswith("- (root): 'aaaa")
    assert "does not match any of the regexes" in (keys.check('{"ab": 1}')[1] or "")
    assert keys.check(json.dumps({"aaa": 1}))[1] is None


@pytest.mark.parametrize("schema", [
    {"type": "string", "pattern": "^(?=a)a+$"},
    {"type": "object", "properties": {"enum": {"type": "string", "pattern": r"(a)\1"}}},
    {"type": "object", "patternProperties": {"(?<!b)a": {"type": "integer"}}},
])
def test_an_output_schema_with_a_pattern_re2_cannot_run_is_refused(schema: dict[str, Any]) -> None:
    # as a tool's would be: Python's `re` is never the fallback for a pattern that is not linear
    with pytest.raises(UserError, match="cannot be checked in linear time"):
        Agent(ScriptedModel([{"text": "x"}]), [], output_type=JsonSchema(schema))


@pytest.mark.parametrize("schema", [
    {"$ref": "#/definitions/a", "definitions": {"a": {"$ref": "#/definitions/a"}}},
    {"$ref": "#"},
    {"allOf": [{"$ref": "#"}]},
    {"anyOf": [{"type": "string"}, {"$ref": "#"}]},  # a number goes round for ever
    {"$ref": "#/$defs/a", "$defs": {"a": {"$ref": "#/$defs/b"}, "b": {"not": {"$ref": "#/$defs/a"}}}},
    {"$ref": "#/$defs/a~1b", "$defs": {"a/b": {"$ref": "#/$defs/a%7E1b"}}},
])
def test_an_output_schema_that_only_refers_to_itself_is_refused(schema: dict[str, Any]) -> None:
    # it was taken, and every answer then "nests too deeply": 3 model calls spent on a schema nothing matches
    with pytest.raises(UserError, match="refers to itself"):
        output_spec(JsonSchema(schema))


def test_a_recursive_schema_that_reaches_a_value_is_taken() -> None:
    tree = {"type": "object", "properties": {"name": {"$ref": "#/$defs/name"},
                                             "kids": {"type": "array", "items": {"$ref": "#"}}},
            "$defs": {"name": {"type": "string"}}}
    spec = output_spec(JsonSchema(tree))
    assert spec.check('{"name": "a", "kids": [{"name": "b", "kids": []}]}')[1] is None


def test_an_output_schema_nested_too_deep_to_check_is_refused() -> None:
    # jsonschema's look at the schema recursed past Python's limit: a RecursionError (a 500 over serve), not
    # a UserError its owner could read
    schema: dict[str, Any] = {"type": "string"}
    for _ in range(400):  # 16 KB of JSON: within what serve takes
        schema = {"type": "object", "properties": {"a": schema}}
    with pytest.raises(UserError, match="nests too deeply"):
        output_spec(JsonSchema(schema))
