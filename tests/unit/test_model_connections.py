"""The model client's pool: idle connections are probed by one poll on a socket found once, and a connection
the server hung up on is still noticed and replaced. Over real loopback HTTP/1.1 keep-alive."""

from __future__ import annotations

import asyncio
from collections import Counter

import httpcore2
import pytest

from shou.models.connections import POOL_LIMITS, _Backend, cheap_probes, new_client


class KeepAliveServer:
    """A loopback HTTP/1.1 server that keeps connections open until told to hang up on them."""

    def __init__(self) -> None:
        self.writers: list[asyncio.StreamWriter] = []
        self.connections = 0
        self.server: asyncio.Server | None = None
        self.url = ""

    async def __aenter__(self) -> KeepAliveServer:
        self.server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        self.url = f"http://127.0.0.1:{self.server.sockets[0].getsockname()[1]}/"
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.hang_up()
        assert self.server is not None
        self.server.close()
        await self.server.wait_closed()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        self.writers.append(writer)
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                length = 0
                for line in head.split(b"\r\n"):
                    if line.lower().startswith(b"content-length:"):
                        length = int(line.split(b":", 1)[1])
                await reader.readexactly(length)
                await asyncio.sleep(0.01)  # long enough for concurrent requests to need their own connections
                writer.write(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 2\r\n\r\n{}")
                await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            writer.close()

    async def hang_up(self) -> None:
        """Close every connection from the server's side, as a server whose keep-alive ran out does."""
        for writer in self.writers:
            writer.close()
        self.writers.clear()
        await asyncio.sleep(0.05)


async def test_a_connection_the_server_closed_while_idle_is_replaced_not_reused() -> None:
    async with KeepAliveServer() as srv:
        client = new_client(5.0)
        try:
            assert (await client.post(srv.url, content=b"{}")).status_code == 200
            assert (await client.post(srv.url, content=b"{}")).status_code == 200
            assert srv.connections == 1  # kept alive and reused
            await srv.hang_up()
            # The probe must see the hang-up: reusing the dead connection would fail this request.
            assert (await client.post(srv.url, content=b"{}")).status_code == 200
            assert srv.connections == 2
        finally:
            await client.aclose()


async def test_idle_connections_are_probed_without_anyio_lookups(monkeypatch: pytest.MonkeyPatch) -> None:
    asked: Counter[str] = Counter()
    original = httpcore2._backends.anyio.AnyIOStream.get_extra_info

    def counting(self: object, info: str) -> object:
        asked[info] += 1
        return original(self, info)

    monkeypatch.setattr(httpcore2._backends.anyio.AnyIOStream, "get_extra_info", counting)
    async with KeepAliveServer() as srv:
        client = new_client(5.0)
        try:
            # A burst leaves several idle connections; each later request probes all of them, twice.
            await asyncio.gather(*(client.post(srv.url, content=b"{}") for _ in range(8)))
            idle = srv.connections
            assert 4 <= idle <= POOL_LIMITS.max_keepalive_connections
            for _ in range(10):
                assert (await client.post(srv.url, content=b"{}")).status_code == 200
        finally:
            await client.aclose()
    assert asked["is_readable"] == 0  # the stock probe: a lookup and a new poll object every time
    assert asked["socket"] <= idle  # found once per connection


def test_every_pool_of_the_client_gets_the_cheap_probes(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HTTPS_PROXY", "http://127.0.0.1:9")  # a proxy from the environment has a pool of its own
    client = new_client(5.0)
    pools = [client._transport, *(t for t in client._mounts.values() if t is not None)]
    assert len(pools) >= 2
    assert all(isinstance(t._pool._network_backend, _Backend) for t in pools)
    assert cheap_probes(client)  # idempotent: nothing is wrapped twice
    assert not isinstance(client._transport._pool._network_backend._inner, _Backend)
