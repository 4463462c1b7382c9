"""What a run sends the model each step: the context policy applied to the session.

Reads the workspace's `.shou/AGENTS.md` and `.shou/MEMORY.md`, lists the agent's skills, recalls long-term
memories once per run, compacts history past the threshold (emitting `Compacted`), picks the relevant tools,
and builds the messages under the token budget (with the skills the session loaded).
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from ..context.builder import ContextBuilder, ContextPolicy, system_text
from ..context.compaction import summarize
from ..context.relevance import select_tools
from ..context.tokens import TokenCounter, context_window
from ..events import Compacted, Event, Notice
from ..messages import Message
from ..models.base import model_id
from ..usage import Usage
from ..workspace import read_state_text

if TYPE_CHECKING:
    from ..session import Session
    from .agent import Agent


class RunContext:
    """The context side of one run."""

    def __init__(self, agent: Agent, session: Session, run_id: str, emit: Callable[[Event], None]) -> None:
        self.agent = agent
        self.session = session
        self.run_id = run_id
        self.emit = emit
        self.policy: ContextPolicy = agent.context
        self.counter: TokenCounter = agent.token_counter
        self.builder = ContextBuilder(self.counter, context_window(agent.model.name, self.policy.window), self.policy)
        self.rules = read_state_text(agent.workspace, "AGENTS.md")
        self.memory_md = read_state_text(agent.workspace, "MEMORY.md")
        self.recalled: list[str] = []
        skills = getattr(agent, "skills", None)
        self.catalog = skills.catalog() if skills is not None else ""
        self.untrusted = any(getattr(t, "untrusted_output", False) for t in agent.tools)
        self.pinned = max(0, len(session.messages) - 1)  # the task, recorded just before the first step
        self.usage = Usage()
        self._tool_tokens: dict[tuple[str, ...], tuple[list[dict[str, Any]], int]] = {}

    def recall(self, task: str) -> None:
        """Recall long-term memories relevant to the task (once, at the start of the run)."""
        store = self.agent.memory
        if store is None or self.policy.recall_k <= 0:
            return
        try:
            if not store.count():  # nothing saved yet: do not load an embedding model for nothing
                return
            from ..memory import recall

            self.recalled = [m.text for m in recall(store, task, self.policy.recall_k)]
        except Exception as e:  # memory is a help, never a reason to fail the run
            self.emit(Notice(self.run_id, 0, "memory", f"recall failed: {type(e).__name__}: {e}"))

    def query(self) -> str:
        """What the current step is about: the task and the latest messages."""
        msgs = self.session.messages
        tail = " ".join(m.text[:2000] for m in msgs[-3:])
        calls = " ".join(c.name + " " + c.arguments[:500] for m in msgs[-3:] for c in m.tool_calls)
        return f"{msgs[self.pinned].text[:2000] if msgs else ''} {tail} {calls}"

    def tools(self, query: str) -> tuple[list[dict[str, Any]], int]:
        """The tool specs to offer this step and their token cost."""
        # use_skill is always offered when there are skills: the catalog in the system prompt names it.
        chosen = select_tools(list(self.agent.tools), query, max_tools=self.policy.max_tools,
                              core=(*self.policy.core_tools, "use_skill") if self.catalog else self.policy.core_tools)
        key = tuple(t.name for t in chosen)
        cached = self._tool_tokens.get(key)
        if cached is None:
            specs = [t.spec() for t in chosen]
            cached = self._tool_tokens[key] = (specs, self.counter.text(json.dumps(specs)))
        return cached

    async def messages(self, step: int) -> tuple[list[Message], list[dict[str, Any]], int]:
        """The request for `step`: messages, tool specs, and the request's estimated tokens."""
        query = self.query()
        specs, tool_tokens = self.tools(query)
        history = self.session.messages
        cut = self.builder.compaction_point(history, self.session.summary_upto, tool_tokens)
        if cut is not None:
            await self.compact(step, cut)
        upto = self.session.summary_upto
        live = history[upto:]
        pinned: int | None = self.pinned - upto
        if pinned is not None and pinned < 0:  # the task itself was summarised: keep it verbatim anyway
            live = [history[self.pinned], *live]
            pinned = 0
        session = self.session

        def render(omitted: int) -> str:  # workspace files and memories may hold a key: it is never sent
            return self.agent.redactor.text(system_text(
                self.agent.instructions, rules=self.rules, memory_md=self.memory_md,
                working_memory=session.working_memory, summary=session.summary, recalled=self.recalled,
                omitted=omitted, untrusted=self.untrusted, skills=self.catalog,
                loaded_skills=getattr(session, "loaded_skills", None)))

        built = self.builder.build(render, live, pinned=pinned, tool_tokens=tool_tokens, query=query)
        return built.messages, specs, built.tokens

    async def compact(self, step: int, cut: int) -> Compacted | None:
        """Summarise the session's messages up to `cut` into the running summary."""
        history = self.session.messages
        start = self.session.summary_upto
        before = self.counter.text(self.session.summary) + self.builder.history_tokens(history[start:])
        model = self.agent.summary_model or self.agent.model  # cheap work may go to a cheaper model
        t0 = time.perf_counter()
        try:
            summary, usage = await summarize(model, self.counter, history[start:cut],
                                             self.session.summary, self.builder.budget // 2)
        except Exception as e:  # the builder still trims by budget; the run goes on
            self.emit(Notice(self.run_id, step, "compaction", f"compaction failed ({type(e).__name__}: {e}); "
                                                                "older messages are left out instead"))
            return None
        usage = replace(usage, cost=self.agent.prices.cost(model_id(model), usage))
        self.usage = self.usage + usage
        after = self.counter.text(summary) + self.builder.history_tokens(history[cut:])
        event = Compacted(self.run_id, summary, cut, before, after, usage, model_id(model),
                          time.perf_counter() - t0)
        self.emit(event)
        return event
