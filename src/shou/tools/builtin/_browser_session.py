"""The browser behind the `browser` tool: finding Chromium, one context per session, page helpers.

One Playwright driver and one Chromium run per event loop (Playwright objects belong to the loop that
made them), started on first use and never as root (`shou.net.chromium`). Each shou session gets its own
browser context (cookies, storage, tabs), so sessions never see each other's pages. `close_browsers()`
ends it all; if nobody calls it, the driver exits when the interpreter closes its pipe, so nothing hangs.

Every request the pages make goes somewhere shou decided: http(s) and websockets through the egress
proxy with the session's allow-list (`web_allow_hosts`), which refuses private addresses however the
page asks (redirect, subresource, fetch, frame, popup); `file://` is answered by shou itself with a
confined read of the workspace (the browser user may not be able to read it, and must not read more);
data: and blob: stay in the page; anything else is blocked.
"""

from __future__ import annotations

import asyncio
import contextlib
import difflib
import io
import mimetypes
import os
import re
import shutil
import urllib.parse
import weakref
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ...errors import ToolError
from ...net.address import Allow
from ...net.chromium import BROWSER_UID, launch_chromium
from ...net.egress import egress_proxy
from ...workspace import NotFound, open_file, read_bytes_beneath, relative_parts

__all__ = [
    "BrowserSession", "close_browser", "close_browsers", "describe_element", "find_chromium", "fit_image",
    "get_session", "likely_candidates", "workspace_file_url",
]

LAUNCH_ARGS = (
    "--disable-gpu", "--disable-quic", "--no-first-run", "--disable-sync",
    # Without these Chromium phones home (updates, field trials); on a closed network that only adds stalls.
    "--disable-background-networking", "--disable-component-update",
)
SYSTEM_CHROMIUMS = ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable")
VIEWPORT = {"width": 1280, "height": 800}
IDX_ATTR = "data-shou-idx"
MAX_ELEMENTS = 200
MAX_IMAGE_SIDE = 1568  # the longest side vision models take without rescaling themselves
MAX_IMAGE_BYTES = 1_500_000
MAX_FILE_BYTES = 50_000_000  # one workspace file served to a page

# Numbers the visible interactive elements (tagging each with data-shou-idx) and describes them.
ELEMENTS_JS = """
([attr, limit]) => {
  const sel = 'a[href], button, input:not([type=hidden]), select, textarea, summary, [role=button], [role=link],'
    + '[role=checkbox], [role=radio], [role=tab], [role=menuitem], [role=textbox], [role=combobox], [onclick],'
    + '[contenteditable=""], [contenteditable=true], [tabindex]:not([tabindex="-1"])';
  document.querySelectorAll('[' + attr + ']').forEach(e => e.removeAttribute(attr));
  const out = [];
  const clean = s => (s || '').replace(/\\s+/g, ' ').trim().slice(0, 80);
  for (const el of document.querySelectorAll(sel)) {
    const r = el.getBoundingClientRect(), st = getComputedStyle(el);
    if ((r.width === 0 && r.height === 0) || st.visibility === 'hidden' || st.display === 'none') continue;
    const i = out.length + 1;
    el.setAttribute(attr, String(i));
    const type = el.getAttribute('type') || '';
    const value = (el.tagName === 'INPUT' && type !== 'password') || el.tagName === 'TEXTAREA' ? el.value : '';
    out.push({index: i, tag: el.tagName.toLowerCase(), type, text: clean(el.innerText), value: clean(value),
      id: el.id || '', name: el.getAttribute('name') || '', placeholder: el.getAttribute('placeholder') || '',
      label: clean(el.getAttribute('aria-label') || (el.labels && el.labels[0] ? el.labels[0].innerText : '')),
      href: el.getAttribute('href') || '', cls: clean(el.getAttribute('class')).slice(0, 40),
      disabled: !!el.disabled, visible: r.bottom > 0 && r.top < innerHeight});
    if (out.length >= limit) break;
  }
  return out;
}
"""


@dataclass
class BrowserSession:
    """One shou session's browser context, its tabs (`context.pages`) and which tab is active."""

    context: Any
    workspace: Path
    allow: Allow = field(default_factory=Allow)
    active: int = 0
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)  # one action at a time per session

    @property
    def pages(self) -> list[Any]:
        """The open tabs, oldest first (popups a page opens are appended by Playwright)."""
        return list(self.context.pages)

    async def page(self) -> Any:
        """The active tab; a fresh one if every tab was closed."""
        pages = self.pages
        if not pages:
            self.active = 0
            return await self.context.new_page()
        self.active = min(self.active, len(pages) - 1)
        return pages[self.active]


