"""`shou run --output-schema FILE.json` as a subprocess against the scripted server: stdout gets the validated
JSON alone, the mechanism follows what the provider takes, and a bad schema file is a clear error."""

from __future__ import annotations

import json
from pathlib import Path

SCHEMA = {"type": "object", "properties": {"city": {"type": "string"}, "population": {"type": "integer"}},
          "required": ["city", "population"]}
GOOD = {"city": "Paris", "population": 2100000}


def schema_file(workspace: Path, schema: object = SCHEMA) -> str:
    path = workspace / "city.json"
    path.write_text(json.dumps(schema))
    return str(path)


def test_a_final_tool_call_where_the_provider_has_no_structured_output(serve, shou, workspace: Path) -> None:
    srv = serve([{"tool_calls": [{"name": "final_answer", "arguments": {"city": "Paris", "population": "many"}}]},
                 {"tool_calls": [{"name": "final_answer", "arguments": GOOD}]}], response_format=False)
    r = shou("run", "--output-schema", schema_file(workspace), "Population of Paris?", server=srv)
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout) == GOOD and r.stdout.count("\n") == 1  # the JSON alone on stdout
    assert "completed" in r.stderr and "'many' is not of type 'integer'" in r.stderr  # the retry, shown
    for request in srv.requests:
        assert "response_format" not in request and request["tool_choice"] == "required"
        [final] = [t["function"] for t in request["tools"] if t["function"]["name"] == "final_answer"]
        assert final["parameters"] == SCHEMA


def test_response_format_where_the_provider_takes_it_and_invalid_output(serve, shou, workspace: Path) -> None:
    srv = serve([{"text": json.dumps(GOOD)}])
    r = shou("run", "--output-schema", schema_file(workspace), "Population of Paris?", server=srv,
             SHOU_RESPONSE_FORMAT="true")
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout) == GOOD
    [request] = srv.requests
    assert request["response_format"]["json_schema"] == {"name": "city", "schema": SCHEMA, "strict": False}
    assert all(t["function"]["name"] != "final_answer" for t in request["tools"])

    bad = serve([{"text": '{"city": "Paris"}'}] * 2)
    r = shou("run", "--output-schema", schema_file(workspace), "-o", "output_retries", "1", "Paris?", server=bad,
             SHOU_RESPONSE_FORMAT="true")
    assert r.returncode == 1 and r.stdout == ""
    assert "invalid_output" in r.stderr and "'population' is a required property" in r.stderr


def test_a_bad_schema_file_is_a_clear_error(serve, shou, workspace: Path) -> None:
    srv = serve([])
    for content, says in (("{not json", "is not JSON"), (json.dumps([1]), "holds no JSON schema"),
                          (json.dumps({"type": "nonsense"}), "not a valid JSON schema")):
        (workspace / "s.json").write_text(content)
        r = shou("run", "--output-schema", str(workspace / "s.json"), "x", server=srv)
        assert r.returncode == 2 and says in r.stderr and "Traceback" not in r.stderr, r.stderr
    r = shou("run", "--output-schema", str(workspace / "missing.json"), "x", server=srv)
    assert r.returncode == 2 and "cannot read" in r.stderr
    assert srv.requests == []
