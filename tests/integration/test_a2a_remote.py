"""Remote A2A agents as shou tools (`[a2a_agents.NAME]`), over real HTTP on loopback: another `shou serve`, a
third-party agent built with the SDK's server classes, and agents that misbehave."""

from __future__ import annotations

import json
import sqlite3
import subprocess
from pathlib import Path
from typing import Any

from ..fixtures.a2a_agents import WEATHER_CONTEXT, WEATHER_TASK, hostile_app, serving, weather_app
from ..fixtures.serving import start_serve
from .conftest import shou_env, tool_messages

TOKEN = "alice-token-0123456789"


def call(name: str, **arguments: object) -> dict:
    return {"tool_calls": [{"name": name, "arguments": arguments}]}


def configure(tmp_path: Path, agents: dict[str, dict[str, Any]]) -> None:
    """The person's own shou.toml (trusted) naming `agents`."""
    cfg = tmp_path / "config"
    cfg.mkdir(exist_ok=True)
    lines = []
    for name, table in agents.items():
        lines.append(f"[a2a_agents.{name}]")
        lines += [f"{key} = {json.dumps(value) if not isinstance(value, dict) else _inline(value)}"
                  for key, value in table.items()]
    (cfg / "shou.toml").write_text("\n".join(lines) + "\n")


def _inline(table: dict[str, str]) -> str:
    return "{ " + ", ".join(f"{json.dumps(k)} = {json.dumps(v)}" for k, v in table.items()) + " }"


def events_of(result: subprocess.CompletedProcess[str]) -> list[dict[str, Any]]:
    return [json.loads(line) for line in result.stdout.splitlines() if line.startswith("{")]


def test_one_shou_delegates_to_another_over_a2a_and_gets_its_answer_marked_untrusted(
        serve, shou, tmp_path: Path, workspace: Path) -> None:
    remote_ws = tmp_path / "remote"
    remote_ws.mkdir()
    (tmp_path / "remote-tokens").write_text(f"{TOKEN} alice\n")
    (tmp_path / "remote-tokens").chmod(0o600)
    remote_model = serve([{"tool_calls": [{"name": "calculator", "arguments": {"expression": "6*7"}}]},
                          {"text": "It is 42."}])
    remote = start_serve(remote_ws, shou_env(tmp_path / "remote", remote_model), "--tokens",
                         str(tmp_path / "remote-tokens"))
    try:
        configure(tmp_path, {"helper": {"url": remote.url, "headers": {"Authorization": f"Bearer {TOKEN}"},
                                        "timeout": 60}})
        model = serve([call("helper", message="What is 6*7? Use your calculator."), {"text": "The helper says 42."}])
        r = shou("run", "Ask the helper what 6*7 is", server=model, timeout=120)
    finally:
        remote.stop()
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == "The helper says 42."
    # The first run's model got the second's answer, inside the untrusted-content delimiters.
    [result] = tool_messages(model.requests[1])
    content = result["content"]
    assert content.startswith('<untrusted-content source="helper" id="') and "It is 42." in content
    assert content.rstrip().endswith("</untrusted-content id=\"" + content.split('id="', 1)[1].split('"', 1)[0]
                                     + '">')
    offered = next(t for t in model.requests[0]["tools"] if t["function"]["name"] == "helper")
    assert offered["function"]["description"].startswith("[A2A agent helper at http://127.0.0.1:")
    # The second shou really worked: its model was asked, its calculator ran.
    assert len(remote_model.requests) == 2 and "What is 6*7?" in json.dumps(remote_model.requests[0])
    # The remote task shows as a sub-run in `shou run`'s output, with its progress.
    assert "↳" in r.stderr and "calculator" in r.stderr and "completed" in r.stderr
    # The token of the configured header is a secret: in no event of the log.
    log = sqlite3.connect(workspace / ".shou" / "shou.db").execute("SELECT group_concat(data, '') FROM events")
    assert TOKEN not in log.fetchone()[0]


