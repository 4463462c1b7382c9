"""The session store's contract, on SQLite and on PostgreSQL alike: what sessions, the loop and `shou serve`
rely on (write-ahead commits, reading a run's rows, session locks, retention, deletion)."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from shou.agent.emitter import Emitter
from shou.events import (
    ModelRequest,
    ModelResponse,
    RunFinished,
    RunStarted,
    TextDelta,
    ToolCallFinished,
    ToolCallStarted,
)
from shou.messages import Message, ToolCall
from shou.session import Session
from shou.store.locks import SessionBusy
from shou.store.retention import PRUNED
from shou.store.sqlite import SQLiteStore
from shou.usage import Usage


@pytest.fixture(params=["sqlite", "postgres"])
def open_store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Any]:
    """Opens stores on one database: each call is another process's view (another replica)."""
    opened: list[Any] = []
    if request.param == "sqlite":
        def make() -> Any:
            opened.append(SQLiteStore(tmp_path / "shou.db"))
            return opened[-1]
    else:
        from shou.store.postgres import PostgresStore

        url = request.getfixturevalue("postgres_url")

        def make() -> Any:
            opened.append(PostgresStore(url))
            return opened[-1]
    yield make
    for store in opened:
        store.close()


def run_events(session: str, run_id: str, answer: str = "done") -> list[Any]:
    return [RunStarted(run_id, session, "task", "m"), ModelRequest(run_id, 1, 2, 0),
            TextDelta(run_id, 1, "not stored"), ToolCallFinished(f"{run_id}.1", 1, "c1", "calculator", "42"),
            RunFinished(run_id, "completed", answer, 1, Usage(), 0.1)]


def test_write_ahead_read_back_and_sessions(open_store) -> None:
    a, b = open_store(), open_store()
    for event in run_events("s1", "run_1"):
        a.append("s1", event)
    assert a.pending and b.rows("s1") == []  # nothing visible before the commit
    a.commit()
    rows = b.rows("s1")
    assert [e.type for _, e in rows] == ["run_started", "model_request", "tool_call_finished", "run_finished"]
    ids = [i for i, _ in rows]
    assert ids == sorted(ids) and a.committed["s1"] == ids[-1]
    # A run's rows include its sub-runs' (run_1.1) but not another run's whose id merely starts the same.
    for event in run_events("s1", "run_10"):
        a.append("s1", event)
    a.commit()
    assert [e.run_id for _, e in b.run_rows("s1", "run_1")] == ["run_1", "run_1", "run_1.1", "run_1"]
    assert [e.type for _, e in b.run_rows("s1", "run_1", after=ids[1])] == ["tool_call_finished", "run_finished"]
    [info] = b.sessions()
    assert (info.name, info.title, info.status, info.runs) == ("s1", "task", "completed", 2)
    assert b.exists("s1") and not b.exists("s2") and b.unfinished() == []
    a.append("s2", RunStarted("run_2", "s2", "killed", "m"))
    a.commit()
    assert b.unfinished() == ["s2"]


def test_session_locks_exclude_other_processes_until_released(open_store) -> None:
    a, b = open_store(), open_store()
    held = a.lock("s1")
    with pytest.raises(SessionBusy):
        b.lock("s1")
    with pytest.raises(SessionBusy):
        a.lock("s1")  # a second holder in the same process too
    assert b.is_locked("s1")
    other = b.lock("s2")  # other sessions are free
    held.release()
    b.lock("s1").release()
    other.release()


def test_a_closed_process_frees_its_sessions(open_store) -> None:
    a, b = open_store(), open_store()
    a.lock("s1")
    a.close()  # as a killed process's connection or file does
    deadline = time.monotonic() + 60  # PostgreSQL lets go when the closed connection's backend has exited
    while True:
        try:
            b.lock("s1").release()
            break
        except SessionBusy:
            assert time.monotonic() < deadline, "the lock outlived its process's connection"
            time.sleep(0.05)


