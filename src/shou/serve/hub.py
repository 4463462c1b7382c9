"""Wake-ups for event streams: a session's log grew, or a local run produced a streaming fragment.

Streams read events from the store, never from the run itself, so every replica serves the same events
with the same ids. The hub only says when to look: the replica running a run wakes its streams after each
event (which is committed before it is handed on), and on PostgreSQL a `LISTEN` connection wakes them for
runs other replicas execute. Streams also look on their own every second, so a lost wake-up delays an
event, never loses it. Text fragments (`text_delta`, `tool_call_delta`) are not stored: they reach the
streams of the replica that runs the run through the hub, and are dropped elsewhere.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Iterator

from ..events import Event

log = logging.getLogger("shou.serve")


class Watch:
    """One stream's subscription: `wake` is set when the session's log may have grown; `items` holds, in the
    order the run produced them, its streaming fragments and the ids its stored events reached (an int: the
    rows up to it may be read), so a fragment is sent after the events stored before it and before those
    stored after it."""

    def __init__(self, session: str, run_id: str) -> None:
        self.session = session
        self.run_id = run_id
        self.wake = asyncio.Event()
        self.items: asyncio.Queue[Event | int] = asyncio.Queue(maxsize=10_000)

    def put(self, item: Event | int) -> None:
        with contextlib.suppress(asyncio.QueueFull):  # a stalled reader loses fragments, not events
            self.items.put_nowait(item)
        self.wake.set()


class Hub:
    """Routes wake-ups and fragments to the streams of this process."""

    def __init__(self) -> None:
        self._by_session: dict[str, set[Watch]] = {}

    @contextlib.contextmanager
    def watch(self, session: str, run_id: str) -> Iterator[Watch]:
        """Subscribe to `session` (and the fragments of `run_id` and its sub-runs) while the block runs."""
        w = Watch(session, run_id)
        self._by_session.setdefault(session, set()).add(w)
        try:
            yield w
        finally:
            watches = self._by_session.get(session)
            if watches is not None:
                watches.discard(w)
                if not watches:
                    del self._by_session[session]

    def notify(self, session: str) -> None:
        """The log of `session` grew (call on the event loop's thread)."""
        for w in self._by_session.get(session, ()):
            w.wake.set()

    def stored(self, session: str, upto: int | None) -> None:
        """A run this process executes stored events of `session` up to id `upto` (None: unknown)."""
        for w in self._by_session.get(session, ()):
            if upto is None:
                w.wake.set()
            else:
                w.put(upto)

    def fragment(self, session: str, event: Event) -> None:
        """A streaming fragment of a run of `session` that this process executes."""
        for w in self._by_session.get(session, ()):
            if event.run_id == w.run_id or event.run_id.startswith(w.run_id + "."):
                w.put(event)

    async def listen(self, url: str, channel: str) -> None:
        """Wake streams on PostgreSQL notifications of `channel` (payload: a session) until cancelled,
        reconnecting after errors."""
        import psycopg

        while True:
            try:
                async with await psycopg.AsyncConnection.connect(url, autocommit=True) as conn:
                    await conn.execute(f"LISTEN {channel}")
                    async for note in conn.notifies():
                        self.notify(note.payload)
            except asyncio.CancelledError:
                raise
            except Exception as e:  # the database restarted or the network dropped: streams poll meanwhile
                log.warning("LISTEN %s failed (%s); retrying", channel, e)
                await asyncio.sleep(1.0)

