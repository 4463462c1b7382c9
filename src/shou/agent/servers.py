"""The MCP servers' tools and the remote A2A agents a run is offered: a step before the run, which builds the
run's agent.

Each run starts from its agent's config and adds what its servers offer now (the listings refresh at the
start of every run, so a server that came back with other tools is seen) and a tool per A2A agent (its card
read once and cached: shou.a2a.card); the agent itself is never changed, so concurrent runs each see the
listing they started with. Sub-runs inherit the tools and connect to nothing (shou.agent.subrun).
"""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING

from ..tools.registry import ToolSet

if TYPE_CHECKING:
    from .agent import Agent

Problem = tuple[str, str]  # (the notice's kind, what went wrong)


async def with_servers(agent: Agent) -> tuple[Agent, list[Problem]]:
    """`agent` with its MCP servers' current tools and its A2A agents' tools (neither ever hides one the
    agent has), and a notice per server or agent that could not be reached (the run goes on without it, or,
    for an A2A agent, with a tool whose call says why it fails)."""
    config = agent.config
    if not config.mcp_servers and not config.a2a_agents:
        return agent, []
    problems: list[Problem] = []
    tools = list(config.code_tools)  # with use_skill and delegate already in place, so the order is kept
    taken = {t.name for t in tools}
    if config.mcp_servers:
        from ..mcp import list_tools

        for name, spec in config.mcp_servers.items():
            found: list[str] = []
            try:
                fresh = await list_tools(spec, found)
            except Exception as e:  # a server that will not start must not stop the run
                found.append(f"MCP server {name!r} is not available: {e}")
                fresh = []
            problems += [("mcp", p) for p in found]
            added = [t for t in fresh if t.name not in taken]
            taken.update(t.name for t in added)
            tools += added
    if config.a2a_agents:
        from ..a2a.tool import remote_tools

        remote, found = await remote_tools(dict(config.a2a_agents), taken)
        problems += [("a2a", p) for p in found]
        tools += remote
    return agent.variant(replace(config, tools=ToolSet(tools))), problems
