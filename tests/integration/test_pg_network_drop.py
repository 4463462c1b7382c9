"""A network path to PostgreSQL that drops packets silently (no reset: a cable, a firewall's state table, a
failover that moved the address) fails the writer's commit within the connection's TCP deadlines
(`pg_link.TCP_SETTINGS`) instead of hanging it, and with it every run of the replica, for ~15 minutes (a
statement sent) or for good (an answer lost). The path is cut with iptables on loopback, in front of a TCP
forwarder to the test cluster's unix socket."""

from __future__ import annotations

import contextlib
import shutil
import socket
import subprocess
import threading
from collections.abc import Iterator
from typing import Any

import pytest

from shou import Session
from shou.agent.emitter import Emitter
from shou.events import RunStarted

from ..fixtures.postgres import pg_bindir

psycopg = pytest.importorskip("psycopg")
pytestmark = [
    pytest.mark.skipif(pg_bindir() is None, reason="PostgreSQL is not installed"),
    pytest.mark.skipif(shutil.which("iptables") is None, reason="iptables is not installed"),
]

from shou.store.pg_link import StoreUnavailable  # noqa: E402
from shou.store.postgres import PostgresStore  # noqa: E402


class Forwarder:
    """127.0.0.1:`port` -> the cluster's unix socket, byte for byte."""

    def __init__(self, upstream: str) -> None:
        self.upstream = upstream
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self.listener.accept()
            except OSError:
                return
            server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            server.connect(self.upstream)
            for a, b in ((client, server), (server, client)):
                threading.Thread(target=self._pump, args=(a, b), daemon=True).start()

    @staticmethod
    def _pump(src: socket.socket, dst: socket.socket) -> None:
        with contextlib.suppress(OSError):
            while data := src.recv(65536):
                dst.sendall(data)
        for s in (src, dst):
            with contextlib.suppress(OSError):
                s.shutdown(socket.SHUT_RDWR)

    def close(self) -> None:
        self.listener.close()


@contextlib.contextmanager
def dropped(port: int) -> Iterator[None]:
    """Every packet to and from `port` on loopback dropped, without a reset, while the block runs."""
    rules = [["INPUT", "-i", "lo", "-p", "tcp", "--dport", str(port), "-j", "DROP"],
             ["INPUT", "-i", "lo", "-p", "tcp", "--sport", str(port), "-j", "DROP"]]
    added = []
    try:
        for rule in rules:
            r = subprocess.run(["iptables", "-w", "-I", *rule], capture_output=True, text=True)
            if r.returncode != 0:
                pytest.skip(f"iptables cannot add a rule here: {r.stderr.strip()}")
            added.append(rule)
        yield
    finally:
        for rule in added:
            subprocess.run(["iptables", "-w", "-D", *rule], check=True)


@pytest.fixture
def tcp_url(postgres_server: Any, postgres_url: str) -> Iterator[tuple[str, int]]:
    from psycopg.conninfo import conninfo_to_dict

    fwd = Forwarder(str(postgres_server.socket_dir / ".s.PGSQL.5432"))
    db = conninfo_to_dict(postgres_url)["dbname"]
    yield f"postgresql://postgres@127.0.0.1:{fwd.port}/{db}?sslmode=disable&gssencmode=disable", fwd.port
    fwd.close()


def test_a_silent_network_drop_fails_the_commit_instead_of_hanging(tcp_url: tuple[str, int]) -> None:
    url, port = tcp_url
    store = PostgresStore(url)
    session = Session("held", store)
    emitter = Emitter(session)
    emitter.emit(RunStarted("r1", "held", "before the drop", "m"))
    emitter.commit()
    outcome: list[BaseException | None] = []
    done = threading.Event()

    def commit() -> None:
        try:
            emitter.commit()
            outcome.append(None)
        except BaseException as e:
            outcome.append(e)
        done.set()

    with dropped(port):
        emitter.emit(RunStarted("r2", "held", "during the drop", "m"))
        threading.Thread(target=commit, daemon=True).start()
        # tcp_user_timeout is 30 s; a kernel's retransmissions alone would take ~15 minutes
        assert done.wait(100), "the commit still hangs on a dropped network path"
    assert isinstance(outcome[0], StoreUnavailable), outcome  # the session's lock went with that connection
    # the path back: a fresh connection works, and what was committed before the drop is there
    with PostgresStore(url) as again:
        assert next(e.task for e in again.events("held") if isinstance(e, RunStarted)) == "before the drop"
        fresh = Session("fresh", again)
        Emitter(fresh).emit(RunStarted("r3", "fresh", "after", "m"))
        fresh.commit()
        assert [e.task for e in again.events("fresh")] == ["after"]
    store.close()


def test_the_url_s_own_settings_win_and_options_keep_the_statement_timeout(postgres_url: str) -> None:
    from shou.store.pg_link import STATEMENT_TIMEOUT_MS, TCP_SETTINGS, connect

    with connect(postgres_url) as conn:  # unix socket: the TCP settings are passed, and ignored by the kernel
        params = conn.info.get_parameters()
        assert {k: params.get(k) for k in TCP_SETTINGS} == TCP_SETTINGS
        assert conn.execute("SHOW statement_timeout").fetchone()[0] == f"{STATEMENT_TIMEOUT_MS // 1000}s"
    own = postgres_url + "&tcp_user_timeout=1234&connect_timeout=3&options=-c%20search_path%3Dpublic,x"
    with connect(own) as conn:
        params = conn.info.get_parameters()
        assert (params["tcp_user_timeout"], params["connect_timeout"]) == ("1234", "3")
        assert conn.execute("SHOW search_path").fetchone()[0] == "public,x"
        assert conn.execute("SHOW statement_timeout").fetchone()[0] == f"{STATEMENT_TIMEOUT_MS // 1000}s"
