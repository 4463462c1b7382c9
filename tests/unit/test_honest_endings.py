"""Honest endings: the Chat Completions client over real loopback HTTP against the fault-injecting scripted server.

A reply is complete only with a `finish_reason`; a cut or broken one is retried from scratch and never
becomes a `Completion`; a 200 that is not a reply is an error naming what arrived; tool calls keep one
unique id each whatever the server sends; the event stream is parsed to the spec.
"""

from __future__ import annotations

import json
from typing import Any

import httpx
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from shou.errors import ModelError, ModelResponseError, ModelUnavailableError
from shou.messages import Message
from shou.models.base import Completion, Retrying, TextChunk
from shou.models.connections import Timeout
from shou.models.openai_compat import OpenAICompatible
from shou.models.runtime import RetryPolicy
from shou.models.scripted import ScriptedServer

FAST = RetryPolicy(max_retries=2, base=0.01, max_delay=0.05)
MODEL = "m-test"
ADDLOG = {"tool_calls": [{"name": "addlog", "arguments": {"a": 12, "b": 345}}]}
FULL_ARGS = '{"a": 12, "b": 345}'
CUT_ARGS = '{"a": 12, "b": 3'  # the first 16-character fragment


def client(srv: ScriptedServer, **kw: Any) -> OpenAICompatible:
    kw.setdefault("retry", FAST)
    return OpenAICompatible(MODEL, base_url=srv.base_url, api_key="k", **kw)


async def collect(srv: ScriptedServer, **kw: Any) -> list[Any]:
    model = client(srv, **kw)
    try:
        return [e async for e in model.stream([Message.user("hi")], [])]
    finally:
        await model.aclose()


def completions(events: list[Any]) -> list[Completion]:
    return [e for e in events if isinstance(e, Completion)]


def sse_body(turn: dict[str, Any]) -> bytes:
    """The SSE body the scripted server streams for `turn` (to find byte offsets in it)."""
    body = {"model": MODEL, "messages": [], "stream": True, "stream_options": {"include_usage": True}}
    with ScriptedServer([turn]) as srv, httpx.Client(timeout=10) as http:
        return http.post(f"{srv.base_url}/chat/completions", json=body).content


def offset_after(turn: dict[str, Any], needle: bytes) -> int:
    """The byte offset just past the event of `turn`'s stream that contains `needle`."""
    raw = sse_body(turn)
    return raw.index(b"\n\n", raw.index(needle)) + 2


def sse(*chunks: dict[str, Any] | str, end: str = "data: [DONE]\n\n") -> dict[str, Any]:
    """A turn that sends exactly these `data:` events as an event stream."""
    body = "".join(f"data: {c if isinstance(c, str) else json.dumps(c)}\n\n" for c in chunks) + end
    return {"raw_body": body, "content_type": "text/event-stream"}


def delta(finish: str | None = None, **d: Any) -> dict[str, Any]:
    return {"object": "chat.completion.chunk", "choices": [{"index": 0, "delta": d, "finish_reason": finish}]}


# cut streams -------------------------------------------------------------------------------------


async def test_stream_cut_mid_arguments_is_retried_and_the_cut_call_never_completes() -> None:
    cut = offset_after(ADDLOG, b'\\"b\\": 3"')  # just past the fragment that ends in `"b": 3`
    with ScriptedServer([{**ADDLOG, "cut_after": cut}, ADDLOG]) as srv:
        events = await collect(srv)
        assert len(srv.requests) == 2
    fragments = "".join(e.arguments for e in events if type(e).__name__ == "ToolCallChunk")
    assert CUT_ARGS in fragments  # the cut attempt did stream its fragments...
    [done] = completions(events)  # ...but only the whole reply completes
    assert [(c.name, c.arguments) for c in done.message.tool_calls] == [("addlog", FULL_ARGS)]
    [retry] = [e for e in events if isinstance(e, Retrying)]
    assert "cut off" in retry.reason and f"{cut} bytes" in retry.reason and "without a finish_reason" in retry.reason
    assert events.index(retry) < events.index(done)


