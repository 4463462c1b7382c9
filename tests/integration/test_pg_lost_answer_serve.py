"""A lost answer, or a connection lost while a commit is under way, under `shou serve` on PostgreSQL: a fork
whose outcome the route cannot know stays its caller's (landed, it is theirs; not landed, they may ask again
under the same name), a fork the database went away under answers 503, and a cancel that could not be logged
is carried out once the database is back. The proxy (tests/fixtures/pg_proxy.py) makes each fault on demand;
`HANG` only turns a hang into a failure."""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from shou.serve.names import stored_name  # dana's sessions as the store keeps them

from ..fixtures.pg_proxy import CuttingProxy
from ..fixtures.postgres import PostgresServer, pg_bindir
from .test_pg_group_outage import (
    HANG,
    pg,  # noqa: F401  (the fixture: a cluster of the test's own)
)
from .test_pg_lost_answer import proxy, rows_of  # noqa: F401  (proxy: the fixture)

psycopg = pytest.importorskip("psycopg")
pytestmark = pytest.mark.skipif(pg_bindir() is None, reason="PostgreSQL is not installed")


@contextlib.contextmanager
def served_session(server: PostgresServer, proxy: CuttingProxy, serve: Any,  # noqa: F811
                   tmp_path: Path, workspace: Path, database: str) -> Iterator[tuple[Any, str]]:
    """`shou serve` on `database` through the proxy: a client of its, and a session of one finished run."""
    from ..fixtures.serving import start_serve, stream_run
    from .conftest import shou_env

    token = "lost-answer-token-0123456789"
    server.database(database)
    srv = serve([{"text": "done"}])
    (tmp_path / "tokens").write_text(f"{token} dana\n")
    (tmp_path / "tokens").chmod(0o600)
    s = start_serve(workspace, shou_env(tmp_path, srv), "--store", proxy.url(database), "--tokens",
                    str(tmp_path / "tokens"))
    try:
        with s.client(token) as c:
            run = c.post("/v1/runs", json={"task": "one"}).json()
            assert stream_run(c, run["run_id"])[-1]["data"]["answer"] == "done"
            yield c, run["session"]
    finally:
        s.stop()


def hold_commits_of(admin: Any, name: str) -> None:
    """Make the COMMIT of a transaction that creates session `name` wait (a deferred trigger) until `admin`
    lets go of advisory lock 4242: a commit under way for as long as the test needs, with no sleep."""
    admin.execute("CREATE FUNCTION held() RETURNS trigger AS $$ BEGIN PERFORM pg_advisory_xact_lock(4242); "
                  "RETURN NULL; END $$ LANGUAGE plpgsql")
    admin.execute("CREATE CONSTRAINT TRIGGER held_fork AFTER INSERT ON sessions DEFERRABLE INITIALLY DEFERRED "
                  f"FOR EACH ROW WHEN (NEW.name = '{name}') EXECUTE FUNCTION held()")
    admin.execute("SELECT pg_advisory_lock(4242)")


def test_a_fork_through_serve_whose_commit_landed_unanswered_stays_its_callers(
        pg: PostgresServer, proxy: CuttingProxy, serve, tmp_path: Path, workspace: Path) -> None:  # noqa: F811
    # The same lost answer through `POST /v1/sessions/{name}/fork`: the route (serve/fork_api.py) took the
    # store's failure (a UserError) for the caller's, forgot the new session's owner, and answered 400; the
    # fork was in the log all the same, owned by nobody.
    with served_session(pg, proxy, serve, tmp_path, workspace, "forkserve") as (c, session):
        proxy.cut_after(b"DO NOTHING RETURNING name")  # the fork's own statement, no other's
        r = c.post(f"/v1/sessions/{session}/fork", json={"name": "forked-r45"})
        assert proxy.cut.is_set()
        landed = stored_name("dana", "forked-r45")
        assert rows_of(f"postgresql://postgres@/forkserve?host={pg.socket_dir}", landed)  # it landed
        names = [x["name"] for x in c.get("/v1/sessions").json()["sessions"]]
        assert (r.status_code, "forked-r45" in names) == (201, True), (r.status_code, r.text, names)


