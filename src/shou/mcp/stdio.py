"""A bound on what one message of a stdio MCP server may be: the SDK's reader keeps a whole line in memory
(and joins it again with every chunk), so a server that answers with 200 MB on one line took close to 1 GB
and two minutes. Here a line is read in chunks and, past `MAX_MESSAGE_BYTES`, only its two ends are kept:
enough to find which request it answers, which then gets the start of its text with a note saying the rest
was dropped (or, for a result laid out otherwise, an error saying so): a call is never left waiting for it.
What fits is passed on and capped like any tool's output (shou.tools.executor). A line the SDK cannot read as
a JSON-RPC message (not JSON, nested past its parser, a result of the wrong shape) that answers a request becomes
an error reply to that request: the SDK would drop it, and its call would wait for its timeout.

The SDK's `stdio_client` reads the server's stdout through `TextReceiveStream`; `install()` gives it
`CappedLines` instead, which yields one whole line per item (so the SDK's own joining has nothing to join).
"""

from __future__ import annotations

import codecs
import contextlib
import json
import logging
import re
from collections.abc import AsyncIterator
from typing import Any

from ..wellformed import well_formed_json

MAX_MESSAGE_BYTES = 5_000_000  # of one message from a server, as web_fetch reads at most of a page
TOO_BIG = -32099  # the JSON-RPC error code of a reply shou dropped for its size (a server-error code)
PARSE_ERROR = -32700  # JSON-RPC's code for a message that could not be read
_ENDS = 32_768  # bytes of each end of an oversized line kept: its id, and the start of a text result
_ID = r'(-?\d+|"(?:[^"\\]|\\.){0,200}")'
# The id of a response, where JSON-RPC libraries put it: first (`{"jsonrpc":"2.0","id":7,...`: Python's SDK)
# or last (`...,"id":7}` or `...,"id":7,"jsonrpc":"2.0"}`: TypeScript's). Only at the top level: a nested
# `"id"` is never at the very start, and is followed by more than one closing brace at the end.
_HEAD_ID = re.compile(rb'^\s*\{\s*(?:"jsonrpc"\s*:\s*"2\.0"\s*,\s*)?"id"\s*:\s*' + _ID.encode())
_TAIL_ID = re.compile(rb'[,{]\s*"id"\s*:\s*' + _ID.encode() + rb'\s*(?:,\s*"jsonrpc"\s*:\s*"2\.0"\s*)?\}\s*$')
# A response's start, either layout: a server's own request (`"method"`) has an id too, from its own count, and
# must not be taken for the answer to one of shou's.
_JSONRPC = rb'^\s*\{\s*(?:"jsonrpc"\s*:\s*"2\.0"\s*,\s*)?'
_HEAD_RESPONSE = re.compile(_JSONRPC + rb'"id"\s*:\s*' + _ID.encode() + rb'\s*,\s*"(?:result|error)"\s*:')
_TAIL_RESPONSE = re.compile(_JSONRPC + rb'"(?:result|error)"\s*:')

_log = logging.getLogger("shou.mcp")


