"""The HTTP client every request to a remote A2A agent goes through: one origin, bounded bodies, no redirects.

The SDK's transports take an `httpx.AsyncClient`; this one is built so that what the remote side sends
cannot take more than shou allows, whatever the SDK does with it:

- requests go only to the configured agent's origin (scheme, host, port): anything else is refused before a
  connection is made, so neither a card nor a reply can send shou, its headers and its data elsewhere;
- redirects are not followed (httpx's default, kept), so a 3xx is an error, not a new destination;
- a reply that is not an event stream is read up to `limit` bytes (a card, a JSON-RPC answer); an event
  stream's events up to `event_limit` bytes each (the SDK reads a stream line by line, and a line without
  an end would otherwise grow without bound). Past either the read fails with `TooBig`, an `httpx.ReadError`,
  which the SDK reports as a network error with this message.

Time is bounded by the caller (the tool's deadline); the client's own timeouts only catch a silent peer.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import httpx

from .spec import RemoteAgentSpec, origin_of

__all__ = ["BODY_LIMIT", "EVENT_LIMIT", "OtherOrigin", "TooBig", "agent_client"]

BODY_LIMIT = 4 * 1024 * 1024  # one reply that is not a stream (a JSON-RPC answer, a task with its artifacts)
EVENT_LIMIT = 1024 * 1024  # one event of a stream
CONNECT_TIMEOUT = 10.0


class TooBig(httpx.ReadError):
    """A reply, or an event of a stream, over the bound."""


class OtherOrigin(httpx.RequestError):
    """A request to somewhere the person did not configure."""


class _CappedBody(httpx.AsyncByteStream):
    """A body read up to `limit` bytes in all, or, for an event stream, up to `limit` bytes per event (counted
    from the last blank line)."""

    def __init__(self, inner: Any, request: httpx.Request, limit: int, stream: bool, declared: str, what: str) -> None:
        self.inner, self.request, self.limit, self.stream = inner, request, limit, stream
        self.declared, self.what = declared, what

    def _too_big(self, size: int | None = None) -> TooBig:
        unit = "an event of its stream" if self.stream else "its reply"
        how = f"is {size:,} bytes, over" if size is not None else "is larger than"
        return TooBig(f"{self.what}: {unit} {how} the {self.limit:,} bytes shou reads", request=self.request)

    async def __aiter__(self) -> AsyncIterator[bytes]:
        if not self.stream and self.declared.isdigit() and int(self.declared) > self.limit:
            raise self._too_big(int(self.declared))
        seen = 0
        tail = b""
        async for chunk in self.inner:
            if self.stream:  # bytes since the last event boundary (a blank line), across chunks
                joined = tail + chunk
                cut = max(joined.rfind(b"\n\n"), joined.rfind(b"\r\n\r\n"))
                seen = len(joined) - cut - 2 if cut >= 0 else seen + len(chunk)
                tail = joined[-3:]
            else:
                seen += len(chunk)
            if seen > self.limit:
                raise self._too_big()
            yield chunk

    async def aclose(self) -> None:
        await self.inner.aclose()


class _OneOrigin(httpx.AsyncBaseTransport):
    """Sends only to `origin`, and caps what comes back."""

    def __init__(self, origin: tuple[str, str, int], limit: int, event_limit: int, what: str) -> None:
        self.origin, self.limit, self.event_limit, self.what = origin, limit, event_limit, what
        self.inner = httpx.AsyncHTTPTransport()

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        try:
            target = origin_of(str(request.url))
        except ValueError:
            target = None
        if target != self.origin:
            port = f":{request.url.port}" if request.url.port else ""
            raise OtherOrigin(f"{self.what}: refused to send a request to {request.url.scheme}://{request.url.host}"
                              f"{port}, which is not the agent's configured address", request=request)
        response = await self.inner.handle_async_request(request)
        stream = response.headers.get("content-type", "").lower().startswith("text/event-stream")
        response.stream = _CappedBody(response.stream, request, self.event_limit if stream else self.limit, stream,
                                      response.headers.get("content-length", ""), self.what)
        return response

    async def aclose(self) -> None:
        await self.inner.aclose()


def agent_client(spec: RemoteAgentSpec, limit: int = BODY_LIMIT, event_limit: int = EVENT_LIMIT) -> httpx.AsyncClient:
    """A client for `spec`'s agent: its headers on every request, its origin only, replies bounded."""
    what = f"the A2A agent {spec.name!r} ({spec.where})"
    timeout = httpx.Timeout(spec.timeout, connect=min(CONNECT_TIMEOUT, spec.timeout))
    return httpx.AsyncClient(headers=dict(spec.headers), timeout=timeout, follow_redirects=False, trust_env=False,
                             transport=_OneOrigin(spec.origin, limit, event_limit, what))
