"""The instruction files every run reads at its start: `AGENTS.md` and `CLAUDE.md` at the workspace root,
`.shou/AGENTS.md` and `.shou/MEMORY.md`, each only as the exact bytes a person trusted with `shou trust`.

Every run reads them, so the read is cheap: the workspace is opened once and each name is opened relative to
it (a workspace without any of them costs four opens, three of them failing), and the trusted digests are read
only when a file is there. No symlink is followed and only a regular file of at most 1 MB is read.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from ..errors import ConfigError
from ..trust import MAX_CONFIG_BYTES, TrustStore, digest, read_closing
from ..workspace import STATE_DIR

__all__ = ["ROOT_FILES", "RUN_FILES", "STATE_FILES", "read_beneath", "trust_entries", "trusted_state_text",
           "trusted_state_texts", "trusted_texts", "untrusted_warning"]

STATE_FILES = ("AGENTS.md", "MEMORY.md")
ROOT_FILES = ("AGENTS.md", "CLAUDE.md")  # where people keep them for every agent tool (CLAUDE.md: Claude Code's)
# What a run reads at its start, as parts below the workspace.
RUN_FILES: tuple[tuple[str, ...], ...] = (*((name,) for name in ROOT_FILES), *((STATE_DIR, n) for n in STATE_FILES))

_FILE_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC


def read_state_bytes(workspace: Path, name: str) -> bytes | None:
    """`.shou/<name>`'s bytes (no symlink followed anywhere, a regular file of at most 1 MB), or None."""
    return read_beneath(workspace, ((STATE_DIR, name),)).get((STATE_DIR, name))


def read_beneath(workspace: Path, paths: tuple[tuple[str, ...], ...]) -> dict[tuple[str, ...], bytes]:
    """The bytes of each of `paths` (parts below the workspace) that is a regular file of at most 1 MB, reached
    without following a symlink below the workspace; the workspace and each folder are opened once."""
    try:
        root_fd = os.open(workspace, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    except OSError:
        return {}
    folders: dict[tuple[str, ...], list[str]] = {}
    for parts in paths:
        folders.setdefault(parts[:-1], []).append(parts[-1])
    found: dict[tuple[str, ...], bytes] = {}
    try:
        for folder, names in folders.items():
            fd = _open_folder(root_fd, folder)
            if fd is None:
                continue
            try:
                for name in names:
                    if (data := read_in(fd, name)) is not None:
                        found[(*folder, name)] = data
            finally:
                if fd != root_fd:
                    os.close(fd)
    finally:
        os.close(root_fd)
    return found


def _open_folder(root_fd: int, folder: tuple[str, ...]) -> int | None:
    """`folder` below the open workspace, no symlink followed (`root_fd` itself for the workspace), or None."""
    fd = root_fd
    for name in folder:
        try:
            nxt = os.open(name, _DIR_FLAGS, dir_fd=fd)
        except OSError:
            nxt = None
        if fd != root_fd:
            os.close(fd)
        if nxt is None:
            return None
        fd = nxt
    return fd


def read_in(dir_fd: int, name: str) -> bytes | None:
    """`name` in the folder `dir_fd` (no symlink followed; a regular file of at most 1 MB), or None."""
    try:
        fd = os.open(name, _FILE_FLAGS, dir_fd=dir_fd)
    except OSError:
        return None
    return read_closing(fd, MAX_CONFIG_BYTES)


def trust_entries(env: Any = None) -> dict[str, str]:
    """The trusted files (path -> digest) in the user's `trusted.json`; none when it is damaged."""
    try:
        return TrustStore(_config_dir(env)).entries()
    except ConfigError:
        return {}


def untrusted_warning(path: Path, root: Path) -> str:
    """What a run says of an instruction file it leaves out because it is not trusted as it is."""
    return (f"{path} is new or changed since this workspace was trusted, so the model does not see it; read it, "
            f"then run `shou trust` in {root}")


def trusted_texts(workspace: Path, paths: tuple[tuple[str, ...], ...], env: Any = None, limit: int = 20_000
                  ) -> list[tuple[str, str | None]]:
    """Each of `paths` as text for the system prompt (capped at `limit` characters) if a person trusted its
    exact bytes, else ""; and a warning when a file was there but left out."""
    nothing: list[tuple[str, str | None]] = [("", None)] * len(paths)
    found = read_beneath(workspace, paths)
    if not found:
        return nothing
    root = Path(workspace).resolve()  # the path `shou trust` records (it resolves too); only needed now
    entries = trust_entries(env)
    out: list[tuple[str, str | None]] = []
    for parts in paths:
        data = found.get(parts)
        path = root.joinpath(*parts)
        if data is None:
            out.append(("", None))
        elif entries.get(str(path)) != digest(data):
            out.append(("", untrusted_warning(path, root)))
        else:
            out.append((data.decode("utf-8", "replace")[:limit], None))
    return out


def trusted_state_text(workspace: Path, name: str, env: Any = None, limit: int = 20_000) -> tuple[str, str | None]:
    """`.shou/<name>` as text for the system prompt (capped at `limit` characters) if a person trusted its
    exact bytes, else ""; and a warning when a file was there but left out."""
    return trusted_state_texts(workspace, (name,), env, limit)[0]


def trusted_state_texts(workspace: Path, names: tuple[str, ...], env: Any = None, limit: int = 20_000
                        ) -> list[tuple[str, str | None]]:
    """`trusted_state_text` of each of `names`."""
    return trusted_texts(workspace, tuple((STATE_DIR, name) for name in names), env, limit)


def _config_dir(env: Any) -> Path:
    from ..config import user_config_dir

    return user_config_dir(env if env else None)
