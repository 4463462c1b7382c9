"""`shou run TASK` and `shou resume [SESSION]`: one run, its events shown as they happen, a summary.

SIGINT, SIGTERM and SIGHUP all stop a run the same way: it is cancelled, its unfinished calls get an
answer, and it is recorded as `cancelled` before the process exits with 128 + the signal's number. A signal
after the run finished changes nothing: the exit code is the run's (cli/stopping.py).
"""

from __future__ import annotations

import asyncio
import signal
import sys
from pathlib import Path
from typing import Annotated, Any

import typer

from ..errors import ShouError
from ..markup import escape
from ..store.sqlite_errors import StoreUnusable
from .build import (
    ApprovalsOpt,
    BaseUrlOpt,
    CodeOpt,
    ContinueOpt,
    FunctionsOpt,
    MaxCostOpt,
    ModelOpt,
    OptionOpt,
    Options,
    OtelOpt,
    PlanOpt,
    ProviderOpt,
    ReflectOpt,
    SandboxOpt,
    SessionOpt,
    StepsOpt,
    StreamOpt,
    TokenBudgetOpt,
    ToolsOpt,
    VisionOpt,
    YesOpt,
    build_agent,
    close_resources,
    continued,
)
from .common import WorkspaceOpt, err, fail, utf8_text
from .stopping import StopSignals


class RunStopped(StoreUnusable):
    """The run stopped part-way because its log could not be written; `shou resume` continues it."""


JsonOpt = Annotated[bool, typer.Option("--json", help="Print every event as a JSON line.")]
OutputSchemaOpt = Annotated[Path | None, typer.Option(
    "--output-schema", metavar="FILE.json", help="A typed answer: the final answer must be JSON matching this JSON "
    "schema (retried with the errors, else the run ends invalid_output); stdout gets that JSON alone.")]


def run(
    task: Annotated[list[str], typer.Argument(
        metavar="TASK", help="What to do. Use - to read it from stdin; /NAME ARGS... runs a custom command "
        "(`shou commands`).")],
    model: ModelOpt = None, base_url: BaseUrlOpt = None, provider: ProviderOpt = None, max_steps: StepsOpt = None,
    workspace: WorkspaceOpt = None, tools: ToolsOpt = None, session: SessionOpt = None,
    functions: FunctionsOpt = None, stream: StreamOpt = None, sandbox: SandboxOpt = None, vision: VisionOpt = None,
    option: OptionOpt = None, yes: YesOpt = False, approvals: ApprovalsOpt = None,
    max_cost: MaxCostOpt = None, token_budget: TokenBudgetOpt = None, otel: OtelOpt = False,
    json_lines: JsonOpt = False, continue_: ContinueOpt = False, plan: PlanOpt = False, reflect: ReflectOpt = False,
    code: CodeOpt = False, output_schema: OutputSchemaOpt = None,
) -> None:
    """Carry out TASK with the model and tools, streaming what happens, then print a summary."""
    from .commands import command_task

    typed = _output_schema(output_schema) if output_schema is not None else None
    text, positional = _task_words(task)
    session = continued(session, continue_, workspace)
    opts = Options(model, base_url, provider, max_steps, workspace, tools, functions, stream, sandbox, vision,
                   option, yes, approvals, max_cost, token_budget, otel, plan, reflect, code)

    def start(agent: Any) -> Any:
        if typed is not None:
            agent.output_type = typed
        prompt, runner = command_task(agent, text, positional)
        return runner.stream(prompt, session)

    _execute(opts, json_lines, start, typed=typed is not None)


def _output_schema(path: Path) -> Any:
    """The JSON schema in `path` as an output type, or a clear error: unreadable, not JSON, not a schema."""

    from ..agent.output import JsonSchema, output_spec
    from ..jsonfile import load_json

    try:
        schema = load_json(path.read_bytes())  # nested too deep: "not JSON (...)", not a RecursionError
    except OSError as e:
        raise fail(f"--output-schema: cannot read {str(path)!r}: {e.strerror or e}") from None
    except ValueError as e:
        raise fail(f"--output-schema: {str(path)!r} is not JSON: {e}") from None
    if not isinstance(schema, dict):
        raise fail(f"--output-schema: {str(path)!r} holds no JSON schema (an object), but a {type(schema).__name__}")
    typed = JsonSchema(schema, path.stem)
    try:
        output_spec(typed)
    except ShouError as e:
        raise fail(f"--output-schema: {e}") from None
    return typed


def _task_words(words: list[str]) -> tuple[str, list[str] | None]:
    """The task, and a command's arguments when they came as words of their own (`shou run /review a.py b`)."""
    from ..instructions.commands import invocation

    if len(words) == 1:
        return _read_task(words[0]), None
    first = words[0]
    if invocation(first) is None or len(first.split()) > 1:
        raise fail(f"TASK is one argument: quote it ({len(words)} arguments came); only a custom command takes "
                   "more, as in shou run /NAME ARG ...")
    for word in words:
        try:
            word.encode("utf-8")
        except UnicodeEncodeError as e:  # argv bytes that were not UTF-8 arrive as lone surrogates
            raise fail(f"an argument is not valid UTF-8 (at character {e.start}); pass it as UTF-8 text") from None
    return " ".join(words), list(words[1:])


