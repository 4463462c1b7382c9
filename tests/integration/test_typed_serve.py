"""Typed answers over `shou serve`'s API: `options.output_schema` reaches the model on the wire, the run's JSON
carries `output`, a bad schema is a 400 and an answer that stays invalid ends the run `invalid_output`."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from ..fixtures.serving import Served, start_serve, stream_run
from .conftest import shou_env

SCHEMA = {"type": "array", "items": {"type": "string"}, "minItems": 2}


@pytest.fixture
def served() -> Iterator[list[Served]]:
    started: list[Served] = []
    yield started
    for s in started:
        s.stop()


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
