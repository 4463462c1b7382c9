"""Every folder in the workspace that git could take for a repository folder: one bounded walk, no recursion.

Git's own test (`is_git_directory`) wants a `HEAD` that reads as a ref, an `objects` and a `refs` it can
enter, or a `commondir` naming where they are; it reads `.git` files and `commondir` as raw bytes. A test
of ours that copies git's risks being narrower than git in one corner (a `HEAD` link, `objects` an
executable file, a trailing space in a pointer, a name that is no UTF-8), and each corner was a way round
the disarming. So the walk over-approximates: a folder is a candidate when it holds an entry named `HEAD`
(of any type) and one named `objects`, `refs` or `commondir` (of any type); every `.git` folder is one, and
what any `.git` file, `.git` link or `commondir` names (read as git reads it, and also with whitespace
stripped) when that lies in the workspace. A folder with `objects` and `refs` but no `HEAD` is not one by its
layout (a person's package may hold those names, and pinning or tidying it damaged their files): git reaches
it only through a `commondir`, which makes it a candidate by the pointer rule.

Every folder is entered, candidates too (a repository inside a folder laid out as a bare one is still found),
but for git's own stores (`objects`, `refs`, `logs`, ...: files by the thousand) in a folder holding a `HEAD`
inside a `.git`: git refuses a submodule's folder nested in a repository folder, and never runs from there
(a pointer into one is followed anyway). Under a folder with no `HEAD` (`.git/modules/lib` before git made
it a repository) they are entered: git may later take a folder there for a submodule's.

The walk records what it saw by identity (device of the workspace, inode), so that a later walk can tell a
folder the program made from a person's folder it laid out as a repository (`git_protect.remove_planted`).
Errors on one entry (a link chain too long, a name the system refuses, even a bug) never end the walk; a walk
that could not read a folder or that reached `LIMIT` entries says so (`Scan.incomplete`).
"""

from __future__ import annotations

import errno
import os
import stat
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

__all__ = ["LIMIT", "MARKS", "Scan", "is_candidate", "pointer_readings", "resolve", "scan"]

LIMIT = 1_000_000  # entries read in one walk; past it the walk stops and says so
# The entries that make a folder a candidate: `HEAD` with any one of the others.
MARKS = ("HEAD", "objects", "refs", "commondir")
_POINTER_BYTES = 1 << 16
# The links the kernel follows in one path (MAXSYMLINKS): a longer chain is one git cannot follow either.
_MAX_LINKS = 40
# In a folder holding `HEAD` inside a `.git`: objects, refs and logs by the thousand, left out of the walk (a
# pointer into one is followed all the same).
_GITS_OWN = frozenset({b"objects", b"lfs", b"refs", b"logs", b"hooks", b"info", b"rr-cache"})

Identity = tuple[int, int]


@dataclass
class Scan:
    """What one walk found: candidate repository folders (workspace-relative, `.` the workspace) and their
    identities, `.git` files, every folder seen, and which of `MARKS` each folder held (by inode)."""

    dirs: dict[str, Identity] = field(default_factory=dict)
    files: list[str] = field(default_factory=list)
    folders: set[Identity] = field(default_factory=set)
    marks: dict[Identity, dict[str, int]] = field(default_factory=dict)
    entries: int = 0
    unreadable: list[str] = field(default_factory=list)
    truncated: bool = False

    def incomplete(self, known: list[str] | None = None) -> str:
        """Why the walk may have missed a repository ("" when it did not); folders in `known` (unreadable before
        the call too: none of the program's) are not counted."""
        why = []
        if self.truncated:
            why.append(f"it stopped after {self.entries} entries")
        before = set(known or ())
        unreadable = [n for n in self.unreadable if n not in before]
        if unreadable:
            names = [n.encode("utf-8", "surrogateescape").decode("utf-8", "replace") for n in unreadable[:5]]
            more = len(unreadable) - len(names)
            shown = ", ".join(names) + (f" and {more} more" if more else "")
            why.append(f"it could not read {shown}")
        return "; ".join(why)


def is_candidate(names: set[str] | dict[str, object]) -> bool:
    """Whether a folder holding entries of these names could be a repository folder to git: a `HEAD` with an
    `objects`, `refs` or `commondir` (a folder a `commondir` names is one by the pointer, not by this)."""
    return "HEAD" in names and any(n in names for n in MARKS[1:])


