"""The Agent Card `shou serve` publishes at `/.well-known/agent-card.json`, and the extended one.

The public card (no token needed, as A2A expects) says who the agent is and how to reach it: its name and
description, the JSON-RPC and HTTP+JSON endpoints at the address the request came to, streaming (yes), push
notifications (no: not built), the security scheme (a bearer token of the server's), and a skill per agent
the server offers: the default one and each `[agents.NAME]` (chosen with `metadata.agent` on a message).
The names of the tools each one has are in the extended card only (`GetExtendedAgentCard`, which takes a
token), since what a server can do to its workspace is its users' business, not every caller's.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from a2a.types import (
    AgentCapabilities,
    AgentCard,
    AgentInterface,
    AgentProvider,
    AgentSkill,
    HTTPAuthSecurityScheme,
    SecurityRequirement,
    SecurityScheme,
    StringList,
)

if TYPE_CHECKING:
    from ..agent.agent import Agent

__all__ = ["JSONRPC_PATH", "REST_PATH", "SCHEME", "agent_card"]

JSONRPC_PATH = "/a2a/jsonrpc"
REST_PATH = "/a2a/rest"
SCHEME = "bearer"
MODES = ["text/plain", "application/json"]
DEFAULT_SKILL = "shou"


def _skills(agent: Agent, extended: bool) -> list[AgentSkill]:
    from ..agent.delegate import child_config

    base = agent.config
    skills = [AgentSkill(id=DEFAULT_SKILL, name="shou", tags=["agent"], description=(
        "Carries out a task with its tools (files of its workspace, a calculator, and whatever its operator "
        "configured) until it is done, and answers. Files it writes come back as artifacts."))]
    for name, spec in base.agents.items():
        skills.append(AgentSkill(id=name, name=name, tags=["agent"], description=(
            f"{spec.description or 'A named agent of this server.'} Ask for it with metadata "
            f'{{"agent": "{name}"}} on the message.')))
    if extended:
        for skill in skills:
            config = base if skill.id == DEFAULT_SKILL else child_config(base, base.agents[skill.id])
            skill.tags.extend(t.name for t in config.offered)
        # a run adds what its servers and remote agents offer when it starts: named here by where they come from
        skills[0].tags.extend([*(f"mcp:{n}" for n in base.mcp_servers), *(f"a2a:{n}" for n in base.a2a_agents)])
    return skills


def agent_card(agent: Agent, base_url: str, *, extended: bool = False) -> AgentCard:
    """The card of this server's agent, reached at `base_url` (the extended one with each skill's tools)."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        shown = version("shou")
    except PackageNotFoundError:  # run from a source tree
        shown = "0"
    base_url = base_url.rstrip("/")
    return AgentCard(
        name="shou", version=shown, description=(
            "A shou agent: a language model that reasons, calls tools and reads their results until the task is "
            "done. A task is a run; messages with the same contextId continue one conversation; a task that waits "
            "for approval of a call is input-required and takes \"approve\" or \"deny\" as its next message."),
        provider=AgentProvider(organization="shou", url=base_url),
        supported_interfaces=[
            AgentInterface(url=base_url + JSONRPC_PATH, protocol_binding="JSONRPC", protocol_version="1.0"),
            AgentInterface(url=base_url + REST_PATH, protocol_binding="HTTP+JSON", protocol_version="1.0"),
        ],
        capabilities=AgentCapabilities(streaming=True, push_notifications=False, extended_agent_card=True),
        security_schemes={SCHEME: SecurityScheme(http_auth_security_scheme=HTTPAuthSecurityScheme(
            scheme="Bearer", description="A token of the server's tokens file (or the one token `shou serve` "
                                         "printed without one): Authorization: Bearer TOKEN"))},
        security_requirements=[SecurityRequirement(schemes={SCHEME: StringList()})],
        default_input_modes=MODES, default_output_modes=[*MODES, "application/octet-stream"],
        skills=_skills(agent, extended),
    )
