"""`shou trace` and `shou usage` on real runs: `shou run` as a subprocess against the scripted model over HTTP,
then the trace read back from the session log; a run killed mid-way is traced from what it logged."""

from __future__ import annotations

import json
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from .conftest import shou_env

PRICES = '[models."scripted-test"]\ninput_price = 2.0\noutput_price = 8.0\n'  # USD per million tokens
TASK = "What is 123 * 45?"


def calc(expression: str, prompt: int, completion: int) -> dict[str, Any]:
    return {"tool_calls": [{"name": "calculator", "arguments": {"expression": expression}}],
            "usage": {"prompt_tokens": prompt, "completion_tokens": completion}}


def priced(tmp_path: Path) -> None:
    config = tmp_path / "config"
    config.mkdir(exist_ok=True)
    (config / "shou.toml").write_text(PRICES)


def cost(prompt: int, completion: int) -> float:
    return (prompt * 2.0 + completion * 8.0) / 1e6


def test_trace_json_has_each_calls_full_request_tokens_and_cost(serve, shou, tmp_path: Path) -> None:
    priced(tmp_path)
    srv = serve([calc("123 * 45", 1000, 100),
                 {"text": "123 * 45 = 5535", "usage": {"prompt_tokens": 1200, "completion_tokens": 20}}])
    r = shou("run", TASK, server=srv)
    assert r.returncode == 0, r.stderr
    t = shou("trace", "--json")
    assert t.returncode == 0, t.stderr
    data = json.loads(t.stdout)
    [run] = data["runs"]
    assert (run["task"], run["status"], data["session"]) == (TASK, "completed", run["session"])
    first, second = run["model_calls"]
    assert (first["step"], second["step"]) == (1, 2) and first["id"] != second["id"]
    # the trace's requests are what the provider received, message for message
    assert first["request"]["messages"] == srv.requests[0]["messages"]
    assert second["request"]["messages"] == srv.requests[1]["messages"]
    assert {"role": "user", "content": TASK} in first["request"]["messages"]
    assert any(m["role"] == "tool" and m["content"] == "5535" for m in second["request"]["messages"])
    assert first["request"]["tools"] == srv.requests[0]["tools"]
    assert first["response"]["finish_reason"] == "tool_calls" and second["response"]["message"]["content"] == \
        "123 * 45 = 5535"
    assert (first["usage"]["input_tokens"], first["usage"]["output_tokens"]) == (1000, 100)
    assert (second["usage"]["input_tokens"], second["usage"]["output_tokens"]) == (1200, 20)
    assert first["usage"]["cost"] == pytest.approx(cost(1000, 100))
    assert second["usage"]["cost"] == pytest.approx(cost(1200, 20))
    assert first["latency"] > 0 and first["retries"] == 0 and first["cached"] is False
    assert run["usage"]["cost"] == pytest.approx(cost(2200, 120)) and run["usage"]["requests"] == 2
    [tool] = run["tool_calls"]
    assert (tool["name"], tool["content"], tool["is_error"], tool["step"]) == ("calculator", "5535", False, 1)

    by_run = json.loads(shou("trace", run["run_id"], "--json").stdout)
    assert by_run["runs"][0]["model_calls"][1]["request"]["messages"] == second["request"]["messages"]

    text = shou("trace")
    assert text.returncode == 0, text.stderr
    assert first["id"] in text.stdout and "→ calculator" in text.stdout and "completed · 2 steps" in text.stdout
    assert f"${cost(2200, 120):.4f}" in text.stdout

    shown = shou("trace", "show", first["id"])
    assert shown.returncode == 0, shown.stderr
    assert TASK in shown.stdout and "tools " in shown.stdout and "calculator" in shown.stdout
    one = json.loads(shou("trace", "show", second["id"], "--json").stdout)
    assert one["request"]["messages"] == srv.requests[1]["messages"]
    assert shou("trace", "show", "mc_nothing").returncode == 2

    usage = json.loads(shou("usage", "--json").stdout)
    total = usage["total"]
    assert (total["input_tokens"], total["output_tokens"], total["requests"]) == (2200, 120, 2)
    assert total["cost"] == pytest.approx(cost(2200, 120))
    [row] = usage["rows"]
    assert row["model"] == "scripted-test" and usage["by"] == ["day", "model"]
    table = shou("usage", "--by", "session")
    assert table.returncode == 0 and run["session"] in table.stdout and "total" in table.stdout


