"""One run of the ReAct loop: ask the model, run its tool calls, observe, repeat; emit events throughout.

The run executes in its own task and hands events to a queue, so its deadline applies to its own
awaits only, and a consumer that stops listening cancels it cleanly.
"""

from __future__ import annotations

import asyncio
import secrets
import time
from collections.abc import Callable
from typing import TYPE_CHECKING

from ..errors import ModelError
from ..events import (
    Event,
    ModelRequest,
    ModelResponse,
    Notice,
    RunFinished,
    RunStarted,
    RunStatus,
    StepFinished,
    TextDelta,
    ToolCallDelta,
    ToolCallFinished,
    ToolCallStarted,
)
from ..messages import ToolCall
from ..models.base import Completion, Retrying, TextChunk, ToolCallChunk
from ..tools.base import ToolContext
from ..tools.executor import ToolExecutor
from ..usage import Usage
from .context import RunContext
from .guards import RepeatGuard

if TYPE_CHECKING:
    from ..session import Session
    from .agent import Agent


def without_image(content: str, details: dict | None) -> tuple[str, None]:
    """A tool result for a text-only model: the image's text stand-in (a page's text) instead of the image."""
    text = str((details or {}).get("page_text") or "").strip()
    note = "\n\n[An image was returned, but this model cannot see images (set vision on for a model that can)."
    return content + note + (f" The page's text instead:]\n{text}" if text else "]"), None


def new_run_id() -> str:
    """A short random run id."""
    return "run_" + secrets.token_hex(6)


class Run:
    """The state of one run; `execute()` drives it to a `RunFinished` event."""

    def __init__(self, agent: Agent, task: str, session: Session, emit: Callable[[Event], None]) -> None:
        self.agent = agent
        self.task = task
        self.session = session
        self.run_id = new_run_id()
        self._emit = emit
        self.step = 0
        self.usage = Usage()
        self.unfinished: dict[str, ToolCall] = {}

    def emit(self, event: Event) -> None:
        """Record the event in the session, then hand it to the consumer."""
        self.session.record(event)
        self._emit(event)

    async def execute(self) -> RunFinished:
        """Run to the end; always emits and returns exactly one `RunFinished`."""
        agent = self.agent
        started = time.perf_counter()
        self.emit(RunStarted(self.run_id, self.session.name, self.task, agent.model.name,
                             tuple(agent.tools.names), time.time()))
        status: RunStatus = "error"
        answer = ""
        error: str | None = None
        try:
            async with asyncio.timeout(agent.run_timeout):
                status, answer, error = await self._steps()
        except TimeoutError:
            status, error = "timeout", f"the run passed its deadline of {agent.run_timeout:g} s"
        except ModelError as e:
            status, error = "error", str(e)
        except Exception as e:  # a bug in a model backend or in shou: end the run cleanly, state saved
            status, error = "error", f"internal error: {type(e).__name__}: {e}"
        except asyncio.CancelledError:
            self._finish_unfinished("the run was cancelled before this call finished")
            done = self._finished("cancelled", "", "the run was cancelled", started)
            self.emit(done)
            raise
        self._finish_unfinished(f"not finished: the run ended ({status})")
        done = self._finished(status, answer, error, started)
        self.emit(done)
        return done

    def _finished(self, status: RunStatus, answer: str, error: str | None, started: float) -> RunFinished:
        return RunFinished(self.run_id, status, answer, self.step, self.usage, time.perf_counter() - started, error)

    def _finish_unfinished(self, why: str) -> None:
        """Give every call that never finished an error result, so the conversation stays valid."""
        for call in list(self.unfinished.values()):
            self.emit(ToolCallFinished(self.run_id, self.step, call.id, call.name, f"Error: {why}.", is_error=True))
        self.unfinished.clear()

    async def _steps(self) -> tuple[RunStatus, str, str | None]:
        agent = self.agent
        guard = RepeatGuard(agent.repeat_limit)
        executor = ToolExecutor(agent.tools, timeout=agent.tool_timeout, concurrency=agent.max_parallel_tools,
                                spill_chars=agent.context.spill_chars)
        ctx = ToolContext(agent.workspace, self.session.name, self.run_id, agent.settings)
        context = RunContext(agent, self.session, self.run_id, self.emit)
        context.recall(self.task)
        run_id = self.run_id
        while True:
            if self.step >= agent.max_steps:
                return "max_steps", "", f"stopped after {agent.max_steps} steps without a final answer"
            self.step += 1
            step = self.step
            messages, specs, tokens = await context.messages(step)
            self.usage = self.usage + context.usage
            context.usage = Usage()
            ctx.state["working_memory"] = self.session.working_memory
            self.emit(ModelRequest(run_id, step, len(messages), len(specs), tokens))
            t0 = time.perf_counter()
            completion: Completion | None = None
            async for ev in agent.model.stream(messages, specs, agent.model_settings):
                if isinstance(ev, TextChunk):
                    self.emit(TextDelta(run_id, step, ev.text))
                elif isinstance(ev, ToolCallChunk):
                    self.emit(ToolCallDelta(run_id, step, ev.index, ev.name, ev.arguments))
                elif isinstance(ev, Completion):
                    completion = ev
                elif isinstance(ev, Retrying):
                    self.emit(Notice(run_id, step, "retry", f"{ev.reason}; retry {ev.attempt} in {ev.delay:.1f} s"))
            if completion is None:
                raise ModelError("the model stream ended without a response")
            message = completion.message
            self.usage = self.usage + completion.usage
            self.emit(ModelResponse(run_id, step, message, completion.usage, time.perf_counter() - t0,
                                    completion.finish_reason, completion.model))
            if not message.tool_calls:
                self.emit(StepFinished(run_id, step, self.usage))
                return "completed", message.text, None
            verdicts = [guard.check(c) for c in message.tool_calls]
            self.unfinished = {c.id: c for c in message.tool_calls}
            if "stop" in verdicts:
                call = message.tool_calls[verdicts.index("stop")]
                why = f"{call.name} was called with the same arguments again after a warning"
                self.emit(Notice(run_id, step, "loop", why))
                self._finish_unfinished("not run: the same call was repeated, the run was stopped")
                self.emit(StepFinished(run_id, step, self.usage))
                return "loop", "", why
            for call in message.tool_calls:
                self.emit(ToolCallStarted(run_id, step, call))
            async for done in executor.run_all(list(message.tool_calls), ctx):
                result = done.result
                content = result.content
                if verdicts[done.index] == "warn":
                    content += guard.note(done.call)
                    self.emit(Notice(run_id, step, "repeat", f"{done.call.name} repeated {guard.limit} times"))
                image = result.image
                if image is not None and not agent.vision:
                    content, image = without_image(content, result.details)
                self.unfinished.pop(done.call.id, None)
                self.emit(ToolCallFinished(run_id, step, done.call.id, done.call.name, content, result.is_error,
                                           done.latency, image, result.details))
            self.emit(StepFinished(run_id, step, self.usage))
            if agent.max_total_tokens is not None and self.usage.total_tokens > agent.max_total_tokens:
                spent = self.usage.total_tokens
                return "budget", "", f"used {spent} tokens, over the budget of {agent.max_total_tokens}"
