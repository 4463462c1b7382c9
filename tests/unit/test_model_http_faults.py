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


async def test_a_socks_proxy_is_refused_with_a_message_and_gets_no_plaintext_request(
        clean_proxies: pytest.MonkeyPatch) -> None:
    async with Recorder() as socks:
        clean_proxies.setenv("ALL_PROXY", f"socks5://127.0.0.1:{socks.port}")
        with pytest.raises(ModelError, match="SOCKS") as e:
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

    def hanging(host: Any, *args: Any, **kw: Any) -> Any:
        if host in ("slowdns.test", b"slowdns.test"):
            time.sleep(8)
        return real(host, *args, **kw)

    monkeypatch.setattr(socket, "getaddrinfo", hanging)
    t0 = time.monotonic()
    with pytest.raises(ModelUnreachableError, match="cannot reach"):
        await ask(model("http://slowdns.test/v1", timeout=0.5))
    assert time.monotonic() - t0 < 5


async def test_a_proxy_that_accepts_the_tunnel_and_says_nothing_ends_at_the_timeout(
        clean_proxies: pytest.MonkeyPatch) -> None:
    async def silent(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.read(65536)
        await asyncio.sleep(30)

    server = await asyncio.start_server(silent, "127.0.0.1", 0)
    clean_proxies.setenv("HTTPS_PROXY", f"http://127.0.0.1:{server.sockets[0].getsockname()[1]}")
    t0 = time.monotonic()
    try:
        with pytest.raises(ModelError) as e:
            await ask(model("https://models.example.invalid/v1", timeout=0.5))
    finally:
        server.close()
    assert e.value.retryable and time.monotonic() - t0 < 5


async def test_a_server_that_stops_reading_the_body_ends_at_the_timeout(clean_proxies: pytest.MonkeyPatch) -> None:
    listener = socket.socket()
    listener.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    listener.bind(("127.0.0.1", 0))
    listener.listen(8)
    listener.setblocking(False)

    async def stops(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.readuntil(b"\r\n\r\n")
        await asyncio.sleep(30)  # never reads the body, never answers

    server = await asyncio.start_server(stops, sock=listener)
    m = model(f"http://127.0.0.1:{listener.getsockname()[1]}/v1", timeout=0.5)
    t0 = time.monotonic()
    try:
        with pytest.raises(ModelUnavailableError, match="in time"):
            _ = [e async for e in m.stream([Message.user("x" * 8_000_000)], [])]
    finally:
        await m.aclose()
        server.close()
    assert time.monotonic() - t0 < 8


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
            await ask(model(f"http://multi.test:{port}/v1", timeout=0.6))
        took = time.monotonic() - t0
    finally:
        for s in listeners + fillers:
            s.close()
    assert took < 2.0  # one connect timeout in all, not one per address (4 x 0.6 s)


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
