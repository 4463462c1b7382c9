"""Sub-agents: the `delegate` tool hands a task to a child agent with a fresh context.

The child sees its own instructions and the task, never the parent's conversation, so the parent keeps
its context small and several children can work at once (calls of one turn run in parallel). Named
agents come from `[agents.NAME]` in shou.toml or `Agent(agents=...)`; "general" is always there: the
parent's model and tools. A child does not delegate further unless its agent lists the `delegate` tool.
Its events stream inside the parent's, its spending counts against the parent's budgets, and a child that
runs out of steps, time or budget hands back what it had, with its status (shou.agent.subrun).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ..errors import UserError
from ..models.named import model_named
from ..setting_tables import check_agent_table
from ..tools.base import Tool, ToolContext, ToolResult, tool
from ..tools.registry import ToolSet
from .limits import MAX_TASK_CHARS
from .runs import run_sub
from .subrun import outcome, sub_config

if TYPE_CHECKING:
    from ..models.base import Model
    from .agent import Agent
    from .config import AgentConfig

GENERAL = "general"
SUBAGENT_NOTE = (
    "\n\nYou are a sub-agent: another agent delegated this task to you, and you do not see its conversation. "
    "Do the task with your tools, then reply with the result it needs, complete and self-contained (it "
    "sees only your final reply)."
)
DELEGATE_TIMEOUT = 24 * 3600.0  # the child's own run_timeout is what limits it


@dataclass(frozen=True, slots=True)
class AgentSpec:
    """A named sub-agent: its `instructions` (default: the parent's), `model` (default: the parent's; a
    name resolves like `summary_model`), `tools` by name (default: the parent's but `delegate`), `max_steps`
    (default: the parent's) and a one-line `description` the parent's model reads when it chooses. `handoff`:
    the run's model may also pass it the conversation itself (agent/handoff.py)."""

    instructions: str | None = None
    model: str | Model | None = None
    tools: tuple[str, ...] | None = None
    max_steps: int | None = None
    description: str = ""
    handoff: bool = False  # the model may also hand the whole conversation over to it (agent/handoff.py)

    @classmethod
    def from_table(cls, name: str, table: Mapping[str, Any]) -> AgentSpec:
        """An `[agents.NAME]` table of shou.toml, checked."""
        check_agent_table(name, table)
        tools = table.get("tools")
        steps = table.get("max_steps")
        return cls(table.get("instructions"), table.get("model"), tuple(tools) if tools is not None else None,
                   steps, table.get("description") or "", bool(table.get("handoff", False)))


def agent_specs(tables: Mapping[str, Any] | None) -> dict[str, AgentSpec]:
    """The `agents` setting as specs (tables are checked when settings load; this builds them)."""
    return {name: spec if isinstance(spec, AgentSpec) else AgentSpec.from_table(name, spec)
            for name, spec in (tables or {}).items()}


def child_config(parent: AgentConfig, spec: AgentSpec) -> AgentConfig:
    """The config a child runs with: `parent`'s with what `spec` changes."""
    tools = parent.code_tools
    if spec.tools is not None:
        tools = tools.only(spec.tools)
    elif "delegate" in tools.names:
        tools = ToolSet([t for t in tools if t.name != "delegate"])
    base = spec.instructions if spec.instructions is not None else parent.instructions
    changes: dict[str, Any] = {"tools": tools, "instructions": base + SUBAGENT_NOTE}
    if spec.model is not None:
        changes["model"] = model_named(spec.model, parent.settings)
    if spec.max_steps is not None:
        changes["max_steps"] = spec.max_steps
    return sub_config(parent, **changes)


def child_agent(parent: Agent, spec: AgentSpec) -> Agent:
    """The agent a child runs as: `parent` with what `spec` changes (another model counts tokens anew)."""
    return parent.variant(child_config(parent.config, spec))


def delegate_tool(agents: Mapping[str, AgentSpec]) -> Tool:
    """The `delegate` tool, knowing the named `agents` (plus "general")."""
    specs = {GENERAL: AgentSpec(description="the same model and tools as you"), **agents}
    listing = "; ".join(f"{name}: {spec.description}" if spec.description else name for name, spec in specs.items())

    async def delegate(task: str, ctx: ToolContext, agent: str = GENERAL) -> ToolResult:
        run = ctx.state.get("shou.run")
        if run is None:
            return ToolResult("Error: delegate works only inside a shou run.", is_error=True)
        spec = specs.get(agent)
        if spec is None:
            return ToolResult(f"Error: there is no agent named {agent!r}; choose one of: {', '.join(specs)}.",
                              is_error=True)
        if not task.strip():
            return ToolResult("Error: give the sub-agent a task: what to do and what to hand back.", is_error=True)
        if len(task) > MAX_TASK_CHARS:  # the limit a person's task has too
            return ToolResult(f"Error: the task is {len(task):,} characters; at most {MAX_TASK_CHARS:,}. Put long "
                              "material in a file and name the file in the task.", is_error=True)
        try:
            child = child_agent(run.agent, spec)
        except UserError as e:
            return ToolResult(f"Error: agent {agent!r} cannot start: {e}", is_error=True)
        done, session = await run_sub(run, child, task)
        details = {"agent": agent, "run_id": done.run_id, "status": done.status, "steps": done.steps}
        text = outcome(done, session)
        return ToolResult(text, is_error=done.status in ("error", "cancelled") and text.startswith("[status"),
                          details=details)

    return tool(delegate, name="delegate", timeout=DELEGATE_TIMEOUT, description=(
        "Hand a self-contained task to a sub-agent with a fresh context (it does not see this conversation, "
        "so say everything it needs), and get its final reply. Several delegate calls in one turn run at "
        f"the same time. Agents: {listing}."))
