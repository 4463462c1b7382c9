"""The `shou` command: `run` a task, `chat`, show `config`, list `sessions` and `tools`.

Exit codes: 0 the run completed; 1 it ended otherwise (max steps, loop, timeout, error); 2 the
command or the configuration is wrong; 130 interrupted.
"""

from __future__ import annotations

import asyncio
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from ..errors import ShouError, UserError

app = typer.Typer(
    name="shou", help="shou (手): an agent that carries a task to the end with tools.",
    no_args_is_help=True, add_completion=False, pretty_exceptions_enable=False,
)
err = Console(stderr=True, highlight=False, soft_wrap=True)


def _mount_subcommands() -> None:
    from .memory import memory_app
    from .trust import trust

    app.add_typer(memory_app, name="memory")
    app.command(name="trust")(trust)


_mount_subcommands()

ModelOpt = Annotated[str | None, typer.Option("--model", "-m", help="Model, as PROVIDER:MODEL or MODEL (SHOU_MODEL).")]
BaseUrlOpt = Annotated[str | None, typer.Option("--base-url", help="Any OpenAI-compatible endpoint (SHOU_BASE_URL).")]
ProviderOpt = Annotated[str | None, typer.Option(
    "--provider", help="openai, deepseek, qwen, ollama, vllm, llamacpp or custom (SHOU_PROVIDER).")]
StepsOpt = Annotated[int | None, typer.Option("--max-steps", help="Most model calls in one run (default 20).")]
WorkspaceOpt = Annotated[Path | None, typer.Option("--workspace", "-w", help="Folder the file tools work in.")]
ToolsOpt = Annotated[str | None, typer.Option("--tools", help="Offer only these tools (comma-separated).")]
SessionOpt = Annotated[str | None, typer.Option("--session", "-s", help="Continue (or start) the named session.")]
FunctionsOpt = Annotated[list[Path] | None, typer.Option(
    "--functions", help="A Python file whose @tool functions are offered too (repeatable).")]
StreamOpt = Annotated[bool | None, typer.Option("--stream/--no-stream", help="Stream the model's output.")]
VisionOpt = Annotated[bool | None, typer.Option(
    "--vision/--no-vision", help="Send images (screenshots) to the model (default: known vision models).")]
SandboxOpt = Annotated[str | None, typer.Option(
    "--sandbox", help="Where shell and run_code run: auto, bubblewrap, docker or local (no isolation).")]


@dataclass
class Options:
    """The flags shared by `run` and `chat`."""

    model: str | None = None
    base_url: str | None = None
    provider: str | None = None
    max_steps: int | None = None
    workspace: Path | None = None
    tools: str | None = None
    functions: list[Path] | None = None
    stream: bool | None = None
    sandbox: str | None = None
    vision: bool | None = None


def fail(message: str, code: int = 2) -> typer.Exit:
    """Print `message` as an error and return the exit to raise."""
    err.print(f"[red]error:[/] {escape(message)}")
    return typer.Exit(code)


def build_agent(opts: Options):  # -> tuple[Agent, Settings]
    """Settings, model, tools and store for a run or chat; raises `ShouError` on a bad setup."""
    from ..agent.agent import Agent
    from ..config import load_settings
    from ..models import get_model
    from ..store.sqlite import SQLiteStore
    from ..tools.builtin import builtin_tools
    from ..tools.loader import load_tools_from_file
    from ..tools.registry import ToolSet

    settings = load_settings({
        "model": opts.model, "base_url": opts.base_url, "provider": opts.provider, "max_steps": opts.max_steps,
        "workspace": opts.workspace, "tools": opts.tools, "stream": opts.stream, "sandbox": opts.sandbox,
        "vision": opts.vision,
    })
    for ignored in settings.ignored:
        err.print(f"[yellow]warning:[/] {escape(ignored.message())}")
    if settings.sandbox == "local":
        from ..sandbox.local import warn_once

        warn_once()  # at start, before any tool call
    if not settings.workspace.is_dir():
        raise UserError(f"workspace {settings.workspace} is not a folder")
    tools = ToolSet(builtin_tools())
    for file in opts.functions or ():
        for t in load_tools_from_file(file):
            tools.add(t)
    if settings.tools is not None:
        tools = tools.only(settings.tools)
    model = get_model(settings=settings)
    from ..context.builder import ContextPolicy
    from ..context.relevance import default_embed
    from ..memory import MemoryStore

    if model.name.startswith("local:") and not settings.model:
        err.print("[dim]Using SmolLM2-135M, a small offline model: it can call a tool for a simple task but "
                  "cannot reason much. For a real model set a key (e.g. DEEPSEEK_API_KEY) or --model; see "
                  "`shou config`.[/]")
    agent = Agent(
        model, tools, max_steps=settings.max_steps, run_timeout=settings.run_timeout,
        tool_timeout=settings.tool_timeout, max_parallel_tools=settings.max_parallel_tools,
        workspace=settings.workspace, store=SQLiteStore.for_workspace(settings.workspace), settings=settings,
        vision=settings.vision, memory=MemoryStore.for_workspace(settings.workspace),
        context=ContextPolicy(embed=default_embed()),
    )
    return agent, settings