def resume(
    session: Annotated[str | None, typer.Argument(
        metavar="SESSION", callback=utf8_text,
        help="The session whose run to continue (default: the workspace's most recent unfinished run).")] = None,
    model: ModelOpt = None, base_url: BaseUrlOpt = None, provider: ProviderOpt = None, max_steps: StepsOpt = None,
    workspace: WorkspaceOpt = None, tools: ToolsOpt = None, functions: FunctionsOpt = None,
    stream: StreamOpt = None, sandbox: SandboxOpt = None, vision: VisionOpt = None,
    option: OptionOpt = None, yes: YesOpt = False, approvals: ApprovalsOpt = None,
    max_cost: MaxCostOpt = None, token_budget: TokenBudgetOpt = None, otel: OtelOpt = False,
    json_lines: JsonOpt = False, output_schema: OutputSchemaOpt = None,
) -> None:
    """Continue a run whose process was killed, from its first unfinished step.

    Finished tool calls never run again; a call that was running when the process died is reported to the
    model as interrupted (its outcome unknown), unless its tool is idempotent, which runs again. A typed run
    is resumed with its `--output-schema` given again.
    """
    typed = _output_schema(output_schema) if output_schema is not None else None
    opts = Options(model, base_url, provider, max_steps, workspace, tools, functions, stream, sandbox, vision,
                   option, yes, approvals, max_cost, token_budget, otel)

    def start(agent: Any) -> Any:
        name = session
        if name is None:
            unfinished = [s for s in agent.store.unfinished() if not agent.store.is_locked(s)]
            if not unfinished:
                raise ShouError(f"no unfinished run to resume in {agent.workspace} (`shou sessions` lists them)")
            name = unfinished[0]
            err.print(f"[dim]resuming session {escape(name)}[/]")
        if typed is not None:
            agent.output_type = typed
        return agent.stream_resume(name)

    _execute(opts, json_lines, start, typed=typed is not None)


def _read_task(task: str) -> str:
    if task == "-":
        raw = sys.stdin.buffer.read()
        try:
            task = raw.decode("utf-8")
        except UnicodeDecodeError as e:
            raise fail(f"the task on stdin is not valid UTF-8 (byte {raw[e.start]:#04x} at offset {e.start}); "
                       "convert it first, e.g. with iconv") from None
    try:
        task.encode("utf-8")
    except UnicodeEncodeError as e:  # argv bytes that were not UTF-8 arrive as lone surrogates
        raise fail(f"the task is not valid UTF-8 (at character {e.start}); pass it as UTF-8 text") from None
    if not task.strip():
        raise fail("the task is empty")
    return task


def _execute(opts: Options, json_lines: bool, start: Any, *, typed: bool = False) -> None:
    from .render import Renderer

    try:
        agent, _ = build_agent(opts)
    except ShouError as e:
        raise fail(str(e)) from None
    render = Renderer(json_lines=json_lines, typed=typed)
    stopped: list[int] = []
    try:
        status = asyncio.run(_consume(agent, start, render, stopped))
    except RunStopped as e:
        raise fail(str(e), 1) from None
    except ShouError as e:
        raise fail(str(e)) from None
    except (KeyboardInterrupt, asyncio.CancelledError):
        stopped = stopped or [signal.SIGINT]
        status = "cancelled"
    finally:
        if agent.store is not None:
            agent.store.close()
    if stopped:
        err.print(f"[yellow]stopped by {signal.Signals(stopped[0]).name}[/]")
        raise typer.Exit(128 + stopped[0])
    raise typer.Exit(0 if status == "completed" else 1)


async def _consume(agent: Any, start: Any, render: Any, stopped: list[int]) -> str:
    """Show the run's events; a stopping signal cancels it (the run records itself `cancelled`)."""
    status = "error"
    main = asyncio.current_task()
    loop = asyncio.get_running_loop()

    def stop(signum: int) -> None:
        stopped.append(signum)
        if main is not None:
            main.cancel()

    started = False
    with StopSignals(loop, stop) as signals:
        try:
            async for event in start(agent):
                started = True
                if event.type == "run_finished":  # over before anyone is shown it: no signal can stop it now
                    status = event.status
                    signals.finished()
                render(event)
        except StoreUnusable as e:
            if not started:
                raise
            raise RunStopped(f"{e}. The run stopped; its log holds every step up to here: once that is fixed, "
                             "`shou resume` continues it", e.path, e.cause) from None
        except asyncio.CancelledError:
            if not stopped:
                raise
            return "cancelled"
        finally:
            await close_resources(agent)
    return status
