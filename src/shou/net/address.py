"""Which addresses shou may connect to for the model: plainly global unicast ones, and what a person allows.

Everything else is refused: loopback, private, link-local, shared (CGNAT), documentation, benchmarking,
multicast, reserved and the IETF special-purpose blocks, in both families. IPv6 addresses that carry an
IPv4 address (IPv4-mapped `::ffff:0:0/96`, IPv4-compatible `::/96`, NAT64 `64:ff9b::/96`, 6to4
`2002::/16`) are judged by the IPv4 address inside, so `::127.0.0.1` and `2002:a9fe:a9fe::` are
refused like `127.0.0.1` and `169.254.169.254`. Of the rest of IPv6 only `2000::/3` can pass.

The table is written out here rather than taken from `ipaddress.is_global`, whose lists change between
Python versions and which passes multicast, `192.0.0.8`, site-local `fec0::/10` and embedded forms.
`web_allow_hosts` (hostnames, IP addresses or CIDR networks) lets chosen ones through.
"""

from __future__ import annotations

import asyncio
import contextlib
import ipaddress
import re
import socket
import threading
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from ..errors import ToolError

__all__ = ["AddressRefused", "Allow", "IPAddr", "IPNet", "check_address", "is_public", "refusal", "resolve_checked"]

IPAddr = ipaddress.IPv4Address | ipaddress.IPv6Address
IPNet = ipaddress.IPv4Network | ipaddress.IPv6Network
ALLOW_HINT = "a person can allow hosts with web_allow_hosts"

_V4 = ipaddress.IPv4Network
_V6 = ipaddress.IPv6Network
# Checked in order: the first match names the reason (255.255.255.255 is "broadcast", not "reserved").
_V4_DENIED: tuple[tuple[_V4, str], ...] = tuple((_V4(net), why) for net, why in (
    ("255.255.255.255/32", "the broadcast address"),
    ("0.0.0.0/8", "a 'this network' address"),
    ("10.0.0.0/8", "a private address"),
    ("100.64.0.0/10", "a shared (carrier-grade NAT) address"),
    ("127.0.0.0/8", "a loopback address"),
    ("169.254.0.0/16", "a link-local address"),
    ("172.16.0.0/12", "a private address"),
    ("192.0.0.0/24", "an IETF protocol-assignment address"),
    ("192.0.2.0/24", "a documentation address"),
    ("192.88.99.0/24", "a 6to4 relay anycast address"),
    ("192.168.0.0/16", "a private address"),
    ("198.18.0.0/15", "a benchmarking address"),
    ("198.51.100.0/24", "a documentation address"),
    ("203.0.113.0/24", "a documentation address"),
    ("224.0.0.0/4", "a multicast address"),
    ("240.0.0.0/4", "a reserved address"),
))
_V6_DENIED: tuple[tuple[_V6, str], ...] = tuple((_V6(net), why) for net, why in (
    ("::/128", "the unspecified address"),
    ("::1/128", "a loopback address"),
    ("64:ff9b:1::/48", "a local-use NAT64 address"),
    ("100::/64", "a discard-only address"),
    ("2001::/23", "an IETF protocol-assignment address"),
    ("2001:db8::/32", "a documentation address"),
    ("3fff::/20", "a documentation address"),
    ("fc00::/7", "a unique local (private) address"),
    ("fe80::/10", "a link-local address"),
    ("fec0::/10", "a site-local address"),
    ("ff00::/8", "a multicast address"),
))
_GLOBAL_UNICAST = _V6("2000::/3")
# IPv6 blocks whose address carries an IPv4 address, and how to take it out.
_MAPPED, _COMPAT, _NAT64, _6TO4 = _V6("::ffff:0:0/96"), _V6("::/96"), _V6("64:ff9b::/96"), _V6("2002::/16")