async def test_cut_answer_is_never_reported_complete() -> None:
    turn = {"text": "The answer is 42, because", "chunk_size": 5}
    cut = offset_after(turn, b'" is 4"')
    with ScriptedServer([{**turn, "cut_after": cut}] * 3) as srv:
        with pytest.raises(ModelUnavailableError, match=r"cut off.*gave up after 3 attempts") as info:
            await collect(srv)
        assert len(srv.requests) == 3
    assert info.value.retryable


async def test_done_before_any_finish_reason_is_a_cut() -> None:
    early = sse(delta(content="partial"))
    with ScriptedServer([early, {"text": "whole"}]) as srv:
        events = await collect(srv)
    [done] = completions(events)
    assert done.message.text == "whole"
    assert any(isinstance(e, Retrying) and "[DONE]" in e.reason for e in events)


async def test_finish_reason_then_eof_without_done_is_complete() -> None:
    with ScriptedServer([sse(delta(content="ok"), delta("stop"), end="")]) as srv:
        [done] = completions(await collect(srv))
    assert (done.message.text, done.finish_reason) == ("ok", "stop")


async def test_finish_reason_length_passes_through() -> None:
    with ScriptedServer([{"text": "abc", "finish_reason": "length", **ADDLOG}]) as srv:
        [done] = completions(await collect(srv))
    assert done.finish_reason == "length" and done.message.tool_calls[0].arguments == FULL_ARGS


# broken connections and stalls -------------------------------------------------------------------


async def test_reset_mid_call_is_retried() -> None:
    cut = offset_after(ADDLOG, b'\\"b\\": 3"')
    with ScriptedServer([{**ADDLOG, "reset_after": cut}, ADDLOG]) as srv:
        events = await collect(srv)
    [done] = completions(events)
    assert done.message.tool_calls[0].arguments == FULL_ARGS
    [retry] = [e for e in events if isinstance(e, Retrying)]
    assert "broke in the middle of the reply" in retry.reason and "cannot reach" not in retry.reason


async def test_resets_until_retries_run_out_are_not_blamed_on_the_base_url() -> None:
    cut = offset_after(ADDLOG, b'\\"b\\": 3"')
    with ScriptedServer([{**ADDLOG, "reset_after": cut}] * 3) as srv:
        with pytest.raises(ModelUnavailableError) as info:
            await collect(srv)
        assert len(srv.requests) == 3
    message = str(info.value)
    assert "cannot reach" not in message and "SHOU_BASE_URL" not in message
    assert "broke in the middle of the reply" in message and "gave up after 3 attempts" in message
    assert srv.base_url in message


async def test_non_streamed_body_broken_midway_is_retried() -> None:
    with ScriptedServer([{"text": "x" * 200, "reset_after": 40}, {"text": "ok"}]) as srv:
        events = await collect(srv, stream=False)
    assert completions(events)[0].message.text == "ok"
    [retry] = [e for e in events if isinstance(e, Retrying)]
    assert "broke in the middle of the reply" in retry.reason and "cannot reach" not in retry.reason


async def test_stall_longer_than_the_read_timeout_is_retried() -> None:
    turn = {"text": "slowly, then nothing", "chunk_size": 4, "stall": 3}
    with ScriptedServer([turn, {"text": "ok"}]) as srv:
        events = await collect(srv, timeout=Timeout(read=0.5, connect=2))
    [retry] = [e for e in events if isinstance(e, Retrying)]
    assert "no answer" in retry.reason and "in time" in retry.reason
    assert completions(events)[0].message.text == "ok"


async def test_stall_shorter_than_the_read_timeout_just_waits() -> None:
    with ScriptedServer([{"text": "slowly but surely", "chunk_size": 4, "stall": 0.3}]) as srv:
        events = await collect(srv, timeout=Timeout(read=5, connect=2))
    assert not any(isinstance(e, Retrying) for e in events)
    assert completions(events)[0].message.text == "slowly but surely"


# 200 responses that are not replies -------------------------------------------------------------


async def test_html_200_is_an_error_naming_the_content_type() -> None:
    page = "<!DOCTYPE html><html><head><title>Welcome to nginx!</title></head><body>" + "x" * 500
    with ScriptedServer([{"raw_body": page, "content_type": "text/html"}, {"text": "never"}]) as srv:
        with pytest.raises(ModelResponseError) as info:
            await collect(srv)
        assert len(srv.requests) == 1  # a wrong base URL does not heal by retrying
    message = str(info.value)
    assert "HTTP 200" in message and "text/html" in message and "Welcome to nginx!" in message
    assert "x" * 300 not in message  # only the start of the body


