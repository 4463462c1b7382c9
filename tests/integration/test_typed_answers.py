"""Typed answers (agent/output.py) through the real HTTP client against the scripted server: the mechanism each
provider gets, seen on the wire; an invalid answer retried with its errors; `invalid_output`; the typed value."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pydantic import BaseModel
from typing_extensions import TypedDict  # pydantic takes typing's only from Python 3.12

from shou import Agent, Session, SQLiteStore, tool
from shou.agent.output import JsonSchema
from shou.events import Feedback, RunFinished, ToolCallFinished
from shou.models.openai_compat import OpenAICompatible
from shou.models.runtime import RetryPolicy

from .test_agent import assert_valid_conversation


class City(BaseModel):
    name: str
    population: int


@dataclass
class Point:
    x: int
    y: int


class Pet(TypedDict):
    name: str
    legs: int


@tool
def lookup(city: str) -> str:
    """Look up a city's population."""
    return f"{city}: 2100000"


def model_for(srv: Any, **kw: Any) -> OpenAICompatible:
    return OpenAICompatible("scripted-test", base_url=srv.base_url, retry=RetryPolicy(max_retries=0), **kw)


def text(value: Any) -> dict[str, Any]:
    return {"text": json.dumps(value)}


def answer_call(value: Any) -> dict[str, Any]:
    return {"tool_calls": [{"name": "final_answer", "arguments": value}]}


def wire_text(request: dict[str, Any]) -> str:
    return json.dumps(request["messages"])


async def test_a_provider_with_structured_output_gets_response_format_and_an_invalid_answer_is_retried(
        serve, workspace: Path) -> None:
    srv = serve([text({"name": "Paris", "population": "lots"}), text({"name": "Paris", "population": 2100000})])
    agent = Agent(model_for(srv, response_format=True), [lookup], workspace=workspace, output_type=City)
    result = await agent.arun("What is the population of Paris?")
    assert result.status == "completed", result.error
    assert isinstance(result.output, City) and result.output == City(name="Paris", population=2100000)
    assert json.loads(result.answer) == {"name": "Paris", "population": 2100000}
    first, second = srv.requests
    for request in (first, second):  # every step asks for the schema; no answer tool, no forced call
        fmt = request["response_format"]
        assert fmt["type"] == "json_schema" and fmt["json_schema"]["name"] == "City"
        assert fmt["json_schema"]["schema"] == City.model_json_schema()
        assert [t["function"]["name"] for t in request["tools"]] == ["lookup"] and "tool_choice" not in request
    # the second request carries the validation error of the first answer, naming the field
    assert "population" not in wire_text(first).split("What is the population")[1]
    assert "does not match the required JSON schema" in wire_text(second) and "valid integer" in wire_text(second)


async def test_a_provider_without_it_gets_a_final_answer_tool_it_must_call(serve, workspace: Path) -> None:
    srv = serve([{"tool_calls": [{"name": "lookup", "arguments": {"city": "Paris"}}]},
                 answer_call({"name": "Paris"}),  # population missing
                 answer_call({"name": "Paris", "population": 2100000})],
                response_format=False)  # a request with a response_format would be answered 400
    store = SQLiteStore(workspace / "s.db")
    agent = Agent(model_for(srv), [lookup], workspace=workspace, output_type=City, store=store)
    events = [e async for e in agent.stream("What is the population of Paris?", "typed")]
    done = events[-1]
    assert isinstance(done, RunFinished) and done.status == "completed", done.error
    assert json.loads(done.answer) == {"name": "Paris", "population": 2100000}
    assert len(srv.requests) == 3
    for request in srv.requests:
        assert "response_format" not in request and request["tool_choice"] == "required"
        final = [t["function"] for t in request["tools"] if t["function"]["name"] == "final_answer"]
        assert len(final) == 1 and final[0]["parameters"] == City.model_json_schema()
    # the invalid call's result carries the errors, and the model saw it on the wire
    results = [e for e in events if isinstance(e, ToolCallFinished) and e.name == "final_answer"]
    assert [r.is_error for r in results] == [True, False]
    assert "population" in results[0].content and "Field required" in results[0].content
    assert "Field required" in wire_text(srv.requests[2])
    assert_valid_conversation(srv.requests[2]["messages"])
    # the typed value comes back from the log too: RunResult is made from the RunFinished event
    again = Agent(model_for(srv), [lookup], workspace=workspace, output_type=City, store=store)
    assert again.config.output is not None and again.config.output.value(done.answer) == City(name="Paris",
                                                                                              population=2100000)
    assert Session("typed", store).messages[-1].role == "tool"  # the conversation is valid for a next run


async def test_an_answer_that_stays_invalid_ends_invalid_output_with_the_last_attempt(serve, workspace: Path) -> None:
    srv = serve([text({"name": "A"}), text({"name": "B"}), text({"name": "C"})])
    agent = Agent(model_for(srv, response_format=True), [], workspace=workspace, output_type=City, output_retries=2)
    events = [e async for e in agent.stream("a city")]
    result = await Agent(model_for(serve([text({"oops": 1})], response_format=True)), [], workspace=workspace,
                         output_type=City, output_retries=0).arun("a city")
    done = events[-1]
    assert isinstance(done, RunFinished) and done.status == "invalid_output"
    assert json.loads(done.answer) == {"name": "C"}  # the last attempt is kept
    assert "after 2 retries" in (done.error or "") and "population" in (done.error or "")
    assert len(srv.requests) == 3 and sum(isinstance(e, Feedback) for e in events) == 2
    assert result.status == "invalid_output" and result.output is None and not result.ok


