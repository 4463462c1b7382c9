"""Stopping `shou run` with a signal: what the model is told about the calls it stopped, and the exit code."""

from __future__ import annotations

import json
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from shou.models.scripted import ScriptedServer
from tests.fixtures.otlp_collector import OtlpCollector

from .conftest import shou_env

TOOLS = '''
import os, time
from shou import tool

@tool
def pay(amount: int) -> str:
    """Pay an amount (a side effect that happens at once, then the call goes on for a long time).

    Args:
        amount: how much
    """
    with open(os.environ["EFFECTS"], "a") as f:
        f.write(f"paid {amount}\\n")
    time.sleep(300)
    return "paid"
'''


def stored(db: Path, session: str) -> list[dict[str, Any]]:
    conn = sqlite3.connect(db)
    try:
        return [json.loads(d) for (d,) in conn.execute("SELECT data FROM events WHERE session = ? ORDER BY id",
                                                        (session,))]
    finally:
        conn.close()


def wait_for(condition: Any, what: str, bound: float = 60.0) -> None:
    """Poll until `condition()` holds; the bound only guards against a hang."""
    deadline = time.monotonic() + bound
    while not condition():
        assert time.monotonic() < deadline, f"never happened: {what}"
        time.sleep(0.02)


def test_a_call_stopped_by_sigterm_after_it_began_has_an_unknown_outcome(tmp_path: Path, workspace: Path) -> None:
    (workspace / "tools.py").write_text(TOOLS)
    effects = tmp_path / "effects.log"
    calls = [{"name": "pay", "arguments": {"amount": 5}}, {"name": "pay", "arguments": {"amount": 7}}]
    with ScriptedServer([{"tool_calls": calls}, {"text": "Paid."}]) as srv:
        env = shou_env(tmp_path, srv, EFFECTS=str(effects), SHOU_MAX_PARALLEL_TOOLS="1")
        proc = subprocess.Popen([sys.executable, "-m", "shou", "run", "pay", "--json", "-s", "pay", "--functions",
                                 "tools.py"], cwd=workspace, env=env, stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True)
        try:
            wait_for(lambda: effects.exists() and "paid 5" in effects.read_text(), "the first payment")
            proc.send_signal(signal.SIGTERM)
            _, err = proc.communicate(timeout=60)
        finally:
            proc.kill()
    assert proc.returncode == 128 + signal.SIGTERM, err
    events = stored(workspace / ".shou" / "shou.db", "pay")
    results = {e["call_id"]: e["content"] for e in events if e["type"] == "tool_call_finished"}
    first, second = [e["call"]["id"] for e in events if e["type"] == "tool_call_started"]
    assert "outcome is unknown" in results[first] and "before this call" not in results[first]
    assert results[second].startswith("Error: not run:")  # one at a time: the second never began
    assert effects.read_text() == "paid 5\n"


def test_signals_after_the_run_finished_leave_the_runs_exit_code(tmp_path: Path, workspace: Path) -> None:
    # A collector that never answers keeps the process in its exit flush (up to 2 s) after the run's end; SIGTERM
    # goes on being sent from the moment run_finished is printed until the process is gone, so some land while
    # connections close and some during the flush, however fast or slow the machine is.
    with OtlpCollector(hang=True) as collector, ScriptedServer([{"text": "Done."}]) as srv:
        env = shou_env(tmp_path, srv, OTEL_EXPORTER_OTLP_ENDPOINT=collector.endpoint)
        proc = subprocess.Popen([sys.executable, "-m", "shou", "run", "say done", "--json"], cwd=workspace,
                                env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        try:
            assert proc.stdout is not None
            for line in proc.stdout:
                if '"run_finished"' in line:
                    assert json.loads(line)["status"] == "completed"
                    break
            deadline = time.monotonic() + 60  # against a hang only
            while proc.poll() is None and time.monotonic() < deadline:
                proc.send_signal(signal.SIGTERM)
                time.sleep(0.05)
            _, err = proc.communicate(timeout=60)
        finally:
            proc.kill()
    assert proc.returncode == 0, err
    assert "Traceback" not in err
