"""A filtering HTTP forward proxy on 127.0.0.1: the one way out for web_fetch and the browser.

For each connection it resolves the target host once, checks every address with the address policy
(`shou.net.address`) and connects to a checked address itself, so a DNS answer that changes between a
check and a connect (rebinding) reaches nothing. It speaks `CONNECT host:port` (a tunnel: https, wss,
anything over TCP) and absolute-form requests (`GET http://host/path`), which it forwards as one
origin-form request with `Connection: close` and then pipes. A refusal is a 403 whose status line and
`X-Shou-Refused` header say why.

One proxy serves one allow-list; all of them run on one daemon thread with its own event loop, so they
work whatever loop (or none) the caller has. Each requires its own random credential in
`Proxy-Authorization`, so other programs on the machine cannot use it to reach what shou may reach.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import dataclasses
import hmac
import logging
import os
import re
import secrets
import socket
import threading
from urllib.parse import urlsplit

from ..errors import ToolError
from .address import AddressRefused, Allow, resolve_checked

__all__ = ["EgressProxy", "egress_proxy"]

MAX_HEAD = 64 * 1024
HEAD_TIMEOUT = 30.0
CONNECT_TIMEOUT = 10.0
IDLE_TIMEOUT = 300.0
CLIENT_BUFFER = 64 * 1024  # loopback: plenty for GB/s
UPSTREAM_BUFFER = 512 * 1024  # a window for ~5 MB/s per connection at 100 ms round trip
# Headers about this hop only (RFC 9110 7.6.1); Transfer-Encoding stays, as the body is passed on as is.
HOP_HEADERS = frozenset({"connection", "keep-alive", "proxy-authorization", "proxy-authenticate", "proxy-connection",
                         "te", "trailer", "upgrade"})
_TOKEN = re.compile(r"[!#$%&'*+.^_`|~0-9A-Za-z-]+")
_HOST = re.compile(r"[0-9A-Za-z._~:%-]+")
_CTL = re.compile(r"[\x00-\x08\x0a-\x1f\x7f]")
log = logging.getLogger(__name__)


@dataclasses.dataclass(frozen=True, slots=True)
class EgressProxy:
    """A running proxy: where it listens, its credential and the allow-list it applies."""

    port: int
    username: str
    password: str
    allow: Allow

    @property
    def server(self) -> str:
        """The proxy's address without the credential."""
        return f"http://127.0.0.1:{self.port}"

    @property
    def url(self) -> str:
        """The proxy URL with the credential, for HTTP clients (httpx `proxy=`)."""
        return f"http://{self.username}:{self.password}@127.0.0.1:{self.port}"

    def playwright(self) -> dict[str, str]:
        """Playwright `proxy=` settings; `<-loopback>` makes Chromium send loopback addresses through it too."""
        return {"server": self.server, "username": self.username, "password": self.password, "bypass": "<-loopback>"}


class _Request:
    def __init__(self, method: str, target: str, headers: list[tuple[str, str]]) -> None:
        self.method, self.target, self.headers = method, target, headers

    def header(self, name: str) -> str | None:
        return next((v for k, v in self.headers if k.lower() == name), None)


def _parse_head(head: bytes) -> _Request | None:
    """A request head (through the blank line) as method, target and headers; None if malformed."""
    lines = head.decode("latin-1").removesuffix("\r\n\r\n").split("\r\n")
    parts = lines[0].split(" ")
    if len(parts) != 3 or not _TOKEN.fullmatch(parts[0]) or parts[2] not in ("HTTP/1.1", "HTTP/1.0"):
        return None
    headers = []
    for line in lines[1:]:
        name, sep, value = line.partition(":")
        if not sep or not _TOKEN.fullmatch(name) or _CTL.search(value):
            return None
        headers.append((name, value.strip(" \t")))
    if _CTL.search(parts[1]) or not parts[1]:
        return None
    return _Request(parts[0].upper(), parts[1], headers)