async def test_json_error_in_a_200_uses_its_message() -> None:
    body = json.dumps({"error": {"message": "This model's maximum context length is 8192 tokens",
                                 "type": "invalid_request_error", "code": "context_length_exceeded"}})
    with (
        ScriptedServer([{"raw_body": body, "content_type": "application/json"}]) as srv,
        pytest.raises(ModelResponseError, match="maximum context length is 8192 tokens"),
    ):
        await collect(srv)


async def test_json_server_error_in_a_200_is_retried() -> None:
    body = json.dumps({"error": {"message": "upstream overloaded", "type": "server_error"}})
    with ScriptedServer([{"raw_body": body, "content_type": "application/json"}, {"text": "ok"}]) as srv:
        events = await collect(srv)
    [retry] = [e for e in events if isinstance(e, Retrying)]
    assert "upstream overloaded" in retry.reason
    assert completions(events)[0].message.text == "ok"


async def test_plain_text_200_is_an_error() -> None:
    with (
        ScriptedServer([{"raw_body": "Bad Gateway"}]) as srv,
        pytest.raises(ModelResponseError, match=r"HTTP 200 with text/plain.*Bad Gateway"),
    ):
        await collect(srv)


async def test_json_completion_when_streaming_was_asked_is_accepted() -> None:
    completion = {"object": "chat.completion", "model": "other", "choices": [{"index": 0, "finish_reason": "stop",
                  "message": {"role": "assistant", "content": "not streamed"}}]}
    with ScriptedServer([{"raw_body": json.dumps(completion), "content_type": "application/json"}]) as srv:
        events = await collect(srv)
    assert [type(e) for e in events] == [TextChunk, Completion]
    assert events[-1].message.text == "not streamed" and events[-1].finish_reason == "stop"


async def test_unlabelled_event_stream_is_read() -> None:
    turn = sse(delta(content="fine"), delta("stop"))
    with ScriptedServer([{**turn, "content_type": "application/octet-stream"}]) as srv:
        [done] = completions(await collect(srv))
    assert done.message.text == "fine"


async def test_event_error_is_a_provider_error_with_its_message() -> None:
    turn = {"raw_body": "event: error\ndata: upstream connect error\n\n", "content_type": "text/event-stream"}
    with ScriptedServer([turn, {"text": "ok"}]) as srv:
        events = await collect(srv)
    assert "reported an error mid-stream: upstream connect error" in events[0].reason
    assert completions(events)[0].message.text == "ok"


async def test_data_error_object_mid_stream_is_a_provider_error() -> None:
    error = {"error": {"message": "You exceeded your current quota", "type": "insufficient_quota",
                       "code": 429}}
    with (
        ScriptedServer([sse(delta(content="a"), error)] * 3) as srv,
        pytest.raises(ModelError, match="exceeded your current quota"),
    ):
        await collect(srv)


async def test_keep_alives_and_other_named_events_are_skipped() -> None:
    body = ("event: ping\ndata: still here\n\ndata:\n\ndata: \n\n"
            f"data: {json.dumps(delta(content='ok'))}\n\ndata: {json.dumps(delta('stop'))}\n\ndata: [DONE]\n\n")
    with ScriptedServer([{"raw_body": body, "content_type": "text/event-stream"}]) as srv:
        [done] = completions(await collect(srv))
    assert done.message.text == "ok"


@pytest.mark.parametrize("garbage", ["{not json", '{"choices": [{"delta": {"content": "ha', "502 Bad Gateway",
                                     "<html><body>proxy error</body></html>"])
async def test_a_chunk_that_is_not_json_is_retried_as_a_cut_stream(garbage: str) -> None:
    with ScriptedServer([sse(delta(content="a"), garbage), {"text": "whole"}]) as srv:
        events = await collect(srv)
    [retry] = [e for e in events if isinstance(e, Retrying)]
    assert "broke" in retry.reason and "not JSON" in retry.reason and garbage[:8] in retry.reason
    [done] = completions(events)
    assert done.message.text == "whole" and len(srv.requests) == 2


