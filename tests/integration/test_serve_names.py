"""Session names are each user's own (shou.serve.names), over real HTTP on loopback, on SQLite and PostgreSQL.

Bob asking for a name alice holds gets exactly what a name nobody holds gets: his run there runs in a session
of his own, his events and lists show his sessions, a read is a 404 with the same words, a fork into it lands
as his. Alice's session is untouched, both keep using the name. A session of alice's from before names were
per user stays hers by its bare name; the person at the machine's server and the CLI still share bare names.
"""

from __future__ import annotations

import asyncio
import sqlite3
from pathlib import Path
from typing import Any

import httpx
import pytest

from ..fixtures.serving import Served, start_serve, stream_run
from .conftest import shou_env

ALICE, BOB = "alice-token-0123456789", "bob-token-0123456789ab"
LONG = "n" * 128  # the longest name a user may give


@pytest.fixture(params=["sqlite", "postgres"])
def store_args(request: pytest.FixtureRequest) -> list[str]:
    """`--store` for this test's database: a SQLite file in the workspace, or a fresh PostgreSQL database."""
    if request.param == "sqlite":
        return ["--store", "names.db"]
    return ["--store", request.getfixturevalue("postgres_url")]


def _serve(served: list[Served], tmp_path: Path, workspace: Path, srv: Any, *args: str) -> Served:
    tokens = tmp_path / "tokens"
    tokens.write_text(f"{ALICE} alice\n{BOB} bob\n")
    tokens.chmod(0o600)
    s = start_serve(workspace, shou_env(tmp_path, srv), "--tokens", str(tokens), *args)
    served.append(s)
    return s


def _run(client: httpx.Client, task: str, session: str | None = None) -> dict[str, Any]:
    """Ask for a run and follow it to its end: the run row (202 asserted) and its events."""
    r = client.post("/v1/runs", json={"task": task, **({"session": session} if session else {})})
    assert r.status_code == 202, r.text
    run = r.json()
    events = stream_run(client, run["run_id"])
    assert events[-1]["event"] == "run_finished", events
    return {**run, "events": events}


def _missing(client: httpx.Client, method: str, path: str, name: str, **kw: Any) -> tuple[int, Any]:
    """The answer to `path` with a name, its words with the name taken out (to compare with a free name's)."""
    r = client.request(method, path, **kw)
    body = r.json() if r.content else None
    if body and "error" in body:
        body = {**body["error"], "message": body["error"]["message"].replace(name, "NAME")}
    return r.status_code, body


def _texts(client: httpx.Client, name: str) -> list[str]:
    got = client.get(f"/v1/sessions/{name}")
    assert got.status_code == 200, got.text
    return [m["content"] for m in got.json()["messages"]]


