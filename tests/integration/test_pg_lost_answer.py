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

from shou.store.pg_link import SessionLost  # noqa: E402  (after the skip: psycopg may be missing)
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
