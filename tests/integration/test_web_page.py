"""The web page `shou serve` shows at `/`, driven in Debian's Chromium by Playwright against a live server
running the scripted model: a run with a tool call, an approval, the answer and its trace; and `--tokens`."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from ..fixtures.needs import need, need_module
from ..fixtures.serving import serving
from .conftest import shou_env

need_module("playwright")
Image = need_module("PIL.Image")
ImageStat = need_module("PIL.ImageStat")

from playwright.async_api import Page, async_playwright, expect  # noqa: E402

from shou.errors import ToolError  # noqa: E402
from shou.tools.builtin._browser_session import find_chromium  # noqa: E402

try:  # how shou itself finds the browser: SHOU_BROWSER_EXECUTABLE, else the system's Chromium
    CHROMIUM = find_chromium(None, None)
except ToolError as e:
    CHROMIUM = None
    need(False, str(e))

TASK = "Work out 6 * 7 and write it to note.txt"
ANSWER = "I wrote 42 to note.txt."
TOKEN = "s3cret-web-token"


def calc(expression: str) -> dict[str, Any]:
    return {"tool_calls": [{"name": "calculator", "arguments": {"expression": expression}}]}


def write(path: str, content: str) -> dict[str, Any]:
    return {"tool_calls": [{"name": "write_file", "arguments": {"path": path, "content": content}}]}


@pytest.fixture
def ask_write(tmp_path: Path) -> Path:
    """The user's shou.toml: write_file needs a person's approval."""
    cfg = tmp_path / "config"
    cfg.mkdir(exist_ok=True)
    (cfg / "shou.toml").write_text('[permissions]\nask = ["write_file"]\n')
    return cfg


@pytest.fixture
async def page() -> AsyncIterator[Page]:
    """A 1280x800 page in Chromium; any script error on it fails the test."""
    errors: list[str] = []
    async with async_playwright() as pw:
        browser = await pw.chromium.launch(executable_path=CHROMIUM, args=["--disable-gpu", "--no-first-run"])
        try:
            pg = await browser.new_page(viewport={"width": 1280, "height": 800})
            pg.on("pageerror", lambda exc: errors.append(str(exc)))
            pg.set_default_timeout(20_000)
            yield pg
        finally:
            await browser.close()
    assert not errors, f"errors on the page: {errors}"


async def shot(page: Page, path: Path) -> None:
    """A screenshot that shows something: many colours, not one flat area."""
    await page.screenshot(path=str(path))
    with Image.open(path) as img:
        rgb = img.convert("RGB")
        colours = rgb.getcolors(maxcolors=1 << 20)
        assert colours is None or len(colours) > 20, f"{path.name} is nearly blank"
        assert max(ImageStat.Stat(rgb).stddev) > 10, f"{path.name} is flat"
        assert rgb.size == (1280, 800)


async def test_a_run_with_a_tool_call_an_approval_and_the_answer(serve, tmp_path: Path, workspace: Path,
                                                                  ask_write: Path, page: Page) -> None:
    # the answer streams: a few characters, a pause, the rest
    srv = serve([calc("6 * 7"), write("note.txt", "42"), {"text": ANSWER, "chunk_size": 3, "stall": 1.5}])
    with serving(workspace, shou_env(tmp_path, srv, SHOU_CONFIG_DIR=str(ask_write))) as served:
        await page.goto(served.link)
        await expect(page.locator("#token-overlay")).to_be_hidden()
        await expect(page.locator("#sessions")).to_contain_text("no sessions yet")
        await page.locator("#task").fill(TASK)
        await page.locator("#send").click()

        await expect(page.locator("#chat .bubble.user")).to_have_text(TASK)
        card = page.locator("#chat .tool-call[data-call-id]").filter(has_text="calculator")
        await expect(card).to_have_count(1)
        assert await card.get_attribute("data-call-id")
        await expect(card.locator(".tool-args")).to_have_text('{\n  "expression": "6 * 7"\n}')
        await expect(card.locator(".tool-result")).to_have_text("42")  # the real calculator ran
        await expect(card.locator(".tool-result.error")).to_have_count(0)

        approval = page.locator("#chat .approval").filter(has_text="write_file")
        await expect(approval).to_have_count(1)
        await expect(approval.locator(".tool-args")).to_contain_text('"path": "note.txt"')
        await expect(page.locator("#cancel")).to_be_visible()
        await expect(page.locator("#approvals .approval")).to_have_count(1)  # GET /v1/approvals lists it too
        await shot(page, tmp_path / "tool-call.png")
        assert not (workspace / "note.txt").exists()

        await approval.locator("button.approve").click()
        await expect(approval.locator(".decided")).to_contain_text("Approved")
        streaming = page.locator("#chat .bubble.assistant.streaming")  # text_delta fragments, before the answer
        await expect(streaming).to_have_count(1)
        assert ANSWER.startswith(await streaming.text_content() or "?")
        await expect(page.locator("#chat .answer")).to_have_text(ANSWER, timeout=30_000)
        await expect(page.locator("#chat .run-head .status")).to_have_text("completed")
        assert (workspace / "note.txt").read_text() == "42"
        written = page.locator("#chat .tool-call").filter(has_text="write_file")
        await expect(written.locator(".tool-result")).to_have_count(1)
        await expect(page.locator("#cancel")).to_be_hidden()
        await expect(page.locator("#send")).to_be_enabled()
        await expect(page.locator("#approvals .approval")).to_have_count(0)
        await expect(page.locator("#sessions li button")).to_have_count(1)  # refreshed after the run
        await shot(page, tmp_path / "answer.png")

        await page.locator("#chat .trace-toggle").click()
        await expect(page.locator("#chat .trace .bar.model").first).to_be_visible()
        assert await page.locator("#chat .trace .bar.model").count() == 3
        tools = page.locator("#chat .trace .trace-row").filter(has=page.locator(".bar.tool"))
        await expect(tools).to_have_count(2)
        await expect(tools.first.locator(".lbl")).to_have_text("calculator")
        await shot(page, tmp_path / "trace.png")

        # the session's transcript, from the list (its run's stored events replayed)
        await page.locator("#new-chat").click()
        await expect(page.locator("#chat > *")).to_have_count(0)
        await page.locator("#sessions li button").first.click()
        await expect(page.locator("#chat .bubble.user")).to_have_text(TASK)
        await expect(page.locator("#chat .tool-call")).to_have_count(2)
        await expect(page.locator("#chat .tool-call .tool-result").first).to_have_text("42")
        await expect(page.locator("#chat .answer").last).to_have_text(ANSWER)
    assert len(srv.requests) == 3


async def test_the_page_asks_for_the_token_and_then_works(serve, tmp_path: Path, workspace: Path,
                                                          page: Page) -> None:
    srv = serve([{"text": "hello alice"}])
    tokens = tmp_path / "tokens"
    tokens.write_text(f"# token user\n{TOKEN} alice\n")
    tokens.chmod(0o600)  # a tokens file must be its owner's alone
    with serving(workspace, shou_env(tmp_path, srv), "--tokens", str(tokens)) as served:
        await page.goto(served.url + "/")
        overlay = page.locator("#token-overlay")
        await expect(overlay).to_be_visible()
        await page.locator("#token").fill("not-the-token")
        await page.locator("#token-form button").click()
        await expect(overlay).to_be_visible()
        await expect(page.locator("#token-msg")).to_contain_text("refused")
        await shot(page, tmp_path / "token.png")

        await page.locator("#token").fill(TOKEN)
        await page.locator("#token-form button").click()
        await expect(overlay).to_be_hidden()
        await page.locator("#task").fill("say hello")
        await page.locator("#task").press("Enter")
        await expect(page.locator("#chat .answer")).to_have_text("hello alice", timeout=30_000)
        assert await page.evaluate("sessionStorage.getItem('shou.token')") == TOKEN

        await page.reload()  # the token is remembered
        await expect(page.locator("#sessions li button")).to_have_count(1)
        await expect(overlay).to_be_hidden()
        with served.client(TOKEN) as c:
            [run] = c.get("/v1/runs").json()["runs"]
        assert run["task"] == "say hello" and run["status"] == "completed"


async def test_cancel_stops_a_running_run(serve, tmp_path: Path, workspace: Path, page: Page) -> None:
    srv = serve([{"text": "never said", "hang": True}])
    with serving(workspace, shou_env(tmp_path, srv)) as served:
        await page.goto(served.link)
        await page.locator("#task").fill("wait forever")
        await page.locator("#send").click()
        await expect(page.locator("#send")).to_be_disabled()
        await page.locator("#cancel").click()
        await expect(page.locator("#chat .run-head .status")).to_have_text("cancelled", timeout=30_000)
        await expect(page.locator("#chat .answer")).to_have_count(0)
        await expect(page.locator("#cancel")).to_be_hidden()
        await expect(page.locator("#send")).to_be_enabled()


async def test_the_printed_link_opens_the_page_with_its_token(serve, tmp_path: Path, workspace: Path,
                                                               page: Page) -> None:
    srv = serve([{"text": "hello local"}])
    with serving(workspace, shou_env(tmp_path, srv)) as served:
        assert "#token=" in served.link
        await page.goto(served.url + "/")  # no token: a server without --tokens asks for one too
        await expect(page.locator("#token-overlay")).to_be_visible()
        await page.goto(served.link)
        await expect(page.locator("#token-overlay")).to_be_hidden()
        await expect(page.locator("#sessions")).to_contain_text("no sessions yet")
        assert await page.evaluate("location.hash") == ""  # out of the address bar and the history
        assert "token" not in page.url
        assert await page.evaluate("sessionStorage.getItem('shou.token')") == served.token
        assert await page.evaluate("localStorage.getItem('shou.token')") is None
        await page.locator("#task").fill("say hello")
        await page.locator("#task").press("Enter")
        await expect(page.locator("#chat .answer")).to_have_text("hello local", timeout=30_000)
        await page.reload()  # kept for this tab
        await expect(page.locator("#token-overlay")).to_be_hidden()
        await expect(page.locator("#sessions li button")).to_have_count(1)
        assert page.context.browser is not None
        fresh = await page.context.browser.new_page()  # the link opened afresh: read as the page loads
        await fresh.goto(served.link)
        await expect(fresh.locator("#sessions li button")).to_have_count(1)
        await expect(fresh.locator("#token-overlay")).to_be_hidden()
        assert "token" not in fresh.url
