"""`GET /v1/runs` and `GET /v1/runs/{id}` answer a run as its session's log has it: the end of a run is in the
log (a stream has shown it) a moment before the replica that ran it records it in the queue, and a client that
saw the end must never read "running" or "queued", in the list as in the one run (SQLite and PostgreSQL)."""

from __future__ import annotations

import asyncio
import functools
import json
from pathlib import Path
from types import SimpleNamespace
from typing import Any

from shou import Agent, ScriptedModel
from shou.serve.app import get_run, list_runs
from shou.serve.runner import Runner
from shou.serve.server import Server

from ..fixtures.replicas import call_route, replica


def _serving(tmp_path: Path, replica_db: str | None) -> Any:
    srv = replica(tmp_path, replica_db)
    # the two parts of a server these routes use: the runner's reading of the log, and finding the caller's run
    runner = SimpleNamespace(store=srv.store)
    runner.logged_end = functools.partial(Runner.logged_end, runner)
    srv.runner = runner
    srv.job = functools.partial(Server.job, srv)
    return srv


async def _run_logged_only(srv: Any, tmp_path: Path, run_id: str, session: str) -> None:
    """Run `run_id` to its end in the log, as a replica does before it records the end in the queue."""
    agent = Agent(ScriptedModel([{"text": "the answer"}]), [], workspace=tmp_path, store=srv.store)
    async for _ in agent.stream("hi", session, run_id=run_id):
        pass


def _check(tmp_path: Path, replica_db: str | None) -> None:
    srv = _serving(tmp_path, replica_db)
    job = srv.queue.submit("run_logged1", "alice", "s-logged", "hi", {})
    other = srv.queue.submit("run_waiting1", "alice", "s-waiting", "hi", {})
    asyncio.run(_run_logged_only(srv, tmp_path, job.run_id, job.session))
    assert srv.queue.get(job.run_id).status == "queued"  # the queue has not heard yet

    status, body = call_route(list_runs, srv, "GET", "/v1/runs", {})
    assert status == 200
    runs = {r["run_id"]: r for r in json.loads(body)["runs"]}
    assert runs[job.run_id]["status"] == "completed"
    assert runs[job.run_id]["answer"] == "the answer"
    assert runs[other.run_id]["status"] == "queued"  # no end in its log: as the queue says

    status, body = call_route(get_run, srv, "GET", f"/v1/runs/{job.run_id}", {"run_id": job.run_id})
    assert status == 200 and json.loads(body)["status"] == "completed"


def test_the_runs_list_and_one_run_answer_as_the_log_says(tmp_path: Path, replica_db: str | None) -> None:
    _check(tmp_path, replica_db)


def test_run_end_reads_only_the_runs_own_end(tmp_path: Path, replica_db: str | None) -> None:
    srv = replica(tmp_path, replica_db)
    asyncio.run(_run_logged_only(srv, tmp_path, "run_x1", "s1"))
    asyncio.run(_run_logged_only(srv, tmp_path, "run_x2", "s1"))
    ends = srv.store.run_end("s1", "run_x1")
    assert [(e.type, e.run_id) for _, e in ends] == [("run_finished", "run_x1")]
    assert srv.store.run_end("s1", "run_x") == [] and srv.store.run_end("s2", "run_x1") == []
