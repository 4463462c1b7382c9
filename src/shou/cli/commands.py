"""Custom commands in the CLI: `shou commands` lists them, and `/NAME args` (in `shou chat`, or as `shou run`'s
TASK) becomes the task its template makes, run with the tools its front matter leaves (shou.instructions.commands).

A task that starts with `/NAME` (a name, not a path such as `/etc/hosts`) is a command: an unknown or refused
one is an error, never sent to the model as it is. `//` at the start sends the rest as text (`//tmp is full`
is the task `/tmp is full`).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer
from rich.console import Console
from rich.table import Table

from ..errors import ShouError, UserError
from ..markup import escape
from .common import WorkspaceOpt, err, fail
from .render import printable

if TYPE_CHECKING:
    from ..agent.agent import Agent
    from ..instructions.commands import Command, CommandSet

JsonOpt = Annotated[bool, typer.Option("--json", help="Print JSON for scripts.")]


def commands(workspace: WorkspaceOpt = None, json_out: JsonOpt = False) -> None:
    """List the custom commands (/NAME): .agents/commands/NAME.md of the workspace (run once trusted with `shou
    trust`) and commands/NAME.md in your config folder."""
    from ..config import load_settings
    from ..instructions.commands import discover, user_commands_dir

    try:
        settings = load_settings({"workspace": workspace})
        found = discover(settings.workspace, settings.env)
    except ShouError as e:
        raise fail(str(e)) from None
    if json_out:
        typer.echo(json.dumps([{"name": c.name, "status": c.status, "valid": c.valid, "source": c.source,
                                "path": str(c.path), "description": c.description} for c in found.listed],
                              ensure_ascii=False))
        return
    if not found.listed:
        err.print(f"no commands: put them in {Path(settings.workspace) / '.agents' / 'commands'}/NAME.md (then "
                  f"`shou trust`) or {user_commands_dir(settings.env)}/NAME.md")
        return
    table = Table("command", "status", "source", "description", box=None)
    table.add_column("path", overflow="fold")
    for c in found.listed:
        status = "[green]valid[/]" if c.valid else f"[yellow]{escape(printable(c.status))}[/]"
        table.add_row(f"/{escape(c.name)}", status, c.source, escape(printable(c.description)),
                      escape(printable(str(c.path))))
    Console(highlight=False).print(table)


def available(agent: Agent) -> CommandSet:
    """The commands of the agent's workspace and user (files are read anew: they may have changed)."""
    from ..instructions.commands import discover

    return discover(agent.workspace, getattr(agent.settings, "env", None))


def command_task(agent: Agent, text: str, positional: Sequence[str] | None = None) -> tuple[str, Agent]:
    """The task `text` stands for and the agent to run it: a command's expansion, with its tools narrowed
    (`positional`: its arguments as separate words, when they came so); other text as it is. `ShouError`
    for an unknown or refused command."""
    from ..instructions.commands import invocation

    if text.startswith("//"):
        return text[1:], agent
    called = invocation(text)
    if called is None:
        return text, agent
    name, arguments = called
    found = available(agent)
    if name not in found.commands and name not in found.refused:
        known = ", ".join(f"/{n}" for n in sorted(found.commands))
        raise UserError(f"there is no command /{name}" + (f" (the commands: {known})" if known else "")
                        + "; text that starts with / is sent as it is when it begins with //")
    command = found.get(name)  # a refused one: UserError saying why (not trusted, invalid)
    return command.expand(arguments, positional), narrowed(agent, command)


def narrowed(agent: Agent, command: Command) -> Agent:
    """`agent` with only the tools the command's `allowed-tools` names (of those it has): never more."""
    if command.allowed_tools is None:
        return agent
    from ..tools.registry import ToolSet

    allowed = set(command.allowed_tools)
    config = agent.config
    changes: dict[str, Any] = {"tools": ToolSet(t for t in config.tools if t.name in allowed)}
    if "use_skill" not in allowed:
        changes["skills"] = None
    if "delegate" not in allowed:
        changes["delegation"] = False
    return agent.variant(replace(config, **changes))


def help_lines(agent: Agent) -> list[str]:
    """What `/help` adds about the custom commands (rich markup, escaped)."""
    found = available(agent)
    if not found.listed:
        return ["No custom commands: add .agents/commands/NAME.md (then `shou trust`) or NAME.md in commands/ "
                "of your config folder."]
    lines = ["Custom commands (/NAME arguments):"]
    for c in found.listed:
        command = found.commands.get(c.name)
        if c.valid and command is not None:
            hint = f" {command.argument_hint}" if command.argument_hint else ""
            lines.append(f"  /{escape(c.name)}{escape(printable(hint))}  {escape(printable(c.description))}"
                         f"  [dim]({c.source})[/]")
        else:
            lines.append(f"  [yellow]/{escape(c.name)}  not run: {escape(printable(c.status))}[/]"
                         f"  [dim]({c.source})[/]")
    return lines
