"""Faults at the edges of the session log: a full disk, a read-only mount, damage inside the file, bytes that
are not UTF-8. Each ends with what is wrong and what to do, never a traceback, and a healthy log is never
moved aside (it would vanish from `shou sessions`)."""

from __future__ import annotations

import os
import sqlite3
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from .conftest import shou_env
from .test_bad_input import no_traceback, shou_bytes

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="mounts a small tmpfs (root only)")


def _mount(where: Path, options: str) -> None:
    r = subprocess.run(["mount", "-t", "tmpfs", "-o", options, "tmpfs", str(where)], capture_output=True)
    if r.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {r.stderr.decode(errors='replace')}")


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[Path]:
    """A 3 MB workspace of its own, to fill up or make read-only."""
    where = tmp_path / "small"
    where.mkdir()
    _mount(where, "size=3m")
    yield where
    subprocess.run(["umount", "-l", str(where)], capture_output=True)


def _fill(disk: Path) -> Path:
    fill = disk / "fill"
    with open(fill, "wb") as f:
        try:
            while True:
                f.write(b"\0" * 65536)
        except OSError:
            pass
    assert os.statvfs(disk).f_bavail == 0
    return fill


def _kept_aside(workspace: Path) -> list[Path]:
    return list((workspace / ".shou").glob("shou.db.damaged-*"))


def test_a_full_disk_stops_the_run_and_keeps_the_healthy_log(serve, tmp_path: Path, small_disk: Path) -> None:
    srv = serve([{"text": "first"}, {"text": "second"}])
    r = shou_bytes(tmp_path, small_disk, "run", "hello", "-s", "kept", server=srv)
    assert r.returncode == 0, no_traceback(r)
    fill = _fill(small_disk)
    r = shou_bytes(tmp_path, small_disk, "run", "again", "-s", "kept", server=srv)
    err = no_traceback(r)
    assert r.returncode == 2 and "is full" in err and "free some space" in err
    assert _kept_aside(small_disk) == []  # the healthy log stays where it is
    listed = shou_bytes(tmp_path, small_disk, "sessions", "--json")
    assert listed.returncode == 0 and b'"kept"' in listed.stdout, no_traceback(listed)
    fill.unlink()
    r = shou_bytes(tmp_path, small_disk, "run", "again", "-s", "kept", server=srv)
    assert r.returncode == 0, no_traceback(r)
    shown = shou_bytes(tmp_path, small_disk, "show", "kept")
    assert b"first" in shown.stdout and b"second" in shown.stdout, no_traceback(shown)


def test_a_read_only_workspace_is_read_but_never_renamed(serve, tmp_path: Path, small_disk: Path) -> None:
    srv = serve([{"text": "an answer worth keeping"}])
    r = shou_bytes(tmp_path, small_disk, "run", "hello", "-s", "kept", server=srv)
    assert r.returncode == 0, no_traceback(r)
    assert subprocess.run(["mount", "-o", "remount,ro", str(small_disk)]).returncode == 0
    try:
        r = shou_bytes(tmp_path, small_disk, "run", "again", "-s", "kept", server=srv)
        err = no_traceback(r)
        assert r.returncode == 2 and "read-only" in err and "permissions" in err
        for command in (["sessions"], ["show", "kept"], ["trace", "kept"], ["usage"]):
            r = shou_bytes(tmp_path, small_disk, *command)
            assert r.returncode == 0, (command, no_traceback(r))
        assert b"an answer worth keeping" in shou_bytes(tmp_path, small_disk, "show", "kept").stdout
    finally:
        subprocess.run(["mount", "-o", "remount,rw", str(small_disk)])
    assert _kept_aside(small_disk) == []
    assert len(srv.requests) == 1


