"""Hosts are matched as a browser resolves them, and `web_allow_hosts` reads `host:port` (issue 28)."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from http.server import ThreadingHTTPServer
from pathlib import Path

import pytest

from shou.errors import ToolError
from shou.net.address import Allow
from shou.permissions import Policy

from .test_web import ARTICLE, Site, context, fetch, send, site  # noqa: F401 (site is a fixture)

LOCALHOSTS = ["ｌｏｃａｌｈｏｓｔ", "LOCALHOST", "localhost.", "localhost..", "%6cocalhost", "local%68ost",
              "ｌｏｃａｌｈｏｓｔ。", "local\u00adhost", "Localhost"]
LOOPBACKS = ["2130706433", "0x7f.1", "127.1", "0177.0.0.1", "0x7f000001", "１２７。０。０。１", "127.0.0.1.",
             "%31%32%37.0.0.1", "017700000001", "[::ffff:127.0.0.1]", "[::ffff:7f00:1]", "[0:0:0:0:0:ffff:7f00:1]"]


@pytest.mark.parametrize("tool", ["browser", "web_fetch"])
@pytest.mark.parametrize("host", LOCALHOSTS)
def test_a_deny_rule_on_a_name_meets_every_spelling_of_it(tool: str, host: str) -> None:
    policy = Policy(deny=[f"{tool}(localhost)"])
    assert policy.decide(tool, {"url": f"http://{host}:8080/admin"}).outcome == "deny"


@pytest.mark.parametrize("host", LOOPBACKS)
def test_a_deny_rule_on_an_address_meets_every_ipv4_form(host: str) -> None:
    assert Policy(deny=["browser(127.0.0.1)"]).decide("browser", {"url": f"http://{host}/"}).outcome == "deny"


async def test_web_fetch_reaches_the_normalised_host(site: Site, tmp_path: Path) -> None:  # noqa: F811
    site.routes["/otters"] = send(200, ARTICLE)
    port = site.url.rsplit(":", 1)[1]
    ctx = context(tmp_path, web_allow_hosts=("127.0.0.1", "localhost"))
    for host in ("ｌｏｃａｌｈｏｓｔ", "１２７。０。０。１", "2130706433", "LOCALHOST."):
        result = await fetch(ctx, f"http://{host}:{port}/otters")
        assert result.content.startswith("# Otters of the river"), host
        assert result.details is not None and "ｌ" not in result.details["url"]


@pytest.mark.parametrize("host", ["foo.1", "1.2.3.4.5", "999.0.0.1", "a%25b", "a..b"])
async def test_a_host_no_browser_reads_is_a_clear_error(host: str, tmp_path: Path) -> None:
    with pytest.raises(ToolError, match=r"not a valid (host name|IPv4 address)"):
        await fetch(context(tmp_path), f"http://{host}/")


@pytest.fixture
def site6() -> Iterator[str]:
    class V6(ThreadingHTTPServer):
        import socket

        address_family = socket.AF_INET6

    inner = Site()  # reuse its handler on an IPv6 socket
    inner.server.shutdown()
    inner.server.server_close()
    inner.routes["/otters"] = send(200, ARTICLE)
    server = V6(("::1", 0), inner.server.RequestHandlerClass)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://[::1]:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


async def test_host_port_entries_allow_that_port_only(site: Site, site6: str, tmp_path: Path) -> None:  # noqa: F811
    site.routes["/otters"] = send(200, ARTICLE)
    port = int(site.url.rsplit(":", 1)[1])
    for entry in (f"127.0.0.1:{port}", f"localhost:{port}", f"ＬＯＣＡＬＨＯＳＴ:{port}"):
        host = "localhost" if "127" not in entry else "127.0.0.1"
        result = await fetch(context(tmp_path, web_allow_hosts=(entry,)), f"http://{host}:{port}/otters")
        assert result.content.startswith("# Otters of the river"), entry
        with pytest.raises(ToolError, match="refused"):  # another port of the same host stays closed
            await fetch(context(tmp_path, web_allow_hosts=(entry,)), f"http://{host}:{port + 1}/otters")
    port6 = int(site6.rsplit(":", 1)[1])
    result = await fetch(context(tmp_path, web_allow_hosts=(f"[::1]:{port6}",)), f"{site6}/otters")
    assert result.content.startswith("# Otters of the river")
    with pytest.raises(ToolError, match="refused"):
        await fetch(context(tmp_path, web_allow_hosts=(f"[::1]:{port6 + 1}",)), f"{site6}/otters")
    assert Allow.parse(f"127.0.0.1:{port}, [::1]:{port6}, ::1").nets  # a bare IPv6 address is no port


@pytest.mark.parametrize("written", ["LOCALHOST.", "ｌｏｃａｌｈｏｓｔ", "Localhost"])
def test_a_rule_written_in_another_spelling_of_the_host_still_meets_it(written: str) -> None:
    assert Policy(deny=[f"browser({written})"]).decide("browser", {"url": "http://localhost:9/"}).outcome == "deny"