@app.command()
def run(
    task: Annotated[str, typer.Argument(help="What to do. Use - to read it from stdin.")],
    model: ModelOpt = None, base_url: BaseUrlOpt = None, provider: ProviderOpt = None, max_steps: StepsOpt = None,
    workspace: WorkspaceOpt = None, tools: ToolsOpt = None, session: SessionOpt = None,
    functions: FunctionsOpt = None, stream: StreamOpt = None, sandbox: SandboxOpt = None, vision: VisionOpt = None,
    json_lines: Annotated[bool, typer.Option("--json", help="Print every event as a JSON line.")] = False,
) -> None:
    """Carry out TASK with the model and tools, streaming what happens, then print a summary."""
    from .render import Renderer

    if task == "-":
        task = sys.stdin.read()
    if not task.strip():
        raise fail("the task is empty")
    opts = Options(model, base_url, provider, max_steps, workspace, tools, functions, stream, sandbox, vision)
    try:
        agent, _ = build_agent(opts)
    except ShouError as e:
        raise fail(str(e)) from None
    render = Renderer(json_lines=json_lines)
    try:
        status = asyncio.run(_run_once(agent, task, session, render))
    except KeyboardInterrupt:
        err.print("[yellow]interrupted[/]")
        raise typer.Exit(130) from None
    finally:
        if agent.store is not None:
            agent.store.close()
    raise typer.Exit(0 if status == "completed" else 1)


async def _run_once(agent, task: str, session: str | None, render) -> str:
    status = "error"
    try:
        async for event in agent.stream(task, session):
            render(event)
            if event.type == "run_finished":
                status = event.status
    finally:
        await close_resources(agent)
    return status


async def close_resources(agent) -> None:
    """Close what a run may have opened: the model's connections, browsers (only if one was imported)."""
    await agent.model.aclose()
    if "shou.tools.builtin.browser" in sys.modules:
        from ..tools.builtin.browser import close_browsers

        await close_browsers()


@app.command()
def chat(
    model: ModelOpt = None, base_url: BaseUrlOpt = None, provider: ProviderOpt = None, max_steps: StepsOpt = None,
    workspace: WorkspaceOpt = None, tools: ToolsOpt = None, session: SessionOpt = None,
    functions: FunctionsOpt = None, stream: StreamOpt = None, sandbox: SandboxOpt = None, vision: VisionOpt = None,
) -> None:
    """Talk with the agent turn by turn (/help lists the commands)."""
    from .repl import run_repl

    opts = Options(model, base_url, provider, max_steps, workspace, tools, functions, stream, sandbox, vision)
    try:
        agent, settings = build_agent(opts)
    except ShouError as e:
        raise fail(str(e)) from None
    try:
        asyncio.run(run_repl(agent, settings, session))
    finally:
        if agent.store is not None:
            agent.store.close()


