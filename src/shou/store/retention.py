"""What retention removes from an old event (`trace_retention_days`), the same for every store.

The raw material of traces goes: each request's recorded contents (`ModelRequest.contents`, the exact
messages sent), and the replies, tool arguments and tool results of sub-runs (plans, reviews, compaction
summaries, sub-agents), which are trace, not conversation. Every event stays, with its tokens, cost,
latency and status. A session's own conversation (its tasks, answers and tool results) is what the session
is, and what `-c` continues: it stays as long as the session does.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable
from typing import Any

import orjson

__all__ = ["PRUNABLE_TYPES", "PRUNED", "pruned"]

PRUNED = "[pruned by retention]"
PRUNABLE_TYPES = ("model_request", "model_response", "tool_call_started", "tool_call_finished")
_REPLY = {"role": "assistant", "content": PRUNED}


def referenced(requests: Iterable[tuple[str, str | bytes]]) -> dict[str, set[str]]:
    """Per session, the content hashes that the given requests (`(session, JSON)` of `model_request` rows
    newer than the cutoff) refer to: an older request that holds one keeps it, or the newer request's
    trace would lose a message it sent."""
    out: dict[str, set[str]] = {}
    for session, data in requests:
        try:
            event = orjson.loads(data)
        except orjson.JSONDecodeError:
            continue
        refs = out.setdefault(session, set())
        messages = event.get("messages")
        if isinstance(messages, list):
            refs.update(m for m in messages if isinstance(m, str))
        if isinstance(event.get("tools_ref"), str):
            refs.add(event["tools_ref"])
    return out


def pruned(event: dict[str, Any], keep: Collection[str] = ()) -> dict[str, Any] | None:
    """`event` (its JSON form, changed in place) without its raw contents, or None when it has none left to
    remove. A request keeps the contents whose hashes are in `keep` (newer requests still refer to them)."""
    kind = event.get("type")
    if kind == "model_request":
        contents = event.get("contents")
        if not isinstance(contents, dict):
            return None
        kept = {k: v for k, v in contents.items() if k in keep}
        if len(kept) == len(contents):
            return None
        if kept:
            event["contents"] = kept
        else:
            del event["contents"]
        return event
    if not event.get("parent"):  # the conversation itself
        return None
    if kind == "model_response":
        if event.get("message") == _REPLY:
            return None
        event["message"] = dict(_REPLY)
        return event
    if kind == "tool_call_started":
        call = event.get("call")
        function = call.get("function") if isinstance(call, dict) else None  # the call in its wire form
        if not isinstance(function, dict) or function.get("arguments") in ("{}", None):
            return None
        function["arguments"] = "{}"
        return event
    if kind == "tool_call_finished":
        if event.get("content") == PRUNED and "details" not in event and "image" not in event:
            return None
        event["content"] = PRUNED
        event.pop("details", None)
        event.pop("image", None)
        return event
    return None
