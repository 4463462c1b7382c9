"""The workspace page of `shou serve` in Debian's Chromium (Playwright) against a live server running the
scripted model: the answer as Markdown, the computer pane (files, browser, terminal, plan), a run reopened
after a reload looking as it did live, hostile model output and workspace files running nothing, uploads,
the keyboard, and axe-core's accessibility check of the main views, light and dark.

Screenshots of the page at 1280 and 375 px, light and dark (and of each view at 1280 px), are left in
/tmp/shou-web-*.png."""

from __future__ import annotations

import asyncio
import io
import json
import re
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest

from ..fixtures.needs import need, need_module
from ..fixtures.serving import Served, serving
from .conftest import shou_env

need_module("playwright")
Image = need_module("PIL.Image")
ImageStat = need_module("PIL.ImageStat")

from playwright.async_api import Browser, Page, Route, async_playwright, expect  # noqa: E402

from shou.errors import ToolError  # noqa: E402
from shou.tools.builtin._browser_session import find_chromium  # noqa: E402

try:  # how shou itself finds the browser: SHOU_BROWSER_EXECUTABLE, else the system's Chromium
    CHROMIUM = find_chromium(None, None)
except ToolError as e:
    CHROMIUM = None
    need(False, str(e))

AXE = Path(__file__).resolve().parents[2] / "web" / "node_modules" / "axe-core" / "axe.min.js"
SHOTS = Path("/tmp")
# Prices for the scripted model and a currency, so a cost is known and shown converted: 2 EUR per USD.
CONFIG = ('vision = true\ncurrency = "EUR"\ncurrency_per_usd = 2.0\n'
          '[models."scripted-test"]\ninput_price = 3.0\noutput_price = 15.0\n')
# Anything the page's CSP refuses is a bug of the page (all its markup is its own or sanitised first), save one
# kind: Chromium reports the inline handlers of hostile markup that DOMPurify parses in an inert document (its
# DOMParser), where nothing runs, before it removes them.
WATCH = """
window.__violations = [];
document.addEventListener('securitypolicyviolation', e => {
  if (/\\/vendor\\/purify\\.es\\.mjs$/.test(e.sourceFile) && e.violatedDirective === 'script-src-attr') return;
  window.__violations.push(e.violatedDirective + ' ' + e.blockedURI + ' ' + e.sourceFile + ':' + e.lineNumber);
});
"""
FIXTURE_PAGE = ("<html><head><title>Fixture page</title></head><body style='margin:0'>"
                "<div style='height:400px;background:#c03'>red block</div>"
                "<div style='height:400px;background:#03c'>blue block</div></body></html>")
CHANGED = re.compile(r"\bchanged\b")  # a tree entry's class when the followed run changed it
REPORT = "# Report\n\n| city | people |\n|------|--------|\n| Oslo | 700 |\n| Lima | 9000 |\n"
ANSWER = ("I wrote **report.md**.\n\n| tool | what |\n|---|---|\n| write_file | the report |\n"
          "| browser | a screenshot |\n| shell | `ls` |\n\n```python\nprint('done')\n```\n")


def call(name: str, **arguments: Any) -> dict[str, Any]:
    return {"tool_calls": [{"name": name, "arguments": arguments}]}


def config_dir(tmp_path: Path, extra: str = "") -> Path:
    cfg = tmp_path / "config"
    cfg.mkdir(exist_ok=True)
    (cfg / "shou.toml").write_text(CONFIG + extra)
    return cfg


@pytest.fixture
async def browser() -> AsyncIterator[Browser]:
    async with async_playwright() as pw:
        b = await pw.chromium.launch(executable_path=CHROMIUM, args=["--disable-gpu", "--no-first-run"])
        try:
            yield b
        finally:
            await b.close()


@pytest.fixture
async def new_page(browser: Browser) -> AsyncIterator[Callable[..., Awaitable[Page]]]:
    """Pages whose script errors and CSP violations fail the test."""
    pages: list[Page] = []
    errors: list[str] = []

    async def make(width: int = 1280, height: int = 860, scheme: str = "light") -> Page:
        ctx = await browser.new_context(viewport={"width": width, "height": height}, color_scheme=scheme)
        await ctx.add_init_script(WATCH)
        pg = await ctx.new_page()
        pg.on("pageerror", lambda exc: errors.append(str(exc)))
        pg.set_default_timeout(20_000)
        pages.append(pg)
        return pg

    yield make
    for pg in pages:
        if not pg.is_closed():
            assert await pg.evaluate("window.__violations") == [], "the page's CSP refused something"
    assert not errors, f"errors on the page: {errors}"


