"""`shou serve` as an A2A agent, driven by the a2a-sdk's own client classes over real HTTP on loopback: the
card, a streamed task with a calculator call inside, a follow-up in the same context, cancel, resubscribing
after a cut stream, input-required for an approval and its resolution, 401 without a token, another user's
task not found."""

from __future__ import annotations

import contextlib
import json
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from a2a.client import A2ACardResolver, ClientConfig, ClientFactory
from a2a.client.errors import A2AClientError
from a2a.types import (
    CancelTaskRequest,
    GetExtendedAgentCardRequest,
    GetTaskRequest,
    ListTasksRequest,
    Message,
    Part,
    Role,
    SendMessageRequest,
    StreamResponse,
    SubscribeToTaskRequest,
    TaskState,
)
from a2a.utils.errors import InvalidParamsError, TaskNotFoundError
from google.protobuf.json_format import MessageToDict

from shou.serve.a2a_tasks import SHOWN

from ..fixtures.serving import Served, start_serve, stream_run
from .conftest import FIXTURES, shou_env

ALICE, BOB = "alice-token-0123456789", "bob-token-0123456789ab"
JSONRPC, REST = "JSONRPC", "HTTP+JSON"


def calc(expression: str) -> dict:
    return {"tool_calls": [{"name": "calculator", "arguments": {"expression": expression}}]}


def call(name: str, **arguments: object) -> dict:
    return {"tool_calls": [{"name": name, "arguments": arguments}]}


@pytest.fixture
def tokens(tmp_path: Path) -> Path:
    path = tmp_path / "tokens.txt"
    path.write_text(f"{ALICE} alice\n{BOB} bob\n")
    path.chmod(0o600)
    return path


@pytest.fixture
def served(tmp_path: Path) -> Iterator[list[Served]]:
    started: list[Served] = []
    yield started
    for s in started:
        s.stop()


def start(served: list[Served], tmp_path: Path, workspace: Path, srv: Any, tokens: Path, *args: str) -> Served:
    s = start_serve(workspace, shou_env(tmp_path, srv), "--tokens", str(tokens), *args)
    served.append(s)
    return s


class Agent:
    """An SDK client of the server for one token and binding (its httpx client closed with it)."""

    def __init__(self, url: str, token: str | None, binding: str = JSONRPC, streaming: bool = True) -> None:
        self.http = httpx.AsyncClient(headers={"Authorization": f"Bearer {token}"} if token else {}, timeout=60)
        self.url, self.binding, self.streaming = url, binding, streaming

    async def __aenter__(self) -> Any:
        card = await A2ACardResolver(self.http, self.url).get_agent_card()
        config = ClientConfig(httpx_client=self.http, streaming=self.streaming,
                              supported_protocol_bindings=[self.binding])
        return ClientFactory(config).create(card)

    async def __aexit__(self, *exc: object) -> None:
        await self.http.aclose()


def message(text: str, *, context_id: str = "", task_id: str = "", **metadata: Any) -> SendMessageRequest:
    sent = Message(message_id=f"m-{time.monotonic_ns()}", role=Role.ROLE_USER, parts=[Part(text=text)],
                   context_id=context_id, task_id=task_id)
    request = SendMessageRequest(message=sent)
    if metadata:
        request.metadata.update(metadata)
    return request


def status_of(response: StreamResponse) -> Any:
    kind = response.WhichOneof("payload")
    return response.task.status if kind == "task" else response.status_update.status if kind == "status_update" \
        else None


def event_data(response: StreamResponse) -> dict[str, Any]:
    """The shou event a status update carries (its data part), with its id."""
    status = status_of(response)
    if status is None or not status.HasField("message"):
        return {}
    data = next((MessageToDict(p.data) for p in status.message.parts if p.WhichOneof("content") == "data"), {})
    meta = MessageToDict(status.message.metadata)
    return {**data, "event_id": int(meta["event_id"])} if "event_id" in meta else data


def text_of(status: Any) -> str:
    return "\n".join(p.text for p in status.message.parts if p.WhichOneof("content") == "text")


