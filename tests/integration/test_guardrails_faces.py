"""Guardrails from the user's `[guardrails]` in `shou run` and over `shou serve`'s REST API, with the scripted
model over loopback HTTP: an input check stops the run before its tool call writes anything, an output check
withholds the answer; both end `blocked` with the reason."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

from ..fixtures.serving import serving, stream_run
from .conftest import shou_env

CHECKS = '''
def no_deletes(task):
    return "deleting files is not allowed" if "delete" in task else None


def no_secret(answer):
    return "the answer leaks the password" if "hunter2" in answer else None
'''
WRITE = {"tool_calls": [{"name": "write_file", "arguments": {"path": "gone.txt", "content": "x"}}]}


def configure(tmp_path: Path) -> None:
    """The user's config (trusted) names the two functions of a file outside the workspace."""
    checks = tmp_path / "checks.py"
    checks.write_text(CHECKS)
    config = tmp_path / "config"
    config.mkdir(exist_ok=True)
    (config / "shou.toml").write_text(
        f'[guardrails.no_deletes]\non = "input"\nfunction = "{checks}:no_deletes"\n\n'
        f'[guardrails.no_secret]\non = "output"\nfunction = "{checks}:no_secret"\n')


def test_cli_input_guardrail_blocks_before_any_tool_runs(serve, shou, tmp_path: Path, workspace: Path) -> None:
    configure(tmp_path)
    srv = serve([WRITE, {"text": "done"}])
    r = shou("run", "delete everything, then write gone.txt", "--json", server=srv)
    assert r.returncode == 1, r.stderr
    events = [json.loads(line) for line in r.stdout.splitlines()]
    assert not (workspace / "gone.txt").exists()
    assert "tool_call_started" not in [e["type"] for e in events]
    tripped = [e for e in events if e["type"] == "guardrail_tripped"]
    assert [(e["kind"], e["name"], e["reason"]) for e in tripped] == [
        ("input", "no_deletes", "deleting files is not allowed")]
    assert events[-1]["type"] == "run_finished" and events[-1]["status"] == "blocked"
    assert events[-1]["error"] == "blocked by the input guardrail 'no_deletes': deleting files is not allowed"


def test_cli_output_guardrail_blocks_the_answer(serve, shou, tmp_path: Path) -> None:
    configure(tmp_path)
    srv = serve([{"text": "the password is hunter2"}])
    r = shou("run", "what is the password?", server=srv)
    assert r.returncode == 1, r.stderr
    assert "hunter2" not in r.stdout  # never streamed: the answer is shown only once it passed
    assert "blocked by the output guardrail 'no_secret': the answer leaks the password" in r.stderr
    assert "blocked · session" in r.stderr
    srv = serve([{"text": "I cannot say"}])
    r = shou("run", "what is the password?", server=srv)
    assert r.returncode == 0 and "I cannot say" in r.stdout, r.stderr


def test_api_runs_end_blocked_with_the_reason(serve, tmp_path: Path, workspace: Path) -> None:
    configure(tmp_path)
    # The first run's check may stop its request before the model got it: the second run's reply is then played
    # by the first turn's `otherwise` (the turn stays, for no one).
    leak = {"text": "the password is hunter2"}
    srv = serve([{"expect": ["delete everything"], **WRITE, "otherwise": leak}, leak])
    with serving(workspace, shou_env(tmp_path, srv)) as s, s.client() as c:
        run = c.post("/v1/runs", json={"task": "delete everything, then write gone.txt"}).json()
        events = [m for m in stream_run(c, run["run_id"]) if m["id"] is not None]
        kinds = [m["event"] for m in events]
        assert "guardrail_tripped" in kinds and "tool_call_started" not in kinds
        got = c.get(f"/v1/runs/{run['run_id']}").json()
        assert got["status"] == "blocked" and "deleting files is not allowed" in got["error"]
        assert not (workspace / "gone.txt").exists()
        run = c.post("/v1/runs", json={"task": "what is the password?"}).json()
        events = [m for m in stream_run(c, run["run_id"]) if m["id"] is not None]
        tripped = next(m["data"] for m in events if m["event"] == "guardrail_tripped")
        assert (tripped["kind"], tripped["name"]) == ("output", "no_secret")
        got = c.get(f"/v1/runs/{run['run_id']}").json()
        assert got["status"] == "blocked" and got["answer"] == "" and "leaks the password" in got["error"]


def test_a_run_killed_while_its_input_check_ran_is_checked_again_and_blocked(serve, shou, tmp_path: Path,
                                                                            workspace: Path) -> None:
    """`kill -9` while the model's reply (a write) waits for the input check: `shou resume` checks the task to the
    end before anything of the log runs, and the run ends blocked; nothing was written, the model never asked
    again."""
    checks = tmp_path / "checks.py"
    checks.write_text(HOLDING)
    config = tmp_path / "config"
    config.mkdir(exist_ok=True)
    (config / "shou.toml").write_text(f'[guardrails.no_deletes]\non = "input"\nfunction = "{checks}:no_deletes"\n')
    srv = serve([WRITE, {"text": "done"}])
    env = shou_env(tmp_path, srv, GUARD_HOLD="1")
    proc = subprocess.Popen([sys.executable, "-m", "shou", "run", "delete everything", "--json", "-s", "k"],
                            cwd=workspace, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            start_new_session=True)
    try:
        assert proc.stdout is not None
        for line in proc.stdout:  # killed once the reply is out and held (the check blocks until killed)
            if json.loads(line)["type"] == "model_response":
                break
        else:
            raise AssertionError(f"no model_response: {proc.stderr.read() if proc.stderr else ''}")
    finally:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(30)
    assert len(srv.requests) == 1 and not (workspace / "gone.txt").exists()
    r = shou("resume", "k", "--json", server=srv)
    assert r.returncode == 1, r.stderr
    events = [json.loads(line) for line in r.stdout.splitlines()]
    assert "tool_call_started" not in [e["type"] for e in events]
    assert events[-1]["status"] == "blocked" and "deleting files is not allowed" in events[-1]["error"]
    assert len(srv.requests) == 1 and not (workspace / "gone.txt").exists()
    r = shou("resume", "k", server=srv)  # nothing left to resume
    assert r.returncode != 0 and len(srv.requests) == 1


HOLDING = '''
import os, threading


def no_deletes(task):
    if os.environ.get("GUARD_HOLD"):  # the first process: hold until it is killed
        threading.Event().wait()
    return "deleting files is not allowed" if "delete" in task else None
'''
