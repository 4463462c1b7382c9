"""The SQLite session store, the message fold, and the repeat guard."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from shou.agent.emitter import Emitter
from shou.agent.guards import RepeatGuard
from shou.events import ModelResponse, RunStarted, StepFinished, ToolCallFinished
from shou.messages import ImagePart, Message, ToolCall
from shou.session import Session
from shou.store.sqlite import MIGRATIONS, SQLiteStore
from shou.usage import Usage

CALLS = [ToolCall("a", "calc", '{"x": 1}'), ToolCall("b", "calc", '{"x": 2}')]


def one_run(session: Session) -> None:
    Emitter(session).emit(RunStarted("r1", session.name, "compute", "m"))
    Emitter(session).emit(ModelResponse("r1", 1, Message.assistant(None, CALLS), Usage(1, 1, 1), 0.1))
    # results arrive out of call order
    Emitter(session).emit(ToolCallFinished("r1", 1, "b", "calc", "2"))
    Emitter(session).emit(ToolCallFinished("r1", 1, "a", "calc", "1", image=ImagePart("QUJD")))
    Emitter(session).emit(StepFinished("r1", 1))
    Emitter(session).emit(ModelResponse("r1", 2, Message.assistant("1 and 2"), Usage(1, 1, 1), 0.1))


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
        Emitter(s).clear()
        assert s.messages == []
        Emitter(s).emit(RunStarted("r2", "c", "again", "m"))
        n_events = len(list(store.events("c")))
    with SQLiteStore(tmp_path / "db") as store:
        assert [m.text for m in Session("c", store).messages] == ["again"]
        assert n_events == 8


def test_events_are_durable_at_commit_and_fragments_are_never_stored(tmp_path: Path) -> None:
    from shou.events import TextDelta, ToolCallDelta

    store = SQLiteStore(tmp_path / "db")
    s = Session("d", store)
    reader = sqlite3.connect(tmp_path / "db")  # another process's view of the file
    count = lambda: reader.execute("SELECT COUNT(*) FROM events").fetchone()[0]  # noqa: E731
    Emitter(s).emit(RunStarted("r", "d", "t", "m"))
    Emitter(s).emit(TextDelta("r", 1, "he"))
    Emitter(s).emit(ToolCallDelta("r", 1, 0, "calc", "{"))
    assert count() == 0 and store.pending  # appended, not yet written
    s.commit()
    assert count() == 1 and not store.pending  # written in the caller's thread: no waiting on a writer
    Emitter(s).emit(ModelResponse("r", 1, Message.assistant("hello"), Usage(), 0.0))
    Emitter(s).emit(StepFinished("r", 1))
    s.commit()
    assert [r[0] for r in reader.execute("SELECT type FROM events ORDER BY id")] == [
        "run_started", "model_response", "step_finished"]
    assert reader.execute("SELECT status FROM sessions").fetchone()[0] == "running"
    store.close()


def test_a_killed_run_is_open_and_closing_it_answers_every_call(tmp_path: Path) -> None:
    from shou.events import ToolCallStarted

    with SQLiteStore(tmp_path / "db") as store:
        s = Session("k", store)
        Emitter(s).emit(RunStarted("r", "k", "do two things", "m"))
        Emitter(s).emit(ModelResponse("r", 1, Message.assistant(None, CALLS), Usage(2, 3, 1), 0.1))
        Emitter(s).emit(ToolCallStarted("r", 1, CALLS[0]))
        Emitter(s).emit(ToolCallStarted("r", 1, CALLS[1]))
        Emitter(s).emit(ToolCallFinished("r", 1, "a", "calc", "1"))
        s.commit()  # ... and the process dies here, with call b running
    with SQLiteStore(tmp_path / "db") as store:
        s = Session("k", store)
        run = s.open_run
        assert run is not None and run.run_id == "r" and run.step == 1 and run.task == "do two things"
        assert [c.id for c in run.unanswered] == ["b"] and run.started == {"a", "b"}
        assert store.unfinished() == ["k"] and store.sessions()[0].status == "running"
        Emitter(s).close_interrupted()
        assert s.open_run is None and store.sessions()[0].status == "interrupted"
        [result] = [m for m in s.messages if m.role == "tool" and m.tool_call_id == "b"]
        assert "interrupted" in result.text and "outcome is unknown" in result.text
    with SQLiteStore(tmp_path / "db") as store:  # the repair was stored: the next process sees it too
        assert Session("k", store).open_run is None and store.unfinished() == []


def test_one_process_at_a_time_per_session(tmp_path: Path) -> None:
    import subprocess
    import sys

    from shou.store.sqlite import SessionBusy

    with SQLiteStore(tmp_path / "db") as store:
        s = Session("busy", store)
        s.acquire()
        holder = subprocess.run([sys.executable, "-c", (
            "import sys; from shou.store.sqlite import SQLiteStore, SessionBusy\n"
            f"store = SQLiteStore({str(tmp_path / 'db')!r})\n"
            "try:\n    store.lock('busy')\nexcept SessionBusy as e:\n    print('BUSY', e)\n"
            "store.lock('other').release(); print('OTHER OK')")], capture_output=True, text=True, timeout=30)
        assert "BUSY" in holder.stdout and "another shou process" in holder.stdout
        assert "OTHER OK" in holder.stdout
        assert store.is_locked("busy")
        s.release()
        assert not store.is_locked("busy")
        store.lock("busy").release()
        try:
            s.acquire()
            s2 = Session("busy", store)
            try:
                s2.acquire()
                raise AssertionError("a second holder in one process must be refused too")
            except SessionBusy:
                pass
        finally:
            s.release()


def test_repeat_guard_warns_at_three_and_stops_at_four() -> None:
    g = RepeatGuard(3)
    same = ToolCall("1", "calc", '{"a": 1, "b": 2}')
    reordered = ToolCall("2", "calc", '{"b": 2, "a": 1}')
    assert [g.check(same), g.check(reordered), g.check(same), g.check(same)] == ["ok", "ok", "warn", "stop"]
    g2 = RepeatGuard(3)
    assert [g2.check(same), g2.check(same), g2.check(ToolCall("3", "calc", "{}")), g2.check(same)] == ["ok"] * 4


def test_session_names_made_in_one_second_do_not_collide() -> None:
    from shou.session import new_session_name

    names = [new_session_name() for _ in range(20_000)]
    assert len(set(names)) == len(names)


def test_a_killed_run_counts_what_its_sub_runs_spent_and_its_sub_ids_go_on(tmp_path: Path) -> None:
    """A planned run killed mid-step: the plan call, the step's calls and a summary were spent by the run, and a
    resumed run's budget must start from all of it; its next sub-run takes a new id, not `run_1.1` again."""
    from shou import Agent
    from shou.agent.loop import Run
    from shou.events import Compacted, ModelRequest, Notice
    from shou.models.scripted import ScriptedModel

    with SQLiteStore(tmp_path / "db") as store:
        s = Session("p", store)
        Emitter(s).emit(RunStarted("run_1", "p", "plan it", "m"))
        Emitter(s).emit(ModelResponse("run_1.1", 1, Message.assistant("plan"), Usage(100, 10, 1), 0.1, parent="run_1"))
        Emitter(s).emit(ModelRequest("run_1.2", 1, 1, 0, parent="run_1"))
        Emitter(s).emit(ModelResponse("run_1.2", 1, Message.assistant(None, CALLS), Usage(200, 20, 1), 0.1,
                               parent="run_1"))
        Emitter(s).emit(Notice("run_1.2", 1, "retry", "cut", Usage(50, 5, 0, True), parent="run_1"))
        Emitter(s).emit(ModelResponse("run_1.3", 1, Message.assistant("summary"), Usage(300, 30, 1), 0.1,
                                      parent="run_1"))
        Emitter(s).emit(Compacted("run_1", "summary", 1, 100, 10, Usage(300, 30, 1), "m", 0.1, calls=("mc_x",)))
        Emitter(s).emit(ModelResponse("other_9.1", 1, Message.assistant("x"), Usage(7, 7, 1), 0.1, parent="other_9"))
        s.commit()
    with SQLiteStore(tmp_path / "db") as store:
        s = Session("p", store)
        run = s.open_run
        assert run is not None and run.usage.total_tokens == 110 + 220 + 55 + 330 and run.subs == 3
        assert s.spent.total_tokens == 110 + 220 + 55 + 330 + 14  # the session's: the summary counted once
        resumed = Run(Agent(ScriptedModel([{"text": "ok"}]), [], workspace=tmp_path), run.task, s,
                      lambda e: None, resume=run)
        assert resumed.usage.total_tokens == 715 and resumed.sub_id() == "run_1.4"


