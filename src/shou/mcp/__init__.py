"""MCP (Model Context Protocol), with the official `mcp` SDK: servers' tools join an agent's.

`[mcp_servers.NAME]` servers (shou.mcp.servers) are started when a run first needs them and kept for the
process; their tools are offered as `NAME__TOOL` (shou.mcp.tools). At the start of each run the listings
are refreshed (the SDK answers from its cache for as long as the server allows), so a server that came
back with other tools is seen.
"""

from __future__ import annotations

from .servers import ServerSpec, close_all, connection, server_specs
from .tools import list_tools, tool_name

__all__ = ["ServerSpec", "close_all", "connection", "list_tools", "server_specs", "tool_name"]
