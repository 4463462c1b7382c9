"""The browser tool against real Chromium: pages from a threaded loopback server and from the workspace."""

from __future__ import annotations

import base64
import io
import shutil
import threading
import time
from collections.abc import AsyncIterator, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from ..fixtures.needs import need, need_module

need_module("playwright")
Image = need_module("PIL.Image")
ImageStat = need_module("PIL.ImageStat")

from shou.errors import ToolError  # noqa: E402
from shou.tools.base import ToolContext, ToolResult  # noqa: E402
from shou.tools.builtin.browser import browser, close_browsers  # noqa: E402

need(any(shutil.which(n) for n in ("chromium", "chromium-browser", "google-chrome")),
     "no Chromium installed (apt-get install chromium)")

PAGES = {
    "/click": """<html><head><title>Click</title></head><body>
        <p id="out">before</p>
        <button id="go" onclick="document.getElementById('out').textContent = 'after click'">Change it</button>
        <a href="/other" id="away">Other page</a>
        </body></html>""",
    "/form": """<html><head><title>Form</title></head><body>
        <label for="who">Your name</label><input id="who" name="who" placeholder="Name">
        <button id="submit" onclick="document.getElementById('greet').textContent = 'Hello ' +
          document.getElementById('who').value">Send greeting</button>
        <button id="cancel">Cancel</button><p id="greet"></p></body></html>""",
    "/other": "<html><head><title>Other</title></head><body><h1>The other page</h1></body></html>",
}


class _Handler(BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        if self.path == "/hang":  # accept the request and never answer: the navigation must time out
            time.sleep(60)  # past the bound below: only the 6 s navigation timeout ends the action in time
            return
        body = PAGES.get(self.path)
        if body is None:
            self.send_error(404)
            return
        data = body.encode()
        self.send_response(200)
        self.send_header("Content-Type", "text/html; charset=utf-8")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *args: Any) -> None:
        pass


@pytest.fixture(scope="module")
def site() -> Iterator[str]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
    server.daemon_threads = True  # the /hang handler must not hold up shutdown
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


@pytest.fixture
async def ctx(tmp_path: Path) -> AsyncIterator[ToolContext]:
    ws = tmp_path / "ws"
    ws.mkdir()
    # The test site is on loopback, which the browser reaches only when a person allows it.
    yield ToolContext(workspace=ws, session="s", settings=SimpleNamespace(browser_timeout=3,
                                                                          web_allow_hosts=("127.0.0.1",)))
    await close_browsers()  # the browser belongs to this test's event loop


async def act(ctx: ToolContext, **args: Any) -> ToolResult:
    result = await browser.call(browser.validate(args), ctx)
    assert isinstance(result, ToolResult)
    return result


async def text_of(ctx: ToolContext, selector: str) -> str:
    return (await act(ctx, action="read", selector=selector)).content.split("\n\n", 1)[1].strip()


async def test_click_changes_text(ctx: ToolContext, site: str) -> None:
    await act(ctx, action="navigate", url=f"{site}/click")
    assert await text_of(ctx, "#out") == "before"
    await act(ctx, action="click", selector="#go")
    assert await text_of(ctx, "#out") == "after click"


async def test_type_fills_the_input(ctx: ToolContext, site: str) -> None:
    await act(ctx, action="navigate", url=f"{site}/form")
    await act(ctx, action="type", selector="#who", text="Ada")
    await act(ctx, action="click", selector="#submit")
    assert await text_of(ctx, "#greet") == "Hello Ada"


async def test_elements_are_numbered_and_clickable_by_index(ctx: ToolContext, site: str) -> None:
    await act(ctx, action="navigate", url=f"{site}/form")
    listing = (await act(ctx, action="elements")).content
    number = next(int(line[1:line.index("]")]) for line in listing.splitlines() if "Send greeting" in line)
    field = next(int(line[1:line.index("]")]) for line in listing.splitlines() if "placeholder='Name'" in line)
    await act(ctx, action="type", index=field, text="Grace")
    await act(ctx, action="click", index=number)
    assert await text_of(ctx, "#greet") == "Hello Grace"
    with pytest.raises(ToolError, match=r"no element \[99\]"):
        await act(ctx, action="click", index=99)


async def test_missing_selector_lists_candidates(ctx: ToolContext, site: str) -> None:
    await act(ctx, action="navigate", url=f"{site}/form")
    with pytest.raises(ToolError) as err:
        await act(ctx, action="click", selector="#sumbit-greeting")
    message = str(err.value)
    assert "no element matches selector '#sumbit-greeting'" in message
    assert "Likely candidates" in message
    first = message.split("Likely candidates (use index=N):\n", 1)[1].splitlines()[0]
    assert "button#submit" in first  # the closest spelling comes first


