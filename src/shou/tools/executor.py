"""Running the model's tool calls: parse, repair, validate, time out, run concurrently, truncate.

Nothing a tool does can crash the loop: every failure becomes an error `ToolResult` whose text tells the
model what went wrong and what to do instead. The work is the controls of tools/controls.py, composed once
per executor; the run puts its own controls around them (agent/toolpipe.py).
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator

from ..messages import ToolCall
from .base import ToolContext, ToolResult
from .controls import ARGUMENT_CHECK_SECONDS, Contain, MarkUntrusted, Timeout, Truncate, Validate, invoke
from .controls import parse_arguments as parse_arguments
from .pipeline import ExecutedCall, Invocation, Next, compose, run_parallel
from .registry import ToolSet

__all__ = ["ARGUMENT_CHECK_SECONDS", "DEFAULT_CONCURRENCY", "DEFAULT_TIMEOUT", "SPILL_CHARS", "ExecutedCall",
           "ToolExecutor", "parse_arguments"]

DEFAULT_TIMEOUT = 30.0
DEFAULT_CONCURRENCY = 4
SPILL_CHARS = 20_000  # past this a tool's output goes to .shou/outputs/ and the model sees head and tail


class ToolExecutor:
    """Executes tool calls against a `ToolSet` with per-tool timeouts and a concurrency limit.

    `timeout` is for tools that declare none; `cap`, when given, limits every tool, those that do included.
    `started`, when given, gets the id of every call whose tool was entered (past validation and the
    concurrency limit): a call stopped after that may have had its effect, one stopped before cannot have.
    `controls` are its pipeline's, outermost first; `head` is that pipeline composed, for a caller that puts
    controls of its own around it.
    """

    def __init__(
        self, tools: ToolSet, *, timeout: float = DEFAULT_TIMEOUT, concurrency: int = DEFAULT_CONCURRENCY,
        spill_chars: int = SPILL_CHARS, cap: float | None = None, started: set[str] | None = None,
    ) -> None:
        self.tools = tools
        self.started = started if started is not None else set()
        self.timeout = timeout
        self.cap = cap
        self.concurrency = max(1, concurrency)
        self.spill_chars = spill_chars
        self.controls = (Validate(tools), Timeout(timeout, cap, self.started), Contain(), MarkUntrusted(),
                         Truncate(spill_chars))
        self.head: Next[ToolResult] = compose(self.controls, invoke)

    async def execute(self, call: ToolCall, ctx: ToolContext | None) -> ToolResult:
        """Run one call to completion; never raises (except for cancellation of the caller)."""
        return await self.head(Invocation(call, ctx))

    async def run_all(self, calls: list[ToolCall], ctx: ToolContext | None) -> AsyncIterator[ExecutedCall]:
        """Run the calls of one model turn, at most `concurrency` at once, yielding each as it finishes.

        The caller restores call order from `ExecutedCall.index` when it builds the tool messages.
        """
        running = run_parallel([Invocation(c, ctx) for c in calls], self.head, self.concurrency)
        async with contextlib.aclosing(running):  # a caller that stops early cancels the calls still running
            async for done in running:
                yield done
