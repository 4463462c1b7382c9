"""The fork route (serve/fork_api.py) across replicas: each replica's own store and queue connections on one
database, the route called as Starlette would. A fork that fails lets go only of a name it took, and never of
one a session now holds (another replica's fork of the same caller's)."""

from __future__ import annotations

import asyncio
import json
import sqlite3
import threading
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from shou import Agent, ScriptedModel
from shou.serve import fork_api
from shou.serve.jobs import RunQueue
from shou.store.sqlite import SQLiteStore


def _replica(tmp_path: Path) -> Any:
    """One `shou serve` replica's view of the shared database: its own store and queue connections."""
    queue = RunQueue(sqlite3.connect(tmp_path / "serve.db", isolation_level=None, check_same_thread=False),
                     postgres=False, key=b"k" * 32)
    store = SQLiteStore(tmp_path / "db")
    return SimpleNamespace(user=lambda request: "alice", own_session=lambda name, user: None, store=store,
                           queue=queue)


def _fork(srv: Any, source: str, name: str) -> tuple[int, str]:
    body = json.dumps({"name": name}).encode()

    async def receive() -> dict[str, Any]:
        return {"type": "http.request", "body": body, "more_body": False}

    from starlette.exceptions import HTTPException
    from starlette.requests import Request

    scope = {"type": "http", "method": "POST", "path": f"/v1/sessions/{source}/fork", "headers": [
        (b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())],
        "path_params": {"name": source}, "app": SimpleNamespace(state=SimpleNamespace(server=srv)),
        "query_string": b""}
    try:
        r = asyncio.run(fork_api.fork_session_route(Request(scope, receive)))
        return r.status_code, r.body.decode()
    except HTTPException as e:
        return e.status_code, str(e.detail)


def test_two_replicas_forking_into_one_new_name_leave_the_landed_fork_its_callers(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # Replica A takes the new name "x" (took=True) and is slower to copy the log; replica B, asked the same fork
    # by the same user, finds "x" hers with no log and no run, forks, and answers 201. A's copy then fails
    # (SessionExists: B's landed), and since A took the name it forgets it: B's 201 fork is nobody's (404).
    seed = SQLiteStore(tmp_path / "db")
    asyncio.run(Agent(ScriptedModel([{"text": "done"}]), [], workspace=tmp_path, store=seed).arun("hi", "orig"))
    seed.close()
    a, b = _replica(tmp_path), _replica(tmp_path)
    a.queue.adopt_session("orig", "alice")

    real = fork_api.fork_session
    a_took, b_done = threading.Event(), threading.Event()

    def paced(store: Any, *args: Any) -> Any:
        if store is a.store:  # replica A: between taking the name and copying the log
            a_took.set()
            assert b_done.wait(30), "replica B's fork never answered"
        return real(store, *args)

    monkeypatch.setattr(fork_api, "fork_session", paced)
    answers: dict[str, tuple[int, str]] = {}
    first = threading.Thread(target=lambda: answers.__setitem__("a", _fork(a, "orig", "x")))
    first.start()
    assert a_took.wait(30)
    answers["b"] = _fork(b, "orig", "x")
    b_done.set()
    first.join(30)
    assert answers["b"][0] == 201, answers
    assert b.store.exists("x")
    assert b.queue.session_owner("x") == "alice", (
        f"the fork answered 201 to alice is nobody's after the other replica's fork failed: {answers}")
