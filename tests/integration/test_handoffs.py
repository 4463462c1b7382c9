"""Handoffs through `shou run` against the scripted provider over HTTP: `[agents.NAME] handoff = true` lets the
model pass the whole conversation to that agent, whose instructions, tools and model answer the same run from
the next step on; the trace names both agents; a run killed after the handoff resumes with the second agent;
an untrusted workspace's `[agents]` offers nothing."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
from pathlib import Path

from shou.models.scripted import ScriptedServer

from .conftest import shou_env
from .test_kill_resume import stored

TASK = "I was charged twice for order 4417; please sort it out."
BILLING = "You are the billing agent: you settle charges and refunds, quoting the ledger."
AGENTS = json.dumps({
    "billing": {"instructions": BILLING, "tools": ["read_file"], "description": "charges and refunds",
                "handoff": True},
    "helper": {"description": "delegate-only: never handed a conversation"},
})


def _events(stdout: str) -> list[dict]:
    return [json.loads(line) for line in stdout.splitlines() if line.startswith("{")]


def _system(request: dict) -> str:
    return request["messages"][0]["content"]


def _tools(request: dict) -> set[str]:
    return {t["function"]["name"] for t in request.get("tools", [])}


def _script() -> list[dict]:
    return [
        {"tool_calls": [{"name": "handoff", "arguments": {"agent": "billing", "reason": "a double charge"}}]},
        {"tool_calls": [{"name": "read_file", "arguments": {"path": "ledger.txt"}}]},
        {"text": "Refunded the second charge of order 4417."},
    ]


def test_a_handoff_switches_instructions_tools_and_the_trace_names_both_agents(serve, shou, workspace: Path
                                                                                ) -> None:
    (workspace / "ledger.txt").write_text("order 4417: charged 2x 30.00\n")
    srv = serve(_script())
    r = shou("run", "--json", TASK, server=srv, SHOU_AGENTS=AGENTS)
    assert r.returncode == 0, r.stderr
    events = _events(r.stdout)
    assert events[-1]["status"] == "completed" and events[-1]["answer"] == "Refunded the second charge of order 4417."
    [handoff] = [e for e in events if e["type"] == "handoff"]
    assert (handoff["source"], handoff["target"], handoff["reason"], handoff["step"]) == \
        ("main", "billing", "a double charge", 1)
    first, *after = srv.requests
    assert len(after) == 2
    # before: the run's own agent, offered the handoff (naming billing only: helper has no handoff)
    assert BILLING not in _system(first) and "You are shou" in _system(first)
    assert {"handoff", "write_file", "shell"} <= _tools(first)
    [spec] = [t for t in first["tools"] if t["function"]["name"] == "handoff"]
    assert "billing: charges and refunds" in spec["function"]["description"]
    assert "helper" not in spec["function"]["description"]
    # after: billing's instructions and tools (a handoff back to main only), over the whole conversation
    for request in after:
        assert BILLING in _system(request) and "You are shou" not in _system(request)
        assert _tools(request) == {"read_file", "handoff"}
        assert {"role": "user", "content": TASK} in request["messages"]
    [back] = [t for t in after[0]["tools"] if t["function"]["name"] == "handoff"]
    assert "main:" in back["function"]["description"] and "billing" not in back["function"]["description"]
    assert any(m["role"] == "tool" and "Handed over" in m["content"] for m in after[0]["messages"])
    assert any(m["role"] == "tool" and "charged 2x" in m["content"] for m in after[1]["messages"])

    trace = shou("trace", "--json")
    assert trace.returncode == 0, trace.stderr
    [run] = json.loads(trace.stdout)["runs"]
    assert [c["agent"] for c in run["model_calls"]] == ["main", "billing", "billing"]
    assert run["handoffs"] == [{"step": 1, "source": "main", "target": "billing", "reason": "a double charge"}]
    text = shou("trace")
    assert text.returncode == 0, text.stderr
    assert "handoff main → billing" in text.stdout and "a double charge" in text.stdout
    assert text.stdout.count("billing ·") == 2 and text.stdout.count("main ·") == 1, text.stdout


def test_a_run_killed_after_the_handoff_resumes_with_the_second_agent(tmp_path: Path, workspace: Path) -> None:
    (workspace / "ledger.txt").write_text("order 4417: charged 2x 30.00\n")
    # The killed process's next request hangs, so wherever the kill lands it is after the handoff and before
    # anything else; the resumed process talks to a provider that goes on from the conversation it is sent.
    with ScriptedServer([_script()[0], {"hang": True}]) as first, ScriptedServer(_script(), turn_by="history") as srv:
        proc = subprocess.Popen([sys.executable, "-m", "shou", "run", TASK, "--json", "-s", "refund"], cwd=workspace,
                                env=shou_env(tmp_path, first, SHOU_AGENTS=AGENTS), stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True)
        assert proc.stdout is not None
        for line in proc.stdout:  # killed the moment the handoff is printed (so it is in the log already)
            if line.startswith("{") and json.loads(line)["type"] == "handoff":
                proc.send_signal(signal.SIGKILL)
                break
        proc.communicate(timeout=60)
        assert proc.returncode == -signal.SIGKILL
        r = subprocess.run([sys.executable, "-m", "shou", "resume", "refund", "--json"], cwd=workspace,
                           env=shou_env(tmp_path, srv, SHOU_AGENTS=AGENTS), capture_output=True, text=True,
                           timeout=120)
        assert r.returncode == 0, r.stderr
        resumed = srv.requests
    events = _events(r.stdout)
    assert events[0]["type"] == "run_resumed"
    assert events[-1]["status"] == "completed" and events[-1]["answer"] == "Refunded the second charge of order 4417."
    assert len(resumed) == 2
    for request in resumed:  # a fold of the log, not a memory of the killed process, says who answers
        assert BILLING in _system(request) and _tools(request) == {"read_file", "handoff"}
    log = stored(workspace / ".shou" / "shou.db", "refund")
    assert [(e["source"], e["target"]) for e in log if e["type"] == "handoff"] == [("main", "billing")]
    [result] = [e for e in log if e["type"] == "tool_call_finished" and e["name"] == "handoff"]
    assert not result["is_error"], result  # run again if it had no result: it finds the handoff done


def test_an_untrusted_workspace_cannot_add_a_handoff(serve, shou, workspace: Path) -> None:
    (workspace / "shou.toml").write_text(
        '[agents.billing]\ninstructions = "You are the billing agent."\nhandoff = true\n')
    srv = serve([{"text": "done"}])
    r = shou("run", "--json", TASK, server=srv)
    assert r.returncode == 0, r.stderr
    [request] = srv.requests
    assert "handoff" not in _tools(request)
    assert "agents" in r.stderr and "not trusted" in r.stderr


def test_the_terminal_shows_the_handoff(serve, shou, workspace: Path) -> None:
    (workspace / "ledger.txt").write_text("order 4417: charged 2x 30.00\n")
    r = shou("run", TASK, server=serve(_script()), SHOU_AGENTS=AGENTS)
    assert r.returncode == 0, r.stderr
    assert "⇄ main hands over to billing (a double charge)" in r.stderr
    assert r.stdout.strip() == "Refunded the second charge of order 4417."