async def collect(stream: AsyncIterator[StreamResponse], limit: int | None = None) -> list[StreamResponse]:
    """The stream's responses; with `limit`, that many, then the stream is closed (the connection cut)."""
    out = []
    async with contextlib.aclosing(stream) as responses:  # type: ignore[type-var]
        async for response in responses:
            out.append(response)
            if limit is not None and len(out) >= limit:
                break
    return out


async def test_card_stream_follow_up_tenancy_and_401(serve, served, tmp_path: Path, workspace: Path,
                                                       tokens: Path) -> None:
    srv = serve([calc("6*7"), {"text": "6*7 = 42"}, {"text": "42 + 1 = 43"}])
    s = start(served, tmp_path, workspace, srv, tokens)
    # The card: public, bearer, both bindings at this server, streaming; the tools only for a caller with a token.
    async with httpx.AsyncClient() as anonymous:
        card = await A2ACardResolver(anonymous, s.url).get_agent_card()
    assert card.name == "shou" and card.capabilities.streaming and not card.capabilities.push_notifications
    assert {(i.protocol_binding, i.url) for i in card.supported_interfaces} == {
        (JSONRPC, f"{s.url}/a2a/jsonrpc"), (REST, f"{s.url}/a2a/rest")}
    assert card.security_schemes["bearer"].http_auth_security_scheme.scheme.lower() == "bearer"
    assert all("calculator" not in skill.tags for skill in card.skills)
    async with Agent(s.url, ALICE) as alice:
        extended = await alice.get_extended_agent_card(GetExtendedAgentCardRequest())
        assert "calculator" in extended.skills[0].tags
        # A streamed task: the task first, a status update per event (the calculator call among them), completed.
        seen = await collect(alice.send_message(message("What is 6*7?")))
    assert seen[0].WhichOneof("payload") == "task"
    task_id, context_id = seen[0].task.id, seen[0].task.context_id
    events = [event_data(r) for r in seen[1:]]
    started = next(e for e in events if e.get("type") == "tool_call_started")
    finished = next(e for e in events if e.get("type") == "tool_call_finished")
    assert started["call"]["function"]["name"] == "calculator" and finished["content"] == "42"
    final = status_of(seen[-1])
    assert final.state == TaskState.TASK_STATE_COMPLETED and text_of(final) == "6*7 = 42"
    ids = [e["event_id"] for e in events if "event_id" in e]
    assert ids == sorted(set(ids))
    # A follow-up in the same context, over the other binding and without streaming: the same conversation.
    async with Agent(s.url, ALICE, REST, streaming=False) as alice_rest:
        [answer] = await collect(alice_rest.send_message(message("And plus one?", context_id=context_id)))
        follow = answer.task
        assert follow.context_id == context_id and follow.id != task_id
        assert follow.status.state == TaskState.TASK_STATE_COMPLETED and text_of(follow.status) == "42 + 1 = 43"
        sent = [m["content"] for m in srv.requests[2]["messages"] if m["role"] in ("user", "assistant")]
        assert "What is 6*7?" in sent and "6*7 = 42" in sent and "And plus one?" in sent
        got = await alice_rest.get_task(GetTaskRequest(id=task_id))
        assert got.status.state == TaskState.TASK_STATE_COMPLETED
        listed = await alice_rest.list_tasks(ListTasksRequest(context_id=context_id))
        assert {t.id for t in listed.tasks} == {task_id, follow.id}
    # Another user: the task does not exist for them, whatever they ask; their list is empty.
    async with Agent(s.url, BOB) as bob:
        for ask in (bob.get_task(GetTaskRequest(id=task_id)), bob.cancel_task(CancelTaskRequest(id=task_id))):
            with pytest.raises(TaskNotFoundError):
                await ask
        with pytest.raises(TaskNotFoundError):
            await collect(bob.subscribe(SubscribeToTaskRequest(id=task_id)))
        with pytest.raises(TaskNotFoundError):
            await collect(bob.send_message(message("approve", task_id=task_id)))
        assert list((await bob.list_tasks(ListTasksRequest())).tasks) == []
    # No token, or a wrong one: 401 on both bindings, and nothing ran.
    for token, binding in ((None, JSONRPC), ("wrong-token-0123456789", REST)):
        async with Agent(s.url, token, binding) as nobody:
            with pytest.raises(A2AClientError, match="401"):
                await collect(nobody.send_message(message("What is 6*7?")))
    assert len(srv.requests) == 3
    r = httpx.post(f"{s.url}/a2a/jsonrpc", json={"jsonrpc": "2.0", "id": 1, "method": "GetTask", "params": {}})
    assert r.status_code == 401 and r.headers["www-authenticate"].startswith("Bearer")
    # a body that is not UTF-8 is no JSON: the caller is told so, not answered with an internal error
    bad = b'{"jsonrpc": "2.0", "id": 1, "method": "SendMessage", "params": {"text": "caf\xe9"}}'
    auth = {"Authorization": f"Bearer {ALICE}", "Content-Type": "application/json"}
    r = httpx.post(f"{s.url}/a2a/jsonrpc", content=bad, headers=auth)
    assert r.status_code == 200 and r.json()["error"]["code"] == -32700 and "not UTF-8" in r.json()["error"]["message"]
    r = httpx.post(f"{s.url}/a2a/rest/message:send", content=bad, headers=auth)
    assert r.status_code == 400 and "not UTF-8" in r.json()["error"]["message"]
    assert len(srv.requests) == 3  # neither reached the model