def _embedded(addr: ipaddress.IPv6Address) -> tuple[ipaddress.IPv4Address, str] | None:
    """The IPv4 address an IPv6 address stands for, and the name of the form, if it is one of those."""
    value = int(addr)
    if addr in _MAPPED:
        return ipaddress.IPv4Address(value & 0xFFFFFFFF), "IPv4-mapped"
    if addr in _COMPAT and value > 1:  # :: and ::1 are IPv6's own unspecified and loopback addresses
        return ipaddress.IPv4Address(value & 0xFFFFFFFF), "IPv4-compatible"
    if addr in _NAT64:
        return ipaddress.IPv4Address(value & 0xFFFFFFFF), "NAT64"
    if addr in _6TO4:
        return ipaddress.IPv4Address((value >> 80) & 0xFFFFFFFF), "6to4"
    return None


def refusal(addr: IPAddr) -> str | None:
    """Why `addr` is not plainly global unicast ("a loopback address", ...), or None if it is."""
    if isinstance(addr, ipaddress.IPv6Address):
        addr = ipaddress.IPv6Address(int(addr))  # drop a %scope: it says nothing about the address itself
        inner = _embedded(addr)
        if inner is not None:
            why = refusal(inner[0])
            return None if why is None else f"the {inner[1]} form of {inner[0]}, {why}"
        for net6, why in _V6_DENIED:
            if addr in net6:
                return why
        return None if addr in _GLOBAL_UNICAST else "not a global unicast address"
    for net4, why in _V4_DENIED:
        if addr in net4:
            return why
    return None


def is_public(addr: IPAddr) -> bool:
    """Whether `addr` is plainly global unicast: the only kind reached without an allow-list entry."""
    return refusal(addr) is None


@dataclass(frozen=True, slots=True)
class Allow:
    """The hosts a person allowed beyond public addresses: hostnames and IP networks, each on any port or,
    written `host:port` (`[::1]:8080` for IPv6), on that port only."""

    names: frozenset[str] = frozenset()
    nets: tuple[IPNet, ...] = ()
    name_ports: frozenset[tuple[str, int]] = frozenset()
    net_ports: tuple[tuple[IPNet, int], ...] = ()

    @classmethod
    def parse(cls, entries: Iterable[Any] | str | None) -> Allow:
        """From `web_allow_hosts`: hostnames, IP addresses or CIDR networks, each optionally `:port` (a
        string: separated by commas)."""
        if isinstance(entries, str):
            entries = re.split(r"[,\s]+", entries)
        names: set[str] = set()
        nets: list[IPNet] = []
        name_ports: set[tuple[str, int]] = set()
        net_ports: set[tuple[IPNet, int]] = set()
        for entry in entries or ():
            text = str(entry).strip()
            if not text:
                continue
            host, port = _split_port(text)
            try:
                net = ipaddress.ip_network(host.strip("[]"), strict=False)
            except ValueError:
                name = _bare(host)
                names.add(name) if port is None else name_ports.add((name, port))
                continue
            nets.append(net) if port is None else net_ports.add((net, port))
        return cls(frozenset(names), tuple(sorted(set(nets), key=str)), frozenset(name_ports),
                   tuple(sorted(net_ports, key=str)))

    @classmethod
    def of(cls, value: Allow | tuple[Iterable[str], Iterable[IPNet]] | Iterable[Any] | None) -> Allow:
        """An `Allow` from itself, a `(names, networks)` pair, a list of entries or None."""
        if isinstance(value, Allow):
            return value
        if isinstance(value, tuple) and len(value) == 2 and isinstance(value[0], set | frozenset):
            return cls(frozenset(_bare(n) for n in value[0]), tuple(value[1]))
        return cls.parse(value)

    @classmethod
    def from_settings(cls, settings: Any) -> Allow:
        """The allow-list of a settings object (`web_allow_hosts`; absent means none)."""
        return cls.parse(getattr(settings, "web_allow_hosts", None))

    def allows_name(self, host: str, port: int | None = None) -> bool:
        """Whether `host` itself was allowed by name (on `port`, for entries that name one)."""
        name = _bare(host)
        return name in self.names or (port is not None and (name, port) in self.name_ports)

    def allows(self, addr: IPAddr, port: int | None = None) -> bool:
        """Whether `addr` lies in an allowed network (or in one through its embedded IPv4 address), on
        `port` for entries that name one."""
        inner = _embedded(addr) if isinstance(addr, ipaddress.IPv6Address) else None
        forms = (addr,) if inner is None else (addr, inner[0])
        nets = [*self.nets, *(net for net, p in self.net_ports if p == port)]
        return any(a in net for net in nets for a in forms if a.version == net.version)


