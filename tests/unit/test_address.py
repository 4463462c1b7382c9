"""The address policy: only plainly global unicast passes, IPv4 hidden in IPv6 is judged as IPv4, allow-lists."""

from __future__ import annotations

import ipaddress
import re
import socket
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from shou.errors import ToolError
from shou.net.address import Allow, check_address, is_public, refusal, resolve_checked
from shou.tools.builtin import web

V4 = ipaddress.IPv4Address
V6 = ipaddress.IPv6Address

# Every address the red team's report (issue 10, item 8) says the old check let through.
ISSUE = {
    "::127.0.0.1": "the IPv4-compatible form of 127.0.0.1, a loopback address",
    "64:ff9b::a9fe:a9fe": "the NAT64 form of 169.254.169.254, a link-local address",
    "2002:a9fe:a9fe::": "the 6to4 form of 169.254.169.254, a link-local address",
    "fec0::1": "a site-local address",
    "192.0.0.8": "an IETF protocol-assignment address",
}
V4_BLOCKS = ["0.0.0.0/8", "10.0.0.0/8", "100.64.0.0/10", "127.0.0.0/8", "169.254.0.0/16", "172.16.0.0/12",
             "192.0.0.0/24", "192.0.2.0/24", "192.88.99.0/24", "192.168.0.0/16", "198.18.0.0/15", "198.51.100.0/24",
             "203.0.113.0/24", "224.0.0.0/4", "240.0.0.0/4", "255.255.255.255/32"]
V6_BLOCKS = ["::/128", "::1/128", "64:ff9b:1::/48", "100::/64", "2001::/23", "2001:db8::/32", "3fff::/20", "fc00::/7",
             "fe80::/10", "fec0::/10", "ff00::/8", "4000::/3", "8000::/1", "1000::/4", "400::/6"]
PUBLIC = ["8.8.8.8", "1.1.1.1", "93.184.215.14", "2606:4700::1111", "2a00:1450:4001:80b::200e", "64:ff9b::808:808",
          "::ffff:8.8.8.8", "2002:808:808::1", "172.15.255.255", "172.32.0.0", "100.63.255.255", "100.128.0.0",
          "192.0.1.0", "198.17.255.255", "198.20.0.0", "223.255.255.255", "2001:200::1", "3fff:1000::1"]


@pytest.mark.parametrize(("host", "why"), ISSUE.items())
async def test_the_addresses_in_the_issue_are_refused_by_web_check_address(host: str, why: str) -> None:
    # Through the name web.py has always exported (and with its old allow-list shape): that is what callers use.
    with pytest.raises(ToolError, match=rf"^refused: {re.escape(host)} is {re.escape(why)}; "):
        await web.check_address(host, 80, (set(), []))
    assert refusal(ipaddress.ip_address(host)) == why


