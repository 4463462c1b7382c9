"""What retention removes from an old event (`trace_retention_days`), the same for every store.

The raw material of traces goes: each request's recorded contents (`ModelRequest.contents`, the exact
messages sent), and the replies, tool arguments and tool results of sub-runs (plans, reviews, compaction
summaries, sub-agents), which are trace, not conversation. Every event stays, with its tokens, cost,
latency and status. A session's own conversation (its tasks, answers and tool results) is what the session
is, and what `-c` continues: it stays as long as the session does.
"""

from __future__ import annotations

from typing import Any

__all__ = ["PRUNABLE_TYPES", "PRUNED", "pruned"]

PRUNED = "[pruned by retention]"
PRUNABLE_TYPES = ("model_request", "model_response", "tool_call_started", "tool_call_finished")
_REPLY = {"role": "assistant", "content": PRUNED}


def pruned(event: dict[str, Any]) -> dict[str, Any] | None:
    """`event` (its JSON form, changed in place) without its raw contents, or None when it has none left to
    remove."""
    kind = event.get("type")
    if kind == "model_request":
        return event if isinstance(event.pop("contents", None), dict) else None
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
