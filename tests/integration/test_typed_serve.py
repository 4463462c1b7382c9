"""Typed answers over `shou serve`'s API: `options.output_schema` reaches the model on the wire, the run's JSON
carries `output`, a bad schema is a 400 and an answer that stays invalid ends the run `invalid_output`."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from ..fixtures.serving import start_serve, stream_run
from .conftest import shou_env

SCHEMA = {"type": "array", "items": {"type": "string"}, "minItems": 2}


def test_output_schema_in_a_run_request(serve, served, tmp_path: Path, workspace: Path) -> None:
    srv = serve([{"tool_calls": [{"name": "final_answer", "arguments": {"answer": ["red"]}}]},
                 {"tool_calls": [{"name": "final_answer", "arguments": {"answer": ["red", "green"]}}]},
                 {"text": "no JSON here"}, {"text": "still none"}, {"text": "nor here"}],
                response_format=False)
    s = start_serve(workspace, shou_env(tmp_path, srv))
    served.append(s)
    with s.client() as c:
        bad = c.post("/v1/runs", json={"task": "x", "options": {"output_schema": {"type": "nonsense"}}})
        assert bad.status_code == 400 and "not a valid JSON schema" in bad.text
        r = c.post("/v1/runs", json={"task": "Two colours?", "options": {"output_schema": SCHEMA}})
        assert r.status_code == 202, r.text
        run_id = r.json()["run_id"]
        events = stream_run(c, run_id)
        assert events[-1]["event"] == "run_finished"
        run = c.get(f"/v1/runs/{run_id}").json()
        assert run["status"] == "completed" and run["output"] == ["red", "green"]
        assert json.loads(run["answer"]) == ["red", "green"]
        # on the wire: the schema (wrapped: its root is no object) as the final_answer tool's parameters
        for request in srv.requests[:2]:
            [final] = [t["function"] for t in request["tools"] if t["function"]["name"] == "final_answer"]
            assert final["parameters"]["properties"]["answer"] == SCHEMA and request["tool_choice"] == "required"
        assert "is too short" in json.dumps(srv.requests[1]["messages"])

        plain = c.post("/v1/runs", json={"task": "Hi", "options": {"output_schema": SCHEMA}}).json()["run_id"]
        stream_run(c, plain)
        ended = c.get(f"/v1/runs/{plain}").json()
        assert ended["status"] == "invalid_output" and ended["output"] is None
        assert ended["answer"] == "nor here" and "final_answer" in (ended["error"] or "")
        untyped = c.get("/v1/runs").json()["runs"]
        assert all("output" in r for r in untyped)


def test_an_openai_client_asks_shou_for_structured_output(serve, served, tmp_path: Path, workspace: Path) -> None:
    """The official client's `parse()` sends a `response_format`; shou's agent answers it as a typed answer, here
    by the provider's structured output, and only the valid answer reaches the client (streamed or not)."""
    import openai
    from pydantic import BaseModel

    class Colours(BaseModel):
        colours: list[str]

    good, bad = {"text": json.dumps({"colours": ["red", "green"]})}, {"text": json.dumps({"colors": "red"})}
    srv = serve([bad, good, bad, good])
    s = start_serve(workspace, shou_env(tmp_path, srv, SHOU_RESPONSE_FORMAT="true"))
    served.append(s)
    client = openai.OpenAI(base_url=s.url + "/v1", api_key=s.token, max_retries=0)
    parsed = client.chat.completions.parse(model="shou", messages=[{"role": "user", "content": "Two colours?"}],
                                           response_format=Colours)
    assert parsed.choices[0].message.parsed == Colours(colours=["red", "green"])
    upstream = srv.requests[0]["response_format"]["json_schema"]["schema"]
    assert upstream["required"] == ["colours"]  # the client's schema reached the model provider
    assert "colours: Field required" not in json.dumps(srv.requests[0]) and \
        "(root): 'colours' is a required property" in json.dumps(srv.requests[1]["messages"])
    stream = client.chat.completions.create(model="shou", stream=True, messages=[{"role": "user", "content": "Again"}],
                                            response_format={"type": "json_schema", "json_schema": {
                                                "name": "c", "schema": Colours.model_json_schema()}})
    text = "".join(choice.delta.content or "" for chunk in stream for choice in chunk.choices)
    assert json.loads(text) == {"colours": ["red", "green"]}  # the turned-down attempt was never streamed
    with pytest.raises(openai.BadRequestError, match="response_format"):
        client.chat.completions.create(model="shou", messages=[{"role": "user", "content": "x"}],
                                       response_format={"type": "json_schema"})  # type: ignore[typeddict-item]


