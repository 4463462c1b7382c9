"""Replicas of `shou serve` on one PostgreSQL database (Debian's server, started by the tests): runs started on
one stream from another, and a replica killed with SIGKILL mid-run leaves its run to the other, with the
client's stream resumed there by `Last-Event-ID`: no event lost or repeated, no finished tool run again."""

from __future__ import annotations

import json
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx

from ..fixtures.serving import Served, sse_messages, start_serve, stream_run
from .conftest import FIXTURES, shou_env

TOKEN = "replica-token-0123456789"


def nap(tag: str, seconds: float) -> dict:
    return {"tool_calls": [{"name": "nap", "arguments": {"tag": tag, "seconds": seconds}}]}


def replicas(n: int, tmp_path: Path, workspace: Path, srv, url: str) -> list[Served]:
    (tmp_path / "tokens").write_text(f"{TOKEN} dana\n")
    (tmp_path / "tokens").chmod(0o600)  # a tokens file must be its owner's alone
    env = shou_env(tmp_path, srv)
    args = ("--store", url, "--tokens", str(tmp_path / "tokens"), "--lease", "2",
            "--functions", str(FIXTURES / "extra_tools.py"))
    with ThreadPoolExecutor(n) as pool:  # started together: the schema must be made once, without errors
        return list(pool.map(lambda i: start_serve(workspace, env, *args, "--replica", f"r{i}"), range(n)))


def test_a_run_started_on_one_replica_streams_from_another(serve, tmp_path: Path, workspace: Path,
                                                            postgres_url: str) -> None:
    srv = serve([nap("one", 0.2), {"text": "rested"}])
    a, b, c = replicas(3, tmp_path, workspace, srv, postgres_url)
    try:
        with a.client(TOKEN) as ca, b.client(TOKEN) as cb:
            run = ca.post("/v1/runs", json={"task": "rest"}).json()
            events = stream_run(cb, run["run_id"])
            assert events[-1]["event"] == "run_finished" and events[-1]["data"]["answer"] == "rested"
            assert cb.get(f"/v1/runs/{run['run_id']}").json()["status"] == "completed"
            assert [s["name"] for s in cb.get("/v1/sessions").json()["sessions"]] == [run["session"]]
            from_a = [m["id"] for m in stream_run(ca, run["run_id"]) if m["id"] is not None]
            assert from_a == [m["id"] for m in events if m["id"] is not None]
            # the usage report reads the log with SQL; PostgreSQL answers it as SQLite does
            (row,) = cb.get("/v1/usage").json()["rows"]
            assert row["requests"] == 2 and row["model"] and row["input_tokens"] > 0
            trace = cb.get(f"/v1/runs/{run['run_id']}/trace")
            assert trace.status_code == 200, b.log()[-3000:]
        for s in (a, b, c):
            assert "Traceback" not in s.log(), s.log()
    finally:
        for s in (a, b, c):
            s.stop()


