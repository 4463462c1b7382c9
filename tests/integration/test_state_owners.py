"""State another account could reach is refused, and the user's config folder is private (issue 28, second
review): a `.shou/` or SQLite sidecar someone else made, or one group or others may write, stops shou with a
clear error and nothing written; the config folder (keys, approvals, chat history) is made 0700."""

from __future__ import annotations

import os
import stat
from collections.abc import Iterator
from pathlib import Path

import pytest

from ..fixtures.serving import start_serve
from .conftest import shou_env

NOBODY = 65534
REMEMBER = {"tool_calls": [{"name": "save_memory", "arguments": {"content": "the PIN is 4321"}}]}


@pytest.fixture(autouse=True)
def loose_umask() -> Iterator[None]:
    """The usual 022: what shou makes must not depend on a careful umask."""
    old = os.umask(0o022)
    yield
    os.umask(old)


def test_a_state_folder_others_may_write_is_refused(serve, shou, workspace: Path) -> None:
    state = workspace / ".shou"
    state.mkdir()
    state.chmod(0o777)
    r = shou("run", "hi", server=serve([{"text": "done"}]))
    assert r.returncode != 0
    assert "group or others" in r.stderr and "Traceback" not in r.stderr, r.stderr
    assert list(state.iterdir()) == []  # nothing written


@pytest.mark.skipif(os.geteuid() != 0, reason="making a file another user owns needs root")
def test_a_state_file_another_user_made_is_refused(serve, shou, workspace: Path) -> None:
    state = workspace / ".shou"
    state.mkdir(mode=0o700)
    wal = state / "shou.db-wal"
    wal.touch(mode=0o600)
    os.chown(wal, NOBODY, NOBODY)
    r = shou("run", "hi", server=serve([{"text": "done"}]))
    assert r.returncode != 0
    assert "belongs to another user" in r.stderr and "Traceback" not in r.stderr, r.stderr
    assert sorted(p.name for p in state.iterdir()) == ["shou.db-wal"] and wal.stat().st_size == 0


@pytest.mark.skipif(os.geteuid() != 0, reason="making a file another user owns needs root")
def test_a_store_whose_wal_another_user_made_is_refused(serve, tmp_path: Path, workspace: Path) -> None:
    where = tmp_path / "shared"
    where.mkdir()
    wal = where / "api.db-wal"
    wal.touch()
    os.chown(wal, NOBODY, NOBODY)
    with pytest.raises(RuntimeError, match="belongs to another user"):
        start_serve(workspace, shou_env(tmp_path, serve([{"text": "x"}])), "--store", str(where / "api.db"))
    assert not (where / "api.db").exists()


def test_the_config_folder_is_made_private(serve, shou, tmp_path: Path) -> None:
    config = tmp_path / "config"
    assert not config.exists()
    r = shou("run", "remember", server=serve([REMEMBER, {"text": "done"}]))  # signs the memory: makes a key
    assert r.returncode == 0, r.stderr
    assert any(config.iterdir())
    assert stat.S_IMODE(config.stat().st_mode) == 0o700