def _logged(db: Path, kind: str) -> int:
    if not db.exists():
        return 0
    conn = sqlite3.connect(db, timeout=5)
    try:
        return conn.execute("SELECT COUNT(*) FROM events WHERE type = ?", (kind,)).fetchone()[0]
    except sqlite3.OperationalError:  # the schema is being created
        return 0
    finally:
        conn.close()


def test_a_killed_run_is_traced_as_unfinished(serve, tmp_path: Path, workspace: Path) -> None:
    priced(tmp_path)
    srv = serve([calc("6 * 7", 300, 30), {"hang": True}, {"text": "after"}])
    env = shou_env(tmp_path, srv)
    proc = subprocess.Popen([sys.executable, "-m", "shou", "run", "6 * 7?", "-s", "killed"], cwd=workspace, env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    db = workspace / ".shou" / "shou.db"
    try:
        # the calculator's result is committed with the second request, which then hangs
        deadline = time.monotonic() + 30
        # the request is logged before it is sent: wait until the server has it, so that the hanging turn is
        # the killed process's and the next run gets the turn after it
        while len(srv.requests) < 2 and time.monotonic() < deadline and proc.poll() is None:
            time.sleep(0.05)
        assert _logged(db, "model_request") == 2
        assert _logged(db, "tool_call_finished") == 1, "the first tool call never finished"
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait(10)
    t = subprocess.run([sys.executable, "-m", "shou", "trace", "killed", "--json"], cwd=workspace, env=env,
                       capture_output=True, text=True, timeout=60)
    assert t.returncode == 0, t.stderr
    [run] = json.loads(t.stdout)["runs"]
    assert run["status"] == "unfinished" and run["wall_time"] is None
    first, second = run["model_calls"]
    assert (first["usage"]["input_tokens"], first["usage"]["output_tokens"]) == (300, 30)
    assert first["usage"]["cost"] == pytest.approx(cost(300, 30))
    assert {"role": "user", "content": "6 * 7?"} in first["request"]["messages"]
    assert second["response"] is None and second["usage"] is None  # asked, never answered
    assert any(m["role"] == "tool" and m["content"] == "42" for m in second["request"]["messages"])
    [tool] = run["tool_calls"]
    assert (tool["name"], tool["content"], tool["is_error"]) == ("calculator", "42", False)
    assert run["usage"]["cost"] == pytest.approx(cost(300, 30))
    text = subprocess.run([sys.executable, "-m", "shou", "trace", "killed"], cwd=workspace, env=env,
                          capture_output=True, text=True, timeout=60)
    assert "unfinished" in text.stdout and "its process stopped" in text.stdout, text.stdout + text.stderr
    # The second call was under way when the process died: the provider may have billed it. When the session
    # goes on, it counts at its worst case (prompt + reply limit, estimated), in the trace and in `shou usage`.
    again = subprocess.run([sys.executable, "-m", "shou", "run", "-s", "killed", "next"],
                           cwd=workspace, env=env, capture_output=True, text=True, timeout=60)
    assert again.returncode == 0 and "after" in again.stdout, again.stderr
    t = subprocess.run([sys.executable, "-m", "shou", "trace", "killed", "--json"], cwd=workspace, env=env,
                       capture_output=True, text=True, timeout=60)
    first_run = json.loads(t.stdout)["runs"][0]
    killed_call = first_run["model_calls"][1]
    void = killed_call["failed_attempts_usage"]
    assert first_run["status"] == "interrupted" and void is not None and void["estimated"]
    assert void["input_tokens"] == second["request"]["tokens_estimate"] > 0
    u = subprocess.run([sys.executable, "-m", "shou", "usage", "--json"], cwd=workspace, env=env,
                       capture_output=True, text=True, timeout=60)
    total = json.loads(u.stdout)["total"]
    assert total["input_tokens"] >= 300 + void["input_tokens"]
