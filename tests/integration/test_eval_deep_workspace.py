"""`shou eval` starting a sample over again in a workspace an earlier attempt left thousands of levels deep:
the old workspace is removed (Python 3.11's `shutil.rmtree` recursed once a level: a RecursionError traceback)."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

from ..fixtures.deep import chain


def test_an_attempts_deep_workspace_is_removed_and_the_sample_run(deep_tmp: Path) -> None:
    suite = deep_tmp / "suite.jsonl"
    suite.write_text(json.dumps({"id": "c1", "task": "Say done.", "checks": [{"answer_equals": "done"}],
                                 "solution": [{"text": "done"}]}) + "\n")
    out = deep_tmp / "out"
    command = [sys.executable, "-m", "shou", "eval", str(suite), "--model", "oracle", "--out", str(out)]
    subprocess.run(command, check=True, capture_output=True, timeout=300)
    (ws,) = (out / "work").iterdir()
    # an attempt killed before its log held anything, whose agent had made a deep tree
    shutil.rmtree(ws / ".shou")
    (out / "results.jsonl").unlink()
    chain(ws / "deep", 1500)
    again = subprocess.run(command, capture_output=True, text=True, timeout=300)
    assert again.returncode == 0 and "Traceback" not in again.stderr, again.stderr[-2000:]
    assert not (ws / "deep").exists()
    (line,) = (out / "results.jsonl").read_text().splitlines()
    assert json.loads(line)["outcome"] == "pass", line


TOOLS = '''
import os
from shou import tool

@tool
def dig(folder: str) -> str:
    """Make a tree 1,500 levels deep in the folder."""
    fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY)
    for _ in range(1500):
        os.mkdir("d", dir_fd=fd)
        inner = os.open("d", os.O_RDONLY | os.O_DIRECTORY, dir_fd=fd)
        os.close(fd)
        fd = inner
    os.close(os.open("leaf", os.O_WRONLY | os.O_CREAT, dir_fd=fd))
    os.close(fd)
    return "dug"
'''


def test_the_files_a_deep_tree_holds_are_listed_as_written(deep_tmp: Path) -> None:
    suite = deep_tmp / "suite.jsonl"
    suite.write_text(json.dumps({
        "id": "c1", "task": "Dig, then say done.", "checks": [{"answer_equals": "done"}],
        "solution": [{"tool_calls": [{"name": "dig", "arguments": {"folder": "{{workspace}}"}}]}, {"text": "done"}],
    }) + "\n")
    (deep_tmp / "tools.py").write_text(TOOLS)
    out = deep_tmp / "out"
    done = subprocess.run([sys.executable, "-m", "shou", "eval", str(suite), "--model", "oracle", "--out", str(out),
                           "--functions", str(deep_tmp / "tools.py")], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0 and "Traceback" not in done.stderr, done.stderr[-2000:]
    (line,) = (out / "results.jsonl").read_text().splitlines()
    result = json.loads(line)
    assert result["outcome"] == "pass" and result["wrote"] == ["d/" * 1500 + "leaf"], line[:500]
