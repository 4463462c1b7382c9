"""A commit that landed at the server but whose answer never came back (the connection broke on the way): the
client cannot know whether it landed. PostgreSQL's store (store/postgres.py) writes such rows again, each row's
`uid` making the second write skip what landed; and when the connection that broke held session locks, the
runs of those sessions stop (`SessionLost`) before their next effect, their landed rows kept, and are resumed
from the log with nothing written twice and no effect repeated.

A proxy in front of a real PostgreSQL (tests/fixtures/pg_proxy.py) drops the answer of the one commit that
holds a marker, after the server committed it. Every wait is on an event; `HANG` only turns a hang into a failure.
"""

from __future__ import annotations

import asyncio
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest

from shou.events import RunStarted, ToolCallFinished

from ..fixtures.pg_proxy import CuttingProxy
from ..fixtures.postgres import PostgresServer, pg_bindir
from .test_pg_group_outage import (
    HANG,
    RUNS,
    SCRIPT,
    SESSIONS,
    Job,
    agent_on,
    all_runs,
    assert_clean_failures,
    logged_starts,
    pg,  # noqa: F401  (the fixture: a cluster of the test's own)
    resume_all,
)

psycopg = pytest.importorskip("psycopg")
pytestmark = pytest.mark.skipif(pg_bindir() is None, reason="PostgreSQL is not installed")

from shou.store.pg_link import SessionLost, StoreUnavailable  # noqa: E402  (after the skip: psycopg may be missing)
from shou.store.postgres import PostgresStore  # noqa: E402


@pytest.fixture
def proxy(pg: PostgresServer) -> Iterator[CuttingProxy]:  # noqa: F811
    cutting = CuttingProxy(pg.socket_dir)
    yield cutting
    cutting.close()


def rows_of(url: str, session: str) -> list[tuple[str, str]]:
    """`(type, data)` of every row of `session`, straight from the table (duplicates included)."""
    with psycopg.connect(url, autocommit=True) as conn:
        return [(t, d) for t, d in conn.execute("SELECT type, data FROM events WHERE session = %s ORDER BY id",
                                                (session,))]


def test_a_lost_answer_is_written_again_and_the_rows_that_landed_are_not_doubled(
        pg: PostgresServer, proxy: CuttingProxy) -> None:  # noqa: F811
    pg.database("again")
    store = PostgresStore(proxy.url("again"))
    try:
        for name in ("a", "b"):  # no session lock: nothing to lose with the connection, so the commit is retried
            store.append(name, RunStarted(f"run_{name}", name, "task", "m"))
            store.append(name, ToolCallFinished(f"run_{name}", 1, "c1", "step", f"ok {name}"))
        proxy.cut_after(b"ok b")
        store.commit()  # the answer is lost; the retry on a new connection skips the rows that landed
        assert proxy.cut.is_set()
        # The usual batch (no session's start or end in it): one statement, its rows' ids in the answer that is lost.
        store.append("a", ToolCallFinished("run_a", 2, "c2", "step", "ok a2"))
        store.append("b", ToolCallFinished("run_b", 2, "c2", "step", "ok b2"))
        proxy.cut_after(b"ok b2")
        store.commit()
        assert proxy.cut.is_set()
        direct = f"postgresql://postgres@/again?host={pg.socket_dir}"
        for name in ("a", "b"):
            assert [t for t, _ in rows_of(direct, name)] == ["run_started", "tool_call_finished", "tool_call_finished"]
            with psycopg.connect(direct, autocommit=True) as conn:
                last = conn.execute("SELECT max(id) FROM events WHERE session = %s", (name,)).fetchone()[0]
            assert store.committed[name] == last  # what a stream is told is stored, though the retry wrote none
        assert {i.name: i.status for i in store.sessions()} == {"a": "running", "b": "running"}
    finally:
        store.close()