def resolve(path: bytes) -> bytes:
    """`os.path.realpath` (not strict) without recursion and bounded as the kernel bounds it: OSError (ELOOP)
    past `_MAX_LINKS` links. Python 3.11's own recurses once a link, and a chain of thousands of links raised
    RecursionError out of the walk."""
    pending = list(reversed(os.path.abspath(path).split(b"/")))
    resolved = b"/"
    links = 0
    while pending:
        part = pending.pop()
        if part in (b"", b"."):
            continue
        if part == b"..":
            resolved = os.path.dirname(resolved)
            continue
        here = os.path.join(resolved, part)
        try:
            mode = os.lstat(here).st_mode
        except OSError:  # missing (or unreadable): the rest is taken as spelled, as realpath does
            resolved = here
            continue
        if not stat.S_ISLNK(mode):
            resolved = here
            continue
        links += 1
        if links > _MAX_LINKS:
            raise OSError(errno.ELOOP, "too many levels of symbolic links", path)
        target = os.readlink(here)
        if target.startswith(b"/"):
            resolved = b"/"
        pending.extend(reversed(target.split(b"/")))
    return resolved


def pointer_readings(data: bytes, dotgit: bool) -> list[bytes]:
    """The paths a `.git` file (`dotgit`) or a `commondir` may name: git's reading (a C string: up to the first
    NUL, only trailing CR/LF stripped, after `gitdir: `) and, to be safe, the whitespace-stripped one."""
    raw = data.split(b"\0", 1)[0]
    exact = raw.rstrip(b"\r\n")
    loose = raw.strip()
    readings = []
    if dotgit:
        if exact.startswith(b"gitdir: "):
            readings.append(exact[len(b"gitdir: "):])
        if loose.startswith(b"gitdir:"):
            readings.append(loose[len(b"gitdir:"):].strip())
    else:
        readings += [exact, loose]
    return [r for r in dict.fromkeys(readings) if r]