def test_a_third_party_sdk_agent_is_a_tool_whose_status_streams_into_shou_run(
        serve, shou, tmp_path: Path) -> None:
    app = weather_app()
    with serving(app) as url:
        app.state.base["url"] = url
        configure(tmp_path, {"weather": {"url": url, "timeout": 30}})
        model = serve([call("weather", message="What is the weather like?"),
                       call("weather", message="Paris", task_id=WEATHER_TASK, context_id=WEATHER_CONTEXT),
                       {"text": "Sunny in Paris."}])
        r = shou("run", "How is the weather?", server=model, timeout=120)
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == "Sunny in Paris."
    # Its progress reached shou run's output as it came: each status of the remote task, under its sub-run.
    for said in ("step 1: reading the question", "step 2: looking up", "input-required: Which city do you mean?",
                 "step 3: forecast for Paris", "completed: Here is the forecast."):
        assert said in r.stderr, r.stderr
    assert r.stderr.index("step 1") < r.stderr.index("step 2") < r.stderr.index("Which city")
    # Its question came back to the model as the result (to answer with the task's ids), then the answer.
    [asked] = tool_messages(model.requests[1])
    assert "Which city do you mean?" in asked["content"] and f"task_id: {WEATHER_TASK}" in asked["content"]
    answered = tool_messages(model.requests[2])[-1]["content"]
    assert answered.startswith("<untrusted-content") and "Weather in Paris: sunny, 21 C." in answered


def test_the_remote_calls_events_nest_under_the_run_like_a_sub_agents(serve, shou, tmp_path: Path) -> None:
    app = weather_app()
    with serving(app) as url:
        app.state.base["url"] = url
        configure(tmp_path, {"weather": {"url": url, "timeout": 30}})
        model = serve([call("weather", message="What is the weather like?"), {"text": "It asks which city."}])
        r = shou("run", "How is the weather?", "--json", server=model, timeout=120)
    assert r.returncode == 0, r.stderr
    events = events_of(r)
    run_id = events[0]["run_id"]
    sub = [e for e in events if e.get("parent") == run_id]
    assert sub[0]["type"] == "run_started" and sub[0]["model"] == "a2a:weather" and sub[0]["run_id"] == f"{run_id}.1"
    assert {e["type"] for e in sub} == {"run_started", "notice", "run_finished"}
    assert all(e["kind"] == "a2a" for e in sub if e["type"] == "notice")
    finished = next(e for e in events if e["type"] == "tool_call_finished")
    assert finished["details"]["run_id"] == f"{run_id}.1" and finished["details"]["state"] == "input-required"


def test_misbehaving_agents_end_each_call_with_a_clear_error_within_its_timeout(serve, shou, tmp_path: Path) -> None:
    app = hostile_app()
    names = ("big", "endless", "working", "badjson", "elsewhere")
    with serving(app) as url:
        configure(tmp_path, {name: {"url": f"{url}/{name}", "timeout": 3} for name in names})
        model = serve([*(call(name, message="hello") for name in names), {"text": "They all failed."}])
        r = shou("run", "Talk to each agent", "--json", server=model, timeout=120)
    assert r.returncode == 0, r.stderr
    assert "Traceback" not in r.stderr
    results = {e["name"]: e for e in events_of(r) if e["type"] == "tool_call_finished"}
    assert set(results) == set(names)
    expected = {"big": "larger than 1,048,576 bytes", "endless": "did not finish within its timeout of 3 s",
                "working": "did not finish within its timeout of 3 s", "badjson": "Invalid JSON",
                "elsewhere": "names endpoints elsewhere (http://evil.example/rpc)"}
    for name, said in expected.items():
        assert results[name]["is_error"], results[name]
        assert said in results[name]["content"], results[name]["content"]
        # within its timeout (3 s), and the brief cancel that follows a timeout
        assert results[name]["latency"] < 3 + 3 + 1, (name, results[name]["latency"])
    assert events_of(r)[-1]["answer"] == "They all failed."


def test_shou_a2a_card_prints_a_card_and_what_shou_would_use_of_it(shou, tmp_path: Path) -> None:
    app = weather_app()
    with serving(app) as url, serving(hostile_app()) as hostile:
        app.state.base["url"] = url
        configure(tmp_path, {"weather": {"url": url}})
        r = shou("a2a", "card", url)
        named = shou("a2a", "card", "weather", "--json")
        elsewhere = shou("a2a", "card", f"{hostile}/elsewhere")
        big = shou("a2a", "card", f"{hostile}/big")
        listed = shou("a2a", "list", "--json")
    assert r.returncode == 0, r.stderr
    assert "Weather" in r.stdout and "forecast" in r.stdout and f"JSONRPC {url}/rpc used" in r.stdout
    shown = json.loads(named.stdout)
    assert shown["card"]["name"] == "Weather" and shown["endpoints"] == [f"{url}/rpc"] and shown["problem"] is None
    assert elsewhere.returncode == 1 and "http://evil.example/rpc not used" in elsewhere.stdout
    assert "names endpoints elsewhere" in elsewhere.stderr
    assert big.returncode != 0 and "larger than 1,048,576 bytes" in big.stderr and "Traceback" not in big.stderr
    assert json.loads(listed.stdout) == [{"name": "weather", "where": url, "ok": True, "error": None,
                                          "skills": ["forecast"]}]
