"""`shou skills`: the Agent Skills a run would get, and why any is skipped.

Lists every skill folder looked at, in the workspace's `.agents/skills/` (those you trusted with `shou trust`) and the
user's `skills/` folder beside their shou.toml: its name, whether it is valid (or the reason it is skipped,
or that a workspace skill overrides it), where it comes from and its path. `--json` gives scripts the same.
"""

from __future__ import annotations

import json
from typing import Annotated

import typer
from rich.console import Console
from rich.table import Table

from ..errors import ShouError
from ..markup import escape
from .common import WorkspaceOpt, err, fail
from .render import printable

JsonOpt = Annotated[bool, typer.Option("--json", help="Print JSON for scripts.")]


def skills(workspace: WorkspaceOpt = None, json_out: JsonOpt = False) -> None:
    """List the skills (.agents/skills/ of the workspace, as trusted with `shou trust`; skills/ in the user's
    config folder) and whether each is valid."""
    from ..config import load_settings
    from ..skills import discover, user_skills_dir

    try:
        settings = load_settings({"workspace": workspace})
        found = discover(settings)
    except ShouError as e:
        raise fail(str(e)) from None
    for notice in found.notices:  # about whole folders (an untrusted workspace); skipped skills are rows below
        err.print(f"[yellow]warning:[/] {escape(printable(notice))}")
    if json_out:
        typer.echo(json.dumps([{"name": s.name, "status": s.status, "valid": s.valid, "source": s.source,
                                "path": str(s.path), "description": s.description} for s in found.listed],
                              ensure_ascii=False))
        return
    if not found.listed:
        err.print(f"no skills: put them in {settings.workspace / '.agents' / 'skills'}/NAME/SKILL.md (then "
                  f"`shou trust`) or {user_skills_dir(settings)}/NAME/SKILL.md")
        return
    table = Table("skill", "status", "source", box=None)
    table.add_column("path", overflow="fold")
    for s in found.listed:
        status = "[green]valid[/]" if s.valid else f"[yellow]{escape(printable(s.status))}[/]"
        table.add_row(escape(printable(s.name)), status, s.source, escape(printable(str(s.path))))
    Console(highlight=False).print(table)
