"""`shou a2a card NAME|URL`: a remote A2A agent's card, and what shou would use of it.
`shou a2a list`: the agents of `[a2a_agents.NAME]`, and whether each one's card can be read.

A NAME is one of the configured agents (its URL and headers from the settings); a URL is read with the
headers given by `--header` (for an agent whose card needs a key). Either way the card is read as a call
reads it (shou.a2a.card: bounded, the configured address only) and printed as the agent wrote it, followed
by the endpoints shou would send to, or why it would send to none. shou serves A2A itself from `shou serve`
(its card at `/.well-known/agent-card.json`): a single agent is a `shou serve` with its tokens, so there is
no separate `shou a2a serve`.
"""

from __future__ import annotations

import asyncio
from typing import Annotated, Any

import typer
from rich.console import Console
from rich.table import Table

from ..errors import ShouError
from ..markup import escape
from .common import WorkspaceOpt, err, fail
from .render import json_text, printable, short

a2a_app = typer.Typer(help="Remote A2A agents: read their cards.", no_args_is_help=True)
JsonOpt = Annotated[bool, typer.Option("--json", help="Print JSON for scripts.")]
HeaderOpt = Annotated[list[str] | None, typer.Option(
    "--header", "-H", help="A header to send with a URL, as 'Name: value' (repeatable).")]


def _specs(workspace: Any) -> tuple[Any, dict[str, Any]]:
    from ..a2a.spec import remote_specs
    from ..config import load_settings

    try:
        settings = load_settings({"workspace": workspace})
        specs = remote_specs(settings.a2a_agents)
    except ShouError as e:
        raise fail(str(e)) from None
    for ignored in settings.ignored:
        if "a2a_agents" in ignored.names:
            err.print(f"[yellow]warning:[/] {escape(str(ignored.path))} names A2A agents, but it is not trusted: "
                      "they are ignored (`shou trust` to allow them)")
    return settings, specs


def _spec_for(target: str, headers: list[str], specs: dict[str, Any]) -> Any:
    from ..a2a.spec import RemoteAgentSpec

    if target in specs:
        return specs[target]
    if not target.startswith(("http://", "https://")):
        raise fail(f"{target!r} is neither a configured A2A agent ([a2a_agents.NAME]) nor an http(s) URL")
    pairs = {}
    for header in headers:
        name, colon, value = header.partition(":")
        if not colon or not name.strip():
            raise fail(f"--header {header!r}: give it as 'Name: value'")
        pairs[name.strip()] = value.strip()
    return RemoteAgentSpec.from_table("card", {"url": target, "headers": pairs, "timeout": 30.0})


def card(
    target: Annotated[str, typer.Argument(help="A configured agent's NAME, or the agent's URL.")],
    header: HeaderOpt = None, workspace: WorkspaceOpt = None, json_out: JsonOpt = False,
) -> None:
    """Print a remote agent's card and the endpoints shou would use."""
    from ..a2a.card import CardError, card_json, read_card, usable
    from ..known_secrets import secrets_of
    from ..redact import Redactor

    settings, specs = _specs(workspace)
    spec = _spec_for(target, header or [], specs)
    hide = Redactor([*secrets_of(settings), *spec.secrets()])  # a message may quote the URL or a header
    try:
        raw = asyncio.run(read_card(spec))
    except CardError as e:
        raise fail(hide.text(str(e))) from None
    try:
        used, why = [i.url for i in usable(raw, spec).supported_interfaces], ""
    except CardError as e:
        used, why = [], hide.text(str(e))
    if json_out:
        typer.echo(json_text({"card": card_json(raw), "endpoints": used, "problem": why or None}))
        return
    out = Console(highlight=False, soft_wrap=True)
    out.print(f"[bold]{escape(printable(raw.name))}[/] {escape(printable(raw.version))}")
    out.print(escape(printable(raw.description)))
    for skill in raw.skills:
        out.print(f"  • {escape(printable(skill.name or skill.id))}: {escape(short(skill.description, 300))}")
    out.print(f"streaming: {'yes' if raw.capabilities.streaming else 'no'}")
    for interface in raw.supported_interfaces:
        mark = "[green]used[/]" if interface.url in used else "[dim]not used[/]"
        out.print(f"  {escape(printable(interface.protocol_binding))} {escape(printable(interface.url))} {mark}")
    if why:
        err.print(f"[red]{escape(printable(why))}[/]")
        raise typer.Exit(1)


def list_agents(workspace: WorkspaceOpt = None, json_out: JsonOpt = False) -> None:
    """Read each configured agent's card and list whether it can be used."""
    from ..a2a.card import CardError, fetch_card
    from ..known_secrets import secrets_of
    from ..redact import Redactor

    settings, specs = _specs(workspace)
    hide = Redactor(secrets_of(settings))

    async def probe(spec: Any) -> dict[str, Any]:
        try:
            found = await fetch_card(spec)
        except CardError as e:
            return {"name": spec.name, "where": spec.where, "ok": False, "error": str(e), "skills": []}
        return {"name": spec.name, "where": spec.where, "ok": True, "error": None,
                "skills": [s.name or s.id for s in found.skills]}

    async def probe_all() -> list[dict[str, Any]]:
        return list(await asyncio.gather(*(probe(s) for s in specs.values())))

    rows = [hide.value(row) for row in asyncio.run(probe_all())]
    if json_out:
        typer.echo(json_text(rows))
        return
    if not rows:
        err.print("no A2A agents: name them under [a2a_agents.NAME] in shou.toml (url, headers)")
        return
    table = Table("agent", "where", "status", box=None)
    table.add_column("skills", overflow="fold")
    for row in rows:
        status = "[green]ok[/]" if row["ok"] else f"[red]{escape(short(row['error'] or 'failed', 200))}[/]"
        table.add_row(escape(printable(row["name"])), escape(row["where"]), status,
                      escape(printable(", ".join(row["skills"]))))
    Console(highlight=False).print(table)


a2a_app.command(name="card")(card)
a2a_app.command(name="list")(list_agents)
