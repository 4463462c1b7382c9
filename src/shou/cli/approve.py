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

from ..agent.approvals import Answer, ApprovalRequest, decide, describe_arguments
from ..markup import escape
from ..tools.executor import parse_arguments
from .common import WorkspaceOpt, err, fail, open_log, utf8_text
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
    return open_log(workspace, readonly)


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
                    rows.append({"call_id": req.call.id, "session": info.name, "run_id": req.run_id.split(".", 1)[0],
                                 "tool": req.call.name,
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
        out.print(f"[bold]{escape(r['session'])}:{escape(r['call_id'])}[/] (run {escape(r['run_id'])}) since {since}: "
                  f"[cyan]{escape(r['tool'])}[/] [dim]({escape(r['why'])})[/]")
        args = r["arguments"]
        out.print(escape(printable(describe_arguments(args) if isinstance(args, dict) else str(args))))


def _waiting(store: Any) -> list[tuple[str, Any]]:
    """Every call that waits for a decision in this workspace: (session name, request)."""
    from ..session import Session

    out: list[tuple[str, Any]] = []
    for info in store.sessions():
        if info.status == "waiting_approval":
            out.extend((info.name, req) for req in Session(info.name, store).pending_approvals.values())
    return out


def candidates(waiting: list[tuple[str, Any]], call_id: str, session: str | None) -> list[tuple[str, Any]]:
    """The waiting calls `call_id` may name: by id in `session` (or any session), or written `SESSION:CALL_ID`.
    Call ids are chosen by the provider and reused across runs and sessions, so the caller must refuse more
    than one candidate instead of picking one."""
    found = [(s, r) for s, r in waiting if r.call.id == call_id and (session is None or s == session)]
    if session is None:  # `S:CALL_ID`, split at every colon: both session names and call ids may hold one
        for i, ch in enumerate(call_id):
            if ch == ":":
                name, cid = call_id[:i], call_id[i + 1:]
                found.extend((s, r) for s, r in waiting if s == name and r.call.id == cid)
    unique: dict[tuple[str, str], tuple[str, Any]] = {(s, r.call.id): (s, r) for s, r in found}
    return list(unique.values())


def _describe(session: str, req: Any) -> str:
    args, _ = parse_arguments(req.call.arguments)  # what will run, as the tool will read it
    shown = describe_arguments(args) if isinstance(args, dict) else f"  {req.call.arguments}"
    return (f"call {req.call.id} in session {session}, run {req.run_id.split('.', 1)[0]} (step {req.step}): "
            f"{req.call.name} ({req.why})\n{shown}")


def _confirm(verb: str, session: str, req: Any, yes: bool) -> None:
    """Show exactly what is decided; on a terminal, ask before deciding it (unless `--yes`)."""
    err.print(escape(printable(_describe(session, req))), highlight=False)
    if yes or not sys.stdin.isatty():  # a script named the call; it was shown above for the record
        return
    err.print(f"{verb} this call? \\[y/N] ", end="")
    try:
        line = sys.stdin.readline()
    except (EOFError, OSError):
        line = ""
    if line.strip().lower() not in ("y", "yes"):
        raise fail("nothing decided")


def _decide(call_id: str, allow: bool, reason: str, workspace: Path | None, session_name: str | None = None,
            yes: bool = False) -> None:
    from ..errors import ShouError
    from ..session import Session

    with _stores(workspace, readonly=False) as store:
        if store is None:
            raise fail("no sessions in this workspace")
        found = candidates(_waiting(store), call_id, session_name)
        if not found:
            where = f" in session {session_name!r}" if session_name else ""
            raise fail(f"no call {call_id!r} is waiting for approval{where} (`shou approvals` lists them)")
        if len(found) > 1:  # deciding the wrong session's call would run it
            listed = "\n".join(f"  {s}:{r.call.id}  {r.call.name}  run {r.run_id.split('.', 1)[0]}"
                                for s, r in found)
            raise fail(f"{len(found)} waiting calls match {call_id!r}; name one with --session S (or S:CALL_ID):"
                       f"\n{printable(listed)}")  # names come from the session log: no terminal escapes
        name, req = found[0]
        _confirm("approve" if allow else "deny", name, req, yes)
        session = Session(name, store)
        try:
            session.acquire()  # the run is stopped; nobody else may write the session meanwhile
        except ShouError as e:
            raise fail(str(e)) from None
        try:
            session.refresh()
            now = session.pending_approvals.get(req.call.id)
            if now is None or (now.run_id, now.step, now.call) != (req.run_id, req.step, req.call):
                raise fail(f"call {req.call.id} was decided meanwhile")  # not what was shown: decide nothing
            decide(session, req.call.id, allow, reason, (workspace or Path.cwd()).resolve(),
                   emitter=_emitter(session, workspace))
        finally:
            session.release()
        verb = "approved" if allow else "denied"
        typer.echo(f"{verb} {req.call.id} ({req.call.name}) in session {name}; `shou resume {name}` goes on")


def _emitter(session: Any, workspace: Path | None) -> Any:
    """The way a decision goes, as a run's events go: the secrets the settings know replaced, the observers
    they ask for (OTel, alerts) told."""
    from ..agent.emitter import Emitter
    from ..config import load_settings
    from ..errors import ShouError
    from ..known_secrets import secrets_of
    from ..redact import Redactor
    from .observers import observers

    try:
        settings = load_settings({"workspace": workspace})
        return Emitter(session, Redactor(secrets_of(settings)), tuple(observers(settings)))
    except ShouError as e:  # settings that cannot be read must not keep a person from deciding
        err.print(f"[yellow]warning:[/] the decision is logged without your settings' redaction: {escape(str(e))}")
        return Emitter(session)


CallOpt = Annotated[str, typer.Argument(metavar="CALL_ID", help="The call: its id, or SESSION:CALL_ID.",
                                        callback=utf8_text)]
SessionOpt = Annotated[str | None, typer.Option("--session", "-s", help="The session the call waits in.",
                                                callback=utf8_text)]
ConfirmOpt = Annotated[bool, typer.Option("--yes", "-y", help="Do not ask on the terminal.")]


def approve(call_id: CallOpt, session: SessionOpt = None, yes: ConfirmOpt = False,
            workspace: WorkspaceOpt = None) -> None:
    """Allow a call that waits for approval (it runs when the session is resumed)."""
    _decide(call_id, True, "", workspace, session, yes)


def deny(call_id: CallOpt, session: SessionOpt = None,
         reason: Annotated[str, typer.Option("--reason", help="Why, for the model to read.")] = "",
         yes: ConfirmOpt = False, workspace: WorkspaceOpt = None) -> None:
    """Refuse a call that waits for approval (the model is told, with the reason, when the run resumes)."""
    _decide(call_id, False, reason, workspace, session, yes)
