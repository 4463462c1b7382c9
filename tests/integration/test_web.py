"""web_fetch and web_search over real loopback HTTP: fake sites and fakes of each search service's format."""

from __future__ import annotations

import json
import re
import threading
import tracemalloc
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from types import SimpleNamespace
from typing import Any
from urllib.parse import parse_qs, urlsplit

import pytest

from shou.errors import ToolError
from shou.tools.base import ToolContext, ToolResult
from shou.tools.builtin.web import DEFAULT_MAX_BYTES, web_fetch, web_search

from ..fixtures.needs import need_module

need_module("trafilatura")

ARTICLE = """<html><head><title>Otters of the river</title></head><body>
<nav><a href="/">Home</a> | <a href="/about">About</a></nav>
<article><h1>Otters of the river</h1>
<p>River otters are semiaquatic mammals that live along rivers and lakes. They eat fish, frogs and crayfish,
and they can hold their breath for up to eight minutes while they hunt under water.</p>
<h2>Where they live</h2>
<p>Otters build dens called holts in the banks of rivers. A family group shares one holt through the winter,
and the young stay with their mother for about a year before they leave to find their own stretch of river.</p>
<ul><li>Holts have underwater entrances.</li><li>They mark territory with scent.</li></ul>
<p>Read more at <a href="https://example.org/otters">the otter trust</a>.</p></article>
<footer>Copyright 2026</footer></body></html>"""
BIG = 50 * 1024 * 1024
DDG_HTML = """<html><body><div class="serp__results"><div class="result results_links web-result">
<div class="links_main links_deep result__body"><h2 class="result__title">
<a class="result__a" href="https://otters.example/one">Otter facts</a></h2>
<a class="result__snippet" href="https://otters.example/one">All about <b>otters</b> and rivers.</a>
</div></div></div></body></html>"""


