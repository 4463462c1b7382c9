"""Agent: a model, its tools, instructions and guards. `stream()` is the one way to run; the rest drain it."""

from __future__ import annotations

import asyncio
import math
from collections.abc import AsyncIterator, Callable, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from ..context.builder import ContextPolicy, blocks_of
from ..context.tokens import TokenCounter
from ..errors import UserError
from ..events import Compacted, Event, Notice, RunFinished, RunStatus
from ..models.base import Model, ModelSettings
from ..models.capabilities import supports_vision
from ..pricing import PriceTable
from ..redact import Redactor, secrets_of
from ..session import Session
from ..tools.base import Tool
from ..tools.registry import ToolSet
from ..usage import MOST_TOKENS, Usage
from .loop import Run

if TYPE_CHECKING:
    from ..mcp.servers import ServerSpec
    from ..permissions import Policy
    from ..skills import SkillSet
    from ..store.sqlite import SQLiteStore
    from .approvals import Approver
    from .delegate import AgentSpec
    from .emitter import Emitter

DEFAULT_INSTRUCTIONS = (
    "You are shou, an agent that completes the user's task by calling tools when they help, then "
    "answering. Use the tools' results rather than guessing; when the task is done, reply with the "
    "final answer in plain text."
)


DEFAULT_POLICY = ContextPolicy()
MAX_TASK_CHARS = 400_000
_RESOLVED: dict[str, Path] = {}


def _resolved(workspace: str | Path | None) -> Path:
    """The absolute workspace path; resolving is a system call, so agents built in a loop share it."""
    key = str(workspace) if workspace is not None else str(Path.cwd())
    path = _RESOLVED.get(key)
    if path is None:
        path = _RESOLVED[key] = Path(key).resolve()
        if len(_RESOLVED) > 1024:
            _RESOLVED.clear()
    return path


def model_named(model: Model | str | None, settings: Any) -> Model | None:
    """A model named for cheaper work (summaries, reviews): another model of the same provider, or
    PROVIDER:MODEL."""
    if not isinstance(model, str):
        return model
    from ..models import get_model, other_model

    return get_model(settings=other_model(settings, model)) if settings is not None else get_model(model)


@dataclass(frozen=True, slots=True)
class RunResult:
    """How a run ended: status, the final answer, steps, token usage and wall time (seconds)."""

    status: RunStatus
    answer: str
    steps: int
    usage: Usage
    wall_time: float
    error: str | None
    session: str
    run_id: str

    @property
    def ok(self) -> bool:
        """True when the run completed."""
        return self.status == "completed"


