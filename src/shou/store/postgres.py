"""The session store on PostgreSQL: the same log as `SQLiteStore`, shared by every replica of `shou serve`.

Rows are written ahead exactly as in SQLite (`append()` buffers, `commit()` writes them), and each commit
also sends `NOTIFY shou_events` with the sessions it touched, so a replica streaming a run that another
replica executes hears of new events at once. Row ids come from one sequence: within a session, which one
writer holds at a time, they increase in commit order, so "the events after id N" is exact.

Every row carries a random `uid` (unique): a commit whose connection broke before the server said whether
it landed is simply written again, and the rows that had landed are skipped. Connections that break are
reopened (`Link`). Session locks are session-level advisory locks held on one connection per process: the
server drops them when that connection closes, so a replica killed with SIGKILL frees its sessions as a
killed process frees a lock file. Rows are written on that same connection: when it breaks under a live
process, its locks are gone and the rows of those sessions are dropped, never written on a new connection
(`lost()` names them, and a `Session` holding one raises `SessionLost` at its next commit, so its run stops
before its next side effect): a fence against a replica that outlived its lease. For the same reason a
`Session` let go of gives up its rows that could not be committed while it was held. Migrations take a
transaction-level advisory lock, so replicas starting together apply each one once.
"""

from __future__ import annotations

import logging
import re
import secrets
import threading
import time
from collections.abc import Sequence
from typing import Any

import orjson

from ..events import Event
from .basics import (
    DEFAULT_RETENTION_DAYS,
    FORK_WRITER,
    NOT_STORED,
    SessionExists,
    SessionInfo,
    StoreBasics,
    decoded,
)
from .pg_link import Link, StoreUnavailable, connect, is_connection_error, migrate_pg, safe_url
from .pg_locks import SessionLocks
from .pg_rows import COLUMNS as _COLUMNS
from .pg_rows import NOTIFY_CHANNEL, PgRow, write_rows
from .pg_rows import text as _text
from .retention import PRUNABLE_TYPES, pruned, referenced
from .together import Together

__all__ = ["PostgresStore", "connect", "migrate_pg"]

log = logging.getLogger("shou.store")

MIGRATIONS: list[tuple[str, list[str]]] = [
    ("001_sessions_and_events", [
        """CREATE TABLE sessions (
            name TEXT PRIMARY KEY, created DOUBLE PRECISION NOT NULL, updated DOUBLE PRECISION NOT NULL,
            title TEXT NOT NULL DEFAULT '', status TEXT NOT NULL DEFAULT '')""",
        """CREATE TABLE events (
            id BIGSERIAL PRIMARY KEY, session TEXT NOT NULL, run_id TEXT NOT NULL, type TEXT NOT NULL,
            ts DOUBLE PRECISION NOT NULL, data TEXT NOT NULL, writer TEXT NOT NULL DEFAULT '')""",
        "CREATE INDEX events_by_session ON events(session, id)",
        "CREATE INDEX events_by_run ON events(run_id)",
        "CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT NOT NULL)",
    ]),
    ("002_event_uid", [
        "ALTER TABLE events ADD COLUMN uid TEXT",
        "CREATE UNIQUE INDEX events_by_uid ON events(uid)",
    ]),
]
_JSON_FIELD = re.compile(r"json_extract\(data, '\$\.(\w+)'\)")  # SQLite's JSON path -> PostgreSQL's


class _Compat:
    """The sliver of sqlite3's connection API that shou.trace uses (`execute` with `?` placeholders)."""

    def __init__(self, store: PostgresStore) -> None:
        self._store = store

    def execute(self, sql: str, params: Sequence[Any] = ()) -> Any:
        sql = _JSON_FIELD.sub(r"(data::json ->> '\1')", sql)
        return _Rows(self._store._reader.execute(sql.replace("?", "%s"), tuple(params)))


class _Rows:
    """Rows as sqlite3's cursor gives them: iterated, or taken with `fetchone()` / `fetchall()`."""

    def __init__(self, rows: Sequence[Any]) -> None:
        self._rows = iter(rows)

    def __iter__(self) -> Any:
        return self._rows

    def fetchone(self) -> Any:
        return next(self._rows, None)

    def fetchall(self) -> list[Any]:
        return list(self._rows)


