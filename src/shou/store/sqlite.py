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
import logging
import os
import sqlite3
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import orjson

from ..errors import UserError
from ..events import Event
from ..private import make_dirs, private_file
from .basics import (
    _SESSION_EVENTS,
    DEFAULT_RETENTION_DAYS,
    FORK_WRITER,
    NOT_STORED,
    SessionExists,
    SessionInfo,
    StoreBasics,
    decoded,
)
from .locks import LockFile, SessionBusy, SessionLock, held
from .retention import PRUNABLE_TYPES, pruned, referenced
from .sqlite_errors import StoreDamaged, StoreError, StoreUnusable, explain, read_only, unwritable
from .sqlite_open import MIGRATIONS, behind, open_to_read, open_to_write
from .together import Together

_log = logging.getLogger(__name__)
__all__ = ["MIGRATIONS", "LockFile", "SQLiteStore", "SessionBusy", "SessionInfo", "SessionLock", "StoreDamaged",
           "StoreError", "StoreUnusable"]

_MOST_ROWS = 5000  # SQLite takes 32766 parameters in one statement
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

Row = tuple[str, str, str, float, str, str]


def _explained(method: Any) -> Any:
    """`method` raising a `StoreError` that says what is wrong (and what to do) instead of a `sqlite3.Error`."""
    @functools.wraps(method)
    def wrapper(self: SQLiteStore, *args: Any, **kwargs: Any) -> Any:
        try:
            return method(self, *args, **kwargs)
        except sqlite3.Error as e:
            raise explain(e, self.path) from None
        except UnicodeEncodeError as e:  # text from bytes that were not UTF-8 (lone surrogates): never storable
            raise UserError(f"{e.object!r} is not valid UTF-8 (at character {e.start}); give it as UTF-8 "
                            "text") from None
    return wrapper


