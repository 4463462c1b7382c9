"""What a run sends the model each step: the context policy applied to the session.

Reads the workspace's instruction files (the root `AGENTS.md` and `CLAUDE.md`, `.shou/AGENTS.md` and
`.shou/MEMORY.md`, and a folder's own `AGENTS.md` once the session touches it), lists the agent's skills,
recalls long-term memories once per run, compacts history past the threshold (emitting `Compacted`), picks
the relevant tools, and builds the messages under the token budget (with the skills the session loaded).
What a request leaves out is written to files under `.shou/outputs/` (readable by this session only,
`tools/spills.py`) and named in the request, so the model can always get it back.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from ..context.builder import ContextBuilder, ContextPolicy, system_text
from ..context.compaction import SUMMARY_MAX_TOKENS, summarize
from ..context.relevance import select_tools
from ..context.tokens import TokenCounter, context_window
from ..errors import ShouError
from ..events import Compacted, Event, Notice
from ..messages import Message
from ..models.base import ModelSettings, model_id
from ..tools import spills
from ..usage import Usage
from ..workspace import save_output

if TYPE_CHECKING:
    from .loop import Run
    from .turn import Turn


class RequestMaker:
    """Makes the requests of one run (the context policy applied to its session). `run_id` is what its
    `Compacted` events carry (default: the run's)."""

    def __init__(self, run: Run, run_id: str | None = None) -> None:
        agent = self.agent = run.agent
        session = self.session = run.session
        self.run = run
        self.run_id = run.run_id if run_id is None else run_id
        self.emit: Callable[[Event], None] = run.emit
        self.policy: ContextPolicy = agent.context
        self.counter: TokenCounter = agent.token_counter
        tools = agent.tools
        self.builder = ContextBuilder(
            self.counter, context_window(agent.model.name, self.policy.window, getattr(agent.settings, "models", None)),
            self.policy, idempotent=tools.idempotent, untrusted=tools.untrusted_output)
        self._spilled: dict[str, str] = {}
        self._instructions(getattr(agent.settings, "env", None))
        self.recalled: list[str] = []
        skills = getattr(agent, "skills", None)
        self.catalog = skills.catalog() if skills is not None else ""
        self.untrusted = may_return_untrusted(agent)
        self.pinned = max(0, len(session.messages) - 1)  # the task, recorded just before the first step
        task = getattr(run, "task", "")
        if run.resume is not None and task:  # a resumed run's task is further back: its newest user message
            self.pinned = next((i for i in range(len(session.messages) - 1, -1, -1)
                                if session.messages[i].role == "user" and session.messages[i].text == task),
                               self.pinned)

    def _instructions(self, env: Any) -> None:
        """The workspace's instruction files a person trusted as they are (shou.instructions): the root
        `AGENTS.md`/`CLAUDE.md`, `.shou/AGENTS.md` and `MEMORY.md` now, the folders' own as the session
        touches them (`nested`); a notice for each left out."""
        from ..instructions import RUN_FILES, trusted_texts
        from ..instructions.nested import NestedInstructions

        texts = []
        for text, warning in trusted_texts(self.agent.workspace, RUN_FILES, env):
            if warning is not None:
                self.emit(Notice(self.run_id, 0, "trust", warning))
            texts.append(text)
        agents_md, claude_md, self.rules, self.memory_md = texts
        # CLAUDE.md is often a copy of AGENTS.md (or says to read it): the same text is sent once
        self.project = {name: text for name, text in (("AGENTS.md", agents_md), ("CLAUDE.md", claude_md))
                        if text and (name == "AGENTS.md" or text != agents_md)}
        self.nested = NestedInstructions(self.agent.workspace, env)

    def recall(self, task: str) -> None:
        """Recall long-term memories relevant to the task (once, at the start of the run)."""
        store = self.agent.memory
        if store is None or self.policy.recall_k <= 0:
            return
        try:
            if not store.count():  # nothing saved yet: do not load an embedding model for nothing
                return
            from ..memory import recall
            from ..tools.untrusted import mark_untrusted

            found = recall(store, task, self.policy.recall_k)
            # What the model saved itself (save_memory) may come from what it read (a web page, a file): recalled
            # as outside content, so an instruction planted in one run is not obeyed as the person's in the next.
            # What the person saved (the CLI, an import) is theirs.
            self.recalled = [mark_untrusted(m.text, "a memory the agent saved") if m.source == "agent" else m.text
                             for m in found]
            if any(m.source == "agent" for m in found):
                self.untrusted = True  # the system text then says what those delimiters mean
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
        # A tool builds its spec once, and the counter knows a set of specs by identity: nothing is kept per run.
        specs = [t.spec() for t in chosen]
        return specs, self.counter.specs(specs)

    async def messages(self, step: int) -> tuple[list[Message], list[dict[str, Any]], int]:
        """The request for `step`: messages, tool specs, and the request's estimated tokens."""
        query = self.query()
        specs, tool_tokens = self.tools(query)
        history = self.session.messages
        session = self.session
        for warning in self.nested.update(history):  # the folders the calls so far touched
            self.emit(Notice(self.run_id, step, "trust", warning))

        rendered: dict[int, str] = {}  # one text per step (and per count left out): it is asked for three times

        def render(omitted: int) -> str:  # workspace files and memories may hold a key: it is never sent
            text = rendered.get(omitted)
            if text is None:
                text = rendered[omitted] = self._render(omitted)
            return text

        # What every request costs besides the history: the trigger counts it, or a big task or system
        # prompt would leave the window full with compaction never starting.
        fixed = self.counter.text(render(0)) + tool_tokens
        if self.pinned < session.summary_upto:
            fixed += self.counter.message(history[self.pinned])
        cut = self.builder.compaction_point(history, session.summary_upto, fixed,
                                            self.pinned if history else None)
        if cut is not None:
            await self.compact(step, cut)
            rendered.clear()  # the summary changed
        upto = session.summary_upto
        live = history[upto:]
        pinned = self.pinned - upto
        earlier = history[self.pinned + 1:upto]  # this run's compacted messages: their calls are listed
        if pinned < 0:  # the task was summarised (by an older shou, or /compact): keep it verbatim anyway
            live = [history[self.pinned], *live]
            pinned = 0
        built = self.builder.build(render, live, pinned=pinned, tool_tokens=tool_tokens, query=query,
                                   spill=self.spill, earlier=earlier)
        return built.messages, specs, built.tokens

    def _render(self, omitted: int) -> str:
        """The system text of a request of this step, redacted."""
        session = self.session
        return self.agent.redactor.text(system_text(
            self.agent.instructions, rules=self.rules, memory_md=self.memory_md,
            working_memory=session.working_memory, summary=session.summary, recalled=self.recalled,
            omitted=omitted, untrusted=self.untrusted, skills=self.catalog,
            loaded_skills=getattr(session, "loaded_skills", None), project=self.project,
            nested=self.nested.texts))

    def spill(self, key: str, label: str, text: str) -> str | None:
        """Write `text` (a result or the task a request cannot hold whole) to a file of this session, once per
        `key`, and return its workspace-relative path; None when it cannot be written."""
        path = self._spilled.get(key)
        if path is None:
            try:
                path = save_output(self.agent.workspace, label, text.encode("utf-8"))
            except (OSError, ShouError):
                return None
            spills.claim(self.session.name, path)
            self._spilled[key] = path
        return path

    async def compact(self, step: int, cut: int) -> Compacted | None:
        """Summarise the session's messages up to `cut` into the running summary. Each summary call is a
        model call like any other (through the run's `Caller`: reserved against the budgets, its request and
        reply logged and traced, as a sub-run of purpose `summary`); one the budgets do not allow is not made."""
        history = self.session.messages
        start = self.session.summary_upto
        before = self.counter.text(self.session.summary) + self.builder.history_tokens(history[start:])
        agent = self.agent
        model = agent.summary_model or agent.model  # cheap work may go to a cheaper model
        run = self.run
        sub_id = run.sub_id()
        limit = agent.model_settings.max_tokens if agent.model_settings is not None else None
        settings = ModelSettings(temperature=0, max_tokens=min(limit or SUMMARY_MAX_TOKENS, SUMMARY_MAX_TOKENS))
        turns: list[Turn] = []

        async def ask(request: list[Message]) -> str:
            turn = await run.caller.call(request, [], step, settings=settings, model=model, run_id=sub_id,
                                         parent=run.run_id, purpose="summary", deltas=False)
            if isinstance(turn, str):
                raise BudgetExceeded(turn)
            turns.append(turn)
            return turn.completion.message.text

        t0 = time.perf_counter()
        try:
            # The task is sent verbatim in every request: summarising it too would only cost a call.
            folded = [m for i, m in enumerate(history[start:cut], start) if i != self.pinned]
            if not folded:
                return None
            summary = await summarize(ask, self.counter, folded, self.session.summary, self.builder.budget // 2)
        except Exception as e:  # the builder still trims by budget; the run goes on
            why = f"not compacted: {e}" if isinstance(e, BudgetExceeded) else \
                f"compaction failed ({type(e).__name__}: {e})"
            self.emit(Notice(self.run_id, step, "compaction", f"{why}; older messages are left out instead"))
            return None
        usage = sum((t.usage for t in turns), Usage())
        after = self.counter.text(summary) + self.builder.history_tokens(history[cut:])
        # The summary calls are logged (and counted) as model calls of their own: `calls` names them, and the
        # usage here is their sum, for people, never counted again.
        event = Compacted(self.run_id, summary, cut, before, after, usage, model_id(model),
                          time.perf_counter() - t0, calls=tuple(t.request_id for t in turns))
        self.emit(event)
        return event


class BudgetExceeded(Exception):
    """A summary call the budgets do not allow (its text says why)."""


def may_return_untrusted(agent: Any) -> bool:
    """Whether the model can get untrusted-content blocks, so the system prompt must say what they are: a
    tool of outside content, offered or called from code mode's `python` (whose output is marked when a
    page entered its interpreter), or code in a sandbox that has the network."""
    tools = [*agent.tools, *(getattr(agent, "code_tools", None) or ())]
    if any(getattr(t, "untrusted_output", False) for t in tools):
        return True
    runs_code = any(getattr(t, "name", "") in ("shell", "run_code", "python") for t in tools)
    return runs_code and bool(getattr(getattr(agent, "settings", None), "sandbox_network", False))