async def test_cancel_a_long_task(serve, served, tmp_path: Path, workspace: Path, tokens: Path) -> None:
    srv = serve([call("nap", tag="long", seconds=60), {"text": "never"}])
    s = start(served, tmp_path, workspace, srv, tokens, "--functions", str(FIXTURES / "extra_tools.py"))
    async with Agent(s.url, ALICE) as alice:
        seen = []
        async for response in alice.send_message(message("Take a long nap")):
            seen.append(response)
            if event_data(response).get("type") == "tool_call_started":
                break
        task_id = seen[0].task.id
        began = time.monotonic()
        cancelled = await alice.cancel_task(CancelTaskRequest(id=task_id))
        took = time.monotonic() - began
        assert cancelled.status.state == TaskState.TASK_STATE_CANCELED, cancelled.status
        assert took < 10, took
        assert (await alice.get_task(GetTaskRequest(id=task_id))).status.state == TaskState.TASK_STATE_CANCELED
        with pytest.raises(Exception, match="ended"):  # nothing more will come of it
            await collect(alice.subscribe(SubscribeToTaskRequest(id=task_id)))
    naps = (workspace / "naps.jsonl").read_text()
    assert '"start"' in naps and '"end"' not in naps  # stopped in the middle


async def test_resubscribe_after_a_cut_stream_misses_and_repeats_nothing(serve, served, tmp_path: Path,
                                                                          workspace: Path, tokens: Path) -> None:
    srv = serve([call("nap", tag="a", seconds=1.5), call("nap", tag="b", seconds=1.0), calc("2+2"),
                 {"text": "rested, and 2+2 = 4"}])
    s = start(served, tmp_path, workspace, srv, tokens, "--functions", str(FIXTURES / "extra_tools.py"))
    async with Agent(s.url, ALICE) as alice:
        first = await collect(alice.send_message(message("Nap twice, then add")), limit=4)  # then the cut
        task_id = first[0].task.id
        before = [event_data(r)["event_id"] for r in first[1:]]
        again = await collect(alice.subscribe(SubscribeToTaskRequest(id=task_id)))
    snapshot = again[0].task
    assert snapshot.id == task_id and snapshot.status.state == TaskState.TASK_STATE_WORKING
    history = [int(MessageToDict(m.metadata)["event_id"]) for m in snapshot.history]
    after = [event_data(r)["event_id"] for r in again[1:]]
    assert status_of(again[-1]).state == TaskState.TASK_STATE_COMPLETED
    assert text_of(status_of(again[-1])) == "rested, and 2+2 = 4"
    # Every event the task shows, once: what the cut stream had is in the snapshot's history, and the stream
    # after it goes on from the snapshot's last event, as the REST stream gives them.
    with s.client(ALICE) as c:
        stored = [m for m in stream_run(c, task_id) if m["id"] is not None and m["event"] in SHOWN]
    expected = [m["id"] for m in stored]
    assert history[: len(before)] == before
    assert history + after == expected, (history, after, expected)
    assert int(MessageToDict(snapshot.metadata)["event_id"]) == history[-1]


