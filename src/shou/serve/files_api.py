"""The workspace's files over HTTP, as the file tools see them: a folder's entries, a file's bytes, an upload.

The same fence as the tools': paths are resolved on their spelling and opened one component at a time
without following a symlink (`shou.workspace`), `.shou/` is never listed, read or written (shou's own state:
session logs, memory, spilled results), nor is the person's configuration folder when the workspace holds it
(their settings, keys and approval key), and an upload is refused wherever `write_file` is (`../x`, absolute
paths, a repository's git configuration, a file with other hard links). A file's bytes are answered with every
known secret replaced, as a file tool's result is (a workspace's `.env` may hold the server's own key). An
upload takes the file's write lock, as the tools do, so it never interleaves with an edit of the same file.

Every caller must name themselves (`Server.user`); the workspace is the server's, shared by its users
(docs/serve.md). A file's bytes are answered with a `sandbox` content security policy, so a page of the
workspace opened on its own runs no script with the server's origin; the web page fetches them with its
token and shows HTML only in an iframe that runs nothing.
"""

from __future__ import annotations

import asyncio
import mimetypes
import os
import re
import stat
from pathlib import Path
from typing import Any

from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from ..errors import ToolError
from ..trust import read_closing
from ..wellformed import well_formed_text
from ..workspace import (
    NotFound,
    config_parts,
    is_state_path,
    open_beneath,
    open_file,
    relative_parts,
    write_bytes_beneath,
    write_lock,
)
from .server import Server, too_large

__all__ = ["MAX_FILE_BYTES", "file_content", "list_folder", "run_screenshot", "upload_file"]

MAX_FILE_BYTES = 20 * 1024 * 1024
MAX_ENTRIES = 2000
HIDDEN = frozenset({".shou", ".git"})  # shou's state (never shown), and a repository's internals (noise)
_CONTENT_CSP = "sandbox; default-src 'none'; img-src data:; style-src 'unsafe-inline'"


def _parts(workspace: Path, path: str, *, root_ok: bool = False) -> tuple[str, ...]:
    """The components of `path` in the workspace; 400 outside it, inside `.shou/` or the configuration folder."""
    if root_ok and not path.strip(" /."):
        return ()
    try:
        parts = relative_parts(workspace, path)
    except ToolError as e:
        raise HTTPException(400, str(e)) from None
    why = refused(workspace, parts)
    if why is not None:
        raise HTTPException(400, why)
    return parts


def refused(workspace: Path, parts: tuple[str, ...]) -> str | None:
    """Why the workspace's file at `parts` is not served to the server's users, or None when it may be."""
    shown = "/".join(parts)
    if is_state_path(parts):
        return f"{shown!r} is inside .shou/, shou's own state: it is not served"
    if any(parts[: len(c)] == c for c in config_parts(workspace)):
        return f"{shown!r} is inside shou's user configuration folder (the person's settings and keys): not served"
    return None