def _bracketed(req: _Request) -> str:
    """The request target, with brackets put back around an IPv6 host: httpx writes `http://::1:8080/x`
    (its Host header, `[::1]:8080`, has them), which no URL parser reads as that host and port."""
    m = re.fullmatch(r"\[([0-9A-Fa-f:.]+)\](:\d{1,5})?", req.header("host") or "")
    if m is None:
        return req.target
    bare = f"http://{m.group(1)}{m.group(2) or ''}"
    rest = req.target[len(bare):]
    if req.target[:len(bare)].lower() == bare.lower() and (not rest or rest.startswith(("/", "?"))):
        return f"http://[{m.group(1)}]{m.group(2) or ''}{rest}"
    return req.target


def _target(req: _Request) -> tuple[str, int, bytes | None] | None:
    """(host, port, head to send upstream or None for a tunnel), or None if the target is not understood."""
    if req.method == "CONNECT":
        host, sep, port = req.target.rpartition(":")
        host = host.removeprefix("[").removesuffix("]")
        if not sep or not port.isdigit() or not 0 < int(port) < 65536 or not _HOST.fullmatch(host):
            return None
        return host, int(port), None
    try:
        url = urlsplit(_bracketed(req))
        port = url.port or 80
    except ValueError:
        return None
    if url.scheme.lower() != "http" or not url.hostname or not _HOST.fullmatch(url.hostname):
        return None
    drop = HOP_HEADERS | {t.strip().lower() for t in (req.header("connection") or "").split(",")}
    lines = [f"{req.method} {url.path or '/'}{'?' + url.query if url.query else ''} HTTP/1.1"]
    if req.header("host") is None:
        lines.append(f"Host: {url.netloc.rpartition('@')[2]}")
    lines += [f"{k}: {v}" for k, v in req.headers if k.lower() not in drop]
    lines.append("Connection: close\r\n\r\n")
    return url.hostname, port, "\r\n".join(lines).encode("latin-1")


def _answer(status: int, phrase: str, body: str, extra: str = "") -> bytes:
    data = (body + "\n").encode()
    return (f"HTTP/1.1 {status} {phrase}\r\n{extra}Content-Type: text/plain; charset=utf-8\r\n"
            f"Content-Length: {len(data)}\r\nConnection: close\r\n\r\n").encode("latin-1", "replace") + data


class _Handler:
    def __init__(self, proxy: EgressProxy) -> None:
        self.allow = proxy.allow
        token = base64.b64encode(f"{proxy.username}:{proxy.password}".encode()).decode()
        self.auth = token.encode()

    async def __call__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            await self._serve(reader, writer)
        except Exception as e:  # a bad client or upstream only ends its own connection, never the proxy
            log.debug("egress connection ended: %s: %s", type(e).__name__, e)
        finally:
            writer.close()

    def _authorized(self, req: _Request) -> bool:
        scheme, _, token = (req.header("proxy-authorization") or "").partition(" ")
        return scheme.lower() == "basic" and hmac.compare_digest(token.strip().encode("latin-1"), self.auth)

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            async with asyncio.timeout(HEAD_TIMEOUT):
                head = await reader.readuntil(b"\r\n\r\n")
        except asyncio.LimitOverrunError:
            writer.write(_answer(431, "Request Header Fields Too Large", f"the request head exceeds {MAX_HEAD} bytes"))
            return
        except (asyncio.IncompleteReadError, TimeoutError, ConnectionError):
            return
        req = _parse_head(head)
        target = _target(req) if req is not None else None
        if req is None or target is None:
            writer.write(_answer(400, "Bad Request", "shou's egress proxy takes CONNECT host:port or GET http://..."))
            return
        if not self._authorized(req):
            writer.write(_answer(407, "Proxy Authentication Required", "this proxy is for shou's own clients",
                                 'Proxy-Authenticate: Basic realm="shou"\r\n'))
            return
        host, port, upstream_head = target
        try:
            addrs = await resolve_checked(host, port, self.allow)
        except AddressRefused as e:
            reason = _CTL.sub("?", e.reason)[:300]
            log.info("egress refused %s:%s: %s", host, port, reason)
            writer.write(_answer(403, f"refused: {reason}", str(e), f"X-Shou-Refused: {reason}\r\n"))
            return
        except ToolError as e:
            writer.write(_answer(502, "Bad Gateway", str(e)))
            return
        upstream = await _connect([str(a) for a in addrs], port)
        if upstream is None:
            writer.write(_answer(502, "Bad Gateway", f"could not connect to {host} port {port}"))
            return
        up_reader, up_writer = upstream
        # Little in flight: when a client stops reading (web_fetch at its size limit) the upstream must stop
        # soon, as it would without a proxy in between; loopback needs no large buffer to be fast.
        _bound(writer, socket.SO_SNDBUF, CLIENT_BUFFER)
        _bound(up_writer, socket.SO_RCVBUF, UPSTREAM_BUFFER)
        try:
            if upstream_head is None:
                writer.write(b"HTTP/1.1 200 Connection established\r\n\r\n")
            else:
                up_writer.write(upstream_head)
            await _pipe(reader, writer, up_reader, up_writer)
        finally:
            up_writer.close()