async def test_input_required_for_an_approval_then_the_next_message_resolves_it(
        serve, served, tmp_path: Path, workspace: Path, tokens: Path) -> None:
    config = tmp_path / "config"
    config.mkdir(exist_ok=True)
    (config / "shou.toml").write_text('[permissions]\nask = ["write_file"]\n')
    srv = serve([call("write_file", path="notes/hello.txt", content="hello from shou\n"), {"text": "written"}])
    s = start(served, tmp_path, workspace, srv, tokens)
    async with Agent(s.url, ALICE) as alice:
        seen = await collect(alice.send_message(message("Write the note")))
        task_id, context_id = seen[0].task.id, seen[0].task.context_id
        waiting = status_of(seen[-1])
        assert waiting.state == TaskState.TASK_STATE_INPUT_REQUIRED
        asked = next(MessageToDict(p.data) for p in waiting.message.parts if p.WhichOneof("content") == "data")
        assert [a["tool"] for a in asked["approvals"]] == ["write_file"]
        assert not (workspace / "notes").exists()
        assert (await alice.get_task(GetTaskRequest(id=task_id))).status.state == TaskState.TASK_STATE_INPUT_REQUIRED
        with pytest.raises(InvalidParamsError, match="approve"):  # neither yes nor no: nothing is decided
            await collect(alice.send_message(message("hmm, maybe", task_id=task_id)))
        rest = await collect(alice.send_message(message("Approve: it is only a note", task_id=task_id,
                                                        context_id=context_id)))
    # The same task goes on: it opens with the decision (the caller's, role user), then the rest of the run.
    resumed = rest[0].task
    assert resumed.id == task_id and resumed.status.state == TaskState.TASK_STATE_WORKING
    assert event_data(rest[0])["type"] == "approval_decided" and resumed.status.message.role == Role.ROLE_USER
    kinds = [event_data(r).get("type") for r in rest[1:]]
    assert "run_resumed" in kinds and "tool_call_finished" in kinds
    artifacts = [r.artifact_update.artifact for r in rest if r.WhichOneof("payload") == "artifact_update"]
    assert [(a.name, a.parts[0].raw) for a in artifacts] == [("notes/hello.txt", b"hello from shou\n")]
    final = status_of(rest[-1])
    assert final.state == TaskState.TASK_STATE_COMPLETED and text_of(final) == "written"
    assert (workspace / "notes" / "hello.txt").read_text() == "hello from shou\n"


async def test_a_task_s_artifacts_are_only_its_writes_never_shou_s_state_and_hide_the_server_s_key(
        serve, served, tmp_path: Path, workspace: Path, tokens: Path) -> None:
    # The model (untrusted) asks for a write into .shou/ (refused), then for a calculator call under the same
    # call id: the refused write was taken for a written file, and the task's artifacts inlined .shou/serve.db,
    # every user's sessions. A file the run edited that holds the server's own key came back with the key.
    key = "sk-SECRET-a2a-artifact-0123"
    (workspace / ".env").write_text(f"MODE=dev\nSHOU_API_KEY={key}\n")
    srv = serve([{"tool_calls": [{"id": "c1", "name": "write_file",
                                  "arguments": {"path": ".shou/serve.db", "content": "x"}}]},
                 {"tool_calls": [{"id": "c1", "name": "calculator", "arguments": {"expression": "1+1"}}]},
                 {"tool_calls": [{"id": "c2", "name": "edit_file",
                                  "arguments": {"path": ".env", "old": "MODE=dev", "new": "MODE=prod"}}]},
                 {"text": "done"}])
    s = start_serve(workspace, shou_env(tmp_path, srv, SHOU_API_KEY=key), "--tokens", str(tokens))
    served.append(s)
    async with Agent(s.url, ALICE, streaming=False) as alice:
        seen = await collect(alice.send_message(message("Do it")))
    task = seen[-1].task
    assert task.status.state == TaskState.TASK_STATE_COMPLETED, task.status
    assert [(a.name, a.parts[0].raw) for a in task.artifacts] == [(".env", b"MODE=prod\nSHOU_API_KEY=[redacted]\n")]
    assert (workspace / ".env").read_text() == f"MODE=prod\nSHOU_API_KEY={key}\n"


