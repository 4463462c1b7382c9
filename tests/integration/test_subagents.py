"""Sub-agents through `shou run`: `delegate` is offered by default, children run in parallel with a fresh
context, a child out of steps hands back what it had, and the parent's budget counts the children."""

from __future__ import annotations

import json
from pathlib import Path

from .conftest import FIXTURES

PARENT_TASK = "Coordinate the two naps (parent-only detail: zebra-7731)"


def _events(stdout: str) -> list[dict]:
    return [json.loads(line) for line in stdout.splitlines() if line.startswith("{")]


def _is_child(request: dict) -> bool:
    return "You are a sub-agent" in request["messages"][0]["content"]


def test_two_delegates_run_in_parallel_with_fresh_contexts(serve, shou, workspace: Path) -> None:
    srv = serve([
        {"tool_calls": [{"name": "delegate", "arguments": {"task": "Nap for 0.8 s as alpha, then report."}},
                        {"name": "delegate", "arguments": {"task": "Nap for 0.8 s as beta, then report."}}]},
        {"tool_calls": [{"name": "nap", "arguments": {"tag": "first", "seconds": 0.8}}]},
        {"tool_calls": [{"name": "nap", "arguments": {"tag": "second", "seconds": 0.8}}]},
        {"text": "child finished its nap"},
        {"text": "child finished its nap"},
        {"text": "Both naps are done."},
    ])
    r = shou("run", "--json", PARENT_TASK, "--functions", str(FIXTURES / "extra_tools.py"), server=srv)
    assert r.returncode == 0, r.stderr
    events = _events(r.stdout)
    assert events[-1]["status"] == "completed" and events[-1]["answer"] == "Both naps are done."
    naps = [json.loads(line) for line in (workspace / "naps.jsonl").read_text().splitlines()]
    t = {(n["tag"], n["event"]): n["t"] for n in naps}
    assert t[("first", "start")] < t[("second", "end")] and t[("second", "start")] < t[("first", "end")], naps
    children = [req for req in srv.requests if _is_child(req)]
    assert len(children) == 4
    for req in children:
        sent = json.dumps(req["messages"])
        assert "zebra-7731" not in sent and "Coordinate the two naps" not in sent
        assert "delegate" not in [t["function"]["name"] for t in req.get("tools", [])]  # no further delegation
    assert {req["messages"][1]["content"] for req in children} == {"Nap for 0.8 s as alpha, then report.",
                                                                  "Nap for 0.8 s as beta, then report."}
    # the children's events stream inside the parent's, with both run ids
    run_id = events[0]["run_id"]
    child_runs = {e["run_id"] for e in events if e.get("parent") == run_id and e["type"] == "run_started"}
    assert len(child_runs) == 2 and run_id not in child_runs
    results = [e for e in events if e["type"] == "tool_call_finished" and not e.get("parent")]
    assert [e["content"] for e in results] == ["child finished its nap"] * 2
    # the parent's conversation holds the delegate calls and results, not the children's turns
    last = srv.requests[-1]["messages"]
    assert [m["role"] for m in last] == ["system", "user", "assistant", "tool", "tool"]


def test_a_child_out_of_steps_returns_what_it_had_and_its_status(serve, shou) -> None:
    srv = serve([
        {"tool_calls": [{"name": "delegate", "arguments": {"task": "Nap, then report", "agent": "tiny"}}]},
        {"tool_calls": [{"name": "nap", "arguments": {"tag": "only", "seconds": 0.01}}]},
        {"text": "The child stopped early; that is what there is."},
    ])
    agents = json.dumps({"tiny": {"max_steps": 1, "description": "one step only"}})
    r = shou("run", "--json", "Delegate a nap", "--functions", str(FIXTURES / "extra_tools.py"), server=srv,
             SHOU_AGENTS=agents)
    assert r.returncode == 0, r.stderr
    [result] = [e for e in _events(r.stdout) if e["type"] == "tool_call_finished" and not e.get("parent")]
    assert result["content"].startswith("[status: max_steps")
    assert "only rested 0.01 s" in result["content"]  # what it had: its last tool result
    assert result["details"]["status"] == "max_steps" and result["details"]["agent"] == "tiny"
    assert "one step only" in srv.requests[0]["tools"][[t["function"]["name"] for t in srv.requests[0]["tools"]]
                                                      .index("delegate")]["function"]["description"]


def test_the_parents_token_budget_counts_the_children(serve, shou) -> None:
    # every request here is ~4,000 tokens (the built-in tools' specs): the children's two calls leave too
    # little of 20,000 for the parent's next one
    big = {"prompt_tokens": 9000, "completion_tokens": 10}
    srv = serve([
        {"tool_calls": [{"name": "delegate", "arguments": {"task": "Nap, then report"}}],
         "usage": {"prompt_tokens": 100, "completion_tokens": 10}},
        {"tool_calls": [{"name": "nap", "arguments": {"tag": "x", "seconds": 0.01}}], "usage": big},
        {"text": "napped", "usage": big},
        {"text": "never sent: the budget is spent"},
    ])
    r = shou("run", "--json", "--token-budget", "20000", "Delegate a nap", "--functions",
             str(FIXTURES / "extra_tools.py"), server=srv)
    assert r.returncode == 1, r.stderr
    done = _events(r.stdout)[-1]
    assert done["status"] == "budget" and "--token-budget" in done["error"], done
    assert done["usage"]["input_tokens"] + done["usage"]["output_tokens"] == 110 + 2 * 9010
    assert len(srv.requests) == 3  # the parent's second call was never made
