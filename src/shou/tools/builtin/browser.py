"""`browser(action, ...)`: one tool that drives a headless Chromium through Playwright.

Actions: navigate, click, type, press, scroll, back, forward, wait, read, elements, screenshot,
tab_open, tab_switch, tab_close. The model finds things with a CSS/Playwright `selector`, or with the
`index` numbers `elements` hands out (more reliable for small models than writing selectors).
Each session has its own browser context; `close_browsers()` ends everything at the end of a run.

The browser reaches what web_fetch reaches: public addresses and the hosts a person allowed with
`web_allow_hosts`. navigate and tab_open check the URL's host first for a clear refusal; everything the
page then loads goes through shou's egress proxy, where a private address simply fails.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, Literal
from urllib.parse import urlsplit

# Imported here, not lazily, so that without Playwright the builtin registry leaves this tool out.
from ...errors import ToolError
from ...net.address import ALLOW_HINT, Allow, check_address
from ...workspace import save_output
from ..base import ToolContext, ToolResult, tool
from ..truncate import truncate
from ._browser_session import (
    ELEMENTS_JS,
    IDX_ATTR,
    MAX_ELEMENTS,
    BrowserSession,
    close_browser,
    close_browsers,
    describe_element,
    fit_image,
    get_session,
    likely_candidates,
    workspace_file_url,
)

__all__ = ["browser", "close_browser", "close_browsers"]

Action = Literal["navigate", "click", "type", "press", "scroll", "back", "forward", "wait", "read", "elements",
                 "screenshot", "tab_open", "tab_switch", "tab_close"]
DEFAULT_TIMEOUT = 15.0  # seconds per action; navigation gets twice as long
PAGE_TEXT_CAP = 4000
READ_MAX_BYTES = 30_000
PREVIEW_CHARS = 800

# Turns the page (or one element) into light markdown: headings, links, list items, table cells.
READ_JS = """
(root) => {
  const out = [], skip = new Set(['SCRIPT', 'STYLE', 'NOSCRIPT', 'TEMPLATE', 'SVG', 'HEAD', 'IFRAME']);
  const block = /^(P|DIV|SECTION|ARTICLE|UL|OL|TABLE|TR|HEADER|FOOTER|NAV|MAIN|FORM|BLOCKQUOTE|PRE|DL|DT|DD|ASIDE)$/;
  const walk = node => {
    if (node.nodeType === 3) { out.push(node.textContent.replace(/\\s+/g, ' ')); return; }
    if (node.nodeType !== 1 || skip.has(node.tagName)) return;
    if (node.checkVisibility && !node.checkVisibility()) return;
    const tag = node.tagName;
    if (/^H[1-6]$/.test(tag)) {
      out.push('\\n\\n' + '#'.repeat(+tag[1]) + ' ' + node.innerText.trim() + '\\n\\n'); return; }
    if (tag === 'A' && node.getAttribute('href') && node.innerText.trim()) {
      out.push('[' + node.innerText.trim().replace(/\\s+/g, ' ') + '](' + node.href + ')'); return; }
    if (tag === 'IMG') { if (node.alt) out.push('![' + node.alt + ']'); return; }
    if (tag === 'BR') { out.push('\\n'); return; }
    if (tag === 'LI') out.push('\\n- ');
    if (tag === 'TD' || tag === 'TH') out.push(' | ');
    if (block.test(tag)) out.push('\\n');
    for (const c of node.childNodes) walk(c);
    if (block.test(tag)) out.push('\\n');
  };
  walk(root || document.body);
  return out.join('').replace(/[ \\t]+\\n/g, '\\n').replace(/\\n[ \\t]+/g, '\\n').replace(/\\n{3,}/g, '\\n\\n').trim();
}
"""


def _timeouts(ctx: ToolContext) -> tuple[float, float]:
    """(action, navigation) timeouts in milliseconds, from the `browser_timeout` setting if present."""
    seconds = float(getattr(ctx.settings, "browser_timeout", None) or DEFAULT_TIMEOUT)
    return seconds * 1000, seconds * 2000


async def _check_url(ctx: ToolContext, url: str | None) -> str:
    if not url or not url.strip():
        raise ToolError("navigate needs url, e.g. url='https://example.com'")
    url = url.strip()
    scheme = url.split(":", 1)[0].lower() if ":" in url else ""
    if scheme in ("http", "https"):
        from ...net.hostname import BadHost, canonical_url

        try:
            parts = urlsplit(url)
            host, port = parts.hostname, parts.port or (443 if scheme == "https" else 80)
            if host:
                url = canonical_url(url)  # the host Chromium will reach, as the policy judged it
                host = urlsplit(url).hostname
        except BadHost as e:
            raise ToolError(f"cannot open {url!r}: {e}") from None
        except ValueError as e:
            raise ToolError(f"{url!r} is not a valid URL: {e}") from None
        if not host:
            raise ToolError(f"{url!r} has no host; give a full URL such as 'https://example.com/'")
        await check_address(host, port, Allow.from_settings(ctx.settings))  # the proxy would refuse it too
        return url
    if scheme == "file":
        return workspace_file_url(ctx.workspace, url)
    if not scheme or "." in scheme:
        raise ToolError(f"{url!r} has no scheme; give a full URL such as 'https://{url}'")
    raise ToolError(f"the {scheme}: scheme is not allowed; use http://, https:// or a file:// URL inside the "
                    "workspace")


def _refused(response: Any) -> Any:
    """The navigation's response, or a `ToolError` if the egress proxy refused where it led (say, a redirect)."""
    reason = response.headers.get("x-shou-refused") if response is not None and response.status == 403 else None
    if reason:
        raise ToolError(f"refused: {reason}; shou only connects to public addresses ({ALLOW_HINT})")
    return response


