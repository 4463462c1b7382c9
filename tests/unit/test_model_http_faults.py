"""The model client against hostile networks, proxies and settings, over real loopback sockets: what an
attacker's review of the aiohttp client found (each case failed on that client's first version)."""

from __future__ import annotations

import asyncio
import base64
import contextlib
import json
import socket
import struct
import subprocess
import sys
import threading
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest

from shou.errors import ConfigError, ModelCutOffError, ModelError, ModelUnavailableError, ModelUnreachableError
from shou.messages import Message
from shou.models.base import Completion, Retrying
from shou.models.openai_compat import OpenAICompatible
from shou.models.runtime import RetryPolicy

FAST = RetryPolicy(max_retries=0, max_unreachable_retries=0)
REPLY = json.dumps({"choices": [{"index": 0, "message": {"role": "assistant", "content": "hello"},
                                 "finish_reason": "stop"}], "usage": {"prompt_tokens": 3, "completion_tokens": 2}}
                   ).encode()
Handler = Callable[[asyncio.StreamReader, asyncio.StreamWriter], Awaitable[None]]


def ok(extra: bytes = b"", body: bytes = REPLY) -> bytes:
    return (b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nConnection: close\r\nContent-Length: %d\r\n%s\r\n%s"
            % (len(body), extra, body))


async def read_request(reader: asyncio.StreamReader) -> tuple[bytes, bytes]:
    head = await reader.readuntil(b"\r\n\r\n")
    length = next((int(line.split(b":", 1)[1]) for line in head.split(b"\r\n")
                   if line.lower().startswith(b"content-length:")), 0)
    return head, await reader.readexactly(length) if length else b""


class Recorder:
    """A loopback server that records each request's head and answers with `answer`."""

    def __init__(self, answer: bytes | None = None) -> None:
        self.heads: list[bytes] = []
        self.answer = ok() if answer is None else answer
        self.server: asyncio.Server | None = None

    async def __aenter__(self) -> Recorder:
        self.server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        return self

    async def __aexit__(self, *exc: object) -> None:
        assert self.server is not None
        self.server.close()

    @property
    def port(self) -> int:
        assert self.server is not None
        return self.server.sockets[0].getsockname()[1]

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            head, _ = await read_request(reader)
            self.heads.append(head)
            writer.write(self.answer)
            await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            writer.close()


async def ask(model: OpenAICompatible) -> list[Any]:
    try:
        return [e async for e in model.stream([Message.user("hi")], [])]
    finally:
        await model.aclose()


def model(url: str, **kw: Any) -> OpenAICompatible:
    kw.setdefault("retry", FAST)
    kw.setdefault("stream", False)
    return OpenAICompatible("m", base_url=url, **kw)


@pytest.fixture
def clean_proxies(monkeypatch: pytest.MonkeyPatch) -> pytest.MonkeyPatch:
    for name in ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "NO_PROXY", "http_proxy", "https_proxy", "all_proxy",
                 "no_proxy", "REQUEST_METHOD"):
        monkeypatch.delenv(name, raising=False)
    return monkeypatch


# ---------------------------------------------------------------- proxies


@pytest.mark.parametrize("no_proxy", ["localhost:{port}", "*.localhost,localhost", "internal.example,*",
                                      "127.0.0.0/8"])
async def test_a_host_no_proxy_lists_is_reached_directly_and_the_proxy_never_sees_the_key(
        clean_proxies: pytest.MonkeyPatch, no_proxy: str) -> None:
    async with Recorder() as proxy, Recorder() as target:
        clean_proxies.setenv("HTTP_PROXY", f"http://127.0.0.1:{proxy.port}")
        clean_proxies.setenv("NO_PROXY", no_proxy.format(port=target.port))
        host = "127.0.0.1" if "/" in no_proxy else "localhost"
        events = await ask(model(f"http://{host}:{target.port}/v1", api_key="sk-SECRET"))
    assert isinstance(events[-1], Completion)
    assert proxy.heads == [] and len(target.heads) == 1


