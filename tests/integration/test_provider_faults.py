"""`shou run` against a scripted provider that misbehaves: cut and broken streams, resets, stalls, chunks that
are not JSON, 200s that are not replies, tool calls with missing or repeated ids, and 30% of requests failing at
random."""

from __future__ import annotations

import json
import subprocess
import sys
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from pathlib import Path
from typing import Any

import httpx

from shou.models.scripted import FaultPlan, ScriptedServer

from .conftest import shou_env, tool_messages

MODEL = "scripted-test"  # what shou_env configures
RETRIED = ("429", "500", "503", "reset", "cut", "stall", "garbage")  # the fault kinds a retry gets past
ADDLOG_TOOL = '''
from shou import ToolContext, tool


@tool
def addlog(ctx: ToolContext, a: int, b: int) -> str:
    """Adds two numbers and appends the sum to adds.log (a side effect to count).

    Args:
        a: the first number
        b: the second number
    """
    with (ctx.workspace / "adds.log").open("a") as f:
        f.write(f"{a}+{b}={a + b}\\n")
    return str(a + b)
'''


def addlog(a: int, b: int, **kw: Any) -> dict[str, Any]:
    return {"tool_calls": [{"name": "addlog", "arguments": {"a": a, "b": b}}], **kw}


def offset_after(turn: dict[str, Any], needle: bytes) -> int:
    """The byte offset just past the event of `turn`'s SSE stream that contains `needle`."""
    body = {"model": MODEL, "messages": [], "stream": True, "stream_options": {"include_usage": True}}
    with ScriptedServer([turn]) as srv, httpx.Client(timeout=10) as http:
        raw = http.post(f"{srv.base_url}/chat/completions", json=body).content
    return raw.index(b"\n\n", raw.index(needle)) + 2


def events_of(stdout: str) -> list[dict[str, Any]]:
    return [json.loads(line) for line in stdout.splitlines() if line.startswith("{")]


def adds(workspace: Path) -> list[str]:
    log = workspace / "adds.log"
    return log.read_text().splitlines() if log.exists() else []


