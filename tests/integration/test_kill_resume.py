"""Runs that survive anything: `kill -9` at random moments, then `shou resume`; SIGTERM like Ctrl-C.

Each killed run is a real `shou run --json` process against the scripted provider over HTTP, with a
side-effect tool (it appends a token to a file) and an idempotent one. After each kill: every event the
process printed (streaming fragments aside) is in the store, `shou resume` finishes the run, no
non-idempotent call ran twice, and every call that was running is reported to the model.

The moments are counted in the process's own progress, not in seconds: it is killed just after it prints
its N-th event (N drawn at random), so a loaded machine that runs it slowly kills it at the same points as
a quiet one. Clocks bound only a hang (a deadlock guard), never decide when to kill.
"""

from __future__ import annotations

import json
import os
import random
import signal
import sqlite3
import subprocess
import sys
import threading
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from shou.models.scripted import ScriptedServer

from .conftest import shou_env

TOOLS = '''
import os, random, time
from shou import tool

@tool
def addlog(a: int, b: int, token: str) -> int:
    """Add two numbers, and write the token to the effects file (a side effect that must happen once).

    Args:
        a: first
        b: second
        token: marks this call
    """
    time.sleep(random.uniform(0.02, 0.25))
    with open(os.environ["EFFECTS"], "a") as f:
        f.write(token + "\\n")
    time.sleep(random.uniform(0.0, 0.2))
    return a + b

@tool(idempotent=True)
def lookup(key: str) -> str:
    """Look a key up (harmless to repeat).

    Args:
        key: what to look up
    """
    time.sleep(random.uniform(0.02, 0.2))
    return key.upper()
'''
FRAGMENTS = ("text_delta", "tool_call_delta")
RUN_LINES = 68  # the events a whole run of the script prints (a resume prints fewer)
HANG_GUARD = 300.0  # seconds one process may take before it is taken for hung: a deadlock guard only


def script(tag: str) -> list[dict[str, Any]]:
    return [
        {"text": "Let me add these up and look the key up. " * 3, "chunk_size": 6, "delay": 0.15,
         "tool_calls": [{"name": "addlog", "arguments": {"a": 1, "b": 2, "token": f"{tag}-1"}},
                        {"name": "lookup", "arguments": {"key": "k"}},
                        {"name": "addlog", "arguments": {"a": 3, "b": 4, "token": f"{tag}-2"}}]},
        {"delay": 0.15, "tool_calls": [{"name": "addlog", "arguments": {"a": 3, "b": 7, "token": f"{tag}-3"}}]},
        {"text": "The sums are 3, 7 and 10; the key is K.", "chunk_size": 5, "delay": 0.15},
    ]


def stored(db: Path, session: str) -> list[dict[str, Any]]:
    conn = sqlite3.connect(db)
    try:
        return [json.loads(d) for (d,) in conn.execute("SELECT data FROM events WHERE session = ? ORDER BY id",
                                                        (session,))]
    finally:
        conn.close()


def run_until(cmd: list[str], cwd: Path, env: dict[str, str], kill_after: int | None, errors: Path
              ) -> tuple[int, list[dict[str, Any]], str]:
    """Run `cmd`; with `kill_after`, SIGKILL it just after it prints that many events. Returns its exit code,
    every event it printed (those still in the pipe after the kill included) and its stderr."""
    hung = threading.Event()
    with errors.open("w+") as err:
        proc = subprocess.Popen(cmd, cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=err, text=True)
        guard = threading.Timer(HANG_GUARD, lambda: (hung.set(), proc.kill()))
        guard.start()
        try:
            assert proc.stdout is not None
            lines, events = [], 0
            for line in proc.stdout:
                lines.append(line)
                events += line.startswith("{")
                if kill_after is not None and events >= kill_after:
                    proc.send_signal(signal.SIGKILL)
                    break
            lines.extend(proc.stdout.readlines())  # what it printed before the kill landed
            proc.wait()
        finally:
            guard.cancel()
            proc.kill()
        err.seek(0)
        text = err.read()
    assert not hung.is_set(), f"{' '.join(cmd[3:5])} hung for {HANG_GUARD:g} s: {text[-500:]}"
    return proc.returncode, [json.loads(x) for x in lines if x.startswith("{")], text