async def test_a_stream_that_keeps_sending_non_json_fails_when_the_retries_run_out() -> None:
    with (
        ScriptedServer([sse(delta(content="a"), "{not json")] * 3) as srv,
        pytest.raises(ModelUnavailableError, match=r"not JSON.*'\{not json'"),
    ):
        await collect(srv)
    assert len(srv.requests) == 3  # the request and its two retries


async def test_an_html_page_labelled_as_an_event_stream_is_not_retried() -> None:
    page = "<!DOCTYPE html><html><head><title>502 Bad Gateway</title></head><body>nginx</body></html>"
    with (
        ScriptedServer([{"raw_body": page, "content_type": "text/event-stream"}, {"text": "never"}]) as srv,
        pytest.raises(ModelResponseError, match=r"HTTP 200 with text/event-stream, not an event stream: .*502 Bad"),
    ):
        await collect(srv)
    assert len(srv.requests) == 1


async def test_non_json_after_the_finish_reason_loses_nothing() -> None:
    with ScriptedServer([sse(delta(content="ok"), delta("stop"), "{garbled usage")]) as srv:
        events = await collect(srv)
    [done] = completions(events)
    assert done.message.text == "ok" and not any(isinstance(e, Retrying) for e in events)
    assert len(srv.requests) == 1


# tool-call ids and indexes -----------------------------------------------------------------------

TWO_CALLS = {"tool_calls": [{"name": "f", "arguments": {"x": 1}}, {"name": "g", "arguments": {"y": 2}}]}


async def test_two_calls_without_id_or_index_stay_two() -> None:
    with ScriptedServer([{**TWO_CALLS, "call_ids": "omit", "call_index": False}]) as srv:
        [done] = completions(await collect(srv))
    calls = done.message.tool_calls
    assert [(c.name, c.arguments) for c in calls] == [("f", '{"x": 1}'), ("g", '{"y": 2}')]
    assert all(c.id for c in calls) and len({c.id for c in calls}) == 2


async def test_calls_without_index_are_told_apart_by_id() -> None:
    with ScriptedServer([{**TWO_CALLS, "call_index": False}]) as srv:
        [done] = completions(await collect(srv))
    assert [(c.id, c.name, c.arguments) for c in done.message.tool_calls] == [
        ("call_0_0", "f", '{"x": 1}'), ("call_0_1", "g", '{"y": 2}')]


async def test_two_calls_with_the_same_id_get_distinct_ids() -> None:
    same = {"tool_calls": [{"name": "f", "arguments": {"x": 1}}, {"name": "f", "arguments": {"x": 2}}]}
    for stream in (True, False):
        with ScriptedServer([{**same, "call_ids": "repeat"}]) as srv:
            [done] = completions(await collect(srv, stream=stream))
        first, second = done.message.tool_calls
        assert first.id == "call_0_0" and second.id and second.id != first.id
        assert (first.arguments, second.arguments) == ('{"x": 1}', '{"x": 2}')


async def test_non_streamed_calls_without_ids_get_ids() -> None:
    with ScriptedServer([{**TWO_CALLS, "call_ids": "omit"}]) as srv:
        [done] = completions(await collect(srv, stream=False))
    assert all(c.id for c in done.message.tool_calls) and len({c.id for c in done.message.tool_calls}) == 2


async def test_every_call_at_index_0_with_its_own_id_stays_separate() -> None:
    def call(i: str, name: str, args: str) -> dict[str, Any]:
        return delta(tool_calls=[{"index": 0, "id": i, "type": "function", "function": {"name": name,
                                                                                         "arguments": args}}])
    with ScriptedServer([sse(call("a", "f", '{"x": 1}'), call("b", "g", '{"y": 2}'), delta("tool_calls"))]) as srv:
        [done] = completions(await collect(srv))
    assert [(c.id, c.name, c.arguments) for c in done.message.tool_calls] == [
        ("a", "f", '{"x": 1}'), ("b", "g", '{"y": 2}')]


