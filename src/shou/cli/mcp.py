"""`shou mcp list`: the MCP servers of the settings, whether each starts, and the tools it offers.
`shou mcp serve`: this workspace's agent as an MCP server (shou.serve.mcp_server), over stdio or `--http PORT`.

Servers come from `[mcp_servers.NAME]` in the user's shou.toml, a trusted workspace's shou.toml, or
`SHOU_MCP_SERVERS`; a workspace that is not trusted cannot name one (they are commands), and the command
says so when its shou.toml tried.
"""

from __future__ import annotations

import asyncio
import os
import secrets
from typing import Annotated, Any

import typer
from rich.console import Console
from rich.table import Table

from ..errors import ShouError
from ..markup import escape
from .build import (
    BaseUrlOpt,
    FunctionsOpt,
    ModelOpt,
    OptionOpt,
    Options,
    ProviderOpt,
    SandboxOpt,
    StepsOpt,
    ToolsOpt,
    YesOpt,
    build_agent,
    close_resources,
)
from .common import WorkspaceOpt, err, fail
from .render import json_text, printable, short

mcp_app = typer.Typer(help="MCP servers: list them and their tools.", no_args_is_help=True)
JsonOpt = Annotated[bool, typer.Option("--json", help="Print JSON for scripts.")]


@mcp_app.command(name="list")
def list_servers(workspace: WorkspaceOpt = None, json_out: JsonOpt = False) -> None:
    """Start each configured MCP server and list its status and tools."""
    from ..config import load_settings
    from ..mcp import server_specs

    try:
        settings = load_settings({"workspace": workspace})
        specs = server_specs(settings.mcp_servers)
    except ShouError as e:
        raise fail(str(e)) from None
    for ignored in settings.ignored:
        if "mcp_servers" in ignored.names:
            err.print(f"[yellow]warning:[/] {escape(str(ignored.path))} names MCP servers, but it is not trusted: "
                      "they are ignored (`shou trust` to allow them)")
    from ..known_secrets import secrets_of
    from ..redact import Redactor

    # A server's error may quote its URL or what it was started with: masked like an event.
    hide = Redactor(secrets_of(settings))
    rows = [hide.value(row) for row in asyncio.run(_probe(specs))]
    if json_out:
        typer.echo(json_text(rows))
        return
    if not rows:
        err.print("no MCP servers: name them under [mcp_servers.NAME] in shou.toml (command and args, or url)")
        return
    table = Table("server", "status", box=None)
    table.add_column("tools", overflow="fold")
    for row in rows:
        status = "[green]running[/]" if row["ok"] else f"[red]{escape(short(row['error'] or 'failed', 200))}[/]"
        table.add_row(escape(printable(row["name"])), status, escape(printable(", ".join(row["tools"]))))
    Console(highlight=False).print(table)


async def _probe(specs: dict[str, Any]) -> list[dict[str, Any]]:
    from ..mcp import close_all, list_tools

    async def one(spec: Any) -> dict[str, Any]:
        try:
            tools = await list_tools(spec)
        except Exception as e:  # shown as the server's status
            return {"name": spec.name, "where": spec.where, "ok": False, "error": str(e), "tools": []}
        return {"name": spec.name, "where": spec.where, "ok": True, "error": None, "tools": [t.name for t in tools]}

    try:
        return list(await asyncio.gather(*(one(s) for s in specs.values())))
    finally:
        await close_all()


HttpOpt = Annotated[int | None, typer.Option(
    "--http", metavar="PORT", min=0, max=65535,
    help="Serve streamable HTTP on 127.0.0.1:PORT/mcp instead of stdio; clients send the bearer token it prints "
         "(or SHOU_MCP_TOKEN).")]


@mcp_app.command(name="serve")
def serve(
    http: HttpOpt = None, model: ModelOpt = None, base_url: BaseUrlOpt = None, provider: ProviderOpt = None,
    max_steps: StepsOpt = None, workspace: WorkspaceOpt = None, tools: ToolsOpt = None,
    functions: FunctionsOpt = None, sandbox: SandboxOpt = None, option: OptionOpt = None, yes: YesOpt = False,
) -> None:
    """Serve the agent's tools, and run_agent(task), to MCP clients (stdio unless --http).

    Calls run under the sandbox and the permission policy of `shou run`; one that would ask a person is
    refused unless --yes.
    """
    from ..serve.mcp_server import serve_http, serve_stdio

    opts = Options(model, base_url, provider, max_steps, workspace, tools, functions, False, sandbox, None, option,
                   yes, "yes" if yes else "deny")
    try:
        agent, _ = build_agent(opts)
    except ShouError as e:
        raise fail(str(e)) from None

    async def main() -> None:
        try:
            if http is None:
                await serve_stdio(agent)
            else:
                token = os.environ.get("SHOU_MCP_TOKEN") or secrets.token_urlsafe(24)
                err.print(f"shou MCP server at http://127.0.0.1:{http}/mcp: send Authorization: Bearer {token}")
                await serve_http(agent, http, token)
        finally:
            await close_resources(agent)

    try:
        asyncio.run(main())
    except KeyboardInterrupt:
        pass
    finally:
        if agent.store is not None:
            agent.store.close()
