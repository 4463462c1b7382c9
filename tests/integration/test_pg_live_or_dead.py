"""How PostgreSQL's store tells a dead connection from a statement that failed on a live one (store/pg_link.py
`Link.run`): every way a connection dies loses the session locks it held, and a statement refused on a live
connection neither drops those locks nor stops every later commit. (An attacker's review of that change.)

Waits are on conditions of the server (`pg_terminate_backend` with a timeout waits for the process to end; a
backend gone from `pg_stat_activity`); `HANG` only turns a hang into a failure."""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator
from typing import Any

import pytest

from shou import Session
from shou.events import RunStarted, ToolCallFinished

from ..fixtures.pg_proxy import CuttingProxy
from ..fixtures.postgres import PostgresServer, pg_bindir
from .test_pg_group_outage import (
    HANG,
    pg,  # noqa: F401  (the fixture)
    waiting_writer,
)

psycopg = pytest.importorskip("psycopg")
pytestmark = pytest.mark.skipif(pg_bindir() is None, reason="PostgreSQL is not installed")

from shou.store.locks import SessionBusy  # noqa: E402
from shou.store.pg_link import StatementRefused  # noqa: E402
from shou.store.postgres import PostgresStore  # noqa: E402


def _writer_pid(store: PostgresStore) -> int:
    return store._writer._get().info.backend_pid


@contextlib.contextmanager
def held_session(url: str) -> Iterator[tuple[PostgresStore, Session]]:
    """A store on `url` holding session "held" (its lock on the store's writer connection) for the block."""
    store = PostgresStore(url)
    held = Session("held", store)
    held.acquire()
    try:
        yield store, held
    finally:
        held.release()
        store.close()


def _gone(url: str, pid: int) -> None:
    """Wait until the server process `pid` has ended (it was told to by a timeout of the server's own)."""
    deadline = time.monotonic() + HANG
    with psycopg.connect(url, autocommit=True) as watch:
        while watch.execute("SELECT 1 FROM pg_stat_activity WHERE pid = %s", (pid,)).fetchone():
            assert time.monotonic() < deadline, f"backend {pid} never ended"
            time.sleep(0.01)  # a condition of the server, polled: no event can tell us


def test_a_terminated_lock_connection_is_noticed(pg: PostgresServer) -> None:  # noqa: F811
    url = pg.database("term")
    with held_session(url) as (store, _):
        pid = _writer_pid(store)
        with psycopg.connect(url, autocommit=True) as admin:
            admin.execute("SELECT pg_terminate_backend(%s, %s)", (pid, int(HANG * 1000)))  # waits for its end
        assert store.lost() == {"held"}


def test_an_idle_session_timeout_on_the_lock_connection_is_noticed(pg: PostgresServer) -> None:  # noqa: F811
    url = pg.database("idle")
    with psycopg.connect(url, autocommit=True) as admin:
        admin.execute("ALTER DATABASE idle SET idle_session_timeout = '500ms'")
    with held_session(url) as (store, _):
        _gone(url, _writer_pid(store))  # the server ended the idle session
        assert store.lost() == {"held"}


def test_a_row_the_server_refuses_with_an_operational_error_does_not_stop_every_later_commit(
        pg: PostgresServer) -> None:  # noqa: F811
    # A run id too long for the btree index on events(run_id): ProgramLimitExceeded (54000), which psycopg
    # makes an OperationalError, raised on a live connection. The store's docstring: "rows the server refused
    # are dropped, so one bad row cannot stop every later commit of the process".
    import secrets

    url = pg.database("limit")
    store = PostgresStore(url)
    try:
        bad = "s" + secrets.token_hex(1500)  # a session name (the CLI and library take any): 3001 bytes
        store.append(bad, ToolCallFinished("run_bad", 1, "c1", "t", "x"))
        with pytest.raises(StatementRefused, match="index row size"):
            store.commit()
        store.append("good", RunStarted("run_good", "good", "task", "m"))
        store.commit()  # fails forever: the refused row is buffered again at every commit
        assert [e.type for e in PostgresStore(url).events("good")] == ["run_started"]
    finally:
        store._buffer = []
        store.close()


def test_a_fork_that_landed_is_recognised_when_the_server_prints_floats_rounded(
        pg: PostgresServer, monkeypatch: pytest.MonkeyPatch) -> None:  # noqa: F811
    # `_forked` compares the `created` it reads back with its own float by ==. A database (or role) with
    # extra_float_digits = 0 (as pg_dump and some poolers/DBAs set) prints float8 rounded to 15 digits: a fork
    # whose answer was lost but which landed is then taken for one that did not (503; the retry gets 409).
    from shou.store import postgres as pgmod

    url = pg.database("floats")
    with psycopg.connect(url, autocommit=True) as admin:
        admin.execute("ALTER DATABASE floats SET extra_float_digits = 0")
    store = PostgresStore(url)
    try:
        store.append("src", RunStarted("run_1", "src", "task", "m"))
        store.commit()
        made = 1765040000.1234567  # time.time()'s usual 17 significant digits
        monkeypatch.setattr(pgmod.time, "time", lambda: made)
        store.fork("src", "dst", 10**9)
        monkeypatch.undo()
        assert store._forked("dst", made)
    finally:
        store.close()


