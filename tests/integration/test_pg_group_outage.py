"""Group commit (store/together.py) on PostgreSQL when the database goes away: while runs wait for their group,
while a group's transaction is in flight, and for a moment only (back before the runs' next commit).

Ten runs at once on one `PostgresStore`, a scripted model over real HTTP, and a tool whose every call is a side
effect (`step`, not idempotent). Whatever the moment, the rule the log is for holds: no run hangs, a run that
cannot commit stops with shou's own error (`StoreUnavailable`, never a raw psycopg one), no effect happens whose
`tool_call_started` is not in the log, and once the database is back every session is resumed to `completed`
with each logged call's effect exactly once (a started call is reported as interrupted, never run blindly again).

Every wait is on an event or on a condition of the database (a statement waiting on a lock), never on time;
`HANG` bounds them only to turn a hang into a failure.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from shou import Agent, Session, ToolContext, tool
from shou.events import RunStarted, ToolCallFinished
from shou.models.openai_compat import OpenAICompatible
from shou.models.runtime import RetryPolicy
from shou.store.together import Together

from ..fixtures.postgres import PostgresServer, pg_bindir, start_postgres

psycopg = pytest.importorskip("psycopg")
pytestmark = pytest.mark.skipif(pg_bindir() is None, reason="PostgreSQL is not installed")

from shou.store.pg_link import StoreUnavailable  # noqa: E402  (after the skip: psycopg may be missing)
from shou.store.postgres import PostgresStore  # noqa: E402

RUNS = 10
HANG = 120.0  # seconds: a hang detector, never a speed assertion
SESSIONS = [f"s{i}" for i in range(RUNS)]
# Each session's conversation: two steps, each a call of `step`, then the answer. Answered by the turn the
# conversation has reached, so a resumed run gets the turn it would have got.
SCRIPT = [{"tool_calls": [{"name": "step", "arguments": {"n": 1}}]},
          {"tool_calls": [{"name": "step", "arguments": {"n": 2}}]},
          {"text": "done"}]


@pytest.fixture
def pg() -> Iterator[PostgresServer]:
    """A cluster of the test's own: it is stopped and started under the runs."""
    server = start_postgres()
    yield server
    server.stop()


class Job:
    """The runs' shared world: every side effect of `step` (session, n) in order, and the gates of a scenario.

    `step(n=1)` of every session but s0 records its effect, then waits for `release`; s0's first step is the
    scenario's `trigger` (run on the tool's worker thread), called once all the others are inside theirs."""

    def __init__(self, trigger: Callable[[], None] | None = None,
                 effects: list[tuple[str, int]] | None = None) -> None:
        self.effects: list[tuple[str, int]] = [] if effects is None else effects
        self.changed = threading.Condition()
        self.release = threading.Event()
        self.trigger = trigger

    def tool(self) -> Any:
        @tool
        def step(n: int, ctx: ToolContext) -> str:
            """Do one step of the job (each call is an effect of its own: not idempotent)."""
            with self.changed:
                self.effects.append((ctx.session, n))
                self.changed.notify_all()
            if n == 1 and self.trigger is not None:
                if ctx.session == "s0":
                    self.wait_for(lambda: self.inside() == RUNS - 1)
                    self.trigger()
                else:
                    assert self.release.wait(HANG), "never released"
            return f"step {n} done"

        return step

    def inside(self) -> int:
        """How many sessions other than s0 are in (or past) their first step."""
        return sum(1 for s, n in self.effects if n == 1 and s != "s0")

    def wait_for(self, ready: Callable[[], bool]) -> None:
        with self.changed:
            assert self.changed.wait_for(ready, HANG), "the runs never got there"


def agent_on(store: PostgresStore, srv: Any, job: Job, workspace: Path) -> Agent:
    model = OpenAICompatible("m", base_url=srv.base_url, retry=RetryPolicy(max_retries=1, base=0.01))
    return Agent(model, [job.tool()], workspace=workspace, store=store)


async def all_runs(agent: Agent, sessions: list[Any] = SESSIONS) -> list[Any]:
    """Every session's run at once; what each returned or raised."""
    runs = asyncio.gather(*(agent.arun("do the job", s) for s in sessions), return_exceptions=True)
    return await asyncio.wait_for(runs, HANG)


async def resume_all(agent: Agent, sessions: list[str]) -> list[Any]:
    return await asyncio.wait_for(asyncio.gather(*(agent.aresume(s) for s in sessions)), HANG)


