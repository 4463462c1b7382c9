"""Running the model's tool calls: parse, repair, validate, time out, run concurrently, truncate.

Nothing a tool does can crash the loop: every failure becomes an error `ToolResult` whose text tells the
model what went wrong and what to do instead.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass, replace
from typing import Any

from ..errors import ShouError, ToolError
from ..messages import ToolCall
from ..workspace import save_output
from . import spills
from .base import ToolArgumentsError, ToolContext, ToolResult
from .registry import ToolSet
from .schema_bounds import ValidationTimeout, checked_off_loop
from .truncate import truncate
from .untrusted import UNTRUSTED_SPILL, mark_untrusted, reads_untrusted_spill

DEFAULT_TIMEOUT = 30.0
DEFAULT_CONCURRENCY = 4
SPILL_CHARS = 20_000  # past this a tool's output goes to .shou/outputs/ and the model sees head and tail


@dataclass(frozen=True, slots=True)
class ExecutedCall:
    """A finished call: its position in the model's turn, the result and how long it took (seconds)."""

    index: int
    call: ToolCall
    result: ToolResult
    latency: float


def parse_arguments(raw: str | None) -> tuple[dict[str, Any] | None, str | None]:
    """Parse argument JSON, repairing it when it is broken; returns (arguments, error message)."""
    text = (raw or "").strip()
    if not text:
        return {}, None
    try:
        value = json.loads(text)
    except ValueError as e:
        first_error = f"{e.msg} at line {e.lineno} column {e.colno}" if isinstance(e, json.JSONDecodeError) else str(e)
        value = _repair(text)
        if not isinstance(value, dict) or (not value and text not in ("{}",)):
            return None, (
                f"the arguments are not valid JSON ({first_error}) and could not be repaired. Send the "
                f"arguments as one JSON object, e.g. {{\"name\": \"value\"}}. You sent: {text[:200]}"
            )
        return value, None
    if not isinstance(value, dict):
        return None, f"the arguments must be a JSON object, not {type(value).__name__}: {text[:200]}"
    return value, None


def _repair(text: str) -> Any:
    from json_repair import repair_json

    try:
        return repair_json(text, return_objects=True)
    except Exception:
        return None


ARGUMENT_CHECK_SECONDS = 30.0  # for arguments against a schema from outside (an MCP server's)


async def _validated(tool: Any, args: dict[str, Any]) -> dict[str, Any]:
    """`tool.validate(args)`; off the loop, with a deadline, for the tools whose output is untrusted (every MCP
    tool among them, whose server wrote its schema, which could be made slow to check)."""
    if not tool.untrusted_output:
        return tool.validate(args)
    return await checked_off_loop(lambda: tool.validate(args), ARGUMENT_CHECK_SECONDS, "the arguments")


