"""`read_file` on a big file of short lines through `shou run`: the asked window comes back and the process's
peak memory does not grow with the file (it once took 4.3 GB for a 50 MB file)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from .conftest import shou_env, tool_messages

LINE = 9  # bytes of one line: eight digits and a newline
SLACK_KB = 64 * 1024  # what reading may add to the peak of a run that reads a tiny file


def _write_lines(path: Path, count: int) -> None:
    """Lines `00000000`.. written a block at a time, so the test process does not hold the file either."""
    with path.open("w") as f:
        for start in range(0, count, 100_000):
            f.write("".join(f"{i:08d}\n" for i in range(start, min(count, start + 100_000))))


def _run_peak_kb(tmp_path: Path, workspace: Path, serve, path: str, offset: int, limit: int) -> tuple[int, str]:
    """Peak RSS (KiB) of a `shou run` whose model reads one window of `path`, and the tool result it got."""
    srv = serve([{"tool_calls": [{"name": "read_file", "arguments": {"path": path, "offset": offset,
                                                                     "limit": limit}}]}, {"text": "Done."}])
    out = (tmp_path / f"out-{path}.txt").open("w+")
    proc = subprocess.Popen([sys.executable, "-m", "shou", "run", "--json", "read it"], cwd=workspace,
                            env=shou_env(tmp_path, srv), stdout=out, stderr=subprocess.STDOUT)
    _, status, usage = os.wait4(proc.pid, 0)  # this child's own peak, not the test process's
    proc.returncode = os.waitstatus_to_exitcode(status)
    out.seek(0)
    assert proc.returncode == 0, out.read()[-2000:]
    [result] = tool_messages(srv.requests[1])
    return usage.ru_maxrss, result["content"]


@pytest.mark.parametrize("megabytes", [40, 150])
def test_a_window_near_the_end_of_a_big_file_costs_no_more_memory_than_a_tiny_file(
        tmp_path: Path, workspace: Path, serve, megabytes: int) -> None:
    count = megabytes * 1024 * 1024 // LINE
    _write_lines(workspace / "big.log", count)
    (workspace / "tiny.log").write_text("".join(f"{i:08d}\n" for i in range(10)))
    baseline, tiny = _run_peak_kb(tmp_path, workspace, serve, "tiny.log", 8, 2)
    assert tiny == "00000007\n00000008\n[... 1 more lines; call read_file with offset=10 to read on]\n"

    peak, content = _run_peak_kb(tmp_path, workspace, serve, "big.log", count - 2, 2)
    # line n holds n - 1: the two lines asked for, and the one after them left for later
    assert content == (f"{count - 3:08d}\n{count - 2:08d}\n"
                       f"[... 1 more lines; call read_file with offset={count} to read on]\n")
    assert peak < baseline + SLACK_KB, json.dumps({"peak_kb": peak, "baseline_kb": baseline})
