"""The scripted model: in-process through the Model protocol, and as a real loopback HTTP server."""

from __future__ import annotations

import asyncio
import itertools
import json
import os
import re
import select
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import httpx
import pytest

from shou.errors import (
    ModelAuthError,
    ModelError,
    ModelNotFoundError,
    ModelRateLimitError,
    ModelResponseError,
    ModelUnavailableError,
)
from shou.messages import Message, ToolCall
from shou.models.base import Completion, Model, ModelEvent, ModelSettings, TextChunk, ToolCallChunk
from shou.models.scripted import FaultPlan, ScriptedModel, ScriptedServer, load_script

BAD_JSON = "{'expression': '1+1'"
TOOLS = [{"type": "function", "function": {"name": "calc", "parameters": {"type": "object"}}}]


async def collect(model: ScriptedModel, text: str = "hi", **kw: Any) -> list[ModelEvent]:
    return [e async for e in model.stream([Message.user(text)], TOOLS, **kw)]


def chat(srv: ScriptedServer, **body: Any) -> httpx.Response:
    body = {"model": "gpt-test", "messages": [{"role": "user", "content": "hi"}], **body}
    return httpx.post(f"{srv.base_url}/chat/completions", json=body, timeout=10)


def sse_events(srv: ScriptedServer, **body: Any) -> tuple[httpx.Response, list[Any]]:
    """POST a streaming request; return the response and the parsed `data:` payloads in order."""
    body = {"model": "gpt-test", "messages": [{"role": "user", "content": "hi"}], "stream": True, **body}
    events: list[Any] = []
    with (
        httpx.Client(timeout=10) as client,
        client.stream("POST", f"{srv.base_url}/chat/completions", json=body) as resp,
    ):
        blank_separated = resp.read().decode().split("\n\n")
    assert blank_separated[-1] == ""
    for block in blank_separated[:-1]:
        assert block.startswith("data: "), block
        payload = block[len("data: ") :]
        events.append(payload if payload == "[DONE]" else json.loads(payload))
    return resp, events


# load_script -----------------------------------------------------------------------------------


def test_load_script_accepts_list_object_and_file(tmp_path: Path) -> None:
    turns = [{"text": "a"}, {"tool_calls": [{"name": "f", "arguments": {"x": 1}}]}]
    path = tmp_path / "s.json"
    path.write_text(json.dumps({"turns": turns}))
    assert load_script(turns) == turns
    assert load_script({"turns": turns}) == turns
    assert load_script(path) == turns
    assert load_script(str(path)) == turns


@pytest.mark.parametrize(
    ("script", "needle"),
    [
        ([{"txt": "a"}], "unknown key 'txt'"),
        ([{"text": 5}], "'text' must be str"),
        ([{"error": True}], "'error' must be int"),
        ([{"error": 200}], "400-599"),
        ([{"chunk_size": 0}], "chunk_size"),
        ([{"tool_calls": [{"arguments": {}}]}], "missing 'name'"),
        ([{"tool_calls": [{"name": "f", "arguments": 3}]}], "'arguments' must be dict or str"),
        ([{"tool_calls": [{"name": "f", "args": {}}]}], "unknown key 'args'"),
        ([{"usage": {"prompt_tokens": "3"}}], "'prompt_tokens' must be int"),
        (["hello"], "turn 0: must be an object"),
        ({"turn": []}, "exactly one key 'turns'"),
    ],
)
def test_load_script_rejects_bad_turns(script: Any, needle: str) -> None:
    with pytest.raises(ValueError, match=needle.replace("(", r"\(").replace("[", r"\[")):
        load_script(script)


# in-process --------------------------------------------------------------------------------------


