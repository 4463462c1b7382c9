"""Checkpoints of the workspace files a run changes, for `shou undo` and `shou diff`.

`journal` stores them (`.shou/checkpoints/`: content-addressed blobs, a journal per session), `capture`
records them as tools change files (and around sandboxed commands), `history` reads a journal, `restore`
undoes and diffs, `prune` keeps them under the size cap and drops them with their session.
"""

from __future__ import annotations

from .capture import CallRecorder, Scan, precapture, recover, scan
from .history import Change, changes, runs, select
from .journal import DEFAULT_MAX_BYTES, Book, book_for
from .prune import drop_session, forget_deleted, prune_to_cap
from .restore import Outcome, diff_text, undo

__all__ = ["DEFAULT_MAX_BYTES", "Book", "CallRecorder", "Change", "Outcome", "Scan", "book_for", "changes",
           "diff_text", "drop_session", "forget_deleted", "precapture", "prune_to_cap", "recover", "runs", "scan",
           "select", "undo"]