async def open_page(make: Callable[..., Awaitable[Page]], served: Served, **kw: Any) -> Page:
    page = await make(**kw)
    await page.goto(served.link)
    await expect(page.locator("html")).to_have_attribute("data-ready", "1")
    return page


async def send(page: Page, task: str) -> None:
    await page.locator("#task").fill(task)
    await page.locator("#task").press("Enter")


async def finished(page: Page, n: int = 1, status: str = "completed") -> None:
    """Wait for the n-th run in the chat to end with `status`."""
    await expect(page.locator("#chat .run").nth(n - 1).locator(".run-head .status")).to_have_text(status,
                                                                                                 timeout=60_000)
    await expect(page.locator("#send")).to_be_enabled()


async def tab(page: Page, name: str) -> None:
    await page.locator(f"#tabbtn-{name}").click()
    await expect(page.locator(f"#tab-{name}")).to_be_visible()


async def not_blank(page: Page, selector: str, path: Path) -> None:
    """The element's pixels: many colours, not one flat area."""
    await page.locator(selector).screenshot(path=str(path))
    with Image.open(path) as img:
        rgb = img.convert("RGB")
        assert rgb.size[0] > 100 and rgb.size[1] > 60, f"{path.name} is tiny"
        assert sum(ImageStat.Stat(rgb).var) > 1000, f"{path.name} is blank"


async def pane_text(page: Page) -> dict[str, str]:
    """What each computer tab shows, as text."""
    out = {}
    for name in ("files", "browser", "terminal", "plan"):
        await tab(page, name)
        if name == "files":  # the run's marks and the tree (the preview is whatever was picked)
            await expect(page.locator("#tree")).to_have_attribute("aria-busy", "false")  # the listing it asked for
            await expect(page.locator("#tree li").first).to_be_visible()
            out[name] = await page.locator("#changed").inner_text() + await page.locator("#tree").inner_text()
        else:
            out[name] = await page.locator(f"#tab-{name}").inner_text()
    return out


# ---------------------------------------------------------------------------------------------- the workspace


def workspace_script(ws: Path) -> list[dict[str, Any]]:
    return [call("write_file", path="report.md", content=REPORT),
            call("browser", action="navigate", url=(ws / "fixture.html").as_uri()),
            call("browser", action="screenshot"),
            call("shell", command="ls"),
            {"text": ANSWER, "chunk_size": 7},
            # the second task
            call("shell", command="printf '\\033[32mgreen\\033[0m\\n'; exit 3"),
            {"text": "It exited with 3."}]


