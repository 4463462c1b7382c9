"""`shou fork` and `POST /v1/sessions/{name}/fork`: a 4-step session forked at step 2, continued with the scripted
model over the real wire; the fork's first request holds steps 1-2 only, and the original's rows are unchanged.
The store method is checked on SQLite (the CLI's workspace log) and on PostgreSQL."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path
from typing import Any

from shou.session import Session, fork_session
from shou.store.sqlite import SQLiteStore

from ..fixtures.serving import serving, stream_run
from .conftest import shou_env, tool_messages

TASK = "add up some numbers"


def calc(expression: str) -> dict:
    return {"tool_calls": [{"name": "calculator", "arguments": {"expression": expression}}]}


FOUR_STEPS = [calc("1 + 1"), calc("2 + 2"), calc("3 + 3"), {"text": "the sums are 2, 4 and 6"}]


def stored(workspace: Path, session: str) -> list[tuple[Any, ...]]:
    """Every column of a session's rows and its row in `sessions`, read straight from the file."""
    with sqlite3.connect(workspace / ".shou" / "shou.db") as db:
        rows = db.execute("SELECT id, session, run_id, type, ts, data, writer FROM events WHERE session = ? "
                          "ORDER BY id", (session,)).fetchall()
        return rows + db.execute("SELECT * FROM sessions WHERE name = ?", (session,)).fetchall()


def conversation(request: dict) -> list[tuple[str, str]]:
    """(role, what it says or calls) of a recorded request's messages, without the system prompt."""
    out = []
    for m in request["messages"]:
        if m["role"] == "system":
            continue
        calls = [c["function"]["arguments"] for c in m.get("tool_calls") or ()]
        out.append((m["role"], " ".join(calls) or str(m.get("content") or "")))
    return out


def test_a_fork_at_step_2_continues_from_steps_1_and_2_only(serve, shou, workspace: Path) -> None:
    r = shou("run", TASK, "-s", "orig", server=serve(FOUR_STEPS))
    assert r.returncode == 0, r.stderr
    before = stored(workspace, "orig")
    shown = shou("show", "orig")
    assert "(step 2 · #2)" in shown.stdout and "(step 4 · #4)" in shown.stdout, shown.stdout

    r = shou("fork", "orig", "--at", "2", "-s", "forked")
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == "forked" and "forked orig at step 2" in r.stderr

    srv = serve([{"text": "and then 8"}])
    r = shou("run", "-s", "forked", "what comes next?", server=srv)
    assert r.returncode == 0, r.stderr
    [first] = srv.requests
    talk = conversation(first)
    assert talk[0] == ("user", TASK) and talk[-1] == ("user", "what comes next?")
    assert [m for m in talk if m[0] == "assistant"] == [("assistant", '{"expression": "1 + 1"}'),
                                                        ("assistant", '{"expression": "2 + 2"}')]
    assert [m["content"] for m in tool_messages(first)] == ["2", "4"]
    assert "3 + 3" not in json.dumps(first) and "2, 4 and 6" not in json.dumps(first)
    assert stored(workspace, "orig") == before  # byte for byte, after the fork and a run in it

    # The fork's trace resolves every request from its own log; its first run ends as cut.
    r = shou("trace", "forked", "--json")
    assert r.returncode == 0, r.stderr
    runs = json.loads(r.stdout)["runs"]
    assert [run["status"] for run in runs] == ["cancelled", "completed"]
    calls = [c for run in runs for c in run["model_calls"]]
    assert len(calls) == 3 and all(c["request"]["messages"] and c["request"]["pruned"] == 0 for c in calls)
    assert "_pruned" not in json.dumps(calls)
    listed = {s["session"]: s for s in json.loads(shou("sessions", "--json").stdout)}
    assert listed["forked"]["status"] == "completed" and listed["orig"]["status"] == "completed"
    assert listed["forked"]["first_task"] == TASK


def test_a_fork_is_not_spending_again(serve, shou, workspace: Path) -> None:
    assert shou("run", TASK, "-s", "orig", server=serve(FOUR_STEPS)).returncode == 0
    spent = json.loads(shou("usage", "--json").stdout)["total"]
    assert spent["requests"] == 4
    assert shou("fork", "orig", "-s", "whole").returncode == 0
    assert json.loads(shou("usage", "--json").stdout)["total"] == spent  # the copied calls were paid once
    listed = {s["session"]: s for s in json.loads(shou("sessions", "--json").stdout)}
    assert listed["whole"]["status"] == "completed"  # the last step ended its run: its own ending is kept
    with SQLiteStore(workspace / ".shou" / "shou.db", readonly=True) as store:
        assert [e.to_dict() for e in store.events("whole")] == [e.to_dict() for e in store.events("orig")]