@pytest.mark.timeout(60)  # the old server ran Python's `re` on the answer: it never answered, now a timeout
def test_an_output_schema_s_pattern_cannot_freeze_the_server(serve, served, tmp_path: Path, workspace: Path) -> None:
    # `^(a+)+$` against the model's answer froze the event loop (8.8 s at 28 characters, doubling with each):
    # patterns are searched in linear time, and one that cannot be is refused with the schema
    evil = "a" * 5000 + "!"
    srv = serve([{"tool_calls": [{"name": "final_answer", "arguments": {"answer": evil}}]}] * 3,
                response_format=False)
    s = start_serve(workspace, shou_env(tmp_path, srv))
    served.append(s)
    with s.client() as c:
        r = c.post("/v1/runs", json={"task": "x", "options": {"output_schema": {"type": "string",
                                                                                "pattern": "^(a+)+$"}}})
        assert r.status_code == 202, r.text
        stream_run(c, r.json()["run_id"])
        run = c.get(f"/v1/runs/{r.json()['run_id']}").json()
        assert run["status"] == "invalid_output" and run["answer"] == json.dumps({"answer": evil})
        assert "does not match" in json.dumps(srv.requests[1]["messages"])
        lookaround = {"type": "string", "pattern": "^(?!a)"}
        bad = c.post("/v1/runs", json={"task": "x", "options": {"output_schema": lookaround}})
        assert bad.status_code == 400 and "cannot be checked in linear time" in bad.json()["error"]["message"]
        bad = c.post("/v1/chat/completions", json={"messages": [{"role": "user", "content": "x"}],
                                                   "response_format": {"type": "json_schema", "json_schema": {
                                                       "name": "a", "schema": lookaround}}})
        assert bad.status_code == 400 and "cannot be checked in linear time" in bad.text


def test_a_response_format_of_the_wrong_shape_is_a_400(serve, served, tmp_path: Path, workspace: Path) -> None:
    # `json_schema: "x"` was looked into as a dict: AttributeError, a 500
    srv = serve([{"text": "unused"}])
    s = start_serve(workspace, shou_env(tmp_path, srv))
    served.append(s)
    with s.client() as c:
        for json_schema in ("x", ["a"], 3, True, None, {"name": "a", "schema": "x"},
                            {"name": "a", "schema": [{"type": "string"}]}, {"name": "a"}):
            r = c.post("/v1/chat/completions", json={"messages": [{"role": "user", "content": "x"}],
                                                     "response_format": {"type": "json_schema",
                                                                         "json_schema": json_schema}})
            assert r.status_code == 400, (json_schema, r.text)
            assert "response_format.json_schema" in r.json()["error"]["message"]
    assert srv.requests == []


def test_an_output_schema_that_only_refers_to_itself_is_a_400(serve, served, tmp_path: Path,
                                                             workspace: Path) -> None:
    # it was a 202, then each answer "nests too deeply": the run spent 3 model calls on a schema nothing matches
    srv = serve([{"text": "unused"}])
    s = start_serve(workspace, shou_env(tmp_path, srv))
    served.append(s)
    loop = {"$ref": "#/definitions/a", "definitions": {"a": {"$ref": "#/definitions/a"}}}
    with s.client() as c:
        r = c.post("/v1/runs", json={"task": "x", "options": {"output_schema": loop}})
        assert r.status_code == 400 and "refers to itself" in r.json()["error"]["message"]
        r = c.post("/v1/chat/completions", json={"messages": [{"role": "user", "content": "x"}], "response_format": {
            "type": "json_schema", "json_schema": {"name": "a", "schema": loop}}})
        assert r.status_code == 400 and "refers to itself" in r.json()["error"]["message"]
    assert srv.requests == []


def test_an_output_schema_nested_too_deep_to_check_is_a_400(serve, served, tmp_path: Path, workspace: Path) -> None:
    # 95 levels pass the body's JSON parser, and jsonschema's look at the schema then passed Python's
    # recursion limit: a 500
    srv = serve([{"text": "unused"}])
    s = start_serve(workspace, shou_env(tmp_path, srv))
    served.append(s)
    schema: dict = {"type": "string"}
    for _ in range(95):
        schema = {"type": "object", "properties": {"a": schema}}
    with s.client() as c:
        r = c.post("/v1/runs", json={"task": "x", "options": {"output_schema": schema}})
        assert r.status_code == 400 and "nests too deeply" in r.json()["error"]["message"], r.text
    assert srv.requests == []
