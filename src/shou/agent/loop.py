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
from collections.abc import Callable
from typing import TYPE_CHECKING

from ..errors import ModelError
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
    ToolCallStarted,
)
from ..messages import Message, ToolCall
from ..models.base import model_id
from ..session import INTERRUPTED
from ..store.pg_link import is_connection_error
from ..store.sqlite_errors import StoreError
from ..tools.base import ToolContext
from ..tools.executor import DEFAULT_TIMEOUT, ToolExecutor
from ..usage import Usage
from .approvals import Gate
from .budget import Accounts, Budget
from .context import RunContext
from .emitter import Emitter
from .guards import RepeatGuard
from .review import Critic
from .servers import with_servers
from .turn import MAX_ARGUMENT_CHARS, Caller

if TYPE_CHECKING:
    from ..session import OpenRun, Session
    from .agent import Agent

_log = logging.getLogger("shou")
TRUNCATION_LIMIT = 3  # consecutive replies cut at the output limit before the run ends `truncated`
CUT_CALL = ("Error: not run: your reply was cut off at the output limit before this call was complete "
            "(finish_reason: length). Do less per step: fewer or smaller calls, and write long content in parts.")
CUT_TEXT = ("[shou] Your last reply was cut off at the output limit (finish_reason: length) and is incomplete. "
            "Continue with less per step: a shorter answer, or the next part only.")


def without_image(content: str, details: dict | None) -> tuple[str, None]:
    """A tool result for a text-only model: the image's text stand-in (a page's text) instead of the image."""
    text = str((details or {}).get("page_text") or "").strip()
    note = "\n\n[An image was returned, but this model cannot see images (set vision on for a model that can)."
    if not text:
        return content + note + "]", None
    from ..tools.untrusted import mark_untrusted  # a page's text is outside content, like the page itself

    return content + note + " The page's text instead:]\n" + mark_untrusted(text, "browser"), None


def new_run_id() -> str:
    """A short random run id."""
    return "run_" + secrets.token_hex(6)