async def test_in_process_text_streams_in_fragments() -> None:
    model = ScriptedModel([{"text": "Hello, scripted world!", "chunk_size": 5}], name="fake")
    assert isinstance(model, Model)
    events = await collect(model)
    texts = [e.text for e in events if isinstance(e, TextChunk)]
    assert texts == ["Hello", ", scr", "ipted", " worl", "d!"]
    done = events[-1]
    assert isinstance(done, Completion) and sum(isinstance(e, Completion) for e in events) == 1
    assert done.message == Message.assistant("Hello, scripted world!")
    assert done.finish_reason == "stop" and done.model == "fake"
    assert done.usage.requests == 1 and done.usage.output_tokens == len("Hello, scripted world!") // 4
    await model.aclose()


async def test_in_process_tool_calls_reassemble_from_fragments() -> None:
    args = {"expression": "12345 * 67890", "precision": 10}
    turn = {
        "tool_calls": [
            {"name": "calc", "arguments": args},
            {"name": "calc", "arguments": BAD_JSON, "id": "x"},
        ],
        "chunk_size": 4,
    }
    model = ScriptedModel([turn])
    events = await collect(model)
    chunks = [e for e in events if isinstance(e, ToolCallChunk)]
    for index, expected in enumerate([json.dumps(args), BAD_JSON]):
        mine = [c for c in chunks if c.index == index]
        assert len(mine) > 1
        assert mine[0].name == "calc" and all(c.name is None for c in mine[1:])
        assert "".join(c.arguments for c in mine) == expected
    done = events[-1]
    assert isinstance(done, Completion)
    assert done.message == Message.assistant(
        None, [ToolCall("call_0_0", "calc", json.dumps(args)), ToolCall("x", "calc", BAD_JSON)]
    )
    assert done.finish_reason == "tool_calls"


async def test_in_process_empty_arguments_still_names_the_call() -> None:
    events = await collect(ScriptedModel([{"tool_calls": [{"name": "now", "arguments": ""}]}]))
    assert [e for e in events if isinstance(e, ToolCallChunk)] == [ToolCallChunk(0, "now", "")]


def test_server_sse_empty_arguments_sends_only_the_head() -> None:
    with ScriptedServer([{"tool_calls": [{"name": "now", "arguments": ""}]}]) as srv:
        _, events = sse_events(srv)
    calls = [tc for c in events[:-1] for tc in c["choices"][0]["delta"].get("tool_calls", [])]
    assert calls == [{"index": 0, "id": "call_0_0", "type": "function", "function": {"name": "now", "arguments": ""}}]


async def test_in_process_records_requests_and_overrides() -> None:
    model = ScriptedModel([{"text": "a", "finish_reason": "length", "usage": {"prompt_tokens": 7}}, {"text": "b"}])
    first = await collect(model, "one", settings=ModelSettings(temperature=0.5, extra={"seed": 3}))
    await collect(model, "two")
    assert [r["messages"] for r in model.requests] == [
        [{"role": "user", "content": "one"}],
        [{"role": "user", "content": "two"}],
    ]
    assert model.requests[0]["model"] == "scripted" and model.requests[0]["tools"] == TOOLS
    assert model.requests[0]["temperature"] == 0.5 and model.requests[0]["seed"] == 3
    done = first[-1]
    assert isinstance(done, Completion)
    assert done.finish_reason == "length" and done.usage.input_tokens == 7 and done.usage.output_tokens == 1


@pytest.mark.parametrize(
    ("status", "cls"),
    [
        (401, ModelAuthError),
        (403, ModelAuthError),
        (404, ModelNotFoundError),
        (429, ModelRateLimitError),
        (500, ModelUnavailableError),
        (503, ModelUnavailableError),
        (400, ModelResponseError),
    ],
)
async def test_in_process_error_mapping(status: int, cls: type[ModelError]) -> None:
    model = ScriptedModel([{"error": status, "retry_after": 3, "message": "nope"}, {"text": "ok"}])
    with pytest.raises(cls, match="nope") as info:
        await collect(model)
    assert type(info.value) is cls
    assert info.value.status == status and info.value.retry_after == 3.0
    assert len(model.requests) == 1
    assert isinstance((await collect(model))[-1], Completion)  # the error consumed its turn


