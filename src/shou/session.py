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

from .events import Compacted, Event, HistoryCleared, ModelResponse, RunStarted, StepFinished, ToolCallFinished
from .messages import Message, TextPart

if TYPE_CHECKING:
    from .store.sqlite import SQLiteStore


def new_session_name() -> str:
    """A fresh, sortable session name such as `20261129-204211-3fa2`."""
    return time.strftime("%Y%m%d-%H%M%S-") + secrets.token_hex(2)


class MessageFold:
    """Folds events into the session's state: its messages (tool results in call order), the summary
    that stands for compacted ones, and the working memory."""

    __slots__ = ("_pending", "_results", "messages", "summary", "summary_upto", "working_memory")

    def __init__(self) -> None:
        self.messages: list[Message] = []
        self.summary = ""
        self.summary_upto = 0
        self.working_memory = ""
        self._pending: list[str] = []
        self._results: dict[str, list[Message]] = {}

    def apply(self, event: Event) -> None:
        """Update the state with one event."""
        if isinstance(event, ToolCallFinished):
            if event.details and "working_memory" in event.details and not event.is_error:
                self.working_memory = str(event.details["working_memory"])
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
        elif isinstance(event, Compacted):
            self.summary, self.summary_upto = event.summary, event.upto
        elif isinstance(event, HistoryCleared):
            self.messages.clear()
            self.summary, self.summary_upto, self.working_memory = "", 0, ""
            self._pending, self._results = [], {}

    def _flush(self) -> None:
        # All tool results first, in call order; the user messages carrying their images after them,
        # since the API accepts nothing else between an assistant's tool calls and their results.
        later: list[Message] = []
        for call_id in self._pending:
            tool_msg, *extra = self._results.get(call_id) or [None]
            if tool_msg is not None:
                self.messages.append(tool_msg)
            later.extend(extra)
        self.messages.extend(later)
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

    @property
    def summary(self) -> str:
        """The summary standing for the first `summary_upto` messages ("" before any compaction)."""
        return self._fold.summary

    @property
    def summary_upto(self) -> int:
        """How many of the first messages the summary replaces in the context."""
        return self._fold.summary_upto

    @property
    def working_memory(self) -> str:
        """The agent's scratchpad for this session."""
        return self._fold.working_memory

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
