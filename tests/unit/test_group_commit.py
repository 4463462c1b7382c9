"""Group commit (store/together.py): runs in flight on one store share transactions, and none goes on before
its own events are committed."""

from __future__ import annotations

import asyncio
import sqlite3
from pathlib import Path

import pytest

from shou import Agent, ScriptedModel, SQLiteStore, tool
from shou.store.together import Together


def _logged(db: Path, session: str, kind: str) -> int:
    """Rows of `kind` of `session` another connection sees now: what a kill -9 would leave."""
    with sqlite3.connect(db) as conn:
        return conn.execute("SELECT count(*) FROM events WHERE session = ? AND type = ?", (session, kind)).fetchone()[0]


def _counted_store(db: Path) -> tuple[SQLiteStore, list[int]]:
    """A store on `db` that counts its transactions (in the list's one item)."""
    store = SQLiteStore(db)
    transactions = [0]
    write = store._write

    def counted(rows: list) -> None:
        transactions[0] += 1
        write(rows)

    store._write = counted  # type: ignore[method-assign]
    return store, transactions


def test_concurrent_runs_share_transactions_and_each_call_is_logged_before_it_runs(tmp_path: Path) -> None:
    db = tmp_path / "s.db"
    store, transactions = _counted_store(db)
    unlogged: list[str] = []

    @tool
    def mark(session: str) -> str:
        """Note that the call ran."""
        if _logged(db, session, "tool_call_started") != 1:  # its start is durable before it has any effect
            unlogged.append(session)
        return "ok"

    async def one(i: int) -> str:
        model = ScriptedModel([{"tool_calls": [{"name": "mark", "arguments": {"session": f"s{i}"}}]}, {"text": "done"}])
        agent = Agent(model, [mark], workspace=tmp_path, store=store)
        return (await agent.arun("go", session=f"s{i}")).answer

    async def main() -> list[str]:
        return await asyncio.gather(*(one(i) for i in range(20)))

    assert asyncio.run(main()) == ["done"] * 20
    assert unlogged == []
    for i in range(20):  # the whole log of every run, as alone
        assert _logged(db, f"s{i}", "run_finished") == 1 and _logged(db, f"s{i}", "model_request") == 2
    # Alone, each run commits at its 2 requests, before its tools and at its end: 4 transactions each.
    assert transactions[0] < 20 * 4 / 2, f"{transactions[0]} transactions for 20 runs in flight"
    assert store.together is not None and store.together.running == 0


class _Log:
    """A committer that records its transactions and can fail."""

    def __init__(self) -> None:
        self.commits = 0
        self.fail: Exception | None = None

    def commit(self) -> None:
        if self.fail is not None:
            raise self.fail
        self.commits += 1


def test_a_lone_run_commits_at_once_and_a_group_commits_once() -> None:
    log = _Log()
    together = Together(log)

    async def main() -> None:
        together.enter()
        await together.commit()  # alone: before the next line, with no turn of the loop in between
        assert log.commits == 1
        together.enter()
        await asyncio.gather(*(together.commit() for _ in range(5)))
        assert log.commits == 2

    asyncio.run(main())


def test_a_failed_group_fails_every_run_in_it_and_the_next_commit_tries_again() -> None:
    log = _Log()
    together = Together(log)
    together.enter()
    together.enter()

    async def main() -> None:
        log.fail = OSError(28, "No space left on device")
        results = await asyncio.gather(*(together.commit() for _ in range(3)), return_exceptions=True)
        assert [type(r) for r in results] == [OSError] * 3
        log.fail = None
        await together.commit()
        assert log.commits == 1

    asyncio.run(main())


def test_a_run_cancelled_while_it_waits_does_not_cancel_the_others_commit() -> None:
    log = _Log()
    together = Together(log)
    together.enter()
    together.enter()

    async def main() -> None:
        first = asyncio.ensure_future(together.commit())
        second = asyncio.ensure_future(together.commit())
        await asyncio.sleep(0)  # both wait on the group now
        first.cancel()
        await second
        with pytest.raises(asyncio.CancelledError):
            await first
        assert log.commits == 1

    asyncio.run(main())


def test_a_cancel_that_comes_while_a_finished_run_s_end_waits_for_its_group_is_too_late(tmp_path: Path) -> None:
    # The run's RunFinished says `completed` the moment it is emitted; its commit then waits for the end of the
    # loop's turn (another run is in flight). A cancel from another task that lands in that wait must not make
    # the caller report `cancelled` (`shou serve` records the end it is told) while the log says `completed`.
    from shou.events import RunFinished

    db = tmp_path / "s.db"
    store = SQLiteStore(db)
    cancel_at_end: list[asyncio.Task[object]] = []

    def observer(event: object) -> None:
        if isinstance(event, RunFinished) and cancel_at_end:
            # as a cancel from another task would land: at the run's next suspension, its end's commit
            asyncio.get_running_loop().call_soon(cancel_at_end[0].cancel)

    async def main() -> str:
        slow = ScriptedModel([{"text": "later", "delay": 0.3}])
        other = asyncio.ensure_future(Agent(slow, [], workspace=tmp_path, store=store).arun("wait", session="b"))
        await asyncio.sleep(0.05)  # the other run is in flight: commits are grouped
        agent = Agent(ScriptedModel([{"text": "done"}]), [], workspace=tmp_path, store=store, observers=(observer,))
        run = asyncio.ensure_future(agent.arun("go", session="a"))
        cancel_at_end.append(run)
        try:
            result = (await run).status
        except asyncio.CancelledError:
            result = "cancelled"
        await other
        return result

    reported = asyncio.run(main())
    with sqlite3.connect(db) as conn:
        logged = conn.execute("SELECT data FROM events WHERE session = 'a' AND type = 'run_finished'").fetchall()
    assert len(logged) == 1
    assert reported in logged[0][0], f"reported {reported!r}, logged {logged[0][0]}"


