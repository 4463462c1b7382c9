"""Attacker's review of d0f87e0 (Link.run keeps a live connection after a statement failure)."""

from __future__ import annotations

import time

import pytest

from shou.events import RunStarted, ToolCallFinished

from ..fixtures.postgres import PostgresServer, pg_bindir
from .test_pg_group_outage import pg  # noqa: F401  (the fixture)

psycopg = pytest.importorskip("psycopg")
pytestmark = pytest.mark.skipif(pg_bindir() is None, reason="PostgreSQL is not installed")

from shou.store.pg_link import StoreUnavailable  # noqa: E402
from shou.store.postgres import PostgresStore  # noqa: E402


def _writer_pid(store: PostgresStore) -> int:
    return store._writer._get().info.backend_pid


def test_a_terminated_lock_connection_is_noticed(pg: PostgresServer) -> None:  # noqa: F811
    from shou import Session

    url = pg.database("term")
    store = PostgresStore(url)
    held = Session("held", store)
    held.acquire()
    try:
        pid = _writer_pid(store)
        with psycopg.connect(url, autocommit=True) as admin:
            admin.execute("SELECT pg_terminate_backend(%s)", (pid,))
        time.sleep(0.3)
        store.lost()
        assert store.lost() == {"held"}
    finally:
        held.release()
        store.close()


def test_an_idle_session_timeout_on_the_lock_connection_is_noticed(pg: PostgresServer) -> None:  # noqa: F811
    from shou import Session

    url = pg.database("idle")
    with psycopg.connect(url, autocommit=True) as admin:
        admin.execute("ALTER DATABASE idle SET idle_session_timeout = '500ms'")
    store = PostgresStore(url)
    held = Session("held", store)
    held.acquire()
    try:
        time.sleep(1.5)
        store.lost()
        assert store.lost() == {"held"}
    finally:
        held.release()
        store.close()


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
        with pytest.raises(Exception) as failed:
            store.commit()
        print(type(failed.value), failed.value)
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