async def test_fragments_without_index_continue_the_current_call() -> None:
    head = delta(tool_calls=[{"id": "a", "type": "function", "function": {"name": "f", "arguments": ""}}])
    frags = [delta(tool_calls=[{"function": {"arguments": p}}]) for p in ('{"x"', ": 1", "}")]
    again = delta(tool_calls=[{"id": "a", "function": {"arguments": ""}}])  # its own id again: still the same call
    with ScriptedServer([sse(head, frags[0], again, *frags[1:], delta("tool_calls"))]) as srv:
        [done] = completions(await collect(srv))
    assert [(c.id, c.name, c.arguments) for c in done.message.tool_calls] == [("a", "f", '{"x": 1}')]


# usage ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("stream", [True, False])
async def test_no_usage_is_one_request_with_no_tokens(stream: bool) -> None:
    with ScriptedServer([{"text": "abc", "no_usage": True}]) as srv:
        [done] = completions(await collect(srv, stream=stream))
    usage = done.usage
    assert (usage.requests, usage.input_tokens, usage.output_tokens) == (1, 0, 0)


# the event stream format ---------------------------------------------------------------------------


@pytest.mark.parametrize("style", ["multiline", "crlf", "cr", "comments"])
async def test_sse_styles_give_the_same_reply(style: str) -> None:
    turn = {"text": "line one\nline two", "chunk_size": 5, **ADDLOG}
    with ScriptedServer([turn, {**turn, "sse_style": style}]) as srv:
        plain, styled = completions(await collect(srv)), completions(await collect(srv))
    assert styled[0].message.text == plain[0].message.text == "line one\nline two"
    assert [(c.name, c.arguments) for c in styled[0].message.tool_calls] == [("addlog", FULL_ARGS)]
    assert styled[0].message.tool_calls[0].id == "call_1_0"
    assert styled[0].usage == plain[0].usage and styled[0].finish_reason == "tool_calls"


SPEC_EXAMPLES = [
    # the spec's own examples
    (b"data: YHOO\ndata: +2\ndata: 10\n\n", [("message", "YHOO\n+2\n10")]),
    (b": test stream\n\ndata: first event\nid: 1\n\ndata:second event\nid\n\ndata:  third event\n\n",
     [("message", "first event"), ("message", "second event"), ("message", " third event")]),
    (b"data\n\ndata\ndata\n\ndata:", [("message", ""), ("message", "\n")]),
    (b"data:test\n\ndata: test\n\n", [("message", "test"), ("message", "test")]),
    (b"event: add\ndata: 73857293\n\nevent: remove\ndata: 2153\n\n", [("add", "73857293"), ("remove", "2153")]),
    # line ends, BOM, fields without data, an unfinished event at the end
    (b"\xef\xbb\xbfdata: a\r\n\r\ndata: b\r\rdata: c\n\n", [("message", "a"), ("message", "b"), ("message", "c")]),
    (b"event: ping\n\nretry: 10\nfoo: bar\n\ndata: x\n", []),
    (b"event: add\ndata: 1\n\ndata: 2\n\nevent: x\n\ndata: 3\n\n", [("add", "1"), ("message", "2"), ("message", "3")]),
    (b"data: caf\xc3\xa9 \xff\n\n", [("message", "café \ufffd")]),
]


@pytest.mark.parametrize(("stream", "expected"), SPEC_EXAMPLES)
def test_sse_decoder_spec_examples(stream: bytes, expected: list[tuple[str, str]]) -> None:
    from shou.models.sse import SSEDecoder

    assert SSEDecoder().feed(stream) == expected
    one_by_one = SSEDecoder()
    assert [e for i in range(len(stream)) for e in one_by_one.feed(stream[i : i + 1])] == expected