class Site:
    """A threaded loopback server; `routes` maps a path to a function writing the whole response."""

    def __init__(self) -> None:
        self.routes: dict[str, Callable[[BaseHTTPRequestHandler], None]] = {}
        self.sent = 0
        self.requests: list[tuple[str, str, bytes]] = []
        site = self

        class Handler(BaseHTTPRequestHandler):
            def handle_any(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                site.requests.append((self.command, self.path, self.rfile.read(length)))
                route = site.routes.get(urlsplit(self.path).path)
                if route is None:
                    self.send_error(404)
                    return
                route(self)

            do_GET = do_POST = handle_any

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()


def send(status: int, body: bytes | str, ctype: str = "text/html; charset=utf-8",
         headers: dict[str, str] | None = None) -> Callable[[BaseHTTPRequestHandler], None]:
    data = body.encode() if isinstance(body, str) else body

    def write(h: BaseHTTPRequestHandler) -> None:
        h.send_response(status)
        h.send_header("Content-Type", ctype)
        h.send_header("Content-Length", str(len(data)))
        for k, v in (headers or {}).items():
            h.send_header(k, v)
        h.end_headers()
        h.wfile.write(data)

    return write


@pytest.fixture
def site() -> Iterator[Site]:
    s = Site()
    yield s
    s.server.shutdown()
    s.server.server_close()


def context(tmp_path: Path, **settings: Any) -> ToolContext:
    # `env` is given (empty) so keys on the machine running the tests never leak into them.
    settings.setdefault("env", {})
    return ToolContext(workspace=tmp_path, session="s", settings=SimpleNamespace(**settings))


async def fetch(ctx: ToolContext, url: str) -> ToolResult:
    return await web_fetch.call(web_fetch.validate({"url": url}), ctx)


async def search(ctx: ToolContext, query: str) -> ToolResult:
    return await web_search.call(web_search.validate({"query": query}), ctx)


# ---------------------------------------------------------------- web_fetch


async def test_fetch_turns_html_into_markdown_when_loopback_is_allowed(site: Site, tmp_path: Path) -> None:
    site.routes["/otters"] = send(200, ARTICLE)
    result = await fetch(context(tmp_path, web_allow_hosts=("127.0.0.1",)), f"{site.url}/otters")
    assert result.content.startswith("# Otters of the river\n")
    assert "## Where they live" in result.content
    assert "- Holts have underwater entrances." in result.content
    assert "[the otter trust](https://example.org/otters)" in result.content
    assert "Copyright 2026" not in result.content  # boilerplate dropped
    assert result.details is not None and result.details["status"] == 200


@pytest.mark.parametrize(("host", "why"), [
    ("127.0.0.1", "a loopback address"), ("10.1.2.3", "a private address"),
    ("169.254.169.254", "a link-local address"), ("[::1]", "a loopback address"),
    ("[::ffff:127.0.0.1]", "the IPv4-mapped form of 127.0.0.1, a loopback address"),
])
async def test_private_addresses_are_refused_by_default(host: str, why: str, tmp_path: Path) -> None:
    with pytest.raises(ToolError, match=rf"^refused: {re.escape(host.strip('[]'))} is {re.escape(why)}; .*allow_hosts"):
        await fetch(context(tmp_path), f"http://{host}:9/secret")


async def test_names_resolving_to_loopback_are_refused(site: Site, tmp_path: Path) -> None:
    site.routes["/otters"] = send(200, ARTICLE)
    port = site.url.rsplit(":", 1)[1]
    with pytest.raises(ToolError, match=r"refused: localhost resolves to (127\.0\.0\.1|::1), a loopback address"):
        await fetch(context(tmp_path), f"http://localhost:{port}/otters")
    assert site.requests == []  # refused before any byte was sent


async def test_redirect_to_loopback_is_refused(site: Site, tmp_path: Path) -> None:
    # The first hop is allowed by name ("localhost"), the redirect target (127.0.0.1) is not.
    port = site.url.rsplit(":", 1)[1]
    site.routes["/go"] = send(302, "", headers={"Location": f"http://127.0.0.1:{port}/otters"})
    site.routes["/otters"] = send(200, ARTICLE)
    ctx = context(tmp_path, web_allow_hosts=("localhost",))
    with pytest.raises(ToolError, match=r"refused: 127\.0\.0\.1 is a loopback address"):
        await fetch(ctx, f"http://localhost:{port}/go")
    assert [p for _, p, _ in site.requests] == ["/go"]
    # With the target allowed too, the same redirect is followed.
    ok = await fetch(context(tmp_path, web_allow_hosts=("localhost", "127.0.0.0/8")), f"http://localhost:{port}/go")
    assert "Otters" in ok.content and ok.details is not None and len(ok.details["redirects"]) == 1


async def test_a_50mb_response_is_cut_at_the_limit(site: Site, tmp_path: Path) -> None:
    chunk = b"otter " * 10_922 + b"\n"  # ~64 KiB of text per write

    def stream(h: BaseHTTPRequestHandler) -> None:
        h.send_response(200)
        h.send_header("Content-Type", "text/plain; charset=utf-8")
        h.send_header("Content-Length", str(BIG))
        h.end_headers()
        try:
            while site.sent < BIG:
                h.wfile.write(chunk)
                site.sent += len(chunk)
        except (BrokenPipeError, ConnectionResetError):
            pass  # the client stopped reading: that is the point

    site.routes["/big"] = stream
    tracemalloc.start()
    try:
        result = await fetch(context(tmp_path, web_allow_hosts=("127.0.0.1",)), f"{site.url}/big")
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert result.details is not None
    assert result.details["bytes_read"] == DEFAULT_MAX_BYTES and result.details["cut_at_limit"]
    assert f"[the response was cut at {DEFAULT_MAX_BYTES} bytes]" in result.content
    assert site.sent < 12 * 1024 * 1024, f"the server sent {site.sent} bytes: reading did not stop"
    assert peak < 40 * 1024 * 1024, f"peak Python memory {peak} bytes"


async def test_a_charset_python_does_not_know_is_read_as_utf8(site: Site, tmp_path: Path) -> None:
    site.routes["/odd"] = send(200, "otters \u00e9t\u00e9 \xff".encode("utf-8") + b" \xfe",
                               ctype="text/plain; charset=x-nonsense")
    result = await fetch(context(tmp_path, web_allow_hosts=("127.0.0.1",)), f"{site.url}/odd")
    assert result.content.endswith("otters \u00e9t\u00e9 \u00ff \ufffd")


async def test_binary_is_refused_and_plain_text_returned(site: Site, tmp_path: Path) -> None:
    site.routes["/logo.png"] = send(200, b"\x89PNG\r\n\x1a\n" + b"\0" * 100, ctype="image/png")
    site.routes["/data.json"] = send(200, '{"otters": 3}', ctype="application/json")
    ctx = context(tmp_path, web_allow_hosts=("127.0.0.1",))
    with pytest.raises(ToolError, match=r"binary content \(image/png"):
        await fetch(ctx, f"{site.url}/logo.png")
    assert '{"otters": 3}' in (await fetch(ctx, f"{site.url}/data.json")).content
    with pytest.raises(ToolError, match="HTTP 404"):
        await fetch(ctx, f"{site.url}/missing")
    with pytest.raises(ToolError, match="not an http"):
        await fetch(ctx, "file:///etc/passwd")


# ---------------------------------------------------------------- web_search


def tavily_ok(h: BaseHTTPRequestHandler) -> None:
    send(200, json.dumps({"query": "otters", "response_time": 0.4, "answer": None, "images": [],
                          "results": [{"title": "Otter - Wikipedia", "url": "https://en.wikipedia.org/wiki/Otter",
                                       "content": "Otters are carnivorous mammals.", "score": 0.98,
                                       "raw_content": None}]}), "application/json")(h)


def searx_ok(h: BaseHTTPRequestHandler) -> None:
    query = parse_qs(urlsplit(h.path).query)
    assert query["format"] == ["json"]
    send(200, json.dumps({"query": query["q"][0], "number_of_results": 1, "results": [
        {"url": "https://otters.example/searx", "title": "Otters on SearXNG", "content": "A searx snippet.",
         "engine": "bing", "engines": ["bing"], "score": 1.0, "category": "general"}], "answers": [],
        "suggestions": [], "unresponsive_engines": []}), "application/json")(h)


async def test_search_falls_back_from_a_failing_backend(site: Site, tmp_path: Path) -> None:
    site.routes["/search"] = send(500, "upstream exploded", "text/plain")
    site.routes["/searx/search"] = searx_ok
    ctx = context(tmp_path, web_search_backends=("tavily", "searxng"), tavily_api_key="tvly-test",
                  tavily_base_url=site.url, searxng_url=f"{site.url}/searx")
    result = await search(ctx, "otters")
    assert "from searxng" in result.content and "tavily failed: HTTP 500" in result.content
    assert "1. Otters on SearXNG\n   https://otters.example/searx\n   A searx snippet." in result.content
    method, path, body = site.requests[0]
    assert (method, path) == ("POST", "/search") and json.loads(body)["query"] == "otters"


async def test_search_bad_json_falls_back_and_tavily_format_is_read(site: Site, tmp_path: Path) -> None:
    site.routes["/searx/search"] = send(200, "<html>not json</html>", "text/html")
    site.routes["/search"] = tavily_ok
    ctx = context(tmp_path, web_search_backends=("searxng", "tavily"), tavily_api_key="tvly-test",
                  tavily_base_url=site.url, searxng_url=f"{site.url}/searx")
    result = await search(ctx, "otters")
    assert "from tavily" in result.content and "searxng failed: the response is not JSON" in result.content
    assert "1. Otter - Wikipedia\n   https://en.wikipedia.org/wiki/Otter" in result.content


async def test_duckduckgo_adapter_parses_ddg_html_from_a_fake(site: Site, tmp_path: Path) -> None:
    need_module("ddgs")
    site.routes["/html/"] = send(200, DDG_HTML)
    ctx = context(tmp_path, web_search_backends=("duckduckgo",), duckduckgo_base_url=site.url)
    result = await search(ctx, "otters")
    assert "from duckduckgo" in result.content
    assert "1. Otter facts\n   https://otters.example/one\n   All about otters and rivers." in result.content
    method, _, body = site.requests[0]
    assert method == "POST" and parse_qs(body.decode())["q"] == ["otters"]  # DuckDuckGo's html form


async def test_every_backend_failing_is_an_error(site: Site, tmp_path: Path) -> None:
    site.routes["/search"] = send(503, "down", "text/plain")
    ctx = context(tmp_path, web_search_backends=("tavily", "searxng"), tavily_api_key="k",
                  tavily_base_url=site.url, searxng_url=site.url)
    with pytest.raises(ToolError, match=r"every search backend failed: tavily failed: HTTP 503.*searxng failed"):
        await search(ctx, "otters")


async def test_no_backend_configured_is_a_clear_error(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("TAVILY_API_KEY", raising=False)
    monkeypatch.delenv("SEARXNG_URL", raising=False)
    ctx = context(tmp_path, web_search_backends=("tavily", "searxng"))
    with pytest.raises(ToolError, match="no web search backend is configured: set TAVILY_API_KEY"):
        await search(ctx, "otters")
