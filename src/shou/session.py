"""A session: a named conversation whose messages are the fold of its events.

The loop hands every event to `Session.record()`, which updates the messages and passes the event to
the store. Loading a session replays its stored events through the same fold, so a conversation
continued in another process sees exactly what the first one saw.
"""

from __future__ import annotations

import secrets
import time
from collections.abc import Iterable
from typing import TYPE_CHECKING

from .events import Event, HistoryCleared, ModelResponse, RunStarted, StepFinished, ToolCallFinished
from .messages import Message, TextPart

if TYPE_CHECKING:
    from .store.sqlite import SQLiteStore


def new_session_name() -> str:
    """A fresh, sortable session name such as `20261129-204211-3fa2`."""
    return time.strftime("%Y%m%d-%H%M%S-") + secrets.token_hex(2)


class MessageFold:
    """Folds events into the conversation's messages, keeping tool results in call order."""

    __slots__ = ("_pending", "_results", "messages")

    def __init__(self) -> None:
        self.messages: list[Message] = []
        self._pending: list[str] = []
        self._results: dict[str, list[Message]] = {}

    def apply(self, event: Event) -> None:
        """Update the messages with one event."""
        if isinstance(event, ToolCallFinished):
            self._results[event.call_id] = tool_messages(event)
            if len(self._results) >= len(self._pending):
                self._flush()
        elif isinstance(event, ModelResponse):
            self._flush()
            self.messages.append(event.message)
            self._pending = [c.id for c in event.message.tool_calls]
        elif isinstance(event, RunStarted):
            self._flush()
            self.messages.append(Message.user(event.task))
        elif isinstance(event, StepFinished):
            self._flush()
        elif isinstance(event, HistoryCleared):
            self.messages.clear()
            self._pending, self._results = [], {}

    def _flush(self) -> None:
        for call_id in self._pending:
            self.messages.extend(self._results.get(call_id, ()))
        self._pending, self._results = [], {}


def tool_messages(event: ToolCallFinished) -> list[Message]:
    """The messages a finished tool call adds to the conversation.

    Chat Completions accepts only text in tool messages, so an image goes in a user message right after.
    """
    msgs = [Message.tool(event.call_id, event.name, event.content)]
    if event.image is not None:
        msgs.append(Message.user((TextPart(f"[image returned by {event.name}]"), event.image)))
    return msgs


class Session:
    """A named conversation, optionally persisted to a `SQLiteStore`."""

    def __init__(self, name: str | None = None, store: SQLiteStore | None = None) -> None:
        self.name = name or new_session_name()
        self.store = store
        self._fold = MessageFold()
        if store is not None:
            for event in store.events(self.name):
                self._fold.apply(event)

    @property
    def messages(self) -> list[Message]:
        """The conversation so far (user, assistant and tool messages; no system prompt)."""
        return self._fold.messages

    def record(self, event: Event) -> None:
        """Fold `event` into the messages and append it to the store."""
        self._fold.apply(event)
        if self.store is not None:
            self.store.append(self.name, event)

    def record_all(self, events: Iterable[Event]) -> None:
        """Record several events."""
        for e in events:
            self.record(e)

    def clear(self) -> None:
        """Forget the messages from here on (the log keeps them)."""
        self.record(HistoryCleared(run_id=""))

    def flush(self) -> None:
        """Make every recorded event durable."""
        if self.store is not None:
            self.store.flush()