def test_a_name_alice_holds_is_free_for_bob_and_both_keep_it(serve, served, tmp_path: Path, workspace: Path,
                                                             store_args: list[str]) -> None:
    srv = serve([{"text": "alice's answer"}, {"text": "bob's answer"}, {"text": "long one"},
                 {"text": "alice again"}])
    s = _serve(served, tmp_path, workspace, srv, *store_args)
    with s.client(ALICE) as alice, s.client(BOB) as bob:
        mine = _run(alice, "alice's task", "notes")
        assert mine["session"] == "notes"
        started = next(m for m in mine["events"] if m["event"] == "run_started")
        assert started["data"]["session"] == "notes", started  # the user's own name, never the stored one

        # Reading it: exactly what a name nobody holds answers.
        for method, path in (("GET", "/v1/sessions/{}"), ("DELETE", "/v1/sessions/{}"),
                             ("POST", "/v1/sessions/{}/fork")):
            kw = {"json": {}} if method == "POST" else {}
            held = _missing(bob, method, path.format("notes"), "notes", **kw)
            free = _missing(bob, method, path.format("nobody-has"), "nobody-has", **kw)
            assert held == free and held[0] == 404, (method, path, held, free)

        # Running in it: a session of bob's own, with his events only.
        his = _run(bob, "bob's task", "notes")
        assert his["session"] == "notes"
        started = next(m for m in his["events"] if m["event"] == "run_started")
        assert started["data"]["session"] == "notes" and started["data"]["task"] == "bob's task"
        assert his["events"][-1]["data"]["answer"] == "bob's answer"
        assert all("alice" not in str(m["data"]) for m in his["events"]), his["events"]
        assert _texts(bob, "notes") == ["bob's task", "bob's answer"]
        assert _texts(alice, "notes") == ["alice's task", "alice's answer"]  # hers untouched
        assert [x["name"] for x in bob.get("/v1/sessions").json()["sessions"]] == ["notes"]
        assert [x["name"] for x in alice.get("/v1/sessions").json()["sessions"]] == ["notes"]
        assert [r["session"] for r in bob.get("/v1/runs").json()["runs"]] == ["notes"]
        assert [r["run_id"] for r in bob.get("/v1/sessions/notes").json()["runs"]] == [his["run_id"]]
        assert bob.get(f"/v1/runs/{mine['run_id']}").status_code == 404  # runs stay their user's
        assert bob.get(f"/v1/runs/{his['run_id']}/trace").json()["session"] == "notes"

        # The longest name a user may give is stored (its derived name within every index's limit).
        assert _run(bob, "long", LONG)["session"] == LONG
        assert _texts(bob, LONG) == ["long", "long one"]

        # Deleting his: alice's stays; his is then a 404, as a name never made is.
        assert bob.delete("/v1/sessions/notes").status_code == 204
        assert _missing(bob, "GET", "/v1/sessions/notes", "notes") == _missing(bob, "GET", "/v1/sessions/x1", "x1")
        assert _missing(bob, "DELETE", "/v1/sessions/notes", "notes")[0] == 404
        assert _texts(alice, "notes") == ["alice's task", "alice's answer"]
        again = _run(alice, "alice once more", "notes")
        assert again["events"][-1]["data"]["answer"] == "alice again"
        assert _texts(alice, "notes")[-2:] == ["alice once more", "alice again"]

        # Names no user may give are nobody's session: stored names included.
        for odd in ("u~0123456789abcdef~notes", "%7E", "a%20b", "-x", "x" * 129):
            assert bob.get(f"/v1/sessions/{odd}").status_code == 404, odd
    assert "Traceback" not in s.log(), s.log()[-3000:]


def test_forks_into_a_name_alice_holds_land_as_bobs(serve, served, tmp_path: Path, workspace: Path,
                                                    store_args: list[str]) -> None:
    srv = serve([{"text": "alice's answer"}, {"text": "bob's answer"}, {"text": "bob in the fork"}])
    s = _serve(served, tmp_path, workspace, srv, *store_args)
    with s.client(ALICE) as alice, s.client(BOB) as bob:
        _run(alice, "alice's task", "notes")
        _run(bob, "bob's task", "mine")
        held = bob.post("/v1/sessions/mine/fork", json={"name": "notes"})
        free = bob.post("/v1/sessions/mine/fork", json={"name": "free-name"})
        assert held.status_code == free.status_code == 201, (held.text, free.text)
        assert held.json() == {**free.json(), "name": "notes"} and held.json()["source"] == "mine"
        assert _texts(bob, "notes") == ["bob's task", "bob's answer"]
        assert _texts(alice, "notes") == ["alice's task", "alice's answer"]
        # into a name of his own that is taken: the 409 is his own session's
        taken = bob.post("/v1/sessions/mine/fork", json={"name": "notes"})
        assert taken.status_code == 409 and "'notes'" in taken.json()["error"]["message"], taken.text
        assert "~" not in taken.text
        # alice forks into a name bob holds: hers
        assert alice.post("/v1/sessions/notes/fork", json={"name": "mine"}).status_code == 201
        assert _texts(alice, "mine") == ["alice's task", "alice's answer"]
        assert _texts(bob, "mine") == ["bob's task", "bob's answer"]
        # a run in bob's fork goes on from his history
        _run(bob, "go on", "notes")
        assert _texts(bob, "notes") == ["bob's task", "bob's answer", "go on", "bob in the fork"]
        assert sorted(x["name"] for x in bob.get("/v1/sessions").json()["sessions"]) == ["free-name", "mine", "notes"]
        assert sorted(x["name"] for x in alice.get("/v1/sessions").json()["sessions"]) == ["mine", "notes"]
    assert "Traceback" not in s.log(), s.log()[-3000:]


