"""The run's checkpoint control: each tool call gets its own recorder of the workspace files it changes.

A file tool records through `ToolContext.checkpoint` itself (it knows the path, and does it under the file's
lock, before the change). A sandboxed command says nothing of what it touches, so around `shell` and
`run_code` the workspace is scanned before and after (bounded; the small files' contents kept before) and the
difference recorded. Only a stored session's runs record (`shou undo` finds them by session); the setting
`checkpoint_max_mb` caps the store (0 turns checkpoints off), and the oldest runs' are dropped past it, with a
notice.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import os
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING

from ..checkpoints import (
    DEFAULT_MAX_BYTES,
    Book,
    CallRecorder,
    book_for,
    forget_deleted,
    precapture,
    prune_to_cap,
    recover,
    scan,
)
from ..checkpoints.journal import FOLDER
from ..errors import ShouError
from ..events import Notice
from ..workspace import STATE_DIR

if TYPE_CHECKING:
    from ..tools.base import ToolResult
    from ..tools.pipeline import Invocation, Next
    from ..tools.registry import ToolSet
    from .scope import RunScope

__all__ = ["SANDBOXED", "Checkpoint"]

SANDBOXED = frozenset({"shell", "run_code"})  # tools whose changes are found by scanning the workspace

# The book, run and step of the call under way in this task: a sub-run it starts (delegate, a plan step) has an
# in-memory session of its own, and its changes are its top run's, made at that run's step.
_OUTER: contextvars.ContextVar[tuple[Book, str, int] | None] = contextvars.ContextVar("shou_checkpoint_outer",
                                                                                       default=None)


class Checkpoint:
    """Records what each call changes in the workspace (checkpoints/), for `shou undo` and `shou diff`."""

    __slots__ = ("_book", "_looked", "_told", "scope", "tools")

    def __init__(self, scope: RunScope, tools: ToolSet) -> None:
        self.scope = scope
        self.tools = tools
        self._book: Book | bool | None = False  # False: not looked up yet
        self._told = False  # the workspace was too big to scan whole: said once per run
        self._looked = False  # a call without a recorder looked for a killed process's journals

    def book(self) -> Book | None:
        """The workspace's checkpoint book, or None when this run records none."""
        if self._book is False:
            agent = self.scope.agent
            mb = getattr(agent.settings, "checkpoint_max_mb", None)
            cap = DEFAULT_MAX_BYTES if mb is None else int(float(mb) * 2**20)
            stored = self.scope.session.store is not None
            self._book = book_for(agent.workspace, cap) if stored and cap > 0 else None
            store = self.scope.session.store
            if self._book is not None and store is not None:  # once per run: what deleted sessions left goes
                with contextlib.suppress(OSError, ShouError):
                    forget_deleted(self._book, store.exists)
                    # this run holds the session: what its commands a killed process ran changed is recorded now,
                    # before anything this run does is mixed in
                    recover(self._book, self.scope.session.name)
        return self._book if isinstance(self._book, Book) else None

    async def __call__(self, inv: Invocation, next: Next[ToolResult]) -> ToolResult:
        """The tool's result, its changes recorded."""
        if not self._may_change_files(inv.call.name):  # e.g. a plain function: nothing to record, nothing to look up
            if self._book is False and not self._looked and _OUTER.get() is None:
                self._recover_first()
            return await next(inv)
        scope = self.scope
        outer = _OUTER.get()
        if outer is not None:  # a sub-run's call (a sub-agent, a plan step): recorded as its top run's, at its step
            book, run, step = outer
            call = f"{scope.run_id}/{inv.call.id}"
        else:
            book, run, step, call = self.book(), scope.run_id, scope.step, inv.call.id
        if book is None or inv.ctx is None:
            return await next(inv)
        rec = CallRecorder(book, scope.session.name, scope.session.key, run, step, call, inv.call.name)
        inv.ctx = replace(inv.ctx, checkpoint=rec)  # this call's own: the run's context is shared by its calls
        token = _OUTER.set((book, run, step)) if outer is None else None
        try:
            if inv.call.name in SANDBOXED:
                result = await self._command(book, rec, inv, next)
            else:
                result = await next(inv)
        finally:
            if token is not None:
                _OUTER.reset(token)
        dropped = await asyncio.to_thread(prune_to_cap, book, run) if rec.recorded else 0
        if dropped:
            rec.notes.append(f"dropped the checkpoints of the {dropped} oldest run(s) to stay under "
                             f"checkpoint_max_mb ({book.max_bytes / 2**20:g} MB): they can no longer be undone")
        for note in rec.notes:
            scope.emit(Notice(scope.run_id, scope.step, "checkpoint", note))
        return result

    def _recover_first(self) -> None:
        """Before the run's first call that gets no recorder: what a killed process's commands changed is
        recovered first, as before any other call of the run (a plain tool's writes made before it would be
        taken for the command's, and undone with them). One stat a run when the workspace has no checkpoints:
        no journal appears meanwhile but by this run's own calls, which look the book up themselves."""
        self._looked = True
        if os.path.isdir(Path(self.scope.agent.workspace, STATE_DIR, FOLDER)):
            self.book()

    def _may_change_files(self, name: str) -> bool:
        """Whether a call of tool `name` can have its changes recorded: a command (scanned around), or a tool
        handed the call's context (a file tool records through `ctx.checkpoint`). Any other tool cannot reach
        the recorder, so it gets none, and a run of such calls never opens the workspace's checkpoint book."""
        if name in SANDBOXED:
            return True
        tool = self.tools.get(name)
        return tool is not None and bool(tool.context_param)

    async def _command(self, book: Book, rec: CallRecorder, inv: Invocation, next: Next[ToolResult]) -> ToolResult:
        """Run a sandboxed command between two scans of the workspace, and record what changed."""
        before = await asyncio.to_thread(scan, book.workspace)
        kept = await asyncio.to_thread(precapture, book, before)
        await asyncio.to_thread(rec.command_starts, before, kept)
        try:
            return await next(inv)
        finally:  # a command that timed out may have changed files too
            after = await asyncio.to_thread(scan, book.workspace)
            await asyncio.to_thread(rec.command, before, kept, after)
            if not (before.complete and after.complete) and not self._told:
                self._told = True
                rec.notes.append("the workspace has too many files to watch whole: `shou undo` may miss changes "
                                 "that commands made to some of them")