def run_addlog(shou, srv: ScriptedServer, tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    functions = tmp_path / "addlog_tool.py"
    functions.write_text(ADDLOG_TOOL)
    return shou("run", "add the numbers", "--functions", str(functions), "--json", *args, server=srv)


def test_a_cut_tool_call_never_runs_and_the_retry_runs_the_whole_one(serve, shou, tmp_path, workspace) -> None:
    cut = offset_after(addlog(12, 345), b'\\"b\\": 3"')  # the stream ends just after `{"a": 12, "b": 3`
    srv = serve([addlog(12, 345, cut_after=cut), addlog(12, 345), {"text": "12 + 345 = 357"}])
    r = run_addlog(shou, srv, tmp_path)
    assert r.returncode == 0, r.stderr
    assert adds(workspace) == ["12+345=357"]  # never addlog(12, 3)
    finished = events_of(r.stdout)[-1]
    assert finished["type"] == "run_finished" and finished["status"] == "completed"
    assert finished["answer"] == "12 + 345 = 357"
    assert len(srv.requests) == 3
    assert "cut off" in r.stdout + r.stderr  # the retry notice says why


def test_a_connection_reset_mid_call_is_retried(serve, shou, tmp_path, workspace) -> None:
    cut = offset_after(addlog(12, 345), b'\\"b\\": 3"')
    srv = serve([addlog(12, 345, reset_after=cut), addlog(12, 345), {"text": "357"}])
    r = run_addlog(shou, srv, tmp_path)
    assert r.returncode == 0, r.stderr
    assert adds(workspace) == ["12+345=357"]
    assert "cannot reach" not in r.stdout + r.stderr


def test_an_html_page_with_status_200_fails_the_run_and_says_what_came(serve, shou) -> None:
    page = "<!DOCTYPE html><html><head><title>Captive portal</title></head><body>Log in first</body></html>"
    srv = serve([{"raw_body": page, "content_type": "text/html; charset=utf-8"}])
    r = shou("run", "hello", server=srv)
    assert r.returncode == 1
    assert "text/html" in r.stderr and "Captive portal" in r.stderr and "HTTP 200" in r.stderr
    assert "Traceback" not in r.stdout + r.stderr
    assert "completed" not in r.stderr


def test_a_json_error_with_status_200_fails_the_run_with_its_message(serve, shou) -> None:
    error = {"error": {"message": "Invalid model: scripted-test", "type": "invalid_request_error"}}
    srv = serve([{"raw_body": json.dumps(error), "content_type": "application/json"}])
    r = shou("run", "hello", server=srv)
    assert r.returncode == 1
    assert "Invalid model: scripted-test" in r.stderr and "Traceback" not in r.stderr


def test_two_calls_with_no_id_and_no_index_both_run(serve, shou, tmp_path, workspace) -> None:
    two = {"tool_calls": [{"name": "addlog", "arguments": {"a": 1, "b": 2}},
                          {"name": "addlog", "arguments": {"a": 3, "b": 4}}], "call_ids": "omit", "call_index": False}
    srv = serve([two, {"text": "3 and 7"}])
    r = run_addlog(shou, srv, tmp_path)
    assert r.returncode == 0, r.stderr
    assert sorted(adds(workspace)) == ["1+2=3", "3+4=7"]
    calls = srv.requests[1]["messages"][-3]["tool_calls"]
    results = tool_messages(srv.requests[1])
    assert len({c["id"] for c in calls}) == 2 and all(c["id"] for c in calls)
    assert [(m["tool_call_id"], m["content"]) for m in results] == [(calls[0]["id"], "3"), (calls[1]["id"], "7")]


def test_two_calls_with_one_id_each_get_their_own_result(serve, shou, tmp_path, workspace) -> None:
    two = {"tool_calls": [{"name": "addlog", "arguments": {"a": 1, "b": 2}},
                          {"name": "addlog", "arguments": {"a": 3, "b": 4}}], "call_ids": "repeat"}
    srv = serve([two, {"text": "3 and 7"}])
    r = run_addlog(shou, srv, tmp_path)
    assert r.returncode == 0, r.stderr
    assert sorted(adds(workspace)) == ["1+2=3", "3+4=7"]
    calls = srv.requests[1]["messages"][-3]["tool_calls"]
    results = tool_messages(srv.requests[1])
    assert len({c["id"] for c in calls}) == 2
    assert [(m["tool_call_id"], m["content"]) for m in results] == [(calls[0]["id"], "3"), (calls[1]["id"], "7")]


def test_thirty_three_turn_tasks_at_30_percent_faults_all_complete_once(tmp_path: Path) -> None:
    """Each request fails with probability 0.3 (429, 500, 503, a reset, a cut mid-call, a stall, a chunk that
    is not JSON), instead of getting its turn; every task still completes with the right answer and each call
    runs exactly once. Seeded: the same faults every run."""
    functions = tmp_path / "addlog_tool.py"
    functions.write_text(ADDLOG_TOOL)
    plan = FaultPlan(rate=0.3, kinds=RETRIED, stall_seconds=0.5)

    def task(k: int) -> tuple[int, list[dict[str, Any]]]:
        workspace = tmp_path / f"ws{k}"
        workspace.mkdir()
        turns = [addlog(k, 100), addlog(k, 200), {"text": f"done {k}"}]
        with ScriptedServer(turns, model=MODEL, faults=replace(plan, seed=k)) as srv:
            r = subprocess.run(
                [sys.executable, "-m", "shou", "run", f"task {k}", "--functions", str(functions), "--json"],
                cwd=workspace, env=shou_env(tmp_path, srv), capture_output=True, text=True, timeout=120,
            )
            faults = list(srv.faults_injected)
        assert r.returncode == 0, (k, faults, r.stderr[-2000:])
        finished = events_of(r.stdout)[-1]
        assert (finished["status"], finished["answer"]) == ("completed", f"done {k}"), (k, faults)
        assert adds(workspace) == [f"{k}+100={k + 100}", f"{k}+200={k + 200}"], (k, faults)
        return k, faults

    with ThreadPoolExecutor(4) as pool:
        results = list(pool.map(task, range(30)))
    kinds = Counter(f["kind"] for _, faults in results for f in faults)
    assert set(kinds) == set(RETRIED), kinds
    assert sum(kinds.values()) >= 20, kinds



def test_a_chunk_that_is_not_json_mid_call_is_retried_and_the_call_runs_once(tmp_path, workspace) -> None:
    functions = tmp_path / "addlog_tool.py"
    functions.write_text(ADDLOG_TOOL)
    plan = FaultPlan(rate=1.0, kinds=("garbage",), max_in_a_row=1)  # every other request breaks
    with ScriptedServer([addlog(12, 345), {"text": "12 + 345 = 357"}], model=MODEL, faults=plan) as srv:
        r = subprocess.run([sys.executable, "-m", "shou", "run", "add", "--functions", str(functions), "--json"],
                           cwd=workspace, env=shou_env(tmp_path, srv), capture_output=True, text=True, timeout=120)
        faults = list(srv.faults_injected)
    assert r.returncode == 0, r.stderr
    assert adds(workspace) == ["12+345=357"]
    assert [f["kind"] for f in faults] == ["garbage", "garbage"]
    assert "not JSON" in r.stdout  # the retry notice says why
    finished = events_of(r.stdout)[-1]
    assert (finished["status"], finished["answer"]) == ("completed", "12 + 345 = 357")


def test_an_html_page_with_status_200_is_not_retried_and_says_so(tmp_path, workspace) -> None:
    plan = FaultPlan(rate=1.0, kinds=("html",))
    with ScriptedServer([{"text": "never"}], model=MODEL, faults=plan) as srv:
        r = subprocess.run([sys.executable, "-m", "shou", "run", "hello"], cwd=workspace,
                           env=shou_env(tmp_path, srv), capture_output=True, text=True, timeout=120)
        requests = len(srv.requests)
    assert r.returncode == 1 and requests == 1
    assert "HTTP 200 with text/html" in r.stderr and "Sign in to the network" in r.stderr
    assert "--base-url" in r.stderr and "Traceback" not in r.stdout + r.stderr