def test_a_disk_that_fills_during_a_run_stops_it_and_resume_finishes_it(serve, tmp_path: Path,
                                                                          small_disk: Path) -> None:
    fill_it = "dd if=/dev/zero of=fill bs=64k 2>/dev/null; echo filled"
    srv = serve([{"tool_calls": [{"name": "shell", "arguments": {"command": fill_it}}]},
                 {"text": "all done after the disk had room again"}], turn_by="history")
    r = shou_bytes(tmp_path, small_disk, "run", "fill the disk", "-s", "full", "--sandbox", "local", "-y",
                   server=srv)
    err = no_traceback(r)
    assert r.returncode == 1 and "is full" in err and "shou resume" in err, err
    assert "Task exception" not in err
    (small_disk / "fill").unlink()
    listed = shou_bytes(tmp_path, small_disk, "sessions")
    assert b"interrupted" in listed.stdout, no_traceback(listed)
    r = shou_bytes(tmp_path, small_disk, "resume", "full", "--sandbox", "local", "-y", server=srv)
    assert r.returncode == 0, no_traceback(r)
    shown = shou_bytes(tmp_path, small_disk, "show", "full")
    assert b"all done after the disk had room again" in shown.stdout and b"completed" in shown.stdout


def _damage_inner_page(workspace: Path, serve, tmp_path: Path) -> None:
    """A log of three sessions whose fourth page (inside a table, past the header) is overwritten."""
    srv = serve([{"text": f"answer {i}"} for i in range(3)])
    for i in range(3):
        r = shou_bytes(tmp_path, workspace, "run", "task " + "x" * 3000, "-s", f"s{i}", server=srv)
        assert r.returncode == 0, no_traceback(r)
    db = sqlite3.connect(workspace / ".shou" / "shou.db")
    db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    assert db.execute("PRAGMA page_count").fetchone()[0] > 8
    db.close()
    with open(workspace / ".shou" / "shou.db", "r+b") as f:
        f.seek(4096 * 3)
        f.write(b"\xff" * 4096)


def test_inner_damage_is_reported_by_every_command_and_run_moves_it_aside(serve, tmp_path: Path,
                                                                           workspace: Path) -> None:
    _damage_inner_page(workspace, serve, tmp_path)
    for command in (["sessions"], ["show", "s1"], ["trace"], ["trace", "s1"], ["usage"], ["approvals"],
                    ["approve", "call_x"]):
        r = shou_bytes(tmp_path, workspace, *command, server=serve([]))
        err = no_traceback(r)
        assert r.returncode == 2 and "damaged" in err, (command, err)
    assert _kept_aside(workspace) == []  # only a command that must write (run, resume, chat) moves it
    srv = serve([{"text": "fresh"}])
    r = shou_bytes(tmp_path, workspace, "run", "hello", "-s", "s1", server=srv)
    err = no_traceback(r)
    assert r.returncode == 0 and "damaged" in err and "fresh session log" in err
    [kept] = _kept_aside(workspace)
    assert kept.stat().st_size > 4096 * 8  # kept whole, as it was


@pytest.mark.parametrize("command", [
    [b"run", b"hi", b"-s", b"caf\xe9"], [b"show", b"caf\xe9"], [b"resume", b"caf\xe9"], [b"trace", b"caf\xe9"],
    [b"trace", b"show", b"mc_\xe9"], [b"run", b"hi", b"--model", b"caf\xe9"], [b"approve", b"call_\xff"],
])
def test_arguments_that_are_not_utf8(serve, tmp_path: Path, workspace: Path, command: list[bytes]) -> None:
    srv = serve([{"text": "fine"}])
    assert shou_bytes(tmp_path, workspace, "run", "first", server=srv).returncode == 0
    r = shou_bytes(tmp_path, workspace, *command, server=srv)
    assert r.returncode == 2 and "UTF-8" in no_traceback(r)
    assert len(srv.requests) == 1


@pytest.mark.parametrize("command", [["run", "hi"], ["config"]])
def test_a_model_variable_that_is_not_utf8(serve, tmp_path: Path, workspace: Path, command: list[str]) -> None:
    srv = serve([{"text": "never asked"}])
    env = {k.encode(): v.encode() for k, v in shou_env(tmp_path, srv).items()}
    env[b"SHOU_MODEL"] = b"gpt-\xe9"
    r = subprocess.run([sys.executable, "-m", "shou", *command], cwd=workspace, env=env, capture_output=True,
                       timeout=120)
    err = no_traceback(r)
    assert r.returncode == 2 and "'model'" in err and "not valid UTF-8" in err
    assert srv.requests == []
