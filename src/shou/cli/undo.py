"""`shou undo [SESSION]` puts back the workspace files a run changed; `shou diff [SESSION]` shows the changes.

Both read the checkpoints under `.shou/checkpoints/` (shou.checkpoints) that a stored session's runs record.
Exit codes: 0 done; 1 undo refused (files changed outside shou since; `--force` overwrites them) or some
file could not be put back; 2 the command is wrong (no such session, run or step).
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from .common import WorkspaceOpt, fail, open_log, utf8_text
from .render import printable

if TYPE_CHECKING:
    from ..checkpoints import Book, Change

__all__ = ["diff", "undo"]

SessionArg = Annotated[str | None, typer.Argument(help="The session (default: the most recent one).",
                                                  callback=utf8_text)]
RunOpt = Annotated[str | None, typer.Option("--run", help="The run (its id or the start of it; default: the last "
                                                          "run with changes not undone yet).")]


def _session_changes(workspace: Path | None, session: str | None) -> tuple[Book, str, list[Change]]:
    """The workspace's checkpoint book, the session meant and its live changes (`fail` when there is none)."""
    from ..checkpoints import book_for, changes, forget_deleted, recover

    root = (workspace or Path.cwd()).resolve()
    with open_log(root) as store:
        if store is None:
            raise fail(f"no sessions yet in {root}")
        book = book_for(root)
        try:
            forget_deleted(book, store.exists)  # checkpoints of sessions deleted since go with them
        except OSError as e:
            raise fail(f"cannot read the checkpoints in {root / '.shou' / 'checkpoints'}: {e}") from None
        names = store.sessions()
        name = session or (names[0].name if names else None)
        if name is None or not store.exists(name):
            raise fail(f"no session {name!r} in this workspace (`shou sessions` lists them)")
        if store.is_locked(name):  # its running commands' changes are its own to record
            raise fail(f"session {name} is running now; wait until its run ends (or stop it) and try again", 1)
        try:
            recover(book, name)  # what commands a killed process ran changed, recorded now
        except OSError as e:
            raise fail(f"cannot read the checkpoints in {root / '.shou' / 'checkpoints'}: {e}") from None
    return book, name, changes(book.records(name))


def undo(
    session: SessionArg = None,
    to: Annotated[int | None, typer.Option("--to", min=0, max=1_000_000,
                                           help="Undo only what was changed after this step of "
                                                "the run (default: the whole run).")] = None,
    run: RunOpt = None,
    force: Annotated[bool, typer.Option("--force", help="Put files back even where they were changed outside "
                                                        "shou since the run changed them.")] = False,
    workspace: WorkspaceOpt = None,
) -> None:
    """Put back the workspace files a run changed (default: the session's last run): exact bytes and mode,
    deleted files made again, created ones removed. Files changed since outside shou are left alone unless
    --force. Running it again undoes the run before."""
    from ..checkpoints import select
    from ..checkpoints import undo as undo_changes

    book, name, found = _session_changes(workspace, session)
    try:
        run_id, chosen = select(found, run, to or 0)
    except ValueError as e:
        raise fail(str(e)) from None
    if not chosen:
        where = f" after step {to}" if to else ""
        typer.echo(f"nothing to undo in session {name}{where}: no file changes recorded that are not undone")
        return
    out = undo_changes(book, chosen, force=force)
    if out.conflicts and not force:
        typer.echo("changed outside shou since the run changed them (nothing was undone; --force overwrites "
                   "them):", err=True)
        for line in out.conflicts:
            typer.echo(f"  {printable(line)}", err=True)
        raise typer.Exit(1)
    book.append(name, _key(book, name), {"k": "undone", "run": run_id, "after_step": to or 0})
    for path in out.restored:
        typer.echo(f"restored {printable(path)}")
    for path in out.removed:
        typer.echo(f"removed {printable(path)}")
    for line in out.lost:
        typer.echo(f"not restored: {printable(line)}", err=True)
    steps = f"after step {to} of run {run_id}" if to else f"of run {run_id}"
    typer.echo(f"undid {len(out.restored) + len(out.removed)} file change(s) {steps} (session {name})")
    if out.lost:
        raise typer.Exit(1)


def _key(book: Book, name: str) -> str:
    records = book.records(name)
    return str(records[0].get("key", name)) if records else name


def diff(
    session: SessionArg = None,
    run: RunOpt = None,
    step: Annotated[int | None, typer.Option("--step", min=1, max=1_000_000,
                                             help="Only what this step of the run changed.")] = None,
    workspace: WorkspaceOpt = None,
) -> None:
    """Show what a run changed in the workspace (default: the session's last run) as a unified diff."""
    from ..checkpoints import diff_text, select

    book, name, found = _session_changes(workspace, session)
    try:
        _, chosen = select(found, run)
    except ValueError as e:
        raise fail(str(e)) from None
    if step is not None:
        chosen = [c for c in chosen if c.step == step]
    if not chosen:
        typer.echo(f"no file changes recorded in session {name}" + (f" at step {step}" if step else ""))
        return
    typer.echo(printable(diff_text(book, chosen)), nl=False)  # names and contents are the workspace's