async def _locate(page: Any, selector: str | None, index: int | None, action: str, wait_ms: float) -> Any:
    """The one element `selector` or `index` names; an error listing likely candidates if none matches."""
    if index is not None:
        loc = page.locator(f"[{IDX_ATTR}='{int(index)}']")
        if await loc.count() == 0:
            raise ToolError(f"no element [{index}] on the page (numbers change when the page does); "
                            "call browser action='elements' to number the elements again")
        return loc.first
    if not selector:
        raise ToolError(f"{action} needs selector (CSS or Playwright, e.g. 'text=Sign in') or index "
                        "(a number from action='elements')")
    from playwright.async_api import Error as PlaywrightError

    loc = page.locator(selector)
    try:
        count = await loc.count()
    except PlaywrightError as e:
        raise ToolError(f"selector {selector!r} is not valid: {str(e).splitlines()[0]}") from None
    if count == 0:
        with contextlib.suppress(PlaywrightError):  # give the page a moment to render what was asked for
            await loc.first.wait_for(state="attached", timeout=min(wait_ms, 2000))
            return loc.first
        elements = await page.evaluate(ELEMENTS_JS, [IDX_ATTR, MAX_ELEMENTS])
        lines = [describe_element(el) for el in likely_candidates(selector, elements)]
        hint = ("Likely candidates (use index=N):\n" + "\n".join(lines)) if lines else \
            "The page has no interactive elements; call action='read' to see what it shows."
        raise ToolError(f"no element matches selector {selector!r}. {hint}")
    return loc.first


async def _summary(page: Any) -> str:
    return f"{await page.title() or '(no title)'} ({page.url})"


async def _page_text(page: Any, selector: str | None = None) -> str:
    if selector:
        return str(await page.locator(selector).first.evaluate(READ_JS))
    return str(await page.evaluate(READ_JS))


async def _settle(page: Any, wait_ms: float) -> None:
    """Let a navigation an action started get going, without failing when there was none."""
    with contextlib.suppress(Exception):
        await page.wait_for_load_state("domcontentloaded", timeout=min(wait_ms, 5000))


