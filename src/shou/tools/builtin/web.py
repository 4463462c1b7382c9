"""`web_fetch(url)` and `web_search(query)`: reading the web without a browser.

web_fetch reaches public addresses only (SSRF), by the policy in `shou.net.address`: loopback, private,
link-local and every other non-global address is refused, IPv4 hidden in IPv6 forms included, and
`web_allow_hosts` (hostnames, IPs or CIDRs) lets chosen ones through. Redirects are followed by hand and
each hop's host is checked first, for a clear error. The request itself goes through shou's egress proxy
(`shou.net.egress`), which resolves the host once, checks every address and connects to a checked one:
a DNS server that answers differently between the check and the connect (DNS rebinding) reaches
nothing.

HTML becomes markdown with trafilatura (it keeps the main text, drops navigation and boilerplate, and
writes markdown itself, so one maintained library does the whole job). Other text comes back as is; binary
content is refused. Bodies are streamed and reading stops at the size limit.

web_search tries backends in order (`web_search_backends`), skipping those not configured and falling
back when one fails: Tavily (`TAVILY_API_KEY`), DuckDuckGo through the `ddgs` package (no key) and
SearXNG (`SEARXNG_URL`). Base URLs can be pointed elsewhere (`TAVILY_BASE_URL`, `DUCKDUCKGO_BASE_URL`).
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import os
import ssl
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

from ...errors import ToolError
from ...net.address import ALLOW_HINT, Allow, check_address
from ...net.egress import egress_proxy
from ..base import ToolContext, ToolResult, run_in_daemon_thread, tool
from ..truncate import truncate

if TYPE_CHECKING:
    import httpx

__all__ = ["check_address", "web_fetch", "web_search"]

DEFAULT_MAX_BYTES = 5_000_000
DEFAULT_TIMEOUT = 30.0
MAX_REDIRECTS = 5
BACKENDS = ("tavily", "duckduckgo", "searxng")
USER_AGENT = "Mozilla/5.0 (compatible; shou-agent/0.1; +https://pypi.org/project/shou/)"
HTML_TYPES = ("text/html", "application/xhtml+xml")
TEXT_TYPES = ("application/json", "application/xml", "application/javascript", "application/x-yaml",
              "application/yaml", "application/toml", "application/x-sh", "application/sql")


def _setting(ctx: ToolContext, attr: str, env: str | None = None, default: Any = None) -> Any:
    """A setting: the settings object's attribute, else its `.env` mapping, else the process environment."""
    value = getattr(ctx.settings, attr, None)
    if value is not None:
        return value
    if env:
        mapping = getattr(ctx.settings, "env", None) or {}
        value = mapping.get(env) or os.environ.get(env)
    return default if value in (None, "") else value


async def _read_capped(resp: httpx.Response, limit: int) -> tuple[bytes, bool]:
    """Read at most `limit` bytes of the (decoded) body; whether more was left unread."""
    buf = bytearray()
    async for chunk in resp.aiter_bytes():
        room = limit - len(buf)
        if len(chunk) > room:
            buf += chunk[:room]
            return bytes(buf), True  # leaving the stream closes the connection: the rest is never read
        buf += chunk
    return bytes(buf), False


def _kind(mime: str, head: bytes) -> str:
    """'html', 'text' or 'binary', from the content type and, when that says little, the first bytes."""
    if mime in HTML_TYPES:
        return "html"
    if mime.startswith("text/") or mime in TEXT_TYPES or mime.endswith(("+json", "+xml")):
        return "text"
    if mime and mime != "application/octet-stream":
        return "binary"
    if b"\0" in head[:8192]:
        return "binary"
    sniff = head[:512].lstrip().lower()
    return "html" if sniff.startswith((b"<!doctype html", b"<html")) else "text"


def _html_to_markdown(raw: bytes, url: str) -> tuple[str, str]:
    """(title, markdown) of an HTML page's main content."""
    try:
        import trafilatura
    except ImportError:  # web_search works without it, so the module stays importable
        raise ToolError("reading HTML needs trafilatura: pip install 'shou[web]'") from None

    text = trafilatura.extract(raw, url=url, output_format="markdown", include_links=True, include_tables=True,
                               favor_recall=True)
    if not text:  # very short or unusual pages: keep all their text rather than nothing
        text = trafilatura.html2txt(raw)
    meta = trafilatura.extract_metadata(raw)
    return (meta.title if meta is not None and meta.title else ""), (text or "") + _missing_links(raw, url, text or "")


MAX_LINKS = 50