def test_a_session_folds_from_either_backend(open_store) -> None:
    a = open_store()
    s = Session("chat", a)
    for event in run_events("chat", "run_1", answer="42"):
        Emitter(s).emit(event)
    s.commit()
    again = Session("chat", open_store())
    assert again.open_run is None and again.messages[0].text == "task"


def test_retention_drops_request_contents_only(open_store) -> None:
    a = open_store()
    a.append("s1", ModelRequest("run_1", 1, 2, 0, contents={"abc": {"role": "user", "content": "secret"}}))
    a.append("s1", RunFinished("run_1", "completed", "kept", 1, Usage(), 0.1))
    a.commit()
    assert a.prune(time.time() + 30 * 86400) == 1
    [(_, req), (_, end)] = a.rows("s1")
    assert req.contents is None and req.step == 1 and end.answer == "kept"


def test_retention_drops_what_sub_runs_said_and_keeps_the_conversation(open_store) -> None:
    """A plan's, a review's or a summary's reply and a sub-agent's tool calls are trace, not conversation: old
    ones lose their contents; the session's own messages stay (they are what it continues from)."""
    a = open_store()
    call = ToolCall("c1", "read_file", '{"path": "diary.txt"}')
    a.append("s1", ModelResponse("run_1.1", 1, Message.assistant("the plan: secret steps", (call,)), Usage(3, 4, 1),
                                 0.1, parent="run_1"))
    a.append("s1", ToolCallStarted("run_1.1", 1, call, parent="run_1"))
    a.append("s1", ToolCallFinished("run_1.1", 1, "c1", "read_file", "private diary text",
                                    details={"path": "diary.txt"}, parent="run_1"))
    a.append("s1", ModelResponse("run_1", 2, Message.assistant("the answer"), Usage(5, 6, 1), 0.2))
    a.commit()
    assert a.prune(time.time() - 86400) == 0  # nothing is old yet
    assert a.prune(time.time() + 30 * 86400) == 3
    assert a.prune(time.time() + 30 * 86400) == 0  # nothing left to remove
    [(_, reply), (_, started), (_, finished), (_, own)] = a.rows("s1")
    assert reply.message.text == PRUNED and not reply.message.tool_calls and reply.usage == Usage(3, 4, 1)
    assert started.call.arguments == "{}" and finished.content == PRUNED and finished.details is None
    assert own.message.text == "the answer"
    raw = "".join(str(e) for _, e in a.rows("s1"))
    assert "secret steps" not in raw and "private diary" not in raw and "diary.txt" not in raw


def test_retention_keeps_what_newer_requests_of_the_session_still_refer_to(open_store) -> None:
    """Contents are stored once, by the first request that sent them; a session continued today refers to
    them from its new requests. Pruning the old request must not take them from today's trace."""
    a = open_store()
    old = ModelRequest("run_1", 1, 2, 0, messages=("sys", "task1"), tools_ref="tools",
                       contents={"sys": {"role": "system", "content": "be brief"},
                                 "task1": {"role": "user", "content": "old task"}, "tools": []})
    a.append("s1", old)
    a.commit()
    a._db.execute("UPDATE events SET ts = ts - 30 * 86400") if hasattr(a, "_db") else \
        a._writer.execute("UPDATE events SET ts = ts - 30 * 86400")
    a.append("s1", ModelRequest("run_2", 1, 2, 0, messages=("sys", "task2"), tools_ref="tools",
                                contents={"task2": {"role": "user", "content": "new task"}}))
    a.commit()
    assert a.prune(time.time() - 86400) == 1
    [(_, first), (_, second)] = a.rows("s1")
    assert first.contents == {"sys": {"role": "system", "content": "be brief"}, "tools": []}  # still referred to
    assert second.contents == {"task2": {"role": "user", "content": "new task"}}
    assert a.prune(time.time() - 86400) == 0


