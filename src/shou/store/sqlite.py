"""The session store: every event of every run, appended to a SQLite file in WAL mode.

Writes are buffered and committed at step boundaries (a model response, a finished tool call, the end
of a step or run), so a crash loses at most the in-flight part of a step while text deltas do not each
cost a commit. The schema grows through named migrations recorded in `PRAGMA user_version`.
"""

from __future__ import annotations

import json
import sqlite3
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from ..events import Event, event_from_dict

MIGRATIONS: list[tuple[str, str]] = [
    (
        "001_sessions_and_events",
        """
        CREATE TABLE sessions (
            name TEXT PRIMARY KEY,
            created REAL NOT NULL,
            updated REAL NOT NULL,
            title TEXT NOT NULL DEFAULT ''
        );
        CREATE TABLE events (
            id INTEGER PRIMARY KEY AUTOINCREMENT,
            session TEXT NOT NULL REFERENCES sessions(name),
            run_id TEXT NOT NULL,
            type TEXT NOT NULL,
            ts REAL NOT NULL,
            data TEXT NOT NULL
        );
        CREATE INDEX events_by_session ON events(session, id);
        """,
    ),
]

# Event types after which the buffer is committed: everything a resumed session needs is durable.
_COMMIT_AFTER = frozenset(
    {"run_started", "model_response", "tool_call_finished", "step_finished", "run_finished", "history_cleared"}
)


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
        self._db = sqlite3.connect(self.path, isolation_level=None, check_same_thread=False, timeout=10.0)
        self._db.execute("PRAGMA journal_mode=WAL")
        self._db.execute("PRAGMA synchronous=NORMAL")
        self._db.execute("PRAGMA busy_timeout=10000")
        self._migrate()
        self._buffer: list[tuple[str, str, str, float, str]] = []
        self._known: set[str] = set()
        self._titles: dict[str, str] = {}

    @classmethod
    def for_workspace(cls, workspace: str | Path) -> SQLiteStore:
        """The store at `<workspace>/.shou/shou.db`."""
        return cls(Path(workspace) / ".shou" / "shou.db")

    def _migrate(self) -> None:
        version = self._db.execute("PRAGMA user_version").fetchone()[0]
        for number, (_name, sql) in enumerate(MIGRATIONS, start=1):
            if number <= version:
                continue
            self._db.execute("BEGIN IMMEDIATE")
            try:
                # Another process may have migrated while we waited for the lock.
                if self._db.execute("PRAGMA user_version").fetchone()[0] >= number:
                    self._db.execute("COMMIT")
                    continue
                for statement in sql.split(";"):
                    if statement.strip():
                        self._db.execute(statement)
                self._db.execute(f"PRAGMA user_version = {number}")
                self._db.execute("COMMIT")
            except BaseException:
                self._db.execute("ROLLBACK")
                raise

    def append(self, session: str, event: Event) -> None:
        """Add an event to `session`'s log (committed at the next step boundary)."""
        data = event.to_dict()
        if event.type == "run_started" and session not in self._titles:
            self._titles[session] = data["task"][:200]
        self._buffer.append((session, event.run_id, event.type, time.time(), json.dumps(data, ensure_ascii=False)))
        if event.type in _COMMIT_AFTER or len(self._buffer) >= 512:
            self.flush()

    def flush(self) -> None:
        """Commit buffered events."""
        if not self._buffer:
            return
        rows, self._buffer = self._buffer, []
        now = rows[-1][3]
        self._db.execute("BEGIN IMMEDIATE")
        try:
            for name in {r[0] for r in rows}:
                title = self._titles.get(name, "")
                if name not in self._known:
                    self._db.execute(
                        "INSERT INTO sessions(name, created, updated, title) VALUES (?, ?, ?, ?) "
                        "ON CONFLICT(name) DO UPDATE SET updated = excluded.updated, "
                        "title = CASE WHEN sessions.title = '' THEN excluded.title ELSE sessions.title END",
                        (name, now, now, title),
                    )
                    self._known.add(name)
                else:
                    self._db.execute(
                        "UPDATE sessions SET updated = ?, title = CASE WHEN title = '' THEN ? ELSE title END "
                        "WHERE name = ?", (now, title, name),
                    )
            self._db.executemany("INSERT INTO events(session, run_id, type, ts, data) VALUES (?, ?, ?, ?, ?)", rows)
            self._db.execute("COMMIT")
        except BaseException:
            self._db.execute("ROLLBACK")
            self._buffer = rows + self._buffer
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
        """Flush and close the connection."""
        try:
            self.flush()
        finally:
            self._db.close()

    def __enter__(self) -> SQLiteStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