def _missing_links(raw: bytes, url: str, text: str) -> str:
    """The page's links the extracted text left out, as a list to follow: trafilatura drops link-dense parts
    (a list of downloads or releases, an index) as navigation, and those are often what a task needs."""
    from urllib.parse import urljoin, urlsplit

    import lxml.html

    try:
        doc = lxml.html.fromstring(raw)
    except (ValueError, lxml.etree.ParserError):
        return ""
    seen: set[str] = set()
    links: list[str] = []
    for a in doc.iter("a"):
        href = (a.get("href") or "").strip()
        target = urljoin(url, href)
        if urlsplit(target).scheme not in ("http", "https") or target in seen or target in text:
            continue
        seen.add(target)
        label = " ".join(a.text_content().split())[:120] or target
        links.append(f"- [{label}]({target})")
        if len(links) >= MAX_LINKS:
            break
    return "\n\nLinks on the page not shown above:\n" + "\n".join(links) if links else ""


@tool(timeout=120, idempotent=True, untrusted_output=True)
async def web_fetch(url: str, ctx: ToolContext) -> ToolResult:
    """Fetch a web page and return its main content as markdown (other text as is).

    Only public http(s) addresses; binary files (images, PDFs, archives) are refused.

    Args:
        url: The http:// or https:// URL to fetch.
    """
    import httpx  # here, not with the module: most runs never fetch, and httpx takes ~60 ms to import

    limit = int(_setting(ctx, "web_max_bytes", default=DEFAULT_MAX_BYTES))
    seconds = float(_setting(ctx, "web_timeout", default=DEFAULT_TIMEOUT))
    allow = Allow.from_settings(ctx.settings)
    try:
        async with asyncio.timeout(seconds):
            return await _fetch(url, limit, seconds, allow, ctx.settings)
    except TimeoutError:
        raise ToolError(f"fetching {url} took longer than {seconds:g} s; try again later or another page") from None
    except httpx.ProxyError as e:  # a tunnel (https) the egress proxy refused: its status line says why
        if str(e).startswith("403 refused: "):
            raise ToolError(f"{str(e)[4:]}; shou only connects to public addresses ({ALLOW_HINT})") from None
        raise ToolError(f"could not fetch {url}: {e}") from None
    except httpx.HTTPError as e:
        raise ToolError(f"could not fetch {url}: {type(e).__name__}: {e}") from None


@functools.cache
def _tls() -> ssl.SSLContext:
    import httpx

    # Building one costs ~17 ms (loading the CA bundle), and a client with a proxy would build two per call.
    return httpx.create_ssl_context(trust_env=False)


async def _fetch(url: str, limit: int, seconds: float, allow: Allow, settings: Any = None) -> ToolResult:
    import httpx

    from ...permissions import Policy

    policy = Policy.from_settings(settings)
    current, hops = url.strip(), []
    # Only through the egress proxy, never a proxy from the environment: it connects to checked addresses only.
    async with httpx.AsyncClient(follow_redirects=False, trust_env=False, timeout=httpx.Timeout(seconds),
                                 proxy=egress_proxy(allow).url, verify=_tls(),
                                 headers={"User-Agent": USER_AGENT}) as client:
        for _ in range(MAX_REDIRECTS + 1):
            current = _readable(current)
            parts = urlsplit(current)
            await check_address(parts.hostname, parts.port or (443 if parts.scheme == "https" else 80), allow)
            async with client.stream("GET", current) as resp:
                refused = resp.headers.get("x-shou-refused") if resp.status_code == 403 else None
                if refused:  # the proxy's own answer for plain http
                    raise ToolError(f"refused: {refused}; shou only connects to public addresses ({ALLOW_HINT})")
                if resp.is_redirect and "location" in resp.headers:
                    hops.append(current)
                    current = str(resp.url.join(resp.headers["location"]))
                    # The policy judged the first URL; every place it leads to must pass it too.
                    verdict = policy.decide("web_fetch", {"url": current})
                    if verdict.outcome != "allow":
                        raise ToolError(f"{hops[-1]} redirected to {current}, which the permission policy does "
                                        f"not allow without a person ({verdict.why}); not followed")
                    continue
                return await _to_result(resp, current, hops, limit)
    raise ToolError(f"{url} redirected more than {MAX_REDIRECTS} times; stopped at {current}")


def _same_host(url: str, fetched: str) -> None:
    """Refuse a URL whose host the policy (shou.permissions.url_host) and httpx read differently: the host
    checked must be the host fetched."""
    import httpx

    from ...net.hostname import BadHost, canonical_host
    from ...permissions import url_host

    host = httpx.URL(fetched).host
    with contextlib.suppress(BadHost):
        host = canonical_host(f"[{host}]" if ":" in host else host)
    judged = url_host(url)
    if host != judged.strip("[]") and f"[{host}]" != judged and host != judged:
        raise BadHost(f"the policy reads its host as {judged!r} but it would fetch {host!r}")


