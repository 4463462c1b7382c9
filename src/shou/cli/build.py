"""What `run`, `resume` and `chat` share: their flags, and building the agent from settings."""

from __future__ import annotations

import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console
from rich.markup import escape

from ..errors import UserError

err = Console(stderr=True, highlight=False, soft_wrap=True)

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
    store = SQLiteStore.for_workspace(settings.workspace)
    if store.notice:
        err.print(f"[yellow]warning:[/] {escape(store.notice)}")
    try:
        memory = MemoryStore.for_workspace(settings.workspace)
    except Exception as e:  # a damaged memory file must not stop the run: it goes without long-term memory
        err.print(f"[yellow]warning:[/] long-term memory is off for this run: {escape(str(e))}")
        memory = None
    agent = Agent(
        model, tools, max_steps=settings.max_steps, run_timeout=settings.run_timeout,
        tool_timeout=settings.tool_timeout, max_parallel_tools=settings.max_parallel_tools,
        workspace=settings.workspace, store=store, settings=settings,
        vision=settings.vision, memory=memory,
        context=ContextPolicy(embed=default_embed()),
    )
    return agent, settings


async def close_resources(agent) -> None:
    """Close what a run may have opened: the model's connections, browsers (only if one was imported)."""
    await agent.model.aclose()
    if "shou.tools.builtin.browser" in sys.modules:
        from ..tools.builtin.browser import close_browsers

        await close_browsers()