def test_a_call_a_killed_process_left_under_way_counts_at_its_worst_case(tmp_path: Path) -> None:
    from shou import Agent
    from shou.events import ModelRequest, Notice
    from shou.models.scripted import ScriptedModel
    from shou.pricing import PriceTable

    with SQLiteStore(tmp_path / "db") as store:
        s = Session("u", store)
        Emitter(s).emit(RunStarted("run_1", "u", "task", "m"))
        Emitter(s).emit(ModelRequest("run_1", 1, 1, 0, 1000, "mc_1", "m", "p", params={"max_tokens": 500}))
        Emitter(s).emit(ModelRequest("run_1.1", 1, 1, 0, 200, "mc_2", "m", "p", parent="run_1"))  # a child's, too
        s.commit()  # ... killed while both were streaming
    with SQLiteStore(tmp_path / "db") as store:
        s = Session("u", store)
        agent = Agent(ScriptedModel([{"text": "ok"}]), [], workspace=tmp_path, store=store,
                      prices=PriceTable({"m": {"input_price": 1.0, "output_price": 2.0}}))
        run = agent._new_run("", s, True, lambda e: None)
        assert run.usage.total_tokens == 1000 + 500 + 200 and run.usage.estimated
        assert run.usage.cost == pytest.approx((1200 * 1.0 + 500 * 2.0) / 1e6)
        notices = [e for e in store.events("u") if isinstance(e, Notice) and e.kind == "unanswered"]
        assert {n.run_id for n in notices} == {"run_1", "run_1.1"} and s.unanswered_requests() == []
        s.commit()
    with SQLiteStore(tmp_path / "db") as store:  # counted once: the notices end those calls
        assert Session("u", store).unanswered_requests() == []