def resume_to_the_end(fresh: PostgresStore, url: str, srv: Any, job: Job, workspace: Path) -> None:
    """Resume every session on `fresh`: each ends `completed`, its log whole, each effect done once."""
    done = asyncio.run(resume_all(agent_on(fresh, srv, Job(effects=job.effects), workspace), SESSIONS))
    assert [(r.status, r.answer) for r in done] == [("completed", "done")] * RUNS
    assert_whole_and_once(PostgresStore(url), job.effects)


def waiting_writer(watch: Any, other_than: int = 0) -> int:
    """The backend pid of a write of the event log waiting on a lock (other than `other_than`), once there is one.
    `watch` is an autocommit connection: inside a transaction, pg_stat_activity would be a snapshot."""
    deadline = time.monotonic() + HANG
    while True:  # a condition of the server, polled: no event can tell us
        found = watch.execute("SELECT pid FROM pg_stat_activity WHERE wait_event_type = 'Lock' AND query LIKE "
                              "'%%INSERT INTO events%%' AND pid NOT IN (pg_backend_pid(), %s)",
                              (other_than,)).fetchone()
        if found:
            return int(found[0])
        assert time.monotonic() < deadline, "no write of the log ever waited"
        time.sleep(0.01)


def halt_while_a_write_waits(pg: PostgresServer, url: str, then: Callable[[], None], drop_first: bool = False) -> None:
    """Hold the event table so the next write of the log waits at the server; `then()` (which lets runs go on
    to write); once a write waits, stop the database under it. With `drop_first`, the waiting write's connection
    is dropped first, and the database stopped under the write's retry on a new connection."""
    with contextlib.ExitStack() as stack:
        stack.enter_context(contextlib.suppress(psycopg.OperationalError))  # the halt drops our connections
        admin = stack.enter_context(psycopg.connect(url, autocommit=True))
        watch = stack.enter_context(psycopg.connect(url, autocommit=True))
        admin.execute("BEGIN")
        admin.execute("LOCK TABLE events IN SHARE MODE")  # inserts wait; reads go on
        then()
        writer = waiting_writer(watch)
        if drop_first:
            watch.execute("SELECT pg_terminate_backend(%s)", (writer,))
            waiting_writer(watch, other_than=writer)
        pg.halt("immediate")  # a crash: with a fast stop the waiting write could finish as our lock goes


def halting(pg: PostgresServer, url: str, drop_first: bool = False) -> tuple[threading.Thread, list[BaseException]]:
    """`halt_while_a_write_waits` on a thread of its own, returned once the table is held, with what the thread
    raises (kept for the test, not lost with the thread)."""
    locked = threading.Event()
    failed: list[BaseException] = []

    def work() -> None:
        try:
            halt_while_a_write_waits(pg, url, locked.set, drop_first)
        except BaseException as e:
            failed.append(e)
            locked.set()

    thread = threading.Thread(target=work)
    thread.start()
    assert locked.wait(HANG) and not failed, failed
    return thread, failed


def logged_starts(store: PostgresStore, session: str) -> list[int]:
    return [json.loads(e.call.arguments)["n"] for e in store.events(session) if e.type == "tool_call_started"]


def assert_every_effect_was_logged_first(store: PostgresStore, effects: list[tuple[str, int]]) -> None:
    for session, n in effects:
        assert n in logged_starts(store, session), f"{session} step {n} ran without its start in the log"


def assert_whole_and_once(store: PostgresStore, effects: list[tuple[str, int]],
                          sessions: list[str] = SESSIONS) -> None:
    """Every session ended `completed` with nothing after its end, no call answered twice, and each logged
    call's effect happened exactly once."""
    assert Counter(effects) == Counter((s, n) for s in sessions for n in (1, 2)), sorted(effects)
    statuses = {info.name: info.status for info in store.sessions()}
    for session in sessions:
        events = list(store.events(session))
        assert events[-1].type == "run_finished" and events[-1].status == "completed", [e.type for e in events]
        assert [e.type for e in events].count("run_started") == 1
        finished = [e.call_id for e in events if e.type == "tool_call_finished"]
        assert len(finished) == len(set(finished)), f"{session}: a call answered twice"
        assert sorted(logged_starts(store, session)) == [1, 2]
        assert statuses[session] == "completed"


