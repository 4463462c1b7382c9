"""Pure parts of the web and browser tools: address checks, content kinds, candidates, image fitting."""

from __future__ import annotations

import io
import ipaddress
import random
import re
from pathlib import Path

import pytest

from shou.errors import ToolError
from shou.tools.builtin._browser_session import fit_image, likely_candidates, workspace_file_url
from shou.tools.builtin.web import SearchHit, _kind, check_address, format_hits

from ..fixtures.needs import need_module

NONE: tuple[set[str], list[ipaddress.IPv4Network | ipaddress.IPv6Network]] = (set(), [])


@pytest.mark.parametrize(("host", "why"), [
    ("127.0.0.1", "a loopback address"), ("10.0.0.1", "a private address"), ("172.16.5.4", "a private address"),
    ("192.168.1.1", "a private address"), ("169.254.169.254", "a link-local address"),
    ("100.64.0.1", "a shared (carrier-grade NAT) address"), ("0.0.0.0", "a 'this network' address"),
    ("::1", "a loopback address"), ("fe80::1", "a link-local address"), ("fc00::1", "a unique local (private) address"),
    ("::ffff:10.0.0.1", "the IPv4-mapped form of 10.0.0.1, a private address"), ("224.0.0.1", "a multicast address"),
])
async def test_non_public_addresses_are_refused(host: str, why: str) -> None:
    with pytest.raises(ToolError, match=rf"^refused: {re.escape(host)} is {re.escape(why)}; .*web_allow_hosts"):
        await check_address(host, 80, NONE)


async def test_public_addresses_pass_and_allowlists_work() -> None:
    await check_address("93.184.215.14", 80, NONE)
    await check_address("2606:4700::1111", 443, NONE)
    await check_address("10.1.2.3", 80, (set(), [ipaddress.ip_network("10.0.0.0/8")]))
    await check_address("intranet.local", 80, ({"intranet.local"}, []))  # allowed by name: not even resolved
    with pytest.raises(ToolError, match=r"10\.1\.2\.3"):
        await check_address("10.1.2.3", 80, (set(), [ipaddress.ip_network("10.9.0.0/16")]))


async def test_unresolvable_hosts_are_a_clean_error() -> None:
    with pytest.raises(ToolError, match="cannot resolve host"):
        await check_address("no-such-host.invalid", 80, NONE)


@pytest.mark.parametrize(("mime", "head", "kind"), [
    ("text/html", b"", "html"), ("application/xhtml+xml", b"", "html"), ("text/plain", b"", "text"),
    ("application/json", b"", "text"), ("application/ld+json", b"", "text"), ("image/png", b"", "binary"),
    ("application/pdf", b"", "binary"), ("", b"<!DOCTYPE html><p>", "html"), ("", b"plain words", "text"),
    ("application/octet-stream", b"ab\0cd", "binary"),
])
def test_content_kinds(mime: str, head: bytes, kind: str) -> None:
    assert _kind(mime, head) == kind


def test_hits_are_numbered_with_url_and_snippet() -> None:
    text = format_hits("q", "tavily", [SearchHit("A", "https://a", "one  two\nthree"), SearchHit("", "https://b", "")],
                       ["duckduckgo failed: blocked"])
    assert "1. A\n   https://a\n   one two three" in text
    assert "2. (no title)\n   https://b" in text
    assert "(duckduckgo failed: blocked)" in text


def test_candidates_rank_close_spellings_first() -> None:
    elements = [
        {"index": 1, "tag": "a", "text": "Home", "href": "/"},
        {"index": 2, "tag": "button", "id": "login-button", "text": "Log in"},
        {"index": 3, "tag": "input", "name": "email", "placeholder": "Email address"},
    ]
    assert likely_candidates("#logn-button", elements)[0]["index"] == 2
    assert likely_candidates("input[name=emial]", elements)[0]["index"] == 3


def test_workspace_file_urls(tmp_path: Path) -> None:
    ws = tmp_path / "ws"
    ws.mkdir()
    (ws / "a b.html").write_text("x")
    assert workspace_file_url(ws, (ws / "a b.html").as_uri() + "#top") == (ws / "a b.html").resolve().as_uri() + "#top"
    with pytest.raises(ToolError, match="inside the workspace"):
        workspace_file_url(ws, "file:///etc/passwd")
    with pytest.raises(ToolError, match="remote host"):
        workspace_file_url(ws, "file://server/share/x.html")
    with pytest.raises(ToolError, match="no such file"):
        workspace_file_url(ws, (ws / "missing.html").as_uri())


def test_fit_image_downscales_and_falls_back_to_jpeg() -> None:
    image = need_module("PIL.Image")
    rng = random.Random(1)
    noisy = image.frombytes("RGB", (2000, 3000), bytes(rng.getrandbits(8) for _ in range(2000 * 3000 * 3)))
    buf = io.BytesIO()
    noisy.save(buf, "PNG")
    data, media_type, size = fit_image(buf.getvalue())
    assert max(size) == 1568 and media_type == "image/jpeg"  # noise does not compress: PNG would be ~7 MB
    assert len(data) <= 1_500_000 and data[:2] == b"\xff\xd8"
    small = io.BytesIO()
    image.new("RGB", (300, 200), "red").save(small, "PNG")
    data, media_type, size = fit_image(small.getvalue())
    assert (media_type, size, data) == ("image/png", (300, 200), small.getvalue())
