"""Opening a path beneath a root folder without ever following a symlink: the walk shou.workspace's rules
stand on.

The path is resolved on its spelling first (`.` and `..`; nothing is followed, so the spelling is the truth),
then walked one component at a time from an open folder, each step `openat(..., O_NOFOLLOW)`: a symlink
anywhere on the way is refused, and a process swapping a folder for a symlink at the same moment cannot
redirect the open. Only a regular file (or a folder, when asked) is given back; a FIFO, a device or a socket is
refused in words the model can act on. Removing a tree a program made (`remove_at`, `remove_tree`) walks the
same way, one folder open at a time and without recursion, so no depth a program can make stops it.

It stands alone because it is the mechanism, with no opinion on which paths may be opened: what the model's
file tools may read or write (the user's config folder, `.shou/`, a repository's git control files, what the
host runs code from) and shou's own state are shou.workspace's, built on this and imported by nothing here.
"""

from __future__ import annotations

import contextlib
import errno
import itertools
import os
import stat
from collections.abc import Iterable
from pathlib import Path

from .errors import ToolError

__all__ = ["NotFound", "Opened", "lexists_at", "open_beneath", "open_folder", "relative_parts", "remove_at",
           "remove_tree", "up"]

class NotFound(ToolError):
    """The path (or a folder on the way) does not exist."""


_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_KINDS = {stat.S_IFDIR: "a directory", stat.S_IFIFO: "a FIFO (named pipe)", stat.S_IFSOCK: "a socket",
          stat.S_IFCHR: "a character device", stat.S_IFBLK: "a block device", stat.S_IFLNK: "a symlink"}


def relative_parts(root: Path, path: str) -> tuple[str, ...]:
    """The components of `path` below `root`, with `.` and `..` resolved on the spelling.

    Relative paths start at the root; absolute ones must lie inside it (spelled through the root as
    given or as resolved). `ToolError` when the path is empty, malformed or leads outside.
    """
    if not path.strip():
        raise ToolError("path is empty; give a path relative to the workspace, e.g. 'src/main.py'")
    if "\0" in path:
        raise ToolError(f"path {path!r} cannot be used: it contains a NUL byte")
    if os.path.isabs(path):
        spelled = os.path.normpath(path)
        for base in (os.path.abspath(root), os.path.realpath(root)):
            rel = os.path.relpath(spelled, base)
            if rel != ".." and not rel.startswith("../"):
                break
        else:
            raise ToolError(f"path {path!r} is outside the workspace {root}; use a path relative to it")
    else:
        rel = os.path.normpath(path)
        if rel == ".." or rel.startswith("../"):
            raise ToolError(f"path {path!r} is outside the workspace {root}; use a path relative to it")
    parts = tuple(p for p in rel.split("/") if p not in ("", "."))
    if any(len(p.encode("utf-8", "surrogateescape")) > 255 for p in parts):
        raise ToolError(f"path {path!r} cannot be used: a name in it is longer than 255 bytes")
    return parts


