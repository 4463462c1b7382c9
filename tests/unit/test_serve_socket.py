"""`shou serve`'s listening socket: connections accepted on it get TCP_NODELAY from asyncio."""

from __future__ import annotations

import asyncio
import socket

from shou.cli.serve import listening_socket


async def test_accepted_connections_do_not_wait_for_delayed_acks() -> None:
    sock = listening_socket("127.0.0.1", 0)
    seen: list[int] = []

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        conn = writer.get_extra_info("socket")
        seen.append(conn.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY))
        writer.close()

    server = await asyncio.start_server(handle, sock=sock)
    async with server:
        _, writer = await asyncio.open_connection("127.0.0.1", sock.getsockname()[1])
        for _ in range(200):
            if seen:
                break
            await asyncio.sleep(0.01)
        writer.close()
    assert seen and seen[0] != 0  # 0 when the socket does not say it is TCP: responses then wait ~40 ms


def test_a_busy_port_is_an_error() -> None:
    first = listening_socket("127.0.0.1", 0)
    try:
        listening_socket("127.0.0.1", first.getsockname()[1]).close()
    except OSError:
        pass
    else:
        raise AssertionError("bound a port that is in use")
    finally:
        first.close()
