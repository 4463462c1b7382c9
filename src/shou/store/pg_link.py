"""PostgreSQL plumbing shared by shou's stores: connecting, a connection that comes back, and migrations.

A server restart, a pooler or an idle timeout can close a connection under a long-running `shou serve`;
a `Link` notices (psycopg marks the connection broken) and the next use opens a fresh one, so a replica
recovers by itself instead of failing every request until it is restarted.
"""

from __future__ import annotations

import contextlib
import re
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any, TypeVar
from urllib.parse import unquote

from ..errors import UserError

T = TypeVar("T")
_MIGRATION_LOCK = 0x5340_0001  # pg_advisory_xact_lock key for schema changes
STATEMENT_TIMEOUT_MS = 30_000  # a statement stuck behind someone's lock fails instead of hanging a replica


class StoreUnavailable(UserError):
    """The database cannot be reached now (down, restarting, refusing connections)."""


# SQLSTATE classes psycopg calls OperationalError that fail the same way however often the statement is sent
# (54: program limit exceeded, such as a value too large for an index): the rows are refused, not delayed.
REFUSED_CLASSES = ("54",)


class StatementRefused(UserError):
    """The server refused a statement on a live connection for good (not a connection error: not retried, and
    a commit's rows are dropped rather than buffered for a next commit that would fail the same way)."""


class SessionLost(StoreUnavailable):
    """The connection that held a session's lock broke: another process may run the session now, so this one
    writes nothing more of it and its run stops before its next side effect (as a kill would stop it)."""


def connect(url: str, **kwargs: Any) -> Any:
    """An autocommit psycopg connection to `url`; a clear `UserError` when psycopg or the server is missing."""
    try:
        import psycopg
    except ImportError:
        raise UserError("a postgresql:// store needs psycopg: pip install 'shou[serve]'") from None
    try:
        return psycopg.connect(url, autocommit=True, **_settings(url, kwargs))
    except psycopg.Error as e:
        raise _unreachable(url, e) from None


def _unreachable(url: str, error: Exception) -> StoreUnavailable:
    """The error saying `url` could not be connected to, without its password (psycopg's own text may quote
    the part of the URL it could not read)."""
    why = " ".join(str(error).split())
    for password in _passwords(url):
        for spelled in {password, unquote(password)} - {""}:  # as written, and as libpq read it
            why = why.replace(spelled, "***")
    return StoreUnavailable(f"cannot connect to PostgreSQL at {safe_url(url)}: {why}")


def _passwords(url: str) -> set[str]:
    """The secrets `url` spells: its user part's password, and every parameter whose name (as libpq decodes
    it: `pass%77ord` is `password`) holds "password" (`password`, `sslpassword`), in URL or key=value form."""
    found = {m.group(2).strip("'") for m in _PARAM.finditer(url) if _secret_name(m.group(1))}
    if "://" in url and "@" in url:
        cred = url.split("://", 1)[1].rsplit("@", 1)[0]
        if ":" in cred:
            found.add(cred.split(":", 1)[1])
    return found - {""}


def _secret_name(name: str) -> bool:
    return "password" in unquote(name).lower()


# a parameter: `name=value` after `?`, `&` or a space (or at the start); a key=value value may be quoted
_PARAM = re.compile(r"(?:(?<=[?&\s])|^)([\w%.-]+)\s*=\s*('(?:[^'\\]|\\.)*'|[^&\s]*)")


# How long a connection over TCP may go unanswered before it counts as broken. A network path that drops
# packets silently (a cable, a firewall's state table, a failover that moved the address) sends no reset: a
# statement sent would be retried for ~15 minutes, and an answer lost would be waited for forever, on the
# writer whose connection holds every session lock of the replica. Unix sockets ignore these.
TCP_SETTINGS = {"keepalives": "1", "keepalives_idle": "10", "keepalives_interval": "5", "keepalives_count": "3",
                "tcp_user_timeout": "30000"}


def _settings(url: str, kwargs: dict[str, Any]) -> dict[str, Any]:
    """The connection's settings: shou's defaults, under what the URL and the caller set themselves (a URL's
    `options` keeps its own and gains the statement timeout, unless it sets one)."""
    import psycopg
    from psycopg.conninfo import conninfo_to_dict

    try:
        url.encode("utf-8")
        given = {**conninfo_to_dict(url), **kwargs}
    except UnicodeEncodeError:  # bytes that are not UTF-8 (from argv): libpq could not be given them either
        raise StoreUnavailable(f"the PostgreSQL URL {safe_url(url)!a} is not valid UTF-8") from None
    except psycopg.Error as e:  # a malformed URL: the same clear error as a refused connection
        raise _unreachable(url, e) from None
    out = {k: v for k, v in {**TCP_SETTINGS, "connect_timeout": "10"}.items() if k not in given}
    out.update(kwargs)
    options = str(given.get("options") or "")
    if not _SETS_STATEMENT_TIMEOUT.search(options):
        out["options"] = f"{options} -c statement_timeout={STATEMENT_TIMEOUT_MS}".strip()
    return out


