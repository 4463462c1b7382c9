"""The Chat Completions client against the scripted server over real loopback HTTP."""

from __future__ import annotations

import email.utils
import socket
import time

import pytest

from shou.errors import ModelAuthError, ModelNotFoundError, ModelRateLimitError, ModelUnavailableError
from shou.messages import Message
from shou.models.base import Completion, Retrying, TextChunk, ToolCallChunk
from shou.models.openai_compat import OpenAICompatible
from shou.models.runtime import RetryPolicy, parse_retry_after
from shou.models.scripted import ScriptedServer

FAST = RetryPolicy(max_retries=2, base=0.01, max_delay=0.05)
TOOLS = [{"type": "function", "function": {"name": "calc", "description": "c", "parameters": {"type": "object"}}}]


async def collect(model: OpenAICompatible, text: str = "hi") -> list:
    try:
        return [e async for e in model.stream([Message.user(text)], TOOLS)]
    finally:
        await model.aclose()


def client(srv: ScriptedServer, **kw) -> OpenAICompatible:
    kw.setdefault("retry", FAST)
    return OpenAICompatible("m-test", base_url=srv.base_url, api_key="k", **kw)


async def test_streaming_assembles_parallel_tool_calls_from_fragments() -> None:
    turn = {"text": "Let me see.", "chunk_size": 3, "tool_calls": [
        {"name": "calc", "arguments": {"expression": "1 + 2 * 3"}, "id": "A"},
        {"name": "calc", "arguments": {"expression": "sqrt(16)"}, "id": "B"}],
        "usage": {"prompt_tokens": 11, "completion_tokens": 7}}
    with ScriptedServer([turn]) as srv:
        events = await collect(client(srv))
    text = [e.text for e in events if isinstance(e, TextChunk)]
    frags = [e for e in events if isinstance(e, ToolCallChunk)]
    done = events[-1]
    assert isinstance(done, Completion)
    assert "".join(text) == "Let me see." and len(text) > 1
    assert len([f for f in frags if f.index == 0]) > 3 and len([f for f in frags if f.index == 1]) > 3
    assert [(c.id, c.name, c.arguments) for c in done.message.tool_calls] == [
        ("A", "calc", '{"expression": "1 + 2 * 3"}'), ("B", "calc", '{"expression": "sqrt(16)"}')]
    assert done.finish_reason == "tool_calls"
    assert (done.usage.input_tokens, done.usage.output_tokens) == (11, 7)
    body = srv.requests[0]
    assert body["stream"] is True and body["stream_options"] == {"include_usage": True}
    assert body["tools"] == TOOLS


async def test_non_streaming_mode() -> None:
    with ScriptedServer([{"text": "plain answer"}]) as srv:
        events = await collect(client(srv, stream=False))
    assert [type(e) for e in events] == [TextChunk, Completion]
    assert events[-1].message == Message.assistant("plain answer")
    assert "stream" not in srv.requests[0]


async def test_5xx_is_retried_then_succeeds() -> None:
    with ScriptedServer([{"error": 503}, {"error": 500}, {"text": "ok"}]) as srv:
        events = await collect(client(srv))
    retries = [e for e in events if isinstance(e, Retrying)]
    assert [r.attempt for r in retries] == [1, 2]
    assert events[-1].message.text == "ok"


async def test_retries_exhausted_give_a_clear_error() -> None:
    with ScriptedServer([{"error": 502}] * 3) as srv:
        with pytest.raises(ModelUnavailableError, match=r"HTTP 502.*gave up after 3 attempts"):
            await collect(client(srv))
        assert len(srv.requests) == 3


async def test_429_honours_retry_after() -> None:
    with ScriptedServer([{"error": 429, "retry_after": 0.04}] * 3) as srv:
        model = client(srv, retry=RetryPolicy(max_retries=2, base=5, max_delay=10))
        with pytest.raises(ModelRateLimitError):
            events = []
            async for e in model.stream([Message.user("x")], []):
                events.append(e)
    assert [e.delay for e in events] == [0.04, 0.04]  # the header, not the 5 s base


async def test_auth_and_not_found_are_not_retried_and_name_settings() -> None:
    with ScriptedServer([{"error": 401}, {"error": 404}]) as srv:
        with pytest.raises(ModelAuthError, match="DEEPSEEK_API_KEY"):
            await collect(client(srv, key_setting="DEEPSEEK_API_KEY"))
        with pytest.raises(ModelNotFoundError, match=r"'m-test'.*--model / SHOU_MODEL"):
            await collect(client(srv))
        assert len(srv.requests) == 2


async def test_read_timeout_is_retried_then_reported() -> None:
    with ScriptedServer([{"hang": True}, {"hang": True}, {"hang": True}]) as srv:
        with pytest.raises(ModelUnavailableError, match="no answer"):
            await collect(client(srv, timeout=0.3))
        assert len(srv.requests) == 3


async def test_connection_refused_names_the_base_url() -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    model = OpenAICompatible("m", base_url=f"http://127.0.0.1:{port}/v1", retry=FAST)
    with pytest.raises(ModelUnavailableError, match=rf"cannot reach http://127.0.0.1:{port}/v1.*SHOU_BASE_URL"):
        await collect(model)


def test_retry_after_parsing_and_backoff_bounds() -> None:
    assert parse_retry_after("3") == 3.0
    assert parse_retry_after(None) is None and parse_retry_after("soon") is None
    later = email.utils.formatdate(time.time() + 5, usegmt=True)
    assert 3 < parse_retry_after(later) <= 5
    policy = RetryPolicy(base=1, max_delay=8)
    for n in range(6):
        assert 0.5 * min(2**n, 16) <= policy.delay(n) <= 8
    assert policy.delay(0, retry_after=3600) == 8  # a hostile header is capped


def test_repr_never_shows_the_key() -> None:
    assert "secret" not in repr(OpenAICompatible("m", base_url="http://x/v1", api_key="secret-key"))


async def test_no_connection_at_all_is_retried_briefly_while_failures_mid_reply_get_the_full_budget() -> None:
    from shou.errors import ModelUnreachableError

    with socket.socket() as s:  # a port nothing listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    policy = RetryPolicy(max_retries=8, base=0.01, max_delay=0.02, max_unreachable_retries=2)
    model = OpenAICompatible("m", base_url=f"http://127.0.0.1:{port}/v1", retry=policy)
    events = []
    with pytest.raises(ModelUnreachableError, match=r"cannot reach .* \(gave up after 3 attempts\)"):
        async for e in model.stream([Message.user("hi")], []):
            events.append(e)
    await model.aclose()
    assert [type(e) for e in events] == [Retrying, Retrying]
    assert RetryPolicy().max_retries == 8 and RetryPolicy().max_unreachable_retries == 2


def test_prepared_body_holds_its_length_not_the_encoders_buffer() -> None:
    """A call holds its encoded body until the reply comes: it must cost its length, not orjson's buffer (4 KiB
    at least, ~10x a long text), which is what thousands of parked calls otherwise hold (issue 35)."""
    import tracemalloc

    from shou.models.openai_compat import _dumps

    for body in ({"model": "m", "messages": [{"role": "user", "content": "hi"}]}, {"content": "x" * 50_000}):
        tracemalloc.start()
        try:
            before = tracemalloc.get_traced_memory()[0]
            data = _dumps(body)
            held = tracemalloc.get_traced_memory()[0] - before
        finally:
            tracemalloc.stop()
        assert data.startswith(b"{") and data.endswith(b"}")
        assert held < len(data) + 200, (held, len(data))
