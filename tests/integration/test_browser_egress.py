"""Issue 10, item 6: the browser and web_fetch reach public addresses only, and Chromium never runs as root.

Real parts only: real Chromium, the real egress proxy, loopback servers that count what reaches them, and
`shou run` with the scripted model; the DNS-rebinding run uses a real DNS server on loopback, put in front
of the resolver by a private mount namespace (root only).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import re
import shutil
import socket
import socketserver
import struct
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import AsyncIterator, Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from ..fixtures.needs import need, need_module
from .conftest import shou_env, tool_messages

need_module("playwright")
need(any(shutil.which(n) for n in ("chromium", "chromium-browser", "google-chrome")),
     "no Chromium installed (apt-get install chromium)")

from shou.errors import ToolError  # noqa: E402
from shou.net import chromium  # noqa: E402
from shou.tools.base import ToolContext, ToolResult  # noqa: E402
from shou.tools.builtin.browser import browser, close_browsers  # noqa: E402

PNG = bytes.fromhex("89504e470d0a1a0a0000000d4948445200000001000000010806000000"
                    "1f15c4890000000d49444154789c6360f8cfc0f01f0005000201e5273ea20000000049454e44ae426082")


def _ipv6_loopback() -> bool:
    try:
        with socket.socket(socket.AF_INET6) as s:
            s.bind(("::1", 0))
        return True
    except OSError:
        return False


class Target:
    """Everything on one address the page must not reach: a TCP server (HTTP, websockets, TURN) and a UDP one."""

    def __init__(self, host: str) -> None:
        self.host = host
        self.url_host = f"[{host}]" if ":" in host else host
        self.tcp: list[bytes] = []
        self.udp: list[bytes] = []
        target = self

        class Handler(socketserver.BaseRequestHandler):
            def handle(self) -> None:
                self.request.settimeout(2)
                with contextlib.suppress(OSError):
                    target.tcp.append(self.request.recv(4096))
                    self.request.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: text/html\r\nContent-Length: 14\r\n"
                                         b"Connection: close\r\n\r\n<h1>inside</h1>")

        family = socket.AF_INET6 if ":" in host else socket.AF_INET
        cls = type("Server", (socketserver.ThreadingTCPServer,), {"address_family": family, "daemon_threads": True})
        self.server = cls((host, 0), Handler)
        self.port = self.server.server_address[1]
        threading.Thread(target=self.server.serve_forever, args=(0.05,), daemon=True).start()
        self.sock = socket.socket(family, socket.SOCK_DGRAM)
        self.sock.bind((host, 0))
        self.udp_port = self.sock.getsockname()[1]
        threading.Thread(target=self._udp, daemon=True).start()

    def _udp(self) -> None:
        with contextlib.suppress(OSError):
            while True:
                self.udp.append(self.sock.recvfrom(4096)[0])

    @property
    def url(self) -> str:
        return f"http://{self.url_host}:{self.port}"

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()
        self.sock.close()


class Site:
    """The allowed site on 127.0.0.1: serves `pages`, redirects /redirect to `redirect_to`, records every path."""

    def __init__(self) -> None:
        self.pages: dict[str, str] = {}
        self.redirect_to = ""
        self.hits: list[str] = []
        site = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                site.hits.append(self.path)
                if self.path == "/redirect":
                    self.send_response(302)
                    self.send_header("Location", site.redirect_to)
                    self.send_header("Content-Length", "0")
                    self.end_headers()
                    return
                png = self.path == "/control-img"
                body = PNG if png else site.pages.get(self.path, "<title>plain</title>ok").encode()
                self.send_response(200)
                self.send_header("Content-Type", "image/png" if png else "text/html; charset=utf-8")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, args=(0.05,), daemon=True).start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def site() -> Iterator[Site]:
    s = Site()
    yield s
    s.close()


@pytest.fixture(params=["127.0.0.2", "::1"])
def target(request: pytest.FixtureRequest) -> Iterator[Target]:
    if request.param == "::1" and not _ipv6_loopback():
        pytest.skip("this machine has no IPv6 loopback")
    t = Target(request.param)
    yield t
    t.close()


@pytest.fixture
async def ctx(tmp_path: Path) -> AsyncIterator[ToolContext]:
    ws = tmp_path / "ws"
    ws.mkdir()
    settings = SimpleNamespace(browser_timeout=5, web_allow_hosts=("127.0.0.1",))
    yield ToolContext(workspace=ws, session="egress", settings=settings)
    await close_browsers()


async def act(ctx: ToolContext, **args: Any) -> ToolResult:
    result = await browser.call(browser.validate(args), ctx)
    assert isinstance(result, ToolResult)
    return result


def attack_page(site: Site, t: Target) -> str:
    ws_target, ws_site = f"ws://{t.url_host}:{t.port}", site.url.replace("http:", "ws:")
    return f"""<html><head><title>attack</title><link rel="stylesheet" href="{t.url}/css"></head><body>