def test_concurrent_streams_show_only_logged_events_and_share_transactions(tmp_path: Path) -> None:
    # What a stream's consumer (the CLI, `shou serve`) is handed is in the log already; the streams' commits
    # of one turn of the loop are one transaction.
    db = tmp_path / "s.db"
    store, transactions = _counted_store(db)
    shown_unlogged: list[str] = []

    @tool
    def mark(n: int) -> int:
        """Return n."""
        return n

    async def one(i: int) -> None:
        model = ScriptedModel([{"tool_calls": [{"name": "mark", "arguments": {"n": i}}]}, {"text": "done"}])
        agent = Agent(model, [mark], workspace=tmp_path, store=store)
        async for event in agent.stream("go", f"t{i}"):
            if event.type not in ("text_delta", "tool_call_delta") and _logged(db, f"t{i}", event.type) == 0:
                shown_unlogged.append(f"t{i}:{event.type}")

    async def main() -> None:
        await asyncio.gather(*(one(i) for i in range(10)))

    asyncio.run(main())
    assert shown_unlogged == []
    for i in range(10):
        assert _logged(db, f"t{i}", "run_finished") == 1
    # Alone, a stream commits what it shows at each of its points: at least 4 transactions a run.
    assert transactions[0] < 10 * 4 / 2, f"{transactions[0]} transactions for 10 streams in flight"


def test_a_session_let_go_of_gives_up_what_its_failed_commit_kept(tmp_path: Path) -> None:
    # A failed commit keeps its rows for the next try while their session is held; once its run stopped on the
    # failure and let go of the session, they are given up as a kill gives them up: a later commit of the store
    # (another run's) must not write them behind the back of whoever runs the session next.
    from shou import Session
    from shou.events import RunStarted

    store = SQLiteStore(tmp_path / "s.db")
    write = store._write
    full = [True]

    def disk(rows: list) -> None:
        if full[0]:
            store._buffer[:0] = rows  # what _write does when a write fails: kept for the next try
            raise sqlite3.OperationalError("database or disk is full")
        write(rows)

    store._write = disk  # type: ignore[method-assign]
    session = Session("stopped", store)
    session.acquire()
    store.append("stopped", RunStarted("run_1", "stopped", "task", "m"))
    with pytest.raises(Exception, match="full"):
        session.commit()
    assert store.pending  # kept while the session is held
    session.release()
    full[0] = False
    store.append("other", RunStarted("run_2", "other", "task", "m"))
    store.commit()
    assert list(store.events("stopped")) == [] and [e.type for e in store.events("other")] == ["run_started"]
    store.close()


def test_a_session_object_used_again_after_its_rows_were_given_up_matches_its_log(tmp_path: Path) -> None:
    # release() gives up the rows a failed commit kept (above); the Session object that folded them in must not
    # go on as if they were logged. Used again (the Python API's retry of arun() with the same object), its next
    # run was built on the given-up events: requests naming contents its log never got (`shou trace` showed them
    # pruned), messages no reload of the log has.
    from shou import Session
    from shou.trace.read import resolve, traces

    store = SQLiteStore(tmp_path / "s.db")
    write = store._write
    full = [True]

    def disk(rows: list) -> None:
        if full[0] and any(r[0] == "retried" for r in rows):
            store._buffer[:0] = rows
            raise sqlite3.OperationalError("database or disk is full")
        write(rows)

    store._write = disk  # type: ignore[method-assign]
    session = Session("retried", store)
    model = ScriptedModel([{"text": "first"}, {"text": "second"}, {"text": "third"}])
    agent = Agent(model, [], workspace=tmp_path, store=store, instructions="be brief")
    with pytest.raises(Exception, match="full"):
        agent.run("one", session=session)
    full[0] = False
    assert agent.run("two", session=session).answer in {"first", "second"}
    fresh = Session("retried", store)
    assert [m.to_wire() for m in session.messages] == [m.to_wire() for m in fresh.messages]
    calls = [c for run in traces(store, "retried") for step in run.steps for c in step.model_calls]
    resolve(store, calls)
    assert calls and all(c.pruned == 0 for c in calls), "a request names contents the log does not hold"
    store.close()


def test_a_session_let_go_of_while_its_store_cannot_be_read_reads_its_log_at_its_next_acquire(tmp_path: Path) -> None:
    # Folding the session again on release() needs the store, which may be away (why its rows were given up):
    # release() still lets go without an error of its own, and the next acquire() reads the log.
    from shou import Session
    from shou.events import RunStarted
    from shou.store.pg_link import StoreUnavailable

    store = SQLiteStore(tmp_path / "s.db")
    session = Session("down", store)
    session.acquire()
    session._write(RunStarted("run_0", "down", "kept", "m"))  # what the emitter does
    store.commit()
    session._write(RunStarted("run_1", "down", "given up", "m"))
    rows = store.rows

    def away(*args: object, **kwargs: object) -> None:
        raise StoreUnavailable("the store is away")

    store.rows = away  # type: ignore[method-assign]
    session.release()  # no error: the rows are given up, the log is read later
    store.rows = rows  # type: ignore[method-assign]
    session.acquire()
    assert session.open_run is not None and session.open_run.run_id == "run_0"
    session.release()
    store.close()
