"""Opening the session store's SQLite file: its schema, to write (WAL mode, migrated, checked), or only to read.

A reader never changes the file (`shou sessions`, `show`, `trace` on a read-only mount or a full disk): when
SQLite cannot make the shared-memory file a WAL reader needs, and the WAL holds nothing, the file alone is
the whole store and is opened as immutable.
"""

from __future__ import annotations

import sqlite3
import time
from pathlib import Path

from .migrate import Migration, migrate
from .sqlite_errors import READ_BLOCKED, StoreDamaged, code_of, quick_check, read_only_uri

CACHE_KIB = 256  # the page cache of a connection that writes the log (SQLite's default: 2,000 KiB)
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
        "004_meta",
        [
            # Facts about the file itself, such as when retention last ran.
            "CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT NOT NULL)",
        ],
    ),
]


def behind(db: sqlite3.Connection) -> bool:
    """Whether the file's schema predates this shou's (it needs `open_to_write` to be migrated)."""
    return int(db.execute("PRAGMA user_version").fetchone()[0]) < len(MIGRATIONS)


def open_to_write(path: Path, check: bool = False) -> sqlite3.Connection:
    """`path` in WAL mode, its schema up to date; with `check`, SQLite's `quick_check` first (`StoreDamaged`)."""
    db = sqlite3.connect(path, isolation_level=None, check_same_thread=False, timeout=10.0)
    try:
        deadline = time.monotonic() + 10.0
        while True:  # switching a new file to WAL takes it whole, without waiting: processes opening it together
            try:
                db.execute("PRAGMA journal_mode=WAL")
                break
            except sqlite3.OperationalError as e:
                if "locked" not in str(e) or time.monotonic() > deadline:
                    raise
                time.sleep(0.02)
        db.execute("PRAGMA synchronous=NORMAL")
        # The log is appended to and read mostly at its end: the pages a write touches are the last of the table
        # and of its index. SQLite's default cache (2 MB a connection) filled with pages written once and not
        # read again, the memory a process running many sessions holds (issue 35); the OS caches the file anyway.
        db.execute(f"PRAGMA cache_size=-{CACHE_KIB}")
        db.execute("PRAGMA busy_timeout=10000")
        db.execute("SELECT COUNT(*) FROM sqlite_master").fetchone()  # reads the header: a damaged file fails here
        if check and (problem := quick_check(db)) is not None:
            raise StoreDamaged(path, problem)
        migrate(db, MIGRATIONS)
    except BaseException:
        db.close()
        raise
    return db


def open_to_read(path: Path) -> sqlite3.Connection:
    """`path` opened to read only (nothing is created, migrated or pruned)."""
    try:
        return _read_connection(path, immutable=False)
    except sqlite3.OperationalError as e:
        # Readers of a WAL file need its shared-memory file, which a read-only folder or a full disk cannot
        # give; with nothing in the WAL the file alone is the whole store, and no one is writing it there.
        if code_of(e) not in READ_BLOCKED or not _empty(Path(f"{path}-wal")):
            raise
        return _read_connection(path, immutable=True)


def _read_connection(path: Path, immutable: bool) -> sqlite3.Connection:
    db = sqlite3.connect(read_only_uri(path, immutable), uri=True, isolation_level=None,
                         check_same_thread=False, timeout=10.0)
    try:
        db.execute("PRAGMA busy_timeout=10000")
        db.execute("SELECT COUNT(*) FROM sqlite_master").fetchone()  # reads the header: damage fails here
    except BaseException:
        db.close()
        raise
    return db


def _empty(path: Path) -> bool:
    """Whether `path` holds nothing (or is not there)."""
    try:
        return path.stat().st_size == 0
    except FileNotFoundError:
        return True
