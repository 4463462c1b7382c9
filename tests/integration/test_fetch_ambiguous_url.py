"""The host the policy checks is the host fetched: a URL that readers split differently is refused (issue 28
red team: `http://127.0.0.1:P\\@localhost:P/x` was judged as 127.0.0.1 and fetched from localhost)."""

from __future__ import annotations

from pathlib import Path

import pytest

from shou.errors import ToolError

from .test_web import ARTICLE, Site, context, fetch, send, site  # noqa: F401 (site is a fixture)

AMBIGUOUS = ["http://127.0.0.1:{p}\\@localhost:{p}/otters", "http://127.0.0.1:{p}\\\\@localhost:{p}/otters",
             "http://localhost:{p}\\@127.0.0.1:{p}/otters", "http://127.0.0.1:{p}\\x@localhost:{p}/otters",
             "http://127.0.0.1:{p}/\\@localhost:{p}/otters", "http://local host:{p}/otters",
             "http://127.0.0.1:{p}\t@localhost:{p}/otters"]


@pytest.mark.parametrize("form", AMBIGUOUS)
async def test_an_ambiguous_url_is_refused_not_fetched(form: str, site: Site, tmp_path: Path) -> None:  # noqa: F811
    site.routes["/otters"] = send(200, ARTICLE)
    port = site.url.rsplit(":", 1)[1]
    ctx = context(tmp_path, web_allow_hosts=("127.0.0.1", "localhost"))
    with pytest.raises(ToolError, match=r"backslash|disagree|reads its host"):
        await fetch(ctx, form.format(p=port))


async def test_a_redirect_to_an_ambiguous_url_is_not_followed(site: Site, tmp_path: Path) -> None:  # noqa: F811
    port = site.url.rsplit(":", 1)[1]
    site.routes["/otters"] = send(200, ARTICLE)
    site.routes["/go"] = send(302, "", headers={"Location": f"http://127.0.0.1:{port}\\@localhost:{port}/otters"})
    ctx = context(tmp_path, web_allow_hosts=("127.0.0.1", "localhost"), permissions_deny=("web_fetch(localhost)",))
    # Whatever the client makes of the Location, the host judged is the host it would fetch.
    with pytest.raises(ToolError, match=r"backslash|reads its host|not allow"):
        await fetch(ctx, f"http://127.0.0.1:{port}/go")


def test_the_browser_gets_no_ambiguous_url() -> None:
    from shou.net.hostname import BadHost, canonical_url

    with pytest.raises(BadHost, match="backslash"):
        canonical_url("http://127.0.0.1:1\\@localhost:1/x")
    assert canonical_url("http://ＬＯＣＡＬＨＯＳＴ:1/x") == "http://localhost:1/x"