async def test_in_process_exhaustion() -> None:
    model = ScriptedModel([{"text": "only"}])
    await collect(model)
    with pytest.raises(ModelResponseError, match="script exhausted after 1 turns"):
        await collect(model)
    assert len(model.requests) == 2


async def test_in_process_delay() -> None:
    model = ScriptedModel([{"text": "slow", "delay": 5}, {"text": "quick", "delay": 0.01}])
    with pytest.raises(TimeoutError):
        await asyncio.wait_for(collect(model), 0.1)
    events = await asyncio.wait_for(collect(model), 2)
    assert isinstance(events[-1], Completion) and events[-1].message.text == "quick"


# HTTP server -----------------------------------------------------------------------------------


def test_server_non_streaming_shape() -> None:
    turns = [{"text": "hello"}, {"tool_calls": [{"name": "calc", "arguments": {"a": 1}}]}]
    with ScriptedServer(turns) as srv:
        assert srv.base_url == f"http://127.0.0.1:{srv.port}/v1" and srv.port > 0
        first = chat(srv)
        second = httpx.post(
            srv.base_url.removesuffix("/v1") + "/chat/completions",
            json={"model": "m2", "messages": [{"role": "user", "content": "x" * 40}]},
            timeout=10,
        )
    assert first.status_code == 200 and first.headers["content-type"] == "application/json"
    data = first.json()
    assert data["object"] == "chat.completion" and data["model"] == "gpt-test"
    assert isinstance(data["id"], str) and isinstance(data["created"], int)
    assert data["choices"][0]["message"] == {"role": "assistant", "content": "hello"}
    assert data["choices"][0]["finish_reason"] == "stop"
    usage = data["usage"]
    assert usage["completion_tokens"] == 1
    assert usage["total_tokens"] == usage["prompt_tokens"] + usage["completion_tokens"]
    data = second.json()
    assert data["model"] == "m2"
    message = data["choices"][0]["message"]
    assert message["content"] is None
    assert message["tool_calls"] == [
        {"id": "call_1_0", "type": "function", "function": {"name": "calc", "arguments": '{"a": 1}'}}
    ]
    assert data["choices"][0]["finish_reason"] == "tool_calls"
    assert data["usage"]["prompt_tokens"] > usage["prompt_tokens"]  # longer request, larger estimate


def test_server_sse_stream_with_many_fragments() -> None:
    args = {"path": "src/shou/models/scripted.py", "content": "x = 1\n" * 10}
    turn = {
        "text": "Let me write that.",
        "tool_calls": [{"name": "write", "arguments": args}, {"name": "calc", "arguments": BAD_JSON}],
        "chunk_size": 7,
    }
    with ScriptedServer([turn]) as srv:
        resp, events = sse_events(srv, stream_options={"include_usage": True})
    assert resp.status_code == 200 and resp.headers["content-type"].startswith("text/event-stream")
    assert events[-1] == "[DONE]"
    chunks = events[:-1]
    assert all(c["object"] == "chat.completion.chunk" and c["model"] == "gpt-test" for c in chunks)
    assert chunks[0]["choices"][0]["delta"]["role"] == "assistant"
    usage_chunk = chunks[-1]
    assert usage_chunk["choices"] == [] and usage_chunk["usage"]["total_tokens"] > 0
    finish = chunks[-2]["choices"][0]
    assert finish["finish_reason"] == "tool_calls" and finish["delta"] == {}
    deltas = [c["choices"][0]["delta"] for c in chunks[1:-2]]
    text = [d["content"] for d in deltas if "content" in d]
    assert len(text) > 1 and "".join(text) == "Let me write that."
    for index, (name, expected) in enumerate([("write", json.dumps(args)), ("calc", BAD_JSON)]):
        mine = [tc for d in deltas for tc in d.get("tool_calls", []) if tc["index"] == index]
        head, rest = mine[0], mine[1:]
        assert head == {
            "index": index,
            "id": f"call_0_{index}",
            "type": "function",
            "function": {"name": name, "arguments": ""},
        }
        assert len(rest) > 1 and all(set(tc) == {"index", "function"} for tc in rest)
        assert all(set(tc["function"]) == {"arguments"} for tc in rest)
        assert "".join(tc["function"]["arguments"] for tc in mine) == expected


