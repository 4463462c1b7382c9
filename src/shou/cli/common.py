"""What every command shares: the error console, `fail`, the `--workspace` flag, the UTF-8 check of argv
text, and opening the workspace's session log. Below build.py, approve.py and sessions.py, so that none of
them has to import another for these."""

from __future__ import annotations

import math
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, TypeVar

import typer
from rich.console import Console

from ..errors import ShouError
from ..markup import escape

if TYPE_CHECKING:
    from ..store.sqlite import SQLiteStore

__all__ = ["WorkspaceOpt", "err", "fail", "open_log", "utf8_text"]

err = Console(stderr=True, highlight=False, soft_wrap=True)

WorkspaceOpt = Annotated[Path | None, typer.Option(
    "--workspace", "-w", metavar="DIR", help="Folder the file tools work in.")]


T = TypeVar("T", str, list[str], None)


def utf8_text(value: T) -> T:
    """A typer callback: argv bytes that are not UTF-8 arrive as lone surrogates, which no log, header or
    database can hold; a name or id (or each of a list of them) given so is refused up front, as a usage
    error."""
    for text in [value] if isinstance(value, str) else value or ():
        try:
            text.encode("utf-8")
        except UnicodeEncodeError as e:
            raise typer.BadParameter(f"not valid UTF-8 (at character {e.start}); pass it as UTF-8 text") from None
    return value


def finite(value: float | None) -> float | None:
    """A typer callback for a number option: click's range check lets "nan" through (no comparison with it is
    true) and takes "inf", neither of which is an amount of anything."""
    if value is not None and not math.isfinite(value):
        raise typer.BadParameter(f"{value} is not a number of anything; give a finite one")
    return value


def fail(message: str, code: int = 2) -> typer.Exit:
    """Print `message` as an error and return the exit to raise."""
    err.print(f"[red]error:[/] {escape(message)}")
    return typer.Exit(code)


@contextmanager
def open_log(workspace: Path | None, readonly: bool = True) -> Iterator[SQLiteStore | None]:
    """The workspace's session log (None when it has none), opened to read unless `readonly` is False. A
    store that cannot be read ends the command with what is wrong, never a traceback."""
    import sqlite3

    from ..store.sqlite import SQLiteStore
    from ..store.sqlite_errors import explain
    from ..workspace import state_database

    root = (workspace or Path.cwd()).resolve()
    if not (root / ".shou" / "shou.db").exists():
        yield None
        return
    try:
        path = state_database(root, "shou.db")
        store = SQLiteStore(path, readonly=readonly)
    except ShouError as e:
        raise fail(str(e)) from None
    try:
        with store:
            yield store
    except ShouError as e:  # damage deep in the file, found by a query: what is wrong, not a traceback
        raise fail(str(e)) from None
    except sqlite3.Error as e:  # the trace's own queries
        raise fail(str(explain(e, path))) from None