def test_bad_forks_get_a_clear_error(serve, shou, workspace: Path) -> None:
    assert shou("fork", "orig").returncode == 2  # no log at all yet
    assert shou("run", TASK, "-s", "orig", server=serve(FOUR_STEPS)).returncode == 0
    before = stored(workspace, "orig")
    for args, why in [(("nope",), "no session 'nope'"), (("orig", "--at", "9"), "has 4 finished step(s)"),
                      (("orig", "--at", "x"), "give a step number"), (("orig", "-s", "orig"), "a name of its own"),
                      (("orig", "-s", " "), "no session name")]:
        r = shou("fork", *args)
        assert r.returncode == 2 and why in r.stderr and "Traceback" not in r.stderr, (args, r.stderr)
    assert shou("fork", "orig", "--at", "1", "-s", "taken").returncode == 0
    r = shou("fork", "orig", "-s", "taken")
    assert r.returncode == 2 and "exists already" in r.stderr
    assert stored(workspace, "orig") == before


def test_the_store_method_on_postgresql(serve, shou, workspace: Path, postgres_url: str) -> None:
    from shou.store.postgres import PostgresStore

    assert shou("run", TASK, "-s", "orig", server=serve(FOUR_STEPS)).returncode == 0
    with SQLiteStore(workspace / ".shou" / "shou.db", readonly=True) as local:
        events = list(local.events("orig"))
    with PostgresStore(postgres_url) as pg:
        for event in events:
            pg.append("orig", event)
        pg.commit()
        original = pg._reader.execute("SELECT id, session, run_id, type, ts, data, writer, uid FROM events "
                                      "WHERE session = 'orig' ORDER BY id")
        name, point = fork_session(pg, "orig", "2", "forked")
        assert (name, point.step) == ("forked", 2)
        fork = Session("forked", pg)
        assert fork.open_run is None
        assert [m.role for m in fork.messages] == ["user", "assistant", "tool", "assistant", "tool"]
        assert [m.text for m in fork.messages if m.role == "tool"] == ["2", "4"]
        assert {i.name: i.status for i in pg.sessions()} == {"orig": "completed", "forked": "cancelled"}
        assert pg._reader.execute("SELECT id, session, run_id, type, ts, data, writer, uid FROM events WHERE "
                                  "session = 'orig' ORDER BY id") == original
        from shou import trace as tr

        [run] = tr.traces(pg, "forked")
        tr.resolve(pg, run.model_calls)
        assert len(run.model_calls) == 2 and all(c.messages and c.pruned == 0 for c in run.model_calls)
        try:
            fork_session(pg, "orig", "1", "forked")
        except Exception as e:
            assert "exists already" in str(e)
        else:
            raise AssertionError("a fork onto a taken name was let through")


def test_the_api_forks_only_the_callers_own_session(serve, tmp_path: Path, workspace: Path) -> None:
    alice, bob = "alice-token-0123456789", "bob-token-0123456789ab"
    (tmp_path / "tokens").write_text(f"{alice} alice\n{bob} bob\n")
    (tmp_path / "tokens").chmod(0o600)
    srv = serve([*FOUR_STEPS, {"text": "and then 8"}])
    with serving(workspace, shou_env(tmp_path, srv), "--tokens", str(tmp_path / "tokens")) as s, \
            s.client(alice) as a, s.client(bob) as b:
        run = a.post("/v1/runs", json={"task": TASK, "session": "orig"}).json()
        assert stream_run(a, run["run_id"])[-1]["data"]["status"] == "completed"
        assert b.post("/v1/sessions/orig/fork", json={"at": 2, "name": "bobs"}).status_code == 404
        assert a.post("/v1/sessions/orig/fork", json={"at": 9}).status_code == 400
        assert a.post("/v1/sessions/orig/fork", json={"at": 2, "name": "../x"}).status_code == 400
        made = a.post("/v1/sessions/orig/fork", json={"at": 2, "name": "forked"})
        assert made.status_code == 201, made.text
        assert made.json() == {"name": "forked", "source": "orig", "step": 2}
        assert a.post("/v1/sessions/orig/fork", json={"name": "forked"}).status_code == 409
        assert b.get("/v1/sessions/forked").status_code == 404
        fresh = a.post("/v1/sessions/orig/fork", json={"at": "1"}).json()["name"]
        assert fresh != "forked" and a.get(f"/v1/sessions/{fresh}").status_code == 200
        assert a.post("/v1/sessions/orig/fork", json={"at": 2, "name": "bobs"}).status_code == 201  # let go of

        run = a.post("/v1/runs", json={"task": "what comes next?", "session": "forked"}).json()
        assert stream_run(a, run["run_id"])[-1]["data"]["status"] == "completed"
        first = srv.requests[4]
        assert [m["content"] for m in tool_messages(first)] == ["2", "4"]
        assert "3 + 3" not in json.dumps(first)
        assert conversation(first)[-1] == ("user", "what comes next?")
        shown = a.get("/v1/sessions/orig").json()["messages"]
        assert len([m for m in shown if m["role"] == "tool"]) == 3  # the original keeps all its steps