@pytest.mark.parametrize("runs", [1, RUNS])
def test_runs_whose_commit_landed_unanswered_stop_before_their_next_effect_and_resume_once(
        pg: PostgresServer, proxy: CuttingProxy, serve, workspace: Path, runs: int) -> None:  # noqa: F811
    # The commit that logs the first call of `step` (with the model's answer that asked for it) lands, and its
    # answer is lost. The connection that broke held the session locks, so every run of that commit stops with
    # `SessionLost` before the call (another process may run the session now), and is resumed from its log: the
    # call is reported as interrupted (its start is logged, its outcome unknown), never run blindly.
    sessions = SESSIONS[:runs]
    pg.database("landed")
    direct = f"postgresql://postgres@/landed?host={pg.socket_dir}"
    srv = serve(SCRIPT, turn_by="history")
    job = Job()
    store = PostgresStore(proxy.url("landed"))
    proxy.cut_after(b"\"type\":\"tool_call_started\"")  # a row of the log, not a query that names the type
    results = asyncio.run(all_runs(agent_on(store, srv, job, workspace), sessions))
    assert proxy.cut.wait(HANG)
    stopped = [r for r in results if isinstance(r, SessionLost)]
    assert stopped, results  # at least the runs of the commit that landed unanswered
    assert_clean_failures([r for r in results if not hasattr(r, "status")])
    landed = [s for s in sessions if logged_starts(PostgresStore(direct), s)]
    assert landed and len(stopped) >= len(landed)
    for session in landed:  # logged once, and its call never ran
        assert logged_starts(PostgresStore(direct), session) == [1]
        assert (session, 1) not in job.effects
    assert_every_effect_logged(direct, job.effects)
    before = {s: rows_of(direct, s) for s in sessions}
    store.close()  # what the first store still holds of the lost sessions is never written
    assert {s: rows_of(direct, s) for s in sessions} == before
    fresh = PostgresStore(direct)
    try:
        unfinished = sorted(fresh.unfinished())
        done = asyncio.run(resume_all(agent_on(fresh, srv, Job(effects=job.effects), workspace), unfinished))
        assert [(r.status, r.answer) for r in done] == [("completed", "done")] * len(unfinished)
        for session in sessions:
            rows = rows_of(direct, session)
            assert len({d for _, d in rows}) == len(rows), f"{session}: a row written twice"
            types = [t for t, _ in rows]
            assert types.count("run_started") == 1 and types[-1] == "run_finished"
            assert sorted(logged_starts(fresh, session)) == [1, 2]
            ran = Counter(n for s, n in job.effects if s == session)
            assert ran == (Counter({2: 1}) if session in landed else Counter({1: 1, 2: 1})), job.effects
            interrupted = [e for e in fresh.events(session) if e.type == "tool_call_finished"
                           and "outcome is unknown" in e.content]
            assert len(interrupted) == (1 if session in landed else 0)
    finally:
        fresh.close()


def assert_every_effect_logged(url: str, effects: list[tuple[str, int]]) -> None:
    store = PostgresStore(url)
    try:
        for session, n in effects:
            assert n in logged_starts(store, session), f"{session} step {n} ran without its start in the log"
    finally:
        store.close()


# ---------------------------------------------------------------------------------------------- review 45
# An attacker's review of the change above: lost answers at other moments.

def _last_id(url: str, session: str) -> int | None:
    with psycopg.connect(url, autocommit=True) as conn:
        return conn.execute("SELECT max(id) FROM events WHERE session = %s", (session,)).fetchone()[0]


