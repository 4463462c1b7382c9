"""A bound on what one message of a streamable-HTTP MCP server may be, as for stdio (shou.mcp.stdio).

The SDK bounds an SSE event itself (`max_sse_event_size`: given `MAX_MESSAGE_BYTES`); a plain JSON reply it
reads whole (`response.aread()`), so the HTTP client's transport here cuts any other body off past the bound
with a `StreamError`, which the SDK turns into an error for the request it answered.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

from .stdio import MAX_MESSAGE_BYTES


def http_client(headers: dict[str, str], timeout: float, limit: int = MAX_MESSAGE_BYTES) -> Any:
    """An `httpx2.AsyncClient` whose replies that are not event streams are read up to `limit` bytes."""
    import httpx2

    class TooBig(httpx2.StreamError):
        """A reply over the bound."""

    def too_big(size: str) -> TooBig:
        return TooBig(f"the MCP server's reply is {size} bytes, over the {limit:,} shou reads of one message, "
                      "so it was dropped; ask for less (a narrower query, fewer items, a page at a time)")

    class CappedBody(httpx2.AsyncByteStream):
        """A body read up to the bound (the error comes from the first read, where the SDK expects one)."""

        def __init__(self, inner: Any, declared: str) -> None:
            self.inner, self.declared = inner, declared

        async def __aiter__(self) -> AsyncIterator[bytes]:
            if self.declared.isdigit() and int(self.declared) > limit:
                raise too_big(f"{int(self.declared):,}")
            seen = 0
            async for chunk in self.inner:
                seen += len(chunk)
                if seen > limit:
                    raise too_big(f"more than {limit:,}")
                yield chunk

        async def aclose(self) -> None:
            await self.inner.aclose()

    class CappedTransport(httpx2.AsyncBaseTransport):
        def __init__(self) -> None:
            self.inner = httpx2.AsyncHTTPTransport()

        async def handle_async_request(self, request: Any) -> Any:
            response = await self.inner.handle_async_request(request)
            if response.headers.get("content-type", "").lower().startswith("text/event-stream"):
                return response  # the SDK bounds each event of a stream
            response.stream = CappedBody(response.stream, response.headers.get("content-length", ""))
            return response

        async def aclose(self) -> None:
            await self.inner.aclose()

    return httpx2.AsyncClient(headers=headers, timeout=httpx2.Timeout(timeout, read=None),
                              transport=CappedTransport())
