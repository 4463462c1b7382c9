"""The MCP servers' tools a run is offered: a step before the run, which builds the run's agent.

Each run starts from its agent's config and adds what its servers offer now (the listings refresh at the
start of every run, so a server that came back with other tools is seen); the agent itself is never
changed, so concurrent runs each see the listing they started with. Sub-runs inherit the tools and
connect to nothing (shou.agent.subrun).
"""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING

from ..tools.registry import ToolSet

if TYPE_CHECKING:
    from .agent import Agent


async def with_servers(agent: Agent) -> tuple[Agent, list[str]]:
    """`agent` with its MCP servers' current tools (a server's tool never hides one the agent has), and a
    message per server that could not be reached (the run goes on without its tools)."""
    config = agent.config
    if not config.mcp_servers:
        return agent, []
    from ..mcp import list_tools

    problems: list[str] = []
    tools = list(config.code_tools)  # with use_skill and delegate already in place, so the order is kept
    taken = {t.name for t in tools}
    for name, spec in config.mcp_servers.items():
        try:
            fresh = await list_tools(spec, problems)
        except Exception as e:  # a server that will not start must not stop the run
            problems.append(f"MCP server {name!r} is not available: {e}")
            fresh = []
        added = [t for t in fresh if t.name not in taken]
        taken.update(t.name for t in added)
        tools += added
    return agent.variant(replace(config, tools=ToolSet(tools))), problems
