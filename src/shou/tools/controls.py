"""The controls around running one tool (tools/pipeline.py), outermost first:

    validate ─► timeout ─► contain ─► mark untrusted ─► truncate ─► the tool

Marking is outside truncation so a cut never loses the closing delimiter, and containment is outside marking
so an error a server wrote is marked as its data is. The deadline covers all of them: they do no await of
their own but the tool's.
"""

from __future__ import annotations

import asyncio
import json
from dataclasses import replace
from typing import Any

from ..errors import ShouError, ToolError
from ..jsonfile import loads
from ..wellformed import ill_formed
from ..workspace import save_output
from . import spills
from .base import ToolArgumentsError, ToolResult
from .pipeline import Invocation, Next
from .registry import ToolSet
from .schema_bounds import ValidationTimeout, checked_off_loop
from .truncate import truncate
from .untrusted import UNTRUSTED_SPILL, mark_untrusted, reads_untrusted_spill

__all__ = ["ARGUMENT_CHECK_SECONDS", "Contain", "MarkUntrusted", "Timeout", "Truncate", "Validate", "invoke",
           "parse_arguments"]

ARGUMENT_CHECK_SECONDS = 30.0  # for arguments against a schema from outside (an MCP server's)


def parse_arguments(raw: str | None) -> tuple[dict[str, Any] | None, str | None]:
    """Parse argument JSON, repairing it when it is broken; returns (arguments, error message)."""
    text = (raw or "").strip()
    if not text:
        return {}, None
    try:
        value = loads(text)  # json.loads's value and errors, without its overhead (asked twice a call)
    except RecursionError:  # nested past what the parser takes: no tool's arguments do
        return None, "the arguments nest too deep to read; send them as one flat JSON object"
    except ValueError as e:
        first_error = f"{e.msg} at line {e.lineno} column {e.colno}" if isinstance(e, json.JSONDecodeError) else str(e)
        value = _repair(text)
        if not isinstance(value, dict) or (not value and text not in ("{}",)):
            return None, (
                f"the arguments are not valid JSON ({first_error}) and could not be repaired. Send the "
                f"arguments as one JSON object, e.g. {{\"name\": \"value\"}}. You sent: {text[:200]}"
            )
        return _text_only(value, text)
    if not isinstance(value, dict):
        return None, f"the arguments must be a JSON object, not {type(value).__name__}: {text[:200]}"
    return _text_only(value, text)


def _text_only(value: dict[str, Any], text: str) -> tuple[dict[str, Any] | None, str | None]:
    """`value`, unless an escape in `text` made a lone surrogate of it (`"\\udcff"`): no UTF-8 holds that, so
    neither a command, a file nor the log could, and the call is refused rather than run with other text."""
    try:
        if (text.isascii() and "\\u" not in text) or not ill_formed(value):
            return value, None
    except RecursionError:
        return None, "the arguments nest too deep to read; send them as one flat JSON object"
    return None, ("the arguments hold a lone surrogate escape (such as \\udcff), which is no character: send the "
                  "arguments as UTF-8 text")


def _repair(text: str) -> Any:
    from json_repair import repair_json

    try:
        return repair_json(text, return_objects=True)
    except Exception:
        return None


async def _validated(tool: Any, args: dict[str, Any]) -> dict[str, Any]:
    """`tool.validate(args)`; off the loop, with a deadline, for the tools whose output is untrusted (every MCP
    tool among them, whose server wrote its schema, which could be made slow to check)."""
    if not tool.untrusted_output:
        return tool.validate(args)
    return await checked_off_loop(lambda: tool.validate(args), ARGUMENT_CHECK_SECONDS, "the arguments")


class Validate:
    """Answers a call to an unknown tool, or with arguments that are not JSON (after repair) or do not fit the
    tool's schema, with what to fix; otherwise notes the tool, its checked arguments and whether its output
    comes from outside."""

    __slots__ = ("tools",)

    def __init__(self, tools: ToolSet) -> None:
        self.tools = tools

    async def __call__(self, inv: Invocation, next: Next[ToolResult]) -> ToolResult:
        """The call's result, or why it was not run."""
        call = inv.call
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
        inv.tool, inv.kwargs = tool, kwargs
        # From outside (a page, a search result, or the spilled whole of one): the model must read it as data,
        # errors included, since a server writes those too (tools/untrusted.py).
        inv.untrusted = tool.untrusted_output or reads_untrusted_spill(call.name, kwargs)
        return await next(inv)


