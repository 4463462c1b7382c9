"""A planned run killed with `kill -9` in the middle of a step is resumed as a plan: `shou resume` (without
`--plan`) picks the plan up from the log, counts the interrupted step as failed, re-plans and finishes; the
step that was done is not run again. A real `shou` process, the scripted model over HTTP."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import threading
from pathlib import Path

from shou.models.scripted import ScriptedServer

from .conftest import FIXTURES, shou_env
from .test_plans import PLAN_SCRIPT

HANG_GUARD = 120.0  # seconds: a deadlock guard only; the kill itself is decided by what the process prints


def _events(lines: list[str]) -> list[dict]:
    return [json.loads(line) for line in lines if line.startswith("{")]


def _run_until_the_hanging_step(cmd: list[str], cwd: Path, env: dict[str, str]) -> list[dict]:
    """Run `cmd` and SIGKILL it as soon as it prints that the second step's tool (which sleeps 300 s) started."""
    proc = subprocess.Popen(cmd, cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    guard = threading.Timer(HANG_GUARD, proc.kill)
    guard.start()
    lines: list[str] = []
    try:
        assert proc.stdout is not None
        for line in proc.stdout:
            lines.append(line)
            if '"tool_call_started"' in line and "fetch_report" in line:
                proc.send_signal(signal.SIGKILL)
                break
        lines.extend(proc.stdout.readlines())
        proc.wait()
    finally:
        guard.cancel()
        proc.kill()
    assert proc.returncode == -signal.SIGKILL, "the run ended before it reached the hanging step"
    return _events(lines)


def test_a_killed_planned_run_resumes_its_plan(tmp_path: Path, workspace: Path) -> None:
    tools = str(FIXTURES / "extra_tools.py")
    with ScriptedServer(PLAN_SCRIPT) as srv:
        env = shou_env(tmp_path, srv)
        first = _run_until_the_hanging_step(
            [sys.executable, "-m", "shou", "run", "--plan", "--json", "-s", "planned", "Write the notes and the "
             "report", "--functions", tools], workspace, env)
        run_id = first[0]["run_id"]
        assert [p["steps"][0]["status"] for p in first if p["type"] == "plan"][-1] == "done"
        assert len(srv.requests) == 5  # the plan, step 1 (two calls and its verdict), step 2's first call
        r = subprocess.run([sys.executable, "-m", "shou", "resume", "planned", "--json", "--functions", tools],
                           cwd=workspace, env=env, capture_output=True, text=True, timeout=HANG_GUARD)
    assert r.returncode == 0, r.stderr
    events = _events(r.stdout.splitlines())
    assert events[0]["type"] == "run_resumed" and events[0]["run_id"] == run_id
    plans = [e for e in events if e["type"] == "plan"]
    resumed = plans[0]
    assert resumed["note"] == "resumed" and [s["status"] for s in resumed["steps"]] == ["done", "failed"]
    assert "interrupted" in resumed["steps"][1]["result"]
    assert [s["status"] for s in plans[-1]["steps"]] == ["done", "failed", "done"] and plans[-1]["revision"] == 2
    # the re-plan is asked why the step failed; step 1 is not run again (its write happened once)
    assert "interrupted" in srv.requests[5]["messages"][-1]["content"]
    assert len(srv.requests) == len(PLAN_SCRIPT)
    assert (workspace / "notes.txt").read_text() == "intro\n"
    assert (workspace / "report.txt").read_text() == "figures: 42\n"
    done = events[-1]
    assert done["type"] == "run_finished" and done["run_id"] == run_id and done["status"] == "completed"
    assert done["answer"].startswith("Done: notes.txt")
    assert all(e["parent"] == run_id for e in events if e.get("parent"))
