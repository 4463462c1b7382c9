"""The egress proxy over real loopback sockets: refusals, its credential, forwarding, rebinding, garbage."""

from __future__ import annotations

import base64
import contextlib
import socket
import socketserver
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from shou.errors import ToolError
from shou.net import egress
from shou.net.address import Allow
from shou.net.egress import EgressProxy, egress_proxy
from shou.tools.base import ToolContext
from shou.tools.builtin.web import web_fetch

LOOPBACK = Allow.parse(["127.0.0.1"])
ANSWER = b"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: 7\r\nConnection: close\r\n\r\nupdone\n"


class Upstream:
    """A loopback TCP server that records every connection's request head and answers a small HTTP 200."""

    def __init__(self, host: str = "127.0.0.1") -> None:
        self.heads: list[bytes] = []
        self.connections = 0
        up = self

        class Handler(socketserver.BaseRequestHandler):
            def handle(self) -> None:
                up.connections += 1
                data = b""
                self.request.settimeout(5)
                with contextlib.suppress(OSError):
                    while b"\r\n\r\n" not in data and (chunk := self.request.recv(65536)):
                        data += chunk
                    up.heads.append(data)
                    self.request.sendall(ANSWER)

        family = socket.AF_INET6 if ":" in host else socket.AF_INET
        server_class = type("Server", (socketserver.ThreadingTCPServer,), {"address_family": family,
                                                                          "daemon_threads": True})
        self.server = server_class((host, 0), Handler)
        self.port = self.server.server_address[1]
        threading.Thread(target=self.server.serve_forever, args=(0.05,), daemon=True).start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def upstream() -> Iterator[Upstream]:
    up = Upstream()
    yield up
    up.close()


def auth(proxy: EgressProxy) -> bytes:
    token = base64.b64encode(f"{proxy.username}:{proxy.password}".encode())
    return b"Proxy-Authorization: Basic " + token + b"\r\n"


def ask(proxy: EgressProxy, raw: bytes, *, keep_open: bool = False, timeout: float = 10) -> bytes:
    """Send `raw` to the proxy and read what it says until it closes (or, with keep_open, one answer head)."""
    with socket.create_connection(("127.0.0.1", proxy.port), timeout=timeout) as s:
        s.sendall(raw)
        if not keep_open:
            s.shutdown(socket.SHUT_WR)
        out = b""
        while chunk := s.recv(65536):
            out += chunk
            if keep_open and b"\r\n\r\n" in out:
                break
        return out


def status(answer: bytes) -> int:
    return int(answer.split(b" ", 2)[1]) if answer.startswith(b"HTTP/1.1 ") else 0


@pytest.mark.parametrize("target", ["127.0.0.1:{port}", "[::1]:{port}", "[::ffff:127.0.0.1]:{port}",
                                    "[::127.0.0.1]:{port}", "localhost:{port}", "10.0.0.1:80", "169.254.169.254:80",
                                    "[fd00::1]:443", "[64:ff9b::a9fe:a9fe]:80", "192.0.0.8:443", "0.0.0.0:{port}"])
def test_connect_to_private_addresses_is_refused(upstream: Upstream, target: str) -> None:
    proxy = egress_proxy()
    host_port = target.format(port=upstream.port)
    answer = ask(proxy, f"CONNECT {host_port} HTTP/1.1\r\nHost: {host_port}\r\n".encode() + auth(proxy) + b"\r\n")
    assert status(answer) == 403
    head = answer.split(b"\r\n\r\n")[0].decode()
    assert "\r\nX-Shou-Refused: " in head and head.split("\r\n")[0].startswith("HTTP/1.1 403 refused: ")
    assert upstream.connections == 0


def test_absolute_form_requests_to_private_addresses_are_refused(upstream: Upstream) -> None:
    proxy = egress_proxy()
    answer = ask(proxy, f"GET http://127.0.0.1:{upstream.port}/secret HTTP/1.1\r\nHost: 127.0.0.1\r\n".encode()
                 + auth(proxy) + b"\r\n")
    assert status(answer) == 403 and b"X-Shou-Refused: 127.0.0.1 is a loopback address\r\n" in answer
    assert upstream.connections == 0


@pytest.mark.parametrize("header", [b"", b"Proxy-Authorization: Basic c2hvdTp3cm9uZw==\r\n",
                                    b"Proxy-Authorization: Bearer x\r\n", b"Proxy-Authorization: Basic\r\n"])
