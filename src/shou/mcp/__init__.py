"""MCP (Model Context Protocol), with the official `mcp` SDK: servers' tools join an agent's.

`[mcp_servers.NAME]` servers (shou.mcp.servers) are started when a run first needs them and kept for the
process; their tools are offered as `NAME__TOOL` (shou.mcp.tools). At the start of each run the listings
are refreshed (the SDK answers from its cache for as long as the server allows), so a server that came
back with other tools is seen.
"""

from __future__ import annotations

from typing import Any

__all__ = ["ServerSpec", "close_all", "connection", "list_tools", "server_specs", "tool_name"]

_FROM = {"ServerSpec": "servers", "close_all": "servers", "connection": "servers", "server_specs": "servers",
         "list_tools": "tools", "tool_name": "tools"}


def __getattr__(name: str) -> Any:
    """The package's names, imported when first used: every agent made from settings asks for the servers'
    specs, and importing the tools' module (the SDK's types, schema checks) cost most of a run's start-up
    where no server is configured."""
    module = _FROM.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    from importlib import import_module

    value = getattr(import_module(f"{__name__}.{module}"), name)
    globals()[name] = value
    return value