async def test_a_run_fills_the_computer_pane_and_reopens_the_same(serve, tmp_path: Path, workspace: Path,
                                                                  new_page) -> None:
    (workspace / "fixture.html").write_text(FIXTURE_PAGE)
    srv = serve(workspace_script(workspace))
    env = shou_env(tmp_path, srv, SHOU_CONFIG_DIR=str(config_dir(tmp_path)))
    with serving(workspace, env) as served:
        page = await open_page(new_page, served)
        await send(page, "Write the report, look at the fixture page, list the files")
        await finished(page)

        # the answer: Markdown, its table a real table, its code highlighted
        answer = page.locator("#chat .answer")
        await expect(answer.locator("table th")).to_have_text(["tool", "what"])
        await expect(answer.locator("table td").first).to_have_text("write_file")
        await expect(answer.locator("strong")).to_have_text("report.md")
        await expect(answer.locator("pre code.hljs span").first).to_be_visible()

        # Files: report.md marked changed by this run; its preview renders the table
        await tab(page, "files")
        changed = page.locator('#tree li.file.changed[data-path="report.md"]')
        await expect(changed).to_have_count(1)
        await expect(page.locator('#tree li.file[data-path="fixture.html"]')).not_to_have_class(CHANGED)
        await expect(page.locator("#changed")).to_contain_text("report.md")
        await changed.locator("button.entry").click()
        await expect(page.locator("#preview .preview-md table td")).to_have_text(["Oslo", "700", "Lima", "9000"])
        await expect(page.locator("#tree .tree-list li")).to_have_count(2)  # never .shou/

        # Browser: this run's screenshot, not blank, with the page's URL
        await tab(page, "browser")
        await expect(page.locator("#tab-browser .url")).to_have_text((workspace / "fixture.html").as_uri())
        await expect(page.locator("#tab-browser .thumb")).to_have_count(1)
        assert await page.locator("#tab-browser .shot-main img").evaluate("i => i.complete && i.naturalWidth") > 0
        await not_blank(page, "#tab-browser .shot-main img", tmp_path / "shot.png")
        await page.locator("#tab-browser .shot-main").click()  # enlarged in a dialog; Esc closes it
        await expect(page.locator("#lightbox")).to_be_visible()
        await page.keyboard.press("Escape")
        await expect(page.locator("#lightbox")).to_be_hidden()

        # Terminal: the command, its output, its exit code
        await tab(page, "terminal")
        term = page.locator("#tab-terminal .terminal")
        await expect(term.locator(".term-cmd")).to_have_text("$ ls")
        await expect(term.locator(".term-out")).to_contain_text("report.md")
        await expect(term.locator(".term-exit")).to_contain_text("exit code 0")

        # the header: status, steps, tokens, the cost in euros, the duration; the trace with each request
        head = page.locator("#chat .run-head .facts")
        await expect(head).to_contain_text("5 steps")
        assert "cost €0.0" in await head.inner_text() and "unknown" not in await head.inner_text()
        await page.locator("#chat .trace-toggle").click()
        await expect(page.locator("#chat .trace .bar.model")).to_have_count(5)
        await expect(page.locator("#chat .trace .trace-row .bar.tool")).to_have_count(4)
        first_call = page.locator("#chat .trace-call").first
        await first_call.locator("summary").click()
        await expect(first_call.locator(".trace-json").first).to_contain_text("Write the report, look at the")

        # a second run of the session: its shell call exits 3, in colour
        await send(page, "Run the failing command")
        await finished(page, 2)
        term = page.locator("#tab-terminal .terminal")
        await tab(page, "terminal")
        await expect(term.locator(".term-exit")).to_contain_text("exit code 3")
        await expect(term.locator(".term-out .ansi-fg-2")).to_have_text("green")
        await page.locator("#chat .run").nth(1).locator(".trace-toggle").click()
        await expect(page.locator("#chat .run").nth(1).locator(".trace .bar.model")).to_have_count(2)

        live_heads = await page.locator("#chat .run-head").all_inner_texts()
        live_traces = await page.locator("#chat .trace-call summary").all_inner_texts()
        live_chat = await page.locator("#chat .run-body").all_inner_texts()
        live_pane = await pane_text(page)
        await screenshots(page)

        # reload, reopen the session: every run shows what it showed live
        await page.reload()
        await expect(page.locator("html")).to_have_attribute("data-ready", "1")
        await page.locator("#sessions li button").first.click()
        await finished(page, 2, "completed")
        await expect(page.locator("#chat .run")).to_have_count(2)
        for n in range(2):
            await page.locator("#chat .run").nth(n).locator(".trace-toggle").click()
        await expect(page.locator("#chat .trace .bar.model")).to_have_count(7)
        assert await page.locator("#chat .run-head").all_inner_texts() == live_heads
        assert await page.locator("#chat .trace-call summary").all_inner_texts() == live_traces
        assert await page.locator("#chat .run-body").all_inner_texts() == live_chat
        assert await pane_text(page) == live_pane  # the last run's pane
        await page.locator("#chat .run").first.locator(".computer-btn").click()  # the first run's pane
        await tab(page, "browser")
        await not_blank(page, "#tab-browser .shot-main img", tmp_path / "shot-reopened.png")
        await tab(page, "files")
        await expect(page.locator('#tree li.file.changed[data-path="report.md"]')).to_have_count(1)
    assert len(srv.requests) == 7