@pytest.mark.parametrize("kind", ["statement", "transaction"])
def test_a_lost_answer_whose_retry_also_failed_is_learned_by_the_next_commit(
        pg: PostgresServer, proxy: CuttingProxy, kind: str) -> None:  # noqa: F811
    # The batch lands, its answer is lost, and the retry finds the database away: the rows stay buffered (the
    # caller is told the commit failed). The next commit writes them again (skipping what landed) with new rows.
    # `transaction`: each batch also holds a run's start (of another session), so it is the run-start/end
    # transaction whose COMMIT answer is lost.
    def extra(n: int) -> None:
        if kind == "transaction":
            store.append(f"x{n}", RunStarted(f"run_x{n}", f"x{n}", "task", "m"))

    pg.database("twice")
    direct = f"postgresql://postgres@/twice?host={pg.socket_dir}"
    store = PostgresStore(proxy.url("twice"))
    try:
        store.append("a", RunStarted("run_a", "a", "task", "m"))
        store.commit()
        store.append("a", ToolCallFinished("run_a", 1, "c1", "step", "ok a1"))
        extra(1)
        proxy.cut_after(b"ok a1", refuse=True)
        with pytest.raises(StoreUnavailable):  # the retry could not connect
            store.commit()
        assert proxy.cut.is_set() and store.pending
        landed = _last_id(direct, "a")
        proxy.refuse.clear()
        store.append("a", ToolCallFinished("run_a", 2, "c2", "step", "ok a2"))
        extra(2)
        store.commit()
        assert [t for t, _ in rows_of(direct, "a")] == ["run_started", "tool_call_finished", "tool_call_finished"]
        assert store.committed["a"] == _last_id(direct, "a") > landed
        # Two lost answers in a row (the retry's answer lost too), then the next commit.
        store.append("a", ToolCallFinished("run_a", 3, "c3", "step", "ok a3"))
        extra(3)
        proxy.cut_after(b"ok a3", times=2)
        with pytest.raises(StoreUnavailable):
            store.commit()
        store.commit()
        assert [t for t, _ in rows_of(direct, "a")].count("tool_call_finished") == 3
        assert store.committed["a"] == _last_id(direct, "a")
        if kind == "transaction":
            for n in (1, 2, 3):
                assert [t for t, _ in rows_of(direct, f"x{n}")] == ["run_started"]
                assert store.committed[f"x{n}"] == _last_id(direct, f"x{n}")
    finally:
        store.close()


def test_committed_never_names_a_row_that_a_rolled_back_transaction_did_not_write(
        pg: PostgresServer, proxy: CuttingProxy) -> None:  # noqa: F811
    # The run-start/end transaction: its INSERTs answer (RETURNING ids), then the connection breaks before
    # COMMIT, so the server rolls it back; the retry finds the database away. `committed` is what serve's
    # streams are told is stored: it must not name ids that no row has (nor ever will: a sequence goes on).
    pg.database("phantom")
    direct = f"postgresql://postgres@/phantom?host={pg.socket_dir}"
    store = PostgresStore(proxy.url("phantom"))
    try:
        store.append("a", RunStarted("run_a", "a", "task", "m"))
        store.commit()
        before = store.committed["a"]
        store.append("a", ToolCallFinished("run_a", 1, "c1", "step", "ok a1"))
        store.append("a", RunStarted("run_a2", "a", "marker\nphantom", "m"))  # a session event: the transaction
        # a raw newline: only in the title of its `sessions` row (the JSON of the row escapes it), so the answer
        # lost is that of the upsert, after the INSERTs answered with their ids
        proxy.cut_after(b"marker\nphantom", inside=True, refuse=True)
        with pytest.raises(StoreUnavailable):
            store.commit()
        assert proxy.cut.is_set()
        assert _last_id(direct, "a") == before  # rolled back: nothing of the batch landed
        assert store.committed["a"] == before, f"committed names row {store.committed['a']}, which does not exist"
    finally:
        proxy.refuse.clear()
        store.close()


