"""The session store: every event of every run, appended to a SQLite file in WAL mode.

Writes are buffered and handed, at the end of each step and run, to a writer thread with its own
connection, so the event loop never waits on a commit and many sessions share one writer without a lock
on the hot path. `flush()` waits until everything appended is committed (a run does it when it ends), so
a crash loses at most the step in flight. The schema grows through named migrations recorded in
`PRAGMA user_version`.
"""

from __future__ import annotations

import json
import queue
import sqlite3
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from ..events import Event, event_from_dict
from .migrate import Migration, migrate

try:  # orjson is several times faster than json on the hot path; the stored text is the same JSON
    import orjson

    def _dumps(data: dict) -> str:
        return orjson.dumps(data).decode()
except ImportError:  # pragma: no cover - orjson is a dependency; this keeps a broken install working
    def _dumps(data: dict) -> str:
        return json.dumps(data, ensure_ascii=False)

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
]

# Event types after which the buffer is committed: the end of each step and run, so a crash loses at most
# the step in flight (whose calls a resumed session reports as interrupted), never a finished one.
_COMMIT_AFTER = frozenset({"step_finished", "run_finished", "history_cleared", "compacted"})


@dataclass(frozen=True, slots=True)
class SessionInfo:
    """A row of `shou sessions`."""

    name: str
    created: float
    updated: float
    title: str
    runs: int


class SQLiteStore:
    """Append-only event log in one SQLite file (created with its folder on first use)."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._db = self._connect()  # reads and migrations, on the caller's thread
        migrate(self._db, MIGRATIONS)
        self._buffer: list[tuple[str, str, str, float, str]] = []
        self._known: set[str] = set()
        self._titles: dict[str, str] = {}
        self._jobs: queue.Queue[list[tuple[str, str, str, float, str]] | None] = queue.Queue()
        self._writer: threading.Thread | None = None
        self._error: BaseException | None = None

    def _connect(self) -> sqlite3.Connection:
        db = sqlite3.connect(self.path, isolation_level=None, check_same_thread=False, timeout=10.0)
        db.execute("PRAGMA journal_mode=WAL")
        db.execute("PRAGMA synchronous=NORMAL")
        db.execute("PRAGMA busy_timeout=10000")
        return db

    @classmethod
    def for_workspace(cls, workspace: str | Path) -> SQLiteStore:
        """The store at `<workspace>/.shou/shou.db` (never through a symlink)."""
        from ..workspace import state_database

        return cls(state_database(Path(workspace), "shou.db"))

    def append(self, session: str, event: Event) -> None:
        """Add an event to `session`'s log (committed at the next step boundary)."""
        data = event.to_dict()
        if event.type == "run_started" and session not in self._titles:
            self._titles[session] = data["task"][:200]
        self._buffer.append((session, event.run_id, event.type, time.time(), _dumps(data)))
        if event.type in _COMMIT_AFTER or len(self._buffer) >= 512:
            self._submit()

    def _submit(self) -> None:
        """Hand the buffer to the writer thread (started on first use); never blocks."""
        if not self._buffer:
            return
        rows, self._buffer = self._buffer, []
        if self._writer is None:
            self._writer = threading.Thread(target=self._write_loop, daemon=True, name="shou-store-writer")
            self._writer.start()
        self._jobs.put(rows)

    def flush(self) -> None:
        """Wait until every appended event is committed; re-raises a write error."""
        self._submit()
        if self._writer is not None:
            self._jobs.join()
        if self._error is not None:
            error, self._error = self._error, None
            raise error

    def _write_loop(self) -> None:
        db = self._connect()
        while True:
            rows = self._jobs.get()
            try:
                if rows is None:
                    db.close()
                    return
                self._write(db, rows)
            except BaseException as e:  # reported by the next flush(), on the caller's thread
                self._error = e
            finally:
                self._jobs.task_done()

    def _write(self, db: sqlite3.Connection, rows: list[tuple[str, str, str, float, str]]) -> None:
        now = rows[-1][3]
        db.execute("BEGIN IMMEDIATE")
        try:
            # The sessions row is written when a session first appears and touched when a run ends;
            # every other batch is one executemany.
            for name in {r[0] for r in rows if r[0] not in self._known or r[2] == "run_finished"}:
                title = self._titles.get(name, "")
                db.execute(
                    "INSERT INTO sessions(name, created, updated, title) VALUES (?, ?, ?, ?) "
                    "ON CONFLICT(name) DO UPDATE SET updated = excluded.updated, "
                    "title = CASE WHEN sessions.title = '' THEN excluded.title ELSE sessions.title END",
                    (name, now, now, title),
                )
                self._known.add(name)
            db.executemany("INSERT INTO events(session, run_id, type, ts, data) VALUES (?, ?, ?, ?, ?)", rows)
            db.execute("COMMIT")
        except BaseException:
            db.execute("ROLLBACK")
            raise

    def events(self, session: str) -> Iterator[Event]:
        """Every stored event of `session`, oldest first."""
        self.flush()
        cur = self._db.execute("SELECT data FROM events WHERE session = ? ORDER BY id", (session,))
        for (data,) in cur:
            yield event_from_dict(json.loads(data))

    def sessions(self) -> list[SessionInfo]:
        """All sessions, most recently updated first."""
        self.flush()
        rows = self._db.execute(
            "SELECT s.name, s.created, s.updated, s.title, "
            "(SELECT COUNT(*) FROM events e WHERE e.session = s.name AND e.type = 'run_started') "
            "FROM sessions s ORDER BY s.updated DESC"
        ).fetchall()
        return [SessionInfo(*r) for r in rows]

    def exists(self, session: str) -> bool:
        """Whether `session` has any stored event."""
        self.flush()
        return self._db.execute("SELECT 1 FROM sessions WHERE name = ?", (session,)).fetchone() is not None

    def close(self) -> None:
        """Flush, stop the writer and close the connections."""
        try:
            self.flush()
        finally:
            if self._writer is not None:
                self._jobs.put(None)
                self._writer.join(timeout=10)
                self._writer = None
            self._db.close()

    def __enter__(self) -> SQLiteStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
