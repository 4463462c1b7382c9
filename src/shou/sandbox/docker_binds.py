"""The Docker sandbox's binds inside the workspace, made so that the engine resolves no path of the workspace.

The engine resolves a bind's source path when it creates the container, long after shou checked it; a
parallel call of the same run can meanwhile swap `shou.toml` (or `.git`, or `.git/hooks`) for a symlink to a
host file, which would then be bound into the container. So each source is opened here first, without
following any link (`open_path_beneath`), checked with `fstat`, and what the engine gets is a path that only
shou controls:

- as root, a detached clone of that very file or folder (`open_tree` of the open fd), read-only where asked,
  always nosuid and nodev, moved onto a mount point in a per-call folder under the idmapped workspace's
  private staging folder. The mount's own flags carry the protection: the engine binds it "rw" because its
  "ro" remount would drop nosuid and nodev; a bind keeps the flags of its source, so read-only stays.
- otherwise (no right to mount), a private 0700 copy of a file (read from the fd opened above), or an empty
  folder in place of a read-only folder (a repository's hooks: the program needs to see none of them).
  A folder that must stay writable (`.git`) can then only be bound by path (see SECURITY.md).
"""

from __future__ import annotations

import contextlib
import os
import stat
import struct
import tempfile
from pathlib import Path

from ..git_protect import open_path_beneath
from .idmap import (
    AT_EMPTY_PATH,
    AT_FDCWD,
    MNT_DETACH,
    MOUNT_ATTR_NODEV,
    MOUNT_ATTR_NOSUID,
    MOVE_MOUNT_F_EMPTY_PATH,
    OPEN_TREE_CLONE,
    SYS_MOUNT_SETATTR,
    SYS_MOVE_MOUNT,
    SYS_OPEN_TREE,
    UMOUNT_NOFOLLOW,
    _check,
    _libc,
)

__all__ = ["PinnedBinds"]

MOUNT_ATTR_RDONLY = 0x1
COPY_LIMIT = 16 * 2**20  # settings and config files are small; a huge one is not copied whole


class PinnedBinds:
    """Bind sources for one container, made from fds opened beneath `source` (the folder bound at
    /workspace); `mount` says whether to clone mounts (root) or make copies. `close()` removes them all."""

    def __init__(self, source: Path, staging: Path, *, mount: bool) -> None:
        self.mount = mount
        self.dir = Path(tempfile.mkdtemp(prefix="binds-", dir=staging))  # 0700, ours
        self._ws_fd = os.open(source, os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC)
        self._mounted: list[Path] = []
        self._count = 0

    def add(self, rel: str, *, read_only: bool) -> str | None:
        """A path the engine may bind at /workspace/`rel`, or None when `rel` is missing or neither a
        regular file nor a folder (a link, a device: never bound)."""
        try:
            fd = open_path_beneath(self._ws_fd, rel)
        except (OSError, ValueError):
            return None
        try:
            st = os.fstat(fd)
            if not (stat.S_ISREG(st.st_mode) or stat.S_ISDIR(st.st_mode)):
                return None
            self._count += 1
            target = self.dir / str(self._count)
            if self.mount:
                try:
                    return str(self._clone(fd, target, st, read_only))
                except OSError:
                    return None  # it was removed meanwhile (move_mount: ENOENT): there is nothing to protect
            if not read_only:
                return None  # cannot be pinned without mounting: the caller binds it by path
            return str(self._copy(fd, target, st))
        finally:
            os.close(fd)

    def _clone(self, fd: int, target: Path, st: os.stat_result, read_only: bool) -> Path:
        tree = _check(_libc.syscall(SYS_OPEN_TREE, fd, b"", OPEN_TREE_CLONE | AT_EMPTY_PATH | os.O_CLOEXEC),
                      "open_tree")
        try:
            flags = MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV | (MOUNT_ATTR_RDONLY if read_only else 0)
            attr = struct.pack("QQQQ", flags, 0, 0, 0)
            _check(_libc.syscall(SYS_MOUNT_SETATTR, tree, b"", AT_EMPTY_PATH, attr, len(attr)), "mount_setattr")
            if stat.S_ISDIR(st.st_mode):
                target.mkdir(0o700)
            else:
                os.close(os.open(target, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600))
            _check(_libc.syscall(SYS_MOVE_MOUNT, tree, b"", AT_FDCWD, bytes(target), MOVE_MOUNT_F_EMPTY_PATH),
                   "move_mount")
        finally:
            os.close(tree)
        self._mounted.append(target)
        return target

    def _copy(self, fd: int, target: Path, st: os.stat_result) -> Path:
        if stat.S_ISDIR(st.st_mode):
            target.mkdir(0o755)
            return target
        # An O_PATH fd cannot be read: reopen it through /proc, which follows no name in the workspace.
        with open(f"/proc/self/fd/{fd}", "rb") as src:
            if os.fstat(src.fileno()).st_ino != st.st_ino:
                raise OSError(f"{target} changed while it was copied")
            data = src.read(COPY_LIMIT)
        out = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o644)
        try:
            os.write(out, data)
        finally:
            os.close(out)
        return target

    def close(self) -> None:
        """Unmount and remove the bind sources (the container has its own copies of the mounts by now)."""
        for target in self._mounted:
            _libc.umount2(bytes(target), MNT_DETACH | UMOUNT_NOFOLLOW)
        self._mounted.clear()
        with contextlib.suppress(OSError):
            os.close(self._ws_fd)
        # Never a recursive delete: should an unmount have failed, that entry is still the user's file or
        # folder. rmdir and unlink refuse a mount point (EBUSY); copies of folders are empty.
        for entry in os.scandir(self.dir):
            with contextlib.suppress(OSError):
                if entry.is_dir(follow_symlinks=False):
                    os.rmdir(entry.path)
                else:
                    os.unlink(entry.path)
        with contextlib.suppress(OSError):
            os.rmdir(self.dir)
