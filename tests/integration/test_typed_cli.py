"""`shou run --output-schema FILE.json` as a subprocess against the scripted server: stdout gets the validated
JSON alone, the mechanism follows what the provider takes, and a bad schema file is a clear error."""

from __future__ import annotations

import json
import time
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
                          (json.dumps({"type": "nonsense"}), "not a valid JSON schema"),
                          ("[" * 100_000, "nests deeper"),  # was a RecursionError traceback from json.loads
                          ('{"items": ' * 500 + "{}" + "}" * 500, "nests deeper")):
        (workspace / "s.json").write_text(content)
        r = shou("run", "--output-schema", str(workspace / "s.json"), "x", server=srv)
        assert r.returncode == 2 and says in r.stderr and "Traceback" not in r.stderr, r.stderr
    r = shou("run", "--output-schema", str(workspace / "missing.json"), "x", server=srv)
    assert r.returncode == 2 and "cannot read" in r.stderr
    assert srv.requests == []


def test_a_killed_typed_run_resumes_typed(serve, tmp_path: Path, workspace: Path) -> None:
    """`kill -9` while the model is asked again after an invalid answer; `shou resume --output-schema` goes on
    from the log: the errors already sent stay sent, and the answer it ends with is checked."""
    import os
    import signal
    import subprocess
    import sys

    from .conftest import shou_env

    srv = serve([{"tool_calls": [{"name": "final_answer", "arguments": {"city": "Paris"}}]}, {"hang": True},
                 {"tool_calls": [{"name": "final_answer", "arguments": {"city": "Paris", "population": "x"}}]},
                 {"tool_calls": [{"name": "final_answer", "arguments": GOOD}]}])
    env = shou_env(tmp_path, srv)
    schema = schema_file(workspace)
    proc = subprocess.Popen([sys.executable, "-m", "shou", "run", "--json", "--output-schema", schema, "Paris?"],
                            cwd=workspace, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    assert proc.stdout is not None
    for line in proc.stdout:  # killed as it waits for its second model turn, which never comes
        event = json.loads(line)
        if event["type"] == "model_request" and event["step"] == 2:
            break
    # the request is logged before it is sent: killed once the server has it (the clock only bounds a hang)
    deadline = time.monotonic() + 30
    while len(srv.requests) < 2 and time.monotonic() < deadline:
        time.sleep(0.01)
    assert len(srv.requests) == 2
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    r = subprocess.run([sys.executable, "-m", "shou", "resume", "--output-schema", schema], cwd=workspace, env=env,
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout) == GOOD
    assert "resuming session" in r.stderr and "completed" in r.stderr
    last = json.dumps(srv.requests[-1]["messages"])
    assert "'population' is a required property" in last and "'x' is not of type 'integer'" in last