async def test_a_model_said_to_take_response_format_where_the_provider_does_not_ends_with_a_clear_error(
        serve, workspace: Path) -> None:
    srv = serve([text({"name": "Paris", "population": 1})], response_format=False)
    result = await Agent(model_for(srv, response_format=True), [], workspace=workspace, output_type=City).arun("x")
    assert result.status == "error" and "response_format" in (result.error or "")


async def test_lists_unions_dataclasses_typeddicts_and_raw_schemas(serve, workspace: Path) -> None:
    cities = [{"name": "A", "population": 1}, {"name": "B", "population": 2}]
    srv = serve([text({"answer": cities}), answer_call({"answer": cities})])
    ok = await Agent(model_for(srv, response_format=True), [], workspace=workspace,
                     output_type=list[City]).arun("cities")
    assert ok.status == "completed" and ok.output == [City(**c) for c in cities]  # type: ignore[arg-type]
    wrapped = srv.requests[0]["response_format"]["json_schema"]["schema"]
    assert wrapped["required"] == ["answer"] and "City" in wrapped["$defs"]  # a non-object root, wrapped
    as_tool = await Agent(model_for(srv), [], workspace=workspace, output_type=list[City]).arun("cities")
    assert as_tool.output == ok.output and json.loads(as_tool.answer) == cities

    srv = serve([text({"answer": {"x": 1, "y": 2}}), text({"name": "Rex", "legs": 4}), text({"n": 3})])
    union = await Agent(model_for(srv, response_format=True), [], workspace=workspace,
                        output_type=Point | City).arun("p")
    assert union.output == Point(1, 2)
    pet = await Agent(model_for(srv, response_format=True), [], workspace=workspace, output_type=Pet).arun("p")
    assert pet.output == {"name": "Rex", "legs": 4}
    schema = {"type": "object", "properties": {"n": {"type": "integer", "minimum": 1}}, "required": ["n"]}
    raw = await Agent(model_for(srv, response_format=True), [], workspace=workspace,
                      output_type=JsonSchema(schema)).arun("n")
    assert raw.output == {"n": 3} and srv.requests[-1]["response_format"]["json_schema"]["schema"] == schema


async def test_a_reviewer_sees_only_a_valid_answer(serve, workspace: Path) -> None:
    review = {"tool_calls": [{"name": "review", "arguments": {"approved": True, "feedback": ""}}]}
    srv = serve([text({"name": "P"}), text({"name": "P", "population": 3}), review])
    result = await Agent(model_for(srv, response_format=True), [], workspace=workspace, output_type=City,
                         reflect=True).arun("x")
    assert result.status == "completed" and result.output == City(name="P", population=3)
    assert len(srv.requests) == 3 and srv.requests[2]["tools"][0]["function"]["name"] == "review"
    assert "response_format" not in srv.requests[2]  # the review call is the reviewer's own, not held to the type
    # the final-tool way: a valid call is reviewed too, and a rejection's feedback sends the model on
    reject = {"tool_calls": [{"name": "review", "arguments": {"approved": False, "feedback": "Check the count."}}]}
    srv = serve([answer_call({"name": "P", "population": 3}), reject, answer_call({"name": "P", "population": 4}),
                 review])
    result = await Agent(model_for(srv), [], workspace=workspace, output_type=City, reflect=True,
                         max_reviews=2).arun("x")
    assert result.status == "completed" and result.output == City(name="P", population=4)
    prompt = srv.requests[1]["messages"][-1]["content"]
    assert '# Proposed final answer\n{"name": "P", "population": 3}' in prompt
    assert "Check the count." in wire_text(srv.requests[2])
    assert_valid_conversation(srv.requests[2]["messages"])


async def test_an_output_guardrail_checks_the_typed_answer(serve, workspace: Path) -> None:
    """Guardrails and typed answers compose: the guardrail sees the validated JSON, and may still block it."""
    from shou import output_guardrail

    seen: list[str] = []

    @output_guardrail
    def no_big_cities(answer: str) -> str | None:
        seen.append(answer)
        return "too big" if json.loads(answer)["population"] > 1_000_000 else None

    srv = serve([text({"name": "Paris"}), text({"name": "Paris", "population": 2100000}),
                 answer_call({"name": "Lyon", "population": 500000})])
    blocked = await Agent(model_for(srv, response_format=True), [], workspace=workspace, output_type=City,
                          guardrails=[no_big_cities]).arun("a city")
    assert blocked.status == "blocked" and blocked.output is None
    assert seen == ['{"name": "Paris", "population": 2100000}']  # only the valid answer reached the guardrail
    passed = await Agent(model_for(srv), [], workspace=workspace, output_type=City,
                         guardrails=[no_big_cities]).arun("a city")
    assert passed.status == "completed" and passed.output == City(name="Lyon", population=500000)
