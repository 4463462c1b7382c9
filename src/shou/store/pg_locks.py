"""Session locks of the PostgreSQL store: session-level advisory locks, all held on the writer's connection.

When that connection breaks, every lock it held goes with it: those sessions are fenced (`SessionLost`) until
their runs let go. An unlock that fails on a live connection is owed and paid later, so a lock is never left
held for the life of the process.
"""

from __future__ import annotations

import logging
from collections import Counter
from typing import TYPE_CHECKING, Any

from .locks import SessionBusy
from .pg_link import Link, SessionLost
from .pg_rows import PgRow
from .pg_rows import text as _text

if TYPE_CHECKING:
    import threading

__all__ = ["PgSessionLock", "SessionLocks"]

log = logging.getLogger("shou.store")


class SessionLocks:
    """The lock half of `PostgresStore` (a base class: it shares the store's connection and row buffer)."""

    _locker: Link
    _lock: threading.Lock
    _buffer: list[PgRow]

    def _init_locks(self) -> None:
        self._held: set[str] = set()
        self._lost: set[str] = set()  # sessions whose rows are dropped: abandoned, or their lock is gone
        self._gone: set[str] = set()  # held sessions whose lock went with a broken connection
        # sessions let go of whose lock the server still holds, by how many times (an unlock failed; the server
        # counts a session-level advisory lock taken again on the same connection)
        self._owed: Counter[str] = Counter()

    def lock(self, session: str) -> PgSessionLock:
        """Take the session for this process (an advisory lock); `SessionBusy` when another holds it."""
        busy = SessionBusy(f"session {session!r} is being run by another shou process or run; wait for it to "
                           "finish, or use another session")
        with self._locker.lock:
            if session in self._held:
                raise busy
            self._pay()
            got = self._locker.execute("SELECT pg_try_advisory_lock(hashtextextended(%s, 0))", (_text(session),))
            if not got or not got[0][0]:
                raise busy
            self._held.add(session)
            self._lost.discard(session)
            self._gone.discard(session)
        return PgSessionLock(self, session)

    def _locks_gone(self, conn: Any) -> None:
        """The lock connection broke and a fresh one replaces it: every held session's lock went with the old
        one (another process may hold it now), so each is lost until its run lets go of it."""
        if self._held:
            log.error("the connection holding %d session locks broke; their runs must stop", len(self._held))
        self._gone |= self._held
        self._lost |= self._held
        self._owed.clear()  # what unlocks failed went with the old connection too
        self._buffer = [r for r in self._buffer if r[0] not in self._lost]

    def lost(self) -> set[str]:
        """Check the lock connection (a broken one is replaced, losing its locks); the held sessions lost."""
        if self._held:
            try:
                self._locker.execute("SELECT 1")
            except Exception as e:
                log.warning("the session-lock connection is down: %s", e)
        if self._owed:
            with self._locker.lock:
                self._pay()
        return set(self._gone & self._held)

    def _unlock(self, session: str) -> None:
        with self._locker.lock:
            if session not in self._held:
                return
            self._held.discard(session)
            if session in self._gone:  # its lock went with an old connection: nothing to let go of
                self._gone.discard(session)
                return
            self._owed[session] += 1
            self._pay()
            if self._owed:  # once more at once (a cancel hits one statement); else at the next check
                self._pay()

    def _pay(self) -> None:
        """Let go of the locks the server still holds for sessions this process let go of. An unlock that failed
        on a live connection (an admin's `pg_cancel_backend`, the statement timeout) leaves the lock held by it,
        which would keep every other replica from the session until this process exits: it is tried again here,
        as a session is locked and at `lost()` (serve's heartbeat). Called under the locker's lock."""
        for session in list(self._owed):
            while self._owed[session] > 0:
                try:
                    self._locker.execute("SELECT pg_advisory_unlock(hashtextextended(%s, 0))", (_text(session),))
                except Exception as e:
                    if not self._locker.alive:  # the connection died: the server dropped its locks with it
                        self._owed.clear()
                        return
                    log.warning("unlocking session %s failed; tried again later: %s", session, e)
                    break
                self._owed[session] -= 1
            if self._owed[session] <= 0:
                del self._owed[session]


class PgSessionLock:
    """A session taken by this process; `release()` gives it back."""

    def __init__(self, store: SessionLocks, session: str) -> None:
        self.store = store
        self.session = session

    @property
    def lost(self) -> bool:
        """Whether the lock went with a broken connection while held (nothing more of the session is written)."""
        return self.session in self.store._gone

    def check(self) -> None:
        """`SessionLost` when the lock went with a broken connection: the run must stop before its next effect."""
        if self.lost:
            raise SessionLost(f"the PostgreSQL connection that held session {self.session!r} broke (the server "
                              "restarted or dropped it), so another process may run the session now: this run "
                              f"stops without writing more of it; `shou resume {self.session}` continues it from "
                              "its log")

    def release(self) -> None:
        """Let other processes have the session."""
        self.store._unlock(self.session)