class HeldListings:
    """A route for the Files tab's listings (GET /v1/files): while `holding`, each request is answered by the
    server at once (the workspace as it is then) but the answer reaches the page only on `release()`; once not
    holding, requests pass straight through. Lets a test put a listing's arrival after later events."""

    def __init__(self) -> None:
        self.holding = True
        self.asked = asyncio.Event()  # a listing has been held
        self.go = asyncio.Event()

    @staticmethod
    def matches(url: str) -> bool:
        return "/v1/files?" in url

    async def handle(self, route: Route) -> None:
        if not self.holding:
            await route.continue_()
            return
        self.asked.set()
        response = await route.fetch()
        await self.go.wait()
        await route.fulfill(response=response)

    async def wait_asked(self) -> None:
        await asyncio.wait_for(self.asked.wait(), 20)  # a bound on a broken page, not a wait for anything

    def release(self) -> None:
        self.holding = False
        self.go.set()


async def test_the_files_tab_marks_the_shown_run_s_files_before_its_listing_arrives(serve, tmp_path: Path,
                                                                                     workspace: Path,
                                                                                     new_page) -> None:
    """The tree's "changed" marks are the followed run's the moment the Files tab shows it, not the previous
    run's left in the tree until the listing the tab asks for arrives (held here until the marks are checked)."""
    srv = serve([call("write_file", path="report.md", content=REPORT), {"text": "Wrote it."},
                 {"text": "Nothing to change."}])
    with serving(workspace, shou_env(tmp_path, srv)) as served:
        page = await open_page(new_page, served)
        await send(page, "Write the report")
        await finished(page)
        await tab(page, "files")
        await expect(page.locator('#tree li.file.changed[data-path="report.md"]')).to_have_count(1)
        await tab(page, "terminal")  # the Files tab hidden while the next run goes by

        held = HeldListings()
        await page.route(HeldListings.matches, held.handle)
        await send(page, "Change nothing")
        await finished(page, 2)
        await tab(page, "files")
        await held.wait_asked()
        await expect(page.locator("#changed")).to_have_text("This run changed no files.")
        await expect(page.locator('#tree li.file[data-path="report.md"]')).to_have_count(1)  # the listing it had
        await expect(page.locator("#tree li.changed, #tree .badge")).to_have_count(0)  # but this run's marks
        await expect(page.locator("#tree")).to_have_attribute("aria-busy", "true")  # still asking
        held.release()
        await expect(page.locator("#tree")).to_have_attribute("aria-busy", "false")
        await expect(page.locator('#tree li.file[data-path="report.md"]')).not_to_have_class(CHANGED)
        await expect(page.locator("#tree li.changed, #tree .badge")).to_have_count(0)


async def test_an_older_listing_answered_late_never_replaces_a_newer_one(serve, tmp_path: Path, workspace: Path,
                                                                        new_page) -> None:
    """Two listings of the workspace in flight, the older one answered last: the tree keeps the newer."""
    (workspace / "old.txt").write_text("old\n")
    with serving(workspace, shou_env(tmp_path, serve([]))) as served:
        page = await new_page()
        held = HeldListings()
        await page.route(HeldListings.matches, held.handle)
        await page.goto(served.link)  # the Files tab, shown first, asks for the listing: held (old.txt only)
        await expect(page.locator("html")).to_have_attribute("data-ready", "1")
        await held.wait_asked()
        held.holding = False
        (workspace / "new.txt").write_text("new\n")
        await page.locator("#files-refresh").click()  # a newer listing, answered at once
        await expect(page.locator('#tree li.file[data-path="new.txt"]')).to_have_count(1)
        held.release()  # the older listing arrives now
        await expect(page.locator("#tree")).to_have_attribute("aria-busy", "false")
        await expect(page.locator("#tree li.file")).to_have_count(2)
        await expect(page.locator('#tree li.file[data-path="new.txt"]')).to_have_count(1)