def _split_port(text: str) -> tuple[str, int | None]:
    """`host:port` or `[v6]:port` as (host, port); a bare IPv6 address or a host without one as (text, None)."""
    m = re.fullmatch(r"\[([^\]]+)\](?::(\d{1,5}))?", text)
    if m:
        return m.group(1), int(m.group(2)) if m.group(2) else None
    host, sep, port = text.rpartition(":")
    if sep and ":" not in host and port.isdigit() and 0 < int(port) < 65536:
        return host, int(port)
    return text, None


class AddressRefused(ToolError):
    """A host resolves to an address the policy refuses; `.reason` is the one-line why."""

    def __init__(self, host: str, addr: IPAddr, reason: str) -> None:
        written = host.strip().strip("[]").lower().rstrip(".")
        shown = f"{written} is {reason}" if _literal(host) is not None else f"{host} resolves to {addr}, {reason}"
        self.reason = shown
        super().__init__(f"refused: {shown}; shou only connects to public addresses ({ALLOW_HINT})")


def _bare(host: str) -> str:
    """`host` as a browser reaches it (shou.net.hostname), or as written when no browser could."""
    from .hostname import BadHost, canonical_host

    text = host.strip()
    try:
        return canonical_host(f"[{text}]" if ":" in text and not text.startswith("[") else text)
    except BadHost:
        return text.strip("[]").lower().rstrip(".")


def _literal(host: str) -> IPAddr | None:
    try:
        return ipaddress.ip_address(_bare(host))
    except ValueError:
        return None


async def _getaddrinfo(host: str, port: int) -> list[Any]:
    """`socket.getaddrinfo` on a daemon thread of its own: a lookup stuck in a slow resolver never holds up
    the interpreter's exit, as one in the loop's default executor would (its threads are joined at exit)."""
    loop = asyncio.get_running_loop()
    done: asyncio.Future[list[Any]] = loop.create_future()

    def settle(result: list[Any] | None, error: BaseException | None) -> None:
        if not done.done():
            done.set_exception(error) if error is not None else done.set_result(result or [])

    def work() -> None:
        try:
            result, error = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM), None
        except BaseException as e:
            result, error = None, e
        with contextlib.suppress(RuntimeError):  # the loop closed while we looked the name up
            loop.call_soon_threadsafe(settle, result, error)

    threading.Thread(target=work, name="shou-resolve", daemon=True).start()
    return await done


async def resolve_checked(host: str, port: int, allow: Allow) -> list[IPAddr]:
    """Resolve `host` once and return its addresses if every one passes; `AddressRefused` if any does not.

    Connect to one of the returned addresses, never to `host` again: a second lookup could answer
    differently (DNS rebinding). A host allowed by name passes with whatever it resolves to.
    """
    addr = _literal(host)
    if addr is not None:
        addrs = [addr]
    else:
        try:
            infos = await _getaddrinfo(_bare(host), port)
        except (OSError, UnicodeError) as e:
            raise ToolError(f"cannot resolve host {host!r}: {e}") from None
        addrs = list(dict.fromkeys(ipaddress.ip_address(str(info[4][0]).split("%")[0]) for info in infos))
    if not allow.allows_name(host, port):
        for one in addrs:
            why = refusal(one)
            if why is not None and not allow.allows(one, port):
                raise AddressRefused(host, one, why)
    return addrs


async def check_address(host: str, port: int, allow: Allow | tuple[Any, Any] | Iterable[Any] | None = None) -> None:
    """Refuse `host` (an `AddressRefused`, which is a `ToolError`) unless all its addresses may be reached.

    A host allowed by name is not even resolved.
    """
    allowed = Allow.of(allow)
    if allowed.allows_name(host, port):
        return
    await resolve_checked(host, port, allowed)