def reference_sse(stream: bytes) -> list[tuple[str, str]]:
    """The spec's event stream interpretation, step by step, on the whole stream at once."""
    text = stream.decode("utf-8", "replace")  # the UTF-8 decode algorithm: replacement characters...
    text = text.removeprefix("\ufeff")  # ...and one leading byte-order mark dropped
    lines, line, i = [], "", 0
    while i < len(text):
        ch = text[i]
        if ch in "\r\n":
            lines.append(line)
            line = ""
            if ch == "\r" and text[i + 1 : i + 2] == "\n":
                i += 1
        else:
            line += ch
        i += 1
    # `line` is unterminated: discarded at the end of the stream
    events, data, event_type = [], "", ""
    for line in lines:
        if line == "":
            if data == "":
                event_type = ""
                continue
            if data.endswith("\n"):
                data = data[:-1]
            events.append((event_type or "message", data))
            data, event_type = "", ""
        elif line.startswith(":"):
            continue
        else:
            field, colon, value = line.partition(":")
            if colon and value.startswith(" "):
                value = value[1:]
            if field == "data":
                data += value + "\n"
            elif field == "event":
                event_type = value
    return events


TOKENS = [b"data", b"event", b"id", b"retry", b"error", b"x", b":", b" ", b"  ", b"\n", b"\r", b"\r\n", b"\n\n",
          b"\xef\xbb\xbf", "é".encode(), "🙂".encode(), b"\xff", b"\xc3", b"{}", b"[DONE]", b"data: ", b"event: "]
VALUE = st.lists(st.sampled_from([b"a", b" ", b":", b"{}", "é".encode(), "🙂".encode(), b"\xff", b"\xc3", b"[DONE]"]),
                 max_size=5).map(b"".join)
LINE = st.one_of(
    st.tuples(st.sampled_from([b"data", b"data", b"data", b"event", b"id", b"retry", b"x-other", b"dat", b"data "]),
              st.sampled_from([b"", b":", b": ", b":  "]), VALUE).map(b"".join),
    st.builds(lambda v: b":" + v, VALUE),  # a comment
    st.just(b""),  # a blank line: dispatch
    st.just(b""),
)
END = st.sampled_from([b"\n", b"\r", b"\r\n"])
STRUCTURED = st.tuples(
    st.sampled_from([b"", b"\xef\xbb\xbf"]),
    st.lists(st.tuples(LINE, END).map(b"".join), max_size=25).map(b"".join),
    VALUE,  # an unterminated last line
).map(b"".join)
SOUP = st.lists(st.sampled_from(TOKENS), max_size=40).map(b"".join)


@settings(max_examples=1000, deadline=None)
@given(st.one_of(STRUCTURED, SOUP), st.data())
def test_sse_decoder_matches_the_spec_however_the_bytes_are_split(stream: bytes, data: st.DataObject) -> None:
    from shou.models.sse import SSEDecoder

    cuts = sorted(data.draw(st.sets(st.integers(0, len(stream)), max_size=len(stream) + 1), label="cuts"))
    decoder = SSEDecoder()
    got, start = [], 0
    for cut in [*cuts, len(stream)]:
        got += decoder.feed(stream[start:cut])
        start = cut
    assert got == reference_sse(stream)


async def test_errors_never_show_credentials_in_the_base_url() -> None:
    page = {"raw_body": "<html>see http://admin:hunter2@10.0.0.1/login</html>", "content_type": "text/html"}
    with ScriptedServer([{"text": "x" * 50, "reset_after": 100}, page]) as srv:
        url = srv.base_url.replace("http://", "http://user:s3cret-key@")
        model = OpenAICompatible(MODEL, base_url=url, retry=FAST)
        with pytest.raises(ModelResponseError) as info:
            [e async for e in model.stream([Message.user("hi")], [])]
        await model.aclose()
    assert "s3cret-key" not in str(info.value) and "hunter2" not in str(info.value)
    assert "http://***@127.0.0.1" in str(info.value) and "text/html" in str(info.value)


async def test_a_server_that_never_stops_sending_is_cut_off(monkeypatch: pytest.MonkeyPatch) -> None:
    import shou.models.openai_compat as oc

    monkeypatch.setattr(oc, "MAX_REPLY_BYTES", 200_000)
    endless_text = {"text": "la " * 400_000, "chunk_size": 5000}  # 1.2 MB of an answer, never finished
    for streaming in (True, False):
        with ScriptedServer([endless_text]) as srv:
            model = OpenAICompatible("m", base_url=srv.base_url, api_key="k", stream=streaming, retry=FAST)
            with pytest.raises(ModelResponseError, match="stopped reading"):
                async for _ in model.stream([Message.user("talk")], []):
                    pass
            await model.aclose()