async def screenshots(page: Page) -> None:
    """The page light and dark at 1280 px, then at 375 px (the chat and the computer pane), in /tmp."""
    for scheme in ("light", "dark"):
        await page.emulate_media(color_scheme=scheme)
        await tab(page, "files")
        await page.screenshot(path=str(SHOTS / f"shou-web-1280-{scheme}.png"))
    await page.set_viewport_size({"width": 375, "height": 812})
    for scheme in ("light", "dark"):
        await page.emulate_media(color_scheme=scheme)
        await page.locator("#chat").evaluate("c => { c.scrollTop = c.scrollHeight; }")
        await page.screenshot(path=str(SHOTS / f"shou-web-375-{scheme}.png"))
        await page.locator("#chat .run").first.locator(".computer-btn").click()
        await tab(page, "browser")
        await page.screenshot(path=str(SHOTS / f"shou-web-375-{scheme}-computer.png"))
        await page.locator("#computer-back").click()
        await expect(page.locator("#chat")).to_be_visible()
    for name in ("1280-light", "1280-dark", "375-light", "375-dark", "375-light-computer"):
        with Image.open(SHOTS / f"shou-web-{name}.png") as img:
            assert sum(ImageStat.Stat(img.convert("RGB")).var) > 300, f"shou-web-{name}.png is blank"
    # at 375 px nothing is wider than the screen
    assert await page.evaluate("document.documentElement.scrollWidth") <= 375
    await page.set_viewport_size({"width": 1280, "height": 860})
    await page.emulate_media(color_scheme="light")


# ---------------------------------------------------------------------------------------------- hostile content

PWN = "window.top.__pwned = (window.top.__pwned || []).concat"
HOSTILE_ANSWER = (
    f'Look: <img src=x onerror="{PWN}(\'img\')"> and [click me](javascript:{PWN}([\'link\'])) '
    f'and <a href="javascript:{PWN}([\'a\'])">this</a> <b onmouseover="{PWN}([\'b\'])">bold</b>\n\n'
    f'<script>{PWN}(["script"])</script>\n\n'
    f'```html\n<script>{PWN}(["code"])</script>\n```\n\n'
    '<iframe src="javascript:alert(1)"></iframe><form action="https://example.com"><button>go</button></form>\n\n'
    '[a fine link](https://example.com/docs)'
)
HOSTILE_HTML = ("<html><body><h1>Evil page</h1><script>parent.document.body.dataset.pwned = 'frame';"
                f"{PWN}(['frame'])</script><img src=x onerror=\"{PWN}(['frame-img'])\"></body></html>")
HOSTILE_NAME = '<img src=x onerror="window.__pwned=1">.txt'


async def test_hostile_answers_files_and_names_run_nothing(serve, tmp_path: Path, workspace: Path,
                                                           new_page) -> None:
    srv = serve([call("write_file", path="evil.html", content=HOSTILE_HTML),
                 call("write_file", path="evil.md", content=HOSTILE_ANSWER),
                 call("write_file", path=HOSTILE_NAME, content="x"),
                 call("shell", command="echo '<img src=x onerror=alert(1)>'"),
                 {"text": HOSTILE_ANSWER, "chunk_size": 9}])
    env = shou_env(tmp_path, srv, SHOU_CONFIG_DIR=str(config_dir(tmp_path)))
    with serving(workspace, env) as served:
        page = await open_page(new_page, served)
        await send(page, "Be evil")
        await finished(page)
        answer = page.locator("#chat .answer")
        await expect(answer).to_contain_text("Look:")
        # nothing of it is live markup: no image, handler, script, frame, form or javascript: link
        for sel in ("img", "script", "iframe", "form", "button", "[onerror]", "[onmouseover]", 'a[href^="javascript"]'):
            await expect(answer.locator(sel)).to_have_count(0)
        await expect(answer.locator("pre code")).to_contain_text("<script>")  # shown as code, as text
        fine = answer.locator('a[href="https://example.com/docs"]')
        await expect(fine).to_have_attribute("target", "_blank")
        await expect(fine).to_have_attribute("rel", "noopener noreferrer")
        await answer.get_by_text("click me").click()
        await answer.get_by_text("this", exact=True).click()
        await answer.locator("b").hover()

        # the workspace's files: the HTML in a frame that runs nothing; the Markdown sanitised; the odd name text
        await tab(page, "files")
        await page.locator('#tree li[data-path="evil.html"] button.entry').click()
        frame = page.locator("#preview iframe.preview-frame")
        await expect(frame).to_have_attribute("sandbox", "")
        await expect(page.frame_locator("#preview iframe").locator("h1")).to_have_text("Evil page")
        await page.locator('#tree li[data-path="evil.md"] button.entry').click()
        await expect(page.locator("#preview .preview-md")).to_contain_text("Look:")
        await expect(page.locator("#preview .preview-md img, #preview .preview-md script")).to_have_count(0)
        odd = page.locator("#tree li.file").filter(has_text="onerror")
        await expect(odd.locator("button.entry")).to_have_text(HOSTILE_NAME)
        await odd.locator("button.entry").click()
        await expect(page.locator("#preview .preview-name")).to_have_text(HOSTILE_NAME)
        await tab(page, "terminal")
        await expect(page.locator("#tab-terminal .term-out")).to_have_text("<img src=x onerror=alert(1)>")
        await expect(page.locator("#tab-terminal img")).to_have_count(0)

        assert await page.evaluate("window.__pwned") is None
        assert await page.evaluate("document.body.dataset.pwned") is None
        assert await page.evaluate("document.querySelectorAll('#app img[onerror], #app script').length") == 0