@pytest.mark.parametrize("variable", ["ALL_PROXY", "all_proxy"])
async def test_all_proxy_and_a_proxy_without_a_scheme_are_used(clean_proxies: pytest.MonkeyPatch,
                                                               variable: str) -> None:
    async with Recorder() as proxy:
        clean_proxies.setenv(variable, f"127.0.0.1:{proxy.port}")
        events = await ask(model("http://models.example.invalid/v1"))
    assert isinstance(events[-1], Completion)
    assert proxy.heads[0].startswith(b"POST http://models.example.invalid/v1/chat/completions ")


async def test_without_the_socks_extra_a_socks_proxy_is_refused_and_gets_no_plaintext_request(
        clean_proxies: pytest.MonkeyPatch) -> None:
    clean_proxies.setitem(sys.modules, "aiohttp_socks", None)  # as if `shou[socks]` were not installed
    async with Recorder() as socks:
        clean_proxies.setenv("ALL_PROXY", f"socks5://127.0.0.1:{socks.port}")
        with pytest.raises(ModelError, match=r"SOCKS.*shou\[socks\]") as e:
            await ask(model("https://models.example.invalid/v1", api_key="sk-SECRET"))
    assert not e.value.retryable and socks.heads == []


async def test_netrc_logins_are_never_sent_to_a_proxy(clean_proxies: pytest.MonkeyPatch, tmp_path: Path) -> None:
    netrc = tmp_path / "netrc"
    netrc.write_text("default login git-user password NETRC-SECRET\n")
    netrc.chmod(0o600)
    clean_proxies.setenv("NETRC", str(netrc))
    clean_proxies.setenv("HOME", str(tmp_path))
    (tmp_path / ".netrc").write_text(netrc.read_text())
    (tmp_path / ".netrc").chmod(0o600)
    async with Recorder() as proxy:
        clean_proxies.setenv("HTTP_PROXY", f"http://127.0.0.1:{proxy.port}")
        await ask(model("http://models.example.invalid/v1"))
    assert proxy.heads and b"proxy-authorization" not in proxy.heads[0].lower()


# ---------------------------------------------------------------- every phase is bounded


async def test_a_name_lookup_that_hangs_ends_at_the_connect_timeout(monkeypatch: pytest.MonkeyPatch,
                                                                    clean_proxies: pytest.MonkeyPatch) -> None:
    real = socket.getaddrinfo
    released = threading.Event()

    def hanging(host: Any, *args: Any, **kw: Any) -> Any:
        if host in ("slowdns.test", b"slowdns.test"):
            released.wait(60)  # a lookup that outlasts the test unless the 0.5 s connect timeout ends it
        return real(host, *args, **kw)

    monkeypatch.setattr(socket, "getaddrinfo", hanging)
    t0 = time.monotonic()
    try:
        with pytest.raises(ModelUnreachableError, match="cannot reach"):
            await ask(model("http://slowdns.test/v1", timeout=0.5))
        assert time.monotonic() - t0 < 30
    finally:
        released.set()  # the lookup's thread ends; the loop's executor is not left waiting on it