def _open_root(root: Path) -> int:
    try:
        return os.open(root, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    except OSError as e:
        raise ToolError(f"the workspace {root} cannot be opened: {e.strerror or e}") from None


def _step(dir_fd: int, name: str, shown: str, *, create: bool, dir_mode: int = 0o777) -> int:
    """Open the folder `name` in `dir_fd` without following a symlink (making it first if asked)."""
    for attempt in (0, 1):
        try:
            return os.open(name, _DIR_FLAGS, dir_fd=dir_fd)
        except FileNotFoundError:
            if not create or attempt:
                raise NotFound(f"folder {shown!r} does not exist in the workspace; call list_files to see "
                               "what is there") from None
            with contextlib.suppress(FileExistsError):  # made meanwhile: the next open checks what it is
                os.mkdir(name, dir_mode, dir_fd=dir_fd)
        except OSError as e:
            raise _refusal(dir_fd, name, shown, e) from None
    raise AssertionError("unreachable")


def _refusal(dir_fd: int, name: str, shown: str, e: OSError) -> ToolError:
    """Why opening `name` failed, in words the model can act on."""
    try:
        mode = os.lstat(name, dir_fd=dir_fd).st_mode
    except OSError:
        mode = 0
    if stat.S_ISLNK(mode) or e.errno == errno.ELOOP:
        return ToolError(f"{shown!r} is a symlink; the file tools do not follow symlinks (they could lead "
                         "outside the workspace). Use the path of the file it points to")
    if e.errno == errno.ENOTDIR:
        return ToolError(f"{shown!r} is not a folder")
    if e.errno == errno.ENXIO or (mode and not stat.S_ISREG(mode) and not stat.S_ISDIR(mode)):
        return ToolError(f"{shown!r} is {_KINDS.get(stat.S_IFMT(mode), 'not a regular file')}; the file tools "
                         "only read and write regular files")
    return ToolError(f"cannot open {shown!r}: {e.strerror or e}")


def open_folder(start: Path | int, parts: Iterable[str], *, make: bool = False) -> int:
    """An fd of the folder `parts` beneath `start` (a path, or an open folder, which stays open), each folder on
    the way opened without following a symlink (made first when `make`): a program running meanwhile cannot lead
    the caller out of the tree. OSError (raw, for callers that are no file tool) when one on the way is missing
    (and not made), a link or no folder. `.` and empty components are skipped."""
    fd = (os.open(start, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC) if isinstance(start, Path)
          else os.open(".", os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC, dir_fd=start))
    try:
        for name in parts:
            if name in ("", "."):
                continue
            if make:
                with contextlib.suppress(FileExistsError):  # what is there is checked by the open
                    os.mkdir(name, 0o777, dir_fd=fd)
            inner = os.open(name, _DIR_FLAGS, dir_fd=fd)
            os.close(fd)
            fd = inner
    except BaseException:
        os.close(fd)
        raise
    return fd


def remove_at(dir_fd: int, name: str, *, most_depth: int | None = None) -> bool:
    """Remove `name` in the folder `dir_fd`: a file or a link itself, or a folder with all it holds; whether it
    is gone. No link is followed, and nothing recurses: Python 3.11's `shutil.rmtree` recurses once a level, and
    a tree 1,500 deep (any sandboxed program can make one) raised RecursionError, not OSError. One folder is
    open at a time; going up, the parent is opened as `..` and must be the folder gone down from (a folder moved
    meanwhile stops the removal). `most_depth`: give up (False) below that many levels (bounded work)."""
    try:
        if not stat.S_ISDIR(os.lstat(name, dir_fd=dir_fd).st_mode):
            os.unlink(name, dir_fd=dir_fd)
            return True
        return _remove_folder(dir_fd, name, most_depth)
    except (OSError, ValueError):
        return False


def remove_tree(path: Path | str, *, most_depth: int | None = None) -> bool:
    """`remove_at` of a path: its last name in its parent folder (the parent reached as named); whether it is
    gone (True when there was nothing)."""
    parent, name = os.path.split(os.path.normpath(path))
    try:
        fd = os.open(parent or ".", os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    except OSError:
        return not os.path.lexists(path)
    try:
        return remove_at(fd, name, most_depth=most_depth) or not lexists_at(fd, name)
    finally:
        os.close(fd)


def lexists_at(dir_fd: int, name: str) -> bool:
    """Whether the folder `dir_fd` holds `name` (a link itself counts)."""
    try:
        os.lstat(name, dir_fd=dir_fd)
    except OSError:
        return False
    return True


def _remove_folder(dir_fd: int, name: str, most_depth: int | None) -> bool:
    down: list[tuple[str, tuple[int, int]]] = []  # the folders gone down through: name, and its parent's identity
    top = os.fstat(dir_fd)
    down.append((name, (top.st_dev, top.st_ino)))
    fd = os.open(name, _DIR_FLAGS, dir_fd=dir_fd)
    try:
        while True:
            sub, more = _clear_some(fd)
            if sub is not None:
                if most_depth is not None and len(down) >= most_depth:
                    return False
                here = os.fstat(fd)
                inner = os.open(sub, _DIR_FLAGS, dir_fd=fd)
                os.close(fd)
                fd = inner
                down.append((sub, (here.st_dev, here.st_ino)))
            elif not more:  # empty now: remove it from its parent
                here_name, parent = down.pop()
                if not down:
                    os.rmdir(here_name, dir_fd=dir_fd)
                    return True
                fd, same = up(fd, parent)
                if not same:
                    return False
                os.rmdir(here_name, dir_fd=fd)
    finally:
        os.close(fd)


def up(fd: int, parent: tuple[int, int]) -> tuple[int, bool]:
    """The folder above the open folder `fd` (which is closed), through `..`, and whether it is `parent` (device,
    inode): the folder a walk went down from, unless one on the way was moved meanwhile."""
    outer = os.open("..", os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC, dir_fd=fd)
    os.close(fd)
    st = os.fstat(outer)
    return outer, (st.st_dev, st.st_ino) == parent


def _clear_some(fd: int) -> tuple[str | None, bool]:
    """Unlink up to 1,024 entries of the folder `fd` that are no folders, the scan closed before the first
    unlink: the name of a folder among those read (or None), and whether more may be left to read."""
    with os.scandir(fd) as entries:
        batch = [(e.name, e.is_dir(follow_symlinks=False)) for e in itertools.islice(entries, 1024)]
    sub = None
    for entry, is_dir in batch:
        if is_dir:
            sub = sub or entry
        else:
            os.unlink(entry, dir_fd=fd)
    return sub, len(batch) == 1024


def open_beneath(root: Path, parts: tuple[str, ...], flags: int, *, make_parents: bool = False,
                 mode: int = 0o666, dir_mode: int = 0o777) -> int:
    """Open `root/parts...` with `flags`, following no symlink at any component; returns the fd.

    The final open adds O_NOFOLLOW, O_NONBLOCK (a FIFO must not block) and O_CLOEXEC, then checks that
    the result is a regular file (or a folder, when `flags` has O_DIRECTORY).
    """
    if not parts:
        raise ToolError("the path names the workspace itself; give a file inside it")
    dir_fd = _open_root(root)
    try:
        for i, name in enumerate(parts[:-1]):
            next_fd = _step(dir_fd, name, "/".join(parts[: i + 1]), create=make_parents, dir_mode=dir_mode)
            os.close(dir_fd)
            dir_fd = next_fd
        shown = "/".join(parts)
        try:
            fd = os.open(parts[-1], flags | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, mode, dir_fd=dir_fd)
        except FileNotFoundError:
            raise NotFound(f"file {shown!r} does not exist in the workspace; call list_files to see what is "
                           "there") from None
        except IsADirectoryError:
            raise ToolError(f"{shown!r} is a directory; give a file path, or call list_files with pattern "
                            f"'{shown}/*'") from None
        except OSError as e:
            raise _refusal(dir_fd, parts[-1], shown, e) from None
    finally:
        os.close(dir_fd)
    st = os.fstat(fd)
    if not (stat.S_ISDIR(st.st_mode) if flags & os.O_DIRECTORY else stat.S_ISREG(st.st_mode)):
        os.close(fd)
        if stat.S_ISDIR(st.st_mode):
            raise ToolError(f"{shown!r} is a directory; give a file path, or call list_files with pattern "
                            f"'{shown}/*'")
        raise ToolError(f"{shown!r} is {_KINDS.get(stat.S_IFMT(st.st_mode), 'not a regular file')}; the file "
                        "tools only read and write regular files")
    os.set_blocking(fd, True)
    return fd


class Opened:
    """A regular file opened beneath the workspace: its fd and size, closed on exit."""

    def __init__(self, fd: int, shown: str) -> None:
        self.fd = fd
        self.shown = shown
        self.stat = os.fstat(fd)

    def __enter__(self) -> Opened:
        return self

    def __exit__(self, *exc: object) -> None:
        os.close(self.fd)

    def read(self, limit: int) -> bytes:
        """The whole file from the start; `ToolError` when it is larger than `limit` bytes."""
        if self.stat.st_size > limit:
            raise ToolError(f"{self.shown!r} is {self.stat.st_size} bytes, too large (limit {limit})")
        chunks, total = [], 0
        while chunk := os.pread(self.fd, 1 << 20, total):
            chunks.append(chunk)
            total += len(chunk)
            if total > limit:  # it grew while we read
                raise ToolError(f"{self.shown!r} is over {limit} bytes, too large")
        return b"".join(chunks)

    def replace(self, data: bytes) -> None:
        """Make `data` the whole content of the file (same inode: owner, mode and links stay)."""
        if self.stat.st_nlink > 1:
            raise ToolError(f"{self.shown!r} has {self.stat.st_nlink} hard links; the file tools do not write "
                            "files that are also reachable under another name")
        os.ftruncate(self.fd, 0)
        view = memoryview(data)
        offset = 0
        while offset < len(view):
            offset += os.pwrite(self.fd, view[offset:], offset)
