"""The tool-call pipeline: an ordered list of small controls around one tool call, and a parallel runner.

A control is an object with `async def __call__(call, next)`: it may answer the call itself (unknown tool,
broken arguments), act before it (start a deadline) or after it (cap, mark), and calls `next`, the rest of
the pipeline, to go on. Pipelines are composed once (`compose`), never per call: a call costs one
`Invocation` and one await per control. The same shape serves the run's screening of a model turn
(agent/toolpipe.py), where a control answers with a verdict instead of a result.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol, TypeVar

from ..chain import compose
from ..frozen import fast_init

if TYPE_CHECKING:
    from ..messages import ToolCall
    from .base import Tool, ToolContext, ToolResult

__all__ = ["Control", "ExecutedCall", "Invocation", "Next", "compose", "run_parallel"]

R = TypeVar("R")


class Invocation:
    """One tool call as the controls see it: the call, the context its tool gets, and what the controls
    found out on the way (the tool, its checked arguments, whether its output comes from outside, its
    deadline)."""

    __slots__ = ("call", "ctx", "kwargs", "limit", "tool", "untrusted")

    def __init__(self, call: ToolCall, ctx: ToolContext | None) -> None:
        self.call = call
        self.ctx = ctx
        self.tool: Tool | None = None
        self.kwargs: dict[str, Any] = {}
        self.untrusted = False
        self.limit = 0.0


Next = Callable[[Invocation], Awaitable[R]]


class Control(Protocol[R]):
    """One step of a pipeline: the outcome of `call`, made by calling `next` (or not: it answers itself)."""

    async def __call__(self, call: Invocation, next: Next[R]) -> R:
        """The outcome of `call`."""
        ...




@fast_init
@dataclass(frozen=True, slots=True)
class ExecutedCall:
    """A finished call: its position in the model's turn, the result and how long it took (seconds)."""

    index: int
    call: ToolCall
    result: ToolResult
    latency: float


async def run_parallel(calls: Sequence[Invocation], head: Next[ToolResult], concurrency: int
                       ) -> AsyncIterator[ExecutedCall]:
    """Run each call through `head`, at most `concurrency` at once, yielding each as it finishes; closing the
    iterator early cancels the calls still running."""
    if len(calls) == 1:  # the common case: no semaphore, no task
        start = time.perf_counter()
        result = await head(calls[0])
        yield ExecutedCall(0, calls[0].call, result, time.perf_counter() - start)
        return
    gate = asyncio.Semaphore(max(1, concurrency))

    async def one(i: int, inv: Invocation) -> ExecutedCall:
        async with gate:
            start = time.perf_counter()
            result = await head(inv)
            return ExecutedCall(i, inv.call, result, time.perf_counter() - start)

    tasks = [asyncio.ensure_future(one(i, c)) for i, c in enumerate(calls)]
    try:
        for next_done in asyncio.as_completed(tasks):
            yield await next_done
    finally:
        for t in tasks:
            t.cancel()
