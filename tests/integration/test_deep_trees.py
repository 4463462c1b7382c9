"""A command that makes a tree thousands of levels deep: the next command runs, and `shou diff` and `shou undo`
answer (the checkpoints' scan recursed once a level: a RecursionError on Python 3.11)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from .test_undo import call

DIG = ("python3 -c \"import os\nfor i in range(1500): os.mkdir('d'); os.chdir('d')\nopen('leaf', 'w').write('x')\"")


@pytest.fixture
def workspace(deep_tmp: Path) -> Path:
    ws = deep_tmp / "ws"  # outside pytest's folders: its clean-up recurses once a level
    ws.mkdir()
    return ws


def test_a_deep_tree_neither_stops_the_run_nor_diff_nor_undo(serve, shou, workspace: Path) -> None:
    (workspace / "keep.txt").write_text("mine\n")
    srv = serve([call("shell", command=DIG), call("shell", command="echo after > after.txt"), {"text": "done"}])
    r = shou("run", "dig", "--session", "s1", server=srv, timeout=180)
    assert r.returncode == 0 and "Traceback" not in r.stderr, r.stderr[-2000:]
    assert (workspace / "after.txt").read_text() == "after\n"
    results = [m["content"] for m in srv.requests[-1]["messages"] if m["role"] == "tool"]
    assert len(results) == 2 and not any("internal error" in str(c).lower() for c in results), results
    d = shou("diff")
    assert d.returncode == 0 and "Traceback" not in d.stderr, d.stderr[-2000:]
    assert "+++ b/after.txt" in d.stdout and "d/" * 1500 + "leaf" in d.stdout
    u = shou("undo")
    assert u.returncode == 0 and "Traceback" not in u.stderr, u.stderr[-2000:]
    assert not (workspace / "after.txt").exists() and not Path(workspace, *["d"] * 1500, "leaf").exists()
    assert (workspace / "keep.txt").read_text() == "mine\n"


LONG = ("python3 -c \"import os\nfor i in range(700): os.mkdir('d' * 9); os.chdir('d' * 9)\n"
        "open('leaf', 'w').write('x')\"")


def test_a_file_past_path_max_is_seen_by_diff_and_undone(serve, shou, workspace: Path) -> None:
    # Review 49, F5: the scan walked by path: a file 7,000 bytes deep was skipped without a word (the scan said
    # it was complete), so diff and undo never saw it.
    srv = serve([call("shell", command=LONG), {"text": "done"}])
    r = shou("run", "dig", "--session", "s1", server=srv, timeout=180)
    assert r.returncode == 0 and "Traceback" not in r.stderr, r.stderr[-2000:]
    d = shou("diff")
    assert d.returncode == 0 and "Traceback" not in d.stderr, d.stderr[-2000:]
    assert ("d" * 9 + "/") * 700 + "leaf" in d.stdout, d.stdout[-500:]
    u = shou("undo")
    assert u.returncode == 0 and "Traceback" not in u.stderr, u.stderr[-2000:]
    fd = os.open(workspace, os.O_RDONLY)
    try:
        for _ in range(700):  # the path is past PATH_MAX: walked one folder at a time
            inner = os.open("d" * 9, os.O_RDONLY, dir_fd=fd)
            os.close(fd)
            fd = inner
        assert "leaf" not in os.listdir(fd), u.stdout[-500:]
    finally:
        os.close(fd)