def test_server_sse_without_include_usage_has_no_usage_chunk() -> None:
    with ScriptedServer([{"text": "hi"}, {"text": "again"}]) as srv:
        _, events = sse_events(srv)
        _, events_again = sse_events(srv, stream_options={"include_usage": False})
    for evs, text in ((events, "hi"), (events_again, "again")):
        assert evs[-1] == "[DONE]"
        assert all(c["choices"] for c in evs[:-1]) and not any(c.get("usage") for c in evs[:-1])
        assert "".join(c["choices"][0]["delta"].get("content") or "" for c in evs[:-1]) == text


def test_server_keep_alive_streams_back_to_back() -> None:
    """Chunked encoding must be framed correctly for one connection to carry several streams."""
    with (
        ScriptedServer([{"text": "one"}, {"text": "two"}, {"text": "three"}]) as srv,
        httpx.Client() as client,
    ):
        body = {"model": "m", "messages": [], "stream": True}
        got = []
        for _ in range(3):
            with client.stream("POST", f"{srv.base_url}/chat/completions", json=body) as resp:
                got.append(resp.read().decode())
                assert resp.headers.get("transfer-encoding") == "chunked"
        plain = client.post(f"{srv.base_url}/chat/completions", json={"model": "m", "messages": []})
    for raw, text in zip(got, ["one", "two", "three"], strict=True):
        assert f'"content": "{text}"' in raw and raw.endswith("data: [DONE]\n\n")
    assert plain.status_code == 400 and "exhausted after 3 turns" in plain.json()["error"]["message"]


def test_server_error_with_retry_after_and_recording() -> None:
    turns = [
        {"error": 429, "retry_after": 2, "message": "slow down"},
        {"error": 503, "retry_after": 1.5},
        {"error": 401},
        {"text": "finally"},
    ]
    with ScriptedServer(turns) as srv:
        limited = chat(srv, messages=[{"role": "user", "content": "first"}])
        down = chat(srv, stream=True)
        denied = chat(srv)
        ok = chat(srv)
        exhausted = chat(srv, messages=[{"role": "user", "content": "last"}])
        recorded = httpx.get(srv.base_url.removesuffix("/v1") + "/requests", timeout=10).json()
        assert srv.requests == recorded
    assert limited.status_code == 429 and limited.headers["retry-after"] == "2"
    assert limited.json() == {
        "error": {
            "message": "slow down",
            "type": "requests",
            "code": "rate_limit_exceeded",
            "param": None,
        }
    }
    assert down.status_code == 503 and down.headers["retry-after"] == "1.5"
    assert down.json()["error"]["type"] == "server_error"
    assert denied.status_code == 401 and "retry-after" not in denied.headers
    assert denied.json()["error"]["code"] == "invalid_api_key"
    assert ok.json()["choices"][0]["message"]["content"] == "finally"
    assert exhausted.status_code == 400
    assert exhausted.json()["error"]["message"] == "scripted model: script exhausted after 4 turns"
    assert len(recorded) == 5
    assert recorded[0]["messages"] == [{"role": "user", "content": "first"}]
    assert recorded[1]["stream"] is True
    assert recorded[4]["messages"] == [{"role": "user", "content": "last"}]