def test_delete_removes_a_session(open_store) -> None:
    a = open_store()
    for event in run_events("gone", "run_1"):
        a.append("gone", event)
    for event in run_events("kept", "run_2"):
        a.append("kept", event)
    a.commit()
    a.delete("gone")
    assert a.rows("gone") == [] and not a.exists("gone") and [s.name for s in a.sessions()] == ["kept"]


def test_text_a_database_would_refuse_neither_stops_commits_nor_retention(open_store) -> None:
    a = open_store()
    a.append("s\x00nul", RunStarted("run_1", "s\x00nul", "a task with a NUL \x00 in it", "m"))
    a.append("s\x00nul", ModelRequest("run_1", 1, 2, 0, contents={"k": {"role": "tool", "content": "bytes \x00 here"}}))
    a.commit()
    a.append("ok", RunStarted("run_2", "ok", "fine", "m"))
    a.commit()  # not stuck behind the earlier rows
    assert [e.type for _, e in a.rows("ok")] == ["run_started"]
    assert a.prune(time.time() + 30 * 86400) == 1
    assert all(getattr(e, "contents", None) is None for s in a.sessions() for _, e in a.rows(s.name))


def test_a_broken_lock_connection_fences_its_sessions(postgres_url: str) -> None:
    """PostgreSQL: when the connection holding a session's lock breaks, another process may take the session;
    this one then writes none of its rows (on any connection) and reports the session lost."""
    import psycopg

    from shou.store.postgres import PostgresStore

    a, b = PostgresStore(postgres_url), PostgresStore(postgres_url)
    try:
        held = a.lock("s1")
        a.append("s1", RunStarted("run_1", "s1", "task", "m"))
        a.commit()
        pid = a._writer._conn.info.backend_pid
        with psycopg.connect(postgres_url, autocommit=True) as admin:
            admin.execute("SELECT pg_terminate_backend(%s)", (pid,))
        deadline = time.monotonic() + 60
        while True:  # the server lets go of the lock once the backend is gone
            try:
                b.lock("s1")
                break
            except SessionBusy:
                assert time.monotonic() < deadline
                time.sleep(0.05)
        assert a.lost() == {"s1"}
        a.append("s1", ToolCallFinished("run_1", 1, "c1", "nap", "written by the old holder"))
        a.append("other", RunStarted("run_2", "other", "unrelated", "m"))
        a.commit()
        assert [e.type for _, e in b.rows("s1")] == ["run_started"]  # fenced
        assert [e.type for _, e in b.rows("other")] == ["run_started"]  # other sessions go on
        held.release()  # no error: the lock went with the connection
        with pytest.raises(SessionBusy):
            a.lock("s1")  # b has it now
    finally:
        a.close()
        b.close()


def test_runs_in_flight_share_commits_and_every_log_is_whole(open_store, tmp_path: Path) -> None:
    # Group commit (store/together.py): ten runs at once on one store need far fewer transactions than ten alone,
    # and each run's log is as complete as if it ran alone.
    import asyncio

    from shou import Agent, ScriptedModel, tool

    store = open_store()
    commits = 0
    real = store.commit

    def counted() -> None:
        nonlocal commits
        commits += store.pending
        real()

    store.commit = counted

    @tool
    def double(n: int) -> int:
        """Double a number."""
        return 2 * n

    async def one(i: int) -> str:
        model = ScriptedModel([{"tool_calls": [{"name": "double", "arguments": {"n": i}}]}, {"text": f"{2 * i}"}])
        return (await Agent(model, [double], workspace=tmp_path, store=store).arun("double", f"g{i}")).answer

    async def all_at_once() -> list[str]:
        return await asyncio.gather(*(one(i) for i in range(10)))

    assert asyncio.run(all_at_once()) == [str(2 * i) for i in range(10)]
    reader = open_store()
    for i in range(10):
        kinds = [e.type for e in reader.events(f"g{i}")]
        assert kinds.count("model_request") == 2 and kinds.count("tool_call_finished") == 1, kinds
        assert kinds[-1] == "run_finished"
    assert commits < 10 * 4 / 2, f"{commits} transactions for 10 runs in flight (alone: 4 each)"
