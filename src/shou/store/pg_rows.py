"""How a commit's rows reach PostgreSQL's event log: the usual batch in one statement (one round trip, which
inserts and notifies atomically), a batch that starts or ends a run in one transaction that also records the
session. Both skip the rows an earlier commit landed though its answer was lost (each row's `uid`), and learn
those rows' ids all the same.
"""

from __future__ import annotations

import functools
from typing import Any

import orjson

from . import sqlite
from .basics import _SESSION_EVENTS

NOTIFY_CHANNEL = "shou_events"
PgRow = tuple[str, str, str, float, str, str, str]  # session, run_id, type, ts, data, writer, uid
COLUMNS = "session, run_id, type, ts, data, writer, uid"
_UPSERT_SESSION = sqlite._UPSERT_SESSION.replace("?", "%s")  # the same statement, psycopg's placeholders
MOST_ROWS = 5000  # in one statement, which takes at most 65,535 parameters (7 a row); a larger batch: one transaction


@functools.lru_cache(maxsize=64)
def _insert_and_notify(n: int) -> str:
    values = ",".join(["(%s, %s, %s, %s, %s, %s, %s)"] * n)
    return (f"WITH added AS (INSERT INTO events({COLUMNS}) VALUES {values} ON CONFLICT (uid) DO NOTHING "
            f"RETURNING session, id) SELECT session, max(id), count(*), pg_notify('{NOTIFY_CHANNEL}', session) "
            "FROM added GROUP BY session")


def text(value: str) -> str:
    """PostgreSQL text holds no NUL character (JSON escapes it; names and titles are stored raw)."""
    return value.replace("\x00", "\ufffd") if "\x00" in value else value


def write_rows(db: Any, rows: list[PgRow], committed: dict[str, int]) -> None:
    """Write `rows` on connection `db`; `committed` learns each session's last row id."""
    if not rows:  # every row was of a session whose lock went with the connection (filtered on the retry)
        return
    if len(rows) <= MOST_ROWS and not any(r[2] in _SESSION_EVENTS for r in rows):
        found = db.execute(_insert_and_notify(len(rows)), [v for row in rows for v in row]).fetchall()
        committed.update((session, last) for session, last, _, _ in found)
        if sum(count for _, _, count, _ in found) < len(rows):
            _note_landed(db, rows, committed)
        return
    written = 0
    seen: dict[str, int] = {}  # learned once the transaction committed: a rolled-back one wrote none of them
    with db.transaction():
        with db.cursor() as cur:
            cur.executemany(f"INSERT INTO events({COLUMNS}) VALUES (%s, %s, %s, %s, %s, %s, %s) "
                            "ON CONFLICT (uid) DO NOTHING RETURNING session, id", rows, returning=True)
            while True:
                for session, last in cur.fetchall():
                    seen[session] = max(last, seen.get(session, 0))
                    written += 1
                if not cur.nextset():
                    break
        for session, _, kind, ts, data, _, _ in rows:
            if kind not in _SESSION_EVENTS:
                continue
            event = orjson.loads(data)
            title = text(str(event.get("task", ""))[:200]) if kind == "run_started" else ""
            status = {"run_started": "running", "run_resumed": "running"}.get(kind) or (
                text(str(event.get("status", ""))) if kind == "run_finished" else "")
            db.execute(_UPSERT_SESSION, (session, ts, ts, title, status))
        for session in {r[0] for r in rows}:
            db.execute("SELECT pg_notify(%s, %s)", (NOTIFY_CHANNEL, session[:7000]))
    for session, last in seen.items():
        committed[session] = max(last, committed.get(session, 0))
    if written < len(rows):
        _note_landed(db, rows, committed)


def _note_landed(db: Any, rows: list[PgRow], committed: dict[str, int]) -> None:
    """Learn the ids of `rows` that an earlier commit landed though its answer was lost (skipped now by their
    `uid`): `committed` is what streams are told is stored, so it must not stay behind them."""
    found = db.execute("SELECT session, max(id) FROM events WHERE uid = ANY(%s) GROUP BY session",
                       ([r[6] for r in rows],)).fetchall()
    for session, last in found:
        committed[session] = max(last, committed.get(session, 0))
