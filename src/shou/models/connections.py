"""The model client's HTTP connections: a pool sized for concurrent runs whose idle connections cost little.

Before each request, and again when a response is closed, httpcore2's pool asks every idle connection
whether the server has closed it. Its stock answer goes through anyio's attribute lookup (a dictionary of
a dozen closures built per call) to find the socket, then builds a `poll` object: about 15 µs a
connection. After a burst of concurrent runs the pool keeps up to 20 idle connections, so every later
request paid for some 40 of those questions, ~0.5 ms a model call even on a quiet agent.
Here each connection finds its socket once and keeps one `poll` object registered on it, so the question
is a single `poll(0)`. What it answers is unchanged: readable while idle means the server hung up.
"""

# ruff: noqa: ASYNC109  (the `timeout` parameters are httpcore2's network interface, passed through)
from __future__ import annotations

import select
import socket
import ssl
from collections.abc import Iterable
from typing import Any

import httpcore2
import httpx2

# As many connections as concurrent runs need (a 101st session must not wait for a free one), but at most
# 20 kept idle, httpx's own default.
POOL_LIMITS = httpx2.Limits(max_connections=1000, max_keepalive_connections=20)


class _Stream(httpcore2.AsyncNetworkStream):
    """A network stream whose idle probe is one `poll(0)` on a socket looked up once."""

    __slots__ = ("_inner", "_poll", "_sock")

    def __init__(self, inner: httpcore2.AsyncNetworkStream) -> None:
        self._inner = inner
        self._sock: socket.socket | None = None
        self._poll: Any = None

    async def read(self, max_bytes: int, timeout: float | None = None) -> bytes:
        return await self._inner.read(max_bytes, timeout)

    async def write(self, buffer: bytes, timeout: float | None = None) -> None:
        await self._inner.write(buffer, timeout)

    async def aclose(self) -> None:
        self._poll = None
        await self._inner.aclose()

    async def start_tls(self, ssl_context: ssl.SSLContext, server_hostname: str | None = None,
                        timeout: float | None = None) -> httpcore2.AsyncNetworkStream:
        return _Stream(await self._inner.start_tls(ssl_context, server_hostname, timeout))

    def get_extra_info(self, info: str) -> Any:
        if info != "is_readable":
            return self._inner.get_extra_info(info)
        sock = self._sock
        if sock is None:
            sock = self._sock = self._inner.get_extra_info("socket")
            if sock is None:  # no socket to ask (a test double): the stock answer
                return self._inner.get_extra_info(info)
        fd = sock.fileno()
        if fd < 0:  # closed: the next read would return b"", as for a hung-up server
            return True
        if self._poll is None:
            self._poll = select.poll()
            self._poll.register(fd, select.POLLIN)
        return bool(self._poll.poll(0))


class _Backend(httpcore2.AsyncNetworkBackend):
    """The pool's own backend, its streams wrapped in `_Stream`."""

    def __init__(self, inner: httpcore2.AsyncNetworkBackend) -> None:
        self._inner = inner

    async def connect_tcp(self, host: str, port: int, timeout: float | None = None, local_address: str | None = None,
                          socket_options: Iterable[Any] | None = None) -> httpcore2.AsyncNetworkStream:
        return _Stream(await self._inner.connect_tcp(host, port, timeout, local_address, socket_options))

    async def connect_unix_socket(self, path: str, timeout: float | None = None,
                                  socket_options: Iterable[Any] | None = None) -> httpcore2.AsyncNetworkStream:
        return _Stream(await self._inner.connect_unix_socket(path, timeout, socket_options))

    async def sleep(self, seconds: float) -> None:
        await self._inner.sleep(seconds)


def cheap_probes(client: httpx2.AsyncClient) -> bool:
    """Give the pools of `client` (its own and those of proxies from the environment) streams with cheap idle
    probes. Returns whether every pool took them: False means httpx2 changed shape, and the client works
    as it came, at the stock cost."""
    transports = [client._transport, *client._mounts.values()]  # no public way to reach the pool
    done = True
    for transport in transports:
        if transport is None:
            continue
        pool = getattr(transport, "_pool", None)
        backend = getattr(pool, "_network_backend", None)
        if not isinstance(backend, httpcore2.AsyncNetworkBackend):
            done = False
            continue
        if not isinstance(backend, _Backend):
            pool._network_backend = _Backend(backend)  # type: ignore[union-attr]
    return done


def new_client(timeout: httpx2.Timeout | float) -> httpx2.AsyncClient:
    """The HTTP client a model makes for itself: `POOL_LIMITS`, cheap idle probes."""
    client = httpx2.AsyncClient(timeout=timeout, limits=POOL_LIMITS)
    cheap_probes(client)
    return client
