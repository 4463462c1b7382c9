"""Hosts as a browser resolves them, so a rule or an allow-list entry meets every spelling of one host.

Chromium (and the WHATWG URL standard) reads a host by percent-decoding it, mapping it with UTS #46
(non-transitional: fullwidth letters, ideographic full stops, case, soft hyphens, ...), encoding
non-ASCII labels as punycode, and reading a host that ends in a number as an IPv4 address in any of its
forms (`2130706433`, `0x7f.1`, `127.1`, `0177.0.0.1`). `ｌｏｃａｌｈｏｓｔ`, `LOCALHOST.` and `%6cocalhost`
all reach `localhost`; a rule written as `localhost` must see them as that. The `idna` package does the
UTS #46 mapping (Python's own `idna` codec is IDNA 2003 and maps differently).
"""

from __future__ import annotations

import ipaddress
import re
import socket
from urllib.parse import unquote, urlsplit, urlunsplit

__all__ = ["BadHost", "canonical_host", "canonical_url"]

_NUMBER = re.compile(r"(?:0x[0-9a-f]*|\d+)")
# What no host may hold once read (WHATWG's forbidden domain code points, ASCII part).
_FORBIDDEN = re.compile(r"[\x00-\x20#%/:<>?@\[\\\]^|\x7f]")


class BadHost(ValueError):
    """A host a browser would refuse to resolve; the message says why."""


def canonical_host(host: str) -> str:
    """`host` the way a browser connects to it: lowercase ASCII (punycode for other scripts), without
    trailing dots, IPv4 in dotted form, IPv6 compressed without brackets. `BadHost` if it is none."""
    text = host.strip()
    if text.startswith("[") and text.endswith("]"):
        try:
            return str(ipaddress.IPv6Address(text[1:-1].split("%")[0]))
        except ValueError:
            raise BadHost(f"{host!r} is not an IPv6 address") from None
    try:
        return str(ipaddress.IPv6Address(text))  # a bare IPv6 literal, as web_allow_hosts may hold one
    except ValueError:
        pass
    text = unquote(text, errors="strict")
    try:
        import idna

        mapped = idna.uts46_remap(text, std3_rules=False, transitional=False)
    except (UnicodeError, ValueError) as e:  # idna.IDNAError is a UnicodeError
        raise BadHost(f"{host!r} is not a valid host name ({e})") from None
    labels = mapped.rstrip(".").split(".")
    if not mapped.rstrip(".") or any(not label for label in labels):
        raise BadHost(f"{host!r} is not a valid host name (an empty label)")
    out = [_ascii_label(label, host) for label in labels]
    name = ".".join(out)
    if _FORBIDDEN.search(name):
        raise BadHost(f"{host!r} is not a valid host name (it holds a character no host may have)")
    return _ipv4(name) if _NUMBER.fullmatch(out[-1]) else name


def _ascii_label(label: str, host: str) -> str:
    if label.isascii():
        return label.lower()
    try:
        import idna

        return idna.alabel(label).decode("ascii")
    except (UnicodeError, ValueError) as e:
        raise BadHost(f"{host!r} is not a valid host name ({e})") from None


def _ipv4(name: str) -> str:
    """A host ending in a number is an IPv4 address, as a browser reads one, or not a host at all."""
    if not all(_NUMBER.fullmatch(part) for part in name.split(".")) or name.count(".") > 3:
        raise BadHost(f"{name!r} is not a valid IPv4 address")
    try:
        return socket.inet_ntoa(socket.inet_aton(name))  # inet_aton reads the forms browsers accept
    except OSError:
        raise BadHost(f"{name!r} is not a valid IPv4 address") from None


def canonical_url(url: str) -> str:
    """`url` with its host in canonical form (login and port kept), so what is fetched is what was checked.
    `BadHost` when the host cannot be read, or when readers disagree on it: browsers (WHATWG) read a backslash
    as a slash, Python and httpx as part of the login (`http://a\\@b/` is host a to one, b to the other), and
    spaces and control characters are dropped by some and kept by others."""
    if "\\" in url or re.search(r"[\x00-\x20\x7f]", url):
        raise BadHost("the URL holds a backslash, a space or a control character, which browsers and HTTP "
                      "clients read differently; spell it with / and %20")
    parts = urlsplit(url)
    if not parts.hostname:
        return url
    login, at, _ = parts.netloc.rpartition("@")
    port = f":{parts.port}" if parts.port is not None else ""
    if ":" in parts.hostname:  # an IPv6 literal names one address in any spelling: keep the one written
        canonical_host(f"[{parts.hostname}]")
        return url
    shown = canonical_host(parts.hostname)
    return urlunsplit(parts._replace(netloc=f"{login}{at}{shown}{port}"))
