"""Seed 000's task end to end with `shou run`: write a page, open it in Chromium, screenshot it, describe it."""

from __future__ import annotations

import base64
import io
import shutil
from pathlib import Path

import pytest

from ..fixtures.needs import need, need_module
from .conftest import tool_messages

need_module("playwright")
Image = need_module("PIL.Image")
ImageStat = need_module("PIL.ImageStat")
need(any(shutil.which(n) for n in ("chromium", "chromium-browser")), "no Chromium (apt-get install chromium)")

PAGE = """<!doctype html><html><head><title>Seed Page</title></head>
<body style="background:#1e3a8a;color:white;font-family:sans-serif">
<h1>Hello from shou</h1><p>A blue page with a white heading.</p></body></html>"""


def script(workspace: Path) -> list[dict]:
    return [
        {"tool_calls": [{"name": "write_file", "arguments": {"path": "test_page.html", "content": PAGE}}]},
        {"tool_calls": [{"name": "browser",
                         "arguments": {"action": "navigate", "url": f"file://{workspace}/test_page.html"}}]},
        {"tool_calls": [{"name": "browser", "arguments": {"action": "screenshot"}}]},
        {"text": "The page is blue with a white heading that says 'Hello from shou'."},
    ]


def not_blank(png: bytes) -> bool:
    image = Image.open(io.BytesIO(png)).convert("RGB")
    return image.size[0] > 100 and max(ImageStat.Stat(image).stddev) > 5


@pytest.mark.parametrize("vision", [True, False], ids=["vision", "text-only"])
def test_write_open_screenshot_describe(serve, shou, workspace: Path, vision: bool) -> None:
    srv = serve(script(workspace))
    r = shou("run", "Write a test page, open it in a browser, take a screenshot and describe it.",
             "--vision" if vision else "--no-vision", server=srv, timeout=180)
    assert r.returncode == 0, r.stderr
    assert (workspace / "test_page.html").read_text() == PAGE
    shots = sorted((workspace / ".shou" / "screenshots").glob("*.png"))
    assert shots and not_blank(shots[-1].read_bytes())  # the PNG decodes and shows something
    after_shot = srv.requests[3]["messages"]
    images = [p for m in after_shot if isinstance(m["content"], list) for p in m["content"]
              if p["type"] == "image_url"]
    shot_result = tool_messages(srv.requests[3])[-1]["content"]
    if vision:
        assert len(images) == 1
        data = images[0]["image_url"]["url"].split(";base64,", 1)[1]
        assert not_blank(base64.b64decode(data))
    else:
        assert images == []
        assert "Hello from shou" in shot_result and "cannot see images" in shot_result
    assert "Hello from shou" in r.stdout
