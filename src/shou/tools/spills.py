"""Whose spilled output is whose: `.shou/outputs/` is shared by every session of a workspace (and, under
`shou serve`, by every user), so a session may read back only the outputs spilled by its own calls.

The executor records each spill (its own cut of a big result, and a sandbox's `output_path`) against the
session that made it; `read_file` then refuses another session's spill, and anything under `.shou/users/`
(per-user memory), whatever the spelling of the path. The record lives in the process: a spill from an
earlier process is not readable again, which costs nothing but a re-run of the call.
"""

from __future__ import annotations

import os
import stat
import threading
from collections import OrderedDict
from pathlib import Path

from ..errors import ToolError

_MOST = 50_000
_owners: OrderedDict[str, str] = OrderedDict()  # ".shou/outputs/NAME" -> session
_lock = threading.Lock()


def claim(session: str, path: str | None) -> None:
    """Record that `session` spilled the workspace-relative `path`."""
    if not path:
        return
    with _lock:
        _owners[path.strip("/")] = session
        while len(_owners) > _MOST:
            _owners.popitem(last=False)


def discard(session: str, workspace: Path) -> int:
    """Delete the outputs `session` spilled (it was deleted) and forget them; returns how many files went.
    Only regular files directly in `.shou/outputs/` are removed, never through a link."""
    with _lock:
        mine = [path for path, owner in _owners.items() if owner == session]
        for path in mine:
            del _owners[path]
    outputs = Path(workspace) / ".shou" / "outputs"
    if not outputs.is_dir() or outputs.is_symlink() or Path(workspace, ".shou").is_symlink():
        return 0
    removed = 0
    for path in mine:
        parts = path.split("/")
        if len(parts) != 3 or parts[:2] != [".shou", "outputs"] or parts[2] in ("", ".", ".."):
            continue
        try:
            if stat.S_ISREG(os.lstat(outputs / parts[2]).st_mode):
                os.unlink(outputs / parts[2])
                removed += 1
        except OSError:
            continue  # gone already, or not shou's to remove
    return removed


def check_readable(session: str, parts: list[str]) -> None:
    """`ToolError` unless a session may read the workspace path made of `parts` (normalised)."""
    if not parts or parts[0].lower() != ".shou" or len(parts) < 2:
        return
    area = parts[1].lower()
    if area == "users":
        raise ToolError(".shou/users/ holds other users' state; it is not readable")
    if area == "outputs":
        with _lock:
            owner = _owners.get("/".join(parts))
        if owner != session:
            raise ToolError(f"{'/'.join(parts)} is not an output of this session's calls; only those can be read")