def _bound(writer: asyncio.StreamWriter, option: int, size: int) -> None:
    sock = writer.get_extra_info("socket")
    if sock is not None:
        with contextlib.suppress(OSError):
            sock.setsockopt(socket.SOL_SOCKET, option, size)


async def _connect(addrs: list[str], port: int) -> tuple[asyncio.StreamReader, asyncio.StreamWriter] | None:
    """A connection to the first of the checked addresses that answers (never to the name again)."""
    with contextlib.suppress(TimeoutError):
        async with asyncio.timeout(CONNECT_TIMEOUT):
            for addr in addrs:
                with contextlib.suppress(OSError):
                    return await asyncio.open_connection(addr, port)
    return None


async def _pipe(cr: asyncio.StreamReader, cw: asyncio.StreamWriter, ur: asyncio.StreamReader,
                uw: asyncio.StreamWriter) -> None:
    """Copy both ways until the upstream closes, either side fails, or nothing moves for IDLE_TIMEOUT."""
    loop = asyncio.get_running_loop()
    last = loop.time()

    async def copy(src: asyncio.StreamReader, dst: asyncio.StreamWriter) -> None:
        nonlocal last
        while data := await src.read(65536):
            last = loop.time()
            dst.write(data)
            await dst.drain()
        if dst is uw and uw.can_write_eof():  # the client finished sending: tell the upstream, await its answer
            uw.write_eof()

    up, down = asyncio.create_task(copy(cr, uw)), asyncio.create_task(copy(ur, cw))
    try:
        while not down.done() and not (up.done() and up.exception() is not None):
            await asyncio.wait({t for t in (up, down) if not t.done()}, timeout=min(IDLE_TIMEOUT, 30.0),
                               return_when=asyncio.FIRST_COMPLETED)
            if loop.time() - last >= IDLE_TIMEOUT:
                break
    finally:
        for task in (up, down):
            task.cancel()
        await asyncio.gather(up, down, return_exceptions=True)


# ---------------------------------------------------------------- one thread, one proxy per allow-list

_lock = threading.Lock()
_loop: asyncio.AbstractEventLoop | None = None
_proxies: dict[Allow, EgressProxy] = {}
_servers: list[asyncio.Server] = []


def _forget() -> None:  # a forked child has no proxy thread: it starts its own when it needs one
    global _loop, _lock
    _loop, _lock = None, threading.Lock()
    _proxies.clear()
    _servers.clear()


os.register_at_fork(after_in_child=_forget)


def egress_proxy(allow: Allow | None = None) -> EgressProxy:
    """The running proxy for `allow` (none: public addresses only), started on first use."""
    global _loop
    allow = allow or Allow()
    with _lock:
        proxy = _proxies.get(allow)
        if proxy is not None:
            return proxy
        if _loop is None:
            _loop = asyncio.new_event_loop()
            threading.Thread(target=_loop.run_forever, name="shou-egress", daemon=True).start()

        unbound = EgressProxy(0, "shou", secrets.token_urlsafe(24), allow)

        async def start() -> asyncio.Server:
            return await asyncio.start_server(_Handler(unbound), "127.0.0.1", 0, limit=MAX_HEAD)

        server = asyncio.run_coroutine_threadsafe(start(), _loop).result(timeout=10)
        proxy = _proxies[allow] = dataclasses.replace(unbound, port=server.sockets[0].getsockname()[1])
        _servers.append(server)  # the loop alone may not keep a listening server alive
        return proxy