<img src="{t.url}/img"><img src="{site.url}/control-img"><iframe src="{t.url}/iframe"></iframe>
<a id="away" href="{t.url}/link">inside</a>
<script>
fetch("{t.url}/fetch").catch(() => 0);
fetch("{site.url}/control-fetch").catch(() => 0);
const x = new XMLHttpRequest(); x.open("GET", "{t.url}/xhr"); x.send();
try {{ new WebSocket("{ws_target}/ws"); }} catch (e) {{}}
try {{ new WebSocket("{ws_site}/control-ws"); }} catch (e) {{}}
try {{ new EventSource("{t.url}/sse"); navigator.sendBeacon("{t.url}/beacon", "x"); }} catch (e) {{}}
window.open("{t.url}/popup");
const pc = new RTCPeerConnection({{iceServers: [{{urls: "stun:{t.url_host}:{t.udp_port}"}},
  {{urls: "turn:{t.url_host}:{t.port}?transport=tcp", username: "u", credential: "p"}}]}});
pc.createDataChannel("x"); pc.createOffer().then(o => pc.setLocalDescription(o));
</script></body></html>"""


async def test_nothing_a_page_does_reaches_a_private_address(ctx: ToolContext, site: Site, target: Target) -> None:
    site.pages["/page"] = attack_page(site, target)
    opened = await act(ctx, action="navigate", url=f"{site.url}/page")
    assert "Opened attack" in opened.content
    deadline = time.monotonic() + 15
    controls = {"/control-img", "/control-fetch", "/control-ws"}  # the same requests to the allowed site arrive
    while not controls <= set(site.hits) and time.monotonic() < deadline:
        await asyncio.sleep(0.1)
    assert controls <= set(site.hits), site.hits
    await asyncio.sleep(2)  # WebRTC gathers candidates for a while after the offer
    assert (target.tcp, target.udp) == ([], [])  # subresources, fetch, XHR, frames, sockets, popup, WebRTC
    clicked = await act(ctx, action="click", selector="#away")  # the link leads to the proxy's refusal page
    assert "inside" not in (await act(ctx, action="read")).content, clicked.content
    site.redirect_to = f"{target.url}/redirected"
    with pytest.raises(ToolError, match=rf"^refused: {re.escape(target.host)} is a loopback address; "):
        await act(ctx, action="navigate", url=f"{site.url}/redirect")
    with pytest.raises(ToolError, match=rf"^refused: {re.escape(target.host)} is a loopback address; .*allow_hosts"):
        await act(ctx, action="tab_open", url=f"{target.url}/tab")
    assert target.tcp == [] and target.udp == []


async def test_chromium_runs_unprivileged_and_sandboxed(ctx: ToolContext) -> None:
    (ctx.workspace / "page.html").write_text("<title>Local</title><img id=pic src='pic.png'><p>workspace page</p>")
    (ctx.workspace / "pic.png").write_bytes(PNG)
    outside = ctx.workspace.parent / "outside.png"
    outside.write_bytes(PNG)
    (ctx.workspace / "link.png").symlink_to(outside)
    ctx.workspace.chmod(0o700)  # the browser user could not read this folder itself: shou serves the files
    opened = await act(ctx, action="navigate", url=(ctx.workspace / "page.html").as_uri())
    assert "Opened Local" in opened.content and "workspace page" in opened.content
    await act(ctx, action="wait", selector="#pic")
    from shou.tools.builtin._browser_session import get_session

    page = await (await get_session("egress", ctx.workspace, ctx.settings)).page()
    widths = await page.evaluate("""async () => {
        const img = document.getElementById('pic'); await img.decode().catch(() => 0);
        const other = new Image(); other.src = 'link.png'; await other.decode().catch(() => 0);
        return [img.naturalWidth, other.naturalWidth]; }""")
    assert widths == [1, 0]  # the workspace image is served, the symlink out of the workspace is not
    procs = [p for p in descendants(os.getpid()) if status_of(p).get("Name", "").startswith("chrom")]
    assert len(procs) >= 3, procs
    uid = chromium.BROWSER_UID if os.geteuid() == 0 else os.getuid()
    for pid in procs:
        st = status_of(pid)
        assert st["Uid"].split() == [str(uid)] * 4 and st["Gid"].split() == [str(uid)] * 4, (pid, st)
        if os.geteuid() == 0:
            assert st["Groups"] == "", (pid, st)
    main = [p for p in procs if "--type=" not in cmdline(p)]
    assert main and all(status_of(p)["CapEff"] == "0000000000000000" for p in main)
    renderers = [p for p in procs if "--type=renderer" in cmdline(p)]
    assert renderers
    if not chromium._sandbox_failed:  # Chromium's own sandbox started: no --no-sandbox, renderers under seccomp
        assert all("--no-sandbox" not in cmdline(p) for p in procs)
        assert all(status_of(p)["Seccomp"] == "2" for p in renderers)


async def test_no_sandbox_only_when_chromium_sandbox_cannot_start(tmp_path: Path) -> None:
    # A Chromium whose sandbox fails the way a machine without user namespaces makes it fail.
    real = next(p for n in ("chromium", "chromium-browser", "google-chrome") if (p := shutil.which(n)))
    folder = Path(tempfile.mkdtemp(prefix="shou-test-chromium-"))  # the browser user must reach the script
    folder.chmod(0o755)
    fake = folder / "chromium-without-sandbox"
    fake.write_text(f"""#!/bin/sh