def _legacy(workspace: Path, store_args: list[str]) -> None:
    """Alice's session "notes" as a server before names were per user left it: its log, and a `serve_sessions`
    row of the bare name."""
    from shou import Agent, ScriptedModel
    from shou.serve.jobs import RunQueue

    where = store_args[1]
    store: Any
    if where.startswith("postgresql"):
        from shou.store.pg_link import Link
        from shou.store.postgres import PostgresStore

        store, queue = PostgresStore(where), RunQueue(Link(where), postgres=True)
    else:
        from shou.store.sqlite import SQLiteStore

        path = workspace / where
        store = SQLiteStore(path)
        queue = RunQueue(sqlite3.connect(path, isolation_level=None, check_same_thread=False), postgres=False)
    asyncio.run(Agent(ScriptedModel([{"text": "old answer"}]), [], workspace=workspace, store=store)
                .arun("old task", "notes"))
    queue.submit("run_old", "alice", "notes", "old task", {})  # the row, as the old server's submit made it
    queue.cancel("run_old")
    queue.close()
    store.close()


def test_a_session_from_before_stays_its_owners_by_its_bare_name(serve, served, tmp_path: Path, workspace: Path,
                                                                  store_args: list[str]) -> None:
    _legacy(workspace, store_args)
    srv = serve([{"text": "new answer"}, {"text": "bob's answer"}])
    s = _serve(served, tmp_path, workspace, srv, *store_args)
    with s.client(ALICE) as alice, s.client(BOB) as bob:
        assert _texts(alice, "notes") == ["old task", "old answer"]
        assert [x["name"] for x in alice.get("/v1/sessions").json()["sessions"]] == ["notes"]
        run = _run(alice, "new task", "notes")
        assert run["session"] == "notes"
        assert _texts(alice, "notes") == ["old task", "old answer", "new task", "new answer"]
        # bob: a name of his own, as for any other
        assert bob.get("/v1/sessions/notes").status_code == 404
        _run(bob, "bob's task", "notes")
        assert _texts(bob, "notes") == ["bob's task", "bob's answer"]
        assert alice.delete("/v1/sessions/notes").status_code == 204
        assert _texts(bob, "notes") == ["bob's task", "bob's answer"]
        assert alice.get("/v1/sessions/notes").status_code == 404
    assert "Traceback" not in s.log(), s.log()[-3000:]


def test_the_local_server_and_the_cli_share_bare_names(serve, served, shou, tmp_path: Path,
                                                        workspace: Path) -> None:
    srv = serve([{"text": "from the server"}, {"text": "from the cli"}])
    s = start_serve(workspace, shou_env(tmp_path, srv), "--store", ".shou/shou.db")
    served.append(s)
    with s.client() as me:
        assert _run(me, "asked over http", "notes")["session"] == "notes"
    shown = shou("show", "notes")
    assert shown.returncode == 0 and "asked over http" in shown.stdout, shown.stdout + shown.stderr
    went_on = shou("run", "-s", "notes", "asked in the terminal", server=srv)
    assert went_on.returncode == 0, went_on.stdout + went_on.stderr
    with s.client() as me:
        assert _texts(me, "notes") == ["asked over http", "from the server", "asked in the terminal", "from the cli"]