class _Manager:
    """The Playwright driver, the browser and the sessions of one event loop."""

    def __init__(self) -> None:
        self.playwright: Any = None
        self.browser: Any = None
        self.sessions: dict[str, BrowserSession] = {}
        self.lock = asyncio.Lock()

    async def session(self, key: str, workspace: Path, settings: Any) -> BrowserSession:
        allow = Allow.from_settings(settings)
        async with self.lock:  # two tools starting the browser at once must not start two
            existing = self.sessions.get(key)
            if existing is not None and self.browser is not None and self.browser.is_connected():
                if existing.allow == allow:
                    return existing
                with contextlib.suppress(Exception):  # the allow-list changed: its proxy is another one
                    await existing.context.close()
            if self.browser is None or not self.browser.is_connected():
                self.sessions.clear()  # contexts of a crashed browser are dead; each gets a new one
                await self._launch(settings)
            context = await self.browser.new_context(viewport=VIEWPORT, accept_downloads=False,
                                                     proxy=egress_proxy(allow).playwright())
            await context.route(re.compile(r"^(?!https?:|data:|blob:)"), _file_guard(workspace))
            sess = BrowserSession(context, workspace, allow)
            self.sessions[key] = sess
            return sess

    async def _launch(self, settings: Any) -> None:
        try:
            from playwright.async_api import async_playwright
        except ImportError:
            raise ToolError("the browser tool needs Playwright: pip install 'shou[browser]'") from None
        if self.playwright is None:
            self.playwright = await async_playwright().start()
        executable = find_chromium(settings, self.playwright.chromium.executable_path)
        headless = bool(getattr(settings, "browser_headless", True))
        try:
            self.browser = await launch_chromium(self.playwright.chromium, executable, headless=headless,
                                                 args=LAUNCH_ARGS)
        except ToolError:
            raise
        except Exception as e:
            hint = (f" (as root, Chromium runs as uid {BROWSER_UID}, which must be able to read and run it)"
                    if os.geteuid() == 0 else "")
            raise ToolError(f"could not start Chromium ({executable or 'Playwright-managed'}): "
                            f"{str(e).splitlines()[0]}{hint}") from None

    async def close(self, key: str | None = None) -> None:
        keys = list(self.sessions) if key is None else [key]
        for k in keys:
            sess = self.sessions.pop(k, None)
            if sess is not None:
                with contextlib.suppress(Exception):
                    await sess.context.close()
        if key is None:
            if self.browser is not None:
                with contextlib.suppress(Exception):
                    await self.browser.close()
            if self.playwright is not None:
                with contextlib.suppress(Exception):
                    await self.playwright.stop()
            self.browser = self.playwright = None


# Weak keys: a closed, dropped loop takes its manager with it (its driver exits when its pipe closes).
_MANAGERS: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, _Manager] = weakref.WeakKeyDictionary()


def _manager() -> _Manager:
    loop = asyncio.get_running_loop()
    mgr = _MANAGERS.get(loop)
    if mgr is None:
        mgr = _MANAGERS[loop] = _Manager()
    return mgr


async def get_session(key: str, workspace: Path, settings: Any) -> BrowserSession:
    """The browser context of session `key`, starting Chromium on first use."""
    return await _manager().session(key, workspace, settings)


async def close_browser(session: str) -> None:
    """Close one session's browser context (its tabs, cookies and storage); the browser keeps running."""
    mgr = _MANAGERS.get(asyncio.get_running_loop())
    if mgr is not None:
        await mgr.close(session)


async def close_browsers() -> None:
    """Close every session's context, the browser and the Playwright driver of the running loop."""
    mgr = _MANAGERS.pop(asyncio.get_running_loop(), None)
    if mgr is not None:
        await mgr.close()


def find_chromium(settings: Any, managed_path: str | None) -> str | None:
    """The Chromium to launch: a configured path, else Playwright's own (None), else the system's.

    Nothing is ever downloaded: with no browser installed the error names the package to install.
    """
    configured = getattr(settings, "browser_executable", None) or os.environ.get("SHOU_BROWSER_EXECUTABLE")
    if configured:
        if not os.access(configured, os.X_OK):
            raise ToolError(f"browser_executable {configured!r} is not an executable file")
        return str(configured)
    if managed_path and os.access(managed_path, os.X_OK):
        return None  # Playwright finds its own build
    for name in SYSTEM_CHROMIUMS:
        found = shutil.which(name)
        if found:
            return found
    raise ToolError("no Chromium found: install one (Debian/Ubuntu: apt-get install chromium) or set "
                    "SHOU_BROWSER_EXECUTABLE to a Chromium/Chrome binary")


