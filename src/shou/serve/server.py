"""What the handlers of `shou serve` share (its REST API in shou.serve.app, the OpenAI endpoint in
shou.serve.openai_api): the `Server` they are handed, who the caller is, the error shape, reading a JSON
body, the headers of an event stream. Here, below both, so neither imports the other for them."""

from __future__ import annotations

import functools
import sqlite3
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ValidationError
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import JSONResponse

from .auth import Tokens
from .hub import Hub
from .jobs import Job, RunQueue
from .names import given_name
from .runner import Runner

__all__ = ["MAX_BODY", "SSE_HEADERS", "Server", "error", "read_json", "too_large", "whole_number"]

MAX_BODY = 2 * 1024 * 1024  # a task's 400k characters as UTF-8, with room for JSON escapes
SSE_HEADERS = {"Cache-Control": "no-cache", "X-Accel-Buffering": "no"}


@dataclass
class Server:
    """What the handlers share: the runner (and through it the store and queue), tokens and the workspace."""

    runner: Runner
    tokens: Tokens
    workspace: Path
    local: bool = False  # no tokens file: one token, of the person at the machine, on loopback

    @property
    def store(self) -> Any:
        return self.runner.store

    @property
    def queue(self) -> RunQueue:
        return self.runner.queue

    @property
    def hub(self) -> Hub:
        return self.runner.hub

    @property
    def redactor(self) -> Any:
        """The secrets the runs' agent knows (its settings' keys, the environment's): what every event, and
        every file the server hands out, has replaced."""
        return self.runner.agent.redactor

    def addressed(self, request: Request) -> None:
        """403 on a server without tokens for a request not addressed to loopback by name, or from another
        origin: defence in depth against a page that rebinds a name of its own to 127.0.0.1 or posts to it
        from another origin (asked of every request, the public agent card's too)."""
        if self.local and (not _local_host(request.headers.get("host", "")) or not _same_origin(request)):
            raise HTTPException(403, "without --tokens only requests to localhost from its own pages are served")

    def user(self, request: Request) -> str:
        """The caller: 401 without a valid token. Every local account can reach a loopback port, so even the
        person's own server asks for their token (and `addressed` holds)."""
        self.addressed(request)
        user = self.tokens.user_of(request.headers.get("authorization"))
        if user is None:
            raise HTTPException(401, "a valid bearer token is required (Authorization: Bearer TOKEN); "
                                     "`shou serve` prints a link with it when it starts")
        return user

    def job(self, request: Request, user: str) -> Job:
        job = self.queue.get(request.path_params["run_id"], user)
        if job is None:
            raise HTTPException(404, f"no run {request.path_params['run_id']!r}")
        return job

    def own_session(self, name: str, user: str) -> str:
        """The store's name of `user`'s session `name` (shou.serve.names); 404 when they have none of that
        name, whoever else may have one."""
        session = self.queue.session_of(user, name) if given_name(name) else ""
        if not session or self.queue.session_owner(session) != user:
            raise HTTPException(404, f"no session {name[:200]!r}")
        return session


def _local_host(host: str) -> bool:
    name, port = (host, "") if host.endswith("]") or host.count(":") == 0 else host.rsplit(":", 1)
    if port and not (port.isascii() and port.isdigit()):
        return False
    return name.strip("[]").lower() in ("127.0.0.1", "localhost", "::1")


def _same_origin(request: Request) -> bool:
    origin = request.headers.get("origin")
    if origin is None:
        return True
    return origin.split("://", 1)[-1].lower() == request.headers.get("host", "").lower()


def whole_number(raw: str | None, digits: int = 18) -> int | None:
    """`raw` as a whole number when it is one written in at most `digits` ASCII digits, else None (for a 400).
    `str.isdigit` alone lets through what `int` then refuses, a 500: '²' and other Unicode digits, and more
    than 4,300 digits (Python's limit on converting text to an int)."""
    if raw is None or not (raw.isascii() and raw.isdigit()) or len(raw) > digits:
        return None
    return int(raw)


def too_large(declared: str | None, most: int) -> bool:
    """Whether a declared size (a Content-Length) is a number above `most`: one too long to read is."""
    if declared is None or not (declared.isascii() and declared.isdigit()):
        return False
    return len(declared) > 18 or int(declared) > most


def error(status: int, message: str, kind: str = "") -> JSONResponse:
    """The API's error shape."""
    kinds = {400: "invalid_request", 401: "unauthorized", 403: "forbidden", 404: "not_found", 409: "conflict",
             413: "too_large", 415: "unsupported_media_type", 429: "rate_limited", 503: "unavailable"}
    return JSONResponse({"error": {"message": message, "type": kind or kinds.get(status, "error")}}, status)


@functools.cache
def store_errors() -> tuple[type[Exception], ...]:
    """The errors that mean the database is away (answered 503, the connection kept), not a bug (500) nor the
    caller's mistake (400): every route answers them alike (app.py's handler; a route that catches errors of
    its own, as the fork's, lets these through)."""
    from ..store.pg_link import StoreUnavailable
    from ..store.sqlite_errors import StoreUnusable

    kinds: list[type[Exception]] = [StoreUnavailable, StoreUnusable, sqlite3.OperationalError]
    try:
        import psycopg

        kinds.append(psycopg.OperationalError)
    except ImportError:
        pass
    return tuple(kinds)


async def read_json(request: Request, model: type[BaseModel]) -> Any:
    """The body as `model` (400 with what is wrong; 413 past MAX_BODY, counted as it arrives; 415 unless it is
    declared JSON, which a web page of another origin cannot send without the browser asking first)."""
    kind = request.headers.get("content-type", "").split(";", 1)[0].strip().lower()
    if kind != "application/json":
        raise HTTPException(415, "send the body as JSON, with Content-Type: application/json")
    if too_large(request.headers.get("content-length"), MAX_BODY):
        raise HTTPException(413, f"the body is larger than {MAX_BODY} bytes")
    body = bytearray()
    async for chunk in request.stream():
        body += chunk
        if len(body) > MAX_BODY:
            raise HTTPException(413, f"the body is larger than {MAX_BODY} bytes")
    try:
        return model.model_validate_json(bytes(body))
    except ValidationError as e:
        problems = "; ".join(f"{'.'.join(str(p) for p in err['loc']) or 'body'}: {err['msg']}" for err in e.errors())
        raise HTTPException(400, problems[:2000]) from None
