"""What every session store shares, SQLite's and PostgreSQL's: which events are stored, what a session's
listing says, the methods built on `rows()` and `lock()`, and decoding stored rows."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import orjson

from ..errors import UserError
from ..event_codec import event_from_dict
from ..events import Event
from .locks import SessionBusy
from .together import Together

__all__ = ["DEFAULT_RETENTION_DAYS", "FORK_WRITER", "NOT_STORED", "SessionExists", "SessionInfo", "StoreBasics",
           "decoded"]

DEFAULT_RETENTION_DAYS = 7.0
_SESSION_EVENTS = frozenset({"run_started", "run_resumed", "run_finished", "history_cleared"})
NOT_STORED = frozenset({"text_delta", "tool_call_delta"})  # the complete message is stored instead
# The writer of the rows a fork copied (`fork()`): what they record was done, and spent, in the source session.
FORK_WRITER = "fork:"


class SessionExists(UserError):
    """A session of that name is stored already (a fork's new name must be free)."""


@dataclass(frozen=True, slots=True)
class SessionInfo:
    """A row of `shou sessions`: `status` is the last run's (`running` while one is under way)."""

    name: str
    created: float
    updated: float
    title: str
    runs: int
    status: str = ""


class StoreBasics:
    """What every session store does the same way on top of `rows()` and `lock()`."""

    together: Together | None = None  # the store's group commit (store/together.py), if it has one
    # each store's own: rows appended and not yet committed (their session first), the sessions whose rows
    # are dropped, and the lock a commit holds
    _buffer: list[Any]
    _lost: set[str]
    _lock: threading.Lock

    def events(self, session: str) -> Iterator[Event]:
        """Every stored event of `session`, oldest first."""
        for _, event in self.rows(session):  # type: ignore[attr-defined]
            yield event

    def is_locked(self, session: str) -> bool:
        """Whether some process holds `session` now."""
        try:
            self.lock(session).release()  # type: ignore[attr-defined]
        except SessionBusy:
            return True
        return False

    def abandon(self, session: str) -> bool:
        """Write nothing more of `session` (its run lost its lease or lock, or let go of it) until `restore()`;
        whether rows of it were given up."""
        with self._lock:  # after a commit under way on another thread: one that fails puts its rows back
            self._lost.add(session)
            kept = [r for r in self._buffer if r[0] != session]
            dropped, self._buffer = len(kept) != len(self._buffer), kept
        return dropped

    def restore(self, session: str) -> None:
        """Let `session` be written again (its abandoned run has stopped and let go of it)."""
        self._lost.discard(session)

    def __enter__(self) -> Any:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()  # type: ignore[attr-defined]


def decoded(found: list[tuple[int, str]]) -> list[tuple[int, Event]]:
    """`(id, event)` of stored rows; a row that cannot be decoded (a newer shou's, damage) is left out."""
    out = []
    for row_id, data in found:
        try:
            out.append((row_id, event_from_dict(orjson.loads(data))))
        except (ValueError, TypeError, KeyError, AttributeError):
            continue
    return out
