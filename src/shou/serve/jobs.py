"""The run queue of `shou serve`: who asked for which run, its status, and which replica holds it.

One table (`serve_runs`) in the store's database, SQLite or PostgreSQL. A replica takes a run by setting
itself as its holder with a lease (`lease_until`), renewed by its heartbeat; a run whose lease ran out
(its replica died) is taken again by another, which resumes it from the event log. On PostgreSQL the
claim is `SELECT ... FOR UPDATE SKIP LOCKED`, so replicas never block each other or take the same run;
SQLite's writes are serialized anyway (`BEGIN IMMEDIATE`). Sessions belong to the user who made them
(`serve_sessions`), under names of that user's own (shou.serve.names).
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import hmac
import sqlite3
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any, TypeVar

import orjson

from ..errors import UserError
from ..events import WAITING
from .names import shown_name
from .owners import SessionOwners
from .typed import typed_output

T = TypeVar("T")
ACTIVE = ("queued", "running")
_COLUMNS = ("run_id, username, session, task, options, status, answer, error, usage, created, finished, replica, "
            "lease_until, cancel, kind")
_TABLES = [
    """CREATE TABLE IF NOT EXISTS serve_runs (
        run_id TEXT PRIMARY KEY, username TEXT NOT NULL, session TEXT NOT NULL, task TEXT NOT NULL,
        options TEXT NOT NULL DEFAULT '{}', status TEXT NOT NULL, answer TEXT NOT NULL DEFAULT '',
        error TEXT NOT NULL DEFAULT '', usage TEXT NOT NULL DEFAULT '{}', created DOUBLE PRECISION NOT NULL,
        finished DOUBLE PRECISION NOT NULL DEFAULT 0, replica TEXT NOT NULL DEFAULT '',
        lease_until DOUBLE PRECISION NOT NULL DEFAULT 0, cancel INTEGER NOT NULL DEFAULT 0,
        kind TEXT NOT NULL DEFAULT 'start', sig TEXT NOT NULL DEFAULT '')""",
    "CREATE INDEX IF NOT EXISTS serve_runs_by_status ON serve_runs(status, created)",
    "CREATE INDEX IF NOT EXISTS serve_runs_by_user ON serve_runs(username, created)",
    "CREATE INDEX IF NOT EXISTS serve_runs_by_session ON serve_runs(session)",
    "CREATE TABLE IF NOT EXISTS serve_sessions (name TEXT PRIMARY KEY, username TEXT NOT NULL)",
]


class Refused(UserError):
    """A request the queue turns down: `status` is the HTTP status to answer with."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


@dataclass(frozen=True, slots=True)
class Job:
    """A row of the queue."""

    run_id: str
    user: str
    session: str
    task: str
    options: dict[str, Any]
    status: str
    answer: str
    error: str
    usage: dict[str, Any]
    created: float
    finished: float
    replica: str
    lease_until: float
    cancel: bool
    kind: str

    def public(self) -> dict[str, Any]:
        """The run as the API shows it."""
        return {"run_id": self.run_id, "session": shown_name(self.user, self.session),  # the user's own name
                "task": self.task, "status": self.status,
                "answer": self.answer, "output": typed_output(self.options, self.status, self.answer),
                "error": self.error or None,
                "usage": self.usage or {"input_tokens": 0, "output_tokens": 0, "requests": 0, "cost": 0.0},
                "created": self.created,
                "finished": self.finished or None}


def _job(row: tuple[Any, ...]) -> Job:
    r = list(row)
    r[4] = orjson.loads(r[4] or "{}")
    r[8] = orjson.loads(r[8] or "{}")
    r[13] = bool(r[13])
    return Job(*r)


def _retried(method: Callable[..., T]) -> Callable[..., T]:
    """Run `method` once more when the database connection broke under it (it is safe to repeat)."""
    @functools.wraps(method)
    def wrapper(self: RunQueue, *args: Any, **kwargs: Any) -> T:
        from ..store.pg_link import is_connection_error

        try:
            return method(self, *args, **kwargs)
        except Exception as e:
            if not is_connection_error(e):
                raise
            return method(self, *args, **kwargs)

    return wrapper


def _clean(text: str) -> str:
    """No NUL: PostgreSQL text cannot hold it (a model may still answer with one)."""
    return text.replace("\x00", "\ufffd")