def _entries(workspace: Path, parts: tuple[str, ...]) -> tuple[list[dict[str, Any]], bool]:
    """The folder's entries (folders first, then by name), and whether there were more than are listed."""
    try:
        fd = open_beneath(workspace, parts, os.O_RDONLY | os.O_DIRECTORY) if parts else \
            os.open(workspace, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    except NotFound:
        raise HTTPException(404, f"no folder {'/'.join(parts)!r} in the workspace") from None
    except (ToolError, OSError) as e:
        raise HTTPException(400, str(e)) from None
    out: list[dict[str, Any]] = []
    more = False
    try:
        with os.scandir(fd) as it:
            for entry in it:
                if entry.name in HIDDEN or entry.name.casefold() == ".shou":
                    continue
                if len(out) >= MAX_ENTRIES:
                    more = True
                    break
                out.append(_entry(entry, parts))
    finally:
        os.close(fd)
    out.sort(key=lambda e: (e["type"] != "dir", e["name"].casefold(), e["name"]))
    return out, more


def _entry(entry: os.DirEntry[str], parts: tuple[str, ...]) -> dict[str, Any]:
    # a name that is not UTF-8 is listed with U+FFFD for its bad bytes (JSON cannot carry them; such a file
    # cannot be opened from the page, and no longer breaks the whole folder's listing)
    name = well_formed_text(entry.name)
    try:
        st = entry.stat(follow_symlinks=False)
    except OSError:
        return {"name": name, "path": "/".join((*parts, name)), "type": "other", "size": 0, "mtime": 0}
    kind = "dir" if stat.S_ISDIR(st.st_mode) else "file" if stat.S_ISREG(st.st_mode) else \
        "symlink" if stat.S_ISLNK(st.st_mode) else "other"
    return {"name": name, "path": "/".join((*parts, name)), "type": kind,
            "size": st.st_size if kind == "file" else 0, "mtime": st.st_mtime}


async def list_folder(request: Request) -> Response:
    """`GET /v1/files?path=REL`: a folder of the workspace (the root when REL is empty)."""
    srv: Server = request.app.state.server
    srv.user(request)
    parts = _parts(srv.workspace, request.query_params.get("path", ""), root_ok=True)
    entries, more = await asyncio.to_thread(_entries, srv.workspace, parts)
    return JSONResponse({"path": "/".join(parts), "entries": entries, "truncated": more})


def _read(workspace: Path, path: str) -> tuple[str, bytes]:
    try:
        with open_file(workspace, path) as f:
            if f.stat.st_size > MAX_FILE_BYTES:
                raise HTTPException(413, f"{f.shown!r} is {f.stat.st_size:,} bytes; files of at most "
                                         f"{MAX_FILE_BYTES:,} are served")
            return f.shown, f.read(MAX_FILE_BYTES + 1)[:MAX_FILE_BYTES]
    except NotFound:
        raise HTTPException(404, f"no file {path!r} in the workspace") from None
    except ToolError as e:
        raise HTTPException(400, str(e)) from None


def content_type(name: str, data: bytes) -> str:
    """The type a file is served as: by its name, else text when it is UTF-8, else bytes."""
    guessed, _ = mimetypes.guess_type(name, strict=False)
    if guessed is None or guessed.startswith("text/") or guessed in ("application/json", "application/javascript"):
        try:
            data.decode("utf-8")
        except UnicodeDecodeError:
            return guessed or "application/octet-stream"
        return f"{guessed or 'text/plain'}; charset=utf-8"
    return guessed


async def file_content(request: Request) -> Response:
    """`GET /v1/files/content?path=REL[&download=1]`: a file's bytes (at most 20 MB)."""
    srv: Server = request.app.state.server
    srv.user(request)
    path = request.query_params.get("path", "")
    _parts(srv.workspace, path)
    shown, data = await asyncio.to_thread(_read, srv.workspace, path)
    # as a file tool's result is, and in other encodings too: up to ~0.1 s for 20 MB, so off the event loop
    data = await asyncio.to_thread(srv.redactor.in_bytes, data)
    headers = {"Content-Security-Policy": _CONTENT_CSP, "Cache-Control": "no-store"}
    if request.query_params.get("download") in ("1", "true"):
        name = shown.rsplit("/", 1)[-1]
        # ASCII with no control character: a name holding CR/LF made the header illegal (the connection was
        # dropped with no answer), and one that could split the header must never reach it
        ascii_name = "".join(c if " " <= c < "\x7f" and c not in '"\\' else "_" for c in name)
        from urllib.parse import quote

        headers["Content-Disposition"] = f"attachment; filename=\"{ascii_name}\"; filename*=UTF-8''{quote(name)}"
    return Response(data, media_type=content_type(shown, data), headers=headers)


async def upload_file(request: Request) -> Response:
    """`PUT /v1/files/content?path=REL` with the file's bytes as the body: written as `write_file` would."""
    srv: Server = request.app.state.server
    srv.user(request)
    path = request.query_params.get("path", "")
    parts = _parts(srv.workspace, path)
    if not parts:
        raise HTTPException(400, "give the path of a file in the workspace, e.g. ?path=data/input.csv")
    if too_large(request.headers.get("content-length"), MAX_FILE_BYTES):
        raise HTTPException(413, f"an upload is at most {MAX_FILE_BYTES:,} bytes")
    chunks, size = [], 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > MAX_FILE_BYTES:
            raise HTTPException(413, f"an upload is at most {MAX_FILE_BYTES:,} bytes")
        chunks.append(chunk)
    data = b"".join(chunks)
    await asyncio.to_thread(_write, srv.workspace, "/".join(parts), data)
    return JSONResponse({"path": "/".join(parts), "size": len(data)}, 201)


def _write(workspace: Path, rel: str, data: bytes) -> None:
    try:
        with write_lock(workspace, rel):
            write_bytes_beneath(workspace, rel, data)
    except ToolError as e:
        raise HTTPException(400, str(e)) from None
    except OSError as e:
        raise HTTPException(400, f"cannot write {rel!r}: {e.strerror or e}") from None


_SHOT = re.compile(r"\.shou/screenshots/(shot-[A-Za-z0-9_-]{1,60}\.(png|jpg))")


async def run_screenshot(request: Request) -> Response:
    """`GET /v1/runs/{run_id}/screenshots/{call_id}`: the screenshot a browser call of the caller's run (or of
    one of its sub-runs) saved. A model that cannot see images gets the page's text instead, so the image is
    not in the event; the browser kept it under `.shou/screenshots/`, which is served here for that call only:
    the name must be one shou made there, and it is opened without following a link."""
    srv: Server = request.app.state.server
    job = srv.job(request, srv.user(request))
    call_id = request.path_params["call_id"]
    data, media = await asyncio.to_thread(_shot, srv, job.session, job.run_id, call_id)
    return Response(data, media_type=media, headers={"Content-Security-Policy": _CONTENT_CSP,
                                                     "Cache-Control": "private, max-age=86400"})


def _shot(srv: Server, session: str, run_id: str, call_id: str) -> tuple[bytes, str]:
    from ..events import ToolCallFinished
    from ..workspace import STATE_DIR

    for _, event in srv.store.rows(session):
        if not (isinstance(event, ToolCallFinished) and event.call_id == call_id and event.name == "browser"
                and (event.run_id == run_id or event.run_id.startswith(run_id + "."))):
            continue
        found = _SHOT.search(str((event.details or {}).get("path") or ""))
        if found is None:
            break
        try:
            fd = open_beneath(srv.workspace, (STATE_DIR, "screenshots", found.group(1)), os.O_RDONLY)
        except (ToolError, OSError):
            raise HTTPException(404, "that screenshot is no longer kept") from None
        data = read_closing(fd, MAX_FILE_BYTES)
        if data is None:
            raise HTTPException(404, "that screenshot is no longer kept")
        return data, "image/png" if found.group(2) == "png" else "image/jpeg"
    raise HTTPException(404, f"no screenshot of call {call_id!r} in this run")
