"""web_fetch keeps the links a page's extracted text leaves out: trafilatura drops link-dense parts (a list of
releases or downloads, an index) as navigation, and the model then cannot follow what the task needs."""

from __future__ import annotations

import pytest

pytest.importorskip("trafilatura")

from shou.tools.builtin.web import MAX_LINKS, _html_to_markdown

PAGE = b"""<html><body><main><h1>Downloads</h1><p>Pick a release below.</p>
<ul><li><a href="/v2.html">Version 2.0</a></li><li><a href="v1.html">Version 1.0</a></li>
<li><a href="javascript:alert(1)">run me</a></li><li><a href="mailto:a@b.c">mail</a></li></ul>
<p>See <a href="/changelog.html">the changelog</a> for details: this paragraph has enough words to be the page's
main text for the extractor, which keeps it and its link.</p></main></body></html>"""


def test_links_the_extract_left_out_are_listed_to_follow() -> None:
    _, text = _html_to_markdown(PAGE, "https://example.org/files/")
    assert "[the changelog](https://example.org/changelog.html)" in text
    tail = text.split("Links on the page not shown above:", 1)[1]
    assert "- [Version 2.0](https://example.org/v2.html)" in tail
    assert "- [Version 1.0](https://example.org/files/v1.html)" in tail  # relative to the page
    assert "changelog" not in tail and "javascript" not in tail and "mailto" not in tail


def test_the_list_is_bounded_and_absent_when_nothing_is_missing() -> None:
    many = b"<html><body><p>Index of things, with a sentence long enough to be kept as text.</p><ul>" + b"".join(
        f'<li><a href="/p{i}">page {i}</a></li>'.encode() for i in range(200)) + b"</ul></body></html>"
    _, text = _html_to_markdown(many, "https://example.org/")
    assert text.count("\n- [page ") == MAX_LINKS
    plain = b"<html><body><p>No links here, only a sentence that is long enough to be the main text.</p></body></html>"
    assert "Links on the page" not in _html_to_markdown(plain, "https://example.org/")[1]
