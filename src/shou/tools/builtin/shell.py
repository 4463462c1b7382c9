"""`shell(command)` and `run_code(language, code, stateful)`: commands and programs in the sandbox.

Both run in the backend the settings choose (bubblewrap by default), with the workspace as the current
directory and no network. `sandbox_tools(sandbox)` makes the same two tools bound to a sandbox you built.
"""

from __future__ import annotations

import contextlib
from dataclasses import replace
from typing import Literal

from ...errors import ToolError
from ...sandbox.base import ExecResult, Sandbox
from ...sandbox.quota import charging, run_allowance
from ..base import Tool, ToolContext, ToolResult, tool

# The sandbox enforces its own wall-clock limit and reports it properly; this outer limit is a backstop.
BACKSTOP = 24 * 3600


def sandbox_of(ctx: ToolContext) -> Sandbox:
    """The sandbox this run's settings select (or the default one), made once per workspace."""
    from ...sandbox import get_sandbox
    from ...sandbox.base import Limits

    explicit = ctx.state.get("sandbox")
    if explicit is not None:
        return explicit
    settings = ctx.settings
    if settings is None or not hasattr(settings, "sandbox_memory_mb"):
        return get_sandbox(ctx.workspace)
    image = getattr(settings, "sandbox_image", None)
    return get_sandbox(ctx.workspace, settings.sandbox, Limits.from_settings(settings), image)


def to_result(r: ExecResult) -> ToolResult:
    """The model's view of a run, with the raw facts in `details`."""
    details = {"exit_code": r.exit_code, "reason": r.reason, "duration": round(r.duration, 3),
               "output_path": r.output_path}
    return ToolResult(r.for_model(), is_error=r.reason != "exit", details=details)


def _run_scope(sb: Sandbox, ctx: ToolContext | None) -> contextlib.AbstractContextManager[None]:
    """Charge the call's disk growth to its agent run: the allowance is the run's, across all its calls."""
    if ctx is None or not ctx.run_id:
        return contextlib.nullcontext()
    return charging(run_allowance(ctx.run_id, sb.limits.disk_mb * 2**20, sb.limits.inodes))


def _from_outside(sb: Sandbox, result: ToolResult) -> ToolResult:
    """`result` marked untrusted when the sandbox has the network: what the program printed may be fetched."""
    limits = getattr(sb, "limits", None)
    return replace(result, untrusted=True) if limits is not None and limits.network else result


async def _shell(sb: Sandbox, command: str, ctx: ToolContext | None = None) -> ToolResult:
    with _run_scope(sb, ctx):
        return _from_outside(sb, to_result(await sb.run(["bash", "-c", command])))


async def _run_code(sb: Sandbox, ctx: ToolContext, language: str, code: str, stateful: bool) -> ToolResult:
    with _run_scope(sb, ctx):
        if stateful:
            if language != "python":
                raise ToolError("stateful=true works for python only; run other languages with stateful=false")
            from ...sandbox.stateful import kernel_for

            kernel = kernel_for(sb, ctx.resource_key, ctx.workspace)
            result = to_result(await kernel.execute(code))
            # Outside content an earlier cell (or code mode) put in the interpreter may be in any variable.
            return replace(result, untrusted=True) if kernel.tainted else result
        return _from_outside(sb, to_result(await sb.run_code(language, code)))


@tool(timeout=BACKSTOP)
async def shell(command: str, ctx: ToolContext) -> ToolResult:
    """Run a bash command line in the sandbox. The current directory is the workspace; there is no network.

    Args:
        command: The command line, e.g. 'ls -la' or 'wc -l *.py | tail -1'.
    """
    return await _shell(sandbox_of(ctx), command, ctx)


@tool(timeout=BACKSTOP)
async def run_code(
    language: Literal["python", "bash", "node", "java"], code: str, ctx: ToolContext, stateful: bool = False
) -> ToolResult:
    """Run a program in the sandbox and return its output. The workspace is the current directory.

    Args:
        language: python, bash, node or java (java: a class with a main method).
        code: The complete program.
        stateful: python only: keep variables and imports between calls, like a notebook.
    """
    return await _run_code(sandbox_of(ctx), ctx, language, code, stateful)


def sandbox_tools(sandbox: Sandbox) -> list[Tool]:
    """`shell` and `run_code` bound to `sandbox` (its backend, limits and network setting)."""

    async def bound_shell(command: str, ctx: ToolContext) -> ToolResult:
        return await _shell(sandbox, command, ctx)

    async def bound_run_code(language: str, code: str, ctx: ToolContext, stateful: bool = False) -> ToolResult:
        return await _run_code(sandbox, ctx, language, code, stateful)

    return [
        Tool("shell", shell.description, shell.parameters, bound_shell, timeout=BACKSTOP, context_param="ctx"),
        Tool("run_code", run_code.description, run_code.parameters, bound_run_code, timeout=BACKSTOP,
             context_param="ctx"),
    ]
