"""The session store on PostgreSQL: the same log as `SQLiteStore`, shared by every replica of `shou serve`.

Rows are written ahead exactly as in SQLite (`append()` buffers, `commit()` writes one transaction), and
each commit also sends `NOTIFY shou_events` with the sessions it touched, so a replica streaming a run that
another replica executes hears of new events at once. Row ids come from one sequence: within a session,
which one writer holds at a time, they increase in commit order, so "the events after id N" is exact.

Session locks are PostgreSQL session-level advisory locks held on one connection per process: the server
drops them when that connection closes, so a replica killed with SIGKILL frees its sessions as a killed
process frees a lock file. Migrations take a transaction-level advisory lock, so replicas starting together
apply each one once.
"""

from __future__ import annotations

import functools
import threading
import time
from collections.abc import Iterator, Sequence
from typing import Any

import orjson

from ..errors import UserError
from ..events import Event
from .locks import SessionBusy
from .sqlite import _SESSION_EVENTS, DEFAULT_RETENTION_DAYS, NOT_STORED, Row, SessionInfo, decoded

__all__ = ["PostgresStore", "connect", "migrate_pg"]

NOTIFY_CHANNEL = "shou_events"
_MIGRATION_LOCK = 0x5340_0001  # pg_advisory_xact_lock key for schema changes

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
]
_UPSERT_SESSION = (
    "INSERT INTO sessions(name, created, updated, title, status) VALUES (%s, %s, %s, %s, %s) "
    "ON CONFLICT(name) DO UPDATE SET updated = excluded.updated, "
    "title = CASE WHEN sessions.title = '' THEN excluded.title ELSE sessions.title END, "
    "status = CASE WHEN excluded.status = '' THEN sessions.status ELSE excluded.status END"
)


@functools.lru_cache(maxsize=64)
def _insert_and_notify(n: int) -> str:
    values = ",".join(["(%s, %s, %s, %s, %s, %s)"] * n)
    return (f"WITH added AS (INSERT INTO events(session, run_id, type, ts, data, writer) VALUES {values} "
            f"RETURNING session, id) SELECT session, max(id), pg_notify('{NOTIFY_CHANNEL}', session) FROM added "
            "GROUP BY session")


def connect(url: str, **kwargs: Any) -> Any:
    """An autocommit psycopg connection to `url`; a clear `UserError` when psycopg or the server is missing."""
    try:
        import psycopg
    except ImportError:
        raise UserError("a postgresql:// store needs psycopg: pip install 'shou[serve]'") from None
    try:
        return psycopg.connect(url, autocommit=True, **kwargs)
    except psycopg.Error as e:
        raise UserError(f"cannot connect to PostgreSQL at {_safe(url)}: {str(e).strip()}") from None


def _safe(url: str) -> str:
    """`url` without its password, for messages."""
    if "@" in url and "://" in url:
        scheme, rest = url.split("://", 1)
        cred, host = rest.rsplit("@", 1)
        return f"{scheme}://{cred.split(':', 1)[0]}@{host}"
    return url


def migrate_pg(conn: Any, migrations: Sequence[tuple[str, list[str]]], table: str = "shou_migrations") -> None:
    """Apply the named migrations `conn`'s database lacks, once, even with several replicas starting together:
    each runs under a transaction-level advisory lock, after reading again which ones are applied."""
    with conn.transaction():  # even IF NOT EXISTS races in the catalog when two replicas run it at once
        conn.execute("SELECT pg_advisory_xact_lock(%s)", (_MIGRATION_LOCK,))
        conn.execute(f"CREATE TABLE IF NOT EXISTS {table} (name TEXT PRIMARY KEY, applied DOUBLE PRECISION NOT NULL)")
    for name, statements in migrations:
        with conn.transaction():
            conn.execute("SELECT pg_advisory_xact_lock(%s)", (_MIGRATION_LOCK,))
            if conn.execute(f"SELECT 1 FROM {table} WHERE name = %s", (name,)).fetchone():
                continue
            for statement in statements:
                conn.execute(statement)
            conn.execute(f"INSERT INTO {table}(name, applied) VALUES (%s, %s)", (name, time.time()))