class SQLiteStore(StoreBasics):
    """Append-only event log in one SQLite file (created with its folder on first use).

    `readonly` opens it only to read (`shou sessions`, `show`, `trace`): nothing is migrated nor pruned, and a
    read-only mount works. `check` runs SQLite's `quick_check` first, so damage inside the file is found at
    open instead of in the middle of a run. A file SQLite calls corrupt raises `StoreDamaged`; any other
    failure (a full disk, no permission, a lock) raises `StoreUnusable` and leaves the file alone.
    """

    def __init__(self, path: str | Path, retention_days: float | None = DEFAULT_RETENTION_DAYS, *,
                 readonly: bool = False, check: bool = False) -> None:
        self.path = Path(path)
        self.readonly = readonly
        if not readonly:
            make_dirs(self.path.parent)
            private_file(self.path)  # 0600 before SQLite makes it (and its -wal, -shm) with the umask's mode
            if self.path.exists() and not os.access(self.path, os.W_OK):  # SQLite would open it to read only
                raise read_only(self.path)
        try:
            self._db = open_to_read(self.path) if readonly else None
            if self._db is not None and behind(self._db):  # an older shou's file: brought up to date first
                self._db.close()
                self._db, self.readonly = None, False
            if self._db is None:
                self._db = open_to_write(self.path, check)
        except sqlite3.Error as e:
            raise explain(e, self.path) from None
        self._buffer: list[Row] = []
        self.committed: dict[str, int] = {}  # session -> the id of its last row this object wrote
        self._frozen = False
        self._lost: set[str] = set()  # sessions abandoned by their runs: nothing more of them is written
        self.retention_days = retention_days
        self._lock = threading.Lock()
        self.together = Together(self)  # runs in flight on it share their commits' transactions
        self.notice = ""  # something the person should be told about the file (it was replaced, ...)
        # Before any session is read from it: a session folds in which request contents its log holds.
        if not readonly:
            self.apply_retention()
        self._locks: LockFile | None = None

    @classmethod
    def for_workspace(cls, workspace: str | Path, retention_days: float | None = DEFAULT_RETENTION_DAYS) -> SQLiteStore:
        """The store at `<workspace>/.shou/shou.db` (never through a symlink), checked. A file SQLite calls
        corrupt is moved aside (kept, renamed) and a fresh one started; `notice` then says so, for the person.
        Any other failure is a `StoreUnusable`, with the file left as it was."""
        from ..workspace import state_database

        path = state_database(Path(workspace), "shou.db")
        try:
            return cls(path, retention_days, check=True)
        except StoreDamaged as e:
            kept = e.move_aside()
            store = cls(path, retention_days)
            store.notice = (f"{path} was damaged ({e.cause}); it is kept as {kept.name}, and a fresh session log "
                            "was started")
            return store

    # ------------------------------------------------------------------ writing

    @property
    def pending(self) -> bool:
        """Whether appended events wait for `commit()`."""
        return bool(self._buffer)

    def append(self, session: str, event: Event, writer: str = "", data: bytes | None = None) -> None:
        """Add an event to `session`'s log; durable at the next `commit()` (streaming fragments are skipped).

        `writer` (a `Session`'s token) can later read only the rows others wrote (`rows(..., other_than=)`).
        `data` is the event's JSON when the caller has made it already (`Redactor.checked`).
        """
        if event.type in NOT_STORED or self._frozen or session in self._lost:
            return
        if data is None:
            data = orjson.dumps(event.to_dict())
        self._buffer.append((session, event.run_id, event.type, time.time(), data.decode(), writer))

    def freeze(self) -> None:
        """Write nothing more, from now on (`shou serve` handing its runs over: the log stays as a kill would
        leave it, for another process to resume)."""
        with self._lock:
            self._frozen = True
            self._buffer = []

    @_explained
    def ping(self) -> None:
        """Raise unless the file can be read."""
        self._db.execute("SELECT 1").fetchone()

    def lost(self) -> set[str]:
        """Sessions whose lock this process lost while holding it: none (the kernel keeps a live process's)."""
        return set()

    @_explained
    def commit(self) -> None:
        """Write everything appended so far in one transaction, on this thread (a few tens of µs)."""
        if not self._buffer:
            return
        with self._lock:
            rows, self._buffer = self._buffer, []
            if rows:
                self._write(rows)

    def apply_retention(self, now: float | None = None, every: float = 86400.0) -> int:
        """Run `prune()` if it has not run in the last `every` seconds (by any process). Returns how many
        requests lost their raw contents."""
        now = time.time() if now is None else now
        try:
            row = self._db.execute("SELECT value FROM meta WHERE key = 'pruned_at'").fetchone()
            if row is not None and now - float(row[0]) < every:
                return 0
            count = self.prune(now)
            self._db.execute("INSERT OR REPLACE INTO meta(key, value) VALUES ('pruned_at', ?)", (repr(now),))
            return count
        except (sqlite3.Error, ValueError):  # retention is housekeeping: a busy file can wait for next time
            return 0

    def prune(self, now: float | None = None) -> int:
        """Remove the raw contents of events logged more than `retention_days` ago (None: keep them), as
        `store.retention` says: requests' recorded messages, sub-runs' replies and tool results. Every
        event stays, with its tokens, cost and status. Returns how many events lost contents."""
        if self.retention_days is None:
            return 0
        cutoff = (time.time() if now is None else now) - self.retention_days * 86400
        self.commit()
        found = self._db.execute(
            f"SELECT id, session, data FROM events WHERE ts < ? AND type IN "
            f"({', '.join('?' * len(PRUNABLE_TYPES))}) AND "
            "(instr(data, '\"contents\":{') > 0 OR instr(data, '\"parent\":') > 0)",
            (cutoff, *PRUNABLE_TYPES)).fetchall()
        sessions = {session for _, session, _ in found}
        live = referenced(row for row in self._db.execute(
            "SELECT session, data FROM events WHERE type = 'model_request' AND ts >= ?", (cutoff,))
            if row[0] in sessions) if sessions else {}
        changed = []
        for row_id, session, data in found:
            try:
                event = pruned(orjson.loads(data), live.get(session, ()))
            except orjson.JSONDecodeError:  # one damaged (or planted) row must not stop retention for the file
                continue
            if event is not None:
                changed.append((orjson.dumps(event).decode(), row_id))
        if changed:  # one transaction (the connection is in autocommit mode)
            self._db.execute("BEGIN IMMEDIATE")
            try:
                self._db.executemany("UPDATE events SET data = ? WHERE id = ?", changed)
                self._db.execute("COMMIT")
            except BaseException:
                self._db.execute("ROLLBACK")
                raise
        return len(changed)

    flush = commit  # the name callers used when writes went through a writer thread

    def _write(self, rows: list[Row]) -> None:
        db = self._db
        sessions = [r for r in rows if r[2] in _SESSION_EVENTS]
        try:
            if len(rows) <= _MOST_ROWS and not sessions:  # the usual batch: one statement, its own transaction
                self._note(rows, db.execute(_insert(len(rows)), [v for row in rows for v in row]).lastrowid)
                return
            db.execute("BEGIN IMMEDIATE")
            try:
                for i in range(0, len(rows), _MOST_ROWS):
                    part = rows[i: i + _MOST_ROWS]
                    self._note(part, db.execute(_insert(len(part)), [v for row in part for v in row]).lastrowid)
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
            raise

    def _note(self, rows: list[Row], last: int | None) -> None:
        """Remember the last row id written for each session (one INSERT numbers its rows consecutively)."""
        if last is None:
            return
        first = last - len(rows) + 1
        for i, row in enumerate(rows):
            self.committed[row[0]] = first + i

    # ------------------------------------------------------------------ reading

    @_explained
    def rows(self, session: str, after: int = 0, other_than: str = "\0") -> list[tuple[int, Event]]:
        """`(id, event)` for the stored events of `session` after id `after` (leaving out those appended by
        writer `other_than`), oldest first. A row that cannot be decoded (a newer shou's, damage) is skipped.
        """
        self.commit()
        cur = self._db.execute("SELECT id, data FROM events WHERE session = ? AND id > ? AND writer != ? ORDER BY id",
                               (session, after, other_than))
        return decoded(cur.fetchall())

    @_explained
    def run_rows(self, session: str, run_id: str, after: int = 0) -> list[tuple[int, Event]]:
        """`(id, event)` of run `run_id` and its sub-runs (`RUN.N...`) in `session`, after id `after`."""
        self.commit()
        cur = self._db.execute("SELECT id, data FROM events WHERE session = ? AND id > ? AND (run_id = ? OR "
                               "substr(run_id, 1, ?) = ?) ORDER BY id",
                               (session, after, run_id, len(run_id) + 1, run_id + "."))
        return decoded(cur.fetchall())

    @_explained
    def run_end(self, session: str, run_id: str) -> list[tuple[int, Event]]:
        """`(id, event)` of the `run_finished` rows of run `run_id` itself (not its sub-runs) in `session`:
        what a poll of a running run needs, without reading all its events."""
        self.commit()
        cur = self._db.execute("SELECT id, data FROM events WHERE session = ? AND run_id = ? AND "
                               "type = 'run_finished' ORDER BY id", (session, run_id))
        return decoded(cur.fetchall())

    @_explained
    def delete(self, session: str) -> None:
        """Remove `session` and all its events."""
        self.commit()
        with self._lock:
            self._db.execute("BEGIN IMMEDIATE")
            try:
                self._db.execute("DELETE FROM events WHERE session = ?", (session,))
                self._db.execute("DELETE FROM sessions WHERE name = ?", (session,))
                self._db.execute("COMMIT")
            except BaseException:
                self._db.execute("ROLLBACK")
                raise

    @_explained
    def fork(self, source: str, target: str, through: int, closing: Sequence[Event] = (), status: str = "") -> None:
        """Make session `target` from `source`'s events up to row id `through`, then `closing`, in one
        transaction; `source` is only read. Copied rows keep their time and are written by `fork:SOURCE` (what
        was spent is counted once, in the source). `UserError` when `target` exists already."""
        self.commit()
        now = time.time()
        title = self._db.execute("SELECT title FROM sessions WHERE name = ?", (source,)).fetchone()
        with self._lock:
            self._db.execute("BEGIN IMMEDIATE")
            try:
                if self._db.execute("SELECT 1 FROM sessions WHERE name = ? UNION ALL SELECT 1 FROM events WHERE "
                                    "session = ? LIMIT 1", (target, target)).fetchone() is not None:
                    raise SessionExists(f"session {target!r} exists already; give the fork another name")
                self._db.execute("INSERT INTO sessions(name, created, updated, title, status) VALUES (?, ?, ?, ?, ?)",
                                 (target, now, now, title[0] if title else "", status))
                self._db.execute("INSERT INTO events(session, run_id, type, ts, data, writer) SELECT ?, run_id, "
                                 "type, ts, data, ? FROM events WHERE session = ? AND id <= ? ORDER BY id",
                                 (target, FORK_WRITER + source, source, through))
                for event in closing:
                    self._db.execute(_insert(1), (target, event.run_id, event.type, now,
                                                  orjson.dumps(event.to_dict()).decode(), FORK_WRITER + source))
                self._db.execute("COMMIT")
            except BaseException:
                self._db.execute("ROLLBACK")
                raise

    @_explained
    def sessions(self) -> list[SessionInfo]:
        """All sessions, most recently updated first."""
        self.commit()
        rows = self._db.execute(
            "SELECT s.name, s.created, s.updated, s.title, "
            "(SELECT COUNT(*) FROM events e WHERE e.session = s.name AND e.type = 'run_started'), s.status "
            "FROM sessions s ORDER BY s.updated DESC"
        ).fetchall()
        return [SessionInfo(*r) for r in rows]

    @_explained
    def unfinished(self) -> list[str]:
        """Sessions whose last run never finished (killed, running now, or waiting for approvals), newest first."""
        self.commit()
        rows = self._db.execute("SELECT name FROM sessions WHERE status IN "
                                "('running', 'waiting_approval', 'waiting_input') "
                                "ORDER BY updated DESC")
        return [name for (name,) in rows]

    @_explained
    def exists(self, session: str) -> bool:
        """Whether `session` has any stored event."""
        self.commit()
        return self._db.execute("SELECT 1 FROM sessions WHERE name = ?", (session,)).fetchone() is not None

    # ------------------------------------------------------------------ locks

    def lock(self, session: str) -> SessionLock:
        """Take the session for this process; `SessionBusy` when another process (or another holder in this
        one) has it."""
        if self._locks is None:
            where = self.path.with_name(self.path.name + ".locks")
            try:
                self._locks = LockFile(where)
            except OSError as e:
                raise unwritable(where, e) from None
        return self._locks.take(session)

    def is_locked(self, session: str) -> bool:
        """Whether some process holds `session` now (asked without writing, when the store is read-only)."""
        if self.readonly:
            return held(self.path.with_name(self.path.name + ".locks"), session)
        return super().is_locked(session)

    def close(self) -> None:
        """Commit and close the connection. Rows that cannot be written now (a full disk) are given up, as a
        killed process would leave them: what they announce never happened, and `shou resume` goes on from
        the log."""
        try:
            self.commit()
        except StoreUnusable as e:
            _log.info("%s: %d events were not written", e, len(self._buffer))
            self._buffer = []
        finally:
            self._db.close()
            if self._locks is not None:
                self._locks.close()
