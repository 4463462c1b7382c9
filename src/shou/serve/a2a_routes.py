"""The A2A face's routes in `shou serve`: the agent card, and the SDK's JSON-RPC and HTTP+JSON bindings.

- `GET /.well-known/agent-card.json`: the public card (shou.serve.a2a_card), no token needed (on a server
  without tokens, still only for requests addressed to loopback from its own origin, as every request).
- `POST /a2a/jsonrpc`: the JSON-RPC 2.0 binding (`SendMessage`, `SendStreamingMessage`, `GetTask`, ...).
- `/a2a/rest/...`: the HTTP+JSON binding (`POST /a2a/rest/message:send`, `GET /a2a/rest/tasks/{id}`, ...).

The SDK's dispatchers speak the wire; every request to them first names its caller as every other request of
the server does (`Server.user`: 401 without a valid token, with `WWW-Authenticate`) and has its body read up
to the API's bound (413 past it; JSON nested past `MAX_DEPTH` is a parse error), then reaches
shou.serve.a2a_handler with the caller in its context. The SDK's extra `/{tenant}/...` mount of the HTTP+JSON
routes is left out: shou's tenants are its tokens, and a catch-all mount would answer paths that belong to the
rest of the server.
"""

from __future__ import annotations

import re
from collections.abc import Awaitable, Callable
from itertools import accumulate
from typing import Any

from a2a.auth.user import User
from a2a.extensions.common import HTTP_EXTENSION_HEADER, get_requested_extensions
from a2a.server.context import ServerCallContext
from a2a.server.request_handlers.response_helpers import agent_card_to_dict
from a2a.server.routes import ServerCallContextBuilder, create_jsonrpc_routes, create_rest_routes
from a2a.utils.constants import AGENT_CARD_WELL_KNOWN_PATH, VERSION_HEADER
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import BaseRoute, Route

from .a2a_card import JSONRPC_PATH, REST_PATH, agent_card
from .a2a_handler import ShouRequestHandler
from .server import MAX_BODY, Server, error, too_large

__all__ = ["a2a_routes"]

Endpoint = Callable[[Request], Awaitable[Response]]
USER_KEY = "shou.user"
# How deep a body's JSON may nest. protobuf's ParseDict takes a message 100 levels deep, which is some 50 levels of
# JSON in metadata (past that the SDK says invalid params); the SDK's json.loads, run deep in the server's stack,
# hits Python's recursion limit at some ~900 (an internal error). So no request the SDK can take nests past 64,
# and refusing there (cheaply, before any parsing) keeps Python's limit far away.
MAX_DEPTH = 64
_STRING = re.compile(rb'"[^"\\]*(?:\\.[^"\\]*)*"', re.DOTALL)  # a JSON string (its brackets are text, not nesting)
_NESTING = bytes.maketrans(b"[{]}", b"\x01\x01\xff\xff")  # an opening bracket +1, a closing one -1 (signed)
_NOT_BRACKETS = bytes(set(range(256)) - set(b"[]{}"))


def nesting(body: bytes) -> int:
    """How deep the JSON `body` nests (for a body that is no JSON, a number that says nothing). Linear, in C:
    strings are cut out, the brackets left are turned into +1 and -1 and summed up as they come."""
    brackets = _STRING.sub(b"", body).translate(None, _NOT_BRACKETS).translate(_NESTING)
    return max(accumulate(memoryview(brackets).cast("b")), default=0)


class _Caller(User):
    """The caller as the SDK sees it: the user their token names."""

    def __init__(self, name: str) -> None:
        self._name = name

    @property
    def is_authenticated(self) -> bool:
        return True

    @property
    def user_name(self) -> str:
        return self._name


class _Context(ServerCallContextBuilder):
    """The SDK's call context: the caller, the address the request came to (for the links of artifacts), and
    of the headers only the protocol version (the token stays out of everything the SDK may log)."""

    def build(self, request: Request) -> ServerCallContext:
        user = request.scope[USER_KEY]
        version = request.headers.get(VERSION_HEADER)
        return ServerCallContext(
            user=_Caller(user),
            state={"headers": {VERSION_HEADER: version} if version else {}, USER_KEY: user,
                   "base_url": str(request.base_url).rstrip("/")},
            requested_extensions=get_requested_extensions(request.headers.getlist(HTTP_EXTENSION_HEADER)))


async def _bounded_body(request: Request) -> bytes:
    if too_large(request.headers.get("content-length"), MAX_BODY):
        raise HTTPException(413, f"the body is larger than {MAX_BODY} bytes")
    body = bytearray()
    async for chunk in request.stream():
        body += chunk
        if len(body) > MAX_BODY:
            raise HTTPException(413, f"the body is larger than {MAX_BODY} bytes")
    return bytes(body)


def _guarded(srv: Server, endpoint: Endpoint, jsonrpc: bool) -> Endpoint:
    """`endpoint` for a caller with a token only, its body read up to `MAX_BODY` first. A body that is not
    UTF-8 is no JSON (RFC 8259), and one nested deeper than `MAX_DEPTH` is none the SDK can parse: the caller's
    mistake, said so (JSON-RPC's parse error, or 400), where the SDK answered them as an internal error."""

    async def guarded(request: Request) -> Response:
        user = srv.user(request)
        body = await _bounded_body(request)
        why = ""
        try:
            body.decode("utf-8")
        except UnicodeDecodeError as e:
            why = f"the body is not UTF-8 (byte {body[e.start]:#04x} at offset {e.start}), so it is no JSON"
        else:
            if nesting(body) > MAX_DEPTH:
                why = f"the body's JSON nests deeper than {MAX_DEPTH} levels"
        if why:
            if jsonrpc:
                return JSONResponse({"jsonrpc": "2.0", "id": None, "error": {"code": -32700, "message": why}})
            return error(400, why)
        given = False

        async def replay() -> Any:  # the body once, then what the connection says (a disconnect)
            nonlocal given
            if not given:
                given = True
                return {"type": "http.request", "body": body, "more_body": False}
            return await request.receive()

        scope = {**request.scope, USER_KEY: user}
        return await endpoint(Request(scope, replay))

    return guarded


def a2a_routes(srv: Server) -> list[BaseRoute]:
    """The card and the two bindings, over `srv`'s runner."""
    handler = ShouRequestHandler(srv)
    context = _Context()

    async def card(request: Request) -> Response:
        srv.addressed(request)
        return JSONResponse(agent_card_to_dict(agent_card(srv.runner.agent, str(request.base_url))),
                            headers={"Cache-Control": "no-cache"})

    sdk = [*create_jsonrpc_routes(handler, JSONRPC_PATH, context_builder=context),
           *create_rest_routes(handler, context_builder=context, path_prefix=REST_PATH)]
    routes: list[BaseRoute] = [Route(AGENT_CARD_WELL_KNOWN_PATH, card, methods=["GET"])]
    for route in sdk:
        if isinstance(route, Route):  # the tenant Mount is left out (see the module)
            methods = sorted((route.methods or {"GET"}) - {"HEAD"})
            routes.append(Route(route.path, _guarded(srv, route.endpoint, route.path == JSONRPC_PATH),
                                methods=methods))
    return routes
