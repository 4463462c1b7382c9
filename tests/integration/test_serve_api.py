"""`shou serve` over real HTTP with the scripted model: runs, streams, resumed streams, cancel, sessions,
approvals, tenancy, limits and the OpenAPI document."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from ..fixtures.serving import Served, start_serve, stream_run
from .conftest import FIXTURES, shou_env

ALICE, BOB = "alice-token-0123456789", "bob-token-0123456789ab"


def calc(expression: str) -> dict:
    return {"tool_calls": [{"name": "calculator", "arguments": {"expression": expression}}]}


def call(name: str, **arguments: object) -> dict:
    return {"tool_calls": [{"name": name, "arguments": arguments}]}


@pytest.fixture
def tokens(tmp_path: Path) -> Path:
    path = tmp_path / "tokens.txt"
    path.write_text(f"# token user\n{ALICE} alice\n{BOB} bob\n")
    path.chmod(0o600)  # a tokens file must be its owner's alone
    return path


@pytest.fixture
def config(tmp_path: Path) -> Path:
    cfg = tmp_path / "config"
    cfg.mkdir(exist_ok=True)
    (cfg / "shou.toml").write_text('[permissions]\nask = ["shell"]\n')
    return cfg


@pytest.fixture
def served(tmp_path: Path, workspace: Path, tokens: Path, config: Path) -> Iterator[list[Served]]:
    started: list[Served] = []
    yield started
    for s in started:
        s.stop()


def start(served: list[Served], tmp_path: Path, workspace: Path, srv, *args: str) -> Served:
    s = start_serve(workspace, shou_env(tmp_path, srv), *args)
    served.append(s)
    return s


def wait_status(client: httpx.Client, run_id: str, statuses: tuple[str, ...], timeout: float = 30) -> dict:
    deadline = time.monotonic() + timeout
    while True:
        run = client.get(f"/v1/runs/{run_id}").json()
        if run["status"] in statuses or time.monotonic() > deadline:
            return run
        time.sleep(0.05)


def test_run_stream_and_resumed_stream(serve, served, tmp_path: Path, workspace: Path, tokens: Path) -> None:
    srv = serve([calc("6*7"), {"text": "6*7 = 42"}])
    s = start(served, tmp_path, workspace, srv, "--tokens", str(tokens))
    with s.client(ALICE) as c:
        r = c.post("/v1/runs", json={"task": "What is 6*7?"})
        assert r.status_code == 202, r.text
        run = r.json()
        events = stream_run(c, run["run_id"])
        stored = [m for m in events if m["id"] is not None]
        kinds = [m["event"] for m in stored]
        assert kinds[0] == "run_started" and kinds[-1] == "run_finished"
        assert "tool_call_started" in kinds and "tool_call_finished" in kinds
        ids = [m["id"] for m in stored]
        assert ids == sorted(ids) and len(set(ids)) == len(ids)
        finished = next(m["data"] for m in stored if m["event"] == "tool_call_finished")
        assert finished["name"] == "calculator" and finished["content"] == "42"
        assert stored[-1]["data"]["answer"] == "6*7 = 42"
        # Reconnecting after any event replays exactly the ones after it, with the same ids.
        cut = ids[2]
        again = [m for m in stream_run(c, run["run_id"], after=cut) if m["id"] is not None]
        assert [m["id"] for m in again] == [i for i in ids if i > cut]
        assert [m["data"] for m in again] == [m["data"] for m in stored if m["id"] > cut]
        body = c.get(f"/v1/runs/{run['run_id']}/events", params={"after": cut}).text  # the run ended: so does this
        assert [int(line[4:]) for line in body.splitlines() if line.startswith("id: ")] == [i for i in ids if i > cut]
        got = c.get(f"/v1/runs/{run['run_id']}").json()
        assert got["status"] == "completed" and got["answer"] == "6*7 = 42"
        assert got["usage"]["requests"] == 2 and got["usage"]["input_tokens"] > 0
        assert [r["run_id"] for r in c.get("/v1/runs").json()["runs"]] == [run["run_id"]]
        trace = c.get(f"/v1/runs/{run['run_id']}/trace").json()
        assert len(trace["model_calls"]) == 2 and trace["tool_calls"][0]["name"] == "calculator"
        # The session: listed, its transcript, then continued by a second run.
        assert [x["name"] for x in c.get("/v1/sessions").json()["sessions"]] == [run["session"]]
        transcript = c.get(f"/v1/sessions/{run['session']}").json()
        assert [m["role"] for m in transcript["messages"]] == ["user", "assistant", "tool", "assistant"]


def test_tenancy_tokens_and_limits(serve, served, tmp_path: Path, workspace: Path, tokens: Path) -> None:
    srv = serve([{"text": "hello"}, {"text": "again"}])
    s = start(served, tmp_path, workspace, srv, "--tokens", str(tokens))
    with s.client(ALICE) as alice, s.client(BOB) as bob, s.client() as nobody, s.client("wrong-token-xxxxxxxx") as bad:
        assert nobody.get("/v1/runs").status_code == 401
        assert bad.post("/v1/runs", json={"task": "x"}).status_code == 401
        assert nobody.get("/healthz").status_code == 200
        run = alice.post("/v1/runs", json={"task": "hi", "session": "alice-notes"}).json()
        stream_run(alice, run["run_id"])
        for path in (f"/v1/runs/{run['run_id']}", f"/v1/runs/{run['run_id']}/events",
                     f"/v1/runs/{run['run_id']}/trace", "/v1/sessions/alice-notes"):
            r = bob.get(path)
            assert r.status_code == 404, path
            assert r.json()["error"]["type"] == "not_found"
        assert bob.post(f"/v1/runs/{run['run_id']}/cancel").status_code == 404
        assert bob.delete("/v1/sessions/alice-notes").status_code == 404
        assert bob.get("/v1/sessions").json()["sessions"] == []
        assert bob.get("/v1/runs").json()["runs"] == []
        # the name is bob's own too: his run there makes a session of his, alice's is untouched
        his = bob.post("/v1/runs", json={"task": "mine now", "session": "alice-notes"})
        assert his.status_code == 202 and his.json()["session"] == "alice-notes", his.text
        stream_run(bob, his.json()["run_id"])
        assert [m["content"] for m in bob.get("/v1/sessions/alice-notes").json()["messages"]] == ["mine now", "again"]
        assert [m["content"] for m in alice.get("/v1/sessions/alice-notes").json()["messages"]] == ["hi", "hello"]
        # Bad bodies: a clear 400 naming the field; too large: 413.
        r = alice.post("/v1/runs", json={"task": ""})
        assert r.status_code == 400 and "task" in r.json()["error"]["message"]
        assert alice.post("/v1/runs", json={"task": "x", "options": {"max_steps": 0}}).status_code == 400
        assert alice.post("/v1/runs", json={"task": "x", "session": "../etc"}).status_code == 400
        as_json = {"Content-Type": "application/json"}
        assert alice.post("/v1/runs", content=b"{not json", headers=as_json).status_code == 400
        assert alice.post("/v1/runs", content=b"x" * (3 * 1024 * 1024), headers=as_json).status_code == 413
        assert alice.post("/v1/runs", content=b'{"task": "x"}', headers={"Content-Type": "text/plain"}
                          ).status_code == 415
        # Deleting: the session and its log are gone.
        assert alice.delete("/v1/sessions/alice-notes").status_code == 204
        assert alice.get("/v1/sessions/alice-notes").status_code == 404


def test_quota_busy_session_and_cancel(serve, served, tmp_path: Path, workspace: Path, tokens: Path) -> None:
    srv = serve([call("nap", tag="long", seconds=60), call("nap", tag="b", seconds=60), {"text": "third"}])
    s = start(served, tmp_path, workspace, srv, "--tokens", str(tokens), "--max-runs-per-user", "2",
              "--functions", str(FIXTURES / "extra_tools.py"))
    with s.client(ALICE) as c:
        first = c.post("/v1/runs", json={"task": "nap", "session": "one"}).json()
        busy = c.post("/v1/runs", json={"task": "again", "session": "one"})
        assert busy.status_code == 409 and busy.json()["error"]["type"] == "conflict"
        second = c.post("/v1/runs", json={"task": "nap", "session": "two"}).json()
        over = c.post("/v1/runs", json={"task": "third", "session": "three"})
        assert over.status_code == 429, over.text
        # Stream the first until its tool starts, then cancel it: the stream ends with `cancelled`.
        seen = stream_run(c, first["run_id"], until="tool_call_started")
        assert seen[-1]["data"]["call"]["function"]["name"] == "nap"
        assert c.post(f"/v1/runs/{first['run_id']}/cancel").status_code == 202
        rest = stream_run(c, first["run_id"], after=seen[-1]["id"])
        assert rest[-1]["event"] == "run_finished" and rest[-1]["data"]["status"] == "cancelled"
        assert wait_status(c, first["run_id"], ("cancelled",))["status"] == "cancelled"
        c.post(f"/v1/runs/{second['run_id']}/cancel")
        assert wait_status(c, second["run_id"], ("cancelled",))["status"] == "cancelled"
        # Room again, and the session can run again.
        third = c.post("/v1/runs", json={"task": "third", "session": "one"})
        assert third.status_code == 202, third.text


def test_approvals_through_the_api(serve, served, tmp_path: Path, workspace: Path, tokens: Path) -> None:
    srv = serve([call("shell", command="echo ran >> log.txt"), {"text": "logged"}])
    s = start(served, tmp_path, workspace, srv, "--tokens", str(tokens))
    with s.client(ALICE) as c, s.client(BOB) as bob:
        run = c.post("/v1/runs", json={"task": "log it"}).json()
        events = stream_run(c, run["run_id"], until="approval_requested")
        call_id = events[-1]["data"]["call"]["id"]
        assert wait_status(c, run["run_id"], ("waiting_approval",))["status"] == "waiting_approval"
        assert not (workspace / "log.txt").exists()
        [pending] = c.get("/v1/approvals").json()["approvals"]
        assert (pending["call_id"], pending["tool"], pending["run_id"]) == (call_id, "shell", run["run_id"])
        assert pending["arguments"] == {"command": "echo ran >> log.txt"}
        assert bob.get("/v1/approvals").json()["approvals"] == []
        assert bob.post(f"/v1/approvals/{call_id}", json={"allow": True}).status_code == 404
        assert c.post(f"/v1/approvals/{call_id}", json={"allow": "maybe"}).status_code == 400
        ok = c.post(f"/v1/approvals/{call_id}", json={"allow": True})
        assert ok.status_code == 200 and ok.json() == {"call_id": call_id, "allow": True, "run_id": run["run_id"]}
        assert c.post(f"/v1/approvals/{call_id}", json={"allow": True}).status_code == 404  # decided
        # The same stream goes on through the wait to the end; the call ran once.
        rest = stream_run(c, run["run_id"], after=events[-1]["id"])
        kinds = [m["event"] for m in rest if m["id"] is not None]
        assert "approval_decided" in kinds and "run_resumed" in kinds and kinds[-1] == "run_finished"
        assert rest[-1]["data"]["status"] == "completed" and rest[-1]["data"]["answer"] == "logged"
        assert (workspace / "log.txt").read_text() == "ran\n"
        assert c.get("/v1/approvals").json()["approvals"] == []


def test_openapi_docs_and_loopback_defences(serve, served, tmp_path: Path, workspace: Path) -> None:
    from openapi_spec_validator import validate

    s = start(served, tmp_path, workspace, serve([{"text": "hello"}]))
    with s.client() as c:
        spec = c.get("/openapi.json").json()
        validate(spec)
        for path in ("/v1/runs", "/v1/runs/{run_id}/events", "/v1/runs/{run_id}/cancel", "/v1/sessions/{name}",
                     "/v1/approvals/{call_id}", "/v1/chat/completions", "/v1/models"):
            assert path in spec["paths"]
        assert set(spec["paths"]["/v1/sessions/{name}"]) == {"get", "delete"}
        page = c.get("/docs")
        assert page.status_code == 200 and "/v1/runs/{run_id}/events" in page.text and "RunRequest" in page.text
        assert "shou serve" in c.get("/").text or c.get("/").status_code == 200
        # No tokens: loopback only, and it says so; what a web page elsewhere could send is refused.
        assert "loopback only" in s.log()
        assert c.get("/v1/runs").status_code == 200
        port = s.url.rsplit(":", 1)[1]
        task = b'{"task": "rm -rf ~"}'
        for headers, status in [
            ({"Content-Type": "text/plain"}, 415),  # a cross-origin "simple" POST
            ({"Content-Type": "application/json", "Origin": "http://evil.example"}, 403),
            ({"Content-Type": "application/json", "Origin": "null"}, 403),
            ({"Content-Type": "application/json", "Host": f"evil.example:{port}"}, 403),  # DNS rebinding
        ]:
            assert c.post("/v1/runs", content=task, headers=headers).status_code == status, headers
        assert c.get("/v1/runs", headers={"Host": f"rebound.example:{port}"}).status_code == 403
        assert c.get("/v1/runs").json()["runs"] == []  # none of them started a run
        ok = c.post("/v1/runs", json={"task": "hi"}, headers={"Origin": s.url})
        assert ok.status_code == 202, ok.text
    assert json.loads(json.dumps(spec))["openapi"].startswith("3.1")