class CappedLines:
    """The server's stdout as whole lines (each ending in a newline), none longer than `MAX_MESSAGE_BYTES`:
    an oversized one becomes an error reply to the request it answered (or is dropped, when it answered none).
    Made like the SDK's `TextReceiveStream(stream, encoding=..., errors=...)`."""

    def __init__(self, transport_stream: Any, encoding: str = "utf-8", errors: str = "strict") -> None:
        self.stream = transport_stream
        self.encoding, self.errors = encoding, errors
        codecs.lookup(encoding)  # an unknown encoding fails here, as the SDK's stream would
        self.limit = MAX_MESSAGE_BYTES
        from mcp import types

        self._messages = types.jsonrpc_message_adapter  # what the SDK reads each line with

    def __aiter__(self) -> AsyncIterator[str]:
        return self._lines()

    async def _lines(self) -> AsyncIterator[str]:
        import anyio

        parts: list[bytes] = []  # the line so far; once it is over the bound, [its start, its newest end]
        size = 0
        while True:
            try:
                chunk = await self.stream.receive()
            except (anyio.EndOfStream, anyio.ClosedResourceError):
                return  # a last line without its newline is not a message (the SDK drops it too)
            while chunk:
                end = chunk.find(b"\n")
                piece, chunk = (chunk, b"") if end < 0 else (chunk[:end], chunk[end + 1:])
                over = size > self.limit
                size += len(piece)
                if size <= self.limit:
                    parts.append(piece)
                elif not over:  # it just went over: from here only its two ends are kept
                    whole = b"".join([*parts, piece])
                    parts = [whole[:_ENDS], whole[-_ENDS:]]
                else:
                    parts = [parts[0], (parts[1] + piece)[-_ENDS:]]
                if end < 0:
                    break
                line = self._line(parts, size)
                parts, size = [], 0
                if line is not None:
                    yield line

    def _line(self, parts: list[bytes], size: int) -> str | None:
        if size <= self.limit:
            # a lone surrogate's escape (ASCII, valid JSON) the SDK's parse refuses: its call would wait for its
            # timeout
            return self._readable(well_formed_json(b"".join(parts).decode(self.encoding, self.errors))) + "\n"
        head, tail = parts
        found = _HEAD_ID.search(head) or _TAIL_ID.search(tail)
        if found is None:
            _log.warning("an MCP server sent a message of %d bytes (the most read is %d) that answers no "
                         "request shou can find: dropped", size, self.limit)
            return None
        request = json.loads(found.group(1))
        note = (f"the MCP server's result was {size:,} bytes, over the {self.limit:,} shou reads of one message, "
                "so the rest was dropped; ask for less (a narrower query, fewer items, a page at a time)")
        start = _text_start(head, self.encoding)
        if start is not None:
            # A text result: its start is kept, like any tool output cut short. It is an error result: the
            # call did not give all it had (and a cut result could not match the tool's output schema).
            result = {"content": [{"type": "text", "text": f"{start} [... {note} ...]"}], "isError": True,
                      "resultType": "complete"}
            return json.dumps({"jsonrpc": "2.0", "id": request, "result": result}) + "\n"
        reply = {"jsonrpc": "2.0", "id": request, "error": {"code": TOO_BIG, "message": note}}
        return json.dumps(reply) + "\n"


    def _readable(self, line: str) -> str:
        """`line`, or an error reply to the request it answers when the SDK could not read it (read here the
        same way first: one more parse of each line, off the model's path)."""
        try:
            self._messages.validate_json(line, by_name=False)
        except ValueError as exc:
            request = _answered(line)
            if request is None:
                return line  # answers nothing shou asked: the SDK logs it, as before
            why = _why(exc)
            _log.warning("an MCP server's reply to request %s could not be read: %s", request, why)
            note = f"the MCP server's reply could not be read as a JSON-RPC message ({why}), so it was dropped"
            return json.dumps({"jsonrpc": "2.0", "id": request, "error": {"code": PARSE_ERROR, "message": note}})
        return line


def _answered(line: str) -> int | str | None:
    """The id of the request `line` answers, if it is laid out as a response; None otherwise."""
    try:
        message = json.loads(line)
    except (ValueError, RecursionError):
        raw = line.encode("utf-8", "replace")
        found = _HEAD_RESPONSE.search(raw[:_ENDS])
        if found is None and _TAIL_RESPONSE.search(raw[:_ENDS]):
            found = _TAIL_ID.search(raw[-_ENDS:])
        if found is None:
            return None
        try:
            request = json.loads(found.group(1))
        except ValueError:  # an id whose escapes are not JSON's
            return None
        return request if isinstance(request, int | str) else None
    if not isinstance(message, dict) or "method" in message or not ("result" in message or "error" in message):
        return None
    request = message.get("id")
    return request if isinstance(request, int | str) and not isinstance(request, bool) else None


def _why(exc: ValueError) -> str:
    """The first reason of a parse's error, short (its text comes from the server)."""
    errors = getattr(exc, "errors", None)
    if callable(errors):
        with contextlib.suppress(Exception):
            first = errors()[0]
            return str(first.get("msg", ""))[:200] or type(exc).__name__
    return str(exc).splitlines()[0][:200] if str(exc) else type(exc).__name__


# The start of a text result as the Python SDK writes it: `{"jsonrpc":"2.0","id":7,"result":{"content":[{"text":"...`
_TEXT_START = re.compile(rb'^\s*\{\s*"jsonrpc"\s*:\s*"2\.0"\s*,\s*"id"\s*:\s*' + _ID.encode()
                         + rb'\s*,\s*"result"\s*:\s*\{\s*"content"\s*:\s*\[\s*\{\s*(?:"type"\s*:\s*"text"\s*,\s*)?'
                         rb'"text"\s*:\s*"')  # only a text part has a "text": it may come before its "type"


def _text_start(head: bytes, encoding: str) -> str | None:
    """The start of the first text of a result whose head is `head`, or None when it is laid out otherwise."""
    m = _TEXT_START.match(head)
    if m is None:
        return None
    raw = head[m.end():].decode(encoding, "ignore")
    closing = re.search(r'(?<!\\)(?:\\\\)*"', raw)  # the string ended inside the head
    if closing is not None:
        raw = raw[:closing.end() - 1]
    for cut in range(min(6, len(raw)) + 1):  # an escape cut in half at the end is left out
        try:
            return str(json.loads(f'"{raw[:len(raw) - cut]}"'))
        except ValueError:
            continue
    return None


def install() -> None:
    """Make the SDK's stdio client read servers through `CappedLines` (once; harmless to repeat)."""
    import mcp.client.stdio as sdk

    if getattr(sdk, "TextReceiveStream", None) is not CappedLines:
        if not hasattr(sdk, "TextReceiveStream"):  # a version that reads another way: bound it again there
            raise RuntimeError("this mcp version's stdio client does not read through TextReceiveStream")
        sdk.TextReceiveStream = CappedLines  # type: ignore[attr-defined, misc]
