"""Agent: a model, its tools, instructions and guards. `stream()` is the one way to run; the rest drain it."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable, Iterable, Mapping
from dataclasses import dataclass, replace
from operator import attrgetter
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..context.builder import ContextPolicy, blocks_of
from ..context.tokens import TokenCounter
from ..errors import UserError
from ..events import Compacted, Event, Notice, RunFinished, RunStatus
from ..frozen import fast_init
from ..models.base import Model, ModelSettings
from ..pricing import PriceTable
from ..redact import Redactor
from ..session import Session
from ..tools.base import Tool
from ..tools.registry import ToolSet
from ..usage import MOST_TOKENS, Usage
from .config import (
    DEFAULT_INSTRUCTIONS,
    DEFAULT_POLICY,
    MAX_TASK_CHARS,
    AgentConfig,
    check_fields,
    made_config,
    model_named,
)
from .loop import Run
from .runs import build_run

__all__ = ["DEFAULT_INSTRUCTIONS", "DEFAULT_POLICY", "MAX_TASK_CHARS", "Agent", "RunResult", "model_named"]

if TYPE_CHECKING:
    from ..a2a.spec import RemoteAgentSpec
    from ..mcp.servers import ServerSpec
    from ..permissions import Policy
    from ..skills import SkillSet
    from ..store.sqlite import SQLiteStore
    from .delegate import AgentSpec
    from .emitter import Emitter


def _field(name: str, source: str | None = None) -> Any:
    """An attribute of Agent read from its config (a C-level getter: runs read these on every event); set,
    it makes a new config, checked like the first."""

    def set_(agent: Agent, value: Any) -> None:
        agent.config = replace(agent.config, **{name: value})

    return property(attrgetter(f"config.{source or name}"), set_, doc=f"The config's `{source or name}`.")


@fast_init
@dataclass(frozen=True, slots=True)
class RunResult:
    """How a run ended: status, the final answer, steps, token usage and wall time (seconds); with an
    `output_type`, `output` is the answer as a value of that type (None unless completed)."""

    status: RunStatus
    answer: str
    steps: int
    usage: Usage
    wall_time: float
    error: str | None
    session: str
    run_id: str
    output: Any = None  # a typed answer (`output_type`): the answer as a value of that type

    @property
    def ok(self) -> bool:
        """True when the run completed."""
        return self.status == "completed"


class Agent:
    """A model with tools and guards, configured by one `AgentConfig` (shou.agent.config, where every field
    is described).

    `Agent(model, tools, instructions, max_steps=3, ...)`: the keywords are AgentConfig fields; or
    `Agent(config=config)`, with keywords changing that config. `model` is a `Model` or a spec such as
    `"deepseek:deepseek-chat"` (resolved from settings and the environment). The attributes (`max_steps`,
    `tools`, ...) read the config; setting one replaces the config with a checked copy.
    """

    def __init__(self, model: Model | str | None = None, tools: Iterable[Tool | Callable[..., Any]] | ToolSet = (),
                 instructions: str | None = None, *, config: AgentConfig | None = None, **fields: Any) -> None:
        check_fields(fields)
        if config is None:
            if model is None:
                raise UserError("an Agent needs a model (or a config)")
            config = made_config(model, tools, instructions, fields)
        else:
            if model is not None:
                fields["model"] = model
            if tools != ():
                fields["tools"] = tools
            if instructions is not None:
                fields["instructions"] = instructions
            if fields:
                config = replace(config, **fields)
        self.config: AgentConfig = config
        self._counter: TokenCounter | None = None
        self._runner: asyncio.Runner | None = None

    def variant(self, config: AgentConfig) -> Agent:
        """An agent for `config` (a variant of this one's) that counts tokens with this one's counter when
        the model is the same (its cache of counted messages carries over)."""
        child = Agent(config=config)
        if config.model is self.config.model:
            child._counter = self._counter
        return child

    model: Model = _field("model")
    tools: ToolSet = _field("tools", "offered")  # what the model is offered; set: the tools given
    code_tools: ToolSet = property(attrgetter("config.code_tools"), doc="What code calls in code mode.")
    redactor: Redactor = _field("redactor")  # set: these secrets replace the ones found in settings
    instructions: str = _field("instructions")
    max_steps: int = _field("max_steps")
    run_timeout: float = _field("run_timeout")
    tool_timeout: float | None = _field("tool_timeout")
    max_parallel_tools: int = _field("max_parallel_tools")
    repeat_limit: int = _field("repeat_limit")
    token_budget: int | None = _field("token_budget")
    max_cost: float | None = _field("max_cost")
    workspace: Path = _field("workspace")
    model_settings: ModelSettings | None = _field("model_settings")
    store: SQLiteStore | None = _field("store")
    settings: Any = _field("settings")
    context: ContextPolicy = _field("context")
    memory: Any = _field("memory")
    vision: bool = _field("vision")
    policy: Policy | None = _field("policy")
    approvals: Any = _field("approvals")
    ask_user: Any = _field("ask_user")
    observers: tuple[Callable[[Event], Any], ...] = _field("observers")
    prices: PriceTable = _field("prices")
    summary_model: Model | None = _field("summary_model")
    planning: bool = _field("planning")
    max_replans: int = _field("max_replans")
    plan_step_max_steps: int = _field("plan_step_max_steps")
    plan_step_timeout: float = _field("plan_step_timeout")
    reflect: bool = _field("reflect")
    max_reviews: int = _field("max_reviews")
    review_model: Model | None = _field("review_model")
    agents: Mapping[str, AgentSpec] = _field("agents")
    delegation: bool = _field("delegation")
    skills: SkillSet | None = _field("skills")
    mcp_servers: Mapping[str, ServerSpec] = _field("mcp_servers")
    a2a_agents: Mapping[str, RemoteAgentSpec] = _field("a2a_agents")
    code_mode: bool = _field("code_mode")
    output_type: Any = _field("output_type")
    output_retries: int = _field("output_retries")

    @property
    def token_counter(self) -> TokenCounter:
        """Counts tokens for this agent's model (made on first use; the encoding loads lazily)."""
        if self._counter is None:
            self._counter = TokenCounter(self.model.name)
        return self._counter

    async def compact(self, session: Session) -> Compacted | None:
        """Summarise all of `session` but its newest block now (what `/compact` does in chat)."""
        from .request import RequestMaker

        # Not a run of the session (no run events): a holder of the budgets and the caller the summary's calls
        # go through, as in a run; the Compacted event itself belongs to no run.
        run = RequestMaker(Run(self, "", session, lambda e: None), run_id="")
        upto = session.summary_upto
        history = session.messages
        blocks = blocks_of(history[upto:])
        if len(blocks) < 2:
            return None
        cut = upto + blocks[-1][0]  # asked for by a person: fold everything but the newest exchange
        try:
            event = await run.compact(0, cut)
        finally:
            run.run.close()
        session.flush()
        return event

    def session(self, name: str | None = None) -> Session:
        """A session on this agent's store (continued when `name` already exists there)."""
        return Session(name, self.store)

    def emitter(self, session: Session, consumer: Callable[[Event], Any] | None = None) -> Emitter:
        """The way events of `session` go outside a run (`/clear`, closing a killed run): this agent's
        redaction and observers, then `consumer`."""
        from .emitter import Emitter

        return Emitter(session, self.redactor, self.observers, consumer)

    def stream(self, task: str, session: Session | str | None = None, *, run_id: str | None = None
               ) -> AsyncIterator[Event]:
        """Run `task`, yielding every event as it happens; the last one is `RunFinished`. `run_id` names the
        run (default: a new id), for callers that announced it before it started (`shou serve`).

        Every event but streaming fragments is in the session log before it is yielded. Stopping the
        iteration early (or cancelling it) cancels the run, which is then recorded as `cancelled` with its
        conversation left valid. A run of the session that a killed process left unfinished is closed
        first (its unanswered calls reported as interrupted); `resume()` continues it instead.
        """
        _check_task(task)
        # Returned, not iterated here: one generator, so breaking out of the loop closes the run at once.
        return self._stream(task, session, resume=False, run_id=run_id)

    def stream_resume(self, session: Session | str) -> AsyncIterator[Event]:
        """Continue the run a killed process left unfinished in `session`, from its first unfinished step.

        Finished tool calls are never run again. A call that started and never finished is reported to the
        model as interrupted with its outcome unknown, unless its tool is idempotent, which is run again.
        `UserError` when the session has no unfinished run.
        """
        return self._stream("", session, resume=True)

    def _new_run(self, task: str, session: Session, resume: bool, emit: Callable[[Event], None] | None,
                 run_id: str | None = None) -> Run:
        """The run to execute on `session` (which this process holds): `task`, or the one a killed process
        left unfinished."""
        self._count_unanswered(session)  # through a one-off emitter: these belong to no run of this process
        if resume:
            open_run = session.open_run
            if open_run is None:
                raise UserError(f"session {session.name!r} has no unfinished run to resume")
            return build_run(self, open_run.task, session, emit, resume=open_run)
        self.emitter(session).close_interrupted()
        return build_run(self, task, session, emit, run_id=run_id)

    def _count_unanswered(self, session: Session) -> None:
        """Log what the model calls a killed process left under way may have cost, at their worst case (the
        prompt and the reply limit, estimated): the provider may have billed them, so the resumed run's
        budget, the session's and the trace count them."""
        emitter = None
        for request in session.unanswered_requests():
            # what the log says is checked (events.py), but it may still be any whole number: kept in range
            limit = (request.params or {}).get("max_tokens")
            reply = min(limit, MOST_TOKENS) if isinstance(limit, int) and not isinstance(limit, bool) and limit > 0 \
                else 0
            usage = Usage(min(max(0, request.tokens), MOST_TOKENS), reply, 0, True)
            cost = self.prices.cost(request.model, usage) if request.model else None
            emitter = emitter or self.emitter(session)
            emitter.emit(Notice(
                request.run_id, request.step, "unanswered",
                f"{request.model or 'the model'}: the process stopped while this call was under way; it counts at "
                f"its worst case, estimated (the prompt{' and the reply limit' if reply else ''}): the provider "
                "may have billed it", Usage(usage.input_tokens, reply, 0, True, 0, cost), request.model,
                parent=request.parent))

    async def _stream(self, task: str, session: Session | str | None, *, resume: bool,
                      run_id: str | None = None) -> AsyncIterator[Event]:
        """The run's events as they happen (`_run_to_end()` is the same run with no consumer)."""
        session, owned = self._hold(session)
        try:
            queue: asyncio.Queue[Event | None] = asyncio.Queue()
            run = self._new_run(task, session, resume, queue.put_nowait, run_id)
            task_ = asyncio.ensure_future(_execute(run, queue))
            store = session.store
            try:
                while True:
                    event = await queue.get()
                    if event is None:
                        break
                    if store is not None and store.pending:
                        store.commit()  # what the consumer shows is already in the log
                    yield event
                await task_  # surfaces a bug in the loop as an exception instead of hiding it
            finally:
                if not task_.done():
                    task_.cancel()
                # collected either way: when this side failed first (the log could not be written), the run's
                # own failure is the same one, not a second error to report
                await asyncio.gather(task_, return_exceptions=True)
                session.commit()
        finally:
            if owned:
                session.release()

    async def _run_to_end(self, task: str, session: Session | str | None, *, resume: bool,
                          run_id: str | None = None) -> RunResult:
        """`_stream()` drained: the same run (the same emitter, log and observers), to its end. Only its end is
        wanted, so no consumer is handed the events, and the run needs no task of its own, no queue and no
        generator between it and the caller (a run waiting for the model holds none: issue 35). Its own
        `RunFinished` says how it went. `arun()` is this with `resume` false, written out: one frame less."""
        session, owned = self._hold(session)
        try:
            run = self._new_run(task, session, resume, None, run_id)
            try:
                done = await run.execute()
            finally:
                session.commit()
        finally:
            if owned:
                session.release()
        return self._result(done, session)

    def _hold(self, session: Session | str | None) -> tuple[Session, bool]:
        """The session to run on, held by this process, and whether it was taken here (to give back after)."""
        if not isinstance(session, Session):
            session = self.session(session)
        owned = not session.locked
        if owned:
            session.acquire()  # one process at a time: SessionBusy if another has it
        return session, owned

    def _result(self, done: RunFinished, session: Session) -> RunResult:
        spec = self.config.output
        output = spec.output(done.status, done.answer) if spec is not None else None
        return RunResult(done.status, done.answer, done.steps, done.usage, done.wall_time, done.error,
                         session.name, done.run_id, output)

    async def arun(self, task: str, session: Session | str | None = None) -> RunResult:
        """Run `task` to the end and return how it went."""
        _check_task(task)
        # `_run_to_end(task, session, resume=False)` written out: a run waiting for the model holds one frame less
        session, owned = self._hold(session)
        try:
            run = self._new_run(task, session, False, None)
            try:
                done = await run.execute()
            finally:
                session.commit()
        finally:
            if owned:
                session.release()
        return self._result(done, session)

    async def aresume(self, session: Session | str) -> RunResult:
        """`stream_resume()` to the end: continue a killed run and return how it went."""
        return await self._run_to_end("", session, resume=True)

    def run(self, task: str, session: Session | str | None = None) -> RunResult:
        """`arun()` for code that has no event loop running.

        The agent keeps one private event loop for its sync runs, so connections are reused from one
        call to the next; `close()` ends it.
        """
        return self._sync(self.arun(task, session))

    def resume(self, session: Session | str) -> RunResult:
        """`aresume()` for code that has no event loop running."""
        return self._sync(self.aresume(session))

    def _sync(self, coro: Any) -> RunResult:
        try:
            asyncio.get_running_loop()
        except RuntimeError:
            if self._runner is None:
                self._runner = asyncio.Runner()
            return self._runner.run(coro)
        coro.close()
        raise UserError("a sync Agent method was called inside a running event loop; await its async form "
                        "(arun, aresume) instead")

    def close(self) -> None:
        """Release what sync runs kept open: the model's connections and the private event loop."""
        if self._runner is not None:
            runner, self._runner = self._runner, None
            try:
                runner.run(self._aclose())
            finally:
                runner.close()

    async def _aclose(self) -> None:
        await self.model.aclose()
        if self.mcp_servers:
            from ..mcp import close_all

            await close_all()


def _check_task(task: str) -> None:
    if len(task) > MAX_TASK_CHARS:
        raise UserError(f"the task is {len(task)} characters; the limit is {MAX_TASK_CHARS} (about 100k tokens). "
                        "Put the material in a file in the workspace and ask shou to read it")


async def _execute(run: Run, queue: asyncio.Queue[Event | None]) -> None:
    try:
        await run.execute()
    finally:
        queue.put_nowait(None)
