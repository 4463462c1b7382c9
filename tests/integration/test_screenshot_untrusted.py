"""A screenshot reaches the model marked as untrusted content from a web page, like a page's text: through
`shou run --vision` with a scripted model, a real Chromium page on loopback, and the request the model got."""

from __future__ import annotations

import re
import shutil
from collections.abc import Iterator

import pytest

from ..fixtures.hostile_page import INJECTED, serving_hostile_page
from .conftest import tool_messages


@pytest.fixture
def hostile_page() -> Iterator[str]:
    with serving_hostile_page() as url:
        yield url


def test_a_screenshot_is_sent_between_untrusted_tags(serve, shou, hostile_page: str) -> None:
    from ..fixtures.needs import need, need_module

    need_module("playwright")
    need(any(shutil.which(n) for n in ("chromium", "chromium-browser")), "Debian's chromium (.ci/install)")
    srv = serve([
        {"tool_calls": [{"name": "browser", "arguments": {"action": "navigate", "url": hostile_page}}]},
        {"tool_calls": [{"name": "browser", "arguments": {"action": "screenshot"}}]},
        {"text": "It is a page about otters."},
    ])
    r = shou("run", "--vision", "--json", "What does the page look like?", server=srv, timeout=180,
             SHOU_WEB_ALLOW_HOSTS="127.0.0.1")
    assert r.returncode == 0, r.stderr
    messages = srv.requests[2]["messages"]
    shot = tool_messages(srv.requests[2])[-1]
    assert shot["content"].startswith('<untrusted-content source="browser"')  # the text part, as before
    after = messages[messages.index(shot) + 1:]
    [image_message] = [m for m in after if m["role"] == "user" and isinstance(m["content"], list)]
    first, image, last = image_message["content"]
    assert image["type"] == "image_url" and image["image_url"]["url"].startswith("data:image/png;base64,")
    opening = re.match(r'<untrusted-content source="browser" id="([0-9a-f]+)">\n', first["text"])
    assert opening, first["text"]
    assert last["text"].strip() == f'</untrusted-content id="{opening[1]}">'  # the same block closes after it
    label = first["text"][opening.end():].lower()
    assert "untrusted" in label and "web page" in label and "never instructions" in label
    assert "image returned by the browser tool" in label
    assert "<untrusted-content" in messages[0]["content"]  # the system prompt says what the tags mean
    assert "images tools return" in messages[0]["content"]
    assert INJECTED not in first["text"] + last["text"]