def raw_message(text: str = "hi", **fields: Any) -> dict[str, Any]:
    """A `SendMessage` request's params as JSON, sent as is (what a client of any kind may send)."""
    return {"message": {"messageId": f"m-{time.monotonic_ns()}", "role": "ROLE_USER", "parts": [{"text": text}],
                        **fields}}


def rpc(s: Served, method: str, params: Any, token: str = ALICE) -> dict[str, Any]:
    r = httpx.post(f"{s.url}/a2a/jsonrpc", json={"jsonrpc": "2.0", "id": 1, "method": method, "params": params},
                   headers={"Authorization": f"Bearer {token}", "A2A-Version": "1.0"}, timeout=30)
    assert r.status_code == 200, r.text
    return r.json()


def rest_send(s: Served, params: Any, token: str = ALICE) -> httpx.Response:
    return httpx.post(f"{s.url}/a2a/rest/message:send", json=params,
                      headers={"Authorization": f"Bearer {token}", "A2A-Version": "1.0"}, timeout=30)


BAD_METADATA = [{"agent": {"a": 1}}, {"agent": [1]}, {"agent": 7}, {"agent": True}, {"max_steps": 1e300},
                {"max_steps": True}, {"max_steps": "5"}, {"max_steps": 2.5}, {"max_steps": 0}, {"max_steps": 501},
                {"max_steps": [3]}, {"token_budget": 1e30}, {"token_budget": 2.0 ** 64}, {"token_budget": False},
                {"token_budget": -1}, {"max_cost": -1}, {"max_cost": "1"}, {"max_cost": True}, {"max_cost": {}}]


async def test_metadata_of_the_wrong_type_or_past_the_rest_apis_bounds_is_invalid_params(
        serve, served, tmp_path: Path, workspace: Path, tokens: Path) -> None:
    """`metadata.agent` must be a name, and the limits numbers within the REST API's bounds (not booleans):
    anything else is the caller's mistake (-32602, 400), on the message's metadata or the request's, where an
    object as agent, or 1e300 steps, was an internal error."""
    srv = serve([{"text": "within bounds"}])
    s = start(served, tmp_path, workspace, srv, tokens)
    for meta in BAD_METADATA:
        (name, _), = meta.items()
        for params in (raw_message(metadata=meta), {**raw_message(), "metadata": meta}):
            error = rpc(s, "SendMessage", params)["error"]
            assert error["code"] == -32602 and f"metadata.{name}" in error["message"], (meta, error)
            r = rest_send(s, params)
            assert r.status_code == 400 and f"metadata.{name}" in r.text, (meta, r.text)
    assert srv.requests == []  # none started a run
    # whole numbers (a Struct's doubles), the default agent, and the caller's own keys are taken
    done = rpc(s, "SendMessage", {**raw_message(), "metadata": {"max_steps": 3, "token_budget": 1e6, "agent": "shou",
                                                                  "mine": [{"deep": True}]}})
    assert done["result"]["task"]["status"]["state"] == "TASK_STATE_COMPLETED", str(done)[:2000]
    assert "Traceback" not in s.log()


