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
found dead by the next request; they are closed after `KEEPALIVE` seconds of rest.
"""

from __future__ import annotations

import asyncio
import atexit
import warnings
import weakref
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import aiohttp

POOL_SIZE = 1000
KEEPALIVE = 15.0  # seconds an idle connection is kept (aiohttp's default)
CONNECT_TIMEOUT = 10.0
# Every session made here and its loop, for the exit (weak keys: a closed session that is gone leaves).
_MADE: weakref.WeakKeyDictionary[Any, asyncio.AbstractEventLoop] = weakref.WeakKeyDictionary()


@dataclass(frozen=True, slots=True)
class Timeout:
    """How long a model request may wait: `connect` seconds to open a connection, `read` seconds for each
    next piece of the reply (a stream may run for minutes as long as it keeps coming)."""

    read: float = 120.0
    connect: float = CONNECT_TIMEOUT

    @classmethod
    def of(cls, value: Timeout | float) -> Timeout:
        """`value` as a `Timeout`: a number is the read timeout, with the default connect timeout (or less)."""
        if isinstance(value, Timeout):
            return value
        seconds = float(value)
        return cls(seconds, min(seconds, CONNECT_TIMEOUT))


class Connections:
    """A model's HTTP sessions, one per event loop (see the module's docstring)."""

    def __init__(self, timeout: Timeout | float, session: aiohttp.ClientSession | None = None) -> None:
        self.timeout = Timeout.of(timeout)
        self._given = session
        self._proxies: dict[str, tuple[Any, dict[str, str] | None]] = {}
        # loop -> (session, the async generator that closes it with the loop); entries of closed loops are
        # dropped when the next session is made (not weak keys: the session holds its loop)
        self._sessions: dict[asyncio.AbstractEventLoop, tuple[Any, Any]] = {}

    async def session(self) -> aiohttp.ClientSession:
        """The session for the running loop (made on first use there)."""
        if self._given is not None:
            return self._given
        loop = asyncio.get_running_loop()
        entry = self._sessions.get(loop)
        if entry is not None and not entry[0].closed:
            return entry[0]
        import aiohttp

        for old in [other for other in self._sessions if other.is_closed()]:
            del self._sessions[old]
        session = aiohttp.ClientSession(
            connector=aiohttp.TCPConnector(limit=POOL_SIZE, limit_per_host=0, keepalive_timeout=KEEPALIVE),
            timeout=aiohttp.ClientTimeout(total=None, connect=None, sock_connect=self.timeout.connect,
                                          sock_read=self.timeout.read),
            # Not trust_env: it reads the proxy variables (and ~/.netrc) again for every request, ~0.6 ms of
            # a model call here. `proxy()` reads them once per URL instead.
            auto_decompress=True,
        )
        closer = _close_with_loop(session)
        await anext(closer)  # started on this loop: the loop finalises it (closing the session) when it ends
        self._sessions[loop] = (session, closer)
        _MADE[session] = loop
        return session

    def proxy(self, url: str) -> tuple[Any, dict[str, str] | None]:
        """The proxy the environment names for `url` (`HTTP_PROXY`, `HTTPS_PROXY`, `NO_PROXY`, by aiohttp's own
        rules) and the headers that log in to it (credentials in its URL), or (None, None). Read once per URL,
        as httpx read them once per client."""
        found = self._proxies.get(url)
        if found is None:
            from aiohttp.helpers import get_env_proxy_for_url
            from yarl import URL

            try:
                proxy, auth = get_env_proxy_for_url(URL(url))
                found = (proxy, {"Proxy-Authorization": auth.encode()} if auth is not None else None)
            except LookupError:
                found = (None, None)
            self._proxies[url] = found
        return found

    async def aclose(self) -> None:
        """Close the running loop's session (the others close with their loops)."""
        loop = asyncio.get_running_loop()
        entry = self._sessions.pop(loop, None)
        if entry is not None:
            await entry[1].aclose()


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
        with warnings.catch_warnings():  # the connector says close() should be awaited; its loop is gone
            warnings.simplefilter("ignore")
            session.connector.close()  # marks it closed: no report of its connections when it is collected
