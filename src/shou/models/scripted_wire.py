"""A scripted turn as the bytes an OpenAI-compatible server sends: a chat completion, or its event stream.

`reply_body` renders a turn as a `chat.completion` JSON body or as the `chat.completion.chunk` events
OpenAI would stream, with the turn's wire quirks (`call_ids`, `call_index`, `no_usage`, `sse_style`), and
says where a cut mid-reply falls; `error_body` is OpenAI's error object for a status. `ScriptedServer`
sends them.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from typing import Any

from .script import Answer, fragments, render

__all__ = ["error_body", "reply_body"]

_ERROR_TYPES = {401: "invalid_request_error", 403: "permission_error", 404: "invalid_request_error", 429: "requests"}
_ERROR_CODES = {401: "invalid_api_key", 404: "model_not_found", 429: "rate_limit_exceeded"}


def error_body(status: int, message: str) -> dict[str, Any]:
    """The JSON body OpenAI answers an error status with."""
    kind = _ERROR_TYPES.get(status, "server_error" if status >= 500 else "invalid_request_error")
    error = {"message": message, "type": kind, "code": _ERROR_CODES.get(status), "param": None}
    return {"error": error}


def reply_body(n: int, turn: dict[str, Any], body: dict[str, Any]) -> tuple[str, list[bytes], int]:
    """The content type and body pieces of turn `n`'s completion for request `body`, and the byte offset
    of a cut mid-reply."""
    answer = render(n, turn, body.get("messages", []))
    base = {"id": f"chatcmpl-scripted-{n}", "created": int(time.time()), "model": body.get("model", "")}
    if body.get("stream"):
        include_usage = bool((body.get("stream_options") or {}).get("include_usage")) and not turn.get("no_usage")
        tags, events = [], []
        base = {**base, "object": "chat.completion.chunk"}
        for tag, chunk in _sse_chunks(answer, turn, base, include_usage):
            tags.append(tag)
            events.append(_sse_event(chunk, turn.get("sse_style"), len(events)))
        events.append(_sse_event("[DONE]", turn.get("sse_style"), len(events)))
        tags.append("done")
        return "text/event-stream", events, _cut_point(events, tags)
    message: dict[str, Any] = {"role": "assistant", "content": answer.text or None}
    if answer.tool_calls:
        message["tool_calls"] = [{k: v for k, v in c.items() if k != "index"} for c in _wire_calls(answer, turn)]
    choice = {"index": 0, "message": message, "logprobs": None, "finish_reason": answer.finish_reason}
    data = {**base, "object": "chat.completion", "choices": [choice]}
    if not turn.get("no_usage"):
        data["usage"] = answer.usage
    raw = json.dumps(data).encode()
    return "application/json", [raw], len(raw) // 2


def _wire_calls(answer: Answer, turn: dict[str, Any]) -> list[dict[str, Any]]:
    """The `tool_calls` wire entries, with the turn's `call_ids` and `call_index` quirks."""
    calls = []
    for i, call in enumerate(answer.tool_calls):
        wire: dict[str, Any] = {"index": i, **call.to_wire()}
        if turn.get("call_ids") == "omit":
            del wire["id"]
        elif turn.get("call_ids") == "repeat":
            wire["id"] = answer.tool_calls[0].id
        if turn.get("call_index") is False:
            del wire["index"]
        calls.append(wire)
    return calls


def _sse_chunks(
    answer: Answer, turn: dict[str, Any], base: dict[str, Any], include_usage: bool
) -> Iterator[tuple[str, dict[str, Any]]]:
    """The `chat.completion.chunk` objects OpenAI would stream for `answer`, each with what it carries
    (role, text, head, args, finish, usage)."""

    def chunk(delta: dict[str, Any], finish: str | None = None) -> dict[str, Any]:
        return {**base, "choices": [{"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}]}

    yield "role", chunk({"role": "assistant", "content": "" if not answer.tool_calls else None})
    if answer.text:
        for piece in fragments(answer.text, answer.chunk_size):
            yield "text", chunk({"content": piece})
    for call, head in zip(answer.tool_calls, _wire_calls(answer, turn), strict=True):
        head["function"]["arguments"] = ""
        yield "head", chunk({"tool_calls": [head]})
        for piece in fragments(call.arguments, answer.chunk_size):
            if piece:
                fragment = {"function": {"arguments": piece}}
                if "index" in head:
                    fragment = {"index": head["index"], **fragment}
                yield "args", chunk({"tool_calls": [fragment]})
    yield "finish", chunk({}, answer.finish_reason)
    if include_usage:
        yield "usage", {**base, "choices": [], "usage": answer.usage}


def _sse_event(data: dict[str, Any] | str, style: str | None, n: int) -> bytes:
    """One event in the turn's `sse_style`."""
    payload = data if isinstance(data, str) else json.dumps(data)
    if style == "multiline" and not isinstance(data, str):  # JSON over several data lines, some with no space
        lines = json.dumps(data, indent=1).split("\n")
        return ("".join(f"data:{x}\n" if i % 2 else f"data: {x}\n" for i, x in enumerate(lines)) + "\n").encode()
    if style == "crlf":
        return f"data: {payload}\r\n\r\n".encode()
    if style == "cr":
        return f"data: {payload}\r\r".encode()
    if style == "comments":
        opening = ": OPENROUTER PROCESSING\n\n:\n\n" if n == 0 else ""
        return (f"{opening}: keep-alive {n}\nid: {n}\nretry: 3000\nx-unknown-field: ignored\nevent: message\n"
                f"data: {payload}\n: between\n\n").encode()
    return f"data: {payload}\n\n".encode()


def _cut_point(events: list[bytes], tags: list[str]) -> int:
    """The byte offset of a cut mid-reply: after the first argument fragment of the first call that has one,
    else after the first text fragment; inside that event when nothing of its kind follows it."""
    k = tags.index("args") if "args" in tags else tags.index("text") if "text" in tags else 0
    offset = sum(map(len, events[:k]))
    whole = k + 1 < len(tags) and tags[k + 1] == tags[k]
    return offset + (len(events[k]) if whole else len(events[k]) // 2)