def _readable(url: str) -> str:
    """`url` with its host as a browser reads it (`ｌｏｃａｌｈｏｓｔ` is `localhost`: the policy judged that
    host), or a `ToolError` saying what is wrong with it."""
    from ...net.hostname import BadHost, canonical_url

    try:
        parts = urlsplit(url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ToolError(f"{url!r} is not an http(s) URL; web_fetch reads http:// and https:// only")
        fetched = canonical_url(url)
        _same_host(url, fetched)
        return fetched
    except BadHost as e:
        raise ToolError(f"cannot fetch {url!r}: {e}") from None
    except ValueError as e:  # a port that is no number, an unbalanced bracket
        raise ToolError(f"{url!r} is not a valid URL: {e}") from None


async def _to_result(resp: httpx.Response, url: str, hops: list[str], limit: int) -> ToolResult:
    mime = resp.headers.get("content-type", "").split(";")[0].strip().lower()
    if resp.status_code >= 400:
        raise ToolError(f"HTTP {resp.status_code} {resp.reason_phrase} from {url}")
    if _kind(mime, b"x") == "binary":  # decided by the header alone: do not download what will be refused
        size = resp.headers.get("content-length", "unknown")
        raise ToolError(f"{url} is binary content ({mime}, {size} bytes); web_fetch only returns text")
    raw, cut = await _read_capped(resp, limit)
    kind = _kind(mime, raw)
    if kind == "binary":
        raise ToolError(f"{url} looks like binary content ({len(raw)} bytes); web_fetch only returns text")
    details = {"url": url, "status": resp.status_code, "content_type": mime, "bytes_read": len(raw),
               "cut_at_limit": cut, "redirects": hops}
    if kind == "html":
        title, body = await asyncio.to_thread(_html_to_markdown, raw, url)
    else:
        title, body = "", _decoded(raw, resp.charset_encoding)
    note = f"\n\n[the response was cut at {limit} bytes]" if cut else ""
    shown = truncate(body, keep="head", hint="the page is long; fetch a more specific page")
    head = f"# {title}\n" if title else ""
    return ToolResult(f"{head}URL: {url}\n\n{shown.text}{note}", details=details)


# ---------------------------------------------------------------- web_search


@dataclass(frozen=True, slots=True)
class SearchHit:
    """One search result: what the model sees."""

    title: str
    url: str
    snippet: str


class _BackendFailed(Exception):
    """A backend answered badly (HTTP error, not JSON, wrong shape): try the next one."""


def _hits(items: Any, title: str, url: str, snippet: str) -> list[SearchHit]:
    if not isinstance(items, list):
        raise _BackendFailed("the response has no 'results' list")
    return [SearchHit(str(i.get(title) or ""), str(i.get(url) or ""), str(i.get(snippet) or ""))
            for i in items if isinstance(i, dict) and i.get(url)]


def _json(resp: httpx.Response) -> Any:
    if resp.status_code != 200:
        raise _BackendFailed(f"HTTP {resp.status_code}: {resp.text[:200]}")
    try:
        return resp.json()
    except ValueError:
        raise _BackendFailed("the response is not JSON") from None


async def _tavily(ctx: ToolContext, query: str, n: int, seconds: float) -> list[SearchHit]:
    import httpx

    key = _setting(ctx, "tavily_api_key", "TAVILY_API_KEY")
    base = str(_setting(ctx, "tavily_base_url", "TAVILY_BASE_URL", "https://api.tavily.com")).rstrip("/")
    async with httpx.AsyncClient(timeout=seconds) as client:
        resp = await client.post(f"{base}/search", json={"query": query, "max_results": n},
                                 headers={"Authorization": f"Bearer {key}"})
    data = _json(resp)
    return _hits(data.get("results") if isinstance(data, dict) else None, "title", "url", "content")


async def _searxng(ctx: ToolContext, query: str, n: int, seconds: float) -> list[SearchHit]:
    import httpx

    base = str(_setting(ctx, "searxng_url", "SEARXNG_URL")).rstrip("/")
    async with httpx.AsyncClient(timeout=seconds) as client:
        resp = await client.get(f"{base}/search", params={"q": query, "format": "json"})
    if resp.status_code == 403:  # SearXNG's answer when the json format is not enabled
        raise _BackendFailed("HTTP 403: enable the json format in SearXNG's settings.yml (search.formats)")
    data = _json(resp)
    return _hits(data.get("results") if isinstance(data, dict) else None, "title", "url", "content")[:n]


async def _duckduckgo(ctx: ToolContext, query: str, n: int, seconds: float) -> list[SearchHit]:
    try:
        from ddgs import DDGS
    except ImportError:
        raise _BackendFailed("the ddgs package is not installed (pip install 'shou[web]')") from None
    base = _setting(ctx, "duckduckgo_base_url", "DUCKDUCKGO_BASE_URL")

    def run() -> list[dict[str, Any]]:
        client = DDGS(timeout=max(1, int(seconds)))
        if base:  # ddgs has no public knob for its endpoint; tests point its DuckDuckGo engine at a fake
            engine = client._get_engines("text", "duckduckgo")[0]
            engine.search_url = f"{str(base).rstrip('/')}/html/"
        return client.text(query, backend="duckduckgo", max_results=n)

    try:
        rows = await asyncio.wait_for(run_in_daemon_thread(run, {}), seconds + 5)
    except TimeoutError:
        raise _BackendFailed(f"no answer within {seconds:g} s") from None
    except Exception as e:  # ddgs raises DDGSException for blocks, timeouts and empty pages alike
        raise _BackendFailed(f"{type(e).__name__}: {e}") from None
    return _hits(rows, "title", "href", "body")


_SEARCHERS = {"tavily": _tavily, "duckduckgo": _duckduckgo, "searxng": _searxng}


def _configured(ctx: ToolContext, name: str) -> bool:
    if name == "tavily":
        return bool(_setting(ctx, "tavily_api_key", "TAVILY_API_KEY"))
    if name == "searxng":
        return bool(_setting(ctx, "searxng_url", "SEARXNG_URL"))
    import importlib.util

    return importlib.util.find_spec("ddgs") is not None


def format_hits(query: str, backend: str, hits: list[SearchHit], failures: list[str]) -> str:
    """The results as numbered title / URL / snippet blocks, saying which backend answered."""
    lines = [f"Search results for {query!r} (from {backend}):"]
    for i, h in enumerate(hits, 1):
        snippet = " ".join(h.snippet.split())
        lines.append(f"\n{i}. {h.title or '(no title)'}\n   {h.url}" + (f"\n   {snippet[:300]}" if snippet else ""))
    if failures:
        lines.append("\n(" + "; ".join(failures) + ")")
    lines.append("\nUse web_fetch on a URL to read the page.")
    return "\n".join(lines)


@tool(timeout=120, idempotent=True, untrusted_output=True)
async def web_search(query: str, ctx: ToolContext, max_results: int = 5) -> ToolResult:
    """Search the web; returns titles, URLs and snippets. Read a result with web_fetch.

    Args:
        query: What to search for, e.g. 'httpx streaming response size limit'.
        max_results: How many results to return (1-20).
    """
    import httpx

    if not query.strip():
        raise ToolError("query is empty; say what to search for")
    n = max(1, min(int(max_results), 20))
    seconds = float(_setting(ctx, "web_timeout", default=DEFAULT_TIMEOUT))
    order = tuple(_setting(ctx, "web_search_backends", default=BACKENDS))
    unknown = [b for b in order if b not in _SEARCHERS]
    if unknown:
        raise ToolError(f"unknown search backend(s) {unknown}; known: {', '.join(BACKENDS)}")
    usable = [b for b in order if _configured(ctx, b)]
    if not usable:
        raise ToolError("no web search backend is configured: set TAVILY_API_KEY (Tavily), install ddgs "
                        "(pip install 'shou[web]', DuckDuckGo) or set SEARXNG_URL (a SearXNG server); "
                        f"backends tried in order: {', '.join(order) or '(none)'}")
    failures: list[str] = []
    for name in usable:
        try:
            hits = await _SEARCHERS[name](ctx, query, n, seconds)
        except (_BackendFailed, httpx.HTTPError) as e:
            failures.append(f"{name} failed: {str(e) or type(e).__name__}")
            continue
        if not hits:
            failures.append(f"{name} found nothing")
            continue
        return ToolResult(format_hits(query, name, hits[:n], failures),
                          details={"backend": name, "failures": failures,
                                   "results": [{"title": h.title, "url": h.url, "snippet": h.snippet} for h in hits]})
    if all(f.endswith("found nothing") for f in failures):
        return ToolResult(f"No results for {query!r} ({'; '.join(failures)}); try other words.")
    raise ToolError("every search backend failed: " + "; ".join(failures))


def _decoded(raw: bytes, charset: str | None) -> str:
    """A text body in the charset the server named, UTF-8 when it named none or one Python does not know
    (`x-nonsense`: the page's text, not an error)."""
    try:
        return raw.decode(charset or "utf-8", errors="replace")
    except LookupError:
        return raw.decode("utf-8", errors="replace")
