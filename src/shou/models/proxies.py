"""Which proxy a model request goes through, from the environment, with the rules users know from curl and
httpx: `https_proxy` / `http_proxy` by the target's scheme, then `all_proxy`; lower case before upper
case (the standard library's reading, which also ignores `HTTP_PROXY` under CGI); a proxy without a
scheme is an HTTP proxy; `no_proxy` lists `*`, host names (a name covers its subdomains, with or without
a leading `.` or `*.`), `host:port`, IP addresses and CIDR networks.

aiohttp's own reading of the environment is narrower (no port, wildcard or CIDR in `no_proxy`, no
`all_proxy`, no https:// proxy, credentials from ~/.netrc), so the model client picks the proxy here and
hands aiohttp the result. Credentials in a proxy's URL become its `Proxy-Authorization` header (or the
SOCKS login); nothing else is ever sent to a proxy. SOCKS proxies (`socks4`, `socks4a`, `socks5`,
`socks5h`: the `h`/`a` forms let the proxy look names up) need the extra `socks` (aiohttp-socks), as httpx
needed its own; without it they are refused with that advice, never sent plain HTTP.
"""

from __future__ import annotations

import base64
import ipaddress
import os
from collections.abc import Mapping
from dataclasses import dataclass
from urllib.parse import unquote, urlsplit

from ..config import redact_urls
from ..errors import ModelError

__all__ = ["Proxy", "proxy_for"]

_DEFAULT_PORTS = {"http": 80, "https": 443}
_SOCKS = {"socks4": "socks4", "socks4a": "socks4", "socks5": "socks5", "socks5h": "socks5"}


@dataclass(frozen=True, slots=True)
class Proxy:
    """A proxy to send through: its URL without credentials, and the headers that log in to it. For a SOCKS
    proxy, `url` is its `socks4://` or `socks5://` address and `login` its user and password."""

    url: str
    headers: dict[str, str] | None = None
    login: tuple[str, str] | None = None
    remote_dns: bool = False

    @property
    def socks(self) -> bool:
        """Whether this is a SOCKS proxy (it needs a connection of its own kind, not a request option)."""
        return self.url.startswith("socks")


def proxy_for(url: str, environ: Mapping[str, str] | None = None) -> Proxy | None:
    """The proxy the environment names for `url`, or None (no proxy, or the host is in `no_proxy`).
    `ModelError` for a proxy setting that cannot be used."""
    proxies = _proxies(environ)
    target = urlsplit(url)
    scheme = target.scheme.lower()
    chosen = proxies.get(scheme) or proxies.get("all")
    try:
        host = target.hostname or ""
    except ValueError:  # a malformed base URL: the request itself says so
        return None
    if not chosen or _bypassed(host, _port(target, scheme), proxies.get("no", "")):
        return None
    return _parse(chosen, scheme)


def _proxies(environ: Mapping[str, str] | None) -> dict[str, str]:
    """`*_proxy` settings by scheme (`no` for no_proxy), read as `urllib.request.getproxies_environment`
    reads them: any case, then lower-case names win (an empty one unsets), and under CGI (`REQUEST_METHOD`)
    `HTTP_PROXY` is ignored, since a client can set that header (httpoxy)."""
    env = os.environ if environ is None else environ
    found: dict[str, str] = {}
    for name, value in env.items():
        if value and name.lower().endswith("_proxy"):
            found[name.lower()[:-6]] = value
    if "REQUEST_METHOD" in env:
        found.pop("http", None)
    for name, value in env.items():
        if name.endswith("_proxy"):  # written in lower case
            if value:
                found[name[:-6].lower()] = value
            else:
                found.pop(name[:-6].lower(), None)
    return found


def _port(target: object, scheme: str) -> int | None:
    try:
        return target.port or _DEFAULT_PORTS.get(scheme)  # type: ignore[attr-defined]
    except ValueError:  # a port out of range: the request itself will say so
        return None


def _parse(value: str, scheme: str) -> Proxy:
    raw = value.strip()
    if "://" not in raw:
        raw = "http://" + raw  # `host:port`, as curl and httpx take it
    where = redact_urls(raw)
    try:  # the error never quotes what it could not parse: part of a password may be in it
        parts = urlsplit(raw)
        host, port = parts.hostname, parts.port
    except ValueError:
        raise ModelError(f"the proxy for {scheme}:// requests ({where}) is not a valid URL; fix or unset "
                         f"{scheme}_proxy / all_proxy") from None
    kind = parts.scheme.lower()
    if kind in _SOCKS and host:
        login = (unquote(parts.username), unquote(parts.password or "")) if parts.username is not None else None
        netloc = f"[{host}]" if ":" in host else host
        remote = kind in ("socks4a", "socks5h")
        return Proxy(f"{_SOCKS[kind]}://{netloc}:{port or 1080}", login=login, remote_dns=remote)
    if kind.startswith("socks"):
        raise ModelError(f"the proxy for {scheme}:// requests ({where}) is a SOCKS proxy of a kind shou does not "
                         "know; use socks4, socks4a, socks5 or socks5h")
    if kind not in ("http", "https") or not host:
        raise ModelError(f"the proxy for {scheme}:// requests ({where}) must be an http:// or https:// URL with a "
                         f"host; fix or unset {scheme}_proxy / all_proxy")
    netloc = f"[{host}]" if ":" in host else host
    url = f"{kind}://{netloc}" + (f":{port}" if port else "")
    headers = None
    if parts.username is not None:
        login = f"{unquote(parts.username)}:{unquote(parts.password or '')}".encode()
        headers = {"Proxy-Authorization": "Basic " + base64.b64encode(login).decode()}
    return Proxy(url, headers)


def _bypassed(host: str, port: int | None, no_proxy: str) -> bool:
    """Whether `no_proxy` exempts `host` (lower case, no brackets) on `port`."""
    host = host.lower().rstrip(".")
    address = _address(host)
    for entry in (e.strip().lower() for e in no_proxy.split(",")):
        if not entry:
            continue
        if entry == "*":
            return True
        if "://" in entry:
            entry = urlsplit(entry).netloc
        name, want = _split_port(entry)
        if want == -1 or (want is not None and want != port):  # a port that is not a number matches nothing
            continue
        if address is not None:
            try:
                if address in ipaddress.ip_network(name.strip("[]"), strict=False):
                    return True
            except ValueError:
                pass
            continue
        domain = name.removeprefix("*").removeprefix(".").rstrip(".")
        if domain and (host == domain or host.endswith("." + domain)):
            return True
    return False


def _split_port(entry: str) -> tuple[str, int | None]:
    """`host:port`, `[v6]:port`, or a name, address or network without a port (None); -1 for a port that
    is not a number."""
    if entry.startswith("["):
        close = entry.find("]")
        rest = entry[close + 1:]
        return entry[1:close], _number(rest[1:]) if rest.startswith(":") else None
    if entry.count(":") == 1:
        name, _, port = entry.partition(":")
        return name, _number(port)
    return entry, None  # a name, or an IPv6 address or network written bare


def _number(port: str) -> int:
    return int(port) if port.isascii() and port.isdigit() else -1  # "²" is a digit to str.isdigit


def _address(host: str) -> ipaddress.IPv4Address | ipaddress.IPv6Address | None:
    try:
        return ipaddress.ip_address(host.strip("[]"))
    except ValueError:
        return None
