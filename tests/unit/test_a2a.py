"""The A2A pieces that guard something on their own: the remote agent's client reaches its configured origin
only and reads bounded replies, `[a2a_agents.NAME]` tables are checked and their secrets known, a decision is
read from a message or refused, and a context's session is the caller's alone."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator

import httpx
import pytest
from a2a.types import Message, Part
from a2a.utils.errors import InvalidParamsError
from google.protobuf.struct_pb2 import Value

from shou.a2a.http import OtherOrigin, TooBig, agent_client
from shou.a2a.spec import RemoteAgentSpec
from shou.config import load_settings
from shou.errors import ConfigError
from shou.known_secrets import secrets_of
from shou.serve.a2a_requests import decision_of, session_for


class Canned(httpx.AsyncBaseTransport):
    """Answers every request with `body` (as an event stream when `stream`), in chunks; records the URLs."""

    def __init__(self, body: bytes, stream: bool = False) -> None:
        self.body, self.stream, self.urls = body, stream, []

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        self.urls.append(str(request.url))
        body = self.body

        class Chunks(httpx.AsyncByteStream):
            async def __aiter__(self) -> AsyncIterator[bytes]:
                for i in range(0, len(body), 4096):
                    yield body[i:i + 4096]

        kind = "text/event-stream" if self.stream else "application/json"
        return httpx.Response(200, headers={"content-type": kind}, stream=Chunks())


def client(spec: RemoteAgentSpec, canned: Canned, **limits: int) -> httpx.AsyncClient:
    made = agent_client(spec, **limits)
    made._transport.inner = canned  # the real transport's checks, in front of a canned peer
    return made


async def test_the_client_reaches_the_configured_origin_only() -> None:
    spec = RemoteAgentSpec.from_table("a", {"url": "https://agent.example:8443/base", "headers": {"X-Key": "k"}})
    canned = Canned(b"{}")
    async with client(spec, canned) as c:
        assert (await c.get("https://agent.example:8443/other/path")).status_code == 200
        for elsewhere in ("https://evil.example:8443/", "http://agent.example:8443/", "https://agent.example/",
                          "https://agent.example.evil.example:8443/"):
            with pytest.raises(OtherOrigin, match="not the agent's configured address"):
                await c.get(elsewhere)
    assert canned.urls == ["https://agent.example:8443/other/path"]


async def test_replies_and_stream_events_are_read_up_to_their_bounds() -> None:
    spec = RemoteAgentSpec.from_table("a", {"url": "http://127.0.0.1:9/"})
    async with client(spec, Canned(b"x" * 5000), limit=4096) as c:
        with pytest.raises(TooBig, match="its reply is larger than the 4,096 bytes"):
            await c.get("http://127.0.0.1:9/card")
    many = b"data: {}\n\n" * 2000  # many small events: fine, however long the stream
    async with client(spec, Canned(many, stream=True), event_limit=4096) as c:
        assert len((await c.get("http://127.0.0.1:9/s")).content) == len(many)
    endless_line = b"data: " + b"y" * 10_000  # one event that never ends
    async with client(spec, Canned(endless_line, stream=True), event_limit=4096) as c:
        with pytest.raises(TooBig, match="an event of its stream"):
            await c.get("http://127.0.0.1:9/s")


def test_a2a_agents_tables_are_checked_and_their_secrets_known(tmp_path) -> None:
    env = {"HOME": str(tmp_path), "SHOU_CONFIG_DIR": str(tmp_path / "cfg"), "SHOU_A2A_AGENTS":
           '{"helper": {"url": "https://u:pw-1234567890@h.example/a?key=q-0987654321", '
           '"headers": {"Authorization": "Bearer tok-abcdef123456"}}}'}
    settings = load_settings(env=env)
    known = secrets_of(settings, env)
    assert {"tok-abcdef123456", "q-0987654321"} <= set(known)
    for bad, said in [({"url": "ftp://x"}, "needs url"), ({"url": "http://x", "command": "sh"}, "unknown key"),
                      ({"url": "http://x", "timeout": 0}, "timeout"), ({"url": "http://x", "headers": {"a": 1}},
                                                                       "headers")]:
        with pytest.raises(ConfigError, match=said):
            load_settings(env={**env, "SHOU_A2A_AGENTS": json.dumps({"x": bad})})
    assert "pw-1234567890" not in repr(RemoteAgentSpec.from_table("h", settings.a2a_agents["helper"]))


def _message(*parts: Part) -> Message:
    return Message(message_id="m", parts=list(parts))


def test_a_decision_is_read_from_the_first_word_or_a_data_part_and_nothing_else() -> None:
    assert decision_of(_message(Part(text="Approve: it is only a note"))) == (True, "it is only a note", "")
    assert decision_of(_message(Part(text="deny, too risky"))) == (False, "too risky", "")
    data = Value()
    data.struct_value.update({"approve": False, "reason": "no", "call_id": "c1"})
    assert decision_of(_message(Part(data=data))) == (False, "no", "c1")
    for unclear in ("maybe", "I approve of nothing", "", "yesterday"):
        with pytest.raises(InvalidParamsError):
            decision_of(_message(Part(text=unclear)))


def test_a_context_is_a_session_of_its_caller_alone() -> None:
    assert session_for("alice", "ctx") == session_for("alice", "ctx")
    assert session_for("alice", "ctx") != session_for("bob", "ctx")
    assert session_for("alice", "ctx").startswith("a2a-") and "ctx" not in session_for("alice", "ctx")[4:]