class RunQueue(SessionOwners):
    """The queue on a DB-API connection: `sqlite3` (a file) or psycopg (PostgreSQL)."""

    def __init__(self, conn: Any, postgres: bool, key: bytes | None = None) -> None:
        # With `key`, every run is signed when asked for and taken only when its signature holds: a queue in
        # a file inside the workspace could have come with it (a cloned repository), and its runs would
        # otherwise start as soon as the server does.
        self._key = key
        self._link = conn if postgres else None  # a Link: reopened after the server drops it
        self._sqlite = None if postgres else conn
        self._cur: Any = None
        self.postgres = postgres
        self._lock = threading.RLock()
        with self._tx():
            if postgres:  # replicas starting together create the tables once
                self._x("SELECT pg_advisory_xact_lock(%s)", (0x5340_0002,))
            for statement in _TABLES:
                self._x(statement)
            self._add_owner_columns()

    @classmethod
    def open(cls, store: Any) -> RunQueue:
        """A queue in the same database as `store` (its own connection)."""
        url = getattr(store, "url", None)
        if url:
            from ..store.pg_link import Link

            return cls(Link(url), postgres=True)
        from ..agent.approvals import _key

        conn = sqlite3.connect(store.path, isolation_level=None, check_same_thread=False, timeout=10.0)
        conn.execute("PRAGMA busy_timeout=10000")
        return cls(conn, postgres=False, key=_key())

    # ------------------------------------------------------------------ plumbing

    def _x(self, sql: str, params: tuple[Any, ...] = ()) -> Any:
        if not self.postgres:
            sql = sql.replace("%s", "?").replace(" FOR UPDATE SKIP LOCKED", "").replace(" FOR UPDATE", "")
        return self._cur.execute(sql, params)

    @contextlib.contextmanager
    def _tx(self, write: bool = True) -> Iterator[None]:
        """One transaction (a plain read when not `write`); on PostgreSQL a broken connection is dropped, so
        the next call opens another."""
        with self._lock:
            if self._link is not None:
                from ..store.pg_link import is_connection_error

                try:
                    with self._link.lock:
                        self._cur = self._link._get()
                        if write:
                            with self._cur.transaction():
                                yield
                        else:
                            yield
                except Exception as e:
                    if is_connection_error(e):
                        self._link.discard()
                    raise
                return
            self._cur = self._sqlite
            if not write:
                yield
                return
            self._cur.execute("BEGIN IMMEDIATE")
            try:
                yield
            except BaseException:
                self._cur.execute("ROLLBACK")
                raise
            self._cur.execute("COMMIT")

    def _one(self, where: str, params: tuple[Any, ...]) -> Job | None:
        row = self._x(f"SELECT {_COLUMNS} FROM serve_runs WHERE {where}", params).fetchone()
        return _job(row) if row is not None else None

    # ------------------------------------------------------------------ asking for runs

    def submit(self, run_id: str, user: str, session: str, task: str, options: dict[str, Any], *,
               replica: str = "", lease: float = 15.0, max_active: int | None = None, kind: str = "start") -> Job:
        """Queue a run (held by `replica` at once when given). `Refused`: the session is another user's (404),
        runs already (409), or the user has `max_active` runs queued or running (429)."""
        now = time.time()
        with self._tx():
            if self.postgres:  # two submissions of one user are counted one after the other
                self._x("SELECT pg_advisory_xact_lock(hashtextextended(%s, 1))", (user,))
            # the row locked: a delete of the session (owners.begin_delete) comes wholly before or after this
            owner = self._x("SELECT username, deleting FROM serve_sessions WHERE name = %s FOR UPDATE",
                            (session,)).fetchone()
            name = shown_name(user, session)  # the caller's own name, in every refusal
            if owner is not None and owner[0] != user:
                raise Refused(404, f"no session {name!r}")
            if owner is not None and owner[1]:
                raise Refused(409, f"session {name!r} is being deleted")
            if owner is None:
                self._x("INSERT INTO serve_sessions(name, username, sid) VALUES (%s, %s, %s)",
                        (session, user, uuid.uuid4().hex))
            busy = self._x("SELECT run_id FROM serve_runs WHERE session = %s AND status IN "
                           "('queued', 'running', 'waiting_approval', 'waiting_input')", (session,)).fetchone()
            if busy is not None:
                raise Refused(409, f"session {name!r} has a run under way ({busy[0]}); wait for it or cancel it")
            if max_active is not None:
                (count,) = self._x("SELECT COUNT(*) FROM serve_runs WHERE username = %s AND status IN "
                                   "('queued', 'running', 'waiting_approval', 'waiting_input')", (user,)).fetchone()
                if count >= max_active:
                    raise Refused(429, f"you have {count} runs queued, running or waiting for approval, the most "
                                       "allowed (max_runs_per_user); wait for one to finish")
            status = "running" if replica else "queued"
            text = orjson.dumps(options).decode()
            self._x(f"INSERT INTO serve_runs({_COLUMNS}, sig) VALUES (%s, %s, %s, %s, %s, %s, '', '', '{{}}', %s, 0, "
                    "%s, %s, 0, %s, %s)", (run_id, user, session, task, text, status, now, replica,
                                           now + lease if replica else 0.0, kind, self._sign(run_id, user, session,
                                                                                             task, text)))
            job = self._one("run_id = %s", (run_id,))
        assert job is not None
        return job

    def claim(self, replica: str, lease: float = 15.0) -> Job | None:
        """Take the oldest queued run, or one whose holder's lease ran out (to resume it)."""
        now = time.time()
        with self._tx():
            while True:
                job = self._one("status = 'queued' OR (status = 'running' AND lease_until < %s) "
                                "ORDER BY created LIMIT 1 FOR UPDATE SKIP LOCKED", (now,))
                if job is None:
                    return None
                if self._genuine(job.run_id):
                    break
                self._x("UPDATE serve_runs SET status = 'failed', finished = %s, error = 'not asked for through "
                        "this server: its signature does not hold (a queue that came with the workspace?)' "
                        "WHERE run_id = %s", (now, job.run_id))
            kind = "resume" if job.status == "running" else job.kind
            self._x("UPDATE serve_runs SET status = 'running', replica = %s, lease_until = %s, kind = %s "
                    "WHERE run_id = %s", (replica, now + lease, kind, job.run_id))
        return self.get(job.run_id)

    def _sign(self, run_id: str, user: str, session: str, task: str, options: str) -> str:
        if self._key is None:
            return ""
        message = "\x1e".join((run_id, user, session, task, options)).encode("utf-8", "surrogatepass")
        return hmac.new(self._key, message, hashlib.sha256).hexdigest()

    def _genuine(self, run_id: str) -> bool:
        if self._key is None:
            return True
        row = self._x("SELECT username, session, task, options, sig FROM serve_runs WHERE run_id = %s",
                      (run_id,)).fetchone()
        return row is not None and hmac.compare_digest(str(row[4]), self._sign(run_id, *map(str, row[:4])))

    @_retried
    def renew(self, replica: str, run_ids: list[str], lease: float = 15.0) -> dict[str, bool]:
        """Extend this replica's leases; returns run id -> cancel asked, for the runs it still holds."""
        if not run_ids:
            return {}
        now = time.time()
        marks = ", ".join(["%s"] * len(run_ids))
        with self._tx():
            self._x(f"UPDATE serve_runs SET lease_until = %s WHERE replica = %s AND status = 'running' AND run_id IN "
                    f"({marks})", (now + lease, replica, *run_ids))
            rows = self._x(f"SELECT run_id, cancel FROM serve_runs WHERE replica = %s AND status = 'running' AND "
                           f"run_id IN ({marks})", (replica, *run_ids)).fetchall()
        return {run_id: bool(cancel) for run_id, cancel in rows}

    @_retried
    def release(self, run_id: str, replica: str, retry_in: float = 1.0) -> None:
        """Give a run back to the queue (its session was busy): anyone may take it after `retry_in` seconds."""
        with self._tx():
            self._x("UPDATE serve_runs SET lease_until = %s WHERE run_id = %s AND replica = %s",
                    (time.time() + retry_in, run_id, replica))

    @_retried
    def finish(self, run_id: str, replica: str, status: str, answer: str = "", error: str = "",
               usage: dict[str, Any] | None = None) -> None:
        """Record how a run this replica holds ended (`waiting_approval`: it waits, held by nobody)."""
        with self._tx():
            self._x("UPDATE serve_runs SET status = %s, answer = %s, error = %s, usage = %s, finished = %s, "
                    "replica = '', lease_until = 0 WHERE run_id = %s AND (replica = %s OR status = 'queued')",
                    (_clean(status), _clean(answer), _clean(error or ""), orjson.dumps(usage or {}).decode(),
                     0.0 if status in WAITING else time.time(), run_id, replica))

    @_retried
    def close_waiting(self, run_id: str, status: str, answer: str = "", error: str = "",
                      usage: dict[str, Any] | None = None) -> None:
        """Record the end of a run the queue still shows waiting for approvals (its end is in the log)."""
        with self._tx():
            self._x("UPDATE serve_runs SET status = %s, answer = %s, error = %s, usage = %s, finished = %s "
                    "WHERE run_id = %s AND status IN ('waiting_approval', 'waiting_input')",
                    (_clean(status), _clean(answer), _clean(error), orjson.dumps(usage or {}).decode(), time.time(),
                     run_id))

    @_retried
    def hand_over(self, replica: str, run_ids: list[str]) -> None:
        """End this replica's leases on `run_ids` now, so another replica resumes them at once."""
        if not run_ids:
            return
        marks = ", ".join(["%s"] * len(run_ids))
        with self._tx():
            self._x(f"UPDATE serve_runs SET lease_until = 0 WHERE replica = %s AND status = 'running' AND "
                    f"run_id IN ({marks})", (replica, *run_ids))

    def waiting(self, older_than: float = 0.0, limit: int = 50) -> list[tuple[Job, int]]:
        """Runs waiting for approvals at least `older_than` seconds, with their session's last event id (it
        changes with every event, a decision included)."""
        cutoff = time.time() - older_than
        with self._tx(write=False):
            rows = self._x(f"SELECT {', '.join('r.' + c.strip() for c in _COLUMNS.split(','))}, "
                           "(SELECT MAX(e.id) FROM events e WHERE e.session = r.session) FROM serve_runs r "
                           "WHERE r.status IN ('waiting_approval', 'waiting_input') AND r.created < %s "
                           "ORDER BY r.created LIMIT %s",
                           (cutoff, limit)).fetchall()
        return [(_job(r[:-1]), r[-1]) for r in rows]

    def sessions(self, user: str, status: str | None = None, limit: int = 500) -> list[dict[str, Any]]:
        """`user`'s sessions, most recently updated first (read with the store's own table, in one query)."""
        where, params = ("o.username = %s AND s.status = %s", (user, status)) if status else (
            "o.username = %s", (user,))
        with self._tx(write=False):
            rows = self._x("SELECT s.name, s.title, s.status, (SELECT COUNT(*) FROM serve_runs r WHERE r.session = "
                           f"s.name), s.created, s.updated FROM sessions s JOIN serve_sessions o ON o.name = s.name "
                           f"WHERE {where} ORDER BY s.updated DESC LIMIT %s", (*params, limit)).fetchall()
        return [dict(zip(("name", "title", "status", "runs", "created", "updated"), r, strict=True)) for r in rows]

    @_retried
    def requeue(self, run_id: str) -> None:
        """Queue a waiting run again, to resume (its approvals were decided)."""
        with self._tx():
            self._x("UPDATE serve_runs SET status = 'queued', kind = 'resume', replica = '', lease_until = 0 "
                    "WHERE run_id = %s AND status IN ('waiting_approval', 'waiting_input')", (run_id,))

    @_retried
    def cancel(self, run_id: str) -> Job | None:
        """Ask for a run to stop: a queued one is cancelled now; a running one is stopped by its replica."""
        with self._tx():
            self._x("UPDATE serve_runs SET status = 'cancelled', finished = %s WHERE run_id = %s AND "
                    "status = 'queued' AND kind = 'start'", (time.time(), run_id))
            self._x("UPDATE serve_runs SET cancel = 1 WHERE run_id = %s", (run_id,))
            self._x("UPDATE serve_runs SET status = 'queued', kind = 'resume' WHERE run_id = %s AND "
                    # a replica closes it in the log as cancelled
                    "status IN ('waiting_approval', 'waiting_input')", (run_id,))
        return self.get(run_id)

    # ------------------------------------------------------------------ reading

    def get(self, run_id: str, user: str | None = None) -> Job | None:
        """The run (None when it does not exist or, given `user`, belongs to someone else)."""
        with self._tx(write=False):
            job = self._one("run_id = %s", (run_id,))
        return job if job is not None and (user is None or job.user == user) else None

    def runs(self, user: str, session: str | None = None, limit: int = 100) -> list[Job]:
        """`user`'s runs (of `session`), newest first."""
        where, params = ("username = %s AND session = %s", (user, session)) if session else ("username = %s", (user,))
        with self._tx(write=False):
            rows = self._x(f"SELECT {_COLUMNS} FROM serve_runs WHERE {where} ORDER BY created DESC LIMIT %s",
                           (*params, limit)).fetchall()
        return [_job(r) for r in rows]

    def close(self) -> None:
        """Close the connection."""
        with contextlib.suppress(Exception):
            (self._link or self._sqlite).close()
