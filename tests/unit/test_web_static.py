"""The page and its files as `shou serve` answers them (src/shou/serve/page.py): types, caching, the
content security policy, and nothing but the package's web/ files."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

pytest.importorskip("starlette")

from starlette.applications import Starlette
from starlette.routing import Route
from starlette.testclient import TestClient

from shou.serve import page

WEB = Path(page.__file__).parent / "web"


@pytest.fixture
def client() -> TestClient:
    app = Starlette(routes=[Route("/", page.index), Route("/static/{path:path}", page.static)])
    return TestClient(app)


def test_the_page_has_a_strict_policy_and_no_inline_script(client: TestClient) -> None:
    r = client.get("/")
    assert r.status_code == 200 and r.headers["content-type"].startswith("text/html")
    csp = dict(d.strip().split(" ", 1) for d in r.headers["content-security-policy"].split(";"))
    assert csp["script-src"] == "'self'" and csp["object-src"] == "'none'" and csp["frame-ancestors"] == "'none'"
    assert csp["img-src"] == "'self' data: blob:" and csp["base-uri"] == "'none'"
    scripts = re.findall(r"<script\b[^>]*>(.*?)</script>", r.text, re.S)
    assert scripts and all(not s.strip() for s in scripts), "no inline script"
    assert not re.search(r"\son[a-z]+=", r.text), "no inline event handler"
    assert "http://" not in r.text and "https://" not in r.text  # nothing from elsewhere


@pytest.mark.parametrize(("path", "kind"), [("js/main.js", "text/javascript"), ("app.css", "text/css"),
                                            ("vendor/purify.es.mjs", "text/javascript"),
                                            ("vendor/LICENSE.marked.txt", "text/plain"), ("icon.svg", "image/svg+xml")])
def test_files_are_served_with_their_type_and_revalidated(client: TestClient, path: str, kind: str) -> None:
    r = client.get("/static/" + path)
    assert r.status_code == 200 and r.headers["content-type"].startswith(kind)
    assert r.content == (WEB / path).read_bytes()
    assert r.headers["cache-control"] == "no-cache" and r.headers["etag"]
    again = client.get("/static/" + path, headers={"If-None-Match": r.headers["etag"]})
    assert again.status_code == 304 and not again.content


@pytest.mark.parametrize("path", ["../app.py", "..%2fapp.py", "%2e%2e/page.py", "js/../../app.py", "index.html",
                                  "nothing.js", "js", "", "/etc/passwd", "vendor/VERSIONS.json/x"])
def test_nothing_else_is_served(client: TestClient, path: str) -> None:
    assert client.get("/static/" + path).status_code == 404


def test_every_module_the_page_imports_is_there() -> None:
    """Each relative import of the page's modules names a file of web/ (a typo would break the page)."""
    for js in (WEB / "js").rglob("*.js"):
        for target in re.findall(r"^import .*? from '(\.[^']+)';", js.read_text(encoding="utf-8"), re.M):
            assert (js.parent / target).resolve().is_file(), f"{js.relative_to(WEB)} imports {target}"
