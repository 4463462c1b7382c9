"""The AgentConfig fields a person's settings decide, read from them: the limits, the model settings, the named
agents (handoff off when `--tools` leaves it out), delegation and `ask_user` as `--tools` allows, the MCP
servers' and remote A2A agents' specs and the `[guardrails]`, each table's module imported only when there is
one.

It stands alone because it is the translation from one source (the settings' names) into AgentConfig's, apart
from what a config is and checks (shou.agent.config): it knows nothing of AgentConfig itself, which imports it
for `AgentConfig.from_settings`.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from ..models.base import ModelSettings


def _offered(settings: Any, name: str) -> bool:
    """Whether `--tools` leaves tool `name` on offer (the tools shou adds itself included)."""
    return settings.tools is None or name in settings.tools


def _handoffs_offered(agents: dict[str, Any], offered: bool) -> dict[str, Any]:
    """`agents`, with `handoff` turned off when `--tools` leaves the handoff tool out."""
    return agents if offered else {name: replace(spec, handoff=False) for name, spec in agents.items()}


def _servers(table: Any) -> Any:
    """The MCP servers' specs (their modules imported only when there are some: most runs have none)."""
    if not table:
        return {}
    from ..mcp.servers import server_specs

    return server_specs(table)


def _remote_agents(table: Any) -> Any:
    """The remote A2A agents' specs (imported only when there are some)."""
    if not table:
        return {}
    from ..a2a.spec import remote_specs

    return remote_specs(table)


def _settings_fields(settings: Any) -> dict[str, Any]:
    """The fields `settings` decide, by their names in AgentConfig."""
    from .delegate import agent_specs

    approvals = settings.approvals if settings.approvals in ("yes", "deny", "defer") else "deny"
    return {
        "max_steps": settings.max_steps, "run_timeout": settings.run_timeout,
        # Only a tool_timeout someone set limits shell and run_code (see AgentConfig).
        "tool_timeout": settings.tool_timeout if "tool_timeout" in settings.sources else None,
        "max_parallel_tools": settings.max_parallel_tools, "workspace": settings.workspace, "settings": settings,
        "vision": settings.vision, "model_settings": ModelSettings.from_settings(settings), "approvals": approvals,
        "token_budget": settings.token_budget, "max_cost": settings.max_cost,
        "summary_model": settings.summary_model, "review_model": settings.review_model,
        "max_replans": settings.max_replans, "plan_step_max_steps": settings.plan_step_max_steps,
        "plan_step_timeout": settings.plan_step_timeout, "max_reviews": settings.max_reviews,
        "output_retries": settings.output_retries,
        "agents": _handoffs_offered(agent_specs(settings.agents), _offered(settings, "handoff")),
        "delegation": settings.delegation and _offered(settings, "delegate"),
        "ask_user": "defer" if getattr(settings, "ask_user", None) and _offered(settings, "ask_user") else None,
        "mcp_servers": _servers(settings.mcp_servers), "a2a_agents": _remote_agents(settings.a2a_agents),
        **_configured_guardrails(settings),
    }


def _configured_guardrails(settings: Any) -> dict[str, Any]:
    """`[guardrails]` as the field, when there are some (their module is imported only then)."""
    tables = getattr(settings, "guardrails", None)
    if not tables:
        return {}
    from .guardrails import guardrails_from_settings

    return {"guardrails": guardrails_from_settings(tables, settings.workspace)}