def assert_clean_failures(results: list[Any]) -> None:
    """Every run stopped with shou's error for a database away, none with psycopg's own."""
    for result in results:
        assert isinstance(result, StoreUnavailable), repr(result)
        assert not isinstance(result, psycopg.Error) and "PostgreSQL" in str(result), repr(result)


def test_a_database_stopped_while_runs_wait_for_their_group_stops_them_cleanly_and_they_resume_once(
        pg: PostgresServer, serve, workspace: Path) -> None:
    # s0's first step stops the database while the other nine, released from theirs, wait for the group that
    # commits their results and next requests: that group's transaction is in flight (held at the server by a
    # table lock) when the server goes.
    url = pg.database("waiting")
    srv = serve(SCRIPT, turn_by="history")
    job = Job()
    job.trigger = lambda: halt_while_a_write_waits(pg, url, job.release.set)
    store = PostgresStore(url)
    results = asyncio.run(all_runs(agent_on(store, srv, job, workspace)))
    assert_clean_failures(results)
    assert sorted(job.effects) == sorted((s, 1) for s in SESSIONS)  # nothing ran past the outage
    pg.start()
    fresh = PostgresStore(url)
    try:
        assert_every_effect_was_logged_first(fresh, job.effects)
        assert sorted(fresh.unfinished()) == SESSIONS  # logged as running: to be resumed
        store.close()  # the first store, still holding what its failed group could not write: nothing of it lands
        resume_to_the_end(fresh, url, srv, job, workspace)
    finally:
        fresh.close()


def test_a_database_back_before_the_runs_next_commit_stops_them_before_any_unlogged_effect(
        pg: PostgresServer, serve, workspace: Path) -> None:
    # s0's first step stops the database and starts it again while the other nine are inside their first step.
    # Every session lock went with the old connections (another process may hold them now): no run may go on
    # as if its commits landed, so none may reach a second step whose start is not in the log.
    url = pg.database("blip")
    srv = serve(SCRIPT, turn_by="history")
    job = Job()

    def blip() -> None:
        pg.halt()
        pg.start()
        job.release.set()

    job.trigger = blip
    store = PostgresStore(url)
    results = asyncio.run(all_runs(agent_on(store, srv, job, workspace)))
    fresh = PostgresStore(url)
    try:
        assert_every_effect_was_logged_first(fresh, job.effects)
        assert_clean_failures(results)
        store.close()
        resume_to_the_end(fresh, url, srv, job, workspace)
    finally:
        fresh.close()


def test_an_outage_while_a_group_s_transaction_is_in_flight_fails_the_group_and_writes_none_of_it_later(
        pg: PostgresServer, serve, workspace: Path) -> None:
    # The runs' first commits (their tasks and first requests: the transaction that also records the sessions)
    # share one group; it waits at the server behind a table lock when another thread stops the database.
    url = pg.database("inflight")
    srv = serve(SCRIPT, turn_by="history")
    job = Job()
    store = PostgresStore(url)
    grouped: list[int] = []
    write = store._write

    def watched(db: Any, rows: list[Any]) -> None:
        grouped.append(len({r[0] for r in rows}))  # sessions in the transaction
        write(db, rows)

    store._write = watched  # type: ignore[method-assign]
    # New sessions: nothing is read before their first commit (a read writes the buffer first, outside the group).
    sessions = [Session(None, store) for _ in range(RUNS)]
    names = [s.name for s in sessions]
    halter, failed = halting(pg, url)
    store.together.enter()  # one more run in flight: the first run to commit waits for the group too
    try:
        results = asyncio.run(all_runs(agent_on(store, srv, job, workspace), sessions))
    finally:
        store.together.leave()
    halter.join(HANG)
    assert not failed and not halter.is_alive()
    assert_clean_failures(results)
    assert grouped[0] >= 2 and job.effects == [], grouped  # a group's transaction was in flight; no step ran
    pg.start()
    try:
        assert store.sessions() == []  # the same store works again, and nothing of the failed group landed
        done = asyncio.run(all_runs(agent_on(store, srv, job, workspace), names))  # run again on the same store
        assert [(r.status, r.answer) for r in done] == [("completed", "done")] * RUNS
    finally:
        store.close()
    assert_whole_and_once(PostgresStore(url), job.effects, names)