class ToolExecutor:
    """Executes tool calls against a `ToolSet` with per-tool timeouts and a concurrency limit.

    `timeout` is for tools that declare none; `cap`, when given, limits every tool, those that do included.
    `started`, when given, gets the id of every call whose tool was entered (past validation and the
    concurrency limit): a call stopped after that may have had its effect, one stopped before cannot have.
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

    async def execute(self, call: ToolCall, ctx: ToolContext | None) -> ToolResult:
        """Run one call to completion; never raises (except for cancellation of the caller)."""
        tool = self.tools.get(call.name)
        if tool is None:
            names = ", ".join(self.tools.names) or "(none)"
            return ToolResult.error(f"Error: there is no tool named {call.name!r}. Available tools: {names}.")
        args, problem = parse_arguments(call.arguments)
        if problem is not None:
            return ToolResult.error(f"Error calling {call.name}: {problem}")
        try:
            kwargs = await _validated(tool, args or {})
        except ToolArgumentsError as e:
            return ToolResult.error(f"Error calling {call.name}: {e}\nFix the arguments and call it again.")
        except ValidationTimeout as e:
            return ToolResult.error(f"Error calling {call.name}: {e}")
        limit = tool.timeout if tool.timeout is not None else self.timeout
        if self.cap is not None and limit > self.cap:
            # A limit the person set governs every tool. The second of grace lets a tool that enforces the
            # same limit itself (the sandbox, which kills and reports) answer first.
            limit = self.cap + 1.0
        # From outside (a page, a search result, or the spilled whole of one): the model must read it as data,
        # errors included, since a server writes those too (tools/untrusted.py).
        untrusted = tool.untrusted_output or reads_untrusted_spill(call.name, kwargs)
        self.started.add(call.id)
        try:
            async with asyncio.timeout(limit):
                value = await tool.call(kwargs, ctx)
        except TimeoutError:
            return ToolResult.error(
                f"Error: {call.name} did not finish within {limit:g} s and was stopped. Try a smaller "
                "request, or a different approach."
            )
        except ToolError as e:
            return ToolResult.error(mark_untrusted(f"Error: {e}", call.name) if untrusted else f"Error: {e}")
        except Exception as e:
            text = f"Error: {call.name} raised {type(e).__name__}: {e}"
            return ToolResult.error(mark_untrusted(text, call.name) if untrusted else text)
        return self._finish(ToolResult.coerce(value), call, ctx, untrusted)

    def _finish(self, result: ToolResult, call: ToolCall, ctx: ToolContext | None, untrusted: bool) -> ToolResult:
        """A result as the model gets it: capped (spilled), and marked when it carries outside content."""
        untrusted = untrusted or result.untrusted  # the tool knows this result carries outside content
        result = self._cap(result, call, ctx, untrusted)
        if ctx is not None and result.details and isinstance(result.details.get("output_path"), str):
            spills.claim(ctx.resource_key, result.details["output_path"])  # a sandbox's spill: this session's to read
        if untrusted:
            result = replace(result, content=mark_untrusted(result.content, call.name), untrusted=True)
        return result

    def _cap(self, result: ToolResult, call: ToolCall, ctx: ToolContext | None, untrusted: bool = False
             ) -> ToolResult:
        """Keep big outputs out of the context: the model gets head and tail, the whole goes to a file (named
        `untrusted-...` for outside content, so that reading it back is marked too)."""
        text = result.content
        if len(text) <= self.spill_chars:
            return result
        hint = "ask for a narrower result"
        if ctx is not None:
            try:
                label = f"{UNTRUSTED_SPILL}{call.name}" if untrusted else call.name
                rel = save_output(ctx.workspace, label, text.encode("utf-8"))
                spills.claim(ctx.resource_key, rel)
                hint = f"the full output ({len(text)} characters) is in {rel}; read it with read_file and offset"
            except (OSError, ShouError):
                pass
        cut = truncate(text, max_bytes=self.spill_chars, hint=hint)
        return replace(result, content=cut.text)

    async def run_all(self, calls: list[ToolCall], ctx: ToolContext | None) -> AsyncIterator[ExecutedCall]:
        """Run the calls of one model turn, at most `concurrency` at once, yielding each as it finishes.

        The caller restores call order from `ExecutedCall.index` when it builds the tool messages.
        """
        if len(calls) == 1:
            start = time.perf_counter()
            result = await self.execute(calls[0], ctx)
            yield ExecutedCall(0, calls[0], result, time.perf_counter() - start)
            return
        gate = asyncio.Semaphore(self.concurrency)

        async def one(i: int, call: ToolCall) -> ExecutedCall:
            async with gate:
                start = time.perf_counter()
                result = await self.execute(call, ctx)
                return ExecutedCall(i, call, result, time.perf_counter() - start)

        tasks = [asyncio.ensure_future(one(i, c)) for i, c in enumerate(calls)]
        try:
            for next_done in asyncio.as_completed(tasks):
                yield await next_done
        finally:
            for t in tasks:
                t.cancel()
