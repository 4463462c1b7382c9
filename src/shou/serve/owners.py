"""Who owns each session of `shou serve` (`serve_sessions`, beside the run queue), and the forks under way into
a name.

A fork takes its new name for the caller before it copies the log, and lets go of it when it fails. A name the
caller holds already with neither a log nor a run (what a fork the store failed under leaves) may be forked
into again, by another request, on any replica. So the forks into a name are counted on its row: those under
way (`forking`) and all that ever began (`forked`). A failed fork lets go of the name only when no other fork
into it is under way, none began since it looked, no run is queued there, and no session landed there (the
store is asked between the two transactions: SQLite's store may commit first, which it could not do inside
the queue's). Before this count, a fork that failed could let go of a name while another was landing under
it, which then belonged to nobody.

A session's delete marks its row first (`deleting`, when), in the transaction that finds it still the caller's
with no run, fork or other delete under way there, with the row locked: a run asked for meanwhile either came
first (the delete is refused) or finds the mark (refused). Before, a run accepted between the delete's check
and its end ran, and was then erased with the session; and a second delete of the same session, racing the
first, could erase the session another user made under the freed name.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable
from contextlib import AbstractContextManager
from typing import Any

from ..events import WAITING
from .auth import LOCAL_USER
from .names import stored_name

# The session's id, unique forever (a uuid4 given when it is made): what its browser context, interpreter
# and spilled outputs are kept under, since its name can be taken again once it is deleted.
_COLUMNS = {"sid": "sid TEXT NOT NULL DEFAULT ''", "forking": "forking INTEGER NOT NULL DEFAULT 0",
            "forked": "forked INTEGER NOT NULL DEFAULT 0",
            "deleting": "deleting DOUBLE PRECISION NOT NULL DEFAULT 0"}  # when a delete marked it (0: none)
STALE_DELETE = 300.0  # seconds after which a delete's mark is taken to be one that died
_UNDER_WAY = ("queued", "running", *WAITING)  # a run's statuses that a session's delete must wait for


class SessionOwners:
    """The owners' table, on the run queue's connection (`_tx`, `_x`: its transactions and statements)."""

    postgres: bool
    _tx: Callable[..., AbstractContextManager[None]]
    _x: Callable[..., Any]

    def _add_owner_columns(self) -> None:
        """The columns added since the table was first made (inside the queue's first transaction)."""
        if self.postgres:
            for column in _COLUMNS.values():
                self._x(f"ALTER TABLE serve_sessions ADD COLUMN IF NOT EXISTS {column}")
            return
        have = {row[1] for row in self._x("PRAGMA table_info(serve_sessions)").fetchall()}
        for name, column in _COLUMNS.items():
            if name not in have:
                self._x(f"ALTER TABLE serve_sessions ADD COLUMN {column}")

    def session_owner(self, session: str) -> str | None:
        """Who owns `session` (None: nobody made it through the API)."""
        with self._tx(write=False):
            row = self._x("SELECT username FROM serve_sessions WHERE name = %s", (session,)).fetchone()
        return row[0] if row else None

    def session_of(self, user: str, name: str) -> str:
        """The store's name of `user`'s session `name` (shou.serve.names): a bare name that is theirs from
        before names were per user (or A2A's), else the name derived for them. Only the caller's own rows are
        looked at, so what another user holds never changes the answer."""
        if user == LOCAL_USER:
            return name
        with self._tx(write=False):
            row = self._x("SELECT 1 FROM serve_sessions WHERE name = %s AND username = %s", (name, user)).fetchone()
        return name if row is not None else stored_name(user, name)

    def session_id(self, session: str) -> str | None:
        """The id `session` got when it was made (None: nobody made it through the API). A session from
        before ids were kept gets one now."""
        with self._tx():
            row = self._x("SELECT sid FROM serve_sessions WHERE name = %s", (session,)).fetchone()
            if row is None or row[0]:
                return row[0] if row else None
            self._x("UPDATE serve_sessions SET sid = %s WHERE name = %s AND sid = ''", (uuid.uuid4().hex, session))
            (sid,) = self._x("SELECT sid FROM serve_sessions WHERE name = %s", (session,)).fetchone()
        return str(sid)

    def adopt_session(self, session: str, user: str) -> bool:
        """Make `session` `user`'s, with a fork under way into it (counted out by `end_fork`); False when it is
        someone's already."""
        with self._tx():
            if self._x("SELECT 1 FROM serve_sessions WHERE name = %s", (session,)).fetchone() is not None:
                return False
            self._x("INSERT INTO serve_sessions(name, username, sid, forking, forked) VALUES (%s, %s, %s, 1, 1)",
                    (session, user, uuid.uuid4().hex))
        return True

    def join_fork(self, session: str, user: str) -> bool:
        """Count one more fork under way into `session`, a name `user` holds with no run (counted out by
        `end_fork`); False when it is not theirs, or has a run."""
        with self._tx():
            joined = self._x("UPDATE serve_sessions SET forking = forking + 1, forked = forked + 1 WHERE name = %s "
                             "AND username = %s AND deleting = 0 AND NOT EXISTS "
                             "(SELECT 1 FROM serve_runs WHERE session = %s)",
                             (session, user, session))
            return bool(joined.rowcount == 1)

    def end_fork(self, session: str, let_go: Callable[[], bool] | None = None) -> None:
        """Count a fork into `session` out; with `let_go`, give the name back too when no other fork into it is
        under way or began meanwhile, it has no run, and `let_go()` says so (no session landed there)."""
        with self._tx():
            self._x("UPDATE serve_sessions SET forking = forking - 1 WHERE name = %s AND forking > 0", (session,))
            if let_go is None:
                return
            row = self._x("SELECT forking, forked FROM serve_sessions WHERE name = %s", (session,)).fetchone()
            if row is None or row[0] != 0 or self._x("SELECT 1 FROM serve_runs WHERE session = %s LIMIT 1",
                                                     (session,)).fetchone() is not None:
                return
        if not let_go():
            return
        with self._tx():
            self._x("DELETE FROM serve_sessions WHERE name = %s AND forking = 0 AND forked = %s AND NOT EXISTS "
                    "(SELECT 1 FROM serve_runs WHERE session = %s)", (session, row[1], session))

    def begin_delete(self, session: str, user: str) -> str:
        """Mark `user`'s `session` as being deleted: "" when done; else why not ("running": a run is under way
        there, "forking": a fork into it is, "deleting": another delete is, "gone": it is not theirs now).

        A mark left by a delete that never finished (its process killed) is taken over after `STALE_DELETE`
        seconds, so the session can still be deleted."""
        with self._tx():
            row = self._x("SELECT username, forking, deleting FROM serve_sessions WHERE name = %s FOR UPDATE",
                          (session,)).fetchone()  # a run's submit, a fork's join and another delete wait
            if row is None or row[0] != user:
                return "gone"
            if row[1]:
                return "forking"
            now = time.time()
            if row[2] and now - float(row[2]) < STALE_DELETE:
                return "deleting"
            spots = ", ".join(["%s"] * len(_UNDER_WAY))
            if self._x(f"SELECT 1 FROM serve_runs WHERE session = %s AND status IN ({spots}) LIMIT 1",
                       (session, *_UNDER_WAY)).fetchone() is not None:
                return "running"
            self._x("UPDATE serve_sessions SET deleting = %s WHERE name = %s", (now, session))
        return ""

    def end_delete(self, session: str) -> None:
        """Take the mark of a delete that failed off (the session is kept, and takes runs again)."""
        with self._tx():
            self._x("UPDATE serve_sessions SET deleting = 0 WHERE name = %s", (session,))

    def forget_session(self, session: str) -> None:
        """Drop a session's runs and ownership (its events are deleted by the store)."""
        with self._tx():
            self._x("DELETE FROM serve_runs WHERE session = %s", (session,))
            self._x("DELETE FROM serve_sessions WHERE name = %s", (session,))
