"""Wire round-trips of messages and JSON round-trips of every event type."""

from __future__ import annotations

import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from shou.event_codec import event_from_dict
from shou.events import (
    EVENT_TYPES,
    ApprovalDecided,
    ApprovalRequested,
    Compacted,
    Feedback,
    GuardrailTripped,
    Handoff,
    HistoryCleared,
    ModelRequest,
    ModelResponse,
    Notice,
    PlanStep,
    PlanUpdated,
    Reviewed,
    RunFinished,
    RunResumed,
    RunStarted,
    StepFinished,
    TextDelta,
    ToolCallDelta,
    ToolCallFinished,
    ToolCallStarted,
)
from shou.messages import ImagePart, Message, TextPart, ToolCall
from shou.usage import Usage

texts = st.text(max_size=40)
ids = st.text(alphabet="abcdefghijklmnopqrstuvwxyz0123456789_", min_size=1, max_size=12)
b64 = st.binary(max_size=30).map(lambda b: ImagePart.from_bytes(b).data)
images = st.builds(
    ImagePart, b64, st.sampled_from(["image/png", "image/jpeg"]), st.none() | st.sampled_from(["low", "high"])
)
parts = st.lists(st.builds(TextPart, texts) | images, min_size=1, max_size=4).map(tuple)
calls = st.builds(ToolCall, ids, ids, texts)
messages = st.one_of(
    st.builds(Message.system, texts),
    st.builds(Message.user, texts | parts),
    st.builds(lambda t, c: Message.assistant(t, c), st.none() | texts, st.lists(calls, max_size=3)),
    st.builds(Message.tool, ids, ids, texts),
)


@given(messages)
def test_message_wire_round_trip(message: Message) -> None:
    wire = message.to_wire()
    again = Message.from_wire(json.loads(json.dumps(wire)))
    assert again == message
    assert again.to_wire() == wire


def test_wire_shapes_match_chat_completions() -> None:
    call = ToolCall("call_1", "calculator", '{"expression": "1+1"}')
    assert Message.assistant(None, [call]).to_wire() == {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {
                "id": "call_1",
                "type": "function",
                "function": {"name": "calculator", "arguments": '{"expression": "1+1"}'},
            }
        ],
    }
    assert Message.tool("call_1", "calculator", "2").to_wire() == {
        "role": "tool",
        "content": "2",
        "tool_call_id": "call_1",
        "name": "calculator",
    }
    img = ImagePart.from_bytes(b"\x89PNG")
    wire = Message.user((TextPart("look"), img)).to_wire()
    assert wire["content"][1] == {"type": "image_url", "image_url": {"url": "data:image/png;base64,iVBORw=="}}


def test_from_wire_rejects_unknown_roles_and_parts() -> None:
    with pytest.raises(ValueError, match="role"):
        Message.from_wire({"role": "robot", "content": "x"})
    with pytest.raises(ValueError, match="part"):
        Message.from_wire({"role": "user", "content": [{"type": "audio"}]})
    with pytest.raises(ValueError, match="data: URL"):
        Message.from_wire({"role": "user", "content": [{"type": "image_url", "image_url": {"url": "http://x/y.png"}}]})


SAMPLES = [
    RunStarted("r1", "s", "task ☃", "m", ("a", "b"), 12.5),
    RunResumed("r1", "s", 2, 13.0),
    Feedback("r1", 2, "your reply was cut off"),
    ModelRequest("r1", 1, 3, 2),
    TextDelta("r1", 1, "hel"),
    ToolCallDelta("r1", 1, 0, "calc", '{"a"'),
    ToolCallDelta("r1", 1, 0, None, ": 1}"),
    ModelResponse(
        "r1", 1, Message.assistant("x", [ToolCall("c", "calc", "{}")]), Usage(3, 4, 1), 0.25, "tool_calls", "m"
    ),
    ToolCallStarted("r1", 1, ToolCall("c", "calc", "{}")),
    ToolCallFinished("r1", 1, "c", "calc", "2", False, 0.01, ImagePart("QUJD", "image/jpeg"), {"diff": "-a\n+b"}),
    ToolCallFinished("r1", 1, "c", "calc", "Error: x", True),
    Notice("r1", 1, "retry", "rate limited"),
    HistoryCleared(""),
    Compacted("r1", "the user is 一枫", 12, 9000, 1200),
    StepFinished("r1", 1, Usage(3, 4, 1)),
    StepFinished("r1", 2, Usage(3, 4, 1, estimated=True)),
    RunFinished("r1", "loop", "", 3, Usage(9, 9, 3), 1.5, "repeated"),
    RunFinished("r1", "interrupted", "", 3, Usage(9, 9, 3), 0.0, "killed"),
    ApprovalRequested("r1", 2, ToolCall("c", "shell", '{"command": "rm -rf x"}'), "rule ask = shell",
                      "shell(rm -rf x)", 14.0),
    ApprovalDecided("r1", 2, "c", "shell", False, "user:ada", "once", "shell(rm -rf x)", "no", 15.0),
    RunFinished("r1", "waiting_approval", "", 2, Usage(9, 9, 3), 0.5, "1 call waits"),
    PlanUpdated("r1", 2, (PlanStep("a", "done", "ok", "r1.s1.1"), PlanStep("b", "failed", "timeout"),
                          PlanStep("c")), "re-planned", 0),
    Reviewed("r1.3", 4, False, "say the unit", parent="r1"),
    Handoff("r1", 2, "main", "billing", "a refund question"),
    GuardrailTripped("r1", 1, "input", "no_deletes", "deleting files is not allowed"),
    ToolCallStarted("r1.2", 1, ToolCall("c", "nap", "{}"), parent="r1"),
]


def test_every_event_type_has_a_sample() -> None:
    assert {type(e) for e in SAMPLES} == set(EVENT_TYPES.values())


@pytest.mark.parametrize("event", SAMPLES, ids=lambda e: e.type)
def test_event_json_round_trip(event) -> None:
    data = json.loads(json.dumps(event.to_dict()))
    assert data["type"] == event.type
    assert event_from_dict(data) == event


@given(
    st.builds(
        RunFinished,
        ids,
        st.sampled_from(["completed", "error", "loop"]),
        texts,
        st.integers(0, 99),
        st.builds(Usage, st.integers(0, 10**6), st.integers(0, 10**6), st.integers(0, 99)),
        st.floats(0, 1e6),
        st.none() | texts,
    )
)
def test_run_finished_round_trip_fuzz(event: RunFinished) -> None:
    assert event_from_dict(json.loads(json.dumps(event.to_dict()))) == event


def test_unknown_event_type_is_a_clear_error() -> None:
    with pytest.raises(ValueError, match="unknown event type"):
        event_from_dict({"type": "nope", "run_id": "r"})