@app.command()
def config(
    model: ModelOpt = None, base_url: BaseUrlOpt = None, provider: ProviderOpt = None,
    workspace: WorkspaceOpt = None,
) -> None:
    """Show the effective settings, where each came from, and the model they select (secrets masked)."""
    from ..config import describe, load_settings, mask, redact_urls, resolve_model

    try:
        settings = load_settings({"model": model, "base_url": base_url, "provider": provider, "workspace": workspace})
    except ShouError as e:
        raise fail(str(e)) from None
    out = Console(highlight=False)
    table = Table("setting", "value", "from", box=None)
    for name, value, source in describe(settings):
        table.add_row(name, escape(value), escape(source))
    out.print(table)
    for ignored in settings.ignored:
        out.print(f"\n[yellow]{escape(ignored.message())}[/]")
    if settings.model and settings.model.startswith("scripted:"):
        out.print(f"\nmodel: scripted model replaying {escape(settings.model[9:])}")
        return
    try:
        cfg = resolve_model(settings)
    except ShouError as e:
        out.print(f"\n[yellow]{escape(str(e))}[/]")
        return
    out.print(f"\nmodel: {escape(cfg.provider)}:{escape(cfg.model)} at {escape(redact_urls(cfg.base_url))}, "
              f"key {mask(cfg.api_key)} (from {cfg.key_setting})")


@app.command()
def sessions(workspace: WorkspaceOpt = None) -> None:
    """List the sessions stored in the workspace, newest first."""
    import time

    from ..store.sqlite import SQLiteStore
    from ..workspace import state_database

    root = (workspace or Path.cwd()).resolve()
    if not (root / ".shou" / "shou.db").exists():
        err.print(f"no sessions yet in {root}")
        return
    try:
        db = state_database(root, "shou.db")
    except ShouError as e:
        raise fail(str(e)) from None
    with SQLiteStore(db) as store:
        table = Table("session", "runs", "updated", "first task", box=None)
        for info in store.sessions():
            updated = time.strftime("%Y-%m-%d %H:%M", time.localtime(info.updated))
            table.add_row(escape(info.name), str(info.runs), updated, escape(info.title[:60]))
        Console(highlight=False).print(table)


@app.command(name="tools")
def list_tools(functions: FunctionsOpt = None) -> None:
    """List the tools a run can offer the model."""
    from ..tools.builtin import builtin_tools
    from ..tools.loader import load_tools_from_file

    found = builtin_tools()
    try:
        for file in functions or ():
            found.extend(load_tools_from_file(file))
    except ShouError as e:
        raise fail(str(e)) from None
    out = Console(highlight=False)
    for t in found:
        out.print(f"[cyan]{t.name}[/]  {escape(t.description.splitlines()[0] if t.description else '')}")


@app.command()
def doctor() -> None:
    """Check which sandbox backends and runtimes work on this machine, and why not."""
    from ..sandbox import diagnose

    out = Console(highlight=False)
    table = Table("sandbox backend", "works", "why", box=None)
    for backend, ok, why in diagnose():
        table.add_row(backend, "[green]yes[/]" if ok else "[red]no[/]", escape(why))
    out.print(table)
    from ..memory import memory_status
    from ..models.local import local_available

    extras = Table("part", "state", "why", box=None)
    ok, why = memory_status()
    extras.add_row("memory search", "[green]hybrid[/]" if ok else "[yellow]BM25 only[/]", escape(why))
    ok, why = local_available()
    extras.add_row("offline model", "[green]yes[/]" if ok else "[yellow]no[/]", escape(why))
    out.print(extras)
    try:
        from ..sandbox import get_sandbox

        sb = get_sandbox(Path.cwd())
    except ShouError as e:
        out.print(f"[yellow]{escape(str(e))}[/]")
        return
    checks = {"python": "import sys; print(sys.version.split()[0])", "bash": "echo $BASH_VERSION",
              "node": "console.log(process.version)",
              "java": "public class Main { public static void main(String[] a) "
                      "{ System.out.println(System.getProperty(\"java.version\")); } }"}

    async def probe() -> list[tuple[str, str]]:
        rows = []
        for lang, code in checks.items():
            r = await sb.run_code(lang, code)
            rows.append((lang, r.stdout.strip() if r.ok else f"[red]fails[/]: {escape(r.for_model()[:200])}"))
        return rows

    runtimes = Table(f"language (in {sb.name})", "version", box=None)
    for lang, version in asyncio.run(probe()):
        runtimes.add_row(lang, version)
    out.print(runtimes)


def main() -> None:
    """Console-script entry point."""
    app()