async def test_navigation_timeout_is_a_clean_error(ctx: ToolContext, site: str) -> None:
    started = time.monotonic()
    with pytest.raises(ToolError, match=r"navigate .* timed out after 6 s"):
        await act(ctx, action="navigate", url=f"{site}/hang")
    # Playwright's own default is 30 s: well under it means our 6 s applied, with room for a slow browser start.
    assert time.monotonic() - started < 25


async def test_screenshot_of_a_workspace_file_is_a_real_png(ctx: ToolContext) -> None:
    page = ctx.workspace / "colors.html"
    page.write_text("<html><head><title>Colors</title></head><body style='margin:0'>"
                    "<div style='height:400px;background:#c03'>red block</div>"
                    "<div style='height:400px;background:#03c'>blue block</div></body></html>")
    await act(ctx, action="navigate", url=page.as_uri())
    result = await act(ctx, action="screenshot")
    assert result.image is not None and result.image.media_type == "image/png"
    img = Image.open(io.BytesIO(base64.b64decode(result.image.data))).convert("RGB")
    assert img.size == (1280, 800)
    assert sum(ImageStat.Stat(img).var) > 1000, "the screenshot is blank"  # one colour everywhere: variance 0
    assert result.content.startswith("Screenshot of Colors (file://")
    assert result.details is not None and "red block" in result.details["page_text"]
    saved = Path(result.details["path"])
    assert saved.parent == ctx.workspace / ".shou" / "screenshots" and saved.read_bytes()[:4] == b"\x89PNG"
    assert ".shou/screenshots/" in result.content


async def test_tall_full_page_screenshot_is_downscaled(ctx: ToolContext) -> None:
    page = ctx.workspace / "tall.html"
    page.write_text("<body style='margin:0'>" + "".join(
        f"<div style='height:300px;background:hsl({i * 37},70%,50%)'>row {i}</div>" for i in range(20)) + "</body>")
    await act(ctx, action="navigate", url="file://" + str(page))
    result = await act(ctx, action="screenshot", full_page=True)
    assert result.image is not None
    img = Image.open(io.BytesIO(base64.b64decode(result.image.data)))
    assert max(img.size) == 1568 and img.size[1] > img.size[0]
    assert len(base64.b64decode(result.image.data)) <= 1_500_000


async def test_file_urls_outside_the_workspace_are_refused(ctx: ToolContext, tmp_path: Path) -> None:
    secret = tmp_path / "secret.html"
    secret.write_text("<h1>TOP SECRET</h1>")
    with pytest.raises(ToolError, match="file:// URLs may only name files inside the workspace"):
        await act(ctx, action="navigate", url=secret.as_uri())
    with pytest.raises(ToolError, match="scheme is not allowed"):
        await act(ctx, action="navigate", url="chrome://settings")
    # A workspace page linking (or framing) a file outside gets nothing from it: the request guard blocks it.
    linking = ctx.workspace / "link.html"
    linking.write_text(f"<a id=out href='{secret.as_uri()}'>outside</a><iframe src='{secret.as_uri()}'></iframe>")
    await act(ctx, action="navigate", url=linking.as_uri())
    await act(ctx, action="click", selector="#out")
    assert "TOP SECRET" not in (await act(ctx, action="read")).content

async def test_tabs_open_switch_close(ctx: ToolContext, site: str) -> None:
    await act(ctx, action="navigate", url=f"{site}/click")
    opened = await act(ctx, action="tab_open", url=f"{site}/other")
    assert "Opened tab [2]: Other" in opened.content
    assert "The other page" in (await act(ctx, action="read")).content
    switched = await act(ctx, action="tab_switch", index=1)
    assert "Switched to tab [1]: Click" in switched.content
    assert "before" in (await act(ctx, action="read")).content
    closed = await act(ctx, action="tab_close", index=2)
    assert "/other" not in closed.content and "[1]" in closed.content
    with pytest.raises(ToolError, match=r"there is no tab \[2\]"):
        await act(ctx, action="tab_switch", index=2)


async def test_back_forward_and_wait(ctx: ToolContext, site: str) -> None:
    await act(ctx, action="navigate", url=f"{site}/click")
    await act(ctx, action="click", selector="#away")
    await act(ctx, action="wait", text="The other page")
    assert "Went back to Click" in (await act(ctx, action="back")).content
    assert "Went forward to Other" in (await act(ctx, action="forward")).content
    with pytest.raises(ToolError, match="timed out after 3 s"):
        await act(ctx, action="wait", selector="#never")


async def test_sessions_do_not_share_tabs(ctx: ToolContext, site: str) -> None:
    await act(ctx, action="navigate", url=f"{site}/other")
    other = ToolContext(workspace=ctx.workspace, session="s2", settings=ctx.settings)
    assert "about:blank" in (await act(other, action="read")).content