def test_killed_replica_hands_its_run_and_stream_to_another(serve, tmp_path: Path, workspace: Path,
                                                             postgres_url: str) -> None:
    # Step 2's reply is slow; the replica running the run is killed while it waits for it.
    srv = serve([nap("one", 0.1), {"text": "too late", "delay": 30}, nap("two", 0.1), {"text": "both naps done"}])
    a, b = replicas(2, tmp_path, workspace, srv, postgres_url)
    try:
        ca, cb = a.client(TOKEN), b.client(TOKEN)
        run = ca.post("/v1/runs", json={"task": "two naps"}).json()
        assert ca.get("/healthz").json()["runs"] == 1  # held by the replica it was asked on
        seen: list[dict] = []
        with ca.stream("GET", f"/v1/runs/{run['run_id']}/events") as resp:
            for msg in sse_messages(resp.iter_lines()):
                seen.append(msg)
                if msg["event"] == "model_request" and msg["data"]["step"] == 2:
                    a.kill()  # SIGKILL, mid-stream
                    break
        last = max(m["id"] for m in seen if m["id"] is not None)
        rest: list[dict] = []
        deadline = time.monotonic() + 60
        while not rest or rest[-1]["event"] != "run_finished":  # the client reconnects to the other replica
            try:
                rest += stream_run(cb, run["run_id"], after=max([last, *[m["id"] for m in rest if m["id"]]]))
            except httpx.HTTPError:
                assert time.monotonic() < deadline
                time.sleep(0.5)
        assert rest[-1]["data"]["status"] == "completed" and rest[-1]["data"]["answer"] == "both naps done"
        got = [m["id"] for m in seen + rest if m["id"] is not None]
        everything = [m for m in stream_run(cb, run["run_id"]) if m["id"] is not None]
        assert got == [m["id"] for m in everything]  # 0 lost, 0 duplicated
        assert [m["data"] for m in seen + rest if m["id"] is not None] == [m["data"] for m in everything]
        assert "run_resumed" in [m["event"] for m in rest]
        naps = [json.loads(line) for line in (workspace / "naps.jsonl").read_text().splitlines()]
        assert [(n["tag"], n["event"]) for n in naps] == [("one", "start"), ("one", "end"), ("two", "start"),
                                                           ("two", "end")]  # the finished nap never ran again
        assert cb.get(f"/v1/runs/{run['run_id']}").json()["status"] == "completed"
        ca.close()
        cb.close()
    finally:
        a.stop()
        b.stop()


def test_long_term_memory_is_shared_by_the_replicas(serve, tmp_path: Path, workspace: Path, postgres_url: str) -> None:
    srv = serve([
        {"tool_calls": [{"name": "save_memory", "arguments": {"content": "The staging deploy runs on Fridays."}}]},
        {"text": "saved"},
        {"tool_calls": [{"name": "search_memory", "arguments": {"query": "when does the staging deploy run"}}]},
        {"text": "Fridays"},
    ])
    a, b = replicas(2, tmp_path, workspace, srv, postgres_url)
    try:
        with a.client(TOKEN) as ca, b.client(TOKEN) as cb:
            saved = ca.post("/v1/runs", json={"task": "remember the deploy day"}).json()
            assert stream_run(ca, saved["run_id"])[-1]["data"]["status"] == "completed"
            found = cb.post("/v1/runs", json={"task": "when is the deploy?"}).json()
            events = stream_run(cb, found["run_id"])
            [result] = [m["data"] for m in events if m["event"] == "tool_call_finished"]
            assert result["name"] == "search_memory" and not result["is_error"]
            assert "The staging deploy runs on Fridays." in result["content"]
        assert not (workspace / ".shou" / "memory.db").exists()  # it lives in PostgreSQL
    finally:
        a.stop()
        b.stop()


def test_a_stopping_replica_hands_its_runs_over(serve, tmp_path: Path, workspace: Path, postgres_url: str) -> None:
    # SIGTERM (a rolling restart): after the drain, the runs still going move to the other replica at once.
    srv = serve([nap("long", 30), nap("after", 0.1), {"text": "finished elsewhere"}])
    a, b = replicas(2, tmp_path, workspace, srv, postgres_url)
    try:
        with a.client(TOKEN) as ca, b.client(TOKEN) as cb:
            run = ca.post("/v1/runs", json={"task": "long nap"}).json()
            stream_run(ca, run["run_id"], until="tool_call_started")
            a.stop()  # SIGTERM; waits for the process
            events = stream_run(cb, run["run_id"])
            assert events[-1]["data"]["status"] == "completed", events[-1]
            assert events[-1]["data"]["answer"] == "finished elsewhere"
            finished = [m["data"] for m in events if m["event"] == "tool_call_finished"]
            assert "interrupted" in finished[0]["content"]  # the nap cut short is reported, not run again
            assert cb.get(f"/v1/runs/{run['run_id']}").json()["status"] == "completed"
    finally:
        a.stop()
        b.stop()


