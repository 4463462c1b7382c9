"""The session store: every event of every run, appended to a SQLite file in WAL mode, written ahead.

A run's events are durable before anything they announce becomes visible or happens: `append()` buffers,
and `commit()` writes the buffer in one transaction on the caller's thread. The loop commits before each
model request and before any tool runs, and `Agent.stream()` commits before it hands an event on, so what
a consumer printed is in the file, and a process killed at any moment leaves a log that `shou resume`
can continue. A commit in WAL mode with `synchronous=NORMAL` is a write to the OS, not a disk flush:
it survives the process (kill -9), and costs tens of microseconds. Streaming fragments (text and argument
deltas) are never stored; the complete message is.

Sessions are locked while a run uses them (`lock()`: a byte-range lock on a file beside the store, which
the kernel drops when the process dies), so two processes never interleave one conversation.
The schema grows through named migrations recorded in `PRAGMA user_version`.
"""

from __future__ import annotations

import contextlib
import functools
import json
import os
import sqlite3
import threading
import time
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path

import orjson

from ..errors import UserError
from ..events import Event, event_from_dict
from .locks import LockFile, SessionBusy, SessionLock
from .migrate import Migration, migrate

__all__ = ["LockFile", "SQLiteStore", "SessionBusy", "SessionInfo", "SessionLock", "StoreDamaged"]

MIGRATIONS: list[Migration] = [
    (
        "001_sessions_and_events",
        [
            """CREATE TABLE sessions (
                name TEXT PRIMARY KEY,
                created REAL NOT NULL,
                updated REAL NOT NULL,
                title TEXT NOT NULL DEFAULT ''
            )""",
            """CREATE TABLE events (
                id INTEGER PRIMARY KEY AUTOINCREMENT,
                session TEXT NOT NULL REFERENCES sessions(name),
                run_id TEXT NOT NULL,
                type TEXT NOT NULL,
                ts REAL NOT NULL,
                data TEXT NOT NULL
            )""",
            "CREATE INDEX events_by_session ON events(session, id)",
        ],
    ),
    (
        "002_session_status",
        [
            # The last run's status ("running" while one is under way), so listing needs no scan.
            "ALTER TABLE sessions ADD COLUMN status TEXT NOT NULL DEFAULT ''",
            """UPDATE sessions SET status = COALESCE((
                SELECT CASE e.type WHEN 'run_finished' THEN json_extract(e.data, '$.status') ELSE 'running' END
                FROM events e WHERE e.session = sessions.name AND e.type IN ('run_started', 'run_finished')
                ORDER BY e.id DESC LIMIT 1), '')""",
        ],
    ),
    (
        "003_event_writer",
        [
            # Which Session object appended the row, so one that catches up skips its own rows.
            "ALTER TABLE events ADD COLUMN writer TEXT NOT NULL DEFAULT ''",
        ],
    ),
    (
        "004_trace_blobs",
        [
            # What model requests carried (messages, tool specs), each distinct one stored once under its
            # hash; `ts` is when a request last used it, which retention goes by.
            """CREATE TABLE blobs (
                hash TEXT PRIMARY KEY,
                data BLOB NOT NULL,
                size INTEGER NOT NULL,
                ts REAL NOT NULL
            ) WITHOUT ROWID""",
            "CREATE INDEX blobs_by_ts ON blobs(ts)",
        ],
    ),
]
DEFAULT_RETENTION_DAYS = 7.0
_MOST_ROWS = 5000  # SQLite takes 32766 parameters in one statement
_SESSION_EVENTS = frozenset({"run_started", "run_resumed", "run_finished", "history_cleared"})
_UPSERT_SESSION = (
    "INSERT INTO sessions(name, created, updated, title, status) VALUES (?, ?, ?, ?, ?) "
    "ON CONFLICT(name) DO UPDATE SET updated = excluded.updated, "
    "title = CASE WHEN sessions.title = '' THEN excluded.title ELSE sessions.title END, "
    "status = CASE WHEN excluded.status = '' THEN sessions.status ELSE excluded.status END"
)


@functools.lru_cache(maxsize=64)
def _insert(n: int) -> str:
    """One INSERT of `n` event rows."""
    return "INSERT INTO events(session, run_id, type, ts, data, writer) VALUES " + ",".join(
        ["(?, ?, ?, ?, ?, ?)"] * n)

@functools.lru_cache(maxsize=64)
def _put_blobs(n: int) -> str:
    """One upsert of `n` blobs: a blob already there is only marked used now."""
    return ("INSERT INTO blobs(hash, data, size, ts) VALUES " + ",".join(["(?, ?, ?, ?)"] * n)
            + " ON CONFLICT(hash) DO UPDATE SET ts = excluded.ts")


NOT_STORED = frozenset({"text_delta", "tool_call_delta"})  # the complete message is stored instead
Row = tuple[str, str, str, float, str, str]


@dataclass(frozen=True, slots=True)
class SessionInfo:
    """A row of `shou sessions`: `status` is the last run's (`running` while one is under way)."""

    name: str
    created: float
    updated: float
    title: str
    runs: int
    status: str = ""