def test_server_hang_until_client_gives_up() -> None:
    with ScriptedServer([{"hang": True}, {"text": "after"}]) as srv:
        started = time.monotonic()
        with pytest.raises(httpx.ReadTimeout):
            httpx.post(f"{srv.base_url}/chat/completions", json={"model": "m", "messages": []}, timeout=0.3)
        assert time.monotonic() - started < 20  # the hang is endless: only the client's 0.3 s ends it
        assert chat(srv).json()["choices"][0]["message"]["content"] == "after"
        assert len(srv.requests) == 2
        closing = time.monotonic()
    # A close() that waited for the hung handler would wait forever (the hang ends only with the server).
    assert time.monotonic() - closing < 20


def test_server_delay_then_answer() -> None:
    body = {"model": "m", "messages": []}
    # The delay is long next to a loopback request however busy the machine (ms normally), so the turn
    # without it must come back well inside it and the turn with it no sooner than it.
    with ScriptedServer([{"text": "now"}, {"text": "late", "delay": 2}]) as srv, httpx.Client() as client:
        url = f"{srv.base_url}/chat/completions"
        started = time.monotonic()
        assert client.post(url, json=body).json()["choices"][0]["message"]["content"] == "now"
        quick = time.monotonic() - started
        resp = client.post(url, json=body, timeout=30)
        slow = time.monotonic() - started - quick
    assert quick < 2 <= slow < 20
    assert resp.json()["choices"][0]["message"]["content"] == "late"


@pytest.mark.timeout(20)
def test_server_close_is_not_blocked_by_idle_keep_alive_connection() -> None:
    client = httpx.Client()
    try:
        with ScriptedServer([{"text": "a"}]) as srv:
            assert client.post(f"{srv.base_url}/chat/completions", json={"messages": []}).status_code == 200
            closing = time.monotonic()
        # An idle keep-alive connection that held close() would hold it until the client let go (after this).
        assert time.monotonic() - closing < 15
    finally:
        client.close()


def test_server_models_reset_api_key_and_unknown_route() -> None:
    with ScriptedServer([{"text": "a"}], api_key="sk-test", model="fake-1") as srv:
        root = srv.base_url.removesuffix("/v1")
        models = httpx.get(f"{srv.base_url}/models", timeout=10).json()
        wrong = chat(srv)
        right = httpx.post(
            f"{srv.base_url}/chat/completions",
            json={"model": "m", "messages": []},
            headers={"Authorization": "Bearer sk-test"},
            timeout=10,
        )
        assert len(srv.requests) == 2
        assert httpx.post(f"{root}/reset", timeout=10).json() == {"ok": True}
        assert srv.requests == []
        again = httpx.post(
            f"{srv.base_url}/chat/completions",
            json={"model": "m", "messages": []},
            headers={"Authorization": "Bearer sk-test"},
            timeout=10,
        )
        missing = httpx.get(f"{root}/nowhere", timeout=10)
    assert [m["id"] for m in models["data"]] == ["fake-1"]
    assert wrong.status_code == 401 and wrong.json()["error"]["code"] == "invalid_api_key"
    assert right.status_code == 200 and right.json()["choices"][0]["message"]["content"] == "a"
    assert again.status_code == 200  # reset rewound the script
    assert missing.status_code == 404 and "error" in missing.json()