class _Compat:
    """The sliver of sqlite3's connection API that shou.trace uses (`execute` with `?` placeholders)."""

    def __init__(self, store: PostgresStore) -> None:
        self._store = store

    def execute(self, sql: str, params: Sequence[Any] = ()) -> Any:
        sql = sql.replace("json_extract(data, '$.request_id')", "(data::jsonb ->> 'request_id')")
        with self._store._read_lock:
            return self._store._reader.execute(sql.replace("?", "%s"), tuple(params))


class PostgresStore:
    """Append-only event log in a PostgreSQL database (the tables are created on first use)."""

    def __init__(self, url: str, retention_days: float | None = DEFAULT_RETENTION_DAYS) -> None:
        self.url = url
        self.path = _safe(url)
        self._conn = connect(url)
        migrate_pg(self._conn, MIGRATIONS)
        self._reader = connect(url)
        self._locker: Any = None
        self._held: dict[str, int] = {}
        self._buffer: list[Row] = []
        self.committed: dict[str, int] = {}  # session -> the id of its last row this object wrote
        self._lock = threading.Lock()
        self._read_lock = threading.Lock()
        self._lock_lock = threading.Lock()
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
        if event.type in NOT_STORED:
            return
        if data is None:
            data = orjson.dumps(event.to_dict())
        self._buffer.append((session, event.run_id, event.type, time.time(), data.decode(), writer))

    def commit(self) -> None:
        """Write everything appended so far in one transaction, and notify listeners of the sessions."""
        if not self._buffer:
            return
        with self._lock:
            rows, self._buffer = self._buffer, []
            if not rows:
                return
            try:
                self._write(rows)
            except BaseException:
                self._buffer[:0] = rows  # not lost: the next commit tries again
                raise

    flush = commit

    def _write(self, rows: list[Row]) -> None:
        db = self._conn
        if not any(r[2] in _SESSION_EVENTS for r in rows):
            # The usual batch: one statement, so one round trip, that inserts and notifies atomically.
            found = db.execute(_insert_and_notify(len(rows)), [v for row in rows for v in row]).fetchall()
            self.committed.update((session, last) for session, last, _ in found)
            return
        with db.transaction():
            with db.cursor() as cur:
                cur.executemany("INSERT INTO events(session, run_id, type, ts, data, writer) "
                                "VALUES (%s, %s, %s, %s, %s, %s) RETURNING session, id", rows, returning=True)
                while True:
                    for session, last in cur.fetchall():
                        self.committed[session] = max(last, self.committed.get(session, 0))
                    if not cur.nextset():
                        break
            for session, _, kind, ts, data, _ in rows:
                if kind not in _SESSION_EVENTS:
                    continue
                event = orjson.loads(data)
                title = str(event.get("task", ""))[:200] if kind == "run_started" else ""
                status = {"run_started": "running", "run_resumed": "running"}.get(kind) or (
                    str(event.get("status", "")) if kind == "run_finished" else "")
                db.execute(_UPSERT_SESSION, (session, ts, ts, title, status))
            for session in {r[0] for r in rows}:
                db.execute("SELECT pg_notify(%s, %s)", (NOTIFY_CHANNEL, session[:7000]))

    def apply_retention(self, now: float | None = None, every: float = 86400.0) -> int:
        """Run `prune()` if no replica ran it in the last `every` seconds."""
        now = time.time() if now is None else now
        try:
            with self._lock:
                row = self._conn.execute("SELECT value FROM meta WHERE key = 'pruned_at'").fetchone()
            if row is not None and now - float(row[0]) < every:
                return 0
            count = self.prune(now)
            with self._lock:
                self._conn.execute("INSERT INTO meta(key, value) VALUES ('pruned_at', %s) ON CONFLICT(key) "
                                 "DO UPDATE SET value = excluded.value", (repr(now),))
            return count
        except Exception:  # housekeeping: a busy database can wait for next time
            return 0

    def prune(self, now: float | None = None) -> int:
        """Remove the raw contents of requests logged more than `retention_days` ago (the events stay)."""
        if self.retention_days is None:
            return 0
        cutoff = (time.time() if now is None else now) - self.retention_days * 86400
        self.commit()
        with self._lock:
            cur = self._conn.execute(
                "UPDATE events SET data = ((data::jsonb) - 'contents')::text WHERE type = 'model_request' "
                "AND ts < %s AND jsonb_typeof((data::jsonb) -> 'contents') = 'object'", (cutoff,))
            return cur.rowcount

    # ------------------------------------------------------------------ reading

    def _read(self, sql: str, params: Sequence[Any] = ()) -> list[tuple[Any, ...]]:
        self.commit()
        with self._read_lock:
            return self._reader.execute(sql, tuple(params)).fetchall()

    def events(self, session: str) -> Iterator[Event]:
        """Every stored event of `session`, oldest first."""
        for _, event in self.rows(session):
            yield event

    def rows(self, session: str, after: int = 0, other_than: str = "\0") -> list[tuple[int, Event]]:
        """`(id, event)` for the stored events of `session` after id `after` (not those of writer `other_than`)."""
        if "\0" in other_than:  # nobody's token (PostgreSQL text holds no NUL): every row
            found = self._read("SELECT id, data FROM events WHERE session = %s AND id > %s ORDER BY id", (session, after))
        else:
            found = self._read("SELECT id, data FROM events WHERE session = %s AND id > %s AND writer != %s "
                               "ORDER BY id", (session, after, other_than))
        return decoded(found)

    def run_rows(self, session: str, run_id: str, after: int = 0) -> list[tuple[int, Event]]:
        """`(id, event)` of run `run_id` and its sub-runs in `session`, after id `after`."""
        found = self._read("SELECT id, data FROM events WHERE session = %s AND id > %s AND "
                           "(run_id = %s OR run_id LIKE %s) ORDER BY id", (session, after, run_id, run_id + ".%"))
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
        found = self._read("SELECT name FROM sessions WHERE status IN ('running', 'waiting_approval') "
                           "ORDER BY updated DESC")
        return [name for (name,) in found]

    def exists(self, session: str) -> bool:
        """Whether `session` has any stored event."""
        return bool(self._read("SELECT 1 FROM sessions WHERE name = %s", (session,)))

    def delete(self, session: str) -> None:
        """Remove `session` and all its events."""
        self.commit()
        with self._lock, self._conn.transaction():
            self._conn.execute("DELETE FROM events WHERE session = %s", (session,))
            self._conn.execute("DELETE FROM sessions WHERE name = %s", (session,))

    # ------------------------------------------------------------------ locks

    def lock(self, session: str) -> PgSessionLock:
        """Take the session for this process (an advisory lock); `SessionBusy` when another holds it."""
        busy = SessionBusy(f"session {session!r} is being run by another shou process or run; wait for it to "
                           "finish, or use another session")
        with self._lock_lock:
            if session in self._held:
                raise busy
            if self._locker is None:
                self._locker = connect(self.url)
            got = self._locker.execute("SELECT pg_try_advisory_lock(hashtextextended(%s, 0))", (session,)).fetchone()
            if not got or not got[0]:
                raise busy
            self._held[session] = 1
        return PgSessionLock(self, session)

    def _unlock(self, session: str) -> None:
        with self._lock_lock:
            if self._held.pop(session, None) is not None and self._locker is not None:
                self._locker.execute("SELECT pg_advisory_unlock(hashtextextended(%s, 0))", (session,))

    def is_locked(self, session: str) -> bool:
        """Whether some process holds `session` now."""
        try:
            self.lock(session).release()
        except SessionBusy:
            return True
        return False

    def close(self) -> None:
        """Commit and close the connections (which drops this process's session locks)."""
        try:
            self.commit()
        finally:
            for conn in (self._conn, self._reader, self._locker):
                if conn is not None:
                    conn.close()

    def __enter__(self) -> PostgresStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class PgSessionLock:
    """A session taken by this process; `release()` gives it back."""

    def __init__(self, store: PostgresStore, session: str) -> None:
        self.store = store
        self.session = session

    def release(self) -> None:
        """Let other processes have the session."""
        self.store._unlock(self.session)