def test_a_fork_through_serve_that_the_database_went_away_under_is_a_503_and_leaves_no_fork(
        pg: PostgresServer, proxy: CuttingProxy, serve, tmp_path: Path, workspace: Path) -> None:  # noqa: F811
    # The fork's transaction loses its connection before it commits, and the database takes no new connection:
    # the caller is told to try again (503, as every route answers a database away), not that the request was
    # bad (400), and the name is let go of, so the same fork can be made once the database is back.
    with served_session(pg, proxy, serve, tmp_path, workspace, "forkaway") as (c, session):
        proxy.cut_after(b"DO NOTHING RETURNING name", inside=True, refuse=True)
        r = c.post(f"/v1/sessions/{session}/fork", json={"name": "forked-away"})
        assert proxy.cut.is_set()
        assert (r.status_code, r.json()["error"]["type"]) == (503, "unavailable"), r.text
        away = stored_name("dana", "forked-away")
        assert rows_of(f"postgresql://postgres@/forkaway?host={pg.socket_dir}", away) == []
        proxy.refuse.clear()  # the database is back
        again = c.post(f"/v1/sessions/{session}/fork", json={"name": "forked-away"})
        assert again.status_code == 201, again.text


def test_a_cancel_that_could_not_be_logged_under_serve_is_carried_out_once_the_database_is_back(
        pg: PostgresServer, proxy: CuttingProxy, serve, tmp_path: Path, workspace: Path) -> None:  # noqa: F811
    # A run is cancelled through the API (the queue records it), then the commit of its cancellation loses its
    # connection before it commits and the database takes no new one: the run stops as a kill would, unlogged.
    # The queue still holds the cancel: once the database is back and the run's lease has run out, the replica
    # takes the run again and closes it as cancelled. Its tool call, interrupted, is never run again.
    from ..fixtures.serving import start_serve, stream_run
    from .conftest import FIXTURES, shou_env
    from .test_serve_outage import _status, _wait_for

    token = "cancel-token-0123456789"
    pg.database("cancelaway")
    srv = serve([{"tool_calls": [{"name": "nap", "arguments": {"tag": "long", "seconds": 600}}]}, {"text": "no"}])
    (tmp_path / "tokens").write_text(f"{token} dana\n")
    (tmp_path / "tokens").chmod(0o600)
    s = start_serve(workspace, shou_env(tmp_path, srv), "--store", proxy.url("cancelaway"), "--tokens",
                    str(tmp_path / "tokens"), "--lease", "3", "--functions", str(FIXTURES / "extra_tools.py"))
    naps = workspace / "naps.jsonl"
    try:
        with s.client(token) as c:
            run = c.post("/v1/runs", json={"task": "nap"}).json()
            _wait_for("the nap to start", lambda: naps.exists() and '"start"' in naps.read_text())
            proxy.cut_after(b'"status":"cancelled"', inside=True, refuse=True)  # the cancellation's own rows
            assert c.post(f"/v1/runs/{run['run_id']}/cancel").status_code < 300
            assert proxy.cut.wait(120)
            proxy.refuse.clear()  # the database is back
            _wait_for("the run to end", lambda: _status(c, run["run_id"]) not in ("", "queued", "running"))
            assert _status(c, run["run_id"]) == "cancelled", c.get(f"/v1/runs/{run['run_id']}").text
            events = [m for m in stream_run(c, run["run_id"]) if m["id"] is not None]
            kinds = [m["event"] for m in events]
            assert kinds.count("run_finished") == 1 and events[-1]["data"]["status"] == "cancelled", kinds
            finished = [m["data"] for m in events if m["event"] == "tool_call_finished"]
            assert len(finished) == 1 and finished[0]["is_error"], finished
        assert naps.read_text().count('"start"') == 1  # never run again
        log = s.log()
        assert "the store failed" in log and "Traceback" not in log, log  # its cancellation was not logged at first
    finally:
        s.stop()


