"""Group commit: the runs of one event loop that need their events durable in the same turn of the loop share
one transaction.

A run commits before every side effect (its model request, its tools, its end), so a run killed at any
moment leaves a log it can be resumed from. Alone, a run commits at once. With many runs in flight on one
store (`shou serve`, a batch, fifty `arun()`s at once) each commit would be a transaction of its own, and a
transaction is most of what the log costs: in SQLite's WAL about twenty system calls (frames written, the
shared-memory locks taken and dropped) whatever it holds. So while other runs are in flight, a run that must
commit waits for the end of the loop's current turn, and every run that asks within that turn is made
durable by the same transaction.

What is kept: no run goes on before its own events are committed, so a kill -9 leaves exactly what it left
before (a run waiting for the group has done nothing its log does not hold). What it costs: a run in a
group goes on one turn of the loop later (the others' callbacks of that turn, microseconds). A failed
transaction fails every run of the group, as it would have failed each alone; the rows stay buffered for
the next attempt, as long as their session is held: a session let go of (its run stopped on the failure)
gives up what it could not commit, as a kill would, and on PostgreSQL the rows of a session whose lock went
with a broken connection are written on no other, its run stopping at its next commit (`SessionLost`)
even when the group's transaction succeeds (tests/integration/test_pg_group_outage.py).
"""

from __future__ import annotations

import asyncio
import threading
from typing import Protocol

__all__ = ["Committer", "Together"]


class Committer(Protocol):
    """A store's synchronous commit: everything appended so far, in one transaction."""

    def commit(self) -> None:
        """Write what was appended."""
        ...


class Together:
    """One store's group commit: `enter()`/`leave()` around each run, `await commit()` at its commit points."""

    __slots__ = ("_group", "_lock", "running", "store")

    def __init__(self, store: Committer) -> None:
        self.store = store
        self.running = 0  # runs in flight on the store, in any thread
        self._lock = threading.Lock()
        self._group: tuple[asyncio.AbstractEventLoop, asyncio.Future[None]] | None = None

    def enter(self) -> None:
        """A run starts on the store."""
        with self._lock:
            self.running += 1

    def leave(self) -> None:
        """A run ended."""
        with self._lock:
            self.running -= 1

    async def commit(self) -> None:
        """Return once everything appended so far is committed: at once when this is the only run in flight,
        otherwise by the transaction that ends the loop's current turn, shared with every run that asks in it."""
        if self.running <= 1:
            self.store.commit()
            return
        loop = asyncio.get_running_loop()
        with self._lock:
            group = self._group
            if group is None:
                group = self._group = (loop, loop.create_future())
                loop.call_soon(self._commit_group)
        if group[0] is not loop:  # another thread's loop has a group under way: ours cannot wait on it
            self.store.commit()
            return
        # Shielded: a run cancelled while it waits must not cancel the group's commit for the others.
        await asyncio.shield(group[1])

    def _commit_group(self) -> None:
        with self._lock:
            group, self._group = self._group, None
        if group is None:
            return
        done = group[1]
        try:
            self.store.commit()
        except Exception as e:  # every run of the group learns it, as each would have alone
            done.set_exception(e)
            done.exception()  # retrieved here: a group whose runs were all cancelled is not an error left unread
        else:
            done.set_result(None)
