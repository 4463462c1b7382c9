"""The model client's HTTP connections: aiohttp sessions, one per event loop, closed when their loop ends.

Why aiohttp: against a zero-latency server on loopback, one chat completion costs about 470 µs of client
CPU through httpx2's client and connection pool here, and about 120 µs through aiohttp (bench/README,
"HTTP client"). On a three-call task that difference was most of what shou added over a hand-written loop.

A session belongs to the event loop it was made on, so a model keeps one per loop it is used from: the
private loop of `Agent.run()`, `asyncio.run()` in a script, a server's loop. Each session is closed when
its loop shuts down: an async generator started on the loop is finalised by `loop.shutdown_asyncgens()`,
which `asyncio.run()` and `asyncio.Runner.close()` call, and its `finally` closes the session there. A
session handed in by the caller (`client=`) is theirs: used on its loop, never closed here. A loop that is
never closed (a script's own `new_event_loop()`) has its sessions closed at exit, on that loop; without
that, aiohttp would report every kept connection as unclosed when the process ends.

The pool holds up to 1,000 connections (a 101st concurrent run must not wait for a free one). Idle
connections stay registered with the loop, so one the server hangs up on is dropped when it does, not
found dead by the next request; they are closed after `KEEPALIVE` seconds of rest. Proxies come from the
environment by shou's rules (`proxies.py`), read once per URL. Response headers may be as large as httpx
took them (aiohttp's own limits refuse a 9 KB header or 129 headers).
"""

from __future__ import annotations

import asyncio
import atexit
import functools
import inspect
import warnings
import weakref
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ..errors import ModelError
from .proxies import Proxy, proxy_for

if TYPE_CHECKING:
    import aiohttp

POOL_SIZE = 1000
KEEPALIVE = 15.0  # seconds an idle connection is kept (aiohttp's default)
CONNECT_TIMEOUT = 10.0
MAX_HEADER_BYTES = 256 * 1024  # one header line, and one field
MAX_HEADERS = 1000
# A body up to this size goes out at once (the socket's buffers take it); a larger one in pieces, each
# with the read timeout, as httpx's write timeout did.
WATCHED_BODY = 32 * 1024
UPLOAD_PIECE = 64 * 1024
# Every session made here and its loop, for the exit (weak keys: a closed session that is gone leaves).
_MADE: weakref.WeakKeyDictionary[Any, asyncio.AbstractEventLoop] = weakref.WeakKeyDictionary()


@dataclass(frozen=True, slots=True)
class Timeout:
    """How long a model request may wait: `connect` seconds to open a connection, `read` seconds for each
    next piece of the reply (a stream may run for minutes as long as it keeps coming). None: no limit."""

    read: float | None = 120.0
    connect: float | None = CONNECT_TIMEOUT

    @classmethod
    def of(cls, value: Timeout | float | Any | None) -> Timeout:
        """`value` as a `Timeout`: a number is the read timeout, with the default connect timeout (or less);
        an httpx `Timeout` (what this parameter took before) keeps its read and connect timeouts."""
        if isinstance(value, Timeout):
            return value
        if value is None:
            return cls(None, None)
        if hasattr(value, "read") and hasattr(value, "connect"):
            return cls(_seconds(value.read), _seconds(value.connect))
        seconds = float(value)
        return cls(seconds, min(seconds, CONNECT_TIMEOUT))


class UploadStalled(TimeoutError):
    """A request body stopped going out: the server (or the network) took none of it for `seconds`."""

    def __init__(self, seconds: float) -> None:
        super().__init__(f"no part of the request body went out for {seconds:g} s")
        self.seconds = seconds


def request_body(body: bytes, timeout: Timeout) -> Any:
    """What to hand aiohttp as the body: the bytes themselves when small, else a payload written in pieces
    that each must go out within the read timeout. aiohttp bounds connecting and each wait for the reply,
    but not sending: a server that stopped reading a large body held the request forever. One that reads
    slowly but steadily is never cut."""
    if timeout.read is None or len(body) <= WATCHED_BODY:
        return body
    return _upload_class()(body, timeout.read)


def _seconds(value: Any) -> float | None:
    return None if value is None else float(value)


class Connections:
    """A model's HTTP sessions, one per event loop (and SOCKS proxy) it is used with (see the module's
    docstring)."""

    def __init__(self, timeout: Timeout | float | None, session: aiohttp.ClientSession | None = None) -> None:
        self.timeout = Timeout.of(timeout)
        self._given = session
        self._proxies: dict[str, Proxy | None] = {}
        # (loop, SOCKS proxy or "") -> (session, the async generator that closes it with the loop); entries of
        # closed loops are dropped when the next session is made (not weak keys: the session holds its loop)
        self._sessions: dict[tuple[asyncio.AbstractEventLoop, str], tuple[Any, Any]] = {}
        # A model dropped after its loop was closed without finalising its sessions: close them quietly then.
        weakref.finalize(self, _abandon_dead, self._sessions)

    async def session(self, proxy: Proxy | None = None) -> aiohttp.ClientSession:
        """The session for the running loop (made on first use there); through `proxy` if it is SOCKS, which
        is a kind of connection rather than a request option."""
        if self._given is not None:
            return self._given
        loop = asyncio.get_running_loop()
        socks = proxy if proxy is not None and proxy.socks else None
        key = (loop, socks.url if socks is not None else "")
        entry = self._sessions.get(key)
        if entry is not None and not entry[0].closed:
            return entry[0]
        import aiohttp

        _abandon_dead(self._sessions)
        t = self.timeout
        session = aiohttp.ClientSession(
            connector=_connector(socks),
            # `connect` bounds all of getting a connection: the name lookup, every address, a proxy's tunnel;
            # `sock_connect` each address, `sock_read` each wait for the reply
            timeout=aiohttp.ClientTimeout(total=None, connect=t.connect, sock_connect=t.connect, sock_read=t.read),
            # Not trust_env: it reads the proxy variables (and ~/.netrc) again for every request, ~0.6 ms of a
            # model call here, and by narrower rules. `proxy()` reads them once per URL, by shou's.
            auto_decompress=True,
            **_header_limits(),
        )
        closer = _close_with_loop(session)
        await anext(closer)  # started on this loop: the loop finalises it (closing the session) when it ends
        self._sessions[key] = (session, closer)
        _MADE[session] = loop
        return session

    def proxy(self, url: str) -> Proxy | None:
        """The proxy the environment names for `url` (`proxies.proxy_for`), read once per URL, as httpx read the
        environment once per client. `ModelError` for a proxy setting that cannot be used."""
        if url not in self._proxies:
            self._proxies[url] = proxy_for(url)
        return self._proxies[url]

    async def aclose(self) -> None:
        """Close the running loop's sessions (the others close with their loops)."""
        loop = asyncio.get_running_loop()
        for key in [k for k in self._sessions if k[0] is loop]:
            await self._sessions.pop(key)[1].aclose()


