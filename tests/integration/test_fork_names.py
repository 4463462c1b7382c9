"""Forking into a name under `shou serve`: a name the caller holds with neither a log nor a run (what a fork the
store failed under leaves) may be forked into again, but a name with a queued run is that run's session (409),
and a fork that fails lets go only of what it took itself (an earlier fork may still be landing under it)."""

from __future__ import annotations

import time
from pathlib import Path

from ..fixtures.serving import serving, stream_run
from .conftest import shou_env
from .test_pg_group_outage import pg  # noqa: F401  (fixture)
from .test_pg_lost_answer import proxy  # noqa: F401  (fixture)


def _wait_status(client, run_id: str, want: str, bound: float = 30.0) -> dict:
    deadline = time.monotonic() + bound
    while True:
        got = client.get(f"/v1/runs/{run_id}").json()
        if got.get("status") == want or time.monotonic() > deadline:
            return got
        time.sleep(0.02)  # the run's status, polled: the API has no event for it


def test_a_failed_fork_into_a_name_with_a_queued_run_does_not_drop_that_run(serve, tmp_path: Path,
                                                                             workspace: Path) -> None:
    # Alice's run on the new session "x" is queued (the one slot is taken by a run whose model hangs), so "x" is
    # hers with no log yet. A fork into "x" that fails as the caller's mistake (a step that does not exist: 400)
    # must not take her queued run with it: before the change the fork was a 409 (the name is taken) and the run
    # stayed; now forget_session("x") deletes the run's row and the name's owner.
    alice = "alice-token-0123456789"
    (tmp_path / "tokens").write_text(f"{alice} alice\n")
    (tmp_path / "tokens").chmod(0o600)
    srv = serve([{"text": "orig done"}, {"hang": True}, {"text": "x done"}])
    with serving(workspace, shou_env(tmp_path, srv), "--tokens", str(tmp_path / "tokens"),
                 "--max-concurrent", "1") as s, s.client(alice) as a:
        run = a.post("/v1/runs", json={"task": "first", "session": "orig"}).json()
        assert stream_run(a, run["run_id"])[-1]["data"]["status"] == "completed"
        blocker = a.post("/v1/runs", json={"task": "hang", "session": "blocker"}).json()
        assert _wait_status(a, blocker["run_id"], "running")["status"] == "running"
        queued = a.post("/v1/runs", json={"task": "later", "session": "x"})
        assert queued.status_code == 202, queued.text
        queued = queued.json()
        assert queued["status"] == "queued", queued

        r = a.post("/v1/sessions/orig/fork", json={"at": 9, "name": "x"})
        assert r.status_code in (400, 409), r.text
        after = a.get(f"/v1/runs/{queued['run_id']}")
        assert after.status_code == 200, f"the queued run is gone after a failed fork into its name: {after.text}"
        assert a.get("/v1/sessions/x").status_code == 200


def test_a_fork_into_a_name_with_a_queued_run_is_refused(serve, tmp_path: Path, workspace: Path) -> None:
    # The name with no log that the caller owns may also be one a run of theirs is queued on: the fork then writes
    # orig's history under that run, which starts on a log it was never given (before the change: 409).
    alice = "alice-token-0123456789"
    (tmp_path / "tokens").write_text(f"{alice} alice\n")
    (tmp_path / "tokens").chmod(0o600)
    srv = serve([{"text": "orig done"}, {"hang": True}, {"text": "x done"}])
    with serving(workspace, shou_env(tmp_path, srv), "--tokens", str(tmp_path / "tokens"),
                 "--max-concurrent", "1") as s, s.client(alice) as a:
        run = a.post("/v1/runs", json={"task": "first", "session": "orig"}).json()
        assert stream_run(a, run["run_id"])[-1]["data"]["status"] == "completed"
        blocker = a.post("/v1/runs", json={"task": "hang", "session": "blocker"}).json()
        assert _wait_status(a, blocker["run_id"], "running")["status"] == "running"
        queued = a.post("/v1/runs", json={"task": "later", "session": "x"}).json()
        assert queued["status"] == "queued", queued
        r = a.post("/v1/sessions/orig/fork", json={"name": "x"})
        assert r.status_code == 409, f"a fork was written into a session with a queued run: {r.status_code} {r.text}"


def test_a_fork_asked_again_while_the_first_is_still_landing_keeps_the_landed_fork_its_callers(
        pg, proxy, serve, tmp_path: Path, workspace: Path) -> None:  # noqa: F811
    # The 503 says the fork may still land and the route lets the caller ask again under that name. Asked again
    # while the first COMMIT is under way, the second fork is refused (the first's backend still holds the name's
    # lock: SessionBusy; or its INSERT waits and finds the row: SessionExists), 409, and the route's
    # `except UserError` forgets the name's owner: the fork that lands is nobody's (GET 404, no one may use it).
    import threading

    import pytest

    psycopg = pytest.importorskip("psycopg")
    from .test_pg_group_outage import HANG
    from .test_pg_lost_answer import rows_of
    from .test_pg_lost_answer_serve import served_session

    direct = f"postgresql://postgres@/forkagain?host={pg.socket_dir}"
    with served_session(pg, proxy, serve, tmp_path, workspace, "forkagain") as (c, session), \
            psycopg.connect(direct, autocommit=True) as admin:
        admin.execute("CREATE FUNCTION held() RETURNS trigger AS $$ BEGIN PERFORM pg_advisory_xact_lock(4242); "
                      "RETURN NULL; END $$ LANGUAGE plpgsql")
        admin.execute("CREATE CONSTRAINT TRIGGER held_fork AFTER INSERT ON sessions DEFERRABLE INITIALLY DEFERRED "
                      "FOR EACH ROW WHEN (NEW.name = 'forked-late') EXECUTE FUNCTION held()")
        admin.execute("SELECT pg_advisory_lock(4242)")  # the first fork's COMMIT waits for it
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
        while not rows_of(direct, "forked-late"):
            assert time.monotonic() < deadline, "the fork never landed"
            time.sleep(0.01)  # a condition of the server, polled
        second = answers[0]
        assert c.get("/v1/sessions/forked-late").status_code == 200, \
            f"the landed fork is nobody's after the second answered {second.status_code} {second.text}"
