"""What a deleted session leaves behind in this process, closed with it: its browser context (open tabs,
cookies, storage), its stateful Python interpreter and the outputs its calls spilled. All are kept under the
session's id (`RunQueue.session_id`), never its name: a name can be chosen again after a delete, by any
user, and must find nothing of the session that had it before."""

from __future__ import annotations

import logging
from pathlib import Path

log = logging.getLogger("shou.serve")


async def close_leftovers(workspace: Path, key: str) -> None:
    """Close everything of the session whose resources are kept under `key`."""
    from ..sandbox.stateful import close_session
    from ..tools import spills
    from ..tools.builtin._browser_session import close_browser

    await close_session(key)
    try:
        await close_browser(key)
    except Exception as e:  # a dead browser has no context left to close
        log.warning("closing a deleted session's browser context failed: %s", e)
    spills.discard(key, workspace)