def test_the_credential_is_required(upstream: Upstream, header: bytes) -> None:
    proxy = egress_proxy(LOOPBACK)  # even where the target is allowed, a stranger gets nowhere
    answer = ask(proxy, f"CONNECT 127.0.0.1:{upstream.port} HTTP/1.1\r\n".encode() + header + b"\r\n")
    assert status(answer) == 407 and b'Proxy-Authenticate: Basic realm="shou"' in answer
    assert upstream.connections == 0


def test_an_allowed_connect_is_a_tunnel(upstream: Upstream) -> None:
    proxy = egress_proxy(LOOPBACK)
    with socket.create_connection(("127.0.0.1", proxy.port), timeout=10) as s:
        s.sendall(f"CONNECT 127.0.0.1:{upstream.port} HTTP/1.1\r\n".encode() + auth(proxy) + b"\r\n")
        assert s.recv(1024) == b"HTTP/1.1 200 Connection established\r\n\r\n"
        s.sendall(b"GET /through HTTP/1.1\r\nHost: tunnel\r\n\r\n")
        got = b""
        while chunk := s.recv(65536):
            got += chunk
    assert got == ANSWER and upstream.heads == [b"GET /through HTTP/1.1\r\nHost: tunnel\r\n\r\n"]


def test_forwarded_requests_are_origin_form_without_hop_headers(upstream: Upstream) -> None:
    proxy = egress_proxy(LOOPBACK)
    answer = ask(proxy, (f"GET http://127.0.0.1:{upstream.port}/path?q=1#frag HTTP/1.1\r\n"
                         f"Host: 127.0.0.1:{upstream.port}\r\nConnection: keep-alive, X-Hop\r\nX-Hop: 1\r\n"
                         "Keep-Alive: 5\r\nProxy-Connection: keep-alive\r\nX-Kept: yes\r\n").encode()
                 + auth(proxy) + b"\r\n")
    assert answer == ANSWER
    lines = upstream.heads[0].decode().split("\r\n")
    assert lines[0] == "GET /path?q=1 HTTP/1.1"
    assert f"Host: 127.0.0.1:{upstream.port}" in lines and "X-Kept: yes" in lines and "Connection: close" in lines
    assert not [h for h in lines if h.lower().startswith(("proxy-", "x-hop", "keep-alive", "connection: keep"))]


@pytest.fixture
def rebinding(monkeypatch: pytest.MonkeyPatch) -> dict[str, list[str]]:
    """Names whose DNS answers change on every lookup, the way a rebinding attacker's server answers."""
    real = socket.getaddrinfo
    answers: dict[str, list[str]] = {}

    def getaddrinfo(host: Any, port: Any, *args: Any, **kwargs: Any) -> list[Any]:
        if isinstance(host, bytes):  # anyio (under httpx) passes the IDNA-encoded name
            host = host.decode()
        if host in answers:
            addr = answers[host].pop(0) if len(answers[host]) > 1 else answers[host][0]
            return [(socket.AF_INET, socket.SOCK_STREAM, 6, "", (addr, int(port or 0)))]
        return real(host, port, *args, **kwargs)

    monkeypatch.setattr(socket, "getaddrinfo", getaddrinfo)
    return answers


def test_the_proxy_checks_the_address_it_connects_to(upstream: Upstream, rebinding: dict[str, list[str]]) -> None:
    rebinding["rebind.test"] = ["127.0.0.1"]
    proxy = egress_proxy()
    answer = ask(proxy, f"CONNECT rebind.test:{upstream.port} HTTP/1.1\r\n".encode() + auth(proxy) + b"\r\n")
    assert status(answer) == 403
    assert b"X-Shou-Refused: rebind.test resolves to 127.0.0.1, a loopback address" in answer
    assert upstream.connections == 0


@pytest.mark.parametrize("scheme", ["http", "https"])
async def test_web_fetch_survives_dns_rebinding(upstream: Upstream, rebinding: dict[str, list[str]],
                                                tmp_path: Path, scheme: str) -> None:
    # The first answer (web_fetch's own check) is public, every later one is loopback: before the egress proxy,
    # httpx looked the name up again and connected to 127.0.0.1.
    rebinding["rebind.test"] = ["93.184.215.14", "127.0.0.1"]
    ctx = ToolContext(workspace=tmp_path, session="s", settings=SimpleNamespace(env={}, web_timeout=10))
    with pytest.raises(ToolError, match=r"^refused: rebind\.test resolves to 127\.0\.0\.1, a loopback address"):
        await web_fetch.call(web_fetch.validate({"url": f"{scheme}://rebind.test:{upstream.port}/"}), ctx)
    assert upstream.connections == 0


