"""Undoing a run's changes to the workspace, and showing them as a diff.

`undo` puts back each path's state from before the first change undone: exact bytes and mode, a deleted file
made again, a created one removed. It refuses, listing them, paths whose current content is not what shou
last left there (changed outside shou since), unless forced. Paths are opened the way the file tools open
them (workspace.py: one component at a time, no symlink followed), since the workspace is untrusted.

A file whose prior content shou could not keep (too big, or past a command's budget) and that a command moved
(`mv`: the same inode, size, modification time and mode, under another path of the run's) is moved back, not
lost; a path that holds, or may hold, the only copy of what undo cannot put back otherwise is never removed or
overwritten.
"""

from __future__ import annotations

import contextlib
import ctypes
import difflib
import os
from dataclasses import dataclass, field
from pathlib import Path

from ..beneath import open_folder
from ..errors import ToolError
from ..workspace import NotFound, open_beneath, open_file, relative_parts, write_lock
from .capture import current_state
from .history import Change, PathPlan, State, plan, same_state
from .journal import Book

__all__ = ["Outcome", "diff_text", "undo"]


@dataclass
class Outcome:
    """What `undo` did: paths restored, removed, refused (changed outside shou) and not restorable."""

    restored: list[str] = field(default_factory=list)
    removed: list[str] = field(default_factory=list)
    conflicts: list[str] = field(default_factory=list)
    lost: list[str] = field(default_factory=list)  # (path: why) the prior content was not kept or is gone


def _conflict(book: Book, p: PathPlan) -> str | None:
    """Why `p.path` is not as shou left it, or None when it is."""
    now = current_state(book, book.workspace, p.path)
    if isinstance(now, str):
        return f"{p.path} ({now})"
    if p.expected_known and same_state(now, p.expected):
        return None
    if not p.expected_known and (same_state(now, p.fallback) or (now is not None and now.get("sha") == p.next)):
        return None  # a kill came between the change and its record: either way the file is as shou left it
    if same_state(now, p.target):
        return None  # already as it was: nothing to overwrite
    return f"{p.path} (changed since shou changed it)"


def undo(book: Book, chosen: list[Change], *, force: bool = False) -> Outcome:
    """Undo `chosen` (one run's changes after some step): all of them, or, when some path was changed outside
    shou and not `force`, none (`conflicts` says which)."""
    out = Outcome()
    plans = plan(chosen)
    for p in plans:
        why = _conflict(book, p)
        if why is not None:
            out.conflicts.append(why)
    if out.conflicts and not force:
        return out
    done = _moves_back(book, plans, out)
    for p in plans:
        if p.path in done:
            continue
        try:
            _restore(book, p.path, p.target, out)
        except (ToolError, OSError) as e:
            out.lost.append(f"{p.path}: {e}")
    return out


def _not_restorable(book: Book, target: State) -> bool:
    """Whether the file `target` describes cannot be made again from a checkpoint."""
    if target is None:
        return False
    sha = target.get("sha")
    return not isinstance(sha, str) or book.get_blob(sha) is None


def _moves_back(book: Book, plans: list[PathPlan], out: Outcome) -> set[str]:
    """Move back each file whose prior content was not kept and that the run moved (`mv`) to another path of
    the plan, one it created or one it overwrote: found by inode, size, modification time and mode, which `mv`
    keeps, and a birth time before the file was last seen. The holder of such a file is never removed or
    overwritten while the file's old path is taken, nor while it only looks alike (a copy, a move across file
    systems, no inode or birth time known, more than one match): it may hold the only copy, and is kept and
    said so. Returns the paths dealt with (an overwritten path moved back is then restored as any other)."""
    lost = {p.path: p.target for p in plans if _not_restorable(book, p.target)}
    if not lost:
        return set()
    root = book.workspace
    done: set[str] = set()
    moves: dict[str, tuple[str, tuple[int, int, int, int, int | None]]] = {}  # holder -> (home, signature)
    created = {p.path for p in plans if p.target is None}
    for p in plans:
        sig = _signature(root, p.path)
        if sig is None:
            continue
        same = [h for h, t in lost.items() if h != p.path and _matches(sig, t) == "same"]
        alike = [h for h, t in lost.items() if h != p.path and _matches(sig, t) == "alike"]
        if len(same) == 1:
            moves[p.path] = (same[0], sig)
        elif same or alike:
            done.add(p.path)  # neither removed nor overwritten: it may be all that is left of one of them
            out.lost.append(f"kept {p.path} as it is: it may hold what {' or '.join(sorted(same + alike))} held, "
                            "which shou could not keep")
    moved = True
    while moves and moved:  # a chain (b moved to c, then a to b) goes back from its free end
        moved = False
        for holder, (home, sig) in list(moves.items()):
            try:
                with _locked(root, holder, home):
                    if current_state(book, root, home) is not None or _signature(root, holder) != sig:
                        continue  # taken (for now), or changed since
                    _rename(root, holder, home)
            except (ToolError, OSError) as e:
                del moves[holder]
                done.add(holder)
                out.lost.append(f"{home}: {e}; {holder}, which holds its old content, is kept as it is")
                continue
            del moves[holder]
            moved = True
            done.add(home)
            out.restored.append(home)
            if holder in created:
                done.add(holder)
                out.removed.append(holder)
    for holder, (home, _) in moves.items():
        done.add(holder)
        out.lost.append(f"{home}: its old content was not kept, and {holder} (kept as it is) holds it; {home} is "
                        "taken")
    return done