def _connector(socks: Proxy | None) -> Any:
    """The pool: plain TCP, or through a SOCKS proxy (the extra `socks`)."""
    import aiohttp

    options = {"limit": POOL_SIZE, "limit_per_host": 0, "keepalive_timeout": KEEPALIVE}
    if socks is None:
        return aiohttp.TCPConnector(**options)
    try:
        from aiohttp_socks import ProxyConnector, ProxyType
    except ImportError:
        raise ModelError(f"the model's requests go through a SOCKS proxy ({socks.url}), which needs the extra "
                         "`socks`: pip install 'shou[socks]' (or name an HTTP proxy, or list the host in "
                         "NO_PROXY)") from None
    host, _, port = socks.url.split("://", 1)[1].rpartition(":")
    user, password = socks.login or (None, None)
    kind = ProxyType.SOCKS4 if socks.url.startswith("socks4") else ProxyType.SOCKS5
    return ProxyConnector(host=host.strip("[]"), port=int(port), proxy_type=kind, username=user, password=password,
                          rdns=socks.remote_dns, **options)


def _abandon_dead(sessions: dict[tuple[asyncio.AbstractEventLoop, str], tuple[Any, Any]]) -> None:
    """Drop the sessions of loops that were closed without finalising them (`loop.close()` alone)."""
    for key in [k for k in sessions if k[0].is_closed()]:
        _abandon(sessions.pop(key)[0])


async def _close_with_loop(session: aiohttp.ClientSession) -> AsyncIterator[None]:
    try:
        yield
    finally:
        await session.close()


@atexit.register
def _close_at_exit() -> None:
    """Close the sessions whose loops never ended (those that did closed theirs)."""
    for session, loop in list(_MADE.items()):
        if session.closed or loop.is_running():  # running in another thread: not ours to touch
            continue
        if not loop.is_closed():
            try:
                loop.run_until_complete(session.close())
                continue
            except Exception:  # a loop left in a state that cannot run: close what can be closed below
                pass
        _abandon(session)


def _abandon(session: aiohttp.ClientSession) -> None:
    """Close what can be closed of a session whose loop cannot run it any more, without aiohttp's report of
    unclosed connections (its loop is gone, or will never run again)."""
    if session.closed or session.connector is None:
        return
    with warnings.catch_warnings():  # older aiohttp says close() should be awaited: its loop cannot
        warnings.simplefilter("ignore")
        closing = session.connector.close()  # marks it closed; the sockets go when their transports are collected
        if inspect.iscoroutine(closing):  # aiohttp 3.14: a coroutine, which on a dead loop has nothing to wait for
            try:
                closing.send(None)
            except StopIteration:
                pass
            else:
                closing.close()


@functools.cache
def _header_limits() -> dict[str, int]:
    """The parser limits this aiohttp lets a session raise (`max_headers` is recent)."""
    import aiohttp

    names = inspect.signature(aiohttp.ClientSession.__init__).parameters
    limits = {"max_line_size": MAX_HEADER_BYTES, "max_field_size": MAX_HEADER_BYTES, "max_headers": MAX_HEADERS}
    return {k: v for k, v in limits.items() if k in names}


@functools.cache
def _upload_class() -> type:
    """The payload class of large bodies (made on first use: aiohttp is imported only when needed)."""
    import aiohttp.payload

    class Upload(aiohttp.payload.BytesPayload):
        """A body written in pieces, each within `stall` seconds (`request_body`)."""

        def __init__(self, value: bytes, stall: float) -> None:
            with warnings.catch_warnings():  # "a large body ... might lock the event loop": it is written in pieces
                warnings.simplefilter("ignore", ResourceWarning)
                super().__init__(value, content_type="application/json")
            self.stall = stall

        async def write(self, writer: Any) -> None:
            await self.write_with_length(writer, None)

        async def write_with_length(self, writer: Any, content_length: int | None) -> None:
            data = self._value if content_length is None else self._value[:content_length]
            for start in range(0, len(data), UPLOAD_PIECE):
                try:
                    async with asyncio.timeout(self.stall):  # writer.write waits while the socket takes nothing
                        await writer.write(data[start:start + UPLOAD_PIECE])
                except TimeoutError:
                    raise UploadStalled(self.stall) from None

    return Upload

