"""shou's state is its user's alone: after `shou run` and a `shou serve` run, every folder under `.shou/`
is 0700 and every file (shou.db, serve.db and their -wal and -shm, spills, per-user memory, locks) 0600,
whatever the umask; a `.shou/` an older shou left 0755 with 0644 files is tightened when it is opened."""

from __future__ import annotations

import os
import sqlite3
import stat
from collections.abc import Iterator
from pathlib import Path

import pytest

from ..fixtures.serving import start_serve, stream_run
from .conftest import shou_env

ALICE = "alice-token-0123456789"
BIG = {"tool_calls": [{"name": "shell", "arguments": {"command": "python3 -c \"print('x' * 100000)\""}}]}
REMEMBER = {"tool_calls": [{"name": "save_memory", "arguments": {"content": "alice's PIN is 4321"}}]}


@pytest.fixture(autouse=True)
def loose_umask(tmp_path: Path) -> Iterator[None]:
    """The usual 022: what shou makes must not depend on a careful umask."""
    (tmp_path / "config").mkdir(exist_ok=True)
    (tmp_path / "config" / "shou.toml").write_text("memory_embeddings = false\n")
    old = os.umask(0o022)
    yield
    os.umask(old)


def loose(root: Path) -> list[str]:
    """Everything under `root` (itself included) readable or writable by group or others."""
    found = []
    for each in [root, *root.rglob("*")]:
        st = os.lstat(each)
        if stat.S_ISLNK(st.st_mode):
            continue
        mode = stat.S_IMODE(st.st_mode)
        want = 0o700 if stat.S_ISDIR(st.st_mode) else 0o600
        if mode & 0o077 or (stat.S_ISDIR(st.st_mode) and mode != want):
            found.append(f"{each.relative_to(root.parent)} {oct(mode)}")
    return found


def test_a_run_leaves_only_private_state(serve, shou, workspace: Path) -> None:
    srv = serve([BIG, REMEMBER, {"text": "done"}])
    r = shou("run", "make some output", server=srv)
    assert r.returncode == 0, r.stderr
    state = workspace / ".shou"
    assert (state / "shou.db").exists() and any((state / "outputs").iterdir()) and (state / "memory.db").exists()
    assert loose(state) == []


def test_a_serve_run_leaves_only_private_state(serve, tmp_path: Path, workspace: Path) -> None:
    (tmp_path / "tokens").write_text(f"{ALICE} alice\n")
    (tmp_path / "tokens").chmod(0o600)  # a tokens file must be its owner's alone
    srv = serve([BIG, REMEMBER, {"text": "done"}])
    s = start_serve(workspace, shou_env(tmp_path, srv), "--tokens", str(tmp_path / "tokens"))
    try:
        with s.client(ALICE) as c:
            run = c.post("/v1/runs", json={"task": "make some output"}).json()
            assert stream_run(c, run["run_id"])[-1]["data"]["answer"] == "done"
            state = workspace / ".shou"
            # While it serves: SQLite's -wal holds the latest writes in clear until a checkpoint.
            assert (state / "serve.db-wal").exists() and any((state / "users").rglob("memory.db"))
            assert loose(state) == []
    finally:
        s.stop()
    assert loose(workspace / ".shou") == []


def test_a_store_given_by_path_is_private_too(serve, tmp_path: Path, workspace: Path) -> None:
    (tmp_path / "tokens").write_text(f"{ALICE} alice\n")
    (tmp_path / "tokens").chmod(0o600)  # a tokens file must be its owner's alone
    srv = serve([{"text": "done"}])
    s = start_serve(workspace, shou_env(tmp_path, srv), "--tokens", str(tmp_path / "tokens"), "--store",
                    str(tmp_path / "elsewhere" / "api.db"))
    try:
        with s.client(ALICE) as c:
            run = c.post("/v1/runs", json={"task": "hi"}).json()
            stream_run(c, run["run_id"])
            assert loose(tmp_path / "elsewhere") == []
    finally:
        s.stop()


def test_state_an_older_shou_left_open_is_tightened(serve, shou, workspace: Path) -> None:
    state = workspace / ".shou"
    (state / "outputs").mkdir(parents=True)
    (state / "outputs" / "old-output.txt").write_text("a secret an old run printed")
    db = sqlite3.connect(state / "shou.db")
    db.execute("PRAGMA journal_mode=WAL")
    db.execute("CREATE TABLE t (x)")
    db.commit()
    db.close()
    for each in [state, *state.rglob("*")]:
        each.chmod(0o755 if each.is_dir() else 0o644)
    assert loose(state)
    srv = serve([{"text": "done"}])
    r = shou("run", "hi", server=srv)
    assert r.returncode == 0, r.stderr
    assert loose(state) == []
    assert (state / "outputs" / "old-output.txt").read_text() == "a secret an old run printed"  # nothing lost