def test_a_fork_whose_commit_landed_unanswered_is_not_reported_as_failed(
        pg: PostgresServer, proxy: CuttingProxy) -> None:  # noqa: F811
    # fork() does not retry (a commit whose answer was lost must not be taken for a clash); but when its commit
    # did land, the caller is told it failed: serve's fork route (serve/fork_api.py) then forgets the new
    # session's owner, leaving a session nobody owns (404 to its maker, 409 when they try again).
    pg.database("fork")
    store = PostgresStore(proxy.url("fork"))
    try:
        store.append("src", RunStarted("run_s", "src", "task", "m"))
        store.append("src", ToolCallFinished("run_s", 1, "c1", "step", "ok"))
        store.commit()
        through = store.rows("src")[-1][0]
        proxy.cut_after(b"forked-review45")
        failure = None
        try:
            store.fork("src", "forked-review45", through)
        except Exception as e:
            failure = e
        assert proxy.cut.is_set()
        assert store.exists("forked-review45")  # the fork landed
        assert failure is None, f"the fork landed, yet its caller was told: {failure!r}"
    finally:
        store.close()


def test_a_commit_of_more_rows_than_one_statement_takes_is_written(pg: PostgresServer) -> None:  # noqa: F811
    # One statement takes at most 65,535 parameters (7 a row: 9,362 rows). A batch can be larger: group commit
    # of many runs, or rows kept buffered while the database was away (written again with the next commit).
    pg.database("many")
    direct = f"postgresql://postgres@/many?host={pg.socket_dir}"
    store = PostgresStore(direct)
    try:
        other = store.lock("held")  # a session held meanwhile: its lock must not go with a "broken" connection
        for i in range(9400):
            store.append("big", ToolCallFinished("run_big", i, f"c{i}", "step", "ok"))
        store.commit()
        assert len(rows_of(direct, "big")) == 9400
        assert not other.lost
        other.release()
    finally:
        store.close()


def test_a_statement_that_fails_on_a_live_connection_keeps_the_session_locks(
        pg: PostgresServer, monkeypatch: pytest.MonkeyPatch) -> None:  # noqa: F811
    # A write that waits past the statement timeout (QueryCanceled) or is chosen as a deadlock's victim fails
    # with psycopg's OperationalError, as a broken connection does; but the connection is alive and holds every
    # session lock of the process. Taking it for broken dropped it, and with it every lock: every run of the
    # replica stopped (SessionLost) for one slow statement.
    from shou import Session
    from shou.store import pg_link

    url = pg.database("live")
    monkeypatch.setattr(pg_link, "STATEMENT_TIMEOUT_MS", 300)  # the write waits on a lock nobody lets go of
    store = PostgresStore(url)
    held = Session("held", store)
    held.acquire()
    try:
        with psycopg.connect(url, autocommit=True) as admin:
            admin.execute("BEGIN")
            admin.execute("LOCK TABLE events IN SHARE MODE")  # the write waits until it times out
            store.append("held", RunStarted("run_held", "held", "task", "m"))
            with pytest.raises(StoreUnavailable) as failed:
                store.commit()
            assert not isinstance(failed.value, psycopg.Error)
            admin.execute("ROLLBACK")
        assert store.lost() == set()  # the lock is still this process's
        held.commit()  # kept, and written now
        assert [e.type for e in PostgresStore(url).events("held")] == ["run_started"]
    finally:
        held.release()
        store.close()


def test_the_proxy_cuts_no_answer_of_a_marked_statement_that_failed(pg: PostgresServer,  # noqa: F811
                                                                     proxy: CuttingProxy) -> None:
    # A failed statement commits nothing, so there is no lost commit to make of it: the error reaches the
    # client, and the connection stays (a fixture that cut here would fake a fault that cannot happen).
    pg.database("proxyerr")
    with psycopg.connect(proxy.url("proxyerr"), autocommit=True) as conn:
        proxy.cut_after(b"marked-failure")
        with pytest.raises(psycopg.errors.DivisionByZero):
            conn.execute("SELECT 1/0 AS \"marked-failure\"")
        assert not proxy.cut.is_set() and conn.execute("SELECT 2").fetchone() == (2,)
