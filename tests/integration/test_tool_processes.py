"""A sync `@tool` that starts processes: when its timeout passes, its processes end with it, and shou exits."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from shou.models.scripted import ScriptedServer

from .conftest import FIXTURES, shou_env, tool_messages

WAYS = ("run", "shell", "session", "system", "orphan")


def sleepers(workspace: Path) -> list[int]:
    """The `sleep 300` processes running in `workspace` (other tests' sleeps are elsewhere)."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            argv = (entry / "cmdline").read_bytes().split(b"\0")
            cwd = os.readlink(entry / "cwd")
            state = (entry / "stat").read_text().rsplit(")", 1)[1].split()[0]
        except OSError:
            continue
        if argv[:2] == [b"sleep", b"300"] and cwd == str(workspace) and state != "Z":
            found.append(int(entry.name))
    return found


def test_a_timed_out_sync_tool_leaves_no_process_and_shou_exits(tmp_path: Path, workspace: Path) -> None:
    calls = [{"name": "start_sleeper", "arguments": {"how": how}} for how in WAYS]
    with ScriptedServer([{"tool_calls": calls}, {"text": "They all hung."}]) as srv:
        env = shou_env(tmp_path, srv, SHOU_TOOL_TIMEOUT="1", SHOU_MAX_PARALLEL_TOOLS=str(len(WAYS)))
        proc = subprocess.Popen([sys.executable, "-m", "shou", "run", "sleep", "--json", "--functions",
                                 str(FIXTURES / "extra_tools.py")], cwd=workspace, env=env, stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True)
        try:
            assert proc.stdout is not None
            finished = None
            for line in proc.stdout:
                if '"run_finished"' in line:
                    finished = json.loads(line)
                    break
            # Generous bounds, against a hang only: the process ends, and its stdout closes (no sleep holds it).
            _, err = proc.communicate(timeout=60)
        finally:
            proc.kill()
            left = sleepers(workspace)
            for pid in left:
                os.kill(pid, 9)
        requests = srv.requests
    assert finished is not None and finished["status"] == "completed", err
    assert proc.returncode == 0, err
    assert left == [], f"sleep processes outlived the tool's timeout: {left}"
    results = tool_messages(requests[1])
    assert len(results) == len(WAYS) and all("did not finish within" in r["content"] for r in results)