def test_a_fork_through_serve_cut_off_while_its_commit_is_under_way_stays_its_callers(
        pg: PostgresServer, proxy: CuttingProxy, serve, tmp_path: Path, workspace: Path) -> None:  # noqa: F811
    # The connection goes while the fork's COMMIT is under way (a slow fsync, a synchronous standby's ack; here
    # a deferred trigger waiting on the test's lock): the route cannot tell whether it landed (503), and it
    # lands a moment later. The route used to let go of the name: the fork was in the log, owned by nobody.
    direct = f"postgresql://postgres@/forklate?host={pg.socket_dir}"
    with served_session(pg, proxy, serve, tmp_path, workspace, "forklate") as (c, session), \
            psycopg.connect(direct, autocommit=True) as admin:
        hold_commits_of(admin, stored_name("dana", "forked-late"))  # the fork's COMMIT waits for the test
        proxy.cut_after(b"DO NOTHING RETURNING name", at_commit=True)
        r = c.post(f"/v1/sessions/{session}/fork", json={"name": "forked-late"})
        assert proxy.cut.is_set()
        assert (r.status_code, r.json()["error"]["type"]) == (503, "unavailable"), r.text
        admin.execute("SELECT pg_advisory_unlock(4242)")  # the commit goes on, and lands
        deadline = time.monotonic() + HANG
        while not rows_of(direct, stored_name("dana", "forked-late")):
            assert time.monotonic() < deadline, "the fork never landed"
            time.sleep(0.01)  # a condition of the server, polled: no event can tell us
        names = [x["name"] for x in c.get("/v1/sessions").json()["sessions"]]
        assert "forked-late" in names, names  # the caller's, as a fork that answered 201 would be
        assert c.get("/v1/sessions/forked-late").status_code == 200
        again = c.post(f"/v1/sessions/{session}/fork", json={"name": "forked-late"})
        assert again.status_code == 409  # it exists: asked again, the caller is told so, not given a second


def test_a_fork_asked_again_while_the_first_is_still_landing_keeps_the_landed_fork_its_callers(
        pg: PostgresServer, proxy: CuttingProxy, serve, tmp_path: Path, workspace: Path) -> None:  # noqa: F811
    # The 503 says the fork may still land and the route lets the caller ask again under that name. Asked again
    # while the first COMMIT is under way, the second fork is refused (the first's backend still holds the name's
    # lock: SessionBusy; or its INSERT waits and finds the row: SessionExists), 409, and the route's
    # `except UserError` forgets the name's owner: the fork that lands is nobody's (GET 404, no one may use it).
    import threading

    direct = f"postgresql://postgres@/forkagain?host={pg.socket_dir}"
    with served_session(pg, proxy, serve, tmp_path, workspace, "forkagain") as (c, session), \
            psycopg.connect(direct, autocommit=True) as admin:
        hold_commits_of(admin, stored_name("dana", "forked-late"))  # the first fork's COMMIT waits for the test
        proxy.cut_after(b"DO NOTHING RETURNING name", at_commit=True)
        r = c.post(f"/v1/sessions/{session}/fork", json={"name": "forked-late"})
        assert (r.status_code, r.json()["error"]["type"]) == (503, "unavailable"), r.text

        answers: list = []
        again = threading.Thread(target=lambda: answers.append(
            c.post(f"/v1/sessions/{session}/fork", json={"name": "forked-late"})))
        again.start()
        deadline = time.monotonic() + HANG
        while not admin.execute("SELECT 1 FROM pg_stat_activity WHERE wait_event_type = 'Lock' AND query LIKE "
                                "'INSERT INTO sessions%%'").fetchone() and again.is_alive():
            assert time.monotonic() < deadline, admin.execute(
                "SELECT state, wait_event_type, wait_event, left(query, 80) FROM pg_stat_activity").fetchall()
            time.sleep(0.01)  # a condition of the server, polled
        admin.execute("SELECT pg_advisory_unlock(4242)")  # the first commit lands
        again.join(HANG)
        assert answers, "the second fork never answered"
        while not rows_of(direct, stored_name("dana", "forked-late")):
            assert time.monotonic() < deadline, "the fork never landed"
            time.sleep(0.01)  # a condition of the server, polled
        second = answers[0]
        assert c.get("/v1/sessions/forked-late").status_code == 200, \
            f"the landed fork is nobody's after the second answered {second.status_code} {second.text}"
