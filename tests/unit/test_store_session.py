"""The SQLite session store, the message fold, and the repeat guard."""

from __future__ import annotations

import sqlite3
import time
from pathlib import Path

from shou.agent.guards import RepeatGuard
from shou.events import ModelResponse, RunStarted, StepFinished, ToolCallFinished
from shou.messages import ImagePart, Message, ToolCall
from shou.session import Session
from shou.store.sqlite import MIGRATIONS, SQLiteStore
from shou.usage import Usage

CALLS = [ToolCall("a", "calc", '{"x": 1}'), ToolCall("b", "calc", '{"x": 2}')]


def one_run(session: Session) -> None:
    session.record(RunStarted("r1", session.name, "compute", "m"))
    session.record(ModelResponse("r1", 1, Message.assistant(None, CALLS), Usage(1, 1, 1), 0.1))
    # results arrive out of call order
    session.record(ToolCallFinished("r1", 1, "b", "calc", "2"))
    session.record(ToolCallFinished("r1", 1, "a", "calc", "1", image=ImagePart("QUJD")))
    session.record(StepFinished("r1", 1))
    session.record(ModelResponse("r1", 2, Message.assistant("1 and 2"), Usage(1, 1, 1), 0.1))


def test_fold_keeps_tool_results_in_call_order() -> None:
    s = Session("x")
    one_run(s)
    roles = [(m.role, m.tool_call_id) for m in s.messages]
    assert roles == [("user", None), ("assistant", None), ("tool", "a"), ("tool", "b"), ("user", None),
                     ("assistant", None)]
    assert s.messages[4].images == (ImagePart("QUJD"),)  # an image travels in a user message after the results


def test_store_persists_and_a_new_store_sees_the_same_messages(tmp_path: Path) -> None:
    db = tmp_path / ".shou" / "shou.db"
    with SQLiteStore(db) as store:
        s = Session("work", store)
        one_run(s)
        expected = list(s.messages)
    with SQLiteStore(db) as again:
        assert Session("work", again).messages == expected
        [info] = again.sessions()
        assert (info.name, info.title, info.runs) == ("work", "compute", 1)
    conn = sqlite3.connect(db)
    assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    assert conn.execute("PRAGMA user_version").fetchone()[0] == len(MIGRATIONS)


def test_clear_empties_the_context_but_keeps_the_log(tmp_path: Path) -> None:
    with SQLiteStore(tmp_path / "db") as store:
        s = Session("c", store)
        one_run(s)
        s.clear()
        assert s.messages == []
        s.record(RunStarted("r2", "c", "again", "m"))
        n_events = len(list(store.events("c")))
    with SQLiteStore(tmp_path / "db") as store:
        assert [m.text for m in Session("c", store).messages] == ["again"]
        assert n_events == 8


def test_unflushed_deltas_are_committed_at_step_boundaries(tmp_path: Path) -> None:
    from shou.events import TextDelta

    store = SQLiteStore(tmp_path / "db")
    s = Session("d", store)
    s.record(RunStarted("r", "d", "t", "m"))
    s.record(TextDelta("r", 1, "he"))
    reader = sqlite3.connect(tmp_path / "db")
    count = lambda: reader.execute("SELECT COUNT(*) FROM events").fetchone()[0]  # noqa: E731
    s.record(ModelResponse("r", 1, Message.assistant("hello"), Usage(), 0.0))
    time.sleep(0.2)
    assert count() == 0  # the step's events wait in the buffer ...
    s.record(StepFinished("r", 1))
    deadline = time.monotonic() + 5
    while count() < 4 and time.monotonic() < deadline:  # ... and go to the writer thread when it ends
        time.sleep(0.01)
    assert count() == 4
    s.record(TextDelta("r", 2, "more"))
    s.flush()  # flush() waits for everything appended
    assert count() == 5
    store.close()


def test_repeat_guard_warns_at_three_and_stops_at_four() -> None:
    g = RepeatGuard(3)
    same = ToolCall("1", "calc", '{"a": 1, "b": 2}')
    reordered = ToolCall("2", "calc", '{"b": 2, "a": 1}')
    assert [g.check(same), g.check(reordered), g.check(same), g.check(same)] == ["ok", "ok", "warn", "stop"]
    g2 = RepeatGuard(3)
    assert [g2.check(same), g2.check(same), g2.check(ToolCall("3", "calc", "{}")), g2.check(same)] == ["ok"] * 4