def test_a_run_cancelled_while_its_group_waits_with_the_database_down_wedges_no_other(
        pg: PostgresServer, serve, workspace: Path) -> None:
    url = pg.database("cancelled")
    srv = serve(SCRIPT, turn_by="history")
    job = Job()

    def down() -> None:
        pg.halt()
        job.release.set()

    job.trigger = down
    store = PostgresStore(url)
    cancelled: list[asyncio.Task[Any]] = []
    waiting: list[asyncio.Task[Any]] = []

    class CancelOne(Together):
        """Cancels one run waiting for the first group that commits with the database down."""

        async def commit(self) -> None:
            task = asyncio.current_task()
            if task is not None and self.running > 1:
                waiting.append(task)
            await super().commit()

        def _commit_group(self) -> None:
            if not cancelled and job.release.is_set() and waiting:
                cancelled.append(waiting[-1])
                waiting[-1].cancel()  # it waits for this group, shielded
            super()._commit_group()

    store.together = CancelOne(store)
    results = asyncio.run(all_runs(agent_on(store, srv, job, workspace)))
    assert len(cancelled) == 1
    # The others are told the database is away, each, as they would have been had they run alone. The cancelled
    # run could not log its cancellation: it stops as a kill would, and says why (StoreUnavailable, as it does
    # now) or that it was cancelled; either way it is resumed from its log below.
    stopped = [r for r in results if not isinstance(r, StoreUnavailable)]
    assert all(isinstance(r, asyncio.CancelledError) for r in stopped) and len(stopped) <= 1, results
    assert_clean_failures([r for r in results if r not in stopped])
    pg.start()
    fresh = PostgresStore(url)
    try:
        assert_every_effect_was_logged_first(fresh, job.effects)
        store.close()
        resume_to_the_end(fresh, url, srv, job, workspace)
    finally:
        fresh.close()


def test_a_failed_group_keeps_its_rows_for_the_next_commit_except_those_of_a_lost_session(
        pg: PostgresServer) -> None:
    # store/together.py: a failed transaction fails every run of its group and keeps the rows for the next try.
    # On PostgreSQL too, but for a session whose lock went with the connection (written on no other).
    url = pg.database("kept")
    store = PostgresStore(url)
    held = Session("held", store)
    held.acquire()
    for name in ("a", "b", "held"):
        store.append(name, RunStarted(f"run_{name}", name, "task", "m"))
        store.append(name, ToolCallFinished(f"run_{name}", 1, "c1", "step", "ok"))

    async def group() -> list[Any]:
        for _ in range(3):
            store.together.enter()
        try:
            asks = asyncio.gather(*(store.together.commit() for _ in range(3)), return_exceptions=True)
            return await asyncio.wait_for(asks, HANG)
        finally:
            for _ in range(3):
                store.together.leave()

    pg.halt()
    try:
        failed = asyncio.run(group())
        assert_clean_failures(failed)  # each of the group learns it
        assert store.pending  # kept for the next try
        with pytest.raises(StoreUnavailable):
            store.commit()  # still away: still kept
        assert store.pending
    finally:
        pg.start()
    store.commit()  # the next try, on a new connection: the held session's lock went with the old one
    with pytest.raises(StoreUnavailable, match="shou resume held"):
        held.commit()  # its run must stop before its next effect
    reader = PostgresStore(url)
    try:
        for name in ("a", "b"):
            assert [e.type for e in reader.events(name)] == ["run_started", "tool_call_finished"]
        assert list(reader.events("held")) == []
    finally:
        held.release()
        reader.close()
        store.close()


def test_a_connection_dropped_then_an_outage_during_the_retry_is_still_shou_s_error(pg: PostgresServer) -> None:
    # A commit whose connection drops is tried once more on a new one (store/pg_link.py `Link.run`); when the
    # database goes away during that retry, the commit must fail as any outage does, not with psycopg's error.
    url = pg.database("retry")
    store = PostgresStore(url)
    store.append("a", RunStarted("run_a", "a", "task", "m"))
    dropper, failed = halting(pg, url, drop_first=True)
    try:
        with pytest.raises(StoreUnavailable) as raised:
            store.commit()
        assert not isinstance(raised.value, psycopg.Error) and "PostgreSQL" in str(raised.value)
        dropper.join(HANG)
        assert not failed
        assert store.pending  # kept for the next try
    finally:
        pg.start()
    store.commit()
    reader = PostgresStore(url)
    try:
        assert [e.type for e in reader.events("a")] == ["run_started"]
    finally:
        reader.close()
        store.close()

