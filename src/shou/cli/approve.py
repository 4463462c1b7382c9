"""Approvals on the command line: the terminal prompt, and `shou approvals` / `shou approve` / `shou deny`.

`shou run` and `shou chat` ask on the terminal when a call needs a person (see shou.agent.approvals):
yes, no, yes for the rest of the session, or always (a rule added to the user's shou.toml). Without a
terminal an ask is refused unless `--yes`; with `--approvals defer` the run stops `waiting_approval` and
the calls are decided here, from any process, then `shou resume` goes on.
"""

from __future__ import annotations

import asyncio
import sys
import time
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.console import Console
from rich.markup import escape

from ..agent.approvals import Answer, ApprovalRequest, decide, describe_arguments
from ..tools.executor import parse_arguments
from .build import WorkspaceOpt, err, fail, utf8_text
from .render import json_text, printable

_ANSWERS: dict[str, Answer] = {"y": "yes", "yes": "yes", "n": "no", "no": "no", "": "no", "s": "session",
                               "session": "session", "a": "always", "always": "always"}


class TerminalApprover:
    """Asks the person at the terminal, one call at a time."""

    def __init__(self, console: Console | None = None) -> None:
        self.console = console or Console(stderr=True, highlight=False, soft_wrap=True)
        self._lock = asyncio.Lock()  # parallel calls ask one after the other

    async def __call__(self, request: ApprovalRequest) -> Answer:
        async with self._lock:
            c = self.console
            c.print(f"\n[bold yellow]? shou wants to run {escape(request.tool)}[/] [dim]({escape(request.why)})[/]")
            c.print(escape(printable(describe_arguments(request.arguments))))
            c.print(f"  [bold]y[/]es · [bold]n[/]o · [bold]s[/]ession: allow [cyan]{escape(request.rule)}[/] until "
                    f"this session ends · [bold]a[/]lways: add it to your shou.toml")
            while True:
                c.print("allow? \\[y/n/s/a] ", end="")
                try:
                    line = await asyncio.to_thread(sys.stdin.readline)
                except (EOFError, OSError):
                    line = ""
                if not line:  # end of input: nobody is there to say yes
                    return "no"
                answer = _ANSWERS.get(line.strip().lower())
                if answer is not None:
                    return answer
                c.print("[dim]answer y, n, s or a[/]")


def choose_approvals(setting: str | None, yes: bool) -> Any:
    """What answers an ask in this command: `--yes`, the setting, or the terminal when there is one."""
    if yes:
        return "yes"
    if setting in ("yes", "deny", "defer"):
        return setting
    if sys.stdin.isatty() and sys.stderr.isatty():
        return TerminalApprover()
    return "deny"


def _stores(workspace: Path | None, readonly: bool = True) -> Any:
    from .sessions import _open

    return _open(workspace, readonly)


def approvals(workspace: WorkspaceOpt = None,
              json_out: Annotated[bool, typer.Option("--json", help="Print JSON for scripts.")] = False) -> None:
    """List the tool calls waiting for a person's decision (runs stopped with `--approvals defer`)."""
    from ..session import Session

    rows: list[dict[str, Any]] = []
    with _stores(workspace) as store:
        if store is not None:
            for info in store.sessions():
                if info.status != "waiting_approval":
                    continue
                for req in Session(info.name, store).pending_approvals.values():
                    args, _ = parse_arguments(req.call.arguments)  # what will run, as the tool will read it
                    rows.append({"call_id": req.call.id, "session": info.name, "tool": req.call.name,
                                 "arguments": args if isinstance(args, dict) else req.call.arguments,
                                 "why": req.why, "since": req.at})
    if json_out:
        typer.echo(json_text(rows))
        return
    if not rows:
        err.print("no call is waiting for approval")
        return
    out = Console(highlight=False, soft_wrap=True)
    for r in rows:  # every argument in full: what is approved is exactly what runs
        since = time.strftime("%Y-%m-%d %H:%M", time.localtime(r["since"])) if r["since"] else ""
        out.print(f"[bold]{escape(r['call_id'])}[/] in session {escape(r['session'])} since {since}: "
                  f"[cyan]{escape(r['tool'])}[/] [dim]({escape(r['why'])})[/]")
        args = r["arguments"]
        out.print(escape(printable(describe_arguments(args) if isinstance(args, dict) else str(args))))


def _decide(call_id: str, allow: bool, reason: str, workspace: Path | None) -> None:
    from ..errors import ShouError
    from ..session import Session

    with _stores(workspace, readonly=False) as store:
        if store is None:
            raise fail("no sessions in this workspace")
        for info in store.sessions():
            if info.status != "waiting_approval":
                continue
            session = Session(info.name, store)
            req = session.pending_approvals.get(call_id)
            if req is None:
                continue
            try:
                session.acquire()  # the run is stopped; nobody else may write the session meanwhile
            except ShouError as e:
                raise fail(str(e)) from None
            try:
                session.refresh()
                try:
                    decide(session, call_id, allow, reason, (workspace or Path.cwd()).resolve())
                except KeyError:
                    raise fail(f"call {call_id} was decided meanwhile") from None
            finally:
                session.release()
            verb = "approved" if allow else "denied"
            typer.echo(f"{verb} {call_id} ({req.call.name}) in session {info.name}; `shou resume {info.name}` goes on")
            return
    raise fail(f"no call {call_id!r} is waiting for approval (`shou approvals` lists them)")


def approve(call_id: Annotated[str, typer.Argument(metavar="CALL_ID", help="The call to allow.",
                                                                 callback=utf8_text)],
            workspace: WorkspaceOpt = None) -> None:
    """Allow a call that waits for approval (it runs when the session is resumed)."""
    _decide(call_id, True, "", workspace)


def deny(call_id: Annotated[str, typer.Argument(metavar="CALL_ID", help="The call to refuse.",
                                                              callback=utf8_text)],
         reason: Annotated[str, typer.Option("--reason", help="Why, for the model to read.")] = "",
         workspace: WorkspaceOpt = None) -> None:
    """Refuse a call that waits for approval (the model is told, with the reason, when the run resumes)."""
    _decide(call_id, False, reason, workspace)
