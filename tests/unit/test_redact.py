"""The redactor: every known secret goes, wherever it sits in an event; an event without one is returned
as the same object (every event passes through it)."""

from __future__ import annotations

from shou.events import ModelRequest, ModelResponse, ToolCallFinished, ToolCallStarted
from shou.messages import Message, TextPart, ToolCall
from shou.redact import REDACTED, Redactor
from shou.usage import Usage

KEY = "sk-live-0123456789abcdef"


def test_secrets_are_replaced_everywhere_an_event_holds_text() -> None:
    r = Redactor([KEY])
    call = ToolCall("c1", "shell", '{"command": "curl -H \\"x: \\u0073k-live-0123456789abcdef\\""}')
    msg = Message.assistant(f"the key is {KEY}", [call])
    out = r.event(ModelResponse("r", 1, msg, Usage(), 0.1))
    assert KEY not in out.message.text and REDACTED in out.message.text
    assert "0123456789abcdef" not in out.message.tool_calls[0].arguments  # spelled with a JSON escape too
    done = r.event(ToolCallFinished("r", 1, "c1", "shell", f"out {KEY}", details={"env": [KEY, 3]}))
    assert KEY not in done.content and done.details == {"env": [REDACTED, 3]}
    parts = Message.user((TextPart(f"see {KEY}"),))
    assert KEY not in str(r.value(parts).content)
    from shou.agent.recorder import RequestRecorder

    recorder = RequestRecorder(set(), r)  # a request's contents are redacted as the recorder takes them
    recorder.messages([Message.user(f"use {KEY}")])
    assert KEY not in str(recorder.take())


def test_an_event_without_secrets_is_the_same_object() -> None:
    r = Redactor([KEY])
    events = [ModelResponse("r", 1, Message.assistant("fine", [ToolCall("c", "calc", '{"x": 1}')]), Usage(), 0.1),
              ToolCallStarted("r", 1, ToolCall("c", "calc", '{"x": "\\u0031"}')),
              ToolCallFinished("r", 1, "c", "calc", "1", details={"a": [1, "b"]}),
              ModelRequest("r", 1, 2, 0, messages=("a", "b"), contents={"a": {"role": "user", "content": "x"}})]
    for event in events:
        assert r.event(event) is event


def test_checked_passes_clean_events_with_their_json_and_redacts_the_rest() -> None:
    import orjson

    r = Redactor([KEY, 'pa"ss\\word-1234'])
    clean = ToolCallFinished("r", 1, "c", "calc", "42")
    same, data = r.checked(clean)
    assert same is clean and data == orjson.dumps(clean.to_dict())
    for dirty in (ToolCallFinished("r", 1, "c", "calc", f"out {KEY}"),
                  ToolCallFinished("r", 1, "c", "calc", 'out pa"ss\\word-1234'),  # escaped in JSON
                  ToolCallStarted("r", 1, ToolCall("c", "sh", '{"x": "\\u0073k-live-0123456789abcdef"}'))):
        out, data = r.checked(dirty)
        assert data is None and out is not dirty
        assert KEY not in str(out.to_dict()) and "0123456789abcdef" not in str(out.to_dict())
        assert 'pa"ss' not in str(out.to_dict())
