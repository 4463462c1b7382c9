"""One Chat Completions reply assembled into a `Completion`: streamed, chunk by chunk, or whole (JSON).

`Reply` takes in a stream's `chat.completion.chunk` objects as they arrive, hands back their text and
tool-call fragments, and keeps what an error message needs to say how much came. Tool calls are assembled
from their fragments by stream position (`_Calls`), whatever ids and indexes the server sends, and every
call ends up with a unique id (one tool result answers each). `json_message` reads the message of a whole
(non-streamed) reply the same way. `OpenAICompatible` does the I/O and turns failures into errors.
"""

from __future__ import annotations

import json
import secrets
from typing import Any

from ..messages import Message, ToolCall
from ..usage import Usage
from .base import Completion, ModelEvent, ReasoningChunk, TextChunk, ToolCallChunk

__all__ = ["Reply", "json_message"]


class Reply:
    """A streamed reply as it arrives: text, calls, finish reason, usage, and how much came."""

    __slots__ = ("calls", "events", "finish", "head", "model", "received", "sent", "started", "text", "usage")

    def __init__(self, model: str) -> None:
        self.model = model
        self.sent = model  # what the request asked for; `model` becomes what the provider says answered
        self.text: list[str] = []
        self.calls = _Calls()
        self.finish: str | None = None
        self.usage: dict[str, Any] | None = None
        self.events = 0
        self.head = b""
        self.started = False  # a response (its status line and headers) arrived
        self.received = 0  # bytes of its body so far

    def take(self, chunk: dict[str, Any]) -> list[ModelEvent]:
        """Take in one chunk; return its text and call fragments."""
        out: list[ModelEvent] = []
        usage = chunk.get("usage")
        if usage and isinstance(usage, dict):
            self.usage = usage
        self.model = chunk.get("model") or self.model
        for choice in chunk.get("choices") or ():
            if choice.get("index", 0) != 0:  # only the first choice is asked for
                continue
            delta = choice.get("delta") or {}
            content = delta.get("content")
            if content and isinstance(content, str):
                self.text.append(content)
                out.append(TextChunk(content))
            reasoning = delta.get("reasoning_content") or delta.get("reasoning")
            if reasoning and isinstance(reasoning, str):
                out.append(ReasoningChunk(reasoning))
            for tc in delta.get("tool_calls") or ():
                piece = self.calls.add(tc)
                if piece is not None:
                    out.append(piece)
            if choice.get("finish_reason"):
                self.finish = choice["finish_reason"]
        return out

    def progress(self) -> str:
        """What arrived, for error messages."""
        chars = sum(map(len, self.text))
        return (f"{self.received} bytes in {_count(self.events, 'event')} ({_count(chars, 'character')} of text, "
                f"{_count(self.calls.fragments, 'tool-call fragment')})")

    def completion(self) -> Completion:
        message = Message.assistant("".join(self.text) or None, self.calls.assembled())
        return Completion(message, Usage.from_wire(self.usage), self.finish, self.model, self.sent)


class _Calls:
    """Tool calls assembled from stream fragments by position, whatever ids and indexes the server sends.

    A fragment with an `index` belongs to the call at that index (unless it names a function under a new
    id: a server that gives every call index 0). Without an index, a fragment starts a new call when it
    carries an id other than the current call's or a name while the current call has one; anything else
    continues the current call. Ids are made unique in `assembled()`.
    """

    __slots__ = ("by_index", "current", "entries", "fragments")

    def __init__(self) -> None:
        self.entries: list[list[Any]] = []  # [id, name, argument pieces]; plain lists are cheap on the hot path
        self.by_index: dict[int, int] = {}  # wire index -> position
        self.current = -1
        self.fragments = 0

    def add(self, tc: dict[str, Any]) -> ToolCallChunk | None:
        """Take in one `tool_calls[]` delta; return it as a fragment of the call at its position."""
        call_id = tc.get("id") or None
        fn = tc.get("function") or {}
        name = fn.get("name") or None
        index = tc.get("index")
        entries = self.entries
        if type(index) is int:
            pos = self.by_index.get(index)
            if pos is not None and name and call_id and entries[pos][0] not in (None, call_id):
                pos = None
            if pos is None:
                pos = self.by_index[index] = len(entries)
                entries.append([None, None, []])
        else:
            pos = self.current
            cur = entries[pos] if pos >= 0 else None
            if cur is None or (call_id and cur[0] and call_id != cur[0]) or (name and cur[1]):
                pos = len(entries)
                entries.append([None, None, []])
        self.current = pos
        entry = entries[pos]
        if call_id and not entry[0]:
            entry[0] = call_id
        new_name = None
        if name and not entry[1]:
            entry[1] = new_name = name
        args = fn.get("arguments")
        if isinstance(args, dict):  # some servers send parsed arguments
            args = json.dumps(args)
        if args:
            entry[2].append(args)
        if new_name or args:
            self.fragments += 1
            return ToolCallChunk(pos, new_name, args or "")
        return None

    def assembled(self) -> list[ToolCall]:
        """The calls in stream order, each with a unique, non-empty id."""
        ids = _unique_ids([e[0] for e in self.entries])
        return [ToolCall(i, e[1] or "", "".join(e[2])) for i, e in zip(ids, self.entries, strict=True)]


def json_message(choice: Any) -> Message:
    """The assistant message of a whole (non-streamed) reply's first `choice`, each tool call with a unique id.

    Raises `KeyError`, `IndexError`, `TypeError`, `ValueError` or `AttributeError` when it is not one.
    """
    wire = dict(choice["message"])
    calls = [_normalise_call(c) for c in wire.get("tool_calls") or ()]
    for call, call_id in zip(calls, _unique_ids([c["id"] for c in calls]), strict=True):
        call["id"] = call_id
    wire["tool_calls"] = calls
    wire.setdefault("role", "assistant")
    return Message.from_wire(wire)


def _unique_ids(ids: list[str | None]) -> list[str]:
    """`ids` with each missing or repeated one replaced by a fresh `call_<hex>`: one result per call."""
    seen: set[str] = set()
    out = []
    for call_id in ids:
        if not call_id or call_id in seen:
            call_id = "call_" + secrets.token_hex(6)
            while call_id in seen or call_id in ids:
                call_id = "call_" + secrets.token_hex(6)
        seen.add(call_id)
        out.append(call_id)
    return out


def _normalise_call(call: dict[str, Any]) -> dict[str, Any]:
    """A wire tool call with its arguments as text (some servers send them parsed) and `None` for no id."""
    fn = dict(call.get("function") or {})
    if isinstance(fn.get("arguments"), dict):
        fn["arguments"] = json.dumps(fn["arguments"])
    return {"id": call.get("id") or None, "type": "function", "function": fn}


def _count(n: int, what: str) -> str:
    return f"{n} {what}" if n == 1 else f"{n} {what}s"

