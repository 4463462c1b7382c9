"""A PostgreSQL outage under `shou serve` with runs in flight: each run waits it out or is resumed from its
log once the database is back, and finishes; no event is dropped, none is repeated, and the replica's log
holds no traceback (its event streams included)."""

from __future__ import annotations

import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import pytest

from ..fixtures.serving import start_serve, stream_run
from .conftest import FIXTURES, shou_env

TOKEN = "outage-token-0123456789"
RUNS = 6


def _script() -> list[dict]:
    # turn_by="history": a resumed run gets the turn its conversation reached
    return [{"tool_calls": [{"name": "nap", "arguments": {"tag": "first", "seconds": 1.5}}]},
            {"tool_calls": [{"name": "nap", "arguments": {"tag": "second", "seconds": 0.2}}]},
            {"text": "finished after the outage"}]


def _wait_for(what: str, check, seconds: float = 120.0):
    deadline = time.monotonic() + seconds
    while True:
        got = check()
        if got:
            return got
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.1)


def _status(c: httpx.Client, run_id: str) -> str:
    try:
        r = c.get(f"/v1/runs/{run_id}")
    except httpx.HTTPError:
        return ""
    return r.json()["status"] if r.status_code == 200 else ""


@pytest.mark.parametrize("outage", [3.0, 11.0])  # shorter than the lease, and longer
@pytest.mark.timeout(600)
def test_runs_in_flight_survive_a_database_restart(serve, tmp_path: Path, workspace: Path, outage: float) -> None:
    from ..fixtures.postgres import start_postgres

    pg = start_postgres()
    srv = serve(_script(), turn_by="history")
    (tmp_path / "tokens").write_text(f"{TOKEN} dana\n")
    (tmp_path / "tokens").chmod(0o600)  # a tokens file must be its owner's alone
    s = start_serve(workspace, shou_env(tmp_path, srv), "--store", pg.database("outage"), "--tokens",
                    str(tmp_path / "tokens"), "--lease", "6", "--functions", str(FIXTURES / "extra_tools.py"))
    try:
        with s.client(TOKEN) as c:
            runs = [c.post("/v1/runs", json={"task": f"run {i}"}).json()["run_id"] for i in range(RUNS)]
            # the condition: every run has started (its first nap is under way)
            _wait_for("every run to start", lambda: (workspace / "naps.jsonl").exists() and sum(
                '"start"' in line for line in (workspace / "naps.jsonl").read_text().splitlines()) >= RUNS)
            with ThreadPoolExecutor(1) as pool, s.client(TOKEN, timeout=120) as watcher:
                followed = pool.submit(stream_run, watcher, runs[0])  # one stream follows a run through it
                pg.halt()
                time.sleep(outage)  # the outage itself: the fault being injected, not a wait for the code
                pg.start()
                seen = [m for m in followed.result(timeout=300) if m["id"] is not None]
            for run_id in runs:
                _wait_for(f"run {run_id} to finish", lambda run_id=run_id: _status(c, run_id) in
                          ("completed", "failed", "error", "cancelled"))
            for run_id in runs:
                assert _status(c, run_id) == "completed", c.get(f"/v1/runs/{run_id}").text
                events = [m for m in stream_run(c, run_id) if m["id"] is not None]
                assert events[-1]["data"]["status"] == "completed"
                assert events[-1]["data"]["answer"] == "finished after the outage"
                ids = [m["id"] for m in events]
                assert ids == sorted(set(ids))  # in order, none twice
                kinds = [m["event"] for m in events if m["data"].get("run_id") == run_id]
                assert kinds.count("run_started") == 1 and kinds.count("run_finished") == 1
                finished = [m["data"]["call_id"] for m in events if m["event"] == "tool_call_finished"]
                started = [m["data"]["call"]["id"] for m in events if m["event"] == "tool_call_started"]
                assert sorted(set(started)) == sorted(finished)  # every call answered exactly once
                if run_id == runs[0]:  # what the stream showed through the outage: all of it, once each
                    assert [m["id"] for m in seen] == ids and [m["data"] for m in seen] == [m["data"] for m in events]
    finally:
        s.stop()
        pg.stop()
    log = s.log()
    assert "Traceback" not in log and "dropped" not in log and "syntax error" not in log, log


def test_rows_of_a_session_whose_lock_went_with_the_connection_are_fenced_not_refused(postgres_url: str,
                                                                                      caplog) -> None:
    import psycopg

    from shou.events import Notice
    from shou.store.postgres import PostgresStore

    store = PostgresStore(postgres_url)
    try:
        lock = store.lock("held")
        store.append("held", Notice("run_a", 1, "info", "written before the break"))
        store.commit()
        with psycopg.connect(postgres_url, autocommit=True) as admin:  # the server drops the store's connections
            admin.execute("SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = current_database()"
                          " AND pid <> pg_backend_pid()")
        store.append("held", Notice("run_a", 2, "info", "after the lock went: never written"))
        store.commit()  # nothing to write of a fenced session: no statement at all, no error
        assert store.lost() == {"held"}
        store.append("free", Notice("run_b", 1, "info", "another session, on the fresh connection"))
        store.commit()
        texts = {s: [e.text for e in store.events(s)] for s in ("held", "free")}
        assert texts == {"held": ["written before the break"], "free": ["another session, on the fresh connection"]}
        lock.release()
    finally:
        store.close()
    assert "dropped" not in caplog.text and "syntax" not in caplog.text