class Run:
    """The state of one run; `execute()` drives it to a `RunFinished` event.

    `resume` is a run of the session that was killed before it finished: the run continues it (same
    run id, steps and usage) instead of starting a new one. A sub-run (a plan step, a sub-agent) is given
    its `run_id` and the `budgets` of the run it works for, which its calls are held against too.
    """

    def __init__(self, agent: Agent, task: str, session: Session, emit: Callable[[Event], None], *,
                 resume: OpenRun | None = None, run_id: str | None = None,
                 budgets: list[Budget] | None = None, ratios: dict[str, float] | None = None) -> None:
        self.agent = agent
        self.task = task
        self.session = session
        self.resume = resume
        self.run_id = resume.run_id if resume is not None else run_id or new_run_id()
        self.emitter = Emitter(session, agent.redactor, agent.observers, emit)
        self.step = resume.step if resume is not None else 0
        self.usage = resume.usage if resume is not None else Usage()
        self.unfinished: dict[str, ToolCall] = {}
        self.entered: set[str] = set()  # ids of the calls whose tool began to run (the executor adds them)
        self.truncated = 0
        self._gate: Gate | None = None
        self.accounts = Accounts(agent.prices, self._budgets() if budgets is None else budgets,
                                 model_id(agent.model), ratios)
        self.caller = Caller(self)
        # Sub-run ids go on from the ones the killed process used: a resumed run's are new ones.
        self._subs = itertools.count((resume.subs if resume is not None else 0) + 1)

    def sub_id(self) -> str:
        """A new run id for a sub-run of this run (a plan step, a sub-agent, a review)."""
        return f"{self.run_id}.{next(self._subs)}"

    def _budgets(self) -> list[Budget]:
        """The run's budget (counting what a resumed run spent already) and the session's."""
        agent = self.agent
        budgets = [Budget(agent.max_cost, agent.token_budget, self.usage)]
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

    async def execute(self) -> RunFinished:
        """Run to the end; always emits and returns exactly one `RunFinished`."""
        started = time.perf_counter()
        # the servers' tools join the run's agent before the run announces its tools
        self.agent, problems = await with_servers(self.agent)
        agent = self.agent
        if self.resume is None:
            self.emit(RunStarted(self.run_id, self.session.name, self.task, agent.model.name,
                                 tuple(agent.tools.names), time.time()))
        else:
            self.emit(RunResumed(self.run_id, self.session.name, self.step, time.time()))
        for problem in problems:
            self.emit(Notice(self.run_id, self.step, "mcp", problem))
        # No commit here: the first model request commits the task with itself, and the consumer commits
        # anything it is shown before that.
        status: RunStatus = "error"
        answer = ""
        error: str | None = None
        try:
            async with asyncio.timeout(agent.run_timeout):
                if agent.planning or (self.resume is not None and self.resume.plan is not None):
                    from .plan import Planner

                    status, answer, error = await Planner(self).execute()
                else:
                    status, answer, error = await self._steps()
        except TimeoutError:
            status, error = "timeout", f"the run passed its deadline of {agent.run_timeout:g} s"
        except ModelError as e:
            status, error = "error", str(e)
        except Exception as e:  # a bug in a model backend or in shou: end the run cleanly, state saved
            if _store_failed(e):  # the log cannot be written (a full disk, the database away): stop as a kill
                raise  # would, so the run is resumed from its log once that is fixed, not recorded as failed
            status, error = "error", f"internal error: {type(e).__name__}: {e}"
        except asyncio.CancelledError:
            self._finish_unfinished("the run was cancelled")
            done = self._finished("cancelled", "", "the run was cancelled", started)
            self.emit(done)
            self.commit()
            raise
        self._finish_unfinished(f"the run ended ({status})")
        done = self._finished(status, answer, error, started)
        self.emit(done)
        self.commit()
        return done

    def _finished(self, status: RunStatus, answer: str, error: str | None, started: float) -> RunFinished:
        return RunFinished(self.run_id, status, answer, self.step, self.usage, time.perf_counter() - started, error)

    def _finish_unfinished(self, why: str) -> None:
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
        executor = ToolExecutor(agent.tools, timeout=agent.tool_timeout or DEFAULT_TIMEOUT, cap=agent.tool_timeout,
                                concurrency=agent.max_parallel_tools, spill_chars=agent.context.spill_chars,
                                started=self.entered)
        ctx = ToolContext(agent.workspace, self.session.name, self.run_id, agent.settings,
                          session_key=self.session.key)
        ctx.state["shou.run"] = self  # what `delegate` needs to start a sub-agent under this run
        return executor, ctx

    async def call_tools(self, calls: list[ToolCall]) -> str | None:
        """Screen and run `calls` outside a model turn (an MCP client's calls, code calling tools), exactly as
        the loop would: permissions, approvals, timeouts, events. Returns why some wait, if they do."""
        executor, ctx = self.tools_and_context()
        return await self._run_calls(executor, ctx, calls)

    async def _steps(self) -> tuple[RunStatus, str, str | None]:
        agent = self.agent
        guard = RepeatGuard(agent.repeat_limit)
        executor, ctx = self.tools_and_context()
        context = RunContext(self)
        if self.resume is None:
            context.recall(self.task)
        else:
            ended = await self._pick_up(executor, ctx)
            if ended is not None:
                return ended
        run_id = self.run_id
        critic = Critic(self, context.pinned) if agent.reflect and agent.max_reviews > 0 else None
        while True:
            if self.step >= agent.max_steps:
                return "max_steps", "", f"stopped after {agent.max_steps} steps without a final answer"
            self.step += 1
            step = self.step
            messages, specs, tokens = await context.messages(step)
            ctx.state["working_memory"] = self.session.working_memory
            turn = await self.caller.call(messages, specs, step, tokens)
            if isinstance(turn, str):
                self.step -= 1
                return "budget", "", turn
            completion, message, oversized = turn.completion, turn.message, turn.oversized
            if completion.finish_reason == "length":
                ended = self._cut(message)
                if ended is not None:
                    return ended
                continue
            self.truncated = 0
            if not message.tool_calls:
                if critic is not None and critic.reviews < agent.max_reviews:
                    verdict = await critic.review(step, message.text)
                    if isinstance(verdict, str):  # the budget does not allow a review: the answer stands
                        self.emit(Notice(run_id, step, "review", f"not reviewed: {verdict}"))
                    elif not verdict:
                        self.emit(StepFinished(run_id, step, self.usage))
                        continue
                self.emit(StepFinished(run_id, step, self.usage))
                return "completed", message.text, None
            verdicts = [guard.check(c) for c in message.tool_calls]
            self.unfinished = {c.id: c for c in message.tool_calls}
            if "stop" in verdicts:
                call = message.tool_calls[verdicts.index("stop")]
                why = f"{call.name} was called with the same arguments again after a warning"
                self.emit(Notice(run_id, step, "loop", why))
                self._finish_unfinished("the same call was repeated and the run was stopped")
                self.emit(StepFinished(run_id, step, self.usage))
                return "loop", "", why
            runnable = [c for c in message.tool_calls if c.id not in oversized or not self._refuse_oversized(c)]
            notes = {c.id: guard.note(c) for c, v in zip(message.tool_calls, verdicts, strict=True) if v == "warn"}
            waiting = await self._run_calls(executor, ctx, runnable, notes)
            self.emit(StepFinished(run_id, step, self.usage))
            if waiting:
                return "waiting_approval", "", waiting

    async def _run_calls(self, executor: ToolExecutor, ctx: ToolContext, calls: list[ToolCall],
                         notes: dict[str, str] | None = None) -> str | None:
        """Screen `calls` (permissions, approvals), announce the allowed ones, make that durable, run them, and
        record each result as soon as it is there. Returns why the run must wait, if some calls wait for a
        person's decision (`--approvals defer`)."""
        if not calls:
            return None
        if self._gate is None:  # the policy is read once per run, not once per step
            self._gate = Gate(self)
        calls, waiting = await self._gate.screen(calls)
        for call in waiting:
            self.unfinished.pop(call.id, None)  # it stays unanswered, to be decided and resumed
        wait = (f"{len(waiting)} call(s) wait for approval: `shou approvals` lists them, `shou approve ID` or "
                "`shou deny ID` decides, `shou resume` goes on") if waiting else None
        if not calls:
            self.commit()
            return wait
        for call in calls:
            self.unfinished[call.id] = call
            self.emit(ToolCallStarted(self.run_id, self.step, call))
        self.commit()  # the message and its calls are in the log before any of them can have an effect
        remaining = len(calls)
        async for done in executor.run_all(list(calls), ctx):
            remaining -= 1
            result = done.result
            content = result.content + (notes or {}).get(done.call.id, "")
            if notes and done.call.id in notes:
                self.emit(Notice(self.run_id, self.step, "repeat",
                                 f"{done.call.name} repeated {self.agent.repeat_limit} times"))
            image = result.image
            if image is not None and not self.agent.vision:
                content, image = without_image(content, result.details)
            self.unfinished.pop(done.call.id, None)
            self.emit(ToolCallFinished(self.run_id, self.step, done.call.id, done.call.name, content, result.is_error,
                                       done.latency, image, result.details))
            if remaining:  # others still run: this one must not look unfinished if the process dies meanwhile
                self.commit()
        # The last result is committed with the next request (or the run's end), before either happens.
        return wait

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

    def _refuse_oversized(self, call: ToolCall) -> bool:
        self.unfinished.pop(call.id, None)
        self.emit(ToolCallFinished(self.run_id, self.step, call.id, call.name,
                                   f"Error: not run: the arguments were over {MAX_ARGUMENT_CHARS} characters. Send "
                                   "large content in several smaller calls (e.g. write a file in parts).",
                                   is_error=True))
        return True

    async def _pick_up(self, executor: ToolExecutor, ctx: ToolContext) -> tuple[RunStatus, str, str | None] | None:
        """Continue where the killed run stopped. Returns how the run ended if there is nothing left to do."""
        run = self.resume
        assert run is not None
        if run.answer is not None:  # the final answer was recorded; only the ending was not
            self.emit(StepFinished(self.run_id, self.step, self.usage))
            return "completed", run.answer.text, None
        pending = run.unanswered
        if not pending:
            if run.awaiting_response:
                self.step -= 1  # that turn never arrived: ask for it again, under the same step number
            return None
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
        waiting = await self._run_calls(executor, ctx, again)
        self.emit(StepFinished(self.run_id, self.step, self.usage))
        return ("waiting_approval", "", waiting) if waiting else None


def _store_failed(error: BaseException) -> bool:
    """Whether `error` means the session log could not be read or written (rather than a bug)."""
    return isinstance(error, StoreError) or is_connection_error(error)
