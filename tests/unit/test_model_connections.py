"""The model client's connections: kept alive and reused, replaced when the server hung up on them while
idle, one aiohttp session per event loop closed when that loop ends, proxies from the environment. Over
real loopback HTTP/1.1 keep-alive."""

from __future__ import annotations

import asyncio
import logging

import aiohttp
import pytest

from shou.errors import ModelError, ModelUnreachableError
from shou.messages import Message
from shou.models.connections import Connections, Timeout
from shou.models.openai_compat import OpenAICompatible
from shou.models.runtime import RetryPolicy

FAST = RetryPolicy(max_retries=0, max_unreachable_retries=0)


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


async def post(connections: Connections, url: str) -> int:
    session = await connections.session()
    async with session.post(url, data=b"{}") as resp:
        await resp.read()
        return resp.status


async def test_connections_are_kept_alive_and_one_the_server_closed_while_idle_is_replaced() -> None:
    async with KeepAliveServer() as srv:
        connections = Connections(5.0)
        try:
            assert await post(connections, srv.url) == 200
            assert await post(connections, srv.url) == 200
            assert srv.connections == 1  # kept alive and reused
            await srv.hang_up()
            # Reusing the dead connection would fail this request.
            assert await post(connections, srv.url) == 200
            assert srv.connections == 2
            await asyncio.gather(*(post(connections, srv.url) for _ in range(8)))
            assert srv.connections >= 6  # concurrent requests get connections of their own
        finally:
            await connections.aclose()


def test_each_event_loop_has_its_own_session_closed_when_the_loop_ends(caplog: pytest.LogCaptureFixture) -> None:
    connections = Connections(Timeout(read=5, connect=2))
    seen: list[aiohttp.ClientSession] = []

    async def use() -> None:
        async with KeepAliveServer() as srv:
            assert await post(connections, srv.url) == 200
            seen.append(await connections.session())

    with caplog.at_level(logging.ERROR, logger="asyncio"):
        asyncio.run(use())
        assert seen[0].closed  # closed as its loop shut down, though nobody called aclose()
        asyncio.run(use())  # a new loop, as every Agent.run() of a script can be: a new session, not the dead one
        assert seen[1] is not seen[0] and seen[1].closed
        with asyncio.Runner() as runner:  # Agent.run()'s private loop
            runner.run(use())
            runner.run(use())
            assert seen[2] is seen[3] and not seen[2].closed  # one session for the loop's whole life
        assert seen[2].closed
    assert "Unclosed" not in caplog.text
    assert len(connections._sessions) == 1  # the entries of closed loops are dropped as new ones are made


async def test_a_session_the_caller_hands_in_is_used_and_left_open() -> None:
    async with KeepAliveServer() as srv, aiohttp.ClientSession() as mine:
        model = OpenAICompatible("m", base_url=srv.url, client=mine)
        assert await model.connections.session() is mine
        await model.aclose()
        assert not mine.closed


REPLY = (b'{"choices": [{"index": 0, "message": {"role": "assistant", "content": "via proxy"}, '
         b'"finish_reason": "stop"}], "usage": {"prompt_tokens": 3, "completion_tokens": 2}}')


async def test_model_requests_go_through_the_proxy_the_environment_names(monkeypatch: pytest.MonkeyPatch) -> None:
    heads: list[bytes] = []

    async def proxy(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        heads.append(await reader.readuntil(b"\r\n\r\n"))
        writer.write(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nConnection: close\r\n"
                     b"Content-Length: %d\r\n\r\n%s" % (len(REPLY), REPLY))
        await writer.drain()
        writer.close()

    server = await asyncio.start_server(proxy, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    monkeypatch.setenv("HTTP_PROXY", f"http://user:pw@127.0.0.1:{port}")
    monkeypatch.setenv("NO_PROXY", "bypassed.example.invalid")
    monkeypatch.delenv("no_proxy", raising=False)
    model = OpenAICompatible("m", base_url="http://models.example.invalid/v1", stream=False, retry=FAST)
    bypassed = OpenAICompatible("m", base_url="http://bypassed.example.invalid/v1", stream=False, retry=FAST)
    try:
        events = [e async for e in model.stream([Message.user("hi")], [])]
        with pytest.raises(ModelError, match="cannot reach"):  # NO_PROXY: straight to a name that does not resolve
            _ = [e async for e in bypassed.stream([Message.user("hi")], [])]
    finally:
        await model.aclose()
        await bypassed.aclose()
        server.close()
    assert events[-1].message.text == "via proxy"
    assert len(heads) == 1 and heads[0].startswith(b"POST http://models.example.invalid/v1/chat/completions HTTP/1.1")
    assert b"Proxy-Authorization: Basic dXNlcjpwdw==" in heads[0]  # user:pw from the proxy's URL


async def test_an_https_model_tunnels_through_the_proxy_and_a_refusal_reads_as_unreachable(
        monkeypatch: pytest.MonkeyPatch) -> None:
    heads: list[bytes] = []

    async def proxy(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        heads.append(await reader.readuntil(b"\r\n\r\n"))
        writer.write(b"HTTP/1.1 403 Forbidden\r\nContent-Length: 0\r\nConnection: close\r\n\r\n")
        await writer.drain()
        writer.close()

    server = await asyncio.start_server(proxy, "127.0.0.1", 0)
    monkeypatch.setenv("HTTPS_PROXY", f"http://user:pw@127.0.0.1:{server.sockets[0].getsockname()[1]}")
    monkeypatch.delenv("NO_PROXY", raising=False)
    monkeypatch.delenv("no_proxy", raising=False)
    model = OpenAICompatible("m", base_url="https://models.example.invalid/v1", api_key="sk-secret", retry=FAST)
    try:
        with pytest.raises(ModelUnreachableError, match=r"cannot reach https://models\.example\.invalid/v1"):
            _ = [e async for e in model.stream([Message.user("hi")], [])]
    finally:
        await model.aclose()
        server.close()
    assert heads and heads[0].startswith(b"CONNECT models.example.invalid:443 HTTP/1.1")
    assert b"Proxy-Authorization: Basic dXNlcjpwdw==" in heads[0]
    assert b"sk-secret" not in heads[0]  # the provider's key is for the provider, inside the tunnel
