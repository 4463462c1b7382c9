"""The wire rules a Chat Completions request must keep; the context builder's output is checked against them."""

from __future__ import annotations

from ..messages import Message


class InvalidRequest(ValueError):
    """A message list the Chat Completions API would reject."""


def validate_messages(messages: list[Message]) -> None:
    """Raise `InvalidRequest` unless: system messages come first; every tool result answers a tool call of
    the assistant message just before it; every tool call is answered before the conversation moves on."""
    open_calls: list[str] = []
    seen_other = False
    for i, m in enumerate(messages):
        if m.role == "system":
            if seen_other:
                raise InvalidRequest(f"message {i}: a system message after the conversation started")
            continue
        seen_other = True
        if m.role == "tool":
            if m.tool_call_id not in open_calls:
                raise InvalidRequest(f"message {i}: tool result {m.tool_call_id!r} answers no open tool call")
            open_calls.remove(m.tool_call_id)
            continue
        if open_calls:
            raise InvalidRequest(f"message {i}: tool call(s) {open_calls} were never answered")
        if m.role == "assistant":
            open_calls = [c.id for c in m.tool_calls]
    if open_calls:
        raise InvalidRequest(f"the request ends with unanswered tool call(s) {open_calls}")
    if not any(m.role == "user" for m in messages):
        raise InvalidRequest("the request has no user message")