@pytest.mark.parametrize("field", [{"tokens": "lots"}, {"tokens": [1]}, {"model": {"x": 1}}, {"params": [1, 2]},
                                   {"messages": "abc"}, {"step": 1.5}])
def test_a_planted_row_of_the_wrong_shape_is_left_out_not_a_crash_later(tmp_path: Path, field: dict) -> None:
    """A cloned repository may ship `.shou/shou.db`: a field of the wrong kind makes its row undecodable (as
    damage is), so resuming or continuing the session cannot crash on it."""
    import json

    from shou import Agent
    from shou.event_codec import event_from_dict
    from shou.models.scripted import ScriptedModel

    request = {"type": "model_request", "run_id": "run_p", "step": 1, "message_count": 1, "tool_count": 0,
               "tokens": 10, "model": "m", **field}
    with pytest.raises(ValueError):
        event_from_dict(request)
    with SQLiteStore(tmp_path / "db") as store:
        s = Session("p", store)
        Emitter(s).emit(RunStarted("run_p", "p", "task", "m"))
        s.commit()
        store._db.execute("INSERT INTO events (session, run_id, type, ts, data) VALUES ('p', 'run_p', "
                          "'model_request', 0, ?)", (json.dumps(request),))
    with SQLiteStore(tmp_path / "db") as store:
        s = Session("p", store)
        agent = Agent(ScriptedModel([{"text": "ok"}]), [], workspace=tmp_path, store=store)
        assert agent._new_run("", s, True, lambda e: None).run_id == "run_p"


def test_the_writing_connection_keeps_a_small_page_cache(tmp_path: Path) -> None:
    # An append-only log needs few pages cached; SQLite's default 2 MB a connection was memory held per process
    # for pages written once (issue 35). The log still reads back whole past what the cache holds.
    from shou.store.sqlite_open import CACHE_KIB

    store = SQLiteStore(tmp_path / "shou.db")
    assert store._db.execute("PRAGMA cache_size").fetchone()[0] == -CACHE_KIB
    assert 0 < CACHE_KIB < 2000
    session = Session("big", store)
    for i in range(300):  # well past 256 KiB of pages
        Emitter(session).emit(StepFinished(f"r{i}", 1))
        Emitter(session).emit(ModelResponse(f"r{i}", 1, Message.assistant("x" * 2000), Usage(1, 1, 1), 0.1))
    session.commit()
    assert len(store.rows("big")) == 600