def _tabs(sess: BrowserSession) -> str:
    return "\n".join(f"[{i + 1}] {p.url}" + ("  (active)" if i == sess.active else "")
                     for i, p in enumerate(sess.pages))


@tool(timeout=180, untrusted_output=True)
async def browser(
    action: Action, ctx: ToolContext, url: str | None = None, selector: str | None = None,
    index: int | None = None, text: str | None = None, key: str | None = None, full_page: bool = False,
) -> ToolResult:
    """Use a web browser (headless Chromium): open pages, read them, click, type, take screenshots.

    Typical flow: navigate, then elements (lists clickable/typable elements with numbers), then click or
    type with index=N, then read or screenshot to see the result.

    Args:
        action: navigate (url), click (selector or index), type (selector or index, text: fills the field),
            press (key, optionally into selector/index), scroll (text: down, up, top or bottom; or
            selector/index to scroll to), back, forward, wait (text or selector to appear), read (page as
            text, or only selector), elements (numbered interactive elements), screenshot (full_page),
            tab_open (optional url), tab_switch (index), tab_close (index, default the active tab).
        url: For navigate and tab_open: an http(s) URL or a file:// URL of a file in the workspace.
        selector: A CSS or Playwright selector, e.g. '#submit', 'text=Log in', 'input[name=q]'.
        index: An element number from action='elements' (for click/type/press/scroll), or a tab number
            (for tab_switch/tab_close).
        text: The text to type (type), to wait for (wait), or the scroll direction (scroll).
        key: The key to press, e.g. 'Enter', 'Tab', 'Control+a'.
        full_page: For screenshot: the whole page instead of the visible part.
    """
    # Imported here, not with the module: a run that never opens a page should not pay 0.1-0.4 s for it.
    from playwright.async_api import Error as PlaywrightError
    from playwright.async_api import TimeoutError as PlaywrightTimeout

    act_ms, nav_ms = _timeouts(ctx)
    if action == "navigate" or (action == "tab_open" and url):
        url = await _check_url(ctx, url)  # before starting a browser for a URL that will be refused
    sess = await get_session(ctx.resource_key or "default", ctx.workspace, ctx.settings)
    async with sess.lock:
        try:
            return await _run(_Call(sess, ctx, action, url, selector, index, text, key, full_page, act_ms, nav_ms))
        except PlaywrightTimeout as e:
            limit = nav_ms if action in ("navigate", "back", "forward", "tab_open") else act_ms
            target = url or selector or (f"element [{index}]" if index is not None else text) or ""
            raise ToolError(f"{action} {target!r} timed out after {limit / 1000:g} s "
                            f"({str(e).splitlines()[0]}); the page may be slow or unreachable") from None
        except PlaywrightError as e:
            message = str(e).split("Call log:")[0].strip().splitlines()[0]
            if "ERR_TUNNEL_CONNECTION_FAILED" in message:  # the egress proxy refused the host or could not reach it
                message += f" (shou only connects to public addresses; {ALLOW_HINT})"
            raise ToolError(f"{action} failed: {message}") from None


@dataclass(frozen=True, slots=True)
class _Call:
    """One browser call's arguments, the session it acts in and its time limits (ms)."""

    sess: BrowserSession
    ctx: ToolContext
    action: str
    url: str | None
    selector: str | None
    index: int | None
    text: str | None
    key: str | None
    full_page: bool
    act_ms: float
    nav_ms: float

    @property
    def target(self) -> str:
        """What the model pointed at, as the answers name it."""
        return self.selector or f"element [{self.index}]"


async def _run(c: _Call) -> ToolResult:
    if c.action == "tab_open":
        return await _tab_open(c)
    if c.action in ("tab_switch", "tab_close"):
        return await _tab_pick(c)
    page = await c.sess.page()
    act = _ACTIONS.get(c.action)
    if act is None:
        raise ToolError(f"unknown action {c.action!r}")  # the schema's Literal normally stops this first
    return await act(c, page)