async def test_a_body_nested_too_deep_is_a_parse_error_not_an_internal_one(serve, served, tmp_path: Path,
                                                                           workspace: Path, tokens: Path) -> None:
    """JSON nested thousands deep (in `params`, in metadata, in a part) is refused before the SDK's json.loads
    runs out of stack: JSON-RPC's parse error, 400 over HTTP+JSON. Brackets inside strings are text, not nesting."""
    srv = serve([{"text": "only text"}])
    s = start(served, tmp_path, workspace, srv, tokens)
    auth = {"Authorization": f"Bearer {ALICE}", "Content-Type": "application/json", "A2A-Version": "1.0"}

    def nested(depth: int, open_: str = '{"a":', close: str = "}") -> str:
        return open_ * depth + "1" + close * depth

    head = '{"message":{"messageId":"m","role":"ROLE_USER","parts":[{"text":"x"'
    bodies = [head + '}],"metadata":' + nested(3000) + "}}", head + '}],"metadata":' + nested(200, "[", "]") + "}}",
              head + ',"metadata":' + nested(1000) + "}]}}", head + '}]},"metadata":' + nested(5000, "[", "]") + "}",
              nested(5000)]
    for body in bodies:
        r = httpx.post(f"{s.url}/a2a/jsonrpc", headers=auth,
                       content='{"jsonrpc":"2.0","id":1,"method":"SendMessage","params":' + body + "}")
        assert r.status_code == 200 and r.json()["error"]["code"] == -32700, r.text[:300]
        assert "nests deeper than" in r.json()["error"]["message"]
        r = httpx.post(f"{s.url}/a2a/rest/message:send", headers=auth, content=body)
        assert r.status_code == 400 and "nests deeper than" in r.text, r.text[:300]
    r = httpx.post(f"{s.url}/a2a/jsonrpc", headers=auth, content=nested(5000, "[", "]"))  # no object at all
    assert r.json()["error"]["code"] == -32700, r.text[:300]
    assert srv.requests == []
    # deep brackets in a string are no nesting: the task is taken and runs
    done = rpc(s, "SendMessage", raw_message("[{" * 3000 + '\\"' + "}]" * 3000))
    assert done["result"]["task"]["status"]["state"] == "TASK_STATE_COMPLETED", str(done)[:500]
    assert "Traceback" not in s.log()
    # within the bound, but deeper than protobuf takes a message: the SDK's invalid params (which it logs)
    error = rpc(s, "SendMessage", {**raw_message(), "metadata": json.loads(nested(55))})["error"]
    assert error["code"] == -32602, error


def nul_requests() -> list[tuple[str, Any]]:
    """JSON-RPC calls with a NUL character in each kind of string an A2A request carries."""
    sent = [raw_message("x\x00y"), raw_message(contextId="c\x00d"), raw_message(messageId="m\x00"),
            raw_message(metadata={"note": "a\x00"}), {**raw_message(), "metadata": {"agent": "a\x00"}},
            {**raw_message(), "metadata": {"k\x00": 1}}, raw_message(referenceTaskIds=["r\x00"]),
            raw_message(extensions=["e\x00"]), raw_message("approve", taskId="t\x00"),
            {"message": {"messageId": "m1", "role": "ROLE_USER", "parts": [{"text": "hi", "metadata": {"k": "\x00"}}]}},
            {"message": {"messageId": "m2", "role": "ROLE_USER", "parts": [{"data": {"approve": True,
                                                                                      "reason": ["\x00"]}}]}}]
    return [*(("SendMessage", p) for p in sent), *(("SendStreamingMessage", p) for p in sent[:3]),
            ("GetTask", {"id": "a\x00b"}), ("CancelTask", {"id": "a\x00b"}), ("SubscribeToTask", {"id": "a\x00b"}),
            ("ListTasks", {"contextId": "c\x00"})]