def test_cli_serves_on_port_zero(tmp_path: Path) -> None:
    script = tmp_path / "script.json"
    script.write_text(json.dumps({"turns": [{"text": "from the cli"}]}))
    record = tmp_path / "requests.jsonl"
    record_args = ["--record", str(record)]
    env = {k: v for k, v in os.environ.items() if k != "PYTHONUNBUFFERED"}  # the line must be flushed
    proc = subprocess.Popen(
        [sys.executable, "-m", "shou.models.scripted", "--script", str(script), "--port", "0", *record_args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )
    try:
        assert proc.stdout is not None
        ready, _, _ = select.select([proc.stdout], [], [], 20)
        assert ready, "no listening line within 20s"
        line = proc.stdout.readline()
        assert line.startswith("listening on http://127.0.0.1:") and line.endswith("/v1\n")
        base_url = line.removeprefix("listening on ").strip()
        assert int(base_url.rsplit(":", 1)[1].removesuffix("/v1")) > 0
        body = {"model": "m", "messages": [{"role": "user", "content": "ping"}]}
        resp = httpx.post(f"{base_url}/chat/completions", json=body, timeout=10)
        assert resp.json()["choices"][0]["message"]["content"] == "from the cli"
        assert [json.loads(x) for x in record.read_text().splitlines()] == [body]
        assert proc.poll() is None  # still serving
    finally:
        proc.terminate()
        proc.wait(timeout=10)


# wire faults -------------------------------------------------------------------------------------


def stream_raw(srv: ScriptedServer, **body: Any) -> bytes:
    body = {"model": "gpt-test", "messages": [], "stream": True, **body}
    with httpx.Client(timeout=10) as client:
        return client.post(f"{srv.base_url}/chat/completions", json=body).content


@pytest.mark.parametrize(
    ("turn", "needle"),
    [
        ({"cut_after": -1}, "'cut_after' must not be negative"),
        ({"cut_after": 5, "reset_after": 5}, "exclude each other"),
        ({"call_ids": "none"}, "'call_ids' must be one of ['omit', 'repeat']"),
        ({"sse_style": "lf"}, "'sse_style' must be one of"),
        ({"status": 200}, "go with 'raw_body'"),
        ({"raw_body": "x", "status": 700}, "HTTP status (100-599)"),
        ({"stall": "1"}, "'stall' must be int or float"),
        ({"call_index": 0}, "'call_index' must be bool"),
    ],
)
def test_load_script_checks_the_fault_keys(turn: dict[str, Any], needle: str) -> None:
    with pytest.raises(ValueError, match=re.escape(needle)):
        load_script([turn])


def test_in_process_model_refuses_wire_only_faults_and_plays_the_rest() -> None:
    for key, value in (("cut_after", 10), ("reset_after", 10), ("raw_body", "<html>")):
        with pytest.raises(ValueError, match=f"{key!r} acts only when the script is served over HTTP"):
            ScriptedModel([{key: value}])
    model = ScriptedModel([{"text": "abcdef", "chunk_size": 2, "stall": 0.2, "no_usage": True, "sse_style": "cr"}])
    started = time.monotonic()
    events = asyncio.run(collect(model))
    assert time.monotonic() - started >= 0.2
    assert [e.text for e in events if isinstance(e, TextChunk)] == ["ab", "cd", "ef"]
    assert events[-1].usage.requests == 1 and events[-1].usage.total_tokens == 0


def test_server_cut_after_sends_exactly_that_many_bytes_then_ends_cleanly() -> None:
    turn = {"text": "hello there", "chunk_size": 3}
    with ScriptedServer([{**turn, "cut_after": 500}]) as srv, httpx.Client(timeout=10) as client:
        # a clean end: no protocol error on the client side
        resp = client.post(f"{srv.base_url}/chat/completions", json={"model": "m", "messages": [], "stream": True})
    assert resp.status_code == 200 and resp.headers["connection"] == "close"
    assert len(resp.content) == 500 and resp.content.startswith(b'data: {"id": "chatcmpl-scripted-0"')
    assert b"[DONE]" not in resp.content and b'"content": "hel"' in resp.content


def test_server_reset_after_aborts_the_connection() -> None:
    body = {"model": "m", "messages": [], "stream": True}
    with (
        ScriptedServer([{"text": "x" * 100, "reset_after": 250}]) as srv,
        httpx.Client(timeout=10) as client,
        pytest.raises((httpx.ReadError, httpx.RemoteProtocolError)),
    ):
        client.post(f"{srv.base_url}/chat/completions", json=body)


def test_server_raw_body_and_status() -> None:
    turns = [{"raw_body": "<h1>hi</h1>", "content_type": "text/html"}, {"raw_body": "gone", "status": 410}]
    with ScriptedServer(turns) as srv:
        page, gone = chat(srv, stream=True), chat(srv)
    assert (page.status_code, page.headers["content-type"], page.text) == (200, "text/html", "<h1>hi</h1>")
    assert (gone.status_code, gone.headers["content-type"], gone.text) == (410, "text/plain; charset=utf-8", "gone")


def test_server_no_usage_and_call_quirks() -> None:
    calls = [{"name": "f", "arguments": {"x": 1}, "id": "A"}, {"name": "g", "arguments": {"y": 2}}]
    turns = [{"tool_calls": calls, "no_usage": True, "call_ids": "omit", "call_index": False},
             {"tool_calls": calls, "call_ids": "repeat"}, {"tool_calls": calls, "no_usage": True, "call_ids": "repeat"}]
    with ScriptedServer(turns) as srv:
        _, first = sse_events(srv, stream_options={"include_usage": True})
        _, second = sse_events(srv)
        third = chat(srv).json()
    deltas = [tc for c in first[:-1] for tc in c["choices"][0]["delta"].get("tool_calls", [])]
    assert not any("id" in tc or "index" in tc for tc in deltas)
    assert not any(c.get("usage") for c in first[:-1])
    heads = [tc for c in second[:-1] for tc in c["choices"][0]["delta"].get("tool_calls", []) if "id" in tc]
    assert [(h["index"], h["id"]) for h in heads] == [(0, "A"), (1, "A")]
    assert [c["id"] for c in third["choices"][0]["message"]["tool_calls"]] == ["A", "A"] and "usage" not in third


@pytest.mark.parametrize(
    ("style", "marker"),
    [("multiline", b'data: {\ndata: "id"'), ("crlf", b"\r\n\r\n"), ("cr", b"\r\r"), ("comments", b": keep-alive")],
)
def test_server_sse_styles(style: str, marker: bytes) -> None:
    with ScriptedServer([{"text": "hi", "sse_style": style}]) as srv:
        raw = stream_raw(srv)
    assert marker in raw and raw.count(b"data:") > 3
    if style == "crlf":
        assert raw.count(b"\n") == raw.count(b"\r\n")
    elif style == "cr":
        assert b"\n" not in raw


def test_server_stall_pauses_mid_reply() -> None:
    with ScriptedServer([{"text": "abcdefgh", "chunk_size": 2, "stall": 0.5}]) as srv:
        body = {"model": "m", "messages": [], "stream": True}
        with httpx.Client(timeout=10) as client, client.stream("POST", f"{srv.base_url}/chat/completions",
                                                                json=body) as resp:
            arrivals = [(time.monotonic(), chunk) for chunk in resp.iter_raw()]
    gaps = [b[0] - a[0] for a, b in itertools.pairwise(arrivals)]
    # A client that reads a chunk late narrows the gap after it, so a busy machine may see less than the
    # 0.5 s stall, never near none: without the stall the gaps are a few ms.
    assert max(gaps) >= 0.25 and b"[DONE]" in b"".join(c for _, c in arrivals)


def test_fault_plan_answers_instead_of_the_turn_which_stays_for_the_retry() -> None:
    turns = [{"text": "one"}, {"text": "two"}]
    with ScriptedServer(turns, faults=FaultPlan(rate=0.5, kinds=("503", "429"), seed=1)) as srv:
        got = []
        while len(got) < 2:
            resp = chat(srv)
            if resp.status_code == 200:
                got.append(resp.json()["choices"][0]["message"]["content"])
            else:
                assert resp.status_code in (503, 429) and "scripted fault" in resp.json()["error"]["message"]
        assert got == ["one", "two"]
        assert srv.faults_injected and len(srv.requests) == 2 + len(srv.faults_injected)
        assert all(srv.requests[f["request"]] is not None for f in srv.faults_injected)


@pytest.mark.parametrize("stream", [True, False])
def test_fault_plan_cut_reset_and_stall_break_the_reply(stream: bool) -> None:
    turn = {"tool_calls": [{"name": "addlog", "arguments": {"a": 12, "b": 345}}]}
    for kind in ("cut", "reset", "stall"):
        plan = FaultPlan(rate=1.0, kinds=(kind,), stall_seconds=0.2)
        with ScriptedServer([turn], faults=plan) as srv, httpx.Client(timeout=10) as client:
            body = {"model": "m", "messages": [], "stream": stream}
            try:
                raw = client.post(f"{srv.base_url}/chat/completions", json=body).content
            except (httpx.ReadError, httpx.RemoteProtocolError):
                raw = None
            assert srv.faults_injected == [{"request": 0, "kind": kind}]
        if stream and kind in ("cut", "stall"):  # a clean end in the middle of the arguments
            assert raw is not None and raw.endswith(b'\\"b\\": 3"}}]}, "logprobs": null, "finish_reason": null}]}\n\n')
        else:  # the body breaks off (a reset, or a JSON body shorter than its Content-Length)
            assert raw is None


def test_fault_plan_cap_and_validation() -> None:
    with ScriptedServer([{"text": "a"}], faults=FaultPlan(rate=1.0, kinds=("500",), max_in_a_row=2)) as srv:
        assert [chat(srv).status_code for _ in range(3)] == [500, 500, 200]
    for bad, needle in (({"rate": 2}, "between 0 and 1"), ({"kinds": ("teapot",)}, "unknown fault kind"),
                        ({"kinds": ()}, "at least one kind"), ({"kinds": ("200",)}, "unknown fault kind")):
        with pytest.raises(ValueError, match=needle):
            FaultPlan(**bad)


def test_cli_fault_flags(tmp_path: Path) -> None:
    script = tmp_path / "script.json"
    script.write_text(json.dumps([{"text": "x"}]))
    proc = subprocess.Popen(
        [sys.executable, "-m", "shou.models.scripted", "--script", str(script), "--fault-rate", "1",
         "--fault-kinds", "502", "--fault-max-in-a-row", "1", "--fault-seed", "3"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )
    try:
        assert proc.stdout is not None
        ready, _, _ = select.select([proc.stdout], [], [], 20)
        assert ready, "no listening line within 20s"
        base_url = proc.stdout.readline().removeprefix("listening on ").strip()
        body = {"model": "m", "messages": []}
        codes = [httpx.post(f"{base_url}/chat/completions", json=body, timeout=10).status_code for _ in range(2)]
        assert codes == [502, 200]
    finally:
        proc.terminate()
        proc.wait(timeout=10)
    bad = subprocess.run([sys.executable, "-m", "shou.models.scripted", "--script", str(script), "--fault-rate",
                          "0.5", "--fault-kinds", "boom"], capture_output=True, text=True, timeout=30)
    assert bad.returncode == 2 and "unknown fault kind 'boom'" in bad.stderr


def test_the_in_process_model_leaves_the_server_unimported() -> None:
    code = ("import sys, shou.models.scripted as s; assert 'http.server' not in sys.modules; "
            "assert s.ScriptedServer.__module__ == 'shou.models.scripted_server'; assert 'http.server' in sys.modules; "
            "from shou.models.scripted import FaultPlan, main; print(FaultPlan.__name__, main.__name__)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.split() == ["FaultPlan", "main"]


@pytest.mark.parametrize("text", ["[" * 100_000, "[" * 500 + "]" * 500,
                                  '[{"text": "x", "usage": ' + "[" * 200 + "]" * 200 + "}]"])
def test_a_script_file_nested_too_deep_is_a_value_error_not_a_recursion_error(text: str, tmp_path: Path) -> None:
    # json.loads raised RecursionError, which `--model scripted:FILE`'s `except (OSError, ValueError)` let through
    path = tmp_path / "deep.json"
    path.write_text(text)
    with pytest.raises(ValueError, match="nests deeper than"):
        load_script(str(path))
