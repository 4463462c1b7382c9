"""`shou sessions` lists a workspace's sessions; `shou show [SESSION]` prints one's transcript; `shou fork`
copies one's history up to a step into a new session.

`sessions` and `show` read the session log (`.shou/shou.db`) and never write it; `fork` only adds a session.
`--json` gives scripts the same content.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer
from rich.console import Console
from rich.table import Table

from ..markup import escape
from .common import WorkspaceOpt, err, fail, open_log, utf8_text
from .render import STATUS_STYLE, format_arguments, json_text, printable

if TYPE_CHECKING:
    pass

JsonOpt = Annotated[bool, typer.Option("--json", help="Print JSON for scripts.")]


def latest_session(workspace: Path) -> str | None:
    """The workspace's most recently updated session, for `--continue`."""
    with open_log(workspace) as store:
        found = store.sessions() if store is not None else []
    return found[0].name if found else None


def _when(seconds: float) -> str:
    return time.strftime("%Y-%m-%d %H:%M", time.localtime(seconds))


def sessions(workspace: WorkspaceOpt = None, json_out: JsonOpt = False) -> None:
    """List the sessions stored in the workspace, newest first."""
    with open_log(workspace) as store:
        if store is None:
            if json_out:
                typer.echo("[]")
            else:
                err.print(f"no sessions yet in {(workspace or Path.cwd()).resolve()}")
            return
        rows = []
        for info in store.sessions():
            status = info.status or ""
            if status == "running" and not store.is_locked(info.name):
                status = "interrupted"  # its process died without finishing it: `shou resume`
            rows.append((info, status))
    if json_out:
        typer.echo(json_text([{"session": i.name, "status": s, "runs": i.runs, "created": i.created,
                                "updated": i.updated, "first_task": i.title} for i, s in rows]))
        return
    table = Table("session", "status", "runs", "updated", "first task", box=None)
    for info, status in rows:
        shown = "interrupted (shou resume)" if status == "interrupted" else status or "-"
        table.add_row(escape(info.name), escape(shown), str(info.runs), _when(info.updated),
                      escape(printable(info.title[:60])))
    Console(highlight=False).print(table)


def show(
    session: Annotated[str | None, typer.Argument(help="The session (default: the most recent one).",
                                                              callback=utf8_text)] = None,
    workspace: WorkspaceOpt = None, json_out: JsonOpt = False,
    full: Annotated[bool, typer.Option("--full", help="Show tool results whole, not cut at 600 characters.")] = False,
) -> None:
    """Print a session's conversation: each task, the model's replies, tool calls with their arguments and
    results, and how each run ended (status, steps, tokens)."""
    with open_log(workspace) as store:
        if store is None:
            raise fail(f"no sessions yet in {(workspace or Path.cwd()).resolve()}")
        name = session or (store.sessions()[0].name if store.sessions() else None)
        if name is None or not store.exists(name):
            raise fail(f"no session {name!r} in this workspace (`shou sessions` lists them)")
        events = list(store.events(name))
    if json_out:
        typer.echo(json_text({"session": name, "events": [e.to_dict() for e in events]}))
        return
    out = Console(highlight=False, soft_wrap=True)
    out.print(f"[bold]session {escape(name)}[/]")
    done = 0  # the session's steps finished so far, across its runs: `shou fork --at` counts them so
    for event in events:
        for line in _lines(event, full, 0 if event.parent else done + 1):
            out.print(line)
        if event.type == "step_finished" and not event.parent:
            done += 1


def _lines(event: Any, full: bool, number: int = 0) -> list[str]:
    """How one logged event reads in a transcript (streaming fragments and bookkeeping show nothing);
    `number` is a step's number in the whole session (0: none, a sub-run's)."""
    kind = event.type
    if kind == "run_started":
        return [f"\n[bold cyan]task[/] [dim]{_when(event.started_at)}[/]", escape(printable(event.task))]
    if kind == "run_resumed":
        return [f"[dim]resumed at step {event.step}[/]"]
    if kind == "feedback":
        return [f"[dim]shou → model: {escape(printable(event.text))}[/]"]
    if kind == "model_response":
        at = f" · #{number}" if number else ""
        lines = [f"[bold]assistant[/] [dim](step {event.step}{at})[/]"] if event.message.text or \
            event.message.tool_calls else []
        if event.message.text:
            lines.append(escape(printable(event.message.text)))
        for c in event.message.tool_calls:
            args = escape(format_arguments(c.arguments, 10_000))
            lines.append(f"[cyan]→ {escape(c.name)}[/]({args}) [dim]{escape(f'[{c.id}]')}[/]")
        return lines
    if kind == "tool_call_finished":
        text = printable(event.content)
        if not full and len(text) > 600:
            text = text[:600] + f"… ({len(event.content)} characters; --full shows all)"
        style = "red" if event.is_error else "dim"
        return [f"  [{style}]← {escape(event.name)} {escape(f'[{event.call_id}]')}:[/] {escape(text)}"]
    if kind == "notice":
        return [f"[yellow]! {escape(printable(event.text))}[/]"]
    if kind == "compacted":
        return [f"[dim]context compacted: {event.tokens_before} → {event.tokens_after} tokens[/]"]
    if kind == "run_finished":
        style = STATUS_STYLE.get(event.status, "red")
        u = event.usage
        end = f"[{style}]{event.status}[/] · {event.steps} steps · {u.total_tokens} tokens ({u.input_tokens} in, " \
              f"{u.output_tokens} out) · {event.wall_time:.1f} s"
        return [end] + ([f"[red]{escape(printable(event.error))}[/]"] if event.error and event.status != "completed"
                        else [])
    return []


def fork(
    session: Annotated[str, typer.Argument(help="The session to fork (it is left as it is).", callback=utf8_text)],
    at: Annotated[str | None, typer.Option(
        "--at", metavar="STEP", callback=utf8_text,
        help="The last step the fork keeps: the session's step number (shou show prints it after #), or "
             "RUN_ID:STEP. Default: its last step.")] = None,
    name: Annotated[str | None, typer.Option("--session", "-s", metavar="NEW", callback=utf8_text,
                                             help="The new session's name (default: a fresh one).")] = None,
    workspace: WorkspaceOpt = None, json_out: JsonOpt = False,
) -> None:
    """Start a new session whose history is SESSION's up to a step; continue it with `shou run -s NEW TASK`."""
    from ..errors import ShouError
    from ..session import fork_session

    with open_log(workspace, readonly=False) as store:
        if store is None:
            raise fail(f"no sessions yet in {(workspace or Path.cwd()).resolve()}")
        try:
            made, point = fork_session(store, session, at, name)
        except ShouError as e:
            raise fail(str(e)) from None
    if json_out:
        typer.echo(json_text({"session": made, "source": session, "step": point.step}))
        return
    err.print(f"forked {escape(session)} at step {point.step} into [bold]{escape(made)}[/]")
    typer.echo(made)