# `-c statement_timeout=...` or `--statement-timeout=...` among a connection's options: setting names are
# case-insensitive, and a dash may stand for an underscore
_SETS_STATEMENT_TIMEOUT = re.compile(r"(?:^|\s)(?:-c\s*|--)statement[-_]timeout\s*=", re.IGNORECASE)


def safe_url(url: str) -> str:
    """`url` without its passwords (in the user part, or a parameter naming one), for messages."""
    url = _PARAM.sub(lambda m: f"{m.group(1)}=***" if _secret_name(m.group(1)) else m.group(0), url)
    if "@" in url and "://" in url:
        scheme, rest = url.split("://", 1)
        cred, host = rest.rsplit("@", 1)
        return f"{scheme}://{cred.split(':', 1)[0]}@{host}"
    return url


def is_connection_error(error: BaseException) -> bool:
    """Whether `error` means the connection is gone (as opposed to a bad statement)."""
    if isinstance(error, StoreUnavailable):
        return True
    try:
        import psycopg
    except ImportError:
        return False
    return isinstance(error, psycopg.OperationalError)


class Link:
    """One connection, used by one thread at a time, reopened after it breaks. `on_reconnect(conn)` runs on
    each fresh connection but the first (to take back what the old one held, such as advisory locks)."""

    def __init__(self, url: str, on_reconnect: Callable[[Any], None] | None = None) -> None:
        self.url = url
        self.lock = threading.RLock()
        self.on_reconnect = on_reconnect
        self._conn: Any = None
        self._opened = 0

    @property
    def alive(self) -> bool:
        """Whether the connection is open and not broken (what it holds on the server, such as advisory locks,
        is still held)."""
        conn = self._conn
        return conn is not None and not conn.closed and not conn.broken

    def _get(self) -> Any:
        conn = self._conn
        if conn is None or conn.closed or conn.broken:
            conn = self._conn = connect(self.url)
            self._opened += 1
            if self._opened > 1 and self.on_reconnect is not None:
                self.on_reconnect(conn)
        return conn

    def run(self, work: Callable[[Any], T], retry: bool = True) -> T:
        """`work(connection)`; when the connection broke, once more on a fresh one if `retry` (only for work
        that is safe to repeat: reads, and writes that skip rows already written)."""
        with self.lock:
            conn = None
            try:
                conn = self._get()
                return work(conn)
            except Exception as e:
                if not is_connection_error(e):
                    raise
                if conn is not None and not (conn.closed or conn.broken):
                    # The statement failed, not the connection (the statement timeout, a deadlock's victim):
                    # psycopg calls both OperationalError. The connection and what it holds (session locks) stay.
                    if isinstance(e, StoreUnavailable):
                        raise
                    if (getattr(e, "sqlstate", None) or "").startswith(REFUSED_CLASSES):
                        raise StatementRefused(f"PostgreSQL at {safe_url(self.url)} refused a statement: "
                                               f"{' '.join(str(e).split())}") from None
                    raise StoreUnavailable(f"PostgreSQL at {safe_url(self.url)} did not carry out a statement: "
                                           f"{' '.join(str(e).split())}") from None
                self.discard()
                if not retry:
                    raise self._failed(e) from None
            try:
                return work(self._get())
            except Exception as e:  # the database went away during the retry (or was never back)
                if not is_connection_error(e):
                    raise
                raise self._failed(e) from None

    def _failed(self, error: Exception) -> StoreUnavailable:
        """`error`, a connection's failure, as shou's own: what faces show is one line, not psycopg's traceback."""
        if isinstance(error, StoreUnavailable):
            return error
        return StoreUnavailable(f"the connection to PostgreSQL at {safe_url(self.url)} failed: "
                                f"{' '.join(str(error).split())}")

    def execute(self, sql: str, params: Sequence[Any] = ()) -> list[tuple[Any, ...]]:
        """Run one statement and fetch its rows (none for a statement that returns nothing)."""
        def work(conn: Any) -> list[tuple[Any, ...]]:
            cur = conn.execute(sql, tuple(params))
            return cur.fetchall() if cur.description is not None else []

        return self.run(work)

    def discard(self) -> None:
        """Drop the connection (the next use opens another)."""
        conn, self._conn = self._conn, None
        if conn is not None:
            with contextlib.suppress(Exception):  # already gone
                conn.close()

    def close(self) -> None:
        with self.lock:
            self.discard()


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