@pytest.mark.timeout(2400)
def test_fifty_kills_at_random_moments_lose_nothing_and_rerun_nothing(tmp_path: Path, workspace: Path) -> None:
    (workspace / "tools.py").write_text(TOOLS)
    effects = tmp_path / "effects.log"
    env = shou_env(tmp_path, None, EFFECTS=str(effects), SHOU_MODEL="scripted-test", SHOU_API_KEY="k")
    rng = random.Random(int(os.environ.get("SHOU_KILL_SEED", "11")))
    db = workspace / ".shou" / "shou.db"
    kills, phases, lost, unreported, unfinished = 0, Counter(), [], [], []
    for attempt in range(60):
        if kills >= 50:
            break
        tag, session = f"a{attempt}", f"kill-{attempt}"
        run = [sys.executable, "-m", "shou", "run", "add and look up", "--json", "-s", session, "--functions",
               "tools.py"]
        resume = [sys.executable, "-m", "shou", "resume", session, "--json", "--functions", "tools.py"]
        interrupted: set[str] = set()  # calls that were running at some kill
        with ScriptedServer(script(tag), turn_by="history") as srv:
            env["SHOU_BASE_URL"] = srv.base_url
            cmd, killing = run, True
            for _ in range(12):  # the run, then resumes, each killed at a random moment, until one finishes
                kill_after = rng.randint(1, RUN_LINES - 1) if killing and kills < 50 else None
                code, printed, err = run_until(cmd, workspace, env, kill_after, tmp_path / "stderr.log")
                if code != -signal.SIGKILL:
                    if cmd is resume or code == 0:
                        break
                    unfinished.append((session, code, err[-300:]))
                    break
                log = stored(db, session) if db.exists() else []
                lost += [(session, e["type"]) for e in printed if e["type"] not in FRAGMENTS and e not in log]
                if not log:
                    continue  # killed before the run began: start it again
                if any(e["type"] == "run_finished" for e in printed):
                    break  # killed after the run ended: not a kill of a run
                kills += 1
                phases[printed[-1]["type"] if printed else "starting"] += 1
                started = {e["call"]["id"] for e in log if e["type"] == "tool_call_started"}
                interrupted |= started - {e["call_id"] for e in log if e["type"] == "tool_call_finished"}
                cmd = resume
                killing = rng.random() < 0.6  # sometimes let the resume finish, sometimes kill it too
        log = stored(db, session)
        ends = [e for e in log if e["type"] == "run_finished"]
        if not ends or ends[-1]["status"] != "completed":
            unfinished.append((session, "status", ends[-1:] if ends else "no end"))
            continue
        for call_id in {e["call"]["id"] for e in log if e["type"] == "tool_call_started"}:
            results = [e for e in log if e["type"] == "tool_call_finished" and e["call_id"] == call_id]
            ok = len(results) == 1 and (call_id not in interrupted or results[0]["name"] == "lookup"
                                        or "interrupted" in results[0]["content"])
            if not ok:
                unreported.append((session, call_id, results))
    tokens = Counter(effects.read_text().split()) if effects.exists() else Counter()
    reruns = [t for t, n in tokens.items() if n > 1]
    print(f"{kills} kills; the last event printed before each: {dict(phases)}")
    assert kills >= 50, f"only {kills} kills landed mid-run"
    assert lost == [], f"events printed before the kill but not stored: {lost[:10]}"
    assert reruns == [], f"side effects that happened twice: {reruns}"
    assert unreported == [], f"interrupted calls not reported to the model: {unreported[:5]}"
    assert unfinished == [], f"resumed runs that did not complete: {unfinished[:5]}"
    assert sqlite3.connect(db).execute("PRAGMA integrity_check").fetchone()[0] == "ok"


def test_sigterm_and_sighup_stop_a_run_like_ctrl_c(tmp_path: Path, workspace: Path) -> None:
    (workspace / "tools.py").write_text(TOOLS.replace("random.uniform(0.02, 0.25)", "3"))
    effects = tmp_path / "effects.log"
    for signum in (signal.SIGTERM, signal.SIGHUP):
        session = f"term-{signum}"
        with ScriptedServer(script(session), turn_by="history") as srv:
            env = shou_env(tmp_path, srv, EFFECTS=str(effects))
            proc = subprocess.Popen([sys.executable, "-m", "shou", "run", "add", "--json", "-s", session,
                                     "--functions", "tools.py"], cwd=workspace, env=env, stdout=subprocess.PIPE,
                                    stderr=subprocess.PIPE, text=True)
            assert proc.stdout is not None
            for line in proc.stdout:  # wait until a tool is running
                if '"tool_call_started"' in line:
                    break
            proc.send_signal(signum)
            _, err = proc.communicate(timeout=30)
        assert proc.returncode == 128 + signum, err
        events = stored(workspace / ".shou" / "shou.db", session)
        assert events[-1]["type"] == "run_finished" and events[-1]["status"] == "cancelled"
        calls = {e["call"]["id"] for e in events if e["type"] == "tool_call_started"}
        answered = {e["call_id"] for e in events if e["type"] == "tool_call_finished"}
        assert calls and calls <= answered  # every call that was running got an answer
        listing = subprocess.run([sys.executable, "-m", "shou", "sessions"], cwd=workspace, env=env,
                                 capture_output=True, text=True).stdout
        assert f"{session}" in listing and "cancelled" in listing.split(session)[1].splitlines()[0]


def test_a_second_process_on_a_running_session_is_told_it_is_busy(tmp_path: Path, workspace: Path) -> None:
    (workspace / "tools.py").write_text(TOOLS.replace("random.uniform(0.02, 0.25)", "3"))
    with ScriptedServer(script("busy"), turn_by="history") as srv:
        env = shou_env(tmp_path, srv, EFFECTS=str(tmp_path / "effects.log"))
        first = subprocess.Popen([sys.executable, "-m", "shou", "run", "add", "--json", "-s", "shared", "--functions",
                                  "tools.py"], cwd=workspace, env=env, stdout=subprocess.PIPE, text=True)
        assert first.stdout is not None
        for line in first.stdout:  # the first run is inside a tool call now
            if '"tool_call_started"' in line:
                break
        second = subprocess.run([sys.executable, "-m", "shou", "run", "something else", "-s", "shared"],
                                cwd=workspace, env=env, capture_output=True, text=True, timeout=60)
        resumed = subprocess.run([sys.executable, "-m", "shou", "resume"], cwd=workspace, env=env,
                                 capture_output=True, text=True, timeout=60)
        first.communicate(timeout=60)
    assert second.returncode == 2 and "being run by another" in second.stderr and "Traceback" not in second.stderr
    assert resumed.returncode == 2 and "no unfinished run" in resumed.stderr  # a running session is not "killed"
    assert first.returncode == 0
    events = stored(workspace / ".shou" / "shou.db", "shared")
    assert [e["task"] for e in events if e["type"] == "run_started"] == ["add"]  # nothing interleaved
