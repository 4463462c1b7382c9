"""Handoffs: the model passes the whole conversation to another configured agent, which goes on with it.

`[agents.NAME] handoff = true` (or `AgentSpec(handoff=True)`) offers the run's model one tool, `handoff(agent,
reason)`. Unlike `delegate` (a sub-run with a fresh context, whose answer comes back as a tool result), a
handoff changes who answers the SAME run: from the next step on, the run's requests carry the other agent's
instructions, tools and model, over the whole conversation so far, in the same session. The run's own agent is
called `main`; a handed-to agent may hand over again, to another such agent or back to `main`.

The handoff is an event (`Handoff`: from, to, why) emitted through the run's emitter, so it is in the log before
the next request is made: which agent answers is a fold of the log (the open run's `agent`,
folds/openrun.py), and a run killed after a handoff resumes with the agent it was handed to. The trace names
the agent of every step from the same events.

A handed-to agent is built from the run's own config the way a sub-agent's is: its tools only ever a subset
of the run's, its `max_steps` only ever lower (`narrow`), its model and instructions from the `[agents]`
table, which only trusted sources may set (an untrusted workspace's `[agents]` is ignored, shou.config).
Sub-runs (plan steps, sub-agents, reviews) are never offered the tool: a handoff is the main run's.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from ..errors import UserError
from ..events import Handoff
from ..models.named import model_named
from ..setting_tables import MAIN_AGENT
from ..tools.base import Tool, ToolContext, ToolResult, tool
from ..tools.registry import ToolSet

if TYPE_CHECKING:
    from .agent import Agent
    from .config import AgentConfig
    from .delegate import AgentSpec

__all__ = ["HANDOFF", "MAIN_AGENT", "handed_agent", "handed_config", "handoff_targets", "handoff_tool"]

HANDOFF = "handoff"  # the tool's name
MAX_REASON_CHARS = 1000  # of the reason the event and the trace keep


def handoff_targets(agents: Mapping[str, AgentSpec], current: str = MAIN_AGENT) -> dict[str, str]:
    """The agents the one answering now (`current`) may hand over to, with their descriptions: every agent
    with `handoff` set but itself, and the run's own agent (`main`) when another one answers."""
    targets = {} if current == MAIN_AGENT else {MAIN_AGENT: "the agent this conversation started with"}
    targets.update({name: spec.description for name, spec in agents.items() if spec.handoff and name != current})
    return targets


def handoff_tool(agents: Mapping[str, AgentSpec], current: str = MAIN_AGENT) -> Tool:
    """The `handoff` tool of agent `current`, knowing the `agents` it may hand the conversation to."""
    targets = handoff_targets(agents, current)
    listing = "; ".join(f"{name}: {text}" if text else name for name, text in targets.items())

    async def handoff(agent: str, ctx: ToolContext, reason: str = "") -> ToolResult:
        """Hand the conversation over.

        Args:
            agent: the name of the agent that takes over
            reason: why that agent should continue (it sees this conversation, so keep it short)
        """
        run = ctx.state.get("shou.run")
        if run is None or not hasattr(run, "handed_to"):
            return ToolResult("Error: handoff works only inside a shou run.", is_error=True)
        if agent == run.agent_name:  # also a resumed run's handoff whose result the killed process never logged
            return ToolResult(f"You are {agent!r} already (the conversation is yours): go on with the task.")
        if agent not in targets:
            return ToolResult(f"Error: there is no agent named {agent!r} to hand over to; choose one of: "
                              f"{', '.join(targets) or '(none)'}.", is_error=True)
        if run.handed_to is not None:
            return ToolResult(f"Error: this turn hands over to {run.handed_to!r} already; one handoff per turn.",
                              is_error=True)
        try:
            handed_config(run.main.config, agent)  # one that cannot be built is refused now, not at the next step
        except UserError as e:
            return ToolResult(f"Error: agent {agent!r} cannot take over: {e}", is_error=True)
        # The event is the handoff: logged (and folded) before the next request, so a resumed run knows it.
        run.emit(Handoff(run.run_id, run.step, run.agent_name, agent, reason.strip()[:MAX_REASON_CHARS]))
        run.handed_to = agent
        return ToolResult(f"Handed over: {agent} answers from the next step on, with this whole conversation.",
                          details={"from": run.agent_name, "to": agent})

    # Idempotent: a call a killed process left without a result is run again on resume, and then either hands
    # over (its event was never logged) or finds it done (the fold already names the agent).
    return tool(handoff, name=HANDOFF, idempotent=True, description=(
        "Hand this whole conversation over to another agent, which continues it with its own instructions and "
        "tools from the next step on (you stop answering). Use it when the task is better handled by that agent; "
        f"say why in `reason`. Agents: {listing}."))


def handed_config(main: AgentConfig, name: str) -> AgentConfig:
    """The config agent `name` answers a run with, built from the run's own config `main` (`main` itself for
    `MAIN_AGENT`). `UserError` when there is no such agent to hand over to, or its tools or model are unknown."""
    if name == MAIN_AGENT:
        return main
    spec = main.agents.get(name)
    if spec is None or not spec.handoff:
        raise UserError(f"there is no agent {name!r} with handoff = true in [agents]")
    tools = ToolSet([t for t in main.code_tools if t.name != HANDOFF])
    if spec.tools is not None:  # a subset of the run's: a named agent never gets a tool the run has not
        tools = tools.only([n for n in spec.tools if n != HANDOFF])
    tools = ToolSet([*tools, handoff_tool(main.agents, name)])
    # The config derives use_skill and delegate from these flags: the tools chosen above say what they are.
    changes: dict[str, Any] = {
        "tools": tools, "delegation": False, "skills": main.skills if "use_skill" in tools.names else None,
        "instructions": spec.instructions if spec.instructions is not None else main.instructions,
        "planning": False, "reflect": False,  # what the run is made of was chosen when it was built
    }
    if spec.model is not None:
        changes["model"] = model_named(spec.model, main.settings)
    if spec.max_steps is not None:  # only ever lower: `narrow` (config.py) for this one limit
        changes["max_steps"] = min(main.max_steps, spec.max_steps)
    return replace(main, **changes)


def handed_agent(main: Agent, name: str) -> Agent:
    """The agent `name` answers the run of `main` with (another model counts tokens anew)."""
    return main if name == MAIN_AGENT else main.variant(handed_config(main.config, name))