def workspace_file_url(workspace: Path, url: str) -> str:
    """The canonical file:// URL for `url` if it names a file inside the workspace; `ToolError` if not."""
    parts = urllib.parse.urlsplit(url)
    if parts.netloc not in ("", "localhost"):
        raise ToolError(f"file URL {url!r} names a remote host; only files in the workspace can be opened")
    path = urllib.parse.unquote(parts.path)
    try:
        names = relative_parts(workspace, path)
        with open_file(workspace, path):  # a regular file, reached without following a symlink
            pass
    except NotFound:
        raise ToolError(f"{url!r}: no such file in the workspace; call list_files to see what is there") from None
    except ToolError as e:
        raise ToolError(f"refused {url!r}: file:// URLs may only name files inside the workspace ({e})") from None
    canonical = Path(os.path.realpath(workspace)).joinpath(*names).as_uri()
    return canonical + (f"?{parts.query}" if parts.query else "") + (f"#{parts.fragment}" if parts.fragment else "")


def _file_guard(workspace: Path) -> Any:
    """The route handler for every request that is not http(s), data: or blob:.

    A file:// request is answered with the workspace file, read by shou beneath the workspace (no symlink
    followed, regular files only); the browser never opens a file itself. Anything else is refused.
    """
    async def guard(route: Any) -> None:
        url = route.request.url
        if url.startswith("about:"):
            await route.continue_()
            return
        parts = urllib.parse.urlsplit(url)
        if parts.scheme != "file" or parts.netloc not in ("", "localhost"):
            await route.abort("accessdenied")
            return
        path = urllib.parse.unquote(parts.path)
        try:
            body = await asyncio.to_thread(read_bytes_beneath, workspace, path, MAX_FILE_BYTES)
        except NotFound:
            await route.abort("failed")
            return
        except ToolError:
            await route.abort("accessdenied")
            return
        kind = mimetypes.guess_type(path)[0] or "application/octet-stream"
        await route.fulfill(status=200, body=body, content_type=kind)

    return guard


def describe_element(el: dict[str, Any]) -> str:
    """One line naming an element the way `elements` lists it: `[3] button#send "Send" name=q`."""
    head = el["tag"] + (f"#{el['id']}" if el.get("id") else "")
    if el.get("type") and el["tag"] in ("input", "button"):
        head += f"[type={el['type']}]"
    bits = [f"[{el['index']}] {head}"]
    if el.get("text"):
        bits.append(repr(el["text"]))
    for key in ("label", "name", "placeholder", "value", "href"):
        if el.get(key):
            bits.append(f"{key}={el[key]!r}")
    if el.get("disabled"):
        bits.append("(disabled)")
    if not el.get("visible", True):
        bits.append("(off-screen)")
    return " ".join(bits)


def likely_candidates(selector: str, elements: list[dict[str, Any]], limit: int = 5) -> list[dict[str, Any]]:
    """The elements whose text or attributes look most like the words in `selector`."""
    words = [w for w in re.split(r"[^0-9A-Za-z_-]+", selector.lower()) if len(w) > 1]
    if not words:
        return elements[:limit]

    def score(el: dict[str, Any]) -> float:
        fields = " ".join(str(el.get(k, "")) for k in ("text", "id", "name", "placeholder", "label", "cls", "tag",
                                                         "type", "href")).lower()
        tokens = [t for t in re.split(r"[^0-9a-z_-]+", fields) if t]
        best = 0.0
        for w in words:
            if w in fields:
                best += 1.0
            elif tokens:
                best += max(difflib.SequenceMatcher(None, w, t).ratio() for t in tokens)
        return best / len(words)

    ranked = sorted(elements, key=score, reverse=True)
    good = [el for el in ranked if score(el) >= 0.5]
    return (good or ranked)[:limit]


def fit_image(raw: bytes) -> tuple[bytes, str, tuple[int, int]]:
    """Downscale a PNG so its longest side is at most 1568 px and it is at most ~1.5 MB.

    Returns (bytes, media type, (width, height)); PNG when it fits, else JPEG at falling quality.
    """
    try:
        from PIL import Image
    except ImportError:
        raise ToolError("screenshots need Pillow: pip install 'shou[browser]'") from None
    img = Image.open(io.BytesIO(raw))
    img.load()
    if max(img.size) > MAX_IMAGE_SIDE:
        ratio = MAX_IMAGE_SIDE / max(img.size)
        img = img.resize((max(1, round(img.width * ratio)), max(1, round(img.height * ratio))), Image.LANCZOS)
        buf = io.BytesIO()
        img.save(buf, "PNG", optimize=True)
        raw = buf.getvalue()
    if len(raw) <= MAX_IMAGE_BYTES:
        return raw, "image/png", img.size
    rgb = img.convert("RGB")
    for quality in (85, 70, 55, 40):
        buf = io.BytesIO()
        rgb.save(buf, "JPEG", quality=quality, optimize=True)
        if buf.tell() <= MAX_IMAGE_BYTES:
            break
    return buf.getvalue(), "image/jpeg", img.size