def test_a_database_outage_is_survived(serve, tmp_path: Path, workspace: Path) -> None:
    from ..fixtures.postgres import start_postgres

    pg = start_postgres()
    srv = serve([{"text": "before"}, {"text": "after"}])
    (tmp_path / "tokens").write_text(f"{TOKEN} dana\n")
    (tmp_path / "tokens").chmod(0o600)  # a tokens file must be its owner's alone
    s = start_serve(workspace, shou_env(tmp_path, srv), "--store", pg.database("restart"), "--tokens",
                    str(tmp_path / "tokens"))
    try:
        with s.client(TOKEN) as c:
            first = c.post("/v1/runs", json={"task": "one"}).json()
            assert stream_run(c, first["run_id"])[-1]["data"]["answer"] == "before"
            pg.halt()  # every connection of the replica is dropped, and none can be made
            down = c.post("/v1/runs", json={"task": "while down"})
            assert down.status_code == 503 and down.json()["error"]["type"] == "unavailable", down.text
            assert c.get("/healthz").status_code == 503
            pg.start()
            deadline = time.monotonic() + 30
            while True:  # the first use of each broken connection may fail; then it is opened again
                r = c.post("/v1/runs", json={"task": "two"})
                if r.status_code == 202:
                    break
                assert time.monotonic() < deadline, r.text
                time.sleep(0.2)
            events = stream_run(c, r.json()["run_id"])
            assert events[-1]["data"]["status"] == "completed" and events[-1]["data"]["answer"] == "after"
            assert c.get("/healthz").json()["ok"] is True
            assert c.get("/v1/sessions").status_code == 200
    finally:
        s.stop()
        pg.stop()


def test_a_replica_that_outlived_its_lease_stops_without_writing(serve, tmp_path: Path, workspace: Path,
                                                                  postgres_url: str) -> None:
    # A stalls (SIGSTOP: a VM pause) past its lease mid-tool; B takes the run once A lets go of the session.
    # When A wakes it finds its lease gone and stops the run without writing anything more of it.
    import os
    import signal

    srv = serve([nap("first", 6), nap("second", 0.1), {"text": "done once"}])
    a, b = replicas(2, tmp_path, workspace, srv, postgres_url)
    try:
        with a.client(TOKEN) as ca, b.client(TOKEN) as cb:
            run = ca.post("/v1/runs", json={"task": "long job"}).json()
            stream_run(ca, run["run_id"], until="tool_call_started")
            os.kill(a.proc.pid, signal.SIGSTOP)
            time.sleep(4)  # twice the lease
            os.kill(a.proc.pid, signal.SIGCONT)
            events = stream_run(cb, run["run_id"])
            assert events[-1]["data"]["status"] == "completed" and events[-1]["data"]["answer"] == "done once"
            time.sleep(1.5)  # A's heartbeat has run by now; anything it wrote would be in the log
            stored = [m for m in stream_run(cb, run["run_id"]) if m["id"] is not None]
            kinds = [m["event"] for m in stored]
            assert kinds.count("run_finished") == 1 and kinds.count("run_resumed") == 1
            calls = [(m["data"]["step"], m["data"]["call_id"]) for m in stored if m["event"] == "tool_call_finished"]
            assert len(calls) == len(set(calls))  # no call answered twice
            assert cb.get(f"/v1/runs/{run['run_id']}").json()["status"] == "completed"
        assert "without writing" in a.log()
    finally:
        a.stop()
        b.stop()


def test_an_answer_with_a_nul_is_recorded(serve, tmp_path: Path, workspace: Path, postgres_url: str) -> None:
    srv = serve([{"text": "A\u0000B"}])
    [a] = replicas(1, tmp_path, workspace, srv, postgres_url)
    try:
        with a.client(TOKEN) as c:
            run = c.post("/v1/runs", json={"task": "say it"}).json()
            assert stream_run(c, run["run_id"])[-1]["data"]["status"] == "completed"
            got = c.get(f"/v1/runs/{run['run_id']}").json()
            assert got["status"] == "completed" and got["answer"].startswith("A") and got["answer"].endswith("B")
    finally:
        a.stop()