class SQLiteStore:
    """Append-only event log in one SQLite file (created with its folder on first use)."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        try:
            self._db = self._connect()
            migrate(self._db, MIGRATIONS)
        except sqlite3.DatabaseError as e:
            if isinstance(e, sqlite3.OperationalError) and "locked" in str(e):
                raise UserError(f"{self.path} is locked by another process for too long ({e}); try again") from None
            raise StoreDamaged(self.path, e) from None
        self._buffer: list[Row] = []
        self._blobs: dict[str, bytes] = {}
        self._stored: set[str] = set()  # blobs this process wrote or touched: not written again
        self.retention_days: float | None = DEFAULT_RETENTION_DAYS
        self._pruned_at: float | None = None
        self._lock = threading.Lock()
        self.notice = ""  # something the person should be told about the file (it was replaced, ...)
        self._locks: LockFile | None = None


    def _connect(self) -> sqlite3.Connection:
        db = sqlite3.connect(self.path, isolation_level=None, check_same_thread=False, timeout=10.0)
        db.execute("PRAGMA journal_mode=WAL")
        db.execute("PRAGMA synchronous=NORMAL")
        db.execute("PRAGMA busy_timeout=10000")
        db.execute("SELECT COUNT(*) FROM sqlite_master").fetchone()  # reads the header: a damaged file fails here
        return db

    @classmethod
    def for_workspace(cls, workspace: str | Path) -> SQLiteStore:
        """The store at `<workspace>/.shou/shou.db` (never through a symlink). A damaged file is moved
        aside (kept, renamed) and a fresh one started; `notice` then says so, for the person."""
        from ..workspace import state_database

        path = state_database(Path(workspace), "shou.db")
        try:
            return cls(path)
        except StoreDamaged as e:
            kept = e.move_aside()
            store = cls(path)
            store.notice = (f"{path} was damaged ({e.cause}); it is kept as {kept.name}, and a fresh session log "
                            "was started")
            return store

    # ------------------------------------------------------------------ writing

    @property
    def pending(self) -> bool:
        """Whether appended events wait for `commit()`."""
        return bool(self._buffer)

    def put_blob(self, key: str, data: bytes) -> None:
        """Keep `data` under its content hash `key` (durable at the next `commit()`, with the events that
        name it). A blob already stored is only marked used now, once per process."""
        if key not in self._stored:
            self._blobs[key] = data
            self._stored.add(key)
            if len(self._stored) > 200_000:  # a long-lived process: forget, at worst touch a blob again
                self._stored.clear()

    def append(self, session: str, event: Event, writer: str = "") -> None:
        """Add an event to `session`'s log; durable at the next `commit()` (streaming fragments are skipped).

        `writer` (a `Session`'s token) can later read only the rows others wrote (`rows(..., other_than=)`).
        """
        if event.type in NOT_STORED:
            return
        data = event.to_dict()
        self._buffer.append((session, event.run_id, event.type, time.time(), orjson.dumps(data).decode(), writer))

    def commit(self) -> None:
        """Write everything appended so far in one transaction, on this thread (a few tens of µs)."""
        if not self._buffer and not self._blobs:
            return
        with self._lock:
            rows, self._buffer = self._buffer, []
            blobs, self._blobs = self._blobs, {}
            if rows or blobs:
                self._write(rows, blobs)
            # At the first requests of a process, then hourly: drop what retention has expired. Blobs are
            # touched once per period, so one in use is never more than a period older than its last use.
            if blobs and (self._pruned_at is None or time.monotonic() - self._pruned_at > 3600):
                self._pruned_at = time.monotonic()
                self._stored.clear()
                self._stored.update(blobs)  # just written: touched for this period
                self.prune()

    def prune(self, now: float | None = None) -> int:
        """Delete the raw request contents no request used for `retention_days` (None: keep them all). The
        events, with their tokens, costs and statuses, stay. Returns how many were deleted."""
        if self.retention_days is None:
            return 0
        cutoff = (time.time() if now is None else now) - self.retention_days * 86400
        return self._db.execute("DELETE FROM blobs WHERE ts < ?", (cutoff,)).rowcount

    flush = commit  # the name callers used when writes went through a writer thread

    def _write(self, rows: list[Row], blobs: dict[str, bytes]) -> None:
        db = self._db
        sessions = [r for r in rows if r[2] in _SESSION_EVENTS]
        try:
            if not blobs and len(rows) <= _MOST_ROWS and not sessions:  # the usual batch: one statement
                db.execute(_insert(len(rows)), [v for row in rows for v in row])
                return
            db.execute("BEGIN IMMEDIATE")  # a request's messages and the events naming them, together
            try:
                if blobs:
                    now = time.time()
                    items = list(blobs.items())
                    for i in range(0, len(items), _MOST_ROWS // 2):
                        part = items[i: i + _MOST_ROWS // 2]
                        db.execute(_put_blobs(len(part)), [v for k, b in part for v in (k, b, len(b), now)])
                for i in range(0, len(rows), _MOST_ROWS):
                    part = rows[i: i + _MOST_ROWS]
                    db.execute(_insert(len(part)), [v for row in part for v in row])
                for session, _, kind, ts, data, _ in sessions:  # the list of sessions follows, atomically
                    event = orjson.loads(data)
                    title = str(event.get("task", ""))[:200] if kind == "run_started" else ""
                    status = {"run_started": "running", "run_resumed": "running"}.get(kind) or (
                        str(event.get("status", "")) if kind == "run_finished" else "")
                    db.execute(_UPSERT_SESSION, (session, ts, ts, title, status))
                db.execute("COMMIT")
            except BaseException:
                with contextlib.suppress(sqlite3.Error):
                    self._db.execute("ROLLBACK")
                raise
        except BaseException:
            self._buffer[:0] = rows  # not lost: the next commit tries again
            self._blobs = {**blobs, **self._blobs}
            raise

    # ------------------------------------------------------------------ reading

    def events(self, session: str) -> Iterator[Event]:
        """Every stored event of `session`, oldest first."""
        for _, event in self.rows(session):
            yield event

    def rows(self, session: str, after: int = 0, other_than: str = "\0") -> list[tuple[int, Event]]:
        """`(id, event)` for the stored events of `session` after id `after` (leaving out those appended by
        writer `other_than`), oldest first. A row that cannot be decoded (a newer shou's, damage) is skipped.
        """
        self.commit()
        cur = self._db.execute("SELECT id, data FROM events WHERE session = ? AND id > ? AND writer != ? ORDER BY id",
                               (session, after, other_than))
        out = []
        for row_id, data in cur.fetchall():
            try:
                out.append((row_id, event_from_dict(json.loads(data))))
            except (ValueError, TypeError, KeyError):
                continue
        return out

    def blobs(self, keys: Iterable[str]) -> dict[str, bytes]:
        """The stored blobs among `keys` (those retention removed, or never stored, are missing)."""
        self.commit()
        keys = list(dict.fromkeys(keys))
        out: dict[str, bytes] = {}
        for i in range(0, len(keys), _MOST_ROWS):
            part = keys[i: i + _MOST_ROWS]
            marks = ",".join("?" * len(part))
            for key, data in self._db.execute(f"SELECT hash, data FROM blobs WHERE hash IN ({marks})", part):
                out[key] = bytes(data)
        return out

    def run_rows(self, run_id: str) -> tuple[str, list[tuple[int, Event]]] | None:
        """The session of run `run_id` and that run's stored events, or None for an unknown run."""
        self.commit()
        row = self._db.execute("SELECT session FROM events WHERE run_id = ? ORDER BY id LIMIT 1", (run_id,)).fetchone()
        if row is None:
            return None
        return row[0], [(i, e) for i, e in self.rows(row[0]) if e.run_id == run_id]

    def sessions(self) -> list[SessionInfo]:
        """All sessions, most recently updated first."""
        self.commit()
        rows = self._db.execute(
            "SELECT s.name, s.created, s.updated, s.title, "
            "(SELECT COUNT(*) FROM events e WHERE e.session = s.name AND e.type = 'run_started'), s.status "
            "FROM sessions s ORDER BY s.updated DESC"
        ).fetchall()
        return [SessionInfo(*r) for r in rows]

    def unfinished(self) -> list[str]:
        """Sessions whose last run never finished (killed, running now, or waiting for approvals), newest first."""
        self.commit()
        rows = self._db.execute("SELECT name FROM sessions WHERE status IN ('running', 'waiting_approval') "
                                "ORDER BY updated DESC")
        return [name for (name,) in rows]

    def exists(self, session: str) -> bool:
        """Whether `session` has any stored event."""
        self.commit()
        return self._db.execute("SELECT 1 FROM sessions WHERE name = ?", (session,)).fetchone() is not None

    # ------------------------------------------------------------------ locks

    def lock(self, session: str) -> SessionLock:
        """Take the session for this process; `SessionBusy` when another process (or another holder in this
        one) has it."""
        if self._locks is None:
            self._locks = LockFile(self.path.with_name(self.path.name + ".locks"))
        return self._locks.take(session)

    def is_locked(self, session: str) -> bool:
        """Whether some process holds `session` now."""
        try:
            self.lock(session).release()
        except SessionBusy:
            return True
        return False

    def close(self) -> None:
        """Commit and close the connection."""
        try:
            self.commit()
        finally:
            self._db.close()
            if self._locks is not None:
                self._locks.close()

    def __enter__(self) -> SQLiteStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class StoreDamaged(UserError):
    """The file is not a readable SQLite store."""

    def __init__(self, path: Path, cause: Exception) -> None:
        super().__init__(f"{path} is not a readable session store ({cause})")
        self.path = path
        self.cause = cause

    def move_aside(self) -> Path:
        """Rename the file (and SQLite's files beside it) out of the way, keeping it; returns its new path."""
        stamp = time.strftime("%Y%m%d-%H%M%S")
        kept = self.path.with_name(f"{self.path.name}.damaged-{stamp}")
        for suffix in ("", "-wal", "-shm", "-journal"):
            with contextlib.suppress(FileNotFoundError):
                os.rename(f"{self.path}{suffix}", f"{kept}{suffix}")
        return kept
