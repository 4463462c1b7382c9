"""Skill folders opened one component at a time from a folder fd, following no symlink, and walked for the
files a skill lists (shou.skills.format's `Skill.files`, shou.skills.folders' loading): below both, so the
two need not import each other."""

from __future__ import annotations

import os
from pathlib import Path

from ..beneath import open_folder

MAX_LISTED = 100  # other files use_skill lists
MAX_DEPTH = 6

DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC


def open_dir(root: Path, parts: tuple[str, ...]) -> int:
    """`root/parts...` as an open folder, following no symlink below `root` (`OSError` otherwise)."""
    return open_folder(root, parts)


def lmode(dir_fd: int, name: str) -> int:
    """The mode of `name` in the open folder `dir_fd`, not following a symlink (0 when there is none)."""
    try:
        return os.lstat(name, dir_fd=dir_fd).st_mode
    except OSError:
        return 0


def walk(fd: int, prefix: str, depth: int, out: list[str]) -> None:
    """Add to `out` the relative paths of the regular files below the open folder `fd`: no symlink followed,
    hidden names skipped, at most MAX_DEPTH folders deep, stopping past MAX_LISTED + 1 (SKILL.md and one
    more, enough to say there are more)."""
    with os.scandir(fd) as entries:
        names = sorted((e.name, e.is_dir(follow_symlinks=False), e.is_file(follow_symlinks=False)) for e in entries)
    for name, is_dir, is_file in names:
        if len(out) > MAX_LISTED + 1:
            return
        if name.startswith("."):
            continue
        if is_file:
            out.append(prefix + name)
        elif is_dir and depth < MAX_DEPTH:
            try:
                sub = os.open(name, DIR_FLAGS, dir_fd=fd)
            except OSError:  # swapped for a symlink meanwhile, or unreadable: leave it out
                continue
            try:
                walk(sub, f"{prefix}{name}/", depth + 1, out)
            finally:
                os.close(sub)