async def _tab_open(c: _Call) -> ToolResult:
    sess = c.sess
    page = await sess.context.new_page()
    sess.active = len(sess.pages) - 1
    if c.url:  # checked by the caller
        _refused(await page.goto(c.url, timeout=c.nav_ms, wait_until="domcontentloaded"))
    return ToolResult(f"Opened tab [{sess.active + 1}]: {await _summary(page)}\nTabs:\n{_tabs(sess)}")


async def _tab_pick(c: _Call) -> ToolResult:
    sess, index = c.sess, c.index
    pages = sess.pages
    number = index if index is not None else sess.active + 1
    if c.action == "tab_switch" and index is None:
        raise ToolError(f"tab_switch needs index (a tab number). Tabs:\n{_tabs(sess)}")
    if not 1 <= number <= len(pages):
        raise ToolError(f"there is no tab [{number}]. Tabs:\n{_tabs(sess)}")
    if c.action == "tab_switch":
        sess.active = number - 1
        await pages[number - 1].bring_to_front()
        return ToolResult(f"Switched to tab [{number}]: {await _summary(pages[number - 1])}")
    await pages[number - 1].close()
    if sess.active >= number - 1:
        sess.active = max(0, sess.active - 1)
    left = _tabs(sess) or "(none; the next action opens a new tab)"
    return ToolResult(f"Closed tab [{number}]. Tabs:\n{left}")


async def _navigate(c: _Call, page: Any) -> ToolResult:
    response = _refused(await page.goto(str(c.url), timeout=c.nav_ms, wait_until="domcontentloaded"))
    status = f" (HTTP {response.status})" if response is not None else ""
    preview = (await _page_text(page))[:PREVIEW_CHARS]
    return ToolResult(f"Opened {await _summary(page)}{status}\n\n{preview}\n\n"
                      "[call action='read' for the whole page, action='elements' to act on it]",
                      details={"url": page.url, "status": response.status if response else None})


async def _history(c: _Call, page: Any) -> ToolResult:
    go = page.go_back if c.action == "back" else page.go_forward
    if await go(timeout=c.nav_ms, wait_until="domcontentloaded") is None:
        return ToolResult(f"No page to go {c.action} to; still on {await _summary(page)}")
    return ToolResult(f"Went {c.action} to {await _summary(page)}")


async def _click(c: _Call, page: Any) -> ToolResult:
    before = len(c.sess.pages)
    target_el = await _locate(page, c.selector, c.index, c.action, c.act_ms)
    await target_el.click(timeout=c.act_ms)
    await _settle(page, c.act_ms)
    note = ""
    if len(c.sess.pages) > before:
        note = f"\nThe click opened a new tab [{len(c.sess.pages)}]; use tab_switch to go there."
    return ToolResult(f"Clicked {c.target}. Now on {await _summary(page)}{note}")


async def _type(c: _Call, page: Any) -> ToolResult:
    if c.text is None:
        raise ToolError("type needs text (what to put in the field)")
    target_el = await _locate(page, c.selector, c.index, c.action, c.act_ms)
    await target_el.fill(c.text, timeout=c.act_ms)
    return ToolResult(f"Typed {len(c.text)} characters into {c.target}; "
                      "press key='Enter' or click a button to submit")


async def _press(c: _Call, page: Any) -> ToolResult:
    if not c.key:
        raise ToolError("press needs key, e.g. key='Enter'")
    if c.selector or c.index is not None:
        await (await _locate(page, c.selector, c.index, c.action, c.act_ms)).press(c.key, timeout=c.act_ms)
    else:
        await page.keyboard.press(c.key)
    await _settle(page, c.act_ms)
    return ToolResult(f"Pressed {c.key}. Now on {await _summary(page)}")


async def _wait(c: _Call, page: Any) -> ToolResult:
    if c.selector:
        await page.locator(c.selector).first.wait_for(state="visible", timeout=c.act_ms)
    elif c.text:
        await page.get_by_text(c.text).first.wait_for(state="visible", timeout=c.act_ms)
    else:
        raise ToolError("wait needs text (to appear on the page) or selector")
    return ToolResult(f"{c.selector or repr(c.text)} is on the page: {await _summary(page)}")