def _signature(root: Path, path: str) -> tuple[int, int, int, int, int | None] | None:
    """(size, modification time in ns, mode, inode, birth time in ns or None when unknown) of the workspace file
    `path`, None when there is none."""
    try:
        with open_file(root, path) as f:
            st = f.stat
            return st.st_size, st.st_mtime_ns, st.st_mode & 0o7777, st.st_ino, _birth(f.fd, st)
    except (NotFound, ToolError, OSError):
        return None


def _matches(sig: tuple[int, int, int, int, int | None], target: State) -> str | None:
    """"same": the file `sig` describes is the one `target` was (its inode, size, time and mode, and not made
    after it was seen); "alike": it only looks like it (size, time and mode); None: neither."""
    if target is None or target.get("mtime") is None:
        return None
    size, mtime, mode, ino, born = sig
    if (size, mtime, mode) != (target.get("size"), target.get("mtime"), int(target.get("mode", -1)) & 0o7777):
        return None
    seen = target.get("seen")
    # A new file can be given the inode number a deleted one freed (ext4 does so at once): only a file made
    # before the old one was last seen is it. Not known (an old journal, a system that keeps no birth time):
    # it only looks alike, and is kept, not moved.
    if ino == target.get("ino") and born is not None and isinstance(seen, int) and born <= seen:
        return "same"
    return "alike"  # a copy, a move across file systems, a new file given the freed inode number


class _StatxTime(ctypes.Structure):
    _fields_ = [("sec", ctypes.c_int64), ("nsec", ctypes.c_uint32), ("reserved", ctypes.c_int32)]


class _Statx(ctypes.Structure):
    _fields_ = [("mask", ctypes.c_uint32), ("blksize", ctypes.c_uint32), ("attributes", ctypes.c_uint64),
                ("nlink", ctypes.c_uint32), ("uid", ctypes.c_uint32), ("gid", ctypes.c_uint32),
                ("mode", ctypes.c_uint16), ("spare0", ctypes.c_uint16), ("ino", ctypes.c_uint64),
                ("size", ctypes.c_uint64), ("blocks", ctypes.c_uint64), ("attributes_mask", ctypes.c_uint64),
                ("atime", _StatxTime), ("btime", _StatxTime), ("ctime", _StatxTime), ("mtime", _StatxTime),
                ("rest", ctypes.c_uint64 * 32)]  # room past what the kernel fills (256 bytes)


def _birth(fd: int, st: os.stat_result) -> int | None:
    """When the open file `fd` was made (ns since the epoch), None when the system does not say."""
    born = getattr(st, "st_birthtime", None)
    if born is not None:
        return int(born * 1e9)
    statx = getattr(_LIBC, "statx", None) if _LIBC is not None else None
    if statx is None:
        return None
    buf = _Statx()
    if statx(fd, b"", 0x1000, 0x800, ctypes.byref(buf)) != 0 or not buf.mask & 0x800:  # AT_EMPTY_PATH, STATX_BTIME
        return None
    return buf.btime.sec * 1_000_000_000 + buf.btime.nsec


try:
    _LIBC: ctypes.CDLL | None = ctypes.CDLL(None, use_errno=True)
except OSError:
    _LIBC = None