# ---------------------------------------------------------------------------------------------- uploads


async def test_an_upload_is_confined_and_the_next_task_reads_it(serve, tmp_path: Path, workspace: Path,
                                                                new_page) -> None:
    srv = serve([
        {"expect": [r"Attached files \(in the workspace\): notes\.txt"],
         "tool_calls": [{"name": "read_file", "arguments": {"path": "notes.txt"}}]},
        {"expect": ["the secret word is parsnip"], "text": "The notes say: parsnip."},
    ])
    env = shou_env(tmp_path, srv, SHOU_CONFIG_DIR=str(config_dir(tmp_path)))
    with serving(workspace, env) as served:
        page = await open_page(new_page, served)
        await tab(page, "files")
        data = {"name": "data.csv", "mimeType": "text/csv", "buffer": b"a,b\n1,2\n"}
        await page.locator("#upload-file").set_input_files(data)
        await expect(page.locator("#upload-path")).to_have_value("data.csv")
        for bad in ("../x.csv", "/tmp/x.csv", ".shou/x.csv"):
            await page.locator("#upload-path").fill(bad)
            await page.locator("#upload-form button[type=submit]").click()
            await expect(page.locator("#upload-msg")).to_contain_text("Refused")
            await expect(page.locator("#upload-msg")).to_have_class("upload-msg bad")
        assert not (workspace.parent / "x.csv").exists() and not (workspace / ".shou" / "x.csv").exists()
        await page.locator("#upload-path").fill("inbox/data.csv")
        await page.locator("#upload-form button[type=submit]").click()
        await expect(page.locator("#upload-msg")).to_contain_text("Uploaded inbox/data.csv")
        assert (workspace / "inbox" / "data.csv").read_bytes() == b"a,b\n1,2\n"
        await page.locator('#tree li.dir[data-path="inbox"] > button').click()
        await page.locator('#tree li[data-path="inbox/data.csv"] button.entry').click()
        await expect(page.locator("#preview .preview-text")).to_have_text("a,b\n1,2\n")

        # attached to a task: uploaded, named in it, read by the run
        notes = {"name": "notes.txt", "mimeType": "text/plain", "buffer": b"the secret word is parsnip\n"}
        await page.locator("#attach-input").set_input_files(notes)
        await expect(page.locator("#attachments .chip")).to_contain_text("notes.txt")
        await send(page, "What do my notes say?")
        await finished(page)
        await expect(page.locator("#chat .answer")).to_have_text("The notes say: parsnip.")
        await expect(page.locator("#chat .tool-call .tool-result")).to_contain_text("parsnip")
        await expect(page.locator("#attachments .chip")).to_have_count(0)
        assert (workspace / "notes.txt").read_text() == "the secret word is parsnip\n"


# ---------------------------------------------------------------------------------------------- the keyboard