class Timeout:
    """Stops a call at its tool's own limit (else `default`); `cap`, when given, limits every tool. Records in
    `started` the calls that got this far: one stopped after that may have had its effect."""

    __slots__ = ("cap", "default", "started")

    def __init__(self, default: float, cap: float | None, started: set[str]) -> None:
        self.default, self.cap, self.started = default, cap, started

    async def __call__(self, inv: Invocation, next: Next[ToolResult]) -> ToolResult:
        """The call's result, or that it did not finish in time."""
        tool = inv.tool
        limit = tool.timeout if tool is not None and tool.timeout is not None else self.default
        if self.cap is not None and limit > self.cap:
            # A limit the person set governs every tool. The second of grace lets a tool that enforces the
            # same limit itself (the sandbox, which kills and reports) answer first.
            limit = self.cap + 1.0
        inv.limit = limit
        self.started.add(inv.call.id)
        try:
            async with asyncio.timeout(limit):
                return await next(inv)
        except TimeoutError:
            return ToolResult.error(
                f"Error: {inv.call.name} did not finish within {limit:g} s and was stopped. Try a smaller "
                "request, or a different approach."
            )


class Contain:
    """Turns whatever a tool raises (but a timeout, the deadline's to answer) into an error result the model
    can act on, marked as outside content when the tool's output is."""

    __slots__ = ()

    async def __call__(self, inv: Invocation, next: Next[ToolResult]) -> ToolResult:
        """The call's result, or the error it raised."""
        name = inv.call.name
        try:
            return await next(inv)
        except TimeoutError:
            raise
        except ToolError as e:
            text = f"Error: {e}"
        except Exception as e:
            text = f"Error: {name} raised {type(e).__name__}: {e}"
        return ToolResult.error(mark_untrusted(text, name) if inv.untrusted else text)


class MarkUntrusted:
    """Puts a result that carries outside content (its tool's output is, or the tool says this one is) inside
    the untrusted-content delimiters."""

    __slots__ = ()

    async def __call__(self, inv: Invocation, next: Next[ToolResult]) -> ToolResult:
        """The result, marked when it comes from outside."""
        result = await next(inv)
        if inv.untrusted or result.untrusted:
            return replace(result, content=mark_untrusted(result.content, inv.call.name), untrusted=True)
        return result


class Truncate:
    """Keeps big outputs out of the context: past `spill_chars` the model gets head and tail and the whole goes
    to a file of the session (named `untrusted-...` for outside content, so that reading it back is marked
    too)."""

    __slots__ = ("spill_chars",)

    def __init__(self, spill_chars: int) -> None:
        self.spill_chars = spill_chars

    async def __call__(self, inv: Invocation, next: Next[ToolResult]) -> ToolResult:
        """The result, capped."""
        result = await next(inv)
        ctx = inv.ctx
        if len(result.content) > self.spill_chars:
            result = self._cap(result, inv, inv.untrusted or result.untrusted)
        if ctx is not None and result.details and isinstance(result.details.get("output_path"), str):
            spills.claim(ctx.resource_key, result.details["output_path"])  # a sandbox's spill: this session's to read
        return result

    def _cap(self, result: ToolResult, inv: Invocation, untrusted: bool) -> ToolResult:
        text, ctx, name = result.content, inv.ctx, inv.call.name
        hint = "ask for a narrower result"
        if ctx is not None:
            try:
                label = f"{UNTRUSTED_SPILL}{name}" if untrusted else name
                rel = save_output(ctx.workspace, label, text.encode("utf-8"))
                spills.claim(ctx.resource_key, rel)
                hint = f"the full output ({len(text)} characters) is in {rel}; read it with read_file and offset"
            except (OSError, ShouError):
                pass
        return replace(result, content=truncate(text, max_bytes=self.spill_chars, hint=hint).text)


async def invoke(inv: Invocation) -> ToolResult:
    """The end of the pipeline: the tool itself, its value as a result."""
    assert inv.tool is not None  # Validate found it
    return ToolResult.coerce(await inv.tool.call(inv.kwargs, inv.ctx))
