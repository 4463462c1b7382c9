"""Each API session gets an id unique forever when it is made (what its browser, interpreter and spills are
kept under), and a queue made before ids were kept gives its sessions one on first use."""

from __future__ import annotations

import sqlite3
from pathlib import Path

from shou.serve.jobs import RunQueue


def _queue(path: Path) -> RunQueue:
    return RunQueue(sqlite3.connect(path, isolation_level=None, check_same_thread=False), postgres=False,
                    key=b"k" * 32)


def test_a_name_made_again_gets_another_id(tmp_path: Path) -> None:
    q = _queue(tmp_path / "serve.db")
    q.submit("run_1", "alice", "shared-name", "t", {})
    first = q.session_id("shared-name")
    assert first and q.session_id("shared-name") == first
    q.forget_session("shared-name")
    assert q.session_id("shared-name") is None
    q.submit("run_2", "bob", "shared-name", "t", {})
    second = q.session_id("shared-name")
    assert second and second != first
    q.close()


def test_a_queue_from_before_ids_gets_the_column_and_ids(tmp_path: Path) -> None:
    conn = sqlite3.connect(tmp_path / "serve.db")
    conn.execute("CREATE TABLE serve_sessions (name TEXT PRIMARY KEY, username TEXT NOT NULL)")
    conn.execute("INSERT INTO serve_sessions VALUES ('old', 'alice')")
    conn.commit()
    conn.close()
    q = _queue(tmp_path / "serve.db")
    sid = q.session_id("old")
    assert sid and len(sid) == 32 and q.session_id("old") == sid
    q.close()