class Agent:
    """A model with tools and guards.

    `model` is a `Model` or a spec such as `"deepseek:deepseek-chat"` (resolved from settings and the
    environment). Guards: `max_steps` model calls, `run_timeout` seconds of wall time, `repeat_limit`
    identical consecutive calls, and optionally budgets: `token_budget` tokens and `max_cost` US dollars per
    run, checked before each model call against its worst case (shou.agent.budget; `prices` is the price
    table, default: the built-in prices with the settings' `[models."NAME"]` over them). `summary_model`
    writes compaction summaries (a cheaper model; default: `model`). `tool_timeout` limits every tool call,
    whatever the tool declares; left None, a tool gets its own `@tool(timeout=...)` or 30 s, and `shell` and
    `run_code` the sandbox's limit (300 s by default). `vision` says whether the model may be
    sent images (default: known vision models only); a text-only model gets a page's text instead.
    `policy` decides which calls run, ask or are refused (default: the settings' `[permissions]`, see
    shou.permissions); `approvals` answers the asks: an `Approver` (a person), "yes", "deny" (the default:
    nobody to ask) or "defer" (the run stops `waiting_approval`; for servers). `observers` are called with
    every event after it is logged (OpenTelemetry export, alerts: shou.observe); an event one returns is
    emitted into the run too.

    Composition: `planning` plans first and runs each step as its own loop (`max_replans`,
    `plan_step_max_steps`, `plan_step_timeout`; shou.agent.plan); `reflect` has a critic (`review_model`)
    check final answers (`max_reviews`; shou.agent.review); `delegation` offers `delegate` to child agents
    (`agents`, name -> AgentSpec; shou.agent.delegate); `skills` offers `use_skill` (shou.skills);
    `mcp_servers` (name -> ServerSpec) adds MCP servers' tools (shou.mcp); `code_mode` offers one `python`
    tool whose code calls the others (shou.agent.code).
    """

    def __init__(
        self, model: Model | str, tools: Iterable[Tool] | ToolSet = (), instructions: str | None = None, *,
        max_steps: int = 20, run_timeout: float = 300.0, tool_timeout: float | None = None, max_parallel_tools: int = 4,
        repeat_limit: int = 3, token_budget: int | None = None, max_cost: float | None = None,
        workspace: str | Path | None = None,
        model_settings: ModelSettings | None = None, store: SQLiteStore | None = None, settings: Any = None,
        context: ContextPolicy | None = None, memory: Any = None, vision: bool | None = None,
        policy: Policy | None = None, approvals: Approver | Literal["yes", "deny", "defer"] = "deny",
        observers: Iterable[Callable[[Event], Any]] = (), prices: PriceTable | None = None,
        summary_model: Model | str | None = None, planning: bool = False, max_replans: int = 2,
        plan_step_max_steps: int = 8, plan_step_timeout: float = 120.0, reflect: bool = False, max_reviews: int = 1,
        review_model: Model | str | None = None, agents: Mapping[str, AgentSpec] | None = None,
        delegation: bool = False, skills: SkillSet | None = None, mcp_servers: Mapping[str, ServerSpec] | None = None,
        code_mode: bool = False,
    ) -> None:
        if isinstance(model, str):
            from ..models import get_model

            model = get_model(model)
        if not hasattr(model, "stream"):
            raise UserError(f"model must be a Model (with a stream() method) or a model spec string, not {model!r}")
        self.model: Model = model
        self.tools = tools if isinstance(tools, ToolSet) else ToolSet(tools)
        self.instructions = DEFAULT_INSTRUCTIONS if instructions is None else instructions
        if max_steps < 1 or run_timeout <= 0 or (tool_timeout is not None and tool_timeout <= 0) \
                or max_parallel_tools < 1 or repeat_limit < 1:
            raise UserError(
                "max_steps, run_timeout, tool_timeout, max_parallel_tools and repeat_limit must be positive"
            )
        self.max_steps = max_steps
        self.run_timeout = run_timeout
        self.tool_timeout = tool_timeout
        self.policy = policy
        self.approvals = approvals
        # The MCP servers' tables are secret sources too (their keys, logins, tokens), given here or in settings.
        self.redactor = Redactor([*secrets_of(settings),
                                  *(v for spec in (mcp_servers or {}).values() for v in spec.secrets())])
        self.max_parallel_tools = max_parallel_tools
        self.repeat_limit = repeat_limit
        if (token_budget is not None and not 1 <= token_budget < math.inf) or \
                (max_cost is not None and not 0 <= max_cost < math.inf):  # NaN fails both: it is no limit
            raise UserError("token_budget must be positive and max_cost a number of US dollars, not negative")
        self.token_budget = token_budget
        self.max_cost = max_cost
        self.prices = prices if prices is not None else PriceTable(getattr(settings, "models", None))
        self.summary_model: Model | None = model_named(summary_model, settings)
        if max_replans < 0 or plan_step_max_steps < 1 or plan_step_timeout <= 0 or max_reviews < 0:
            raise UserError("max_replans and max_reviews must not be negative; plan_step_max_steps and "
                            "plan_step_timeout must be positive")
        self.planning = planning
        self.max_replans = max_replans
        self.plan_step_max_steps = plan_step_max_steps
        self.plan_step_timeout = plan_step_timeout
        self.reflect = reflect
        self.max_reviews = max_reviews
        self.review_model: Model | None = model_named(review_model, settings)
        self.agents: dict[str, AgentSpec] = dict(agents or {})
        self.mcp_servers: dict[str, ServerSpec] = dict(mcp_servers or {})
        self.mcp_offered: dict[str, list[str]] = {}  # server -> the tool names it added (shou.mcp.connect)
        self.skills = skills
        if skills is not None and skills.skills and "use_skill" not in self.tools.names:
            self.tools = ToolSet([*self.tools, skills.tool()])
        if delegation and "delegate" not in self.tools.names:
            from .delegate import delegate_tool

            self.tools = ToolSet([*self.tools, delegate_tool(self.agents)])
        self.code_mode = code_mode
        self.code_tools = self.tools  # what code calls in code mode; the model is offered `python` alone
        if code_mode:
            from .code import python_tool

            self.tools = ToolSet([python_tool(self.code_tools)])
        self.workspace = _resolved(workspace)
        self.model_settings = model_settings
        self.store = store
        self.settings = settings
        self.context = context or DEFAULT_POLICY
        self.memory = memory
        self.vision = supports_vision(self.model.name) if vision is None else vision
        self.observers: list[Callable[[Event], Any]] = list(observers)
        self._counter: TokenCounter | None = None
        self._runner: asyncio.Runner | None = None

    @property
    def token_counter(self) -> TokenCounter:
        """Counts tokens for this agent's model (made on first use; the encoding loads lazily)."""
        if self._counter is None:
            self._counter = TokenCounter(self.model.name)
        return self._counter

    async def compact(self, session: Session) -> Compacted | None:
        """Summarise all of `session` but its newest block now (what `/compact` does in chat)."""
        from .context import RunContext

        # Not a run of the session (no run events): a holder of the budgets and the caller the summary's calls
        # go through, as in a run; the Compacted event itself belongs to no run.
        run = RunContext(Run(self, "", session, lambda e: None), run_id="")
        upto = session.summary_upto
        history = session.messages
        blocks = blocks_of(history[upto:])
        if len(blocks) < 2:
            return None
        cut = upto + blocks[-1][0]  # asked for by a person: fold everything but the newest exchange
        event = await run.compact(0, cut)
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

    def _new_run(self, task: str, session: Session, resume: bool, emit: Callable[[Event], None],
                 run_id: str | None = None) -> Run:
        """The run to execute on `session` (which this process holds): `task`, or the one a killed process
        left unfinished."""
        self._count_unanswered(session)  # through a one-off emitter: these belong to no run of this process
        if resume:
            open_run = session.open_run
            if open_run is None:
                raise UserError(f"session {session.name!r} has no unfinished run to resume")
            return Run(self, open_run.task, session, emit, resume=open_run)
        self.emitter(session).close_interrupted()
        return Run(self, task, session, emit, run_id=run_id)

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
        if not isinstance(session, Session):
            session = self.session(session)
        owned = not session.locked
        if owned:
            session.acquire()  # one process at a time: SessionBusy if another has it
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
        """`_stream()` drained: the run every consumer sees, to its end. Its own `RunFinished` (the last event
        that is not a sub-run's) says how it went."""
        if not isinstance(session, Session):
            session = self.session(session)
        done: RunFinished | None = None
        async for event in self._stream(task, session, resume=resume, run_id=run_id):
            if type(event) is RunFinished and not event.parent:
                done = event
        if done is None:  # pragma: no cover - execute() always ends with one
            raise RuntimeError("the run ended without a RunFinished event")
        return RunResult(done.status, done.answer, done.steps, done.usage, done.wall_time, done.error,
                         session.name, done.run_id)

    async def arun(self, task: str, session: Session | str | None = None) -> RunResult:
        """Run `task` to the end and return how it went."""
        _check_task(task)
        return await self._run_to_end(task, session, resume=False)

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