class _Walk:
    def __init__(self, workspace: Path, skip: frozenset[str], nested: bool, limit: int) -> None:
        self.nested = nested
        self.top = os.fsencode(workspace)
        self.skip = {os.fsencode(n) for n in skip | {".shou"}}
        self.limit = limit
        self.scan = Scan()
        st = os.stat(self.top)
        self.dev = st.st_dev
        self.stack: list[tuple[bytes, int]] = [(b".", st.st_ino)]

    def path(self, rel: bytes) -> bytes:
        return self.top if rel == b"." else self.top + b"/" + rel

    def run(self) -> Scan:
        while self.stack:
            rel, ino = self.stack.pop()
            if (self.dev, ino) in self.scan.folders:
                continue  # reached twice (a pointer to a folder the walk enters anyway)
            if self.scan.entries >= self.limit:
                self.scan.truncated = True
                break
            try:
                self.folder(rel, ino)
            except Exception:  # one folder's error (or a bug) never ends the walk: it is named
                self.scan.unreadable.append(_text(rel))
        return self.scan

    def folder(self, rel: bytes, ino: int) -> None:
        try:
            with os.scandir(self.path(rel)) as it:
                entries = {e.name: e for e in it}
        except (FileNotFoundError, NotADirectoryError):
            return  # removed meanwhile: nothing there now
        except (OSError, ValueError):
            self.scan.unreadable.append(_text(rel))
            return
        ident = (self.dev, ino)
        self.scan.folders.add(ident)
        self.scan.entries += len(entries)
        if b"HEAD" in entries or b"objects" in entries or b"refs" in entries or b"commondir" in entries:
            self.scan.marks[ident] = {name: _inode(entries[key]) for name in MARKS
                                      if (key := os.fsencode(name)) in entries}
        candidate = b"HEAD" in entries and (b"objects" in entries or b"refs" in entries or b"commondir" in entries)
        if candidate:
            self.add(rel, ino)
        if (dotgit := entries.get(b".git")) is not None:
            self.guarded(rel, lambda: self.dotgit(rel, dotgit))
        if (common := entries.get(b"commondir")) is not None:
            self.guarded(_at(rel, b"commondir"), lambda: self.pointer(rel, common, dotgit=False))
        # Only under a HEAD: a folder without one (`.git/modules/lib` before git fills it) may later become a
        # submodule's repository folder, and a repository planted in its `info` would be taken for that one's.
        inside_git = candidate and b".git" in rel.split(b"/")
        for name, entry in entries.items():
            if rel == b"." and (name in self.skip or (not self.nested and name != b".git")):
                continue
            if inside_git and name in _GITS_OWN:
                continue  # git's own stores: git reads no setting there, never runs from there
            try:
                if entry.is_dir(follow_symlinks=False):
                    self.stack.append((_at(rel, name), entry.inode()))
            except OSError:
                self.scan.unreadable.append(_text(_at(rel, name)))

    def guarded(self, rel: bytes, step: Callable[[], None]) -> None:
        """Run one step of the walk; an error there (or a bug) makes `rel` unreadable, never ends the walk."""
        try:
            step()
        except Exception:  # failing closed: the walk says it is incomplete
            self.scan.unreadable.append(_text(rel))

    def add(self, rel: bytes, ino: int) -> None:
        self.scan.dirs.setdefault(_text(rel), (self.dev, ino))

    def dotgit(self, rel: bytes, entry: os.DirEntry[bytes]) -> None:
        """A `.git` folder is a candidate; a `.git` file or link leads to one (a link to a file is a `.git` file,
        its path taken from the folder holding the link, as git does, and from the file's own folder too)."""
        here = _at(rel, b".git")
        try:
            if entry.is_dir(follow_symlinks=False):
                self.add(here, entry.inode())
                return
            self.scan.files.append(_text(here))
            if not entry.is_symlink():
                self.pointer(rel, entry, dotgit=True)
                return
            # A link is resolved only inside the workspace (one leading out names what the program cannot write).
            target = self.inside(entry.path, follow=True)
            if target is not None and os.path.isdir(self.path(target)):
                self.lead(target)
            elif target is not None:  # to a `.git` file: git reads it from the link's folder; its own folder too
                self.pointer(rel, entry, dotgit=True)
                self.pointer(os.path.dirname(target) or b".", entry, dotgit=True)
        except (OSError, ValueError):
            self.scan.unreadable.append(_text(here))

    def pointer(self, rel: bytes, entry: os.DirEntry[bytes], *, dotgit: bool) -> None:
        """Follow the file `entry` (a `.git` file or `commondir`) in the folder `rel` to what it names."""
        data = _read_regular(entry.path)
        if data is None:
            return  # a folder, a dangling link, unreadable: git cannot read it either
        for named in pointer_readings(data, dotgit):
            try:
                target = self.inside(os.path.join(self.path(rel), named), follow=True)
            except (OSError, ValueError, RecursionError):
                self.scan.unreadable.append(_text(_at(rel, os.fsencode(entry.name))))
                continue
            if target is not None and os.path.isdir(self.path(target)):
                self.lead(target)

    def lead(self, target: bytes) -> None:
        """A folder a pointer names: a candidate, and entered by the walk (wherever it lies: in an object store
        too), so that its own `commondir` and `.git` are followed in turn."""
        try:
            st = os.stat(self.path(target))
        except (OSError, ValueError):
            return
        self.add(target, st.st_ino)
        self.stack.append((target, st.st_ino))

    def inside(self, path: bytes, *, follow: bool) -> bytes | None:
        """`path` (links resolved) relative to the workspace, or None when it lies outside it, is the workspace's
        top itself taken as `.`, or lies under a top name left out of the walk."""
        real = resolve(path) if follow else os.path.normpath(path)
        rel = os.path.relpath(real, self.top)
        if rel == b".":
            return b"."
        if rel == b".." or rel.startswith(b"../") or rel.split(b"/", 1)[0] in self.skip:
            return None
        return rel


def _read_regular(path: bytes) -> bytes | None:
    """The start of the regular file at `path` (a link followed: one to a file outside is read, never written);
    None for anything else. Never blocks: a FIFO named `commondir` must not hang the walk."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC | os.O_NOCTTY)
    except (OSError, ValueError):
        return None
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return None
        return os.read(fd, _POINTER_BYTES)
    except OSError:
        return None
    finally:
        os.close(fd)


def _inode(entry: os.DirEntry[bytes]) -> int:
    try:
        return entry.inode()
    except OSError:
        return -1


def _at(rel: bytes, name: bytes) -> bytes:
    return name if rel == b"." else rel + b"/" + name


def _text(rel: bytes) -> str:
    return os.fsdecode(rel)


def scan(workspace: Path, skip: frozenset[str] = frozenset(), *, nested: bool = True, limit: int = LIMIT) -> Scan:
    """Walk the (resolved) workspace: every candidate repository folder, `.git` file and folder (see the module's
    docstring); not `nested`: the top folder, its `.git` and what they lead to only. Raises OSError only when
    the workspace itself cannot be read."""
    return _Walk(workspace, skip, nested, limit).run()
