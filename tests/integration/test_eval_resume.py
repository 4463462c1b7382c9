"""`shou eval` stopped mid-run (kill -9 of the whole process group, or Ctrl-C), then the same command again:
no sample is lost or counted twice, and no finished tool call is repeated.

Each case's solution calls `mark`, a --functions tool that appends the case's id to a ledger outside the
workspaces, then answers. One case's call blocks (until the process dies) once it has written its line, so
the kill lands while that call runs and while other cases are done, in flight or not started: the test
waits for those lines, never for time.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

CASES = 8
BLOCKED = "c5"

TOOLS = '''
import os, time
from shou import tool

@tool
def mark(case: str) -> str:
    """Record that the case's call ran."""
    with open(os.environ["LEDGER"], "a") as f:
        f.write(case + "\\n")
        f.flush()
        os.fsync(f.fileno())
    if case == os.environ.get("BLOCK"):
        while True:  # the process is killed while this call runs
            time.sleep(0.05)
    return "marked " + case
'''


def _suite(tmp: Path) -> Path:
    lines = []
    for i in range(1, CASES + 1):
        cid = f"c{i}"
        lines.append(json.dumps({
            "id": cid, "task": f"Mark case {cid}, then say done {cid}.",
            "checks": [{"answer_equals": f"done {cid}"}],
            "solution": [{"tool_calls": [{"name": "mark", "arguments": {"case": cid}}]}, {"text": f"done {cid}"}],
        }))
    suite = tmp / "suite.jsonl"
    suite.write_text("\n".join(lines) + "\n")
    (tmp / "tools.py").write_text(TOOLS)
    return suite


def _command(tmp: Path, suite: Path) -> list[str]:
    return [sys.executable, "-m", "shou", "eval", str(suite), "--model", "oracle", "-j", "2", "--out",
            str(tmp / "out"), "--functions", str(tmp / "tools.py")]


def _ledger(tmp: Path) -> list[str]:
    path = tmp / "ledger"
    return path.read_text().split() if path.exists() else []


@pytest.mark.parametrize("how", ["kill -9", "ctrl-c"])
def test_a_stopped_evaluation_resumes_with_nothing_lost_or_counted_twice(tmp_path: Path, how: str) -> None:
    suite = _suite(tmp_path)
    env = {**os.environ, "LEDGER": str(tmp_path / "ledger"), "BLOCK": BLOCKED, "PYTHONUNBUFFERED": "1"}
    first = subprocess.Popen(_command(tmp_path, suite), env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                             start_new_session=True)
    try:
        # -j 2: the blocked case holds one worker, the other goes on; c5 starts after c1-c4 were taken
        _wait_for(lambda: BLOCKED in _ledger(tmp_path) and len(_ledger(tmp_path)) >= 6, first)
    finally:
        if how == "kill -9":
            os.killpg(first.pid, signal.SIGKILL)
        else:
            os.killpg(first.pid, signal.SIGINT)
        _, err = first.communicate(timeout=60)
    if how == "ctrl-c":
        assert first.returncode == 130, err.decode()
        assert b"run the same command again" in err
    results = tmp_path / "out" / "results.jsonl"
    before = [json.loads(line) for line in results.read_text().splitlines()] if results.exists() else []
    assert BLOCKED not in {r["case"] for r in before}

    env.pop("BLOCK")
    second = subprocess.run(_command(tmp_path, suite), env=env, capture_output=True, text=True, timeout=300)
    assert second.returncode == 0, second.stderr
    assert "continuing" in second.stderr
    lines = [json.loads(line) for line in results.read_text().splitlines()]
    assert sorted(r["case"] for r in lines) == sorted(f"c{i}" for i in range(1, CASES + 1))  # one line each
    assert {r["case"]: r for r in before}.items() <= {r["case"]: r for r in lines}.items()  # kept as they were
    ledger = _ledger(tmp_path)
    assert len(ledger) == len(set(ledger)), ledger  # no call ran twice
    # Every call ran, but for one the stop may have caught between its logged start and its effect (the other
    # worker's case in flight): like the blocked one, it is reported cut short, never run again.
    missing = sorted({f"c{i}" for i in range(1, CASES + 1)} - set(ledger))
    assert len(missing) <= 1 and BLOCKED not in missing, ledger
    for case in missing:
        assert _cut_short(tmp_path / "out", next(r for r in lines if r["case"] == case)), case
    blocked = next(r for r in lines if r["case"] == BLOCKED)
    # its call was cut short: resumed from its log, the model is told the outcome is unknown and goes on
    assert blocked["outcome"] == "pass" and blocked["answer"] == f"done {BLOCKED}"
    assert all(r["outcome"] == "pass" for r in lines)


def _cut_short(out: Path, result: dict[str, object]) -> bool:
    """Whether the result's session logged its `mark` call as started and then as cut short by the stop."""
    import sqlite3

    from shou.session import INTERRUPTED

    db = sqlite3.connect(out / str(result["workspace"]) / ".shou" / "shou.db")
    try:
        rows = [(kind, json.loads(data)) for kind, data in db.execute(
            "SELECT type, data FROM events WHERE session = ? ORDER BY id", (result["session"],))]
    finally:
        db.close()
    started = [e for kind, e in rows if kind == "tool_call_started" and e["call"]["function"]["name"] == "mark"]
    finished = [e for kind, e in rows if kind == "tool_call_finished" and e["name"] == "mark"]
    return len(started) == 1 and len(finished) == 1 and finished[0]["content"] == INTERRUPTED


def _wait_for(ready, proc: subprocess.Popen) -> None:  # type: ignore[type-arg]
    import time

    deadline = time.monotonic() + 120  # a bound for a broken run, not a timing assumption
    while not ready():
        if proc.poll() is not None:
            _, err = proc.communicate()
            raise AssertionError(f"shou eval ended early ({proc.returncode}): {err.decode()[-2000:]}")
        if time.monotonic() > deadline:
            raise AssertionError("the evaluation did not reach the blocked call")
        time.sleep(0.02)
