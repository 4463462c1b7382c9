"""The `shou` command: `run` a task, `resume` a killed one, `chat`, show `config`, list `sessions` and `tools`.

Exit codes: 0 the run completed; 1 it ended otherwise (max steps, loop, timeout, error); 2 the
command or the configuration is wrong; 128 + the signal's number when SIGINT, SIGTERM or SIGHUP stopped
it (130 for Ctrl-C).
"""

from __future__ import annotations

import asyncio
import importlib
from pathlib import Path
from typing import Annotated

import click
import typer
import typer.main
from rich.console import Console
from rich.table import Table
from typer.core import TyperGroup
from typer.models import CommandInfo

from ..errors import ShouError
from ..markup import escape
from .build import (
    ApprovalsOpt,
    BaseUrlOpt,
    ContinueOpt,
    FunctionsOpt,
    MaxCostOpt,
    ModelOpt,
    OptionOpt,
    Options,
    OtelOpt,
    ProviderOpt,
    SandboxOpt,
    SessionOpt,
    StepsOpt,
    StreamOpt,
    TokenBudgetOpt,
    ToolsOpt,
    VisionOpt,
    YesOpt,
    build_agent,
    continued,
)
from .common import WorkspaceOpt, fail

# The subcommands that live in modules of their own, in the order `shou --help` lists them: (module, name in
# it). They are imported when a command line names one (or help lists them all), not when `shou` starts, so a
# command pays for its own module only (a new command costs the others nothing; their modules already import
# their heavy parts lazily, so today the saving is a few milliseconds).
_LAZY: dict[str, tuple[str, str]] = {
    "run": ("runs", "run"), "resume": ("runs", "resume"), "sessions": ("sessions", "sessions"),
    "show": ("sessions", "show"), "fork": ("sessions", "fork"),
    "skills": ("skills", "skills"), "commands": ("commands", "commands"),
    "approvals": ("approve", "approvals"), "approve": ("approve", "approve"), "deny": ("approve", "deny"),
    "answer": ("answer", "answer_command"),
    "memory": ("memory", "memory_app"), "mcp": ("mcp", "mcp_app"), "a2a": ("a2a", "a2a_app"),
    "trust": ("trust", "trust"), "trace": ("trace", "trace"), "usage": ("trace", "usage"),
    "serve": ("serve", "serve"), "eval": ("evals", "eval_command"), "batch": ("evals", "batch"),
    "undo": ("undo", "undo"), "diff": ("undo", "diff"),
}


class _LazyGroup(TyperGroup):
    """The `shou` group: the commands of `_LAZY` are built from their modules the first time they are asked for."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        return [*(name for name in _LAZY if name not in self.commands), *super().list_commands(ctx)]

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        command = super().get_command(ctx, cmd_name)
        if command is None and cmd_name in _LAZY:
            command = _load(cmd_name)
            self.add_command(command, cmd_name)
        return command


def _load(name: str) -> click.Command:
    """The click command (or group) `name` of `_LAZY`, built as typer would have built it at start-up."""
    module, attr = _LAZY[name]
    target = getattr(importlib.import_module(f"{__package__}.{module}"), attr)
    if isinstance(target, typer.Typer):
        group = typer.main.get_group(target)
        group.name = name
        return group
    return typer.main.get_command_from_info(CommandInfo(callback=target, name=name),
                                           pretty_exceptions_short=app.pretty_exceptions_short,
                                           rich_markup_mode=app.rich_markup_mode)


app = typer.Typer(
    name="shou", cls=_LazyGroup, help="shou (手): an agent that carries a task to the end with tools.",
    no_args_is_help=True, add_completion=False, pretty_exceptions_enable=False, rich_markup_mode=None,
)


def _version(value: bool) -> None:
    if value:
        from importlib.metadata import version

        typer.echo(f"shou {version('shou')}")
        raise typer.Exit()


@app.callback()
def _main(
    version: Annotated[bool, typer.Option("--version", "-V", callback=_version, is_eager=True,
                                          help="Print shou's version and exit.")] = False,
) -> None:
    """shou (手): an agent that carries a task to the end with tools."""


@app.command()
def chat(
    model: ModelOpt = None, base_url: BaseUrlOpt = None, provider: ProviderOpt = None, max_steps: StepsOpt = None,
    workspace: WorkspaceOpt = None, tools: ToolsOpt = None, session: SessionOpt = None,
    functions: FunctionsOpt = None, stream: StreamOpt = None, sandbox: SandboxOpt = None, vision: VisionOpt = None,
    option: OptionOpt = None, yes: YesOpt = False, approvals: ApprovalsOpt = None,
    max_cost: MaxCostOpt = None, token_budget: TokenBudgetOpt = None, otel: OtelOpt = False,
    continue_: ContinueOpt = False,
) -> None:
    """Talk with the agent turn by turn (/help lists the commands)."""
    from .repl import run_repl

    session = continued(session, continue_, workspace)
    opts = Options(model, base_url, provider, max_steps, workspace, tools, functions, stream, sandbox, vision,
                   option, yes, approvals, max_cost, token_budget, otel)
    try:
        agent, settings = build_agent(opts)
    except ShouError as e:
        raise fail(str(e)) from None
    try:
        asyncio.run(run_repl(agent, settings, session))
    except ShouError as e:  # the session is busy, say
        raise fail(str(e)) from None
    finally:
        if agent.store is not None:
            agent.store.close()


@app.command()
def config(
    model: ModelOpt = None, base_url: BaseUrlOpt = None, provider: ProviderOpt = None,
    workspace: WorkspaceOpt = None,
) -> None:
    """Show the effective settings, where each came from, and the model they select (secrets masked)."""
    from ..config import describe, load_settings, mask, resolve_model, shown_url

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
    out.print(f"\nmodel: {escape(cfg.provider)}:{escape(cfg.model)} at {escape(shown_url(cfg.base_url))}, "
              f"key {mask(cfg.api_key)} (from {cfg.key_setting})")


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
    table = Table("tool", "what it does", box=None, show_lines=False)
    for t in found:
        table.add_row(f"[cyan]{escape(t.name)}[/]", escape(_first_paragraph(t.description)))
    Console(highlight=False).print(table)


def _first_paragraph(text: str) -> str:
    """A tool description's opening paragraph on one line: whole sentences, never cut mid-way."""
    return " ".join((text or "").strip().split("\n\n", 1)[0].split())


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
    import sys

    from .build import join_option_pairs, startup_gc

    for stream in (sys.stdout, sys.stderr):
        # Text no UTF-8 encodes (a file name's undecodable bytes) shown as `?`, as `ls` does, not a traceback:
        # what shou prints comes from the workspace, tools and models, and a strict stream would end the command.
        if getattr(stream, "errors", None) == "strict" and hasattr(stream, "reconfigure"):
            stream.reconfigure(errors="replace")
    args = join_option_pairs(sys.argv[1:])
    with startup_gc(bool(args) and args[0] in ("run", "resume", "chat")):
        app(args=args, prog_name="shou")