def test_an_oversized_head_is_refused(upstream: Upstream) -> None:
    proxy = egress_proxy(LOOPBACK)
    big = f"GET http://127.0.0.1:{upstream.port}/ HTTP/1.1\r\n".encode() + auth(proxy) + b"X-Pad: " + b"a" * 70_000
    assert status(ask(proxy, big + b"\r\n\r\n")) == 431
    assert upstream.connections == 0


def test_a_slow_head_and_an_idle_tunnel_are_dropped(upstream: Upstream, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(egress, "HEAD_TIMEOUT", 0.3)
    monkeypatch.setattr(egress, "IDLE_TIMEOUT", 0.5)
    proxy = egress_proxy(LOOPBACK)
    started = time.monotonic()
    assert ask(proxy, b"CONNECT 127.0.0.1:1 HTTP/1.1\r\n", keep_open=True) == b""  # never finished: closed
    assert time.monotonic() - started < 5
    with socket.create_connection(("127.0.0.1", proxy.port), timeout=10) as s:
        s.sendall(f"CONNECT 127.0.0.1:{upstream.port} HTTP/1.1\r\n".encode() + auth(proxy) + b"\r\n")
        assert s.recv(1024).startswith(b"HTTP/1.1 200")
        started = time.monotonic()
        assert s.recv(1024) == b""  # nothing moved in either direction: the proxy closed the tunnel
        assert time.monotonic() - started < 5


GARBAGE = [b"\r\n\r\n", b"GET\r\n\r\n", b"GET / HTTP/1.1\r\n\r\n", b"CONNECT nohost HTTP/1.1\r\n\r\n",
           b"CONNECT :80 HTTP/1.1\r\n\r\n", b"CONNECT a:99999 HTTP/1.1\r\n\r\n", b"CONNECT a:-1 HTTP/1.1\r\n\r\n",
           b"GET ftp://x/ HTTP/1.1\r\n\r\n", b"GET http://[::1/ HTTP/1.1\r\n\r\n", b"GET http://a:b/ HTTP/1.1\r\n\r\n",
           b"GET http://a/ HTTP/9\r\n\r\n", b"\xff\xfe\x00 \x01 \x02\r\n\r\n",
           b"GET http://a/ HTTP/1.1\r\nNoColon\r\n\r\n",
           b"GET http://a\x00b/ HTTP/1.1\r\n\r\n", b"GET http://a/ HTTP/1.1\r\nX: a\x0bb\r\n\r\n", b"", b"G",
           b"GET http://a/ HTTP/1.1\r\n: empty\r\n\r\n", b"CONNECT [::1]]:80 HTTP/1.1\r\n\r\n"]


def still_serves(proxy: EgressProxy) -> bool:
    answer = ask(proxy, b"CONNECT 10.0.0.1:80 HTTP/1.1\r\n" + auth(proxy) + b"\r\n")
    return status(answer) == 403


@pytest.mark.parametrize("raw", GARBAGE)
def test_garbage_is_answered_or_dropped(raw: bytes) -> None:
    proxy = egress_proxy()
    assert status(ask(proxy, raw)) in (0, 400, 407)
    assert status(ask(proxy, raw.replace(b"\r\n\r\n", b"\r\n" + auth(proxy) + b"\r\n", 1))) in (0, 400, 403, 502)
    assert still_serves(proxy)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.one_of(st.binary(max_size=300), st.lists(st.sampled_from(
    [b"GET", b"CONNECT", b" ", b"http://", b"[", b"]", b":", b"\r\n", b"\n", b"\r\n\r\n", b"HTTP/1.1", b"a.b", b"80",
     b"\x00", b"\xff", b"%", b"@", b"Proxy-Authorization: Basic", b"Host:"]), max_size=30).map(b"".join)))
def test_random_heads_never_break_the_proxy(raw: bytes) -> None:
    proxy = egress_proxy()
    assert status(ask(proxy, raw)) in (0, 400, 407, 431)
    assert still_serves(proxy)


def test_one_proxy_per_allow_list_for_every_loop_and_thread() -> None:
    seen: list[EgressProxy] = []
    runs: list[Callable[[], None]] = [lambda: seen.append(egress_proxy(Allow.parse(["127.0.0.1"])))] * 4
    threads = [threading.Thread(target=run) for run in runs]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len({id(p) for p in seen}) == 1 and seen[0] is egress_proxy(LOOPBACK)
    assert egress_proxy() is egress_proxy(Allow()) and egress_proxy().port != seen[0].port
    assert egress_proxy().password != seen[0].password and len(seen[0].password) >= 24
