"""Trust of what shou reads as instructions for the model: `.shou/AGENTS.md`, `.shou/MEMORY.md` and the
workspace's skills (`.agents/skills/*/SKILL.md`).

These files steer the model as the user's own words would, and a cloned repository or sandboxed code can
write them (`.agents/` is an ordinary workspace folder). So they count only as the exact bytes a person
trusted with `shou trust` (`trusted.json`, by absolute path and SHA-256, like the settings files); a file
that is new or changed since is left out of the system prompt with a warning until it is trusted again.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from .errors import ConfigError, ToolError
from .trust import MAX_CONFIG_BYTES, TrustStore, digest, read_closing

__all__ = ["STATE_FILES", "instruction_files", "trusted_state_text", "trusted_state_texts"]

STATE_FILES = ("AGENTS.md", "MEMORY.md")


def read_state_bytes(workspace: Path, name: str) -> bytes | None:
    """`.shou/<name>`'s bytes (no symlink followed anywhere, a regular file of at most 1 MB), or None."""
    from .workspace import STATE_DIR, open_beneath

    try:
        fd = open_beneath(Path(workspace), (STATE_DIR, name), os.O_RDONLY | os.O_NONBLOCK)
    except (ToolError, OSError):
        return None
    return read_closing(fd, MAX_CONFIG_BYTES)


def instruction_files(workspace: Path) -> dict[Path, bytes]:
    """Every file of the workspace shou reads as instructions, with its bytes now (what `shou trust` shows
    and records)."""
    from .skills import workspace_skill_files

    root = Path(workspace).resolve()  # the path `shou trust` records (it resolves too)
    out: dict[Path, bytes] = {}
    for name in STATE_FILES:
        data = read_state_bytes(root, name)
        if data is not None:
            out[root / ".shou" / name] = data
    out.update(workspace_skill_files(root))
    return out


def trusted_state_text(workspace: Path, name: str, env: Any = None, limit: int = 20_000) -> tuple[str, str | None]:
    """`.shou/<name>` as text for the system prompt (capped at `limit` characters) if a person trusted its
    exact bytes, else ""; and a warning when a file was there but left out."""
    return trusted_state_texts(workspace, (name,), env, limit)[0]


def trusted_state_texts(workspace: Path, names: tuple[str, ...], env: Any = None, limit: int = 20_000
                        ) -> list[tuple[str, str | None]]:
    """`trusted_state_text` of each of `names`, with `.shou/` opened once (every run reads these: a workspace
    without `.shou/` costs one failed open, and the trusted digests are read only when a file is there)."""
    from .workspace import STATE_DIR, open_beneath

    nothing: list[tuple[str, str | None]] = [("", None)] * len(names)
    try:
        dir_fd = open_beneath(workspace, (STATE_DIR,), os.O_RDONLY | os.O_DIRECTORY)
    except (ToolError, OSError):
        return nothing
    try:
        found = {name: data for name in names if (data := _read_in(dir_fd, name)) is not None}
    finally:
        os.close(dir_fd)
    if not found:
        return nothing
    root = Path(workspace).resolve()  # the path `shou trust` records (it resolves too); only needed now
    try:
        entries = TrustStore(_config_dir(env)).entries()
    except ConfigError:
        entries = {}
    out = []
    for name in names:
        data = found.get(name)
        if data is None:
            out.append(("", None))
            continue
        path = root / STATE_DIR / name
        if entries.get(str(path)) != digest(data):
            out.append(("", f"{path} is new or changed since this workspace was trusted, so the model does not "
                            f"see it; read it, then run `shou trust` in {root}"))
        else:
            out.append((data.decode("utf-8", "replace")[:limit], None))
    return out


def _read_in(dir_fd: int, name: str) -> bytes | None:
    """`name` in the folder `dir_fd` (no symlink followed; a regular file of at most 1 MB), or None."""
    try:
        fd = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, dir_fd=dir_fd)
    except OSError:
        return None
    return read_closing(fd, MAX_CONFIG_BYTES)


def _config_dir(env: Any) -> Path:
    from .config import user_config_dir

    return user_config_dir(env if env else None)
