"""The web page's files: `/` (index.html, with its content security policy) and `/static/...` (its modules,
styles and vendored libraries, from the package's `web/` folder).

Only the files the package ships under `web/` are served, found in a table made once from the package, so no
path spelling reaches anything else. Each answer has its type and `Cache-Control: no-cache` with an ETag:
a browser keeps the files and asks again cheaply (304), and a new shou's files are never mixed with an old
one's. The policy lets the page run its own scripts only (no inline script, no eval), load nothing from
elsewhere, show images only from itself, `data:` and `blob:` (screenshots and workspace files fetched with the
token), frame only `blob:` and `srcdoc` documents (previews, sandboxed), and be framed by nobody.
"""

from __future__ import annotations

import hashlib
from functools import cache
from importlib import resources
from importlib.resources.abc import Traversable

from starlette.requests import Request
from starlette.responses import Response

__all__ = ["CSP", "index", "static"]

CSP = ("default-src 'self'; script-src 'self'; style-src 'self' 'unsafe-inline'; img-src 'self' data: blob:; "
       "frame-src 'self' blob:; connect-src 'self'; font-src 'self'; object-src 'none'; base-uri 'none'; "
       "form-action 'self'; frame-ancestors 'none'")
TYPES = {".js": "text/javascript; charset=utf-8", ".mjs": "text/javascript; charset=utf-8",
         ".css": "text/css; charset=utf-8", ".svg": "image/svg+xml", ".png": "image/png",
         ".txt": "text/plain; charset=utf-8", ".json": "application/json", ".html": "text/html; charset=utf-8"}


@cache
def _files() -> dict[str, tuple[bytes, str, str]]:
    """path under web/ -> (bytes, content type, ETag), for every file of a type in TYPES."""
    out: dict[str, tuple[bytes, str, str]] = {}

    def walk(folder: Traversable, prefix: str) -> None:
        for item in folder.iterdir():
            if item.is_dir():
                if not item.name.startswith((".", "_")):
                    walk(item, f"{prefix}{item.name}/")
                continue
            kind = TYPES.get("." + item.name.rsplit(".", 1)[-1]) if "." in item.name else None
            if kind:
                data = item.read_bytes()
                out[prefix + item.name] = (data, kind, '"' + hashlib.sha256(data).hexdigest()[:32] + '"')

    walk(resources.files("shou.serve").joinpath("web"), "")
    return out


def _answer(request: Request, path: str, headers: dict[str, str] | None = None) -> Response:
    found = _files().get(path)
    if found is None:
        return Response("not found", 404, media_type="text/plain")
    data, kind, etag = found
    head = {"Cache-Control": "no-cache", "ETag": etag, **(headers or {})}
    if etag in [t.strip() for t in request.headers.get("if-none-match", "").split(",")]:
        return Response(status_code=304, headers=head)
    return Response(data, media_type=kind, headers=head)


async def index(request: Request) -> Response:
    """`GET /`: the page."""
    return _answer(request, "index.html", {"Content-Security-Policy": CSP})


async def static(request: Request) -> Response:
    """`GET /static/{path}`: one of the page's files (the page itself only at `/`, with its policy)."""
    path = request.path_params["path"]
    return _answer(request, "" if path.endswith(".html") else path)