def assert_nul_refused(s: Served) -> None:
    """Every string with a NUL is invalid params on JSON-RPC (the answer, or a streamed method's one event) and 400
    over HTTP+JSON, and nothing is stored or started."""
    auth = {"Authorization": f"Bearer {ALICE}", "A2A-Version": "1.0"}
    for method, params in nul_requests():
        r = httpx.post(f"{s.url}/a2a/jsonrpc", json={"jsonrpc": "2.0", "id": 1, "method": method, "params": params},
                       headers=auth, timeout=30)
        error = json.loads(r.text.removeprefix("data:").strip()).get("error", {})
        assert r.status_code == 200 and error.get("code") == -32602, (method, params, r.text[:300])
        assert "NUL" in error["message"] and "PostgreSQL" not in r.text
        if method == "SendMessage":
            r = rest_send(s, params)
            assert r.status_code == 400 and "NUL" in r.text and "PostgreSQL" not in r.text, (params, r.text[:300])
    r = httpx.post(f"{s.url}/a2a/rest/message:stream", json=raw_message("x\x00"), headers=auth, timeout=30)
    assert r.status_code == 400 and "NUL" in r.text, r.text[:300]
    for path in ("/a2a/rest/tasks/a%00b", "/a2a/rest/tasks?contextId=c%00"):
        assert httpx.get(s.url + path, headers=auth).status_code == 400
    with s.client(ALICE) as alice:
        assert alice.get("/v1/runs").json()["runs"] == []  # none was taken, on any store
    assert "Traceback" not in s.log()


async def test_strings_holding_nul_are_invalid_params(serve, served, tmp_path: Path, workspace: Path,
                                                      tokens: Path) -> None:
    """A text, id or metadata string with a NUL is refused at the A2A face, as the REST API refuses it: before,
    SQLite stored such a task (which the REST API would not take)."""
    srv = serve([{"text": "clean"}])
    s = start(served, tmp_path, workspace, srv, tokens)
    assert_nul_refused(s)
    assert srv.requests == []


async def test_strings_holding_nul_are_invalid_params_on_postgresql(serve, served, tmp_path: Path, workspace: Path,
                                                                    tokens: Path, postgres_url: str) -> None:
    """With `--store postgresql://`, where PostgreSQL's own error ("text fields cannot contain NUL") was the answer
    (-32603, 500), to a task's text as to an id merely looked up; the server goes on serving."""
    srv = serve([{"text": "clean"}])
    s = start(served, tmp_path, workspace, srv, tokens, "--store", postgres_url)
    assert_nul_refused(s)
    done = rpc(s, "SendMessage", raw_message("clean"))
    assert done["result"]["task"]["status"]["state"] == "TASK_STATE_COMPLETED", str(done)[:500]


async def test_numbers_that_are_not_finite_are_invalid_params(serve, served, tmp_path: Path, workspace: Path,
                                                              tokens: Path) -> None:
    """NaN, Infinity and 1e400 (which Python's json makes inf), in metadata or a data part, are invalid params:
    protobuf's Struct took them and then could not give them back, an internal error (500) at every look."""
    srv = serve([])
    s = start(served, tmp_path, workspace, srv, tokens)
    auth = {"Authorization": f"Bearer {ALICE}", "Content-Type": "application/json", "A2A-Version": "1.0"}
    for number in ("NaN", "Infinity", "-Infinity", "1e400", "-1e999"):
        head = '{"message":{"messageId":"m","role":"ROLE_USER","parts":[{"text":"x"}]'
        for body in (head + ',"metadata":{"max_cost":' + number + "}}}", head + '},"metadata":{"x":[' + number + "]}}",
                     '{"message":{"messageId":"m","role":"ROLE_USER","parts":[{"data":{"n":' + number + "}}]}}",
                     '{"message":{"messageId":"m","role":"ROLE_USER","parts":[{"text":"x","metadata":{"n":' + number
                     + "}}]}}"):
            r = httpx.post(f"{s.url}/a2a/jsonrpc", headers=auth,
                           content='{"jsonrpc":"2.0","id":1,"method":"SendMessage","params":' + body + "}")
            assert r.json().get("error", {}).get("code") == -32602 and "finite" in r.text, (body, r.text[:300])
            r = httpx.post(f"{s.url}/a2a/rest/message:send", headers=auth, content=body)
            assert r.status_code == 400 and "finite" in r.text, (body, r.text[:300])
    assert srv.requests == [] and "Traceback" not in s.log()