async def _read(c: _Call, page: Any) -> ToolResult:
    if c.selector:
        await _locate(page, c.selector, None, c.action, c.act_ms)
    body = await _page_text(page, c.selector)
    cut = truncate(body, max_bytes=READ_MAX_BYTES, keep="head",
                   hint="scroll or read a part with selector to see more")
    return ToolResult(f"# {await _summary(page)}\n\n{cut.text or '(the page shows no text)'}",
                      details={"url": page.url, "truncated": cut.truncated})


async def _elements(c: _Call, page: Any) -> ToolResult:
    elements = await page.evaluate(ELEMENTS_JS, [IDX_ATTR, MAX_ELEMENTS])
    if not elements:
        return ToolResult(f"No interactive elements on {await _summary(page)}; try action='read'")
    lines = "\n".join(describe_element(el) for el in elements)
    more = f"\n(only the first {MAX_ELEMENTS} are listed)" if len(elements) >= MAX_ELEMENTS else ""
    return ToolResult(f"Interactive elements on {await _summary(page)}; act on one with index=N:\n"
                      f"{lines}{more}", details={"elements": elements})


async def _scroll(c: _Call, page: Any) -> ToolResult:
    selector, index, text, act_ms = c.selector, c.index, c.text, c.act_ms
    if selector or index is not None:
        await (await _locate(page, selector, index, "scroll", act_ms)).scroll_into_view_if_needed(timeout=act_ms)
        return ToolResult(f"Scrolled {selector or f'element [{index}]'} into view")
    direction = (text or "down").strip().lower()
    scripts = {"down": "window.scrollBy(0, innerHeight * 0.9)", "up": "window.scrollBy(0, -innerHeight * 0.9)",
               "top": "window.scrollTo(0, 0)", "bottom": "window.scrollTo(0, document.body.scrollHeight)"}
    if direction not in scripts:
        raise ToolError(f"scroll direction {direction!r} is not known; use text='down', 'up', 'top' or 'bottom'")
    y, height, view = await page.evaluate(
        f"() => {{ {scripts[direction]}; return [scrollY, document.documentElement.scrollHeight, innerHeight]; }}")
    return ToolResult(f"Scrolled {direction}: showing {int(y)}-{int(y + view)} of {int(height)} px")


async def _screenshot(c: _Call, page: Any) -> ToolResult:
    ctx, full_page, act_ms = c.ctx, c.full_page, c.act_ms
    raw = await page.screenshot(full_page=full_page, type="png", timeout=act_ms)
    data, media_type, size = fit_image(raw)
    stamp = time.strftime("%Y%m%d-%H%M%S")
    rel = save_output(ctx.workspace, f"shot-{stamp}", data, folder="screenshots",
                      suffix=".png" if media_type == "image/png" else ".jpg")  # never through a planted link
    path = ctx.workspace / rel
    title = await page.title() or "(no title)"
    page_text = (await _page_text(page))[:PAGE_TEXT_CAP]
    content = (f"Screenshot of {title} ({page.url}), {'full page' if full_page else 'viewport'}, "
               f"{size[0]}x{size[1]} px, saved to {rel}")
    from ...messages import ImagePart

    return ToolResult(content, image=ImagePart.from_bytes(data, media_type),
                      details={"page_text": page_text, "title": title, "url": page.url, "path": str(path)})


# The actions on the active page, by name (the tab actions choose the page themselves).
_ACTIONS: dict[str, Callable[[_Call, Any], Awaitable[ToolResult]]] = {
    "navigate": _navigate, "back": _history, "forward": _history, "click": _click, "type": _type, "press": _press,
    "scroll": _scroll, "wait": _wait, "read": _read, "elements": _elements, "screenshot": _screenshot,
}