class PostgresStore(SessionLocks, StoreBasics):
    """Append-only event log in a PostgreSQL database (the tables are created on first use)."""

    def __init__(self, url: str, retention_days: float | None = DEFAULT_RETENTION_DAYS) -> None:
        self.url = url
        self.path = safe_url(url)
        self._init_locks()
        self._buffer: list[PgRow] = []
        # Rows are written on the connection that holds the session locks: when it breaks, the locks are gone
        # with it, and the rows of those sessions are never written on another (a fence: by then another
        # replica may be running them).
        self._writer = Link(url, on_reconnect=self._locks_gone)
        self._writer.run(lambda conn: migrate_pg(conn, MIGRATIONS))
        self._reader = Link(url)
        self._locker = self._writer
        self.committed: dict[str, int] = {}  # session -> the id of its last row this object wrote
        self._lock = threading.Lock()
        self.together = Together(self)  # runs in flight share their commits' round trips (store/together.py)
        self._frozen = False
        self.retention_days = retention_days
        self.notice = ""
        self._db = _Compat(self)  # what shou.trace reads through
        self.apply_retention()

    # ------------------------------------------------------------------ writing

    @property
    def pending(self) -> bool:
        """Whether appended events wait for `commit()`."""
        return bool(self._buffer)

    def append(self, session: str, event: Event, writer: str = "", data: bytes | None = None) -> None:
        """Add an event to `session`'s log; durable at the next `commit()` (streaming fragments are skipped)."""
        if event.type in NOT_STORED or self._frozen or session in self._lost:
            return
        if data is None:
            data = orjson.dumps(event.to_dict())
        self._buffer.append((_text(session), _text(event.run_id), event.type, time.time(), data.decode(), writer,
                             secrets.token_hex(8)))

    def commit(self) -> None:
        """Write everything appended so far atomically, and notify listeners of the sessions. Rows whose write
        may or may not have landed (the connection broke) stay buffered for the next commit; rows the server
        refused are dropped, so one bad row cannot stop every later commit of the process."""
        if not self._buffer:
            return
        with self._lock:
            rows, self._buffer = self._buffer, []
            if not rows or self._frozen:
                return
            try:
                self._writer.run(lambda conn: self._write(conn, [r for r in rows if r[0] not in self._lost]))
            except BaseException as e:
                if is_connection_error(e) or not isinstance(e, Exception):
                    # Not lost: written again (skipping what landed) next time; but never a row of a session
                    # whose lock went with the connection.
                    self._buffer[:0] = [r for r in rows if r[0] not in self._lost]
                else:
                    log.error("dropped %d events the database refused: %s", len(rows), e)
                raise

    flush = commit

    def freeze(self) -> None:
        """Write nothing more, from now on (a replica handing its runs over: what is logged stays as a kill
        would leave it, for another replica to resume)."""
        with self._lock:
            self._frozen = True
            self._buffer = []

    def _write(self, db: Any, rows: list[PgRow]) -> None:
        write_rows(db, rows, self.committed)

    def apply_retention(self, now: float | None = None, every: float = 86400.0) -> int:
        """Run `prune()` if no replica ran it in the last `every` seconds."""
        now = time.time() if now is None else now
        try:
            row = self._reader.execute("SELECT value FROM meta WHERE key = 'pruned_at'")
            if row and now - float(row[0][0]) < every:
                return 0
            count = self.prune(now)
            self._writer.execute("INSERT INTO meta(key, value) VALUES ('pruned_at', %s) ON CONFLICT(key) "
                                 "DO UPDATE SET value = excluded.value", (repr(now),))
            return count
        except Exception as e:  # housekeeping: a busy database can wait for next time
            log.warning("retention did not run: %s", e)
            return 0

    def prune(self, now: float | None = None) -> int:
        """Remove the raw contents of events logged more than `retention_days` ago, as `store.retention`
        says (the events stay). Done in the process, row by row: a row the database's JSON type would refuse
        (an escaped NUL) is pruned like any other."""
        if self.retention_days is None:
            return 0
        cutoff = (time.time() if now is None else now) - self.retention_days * 86400
        self.commit()
        found = self._reader.execute("SELECT id, session, data FROM events WHERE ts < %s AND type = ANY(%s) AND "
                                     "(strpos(data, '\"contents\":{') > 0 OR strpos(data, '\"parent\":') > 0)",
                                     (cutoff, list(PRUNABLE_TYPES)))
        sessions = sorted({session for _, session, _ in found})
        live = referenced(self._reader.execute(
            "SELECT session, data FROM events WHERE type = 'model_request' AND ts >= %s AND session = ANY(%s)",
            (cutoff, sessions))) if sessions else {}
        count = 0
        for row_id, session, data in found:
            try:
                event = pruned(orjson.loads(data), live.get(session, ()))
            except orjson.JSONDecodeError:
                continue
            if event is not None:
                self._writer.execute("UPDATE events SET data = %s WHERE id = %s", (orjson.dumps(event).decode(),
                                                                                   row_id))
                count += 1
        return count

    # ------------------------------------------------------------------ reading

    def _read(self, sql: str, params: Sequence[Any] = ()) -> list[tuple[Any, ...]]:
        self.commit()
        return self._reader.execute(sql, params)

    def ping(self) -> None:
        """Raise unless the database answers."""
        self._reader.execute("SELECT 1")

    def rows(self, session: str, after: int = 0, other_than: str = "\0") -> list[tuple[int, Event]]:
        """`(id, event)` for the stored events of `session` after id `after` (not those of writer `other_than`)."""
        if "\0" in other_than:  # nobody's token (PostgreSQL text holds no NUL): every row
            found = self._read("SELECT id, data FROM events WHERE session = %s AND id > %s ORDER BY id",
                               (_text(session), after))
        else:
            found = self._read("SELECT id, data FROM events WHERE session = %s AND id > %s AND writer != %s "
                               "ORDER BY id", (_text(session), after, other_than))
        return decoded(found)

    def run_rows(self, session: str, run_id: str, after: int = 0) -> list[tuple[int, Event]]:
        """`(id, event)` of run `run_id` and its sub-runs in `session`, after id `after`."""
        found = self._read("SELECT id, data FROM events WHERE session = %s AND id > %s AND (run_id = %s OR "
                           "left(run_id, %s) = %s) ORDER BY id",
                           (_text(session), after, run_id, len(run_id) + 1, run_id + "."))
        return decoded(found)

    def run_end(self, session: str, run_id: str) -> list[tuple[int, Event]]:
        """`(id, event)` of the `run_finished` rows of run `run_id` itself (not its sub-runs) in `session`."""
        found = self._read("SELECT id, data FROM events WHERE session = %s AND run_id = %s AND "
                           "type = 'run_finished' ORDER BY id", (_text(session), _text(run_id)))
        return decoded(found)

    def sessions(self) -> list[SessionInfo]:
        """All sessions, most recently updated first."""
        found = self._read(
            "SELECT s.name, s.created, s.updated, s.title, "
            "(SELECT COUNT(*) FROM events e WHERE e.session = s.name AND e.type = 'run_started'), s.status "
            "FROM sessions s ORDER BY s.updated DESC")
        return [SessionInfo(*r) for r in found]

    def unfinished(self) -> list[str]:
        """Sessions whose last run never finished, newest first."""
        found = self._read("SELECT name FROM sessions WHERE status IN "
                           "('running', 'waiting_approval', 'waiting_input') "
                           "ORDER BY updated DESC")
        return [name for (name,) in found]

    def exists(self, session: str) -> bool:
        """Whether `session` has any stored event."""
        return bool(self._read("SELECT 1 FROM sessions WHERE name = %s", (_text(session),)))

    def fork(self, source: str, target: str, through: int, closing: Sequence[Event] = (), status: str = "") -> None:
        """Make session `target` from `source`'s events up to row id `through`, then `closing`, in one
        transaction, as `SQLiteStore.fork` does. `UserError` when `target` exists already."""
        self.commit()
        now = time.time()
        writer = FORK_WRITER + _text(source)

        def work(conn: Any) -> None:
            with conn.transaction():
                title = conn.execute("SELECT title FROM sessions WHERE name = %s", (_text(source),)).fetchone()
                # The name is taken by the row of `sessions` (its key): two forks to one name cannot both land.
                made = conn.execute("INSERT INTO sessions(name, created, updated, title, status) VALUES (%s, %s, %s, "
                                    "%s, %s) ON CONFLICT (name) DO NOTHING RETURNING name",
                                    (_text(target), now, now, title[0] if title else "", status)).fetchone()
                if made is None or conn.execute("SELECT 1 FROM events WHERE session = %s LIMIT 1",
                                                (_text(target),)).fetchone() is not None:
                    raise SessionExists(f"session {target!r} exists already; give the fork another name")
                conn.execute(f"INSERT INTO events({_COLUMNS}) SELECT %s, run_id, type, ts, data, %s, "
                             "md5(random()::text || clock_timestamp()::text || id::text) FROM events "
                             "WHERE session = %s AND id <= %s ORDER BY id",
                             (_text(target), writer, _text(source), through))
                for event in closing:
                    conn.execute(f"INSERT INTO events({_COLUMNS}) VALUES (%s, %s, %s, %s, %s, %s, %s)",
                                 (_text(target), _text(event.run_id), event.type, now,
                                  orjson.dumps(event.to_dict()).decode(), writer, secrets.token_hex(8)))
                conn.execute("SELECT pg_notify(%s, %s)", (NOTIFY_CHANNEL, target[:7000]))

        try:
            self._writer.run(work, retry=False)  # a commit whose answer was lost must not be taken for a clash
        except StoreUnavailable as e:
            if not self._forked(target, now):
                raise StoreUnavailable(f"{e} (the fork into {target!r} may still land, if its commit was under way: "
                                       "look for that session before forking again)") from None

    def _forked(self, target: str, made: float) -> bool:
        """Whether a fork whose answer was lost landed all the same: `target`'s row is the one it made (created
        at `made`, this call's own time), in the transaction that copied the log."""
        try:
            # compared by the server: float8 as text is rounded where extra_float_digits < 1 (a role's setting)
            row = self._reader.execute("SELECT created = %s::float8 FROM sessions WHERE name = %s",
                                       (made, _text(target)))
        except Exception:  # the database is away: the caller is told the fork failed, as before
            return False
        return bool(row) and row[0][0] is True

    def delete(self, session: str) -> None:
        """Remove `session` and all its events."""
        self.commit()

        def work(conn: Any) -> None:
            with conn.transaction():
                conn.execute("DELETE FROM events WHERE session = %s", (session,))
                conn.execute("DELETE FROM sessions WHERE name = %s", (session,))

        self._writer.run(work)

    def close(self) -> None:
        """Commit and close the connections (which drops this process's session locks)."""
        try:
            self.commit()
        finally:
            for link in (self._writer, self._reader):
                link.close()