def _locked(root: Path, *paths: str) -> contextlib.ExitStack:
    """The write locks of `paths`, each once (two paths may share one), always taken in the same order."""
    stack = contextlib.ExitStack()
    for lock in sorted({id(lk): lk for lk in (write_lock(root, p) for p in paths)}.values(), key=id):
        stack.enter_context(lock)
    return stack


def _rename(root: Path, src: str, dst: str) -> None:
    """Move the workspace file `src` to `dst` (its folders made), no symlink followed on either way."""
    s, d = relative_parts(root, src), relative_parts(root, dst)
    src_dir, dst_dir = open_folder(root, s[:-1]), open_folder(root, d[:-1], make=True)
    try:
        os.rename(s[-1], d[-1], src_dir_fd=src_dir, dst_dir_fd=dst_dir)
    finally:
        os.close(src_dir)
        os.close(dst_dir)


def _restore(book: Book, path: str, target: State, out: Outcome) -> None:
    root = book.workspace
    with write_lock(root, path):
        if target is None:
            if _remove(root, path):
                out.removed.append(path)
            return
        sha = target.get("sha")
        data = book.get_blob(sha) if isinstance(sha, str) else None
        if data is None:
            why = ("too big to keep (or past what shou keeps of one command's files)"
                   if target.get("big") else "its checkpoint is gone")
            out.lost.append(f"{path}: {why}; left as it is")
            return
        try:
            f = open_file(root, path, write=True)
        except NotFound:
            f = open_file(root, path, write=True, create=True)
        with f:
            f.replace(data)
            os.fchmod(f.fd, int(target.get("mode", 0o644)) & 0o7777)
        out.restored.append(path)


def _remove(root: Path, path: str) -> bool:
    """Delete the workspace file `path` (no symlink followed on the way); False when it is already gone."""
    parts = relative_parts(root, path)
    if len(parts) > 1:
        try:
            dir_fd = open_beneath(root, parts[:-1], os.O_RDONLY | os.O_DIRECTORY)
        except NotFound:
            return False
    else:
        dir_fd = os.open(root, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        os.unlink(parts[-1], dir_fd=dir_fd)
        return True
    except FileNotFoundError:
        return False
    finally:
        os.close(dir_fd)


# ---------------------------------------------------------------- diff

_TEXT_LIMIT = 2 * 2**20  # the largest content shown as text in a diff


def _content(book: Book, state: State) -> tuple[list[str] | None, str]:
    """The state's lines (None: not shown as text) and, when not shown, why."""
    if state is None:
        return [], ""
    if state.get("big"):
        return None, f"too big to keep ({state.get('size')} bytes)"
    data = book.get_blob(str(state.get("sha")))
    if data is None:
        return None, "its checkpoint is gone"
    if b"\0" in data[:8192] or len(data) > _TEXT_LIMIT:
        return None, f"binary or large ({len(data)} bytes)"
    try:
        return data.decode("utf-8").splitlines(keepends=True), ""
    except UnicodeDecodeError:
        return None, f"not UTF-8 text ({len(data)} bytes)"


def diff_text(book: Book, chosen: list[Change]) -> str:
    """A unified diff of what `chosen` changed: each path from its state before the first change to its state
    after the last (a created file from /dev/null, a deleted one to it)."""
    pieces: list[str] = []
    for p in plan(chosen)[::-1]:
        a, why_a = _content(book, p.target)
        b, why_b = _content(book, p.expected if p.expected_known else p.fallback)
        old = "/dev/null" if p.target is None else f"a/{p.path}"
        new = "/dev/null" if (p.expected_known and p.expected is None) else f"b/{p.path}"
        if a is None or b is None:
            pieces.append(f"--- {old}\n+++ {new}\n(no text diff: {why_a or why_b})\n")
            continue
        lines = list(difflib.unified_diff(a, b, old, new))
        lines = [line if line.endswith("\n") else line + "\n\\ No newline at end of file\n" for line in lines]
        if lines:
            pieces.append("".join(lines))
        elif (p.target or {}).get("mode") != (p.expected or {}).get("mode"):
            pieces.append(f"--- {old}\n+++ {new}\n(mode {_mode(p.target)} -> {_mode(p.expected)})\n")
    return "".join(pieces)


def _mode(state: State) -> str:
    return "none" if state is None else oct(int(state.get("mode", 0)))
