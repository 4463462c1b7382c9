"""A session's taint, kept on disk: outside content that entered its interpreter may have been written to
the workspace (`open('page.txt', 'w').write(page)`), and a later process of the same session (`shou run
--code -s S` again) must still mark what its cells print. The mark is an empty 0600 file under
`.shou/taint/`, named by a digest of the session's key (unique forever: a new session of the same name is
a new key), never written through a link."""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

from ..errors import UserError

__all__ = ["is_marked", "mark"]


def _path(workspace: Path, session: str) -> Path:
    name = hashlib.sha256(session.encode("utf-8", "surrogatepass")).hexdigest()[:40]
    return Path(workspace) / ".shou" / "taint" / name


def is_marked(workspace: Path | None, session: str) -> bool:
    """Whether outside content entered an interpreter of `session` in any earlier process."""
    return workspace is not None and os.path.lexists(_path(workspace, session))


def mark(workspace: Path | None, session: str) -> None:
    """Record that outside content entered an interpreter of `session`. Best effort on a read-only
    workspace: the mark still holds in this process (shou.sandbox.stateful)."""
    if workspace is None:
        return
    from ..workspace import state_dir

    try:
        folder = state_dir(Path(workspace)) / "taint"
        os.makedirs(folder, 0o700, exist_ok=True)
        if folder.is_symlink():
            return
        fd = os.open(_path(workspace, session), os.O_WRONLY | os.O_CREAT | os.O_NOFOLLOW, 0o600)
        os.close(fd)
    except (OSError, UserError):  # a mark that cannot be written must not end the cell
        return