async def test_the_keyboard_sends_recalls_and_stops(serve, tmp_path: Path, workspace: Path, new_page) -> None:
    srv = serve([{"text": "first answer"}, {"text": "never said", "hang": True}])
    with serving(workspace, shou_env(tmp_path, srv)) as served:
        page = await open_page(new_page, served)
        box = page.locator("#task")
        await box.fill("line one")
        await box.press("Shift+Enter")
        await box.type("line two")
        await expect(box).to_have_value("line one\nline two")  # Shift+Enter: a new line, nothing sent
        await expect(page.locator("#chat .run")).to_have_count(0)
        await box.press("Enter")
        await finished(page)
        await expect(page.locator("#chat .bubble.user")).to_have_text("line one\nline two")
        await expect(box).to_have_value("")
        await box.press("ArrowUp")  # the last task comes back
        await expect(box).to_have_value("line one\nline two")
        await box.fill("wait forever")
        await box.press("Enter")
        await expect(page.locator("#chat .run").nth(1).locator(".run-head .stop")).to_be_visible()
        await page.keyboard.press("Escape")  # stops the running run
        await finished(page, 2, "cancelled")
        await expect(page.locator("#chat .run").nth(1).locator(".run-head .stop")).to_be_hidden()


# ---------------------------------------------------------------------------------------------- accessibility


def verdict(done: bool) -> dict[str, Any]:
    return call("step_verdict", done=done, reason="it did what it was for")


async def axe(page: Page, where: str) -> None:
    """axe-core's serious and critical violations on the page as it is: none."""
    if not await page.evaluate("typeof window.axe !== 'undefined'"):
        await page.evaluate(AXE.read_text(encoding="utf-8"))
    result = await page.evaluate("axe.run(document, {resultTypes: ['violations']})")
    bad = [{"id": v["id"], "impact": v["impact"], "nodes": [n["target"] for n in v["nodes"]][:5]}
           for v in result["violations"] if v["impact"] in ("serious", "critical")]
    assert not bad, f"{where}: {json.dumps(bad, indent=1)}"


async def test_the_main_views_pass_axe_light_and_dark(serve, tmp_path: Path, workspace: Path, new_page) -> None:
    need(AXE.is_file(), f"axe-core is not installed at {AXE} (npm ci in web/, as .ci/install does)")
    (workspace / "fixture.html").write_text(FIXTURE_PAGE)
    srv = serve([
        # run 1, with a plan: one step (a sub-run) that writes a file and takes a screenshot
        call("submit_plan", steps=["Write the notes and look at the page"]),
        call("write_file", path="notes.md", content="# Notes\n\n- one\n- two\n"),
        call("browser", action="navigate", url=(workspace / "fixture.html").as_uri()),
        call("browser", action="screenshot"),
        {"text": "Wrote the notes and looked."},
        verdict(True),
        {"text": "Done: see **notes.md**.\n\n| a | b |\n|---|---|\n| 1 | 2 |"},
        # run 2: a shell call that needs a person's approval
        call("shell", command="ls"),
        {"text": "Listed."},
    ])
    cfg = config_dir(tmp_path, '[permissions]\nask = ["shell"]\n')
    with serving(workspace, shou_env(tmp_path, srv, SHOU_CONFIG_DIR=str(cfg))) as served:
        page = await open_page(new_page, served)
        await page.locator("#opt-plan").check()
        await send(page, "Make notes with a plan")
        await finished(page)
        await tab(page, "plan")
        step = page.locator("#tab-plan li.step")
        await expect(step).to_have_attribute("data-status", "done")
        await expect(step.locator("details.subrun summary")).to_contain_text("completed")
        await page.locator("#opt-plan").uncheck()
        await send(page, "List the files")
        await expect(page.locator("#approvals .approval")).to_have_count(1)
        await expect(page.locator("#approvals .approval .why")).not_to_be_empty()
        await expect(page.locator("#approvals .approval .tool-args")).to_contain_text('"command": "ls"')
        for scheme in ("light", "dark"):
            await page.emulate_media(color_scheme=scheme)
            await axe(page, f"a pending approval ({scheme})")
            await page.screenshot(path=str(SHOTS / f"shou-web-1280-{scheme}-approval.png"))
        await page.locator("#chat .approval button.approve").click()
        await finished(page, 2)
        await page.locator("#chat .run").first.locator(".computer-btn").click()
        for scheme in ("light", "dark"):
            await page.emulate_media(color_scheme=scheme)
            await page.locator("#chat .run").first.locator(".trace-toggle").click()
            await expect(page.locator("#chat .trace .bar.model").first).to_be_visible()
            await axe(page, f"the chat with a finished run and its trace ({scheme})")
            await page.locator("#chat .run").first.locator(".trace-toggle").click()
            for name in ("files", "browser", "terminal", "plan"):
                await tab(page, name)
                if name == "files":
                    await page.locator('#tree li[data-path="notes.md"] button.entry').click()
                    await expect(page.locator("#preview .preview-md li")).to_have_count(2)
                if name == "browser":
                    await expect(page.locator("#tab-browser .shot-main img")).to_be_visible()
                await axe(page, f"the {name} tab ({scheme})")
                await page.screenshot(path=str(SHOTS / f"shou-web-1280-{scheme}-{name}.png"))
            await page.locator("#show-usage").click()
            await expect(page.locator("#usage-body table tbody tr")).to_have_count(1)
            await expect(page.locator("#usage-body tfoot")).to_contain_text("€")
            await axe(page, f"the usage view ({scheme})")
            await page.screenshot(path=str(SHOTS / f"shou-web-1280-{scheme}-usage.png"))
            await page.locator("#show-usage").click()
        await page.set_viewport_size({"width": 375, "height": 812})
        await axe(page, "the chat at 375 px (dark)")
        with Image.open(io.BytesIO(await page.screenshot())) as img:
            assert img.size == (375, 812)


