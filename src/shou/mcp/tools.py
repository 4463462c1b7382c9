"""An MCP server's tools as shou tools: `NAME__TOOL`, with the server's JSON schema, results passed on.

A result is passed on faithfully: its text (and structured content, when there is no text), its first
image, and `isError` as an error result the model reads, never as a schema failure. What a server returns
comes from outside shou, like a web page: the model gets it inside untrusted-content delimiters. A call
that finds the server gone gets an error result, and the server is started again for the next call.
"""

from __future__ import annotations

import json
import re
from typing import Any

from ..messages import ImagePart
from ..tools.base import NAME_RE, Tool, ToolResult
from ..tools.schema_bounds import ValidationTimeout
from ..tools.schema_regex import UnsafePattern, safe_schema
from .servers import Connection, ServerSpec, connection
from .stdio import TOO_BIG

DESCRIPTION_CHARS = 2000  # of a tool's description: it is the server's text, sent with every request
_UNSAFE = re.compile(r"[^a-zA-Z0-9_-]")


def tool_name(server: str, tool: str) -> str:
    """`SERVER__TOOL`, with what a tool name may not hold replaced, at most 64 characters."""
    return _UNSAFE.sub("_", f"{server}__{tool}")[:64]


async def list_tools(spec: ServerSpec, problems: list[str] | None = None) -> list[Tool]:
    """The server's tools (starting it if needed; `ConnectionError` when it cannot be started). A tool whose
    schema is too big or deep to check safely is left out, and said so in `problems`."""
    conn = connection(spec)
    client = await conn.get()
    listing = []
    cursor = None
    for _ in range(50):  # pages; a server that pages forever gets cut off
        page = await client.list_tools(cursor=cursor)
        listing.extend(page.tools)
        cursor = page.next_cursor
        if not cursor:
            break
    out: list[Tool] = []
    seen: set[str] = set()
    for t in listing:
        name = tool_name(spec.name, t.name)
        if name in seen or not NAME_RE.match(name):
            continue
        seen.add(name)
        schema = t.input_schema if isinstance(t.input_schema, dict) else {}
        if schema.get("type") != "object":
            schema = {"type": "object", "properties": {}}
        # The server's schema is checked on the event loop before every call: bounded, and without the
        # patterns that cannot be searched in linear time (shou.tools.schema_regex).
        safe, why = safe_schema(schema)
        if safe is None:
            if problems is not None:
                problems.append(f"MCP server {spec.name!r}: tool {t.name[:64]!r} left out: {why}")
            continue
        schema = safe
        description = (t.description or t.title or t.name)[:DESCRIPTION_CHARS]
        annotations = t.annotations
        idempotent = bool(annotations and (annotations.read_only_hint or annotations.idempotent_hint))
        out.append(Tool(name, f"[MCP server {spec.name}] {description}", schema, _caller(conn, t.name),
                        timeout=spec.timeout, idempotent=idempotent, untrusted_output=True))
    return out


def _caller(conn: Connection, remote: str) -> Any:
    async def call(**arguments: Any) -> ToolResult:
        from mcp.shared.exceptions import MCPError
        from mcp_types import CONNECTION_CLOSED, PARSE_ERROR

        try:
            client = await conn.get()  # a server found dead since the last call is started again here
        except ConnectionError as e:
            return ToolResult.error(f"Error: {e}")
        try:
            return convert(await client.call_tool(remote, arguments))
        except ValidationTimeout as e:  # a result too slow to check (shou.mcp.results): the server is fine
            return ToolResult.error(f"Error: the MCP server {conn.spec.name!r} sent a result shou could not check "
                                    f"in time: {e}")
        except UnsafePattern as e:  # the SDK checks results against the server's output schema
            return ToolResult.error(f"Error: the MCP server {conn.spec.name!r} sent a result whose output schema "
                                    f"cannot be checked safely: {e}")
        except MCPError as e:
            if e.error.code == TOO_BIG:  # shou dropped a reply over the bound (shou.mcp.stdio): the message says so
                return ToolResult.error(f"Error: {e.error.message}")
            if e.error.code == PARSE_ERROR:  # the client's own error: a reply it could not read (or over the bound)
                return ToolResult.error(f"Error: the MCP server {conn.spec.name!r} answered with a reply shou could "
                                        f"not read: {e.error.message}")
            if e.error.code != CONNECTION_CLOSED:  # the server answered with a protocol error: it is up
                return ToolResult.error(f"Error: the MCP server {conn.spec.name!r} refused the call: {e}")
            conn.lost("the connection closed")
            return ToolResult.error(f"Error: the MCP server {conn.spec.name!r} stopped during the call, so it may "
                                    "or may not have had its effect; the server is started again for the next call")
        except Exception as e:  # the transport broke some other way: this call fails, the next restarts
            conn.lost(f"{type(e).__name__}: {e}")
            return ToolResult.error(f"Error: the MCP server {conn.spec.name!r} failed during the call "
                                    f"({type(e).__name__}: {e}); it is started again for the next call")

    return call


def convert(result: Any) -> ToolResult:
    """An MCP `CallToolResult` as a shou result."""
    texts: list[str] = []
    image: ImagePart | None = None
    for part in result.content or ():
        kind = getattr(part, "type", "")
        if kind == "text":
            texts.append(part.text)
        elif kind == "image" and image is None:
            image = ImagePart(part.data, part.mime_type)
        elif kind == "resource":
            res = part.resource
            texts.append(getattr(res, "text", None) or f"[resource {res.uri}]")
        elif kind == "resource_link":
            texts.append(f"[resource {part.uri}]")
        elif kind == "audio":
            texts.append("[audio, not shown]")
    structured = result.structured_content
    if not texts and structured is not None:
        texts.append(json.dumps(structured, ensure_ascii=False))
    text = "\n".join(texts) or ("(the tool returned nothing)" if not result.is_error else "Error: (no message)")
    details = {"structured": structured} if structured is not None else None
    return ToolResult(text, image, bool(result.is_error), details)
