"""Secret keys kept in the user's config folder: what signs approvals and memories.

Each is 32 random bytes made on first use, readable by the user only, and never in the workspace: a
workspace (a cloned repository, the sandbox's writes) can then not forge what the key signs.
"""

from __future__ import annotations

import os
import secrets
from collections.abc import Mapping


def user_key(name: str, env: Mapping[str, str] | None = None) -> bytes:
    """The key in the user's config folder's file `name` (made there, mode 0600, on first use)."""
    from .config import make_user_config_dir, user_config_dir

    path = user_config_dir(env if env else None) / name
    try:
        return path.read_bytes()
    except FileNotFoundError:
        make_user_config_dir(env if env else None)
        key = secrets.token_bytes(32)
        try:
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
        except FileExistsError:  # another process made it meanwhile
            return path.read_bytes()
        with os.fdopen(fd, "wb") as f:
            f.write(key)
        return key
