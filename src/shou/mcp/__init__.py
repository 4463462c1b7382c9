"""MCP (Model Context Protocol), with the official `mcp` SDK: servers' tools join an agent's.

`[mcp_servers.NAME]` servers (shou.mcp.servers) are started when a run first needs them and kept for the
process; their tools are offered as `NAME__TOOL` (shou.mcp.tools). At the start of each run the listings
are refreshed (the SDK answers from its cache for as long as the server allows), so a server that came
back with other tools is seen.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING

from ..tools.registry import ToolSet
from .servers import ServerSpec, close_all, connection, server_specs
from .tools import list_tools, tool_name

if TYPE_CHECKING:
    from ..agent.agent import Agent

__all__ = ["ServerSpec", "close_all", "connect", "connection", "list_tools", "server_specs", "tool_name"]


async def connect(agent: Agent, servers: Mapping[str, ServerSpec]) -> list[str]:
    """Give `agent` the current tools of `servers`; returns a message per server that could not be reached
    (the run goes on without its tools)."""
    problems = []
    offered: dict[str, list[str]] = agent.mcp_offered
    tools = agent.code_tools if agent.code_mode else agent.tools
    for name, spec in servers.items():
        try:
            fresh = await list_tools(spec, problems)
        except Exception as e:  # a server that will not start must not stop the run
            problems.append(f"MCP server {name!r} is not available: {e}")
            fresh = []
        old = set(offered.get(name, ()))
        kept = [t for t in tools if t.name not in old]
        taken = {t.name for t in kept}
        added = [t for t in fresh if t.name not in taken]
        tools = ToolSet([*kept, *added])
        offered[name] = [t.name for t in added]
    if agent.code_mode:  # the code calls them; the python tool's description lists them
        from ..agent.code import python_tool

        agent.code_tools, agent.tools = tools, ToolSet([python_tool(tools)])
    else:
        agent.tools = tools
    return problems