async def test_a_text_only_model_s_screenshots_still_reach_the_browser_pane(serve, tmp_path: Path, workspace: Path,
                                                                           new_page) -> None:
    """A model that cannot see images gets the page's text instead of the screenshot, so the image is not in
    the run's events; the server serves the one the browser kept, for that run's call and its owner only."""
    from ..fixtures.serving import stream_run

    (workspace / "fixture.html").write_text(FIXTURE_PAGE)
    shot = {"tool_calls": [{"name": "browser", "arguments": {"action": "screenshot"}, "id": "shot_1"}]}
    srv = serve([call("browser", action="navigate", url=(workspace / "fixture.html").as_uri()), shot,
                 call("calculator", expression="1+1"), {"text": "Seen."}])
    cfg = config_dir(tmp_path)
    (cfg / "shou.toml").write_text(CONFIG.replace("vision = true", "vision = false"))
    tokens = tmp_path / "tokens.txt"
    tokens.write_text("alice-token-0123456789 alice\nbob-token-0123456789ab bob\n")
    tokens.chmod(0o600)
    env = shou_env(tmp_path, srv, SHOU_CONFIG_DIR=str(cfg))
    with serving(workspace, env, "--tokens", str(tokens)) as served:
        with served.client("alice-token-0123456789") as alice:
            run = alice.post("/v1/runs", json={"task": "Look at the fixture page"}).json()
            events = stream_run(alice, run["run_id"])
            (done,) = [m["data"] for m in events if m["event"] == "tool_call_finished" and
                       m["data"]["call_id"] == "shot_1"]
            assert not done.get("image") and "cannot see images" in done["content"]
            path = f"/v1/runs/{run['run_id']}/screenshots/shot_1"
            got = alice.get(path)
            assert got.status_code == 200 and got.headers["content-type"] == "image/png"
            assert got.content.startswith(b"\x89PNG")
            calc_id = next(m["data"]["call_id"] for m in events if m["event"] == "tool_call_finished"
                           and m["data"]["name"] == "calculator")
            assert alice.get(f"/v1/runs/{run['run_id']}/screenshots/{calc_id}").status_code == 404
        with served.client("bob-token-0123456789ab") as bob:
            assert bob.get(path).status_code == 404  # another user's run is not found, its screenshot neither
        page = await new_page()
        await page.goto(served.url + "/#token=alice-token-0123456789")
        await expect(page.locator("html")).to_have_attribute("data-ready", "1")
        await page.locator("#sessions li").first.click()
        await finished(page)
        await tab(page, "browser")
        await expect(page.locator("#tab-browser .thumb")).to_have_count(1)
        await expect(page.locator("#tab-browser .shot-main img")).to_have_js_property("complete", True)
        await not_blank(page, "#tab-browser .shot-main img", tmp_path / "kept-shot.png")