def test_a_lock_connection_terminated_mid_statement_is_noticed(pg: PostgresServer) -> None:  # noqa: F811
    # The writer waits on a table lock; an admin terminates its backend mid-statement (FATAL 57P01): the
    # connection must count as broken (not as a statement that failed on a live one), so the lock is lost.
    import threading

    from shou.store.pg_link import SessionLost

    url = pg.database("midstmt")
    with held_session(url) as (store, held):
        pid = _writer_pid(store)
        with psycopg.connect(url, autocommit=True) as admin:
            admin.execute("BEGIN")
            admin.execute("LOCK TABLE events IN SHARE MODE")
            store.append("held", RunStarted("run_held", "held", "task", "m"))
            errors: list[BaseException] = []

            def commit() -> None:
                try:
                    held.commit()
                except BaseException as e:
                    errors.append(e)

            t = threading.Thread(target=commit)
            t.start()
            with psycopg.connect(url, autocommit=True) as killer:
                assert waiting_writer(killer) == pid  # the commit waits on the lock at the server
                killer.execute("SELECT pg_terminate_backend(%s)", (pid,))
            t.join(HANG)
            admin.execute("ROLLBACK")
        assert errors and isinstance(errors[0], SessionLost), errors
        assert store.lost() == {"held"}
        assert list(PostgresStore(url).events("held")) == []


def test_a_crash_of_the_server_loses_the_locks_and_a_fresh_connection_works(pg: PostgresServer) -> None:  # noqa: F811
    url = pg.database("crash")
    with held_session(url) as (store, _):
        pg.halt("immediate")
        pg.start()
        assert store.lost() == {"held"}
        store.append("other", RunStarted("run_o", "other", "task", "m"))
        store.commit()
        assert [e.type for e in PostgresStore(url).events("other")] == ["run_started"]


def _lock_holders(url: str) -> int:
    """How many server sessions hold an advisory lock on this database."""
    with psycopg.connect(url, autocommit=True) as watch:
        return watch.execute("SELECT count(DISTINCT pid) FROM pg_locks l JOIN pg_database d ON d.oid = l.database "
                             "WHERE l.locktype = 'advisory' AND d.datname = current_database()").fetchone()[0]


@pytest.mark.parametrize("failures", [1, 2, 3])
def test_an_unlock_cancelled_on_a_live_connection_still_lets_the_session_go(pg: PostgresServer,  # noqa: F811
                                                                             failures: int) -> None:
    """An admin's `pg_cancel_backend` (or the statement timeout) hitting the unlock left the lock held by the
    live connection, so no other replica could run the session until this process exited."""
    direct = pg.database(f"unlock{failures}")
    proxy = CuttingProxy(pg.socket_dir)
    url = proxy.url(f"unlock{failures}")
    store, other = PostgresStore(url), PostgresStore(direct)
    try:
        held = Session("held", store)
        held.acquire()
        proxy.fail_next(b"pg_advisory_unlock", times=failures)
        held.release()  # tried twice at once; what is still owed, at the next check (serve's heartbeat)
        if failures > 2:
            assert store.lost() == set() and _lock_holders(direct) == 1  # the third unlock fails too
        assert store.lost() == set()
        assert _lock_holders(direct) == 0
        taken = Session("held", other)  # another replica can run the session now
        taken.acquire()
        taken.release()
        again = Session("held", store)  # and so can this one, its lock taken once, let go once
        again.acquire()
        again.release()
        assert _lock_holders(direct) == 0
    finally:
        other.close()
        store.close()
        proxy.close()


def test_an_owed_unlock_and_a_relock_before_the_heartbeat_leave_no_lock_held(postgres_server: Any) -> None:
    """The owed set holds a session once, but the server counts advisory locks: an unlock owed (failed twice on
    release), a lock() of the same session whose payment fails too (its pg_try_advisory_lock then takes the lock
    a second time on the same connection), and a release: one unlock is paid, the other is forgotten, and the
    live connection holds the session for the life of the process."""
    direct = postgres_server.database("owed_relock")
    proxy = CuttingProxy(postgres_server.socket_dir)
    store, other = PostgresStore(proxy.url("owed_relock")), PostgresStore(direct)
    try:
        s = Session("held", store)
        s.acquire()
        proxy.fail_next(b"pg_advisory_unlock", times=3)  # both tries at release, and the payment in lock()
        s.release()
        again = Session("held", store)
        again.acquire()  # the same process runs the session again (resume)
        again.release()
        assert store.lost() == set()  # the heartbeat: nothing is owed any more
        assert _lock_holders(direct) == 0, "the session's advisory lock is still held by the live connection"
        taken = Session("held", other)
        taken.acquire()  # another replica may run it
        taken.release()
    except SessionBusy as e:
        pytest.fail(f"another replica cannot take the session: {e}")
    finally:
        other.close()
        store.close()
        proxy.close()