async def test_a_proxy_that_accepts_the_tunnel_and_says_nothing_ends_at_the_timeout(
        clean_proxies: pytest.MonkeyPatch) -> None:
    async def silent(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.read(65536)
        await asyncio.sleep(300)  # far past the bound below: only the 0.5 s timeout ends the call in time

    server = await asyncio.start_server(silent, "127.0.0.1", 0)
    clean_proxies.setenv("HTTPS_PROXY", f"http://127.0.0.1:{server.sockets[0].getsockname()[1]}")
    t0 = time.monotonic()
    try:
        with pytest.raises(ModelError) as e:
            await ask(model("https://models.example.invalid/v1", timeout=0.5))
    finally:
        server.close()
    assert e.value.retryable and time.monotonic() - t0 < 30


async def test_a_server_that_stops_reading_the_body_ends_at_the_timeout(clean_proxies: pytest.MonkeyPatch) -> None:
    listener = socket.socket()
    listener.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    listener.bind(("127.0.0.1", 0))
    listener.listen(8)
    listener.setblocking(False)

    async def stops(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.readuntil(b"\r\n\r\n")
        await asyncio.sleep(300)  # never reads the body, never answers

    server = await asyncio.start_server(stops, sock=listener)
    m = model(f"http://127.0.0.1:{listener.getsockname()[1]}/v1", timeout=0.5)
    t0 = time.monotonic()
    try:
        with pytest.raises(ModelUnavailableError, match="stalled"):
            _ = [e async for e in m.stream([Message.user("x" * 8_000_000)], [])]
    finally:
        await m.aclose()
        server.close()
    assert time.monotonic() - t0 < 30  # only the 0.5 s stall timeout ends it before the server's 300 s


async def test_several_black_holed_addresses_share_one_connect_timeout(monkeypatch: pytest.MonkeyPatch,
                                                                      clean_proxies: pytest.MonkeyPatch) -> None:
    listeners, fillers, port = [], [], 0
    for i in range(2, 6):  # listening sockets with full backlogs: a SYN there is never answered
        s = socket.socket()
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        s.bind((f"127.0.0.{i}", port))
        port = s.getsockname()[1]
        s.listen(0)
        listeners.append(s)
        for _ in range(8):
            c = socket.socket()
            c.setblocking(False)
            with contextlib.suppress(BlockingIOError):
                c.connect((f"127.0.0.{i}", port))
            fillers.append(c)
    await asyncio.sleep(0.3)
    real = socket.getaddrinfo

    def four(host: Any, *args: Any, **kw: Any) -> Any:
        if host in ("multi.test", b"multi.test"):
            return [(socket.AF_INET, socket.SOCK_STREAM, 6, "", (f"127.0.0.{i}", port)) for i in range(2, 6)]
        return real(host, *args, **kw)

    monkeypatch.setattr(socket, "getaddrinfo", four)
    t0 = time.monotonic()
    try:
        with pytest.raises(ModelUnreachableError):
            await ask(model(f"http://multi.test:{port}/v1", timeout=3))
        took = time.monotonic() - t0
    finally:
        for s in listeners + fillers:
            s.close()
    # One connect timeout in all, not one per address (4 x 3 s = 12 s): the 3 s timeout is long next to the
    # rest of the call, so a busy machine stays far under 8 s and a timeout per address far over it.
    assert took < 8


# ---------------------------------------------------------------- settings that cannot work fail at once


@pytest.mark.parametrize("base_url", ["localhost:8000/v1", "127.0.0.1:8000/v1", "ftp://example.com/v1",
                                      "//example.com/v1", "http://bob:pw@/v1", "http://example.com:99999/v1"])
async def test_a_base_url_no_request_can_go_to_is_an_error_at_once_not_retried(base_url: str) -> None:
    m = OpenAICompatible("m", base_url=base_url, stream=False, retry=RetryPolicy(base=0.01))
    events: list[Any] = []
    with pytest.raises(ModelError, match="base URL") as e:
        async for ev in m.stream([Message.user("hi")], []):
            events.append(ev)
    await m.aclose()
    assert not e.value.retryable and not any(isinstance(ev, Retrying) for ev in events)
    assert "pw" not in str(e.value)


async def test_a_login_in_the_base_url_is_sent_as_basic_auth_as_httpx_did(clean_proxies: pytest.MonkeyPatch) -> None:
    async with Recorder() as server:
        events = await ask(model(f"http://bob:p%40ss@127.0.0.1:{server.port}/v1", api_key="sk-x"))
    assert isinstance(events[-1], Completion)
    assert b"Authorization: Basic " + base64.b64encode(b"bob:p@ss") in server.heads[0]
    assert server.heads[0].startswith(b"POST /v1/chat/completions ")


async def test_a_key_pasted_with_its_line_break_works_and_one_with_a_control_character_is_refused(
        clean_proxies: pytest.MonkeyPatch) -> None:
    async with Recorder() as server:
        events = await ask(model(f"http://127.0.0.1:{server.port}/v1", api_key="sk-abc\n"))
    assert isinstance(events[-1], Completion) and b"Authorization: Bearer sk-abc\r\n" in server.heads[0]
    with pytest.raises(ConfigError, match="control character") as e:
        model("http://127.0.0.1:1/v1", api_key="sk-a\nb", key_setting="DEEPSEEK_API_KEY")
    assert "DEEPSEEK_API_KEY" in str(e.value) and "sk-a" not in str(e.value)


# ---------------------------------------------------------------- what the server sends


async def test_a_reset_in_an_unframed_json_body_is_a_cut_reply_retried(clean_proxies: pytest.MonkeyPatch) -> None:
    async def resets(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await read_request(reader)
        writer.write(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nConnection: close\r\n\r\n" + REPLY[:40])
        await writer.drain()
        await asyncio.sleep(0.05)
        writer.get_extra_info("socket").setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        writer.transport.abort()

    server = await asyncio.start_server(resets, "127.0.0.1", 0)
    try:
        with pytest.raises(ModelCutOffError, match="cut off") as e:
            await ask(model(f"http://127.0.0.1:{server.sockets[0].getsockname()[1]}/v1"))
    finally:
        server.close()
    assert e.value.retryable


BIG_HEADER = b"X-Big: " + b"a" * 9000 + b"\r\n"
MANY_HEADERS = b"".join(b"X-H%d: v\r\n" % i for i in range(200))


@pytest.mark.parametrize("extra", [BIG_HEADER, MANY_HEADERS], ids=["9 KB header", "200 headers"])
async def test_large_response_headers_are_read(clean_proxies: pytest.MonkeyPatch, extra: bytes) -> None:
    async with Recorder(ok(extra)) as server:
        events = await ask(model(f"http://127.0.0.1:{server.port}/v1"))
    assert events[-1].message.text == "hello"


async def test_an_error_body_is_read_in_its_charset(clean_proxies: pytest.MonkeyPatch) -> None:
    body = "Überlastet".encode("iso-8859-1")
    answer = (b"HTTP/1.1 503 Service Unavailable\r\nContent-Type: text/plain; charset=iso-8859-1\r\n"
              b"Connection: close\r\nContent-Length: %d\r\n\r\n%s" % (len(body), body))
    async with Recorder(answer) as server:
        with pytest.raises(ModelUnavailableError, match="Überlastet"):
            await ask(model(f"http://127.0.0.1:{server.port}/v1"))


# ---------------------------------------------------------------- lifecycle


def test_loops_closed_without_finalising_their_sessions_leave_no_noise(tmp_path: Path) -> None:
    script = tmp_path / "loops.py"
    script.write_text('''
import asyncio, json, threading
from shou.messages import Message
from shou.models.openai_compat import OpenAICompatible
from shou.models.runtime import RetryPolicy
REPLY = json.dumps({"choices": [{"index": 0, "message": {"role": "assistant", "content": "hi"},
                    "finish_reason": "stop"}]}).encode()
ready, box = threading.Event(), {}
def serve():
    loop = asyncio.new_event_loop()
    async def handle(reader, writer):
        try:
            while True:
                head = await reader.readuntil(b"\\r\\n\\r\\n")
                n = [int(l.split(b":")[1]) for l in head.split(b"\\r\\n") if l.lower().startswith(b"content-length")]
                await reader.readexactly(n[0])
                writer.write(b"HTTP/1.1 200 OK\\r\\nContent-Type: application/json\\r\\n"
                             b"Content-Length: %d\\r\\n\\r\\n%s" % (len(REPLY), REPLY))
                await writer.drain()
        except Exception:
            writer.close()
    async def main():
        server = await asyncio.start_server(handle, "127.0.0.1", 0)
        box["port"] = server.sockets[0].getsockname()[1]
        ready.set()
        await asyncio.Event().wait()
    loop.run_until_complete(main())
threading.Thread(target=serve, daemon=True).start()
ready.wait()
model = OpenAICompatible("m", base_url=f"http://127.0.0.1:{box['port']}/v1", stream=False,
                         retry=RetryPolicy(max_retries=0))
async def ask():
    return [e async for e in model.stream([Message.user("hi")], [])][-1].message.text
for _ in range(3):
    loop = asyncio.new_event_loop()
    print(loop.run_until_complete(ask()))
    loop.close()  # no shutdown_asyncgens: the session is never finalised by its loop
loop = asyncio.new_event_loop()  # and one never closed at all
print(loop.run_until_complete(ask()))
''')
    # Default warning filters, as a user runs it. (With -W default, asyncio itself still warns about the
    # transports a loop closed without cleaning up still holds; their sockets close when collected.)
    r = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    assert r.stdout.split() == ["hi"] * 4
    assert "Unclosed" not in r.stderr and "Traceback" not in r.stderr, r.stderr


# ---------------------------------------------------------------- what the second review found


async def test_an_upper_case_https_base_url_sends_the_proxy_login_on_the_connect_only(
        clean_proxies: pytest.MonkeyPatch) -> None:
    async with Recorder(b"HTTP/1.1 403 Forbidden\r\nContent-Length: 0\r\nConnection: close\r\n\r\n") as proxy:
        clean_proxies.setenv("HTTPS_PROXY", f"http://puser:PROXY-SECRET@127.0.0.1:{proxy.port}")
        with pytest.raises(ModelUnreachableError) as e:
            await ask(model("HTTPS://models.example.invalid/v1", api_key="sk-x"))
    assert proxy.heads[0].startswith(b"CONNECT models.example.invalid:443 ")
    assert b"Proxy-Authorization: Basic " + base64.b64encode(b"puser:PROXY-SECRET") in proxy.heads[0]
    assert "PROXY-SECRET" not in str(e.value)


@pytest.mark.parametrize("url", ["http://bob:pa#ss-SECRET@127.0.0.1:9/v1", "http://bob:pa/ss-SECRET@127.0.0.1:9/v1",
                                 "http://bob:1234?SECRET@127.0.0.1:9/v1"])
async def test_a_password_with_an_unencoded_separator_never_shows_in_the_error(url: str) -> None:
    with pytest.raises(ModelError) as e:
        await ask(model(url))
    assert "SECRET" not in str(e.value) and "pa" not in str(e.value).split("cannot reach")[-1].split(";")[0]


async def test_a_proxy_password_with_an_unencoded_separator_never_shows_in_the_error(
        clean_proxies: pytest.MonkeyPatch) -> None:
    clean_proxies.setenv("HTTPS_PROXY", "http://me:pa#ss-SECRET@proxy.corp:3128")
    with pytest.raises(ModelError) as e:
        await ask(model("https://api.example.com/v1"))
    assert "SECRET" not in str(e.value)


@pytest.mark.parametrize("charset", ["idna", "punycode", "undefined", "no-such-charset"])
async def test_an_error_body_in_a_charset_that_is_no_text_encoding_is_still_a_model_error(
        clean_proxies: pytest.MonkeyPatch, charset: str) -> None:
    body = b"\xffoverloaded"
    answer = (b"HTTP/1.1 503 Service Unavailable\r\nContent-Type: text/plain; charset=%s\r\nConnection: close\r\n"
              b"Content-Length: %d\r\n\r\n%s" % (charset.encode(), len(body), body))
    async with Recorder(answer) as server:
        with pytest.raises(ModelUnavailableError, match="overloaded"):
            await ask(model(f"http://127.0.0.1:{server.port}/v1"))


class Writer:
    """aiohttp's side of a connection as a request body sees it: each write returns when the socket took it."""

    def __init__(self, delay: float | None) -> None:
        self.delay, self.pieces = delay, 0

    async def write(self, data: bytes) -> None:
        await (asyncio.sleep(self.delay) if self.delay is not None else asyncio.Event().wait())
        self.pieces += 1


async def test_a_large_body_that_keeps_going_out_is_not_cut_and_one_that_stops_is() -> None:
    from shou.models.connections import UPLOAD_PIECE, Timeout, UploadStalled, request_body

    body = b"x" * (UPLOAD_PIECE * 40)
    assert request_body(b"{}", Timeout(read=1)) == b"{}"  # a small body goes out at once, as bytes
    steady = request_body(body, Timeout(read=1))
    # each piece 10x within the timeout (a busy loop's late wake-up stays far inside it), the whole 4x past it
    writer = Writer(0.1)
    await steady.write_with_length(writer, None)
    assert writer.pieces == 40 and steady.size == len(body)  # sent with its length, not chunked
    with pytest.raises(UploadStalled):
        await request_body(body, Timeout(read=1)).write_with_length(Writer(None), None)


async def socks5_server(seen: list[bytes], target_port: int,
                        login: tuple[bytes, bytes] | None = None) -> asyncio.Server:
    """A minimal real SOCKS5 proxy (RFC 1928, with RFC 1929 user/password when `login` is given)."""
    async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        version, count = await reader.readexactly(2)
        methods = await reader.readexactly(count)
        seen.append(bytes([version, count]) + methods)
        if login is None:
            writer.write(b"\x05\x00")
        else:
            writer.write(b"\x05\x02")
            await reader.readexactly(1)
            user = await reader.readexactly((await reader.readexactly(1))[0])
            password = await reader.readexactly((await reader.readexactly(1))[0])
            seen.append(user + b":" + password)
            writer.write(b"\x01\x00" if (user, password) == login else b"\x01\x01")
        _, _, _, kind = await reader.readexactly(4)
        if kind == 3:
            seen.append(await reader.readexactly((await reader.readexactly(1))[0]))
        else:
            await reader.readexactly(4 if kind == 1 else 16)
        await reader.readexactly(2)
        up_r, up_w = await asyncio.open_connection("127.0.0.1", target_port)
        writer.write(b"\x05\x00\x00\x01" + bytes(6))
        await writer.drain()

        async def pipe(a: asyncio.StreamReader, b: asyncio.StreamWriter) -> None:
            with contextlib.suppress(ConnectionError):
                while data := await a.read(65536):
                    b.write(data)
                    await b.drain()
            b.close()

        await asyncio.gather(pipe(reader, up_w), pipe(up_r, writer))

    return await asyncio.start_server(serve, "127.0.0.1", 0)


@pytest.mark.parametrize(("scheme", "login"), [("socks5h", None), ("socks5", (b"me", b"p@ss"))])
async def test_model_requests_go_through_a_socks5_proxy(clean_proxies: pytest.MonkeyPatch, scheme: str,
                                                        login: tuple[bytes, bytes] | None) -> None:
    pytest.importorskip("aiohttp_socks")
    seen: list[bytes] = []
    async with Recorder() as target:
        server = await socks5_server(seen, target.port, login)
        port = server.sockets[0].getsockname()[1]
        auth = "me:p%40ss@" if login else ""
        clean_proxies.setenv("ALL_PROXY", f"{scheme}://{auth}127.0.0.1:{port}")
        try:
            events = await ask(model(f"http://localhost:{target.port}/v1", api_key="sk-x"))
        finally:
            server.close()
    assert events[-1].message.text == "hello"
    assert seen[0][:1] == b"\x05" and len(target.heads) == 1  # spoke SOCKS5, then the request went through
    if login:
        assert seen[1] == b"me:p@ss"
    else:
        assert seen[1] == b"localhost"  # socks5h: the proxy looked the name up


def test_a_model_dropped_after_its_loop_was_closed_leaves_no_noise(tmp_path: Path) -> None:
    script = tmp_path / "drop.py"
    script.write_text('''
import asyncio, gc, json
from shou.messages import Message
from shou.models.openai_compat import OpenAICompatible
REPLY = json.dumps({"choices": [{"index": 0, "message": {"role": "assistant", "content": "hi"},
                    "finish_reason": "stop"}]}).encode()
async def handle(reader, writer):
    head = await reader.readuntil(b"\\r\\n\\r\\n")
    n = [int(l.split(b":")[1]) for l in head.split(b"\\r\\n") if l.lower().startswith(b"content-length")]
    await reader.readexactly(n[0])
    writer.write(b"HTTP/1.1 200 OK\\r\\nContent-Type: application/json\\r\\n"
                 b"Content-Length: %d\\r\\n\\r\\n%s" % (len(REPLY), REPLY))
    await writer.drain()
loop = asyncio.new_event_loop()
server = loop.run_until_complete(asyncio.start_server(handle, "127.0.0.1", 0))
model = OpenAICompatible("m", base_url=f"http://127.0.0.1:{server.sockets[0].getsockname()[1]}/v1", stream=False)
async def ask():
    return [e async for e in model.stream([Message.user("hi")], [])][-1].message.text
print(loop.run_until_complete(ask()))
server.close()
loop.close()
del model
gc.collect()
print("dropped")
''')
    r = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    assert r.stdout.split() == ["hi", "dropped"]
    assert "Unclosed" not in r.stderr and "Traceback" not in r.stderr, r.stderr


def test_an_httpx_timeout_still_works_none_included() -> None:
    import httpx2

    from shou.models.connections import Timeout

    assert Timeout.of(httpx2.Timeout(5.0, connect=2.0)) == Timeout(read=5.0, connect=2.0)
    assert Timeout.of(httpx2.Timeout(None)) == Timeout(None, None) == Timeout.of(None)
    model("http://127.0.0.1:1/v1", timeout=httpx2.Timeout(None))  # constructs: no limits, as it meant before
