"""One run of the ReAct loop: ask the model, run its tool calls, observe, repeat; emit events throughout.

The run executes in its own task and hands events to a queue, so its deadline applies to its own
awaits only, and a consumer that stops listening cancels it cleanly.

Write-ahead: what the run decides is durable before it acts. The task is committed before the first
request, the model's message and its calls before any tool runs, and each tool's result as soon as it
has one. A run killed at any moment can therefore be resumed (`resume=`): calls that finished are never
run again, a call that started and never finished is reported to the model as interrupted (or run again
if its tool is idempotent), and a model turn that never arrived is simply asked for again.

A reply is acted on only when the model finished it: calls from a turn cut at the output limit
(`finish_reason: length`) never run; the model is told and asked to do less per step, and a run whose
replies keep being cut ends `truncated`.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import secrets
import time
from collections.abc import Awaitable, Callable
from collections.abc import Set as AbstractSet
from functools import partial
from typing import TYPE_CHECKING, Any

from ..errors import ModelError, UserError
from ..events import (
    Event,
    Feedback,
    Notice,
    RunFinished,
    RunResumed,
    RunStarted,
    RunStatus,
    StepFinished,
    ToolCallFinished,
)
from ..messages import Message, ToolCall
from ..models.base import ModelSettings, model_id
from ..session import INTERRUPTED
from ..setting_tables import MAIN_AGENT
from ..skills import open_user_skill_file
from ..store.pg_link import is_connection_error
from ..store.sqlite_errors import StoreError
from ..tools.base import ToolContext
from ..tools.executor import DEFAULT_TIMEOUT, ToolExecutor
from ..usage import NO_USAGE
from ..wellformed import well_formed_text
from .budget import Accounts, Budget
from .emitter import Emitter
from .request import RequestMaker
from .servers import with_servers
from .toolpipe import ToolPipeline
from .turn import Caller

if TYPE_CHECKING:
    from ..session import OpenRun, Session
    from .agent import Agent

_log = logging.getLogger("shou")
TRUNCATION_LIMIT = 3  # consecutive replies cut at the output limit before the run ends `truncated`
CUT_CALL = ("Error: not run: your reply was cut off at the output limit before this call was complete "
            "(finish_reason: length). Do less per step: fewer or smaller calls, and write long content in parts.")
CUT_TEXT = ("[shou] Your last reply was cut off at the output limit (finish_reason: length) and is incomplete. "
            "Continue with less per step: a shorter answer, or the next part only.")
Ending = tuple[RunStatus, str, str | None]  # how a run ended: its status, answer and error
_NO_CALLS: frozenset[str] = frozenset()


def new_run_id() -> str:
    """A short random run id."""
    return "run_" + secrets.token_hex(6)


class Run:
    """The state of one run; `execute()` drives it to a `RunFinished` event.

    `resume` is a run of the session that was killed before it finished: the run continues it (same
    run id, steps and usage) instead of starting a new one. A sub-run (a plan step, a sub-agent) is given
    its `run_id` and the `budgets` of the run it works for, which its calls are held against too.
    """

    def __init__(self, agent: Agent, task: str, session: Session, emit: Callable[[Event], None] | None, *,
                 resume: OpenRun | None = None, run_id: str | None = None,
                 budgets: list[Budget] | None = None, ratios: dict[str, float] | None = None) -> None:
        self.agent = agent
        self.task = task
        self.session = session
        self.resume = resume
        self.run_id = resume.run_id if resume is not None else run_id or new_run_id()
        self.emitter = Emitter(session, agent.redactor, agent.observers, emit)
        self.step = resume.step if resume is not None else 0
        self.usage = resume.usage if resume is not None else NO_USAGE
        self.unfinished: dict[str, ToolCall] = {}
        # ids of the calls whose tool began to run (the executor adds them): a set of its own from the first tool
        # call's pipeline (`tools_and_context`), the shared empty one while the run waits for the model
        self.entered: AbstractSet[str] = _NO_CALLS
        self.truncated = 0
        self._tools: ToolPipeline | None = None  # composed at the run's first tool call
        self.accounts = Accounts(agent.prices, self._budgets() if budgets is None else budgets,
                                 model_id(agent.model), ratios)
        self.caller = Caller(self)
        # Handoffs (agent/handoff.py): the run's own agent, the name of the one answering now, and the one the
        # current turn handed over to (it answers from the next step).
        self.main: Agent = agent
        self.agent_name = MAIN_AGENT
        self.handed_to: str | None = None
        # Sub-run ids go on from the ones the killed process used: a resumed run's are new ones.
        self._subs = itertools.count((resume.subs if resume is not None else 0) + 1)
        # What the run is made of, set where it is built (agent/runs.py), never chosen inside the loop: what
        # carries it from its start to its ending (None: the plain loop), and what makes the check an answer of
        # the loop must pass before it stands (given the run and where its own messages start; None: every
        # answer stands). Both are given the run, not bound to it: what a run is made of is a value of its
        # config, and the run's state stays in the run.
        self.drive: Callable[[Run], Awaitable[Ending]] | None = None
        self.answer_checker: Callable[[Run, int], Callable[[int, str], Awaitable[bool | Ending]]] | None = None
        # A typed answer (agent/output.py): what every step's request carries besides the agent's tools and
        # settings, and what takes a turn whose calls may be the answer (None: they are only calls; False:
        # an answer turned down; else how the run ends). A check may end the run too, with its own ending.
        self.step_tools: tuple[dict[str, Any], ...] = ()
        self.step_settings: ModelSettings | None = None
        self.step_tokens = 0  # what those add to each request's prompt, in tokens (an estimate)
        self.answer_call: Callable[[int, Message], Awaitable[bool | Ending | None]] | None = None

    def sub_id(self) -> str:
        """A new run id for a sub-run of this run (a plan step, a sub-agent, a review)."""
        return f"{self.run_id}.{next(self._subs)}"

    def _budgets(self) -> list[Budget]:
        """The run's budget (counting what a resumed run spent already) and the session's."""
        agent = self.agent
        budgets = [Budget(agent.max_cost, agent.token_budget, self.usage), *agent.config.shared_budgets]
        settings = agent.settings
        session_cost = getattr(settings, "session_max_cost", None)
        session_tokens = getattr(settings, "session_token_budget", None)
        if session_cost is not None or session_tokens is not None:
            budgets.append(Budget(session_cost, session_tokens, self.session.spent, "session_max_cost",
                                  "session_token_budget"))
        return budgets

    def emit(self, event: Event) -> None:
        """Hand `event` to the run's emitter: redacted, logged, folded, observed, then given to the consumer."""
        self.emitter.emit(event)

    def commit(self) -> None:
        """Make everything emitted so far durable: called before every side effect."""
        self.session.commit()

    async def commit_ahead(self) -> None:
        """`commit()` before a side effect (a model request, tools, the run's end); with other runs in flight on
        the store, in the transaction that ends the event loop's current turn (store/together.py)."""
        await self.session.commit_together()

    async def execute(self) -> RunFinished:
        """Run to the end; always emits and returns exactly one `RunFinished`, then lets go of the run (`close()`).
        One coroutine, not one around another: a run waiting for the model holds every frame of its stack."""
        together = getattr(self.session.store, "together", None)  # counted in flight: its commits may be grouped
        if together is not None:
            together.enter()
        try:
            started = time.perf_counter()
            # the servers' tools join the run's agent before the run announces its tools
            self.agent, problems = await with_servers(self.agent)
            self.main = self.agent
            if self.resume is not None and self.resume.agent != MAIN_AGENT:
                problems = [*problems, *self._handed_back(self.resume.agent)]
            agent = self.agent
            if self.resume is None:
                self.emit(RunStarted(self.run_id, self.session.name, self.task, agent.model.name,
                                     tuple(agent.tools.names), time.time()))
            else:
                self.emit(RunResumed(self.run_id, self.session.name, self.step, time.time()))
            for kind, problem in problems:
                self.emit(Notice(self.run_id, self.step, kind, problem))
            # No commit here: the first model request commits the task with itself, and the consumer commits
            # anything it is shown before that.
            status: RunStatus = "error"
            answer = ""
            error: str | None = None
            try:
                async with asyncio.timeout(agent.run_timeout):
                    status, answer, error = await (self._steps() if self.drive is None else self.drive(self))
            except TimeoutError:
                status, error = "timeout", f"the run passed its deadline of {agent.run_timeout:g} s"
            except ModelError as e:
                status, error = "error", str(e)
            except Exception as e:  # a bug in a model backend or in shou: end the run cleanly, state saved
                if _store_failed(e):  # the log cannot be written (a full disk, the database away): stop as a kill
                    raise  # would, so the run is resumed from its log once that is fixed, not recorded as failed
                status, error = "error", f"internal error: {type(e).__name__}: {e}"
            except asyncio.CancelledError:
                self.finish_unfinished("the run was cancelled")
                done = self._finished("cancelled", "", "the run was cancelled", started)
                self.emit(done)
                self.commit()
                raise
            self.finish_unfinished(f"the run ended ({status})")
            done = self._finished(status, answer, error, started)
            self.emit(done)
            await self._commit_end()
            return done
        finally:
            if together is not None:
                together.leave()
            self.close()

    async def _commit_end(self) -> None:
        """Commit the run's end (grouped). A cancel that lands while it waits for its group is too late: the run
        ended as its logged `RunFinished` says, so that end is committed now and reported, not `cancelled`."""
        try:
            await self.commit_ahead()
        except asyncio.CancelledError:
            self.commit()
            task = asyncio.current_task()
            if task is None or task.cancelling() > 1:  # asked twice (a shutdown insisting): stop here after all
                raise
            task.uncancel()

    def close(self) -> None:
        """Let go of what points back at the run once it has ended (`execute()` does; code that uses a run
        without it, as `shou mcp serve` does for one call, calls this): its tool pipeline (whose controls and
        context hold the run) and its caller's controls. Otherwise the run, its session and everything they
        hold form a cycle that only the garbage collector frees: at hundreds of runs a second that was a
        third of the difference to 50e96f5 in the peers' benchmark (bench/README); freed by reference
        counting, a run's objects go the moment its last user lets go."""
        tools, self._tools = self._tools, None
        self.answer_call = None  # a typed answer's check, which holds the run
        if tools is not None:
            tools.ctx.state.pop("shou.run", None)
            tools.ctx.events = None
        self.caller.close()

    def _finished(self, status: RunStatus, answer: str, error: str | None, started: float) -> RunFinished:
        # the one event whose text reaches the caller as made, not as logged: repaired as the log's is (emitter)
        return RunFinished(self.run_id, status, well_formed_text(answer), self.step, self.usage,
                           time.perf_counter() - started, None if error is None else well_formed_text(error))

    def finish_unfinished(self, why: str) -> None:
        """Give every call that never finished an error result, so the conversation stays valid. A call whose
        tool had begun may have had its effect, as after `kill -9`: its outcome is unknown, not "not run"."""
        for call in list(self.unfinished.values()):
            if call.id in self.entered:
                text = (f"Error: interrupted: {why} while this call ran, so its outcome is unknown (it may or may "
                        "not have had its effect). Check before repeating it.")
            else:
                text = f"Error: not run: {why} before this call started."
            self.emit(ToolCallFinished(self.run_id, self.step, call.id, call.name, text, is_error=True))
        self.unfinished.clear()

    def tools_and_context(self) -> tuple[ToolExecutor, ToolContext]:
        """The executor and the context the run's tool calls get."""
        agent = self.agent
        entered = self.entered if isinstance(self.entered, set) else set(self.entered)  # one set for every pipeline
        self.entered = entered
        executor = ToolExecutor(agent.tools, timeout=agent.tool_timeout or DEFAULT_TIMEOUT, cap=agent.tool_timeout,
                                concurrency=agent.max_parallel_tools, spill_chars=agent.context.spill_chars,
                                started=entered)
        ctx = ToolContext(agent.workspace, self.session.name, self.run_id, agent.settings,
                          session_key=self.session.key, read_outside=partial(open_user_skill_file, agent.settings),
                          events=self)  # what a tool reports while it works (a remote agent's progress)
        ctx.state["shou.run"] = self  # what `delegate` needs to start a sub-agent under this run
        return executor, ctx

    def tool_pipeline(self) -> ToolPipeline:
        """The pipeline every tool call of this run goes through (agent/toolpipe.py), composed once."""
        if self._tools is None:  # the policy, limits and tools are read once per run, not once per step
            executor, ctx = self.tools_and_context()
            self._tools = ToolPipeline(self, executor, ctx)
        return self._tools

    async def call_tools(self, calls: list[ToolCall]) -> str | None:
        """Screen and run `calls` outside a model turn (an MCP client's calls, code calling tools), exactly as
        the loop would: permissions, approvals, timeouts, events. Returns why some wait, if they do."""
        ended = await self.tool_pipeline()(calls)
        return ended[2] if ended is not None else None

    async def steps(self) -> Ending:
        """The plain loop to the run's ending: what a `drive` that wraps the loop (agent/guarded.py) runs."""
        return await self._steps()

    async def _steps(self) -> tuple[RunStatus, str, str | None]:
        agent = self.agent
        context = RequestMaker(self)
        check = self.answer_checker(self, context.pinned) if self.answer_checker is not None else None
        if self.resume is None:
            context.recall(self.task)
        else:
            ended = await self._pick_up(self.tool_pipeline(), check)
            if ended is not None:
                return ended
        run_id = self.run_id
        while True:
            if self.handed_to is not None:  # the last turn handed over: another agent answers from here
                self.take_over(self.handed_to)
                context, agent = self._request_maker(context), self.agent
            if self.step >= agent.max_steps:
                # self.step, not the limit: an agent handed the run may have a lower one than the steps already done
                return "max_steps", "", f"stopped after {self.step} steps without a final answer"
            self.step += 1
            step = self.step
            messages, specs, tokens = await context.messages(step)
            if self.step_tools:
                specs = [*specs, *self.step_tools]
            tokens += self.step_tokens
            turn = await self.caller.call(messages, specs, step, tokens, settings=self.step_settings)
            if isinstance(turn, str):
                self.step -= 1
                return "budget", "", turn
            completion, message = turn.completion, turn.message
            if completion.finish_reason == "length":
                ended = self._cut(message)
                if ended is not None:
                    return ended
                continue
            self.truncated = 0
            if not message.tool_calls:
                verdict = True if check is None else await check(step, message.text)
                self.emit(StepFinished(run_id, step, self.usage))
                if verdict is False:
                    continue  # turned down: why is in the conversation now, and the loop goes on
                return ("completed", message.text, None) if verdict is True else verdict
            if self.answer_call is not None and (verdict := await self.answer_call(step, message)) is not None:
                self.emit(StepFinished(run_id, step, self.usage))
                if not isinstance(verdict, tuple):
                    continue  # turned down: the errors are the call's result, and the loop goes on
                return verdict
            # Composed at the run's first tool call, not before its first request: a run waiting for the model holds
            # no pipeline, and a run that only answers never makes one (issue 35: ~5 KiB of a parked session).
            tools = self.tool_pipeline()
            tools.ctx.state["working_memory"] = self.session.working_memory
            ended = await tools(message.tool_calls, turn=True, oversized=turn.oversized)
            self.emit(StepFinished(run_id, step, self.usage))
            if ended is not None:
                return ended

    def take_over(self, name: str) -> None:
        """Let agent `name` answer the run's next steps (a handoff, agent/handoff.py): built from the run's own
        agent, with its tools' pipeline made anew at its first call."""
        from .handoff import handed_agent

        self.agent = handed_agent(self.main, name)
        self.agent_name, self.handed_to = name, None
        tools, self._tools = self._tools, None
        if tools is not None:  # the old pipeline's context points back at the run (see close())
            tools.ctx.state.pop("shou.run", None)
            tools.ctx.events = None

    def _request_maker(self, old: RequestMaker) -> RequestMaker:
        """The requests of the agent that took over: its instructions and tools, the same task and memories."""
        fresh = RequestMaker(self)
        fresh.pinned, fresh.recalled = old.pinned, old.recalled
        return fresh

    def _handed_back(self, name: str) -> list[tuple[str, str]]:
        """A resumed run goes on with the agent its log says answers it; one the settings no longer have
        leaves the run's own agent answering, with a notice."""
        try:
            self.take_over(name)
        except UserError as e:
            return [("handoff", f"agent {name!r} answered this run before it stopped, but cannot now ({e}); "
                                f"{MAIN_AGENT} goes on")]
        return []

    def _cut(self, message: Message) -> tuple[RunStatus, str, str | None] | None:
        """A reply cut at the output limit: nothing in it runs; the model is told. Ends the run when it
        keeps happening."""
        self.truncated += 1
        if message.tool_calls:
            for call in message.tool_calls:
                self.emit(ToolCallFinished(self.run_id, self.step, call.id, call.name, CUT_CALL, is_error=True))
        else:
            self.emit(Feedback(self.run_id, self.step, CUT_TEXT))
        self.emit(StepFinished(self.run_id, self.step, self.usage))
        if self.truncated >= TRUNCATION_LIMIT:
            return ("truncated", message.text if not message.tool_calls else "",
                    f"the model's replies were cut at the output limit {self.truncated} times in a row")
        self.emit(Notice(self.run_id, self.step, "truncated", "the reply was cut at the output limit; the model "
                                                                "was asked to do less per step"))
        return None

    async def _pick_up(self, tools: ToolPipeline, check: Callable[[int, str], Awaitable[bool | Ending]] | None
                       ) -> tuple[RunStatus, str, str | None] | None:
        """Continue where the killed run stopped. Returns how the run ended if there is nothing left to do."""
        run = self.resume
        assert run is not None
        if run.answer is not None:  # the final answer was recorded; only the ending was not
            # it still passes the run's check (a typed answer's schema, a review): it may be the one turned down
            verdict = True if check is None else await check(self.step, run.answer.text)
            self.emit(StepFinished(self.run_id, self.step, self.usage))
            if verdict is False:
                return None
            return ("completed", run.answer.text, None) if verdict is True else verdict
        pending = run.unanswered
        if not pending:
            if run.awaiting_response:
                self.step -= 1  # that turn never arrived: ask for it again, under the same step number
            return None
        if self.answer_call is not None and not run.cut:  # the turn's answer call (a typed answer) is taken now
            verdict = await self.answer_call(self.step, Message.assistant(None, list(pending)))
            if verdict is not None:
                self.emit(StepFinished(self.run_id, self.step, self.usage))
                return verdict if isinstance(verdict, tuple) else None
        again = []
        for call in pending:
            tool = self.agent.tools.get(call.name)
            if run.cut:
                self.emit(ToolCallFinished(self.run_id, self.step, call.id, call.name, CUT_CALL, is_error=True))
            elif call.id in run.started and not (tool is not None and tool.idempotent):
                self.emit(ToolCallFinished(self.run_id, self.step, call.id, call.name, INTERRUPTED, is_error=True))
            else:  # never started, or harmless to run twice
                again.append(call)
        self.commit()
        ended = await tools(again)
        self.emit(StepFinished(self.run_id, self.step, self.usage))
        return ended


def _store_failed(error: BaseException) -> bool:
    """Whether `error` means the session log could not be read or written (rather than a bug)."""
    return isinstance(error, StoreError) or is_connection_error(error)