@pytest.mark.parametrize("block", V4_BLOCKS + V6_BLOCKS)
def test_every_special_block_is_refused_at_both_ends_and_inside(block: str) -> None:
    net = ipaddress.ip_network(block)
    for addr in {net.network_address, net.broadcast_address, net.network_address + net.num_addresses // 2}:
        assert not is_public(addr), addr


@pytest.mark.parametrize("addr", PUBLIC)
async def test_public_addresses_pass(addr: str) -> None:
    assert is_public(ipaddress.ip_address(addr)), refusal(ipaddress.ip_address(addr))
    await check_address(addr, 443)


def embedded_forms(v4: V4, sla: int, host: int) -> dict[str, V6]:
    n = int(v4)
    return {"mapped": V6((0xFFFF << 32) | n), "compatible": V6(n), "nat64": V6((0x64FF9B << 96) | n),
            "6to4": V6((0x2002 << 112) | (n << 80) | (sla << 64) | host)}


@given(st.integers(0, 2**32 - 1), st.integers(0, 2**16 - 1), st.integers(0, 2**64 - 1))
def test_ipv4_hidden_in_ipv6_is_judged_as_ipv4(n: int, sla: int, host: int) -> None:
    v4 = V4(n)
    for form, v6 in embedded_forms(v4, sla, host).items():
        assert is_public(v6) == is_public(v4), (form, str(v4), str(v6))


@given(st.integers(0, 2**32 - 1))
def test_ipv4_policy_is_at_least_as_strict_as_the_standard_library(n: int) -> None:
    if is_public(V4(n)):
        assert V4(n).is_global


@given(st.integers(0, 2**128 - 1))
def test_ipv6_outside_2000_3_passes_only_through_an_embedded_ipv4(n: int) -> None:
    addr = V6(n)
    if is_public(addr) and addr not in ipaddress.ip_network("2000::/3"):
        assert addr.ipv4_mapped is not None or addr in ipaddress.ip_network("::/96") \
            or addr in ipaddress.ip_network("64:ff9b::/96")


def test_allow_lists_take_names_addresses_and_networks() -> None:
    allow = Allow.parse(["10.0.0.0/8", "127.0.0.1", " Intranet.Example. ", "[::1]", ""])
    assert allow.allows(V4("10.9.8.7")) and allow.allows(V4("127.0.0.1")) and not allow.allows(V4("127.0.0.2"))
    assert allow.allows(V6("::1")) and allow.allows(V6("::ffff:10.1.1.1"))  # the IPv4 inside counts too
    assert allow.allows_name("intranet.example") and allow.allows_name("INTRANET.example.")
    assert Allow.parse("127.0.0.1") == Allow.parse(["127.0.0.1"]) == Allow.of(["127.0.0.1"])
    assert Allow.parse("10.0.0.0/8, intranet.example") == Allow.parse(["10.0.0.0/8", "intranet.example"])
    assert Allow.of(({"a.example"}, [ipaddress.ip_network("10.0.0.0/8")])).nets == (ipaddress.ip_network("10.0.0.0/8"),)
    assert Allow.of(None) == Allow() == Allow.parse(())


async def test_allowed_hosts_pass_and_others_still_do_not() -> None:
    await check_address("10.1.2.3", 80, Allow.parse(["10.0.0.0/8"]))
    await check_address("intranet.local", 80, Allow.parse(["intranet.local"]))  # allowed by name: not resolved
    with pytest.raises(ToolError, match=r"refused: 10\.1\.2\.3 is a private address"):
        await check_address("10.1.2.3", 80, Allow.parse(["10.9.0.0/16"]))


async def test_a_name_passes_only_if_every_address_does(monkeypatch: pytest.MonkeyPatch) -> None:
    answers = {"mixed.test": ["93.184.215.14", "10.0.0.7"], "fine.test": ["93.184.215.14", "2606:4700::1111"]}

    def fake_getaddrinfo(host: str, port: Any, *args: Any, **kwargs: Any) -> list[Any]:
        if host not in answers:
            raise socket.gaierror(socket.EAI_NONAME, "Name or service not known")
        return [(socket.AF_INET6 if ":" in a else socket.AF_INET, socket.SOCK_STREAM, 6, "", (a, port))
                for a in answers[host]]

    monkeypatch.setattr(socket, "getaddrinfo", fake_getaddrinfo)
    with pytest.raises(ToolError, match=r"refused: mixed\.test resolves to 10\.0\.0\.7, a private address"):
        await check_address("mixed.test", 80)
    assert [str(a) for a in await resolve_checked("fine.test", 80, Allow())] == ["93.184.215.14", "2606:4700::1111"]
    with pytest.raises(ToolError, match=r"cannot resolve host 'nothing\.test'"):
        await check_address("nothing.test", 80)


async def test_localhost_is_refused_by_name() -> None:
    with pytest.raises(ToolError, match=r"refused: localhost resolves to (127\.0\.0\.1|::1), a loopback address"):
        await check_address("localhost", 80)