case " $* " in *" --no-sandbox "*) exec {real} "$@" ;; esac
echo "[0:0:FATAL:zygote_host_impl_linux.cc(128)] No usable sandbox! (simulated)" >&2
exit 1
""")
    fake.chmod(0o755)
    ws = tmp_path / "ws"
    ws.mkdir()
    (ws / "p.html").write_text("<title>Fallback</title>still works")
    ctx = ToolContext(workspace=ws, session="fallback", settings=SimpleNamespace(browser_executable=str(fake)))
    try:
        assert "Opened Fallback" in (await act(ctx, action="navigate", url=(ws / "p.html").as_uri())).content
        assert str(fake) in chromium._sandbox_failed
        procs = [p for p in descendants(os.getpid()) if status_of(p).get("Name", "").startswith("chrom")]
        main = [p for p in procs if "--type=" not in cmdline(p)]
        assert main and all("--no-sandbox" in cmdline(p) for p in main)
        assert all(status_of(p)["Uid"].split()[0] != "0" for p in procs)  # without its sandbox, still not root
    finally:
        await close_browsers()
        shutil.rmtree(folder)


def descendants(pid: int) -> list[int]:
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            with contextlib.suppress(OSError):
                ppid = int(Path(f"/proc/{entry}/stat").read_text().rsplit(")", 1)[1].split()[1])
                children.setdefault(ppid, []).append(int(entry))
    out, todo = [], [pid]
    while todo:
        for child in children.get(todo.pop(), []):
            out.append(child)
            todo.append(child)
    return out


def status_of(pid: int) -> dict[str, str]:
    with contextlib.suppress(OSError):
        lines = Path(f"/proc/{pid}/status").read_text().splitlines()
        return {k: v.strip() for k, _, v in (line.partition(":") for line in lines)}
    return {}


def cmdline(pid: int) -> str:
    with contextlib.suppress(OSError):
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
    return ""


# ---------------------------------------------------------------- through `shou run`


def test_shou_run_browser_cannot_open_loopback(serve: Callable[..., Any], shou: Callable[..., Any],
                                               site: Site) -> None:
    srv = serve([{"tool_calls": [{"name": "browser", "arguments": {"action": "navigate", "url": f"{site.url}/"}}]},
                 {"text": "I could not open it."}])
    r = shou("run", "Open the admin page on this machine.", server=srv, timeout=180)
    assert r.returncode == 0, r.stderr
    result = tool_messages(srv.requests[1])[-1]["content"]
    assert "refused: 127.0.0.1 is a loopback address" in result and "web_allow_hosts" in result
    assert site.hits == []


class FakeDNS:
    """A DNS server on a loopback address, port 53: A answers from `answers`; a list is answered in turn."""

    def __init__(self, answers: dict[str, list[str]]) -> None:
        self.answers = answers
        self.queries: list[tuple[str, int]] = []
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        self.host = f"127.53.{os.getpid() % 250 + 1}.{int(time.time()) % 250 + 1}"
        self.sock.bind((self.host, 53))
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self) -> None:
        with contextlib.suppress(OSError):
            while True:
                data, peer = self.sock.recvfrom(512)
                with contextlib.suppress(Exception):
                    self.sock.sendto(self._answer(data), peer)

    def _answer(self, query: bytes) -> bytes:
        i, labels = 12, []
        while query[i]:
            labels.append(query[i + 1:i + 1 + query[i]].decode())
            i += 1 + query[i]
        qtype = struct.unpack("!H", query[i + 1:i + 3])[0]
        name = ".".join(labels).lower()
        self.queries.append((name, qtype))
        record, rcode = b"", 0 if name in self.answers else 3  # NXDOMAIN for names it does not know
        if name in self.answers and qtype == 1:
            addrs = self.answers[name]
            addr = addrs.pop(0) if len(addrs) > 1 else addrs[0]
            record = b"\xc0\x0c" + struct.pack("!HHIH", 1, 1, 0, 4) + socket.inet_aton(addr)
        flags = 0x8180 | (query[2] & 0x01) << 8 | rcode
        return query[:2] + struct.pack("!HHHHH", flags, 1, 1 if record else 0, 0, 0) + query[12:i + 5] + record

    def close(self) -> None:
        self.sock.close()


def test_shou_run_web_fetch_refuses_private_names_and_dns_rebinding(serve: Callable[..., Any], tmp_path: Path,
                                                                    workspace: Path, site: Site) -> None:
    need(os.geteuid() == 0 and shutil.which("unshare") is not None, "needs root and unshare (a private resolv.conf)")
    port = site.url.rsplit(":", 1)[1]
    dns = FakeDNS({"private.test": ["10.1.2.3"], "rebind.test": ["93.184.215.14", "127.0.0.1"]})
    resolv = tmp_path / "resolv.conf"
    resolv.write_text(f"nameserver {dns.host}\noptions timeout:2 attempts:2\n")
    srv = serve([
        {"tool_calls": [{"name": "web_fetch", "arguments": {"url": f"http://private.test:{port}/"}}]},
        {"tool_calls": [{"name": "web_fetch", "arguments": {"url": f"http://rebind.test:{port}/"}}]},
        {"text": "Both were refused."},
    ])
    mount = 'mount --bind "$0" /etc/resolv.conf && exec "$@"'
    try:
        r = subprocess.run(["unshare", "--mount", "--propagation", "private", "--", "sh", "-c", mount, str(resolv),
                            sys.executable, "-m", "shou", "run", "Read both intranet pages."],
                           cwd=workspace, env=shou_env(tmp_path, srv), capture_output=True, text=True, timeout=120)
    finally:
        dns.close()
    assert r.returncode == 0, r.stderr
    first = tool_messages(srv.requests[1])[-1]["content"]
    assert "refused: private.test resolves to 10.1.2.3" in first
    second = tool_messages(srv.requests[2])[-1]["content"]
    assert "refused: rebind.test resolves to 127.0.0.1, a loopback address" in second
    assert [q for q in dns.queries if q == ("rebind.test", 1)][:2] == [("rebind.test", 1)] * 2  # it did rebind
    assert site.hits == []
