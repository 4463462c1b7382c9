"""Sub-runs: a whole ReAct run carried out for another run (a plan step, a sub-agent's task); started by
`run_sub` (agent/runs.py), which builds it like any run.

A sub-run has a context of its own: a fresh conversation that starts with its task, never the parent's
history. Its events go to the parent's stream and the parent's log with `parent` set (so they are traced,
shown and counted, but not folded into the parent's conversation), it commits through the parent's
session (its decisions are written ahead like the parent's), and its model calls are held against the
parent's budgets as well as its own.
"""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING, Any

from ..events import RunFinished
from ..session import Session
from ..tools.registry import ToolSet

if TYPE_CHECKING:
    from .agent import Agent
    from .config import AgentConfig

PARTIAL_CHARS = 4000  # of a stopped sub-run's last words handed back to its parent


class SubSession(Session):
    """The conversation of a sub-run: in memory, committed through the session it works for."""

    def __init__(self, parent: Session) -> None:
        super().__init__(parent.name, None)
        self.key = parent.key  # the same browser, interpreter and spills as the run it works for
        self._parent = parent

    @property
    def trace_keys(self) -> set[str]:
        """The parent's: the sub-run's requests are logged there, so what it holds is not stored again (a plan's
        steps share their instructions and tools)."""
        return self._parent.trace_keys

    def commit(self) -> None:
        """Make what the sub-run (and its parent) recorded durable, in the parent's log."""
        self._parent.commit()

    async def commit_together(self) -> None:
        """`commit()`, shared with the other runs in flight on the parent's store."""
        await self._parent.commit_together()

    flush = commit


def sub_config(config: AgentConfig, **changes: Any) -> AgentConfig:
    """`config` for a sub-run, with `changes` (max_steps, run_timeout, model, instructions, tools, ...).

    It plans, reflects and observes nothing itself (the parent's run does those, and sees every event), and it
    answers in text whatever type the parent's answer must have. Its tools are the parent's as offered to code
    (use_skill, delegate, the MCP servers' and the A2A agents' tools included), so it adds none and connects to
    no server; it keeps the parent's redactor, servers' secrets and all.
    """
    # A handoff is the main run's (agent/handoff.py): a sub-run is neither offered one nor given its tool.
    agents = {name: replace(spec, handoff=False) if spec.handoff else spec for name, spec in config.agents.items()}
    # Out of the tools `changes` give too (a named sub-agent's are the parent's, handoff among them).
    tools = ToolSet([t for t in changes.pop("tools", config.code_tools) if t.name != "handoff"])
    return replace(config, planning=False, reflect=False, observers=(), mcp_servers={}, a2a_agents={},
                   delegation=False, skills=None, agents=agents, output_type=None, tools=tools, **changes)


def derived(agent: Agent, **changes: Any) -> Agent:
    """An agent for a sub-run of `agent`'s: `sub_config(agent.config, **changes)`."""
    return agent.variant(sub_config(agent.config, **changes))


def outcome(done: RunFinished, session: Session) -> str:
    """What a sub-run hands back: its answer, or its status and the last thing it said or found."""
    if done.status == "completed" and done.answer.strip():
        return done.answer
    last = ""
    for m in reversed(session.messages):
        if m.role in ("assistant", "tool") and m.text.strip():
            last = m.text.strip()
            if m.role == "tool":
                last = f"the last tool result ({m.name}): {last}"
            break
    if len(last) > PARTIAL_CHARS:
        last = last[:PARTIAL_CHARS] + " [...]"
    why = f" ({done.error})" if done.error else ""
    return (f"[status: {done.status}{why}; after {done.steps} step(s)]\n"
            + (f"What it had so far: {last}" if last else "It produced nothing before it stopped."))
