"""`git_protect.remove_planted` for a long-lived sandboxed process (the stateful interpreter), one cell at a time.

The process's binds are fixed when it starts, but a cell is one call: what the program may leave for the
host's git is judged against the workspace as it was when the cell started (`Tidy.begin`), not when the
process did. Otherwise a repository the person makes (or clones) on the host while the interpreter lives would
be taken for the program's, and its settings and hooks stripped.

Such a repository is not pinned in the process (its binds were made before it existed), so the program could
write its config or hooks during a cell. `begin` keeps what git reads there (config files, `commondir`, hooks'
identities), by the identity (device, inode) of the repository folder, and the tidy after the cell finds the
folder by that identity wherever the program moved it (a rename kept the path-keyed state from applying),
puts the files back and takes the execute bits off a changed hook.

A repository the program made in an earlier cell stays the program's (`Tidy.ours`). Between cells the
sandbox's processes are paused (`sandbox.started.Started.pause`: SIGSTOP, which SIGKILL still ends, unlike the
cgroup freezer, whose frozen interpreter outlived a killed shou), and the next cell's walk is taken before they
resume: what a thread or background process the program left running writes is always written during a cell,
and judged at its end. Were a process impossible to stop (an uninterruptible call), the cell's note says so.
"""

from __future__ import annotations

import contextlib
import os
import stat
from dataclasses import dataclass, field
from pathlib import Path

from .beneath import open_folder
from .errors import UserError
from .git_disarm import no_exec, replace_at, some, unlink_at
from .git_protect import Protected, protect, remove_planted
from .git_walk import Scan

__all__ = ["Tidy"]

# What git reads in a repository folder to decide what to run: kept byte for byte in an unpinned one.
KEPT_FILES = ("config", "config.worktree", "commondir")
_KEEP_LIMIT = 1 << 20  # a bigger file is not kept: it is put back as nothing (git takes none as empty)


@dataclass
class _Kept:
    """A repository folder of the person's that the process has no pins for, as it was when a cell began."""

    ino: int
    rel: str  # where it was when the cell began (the note's name when it cannot be found by identity)
    # A regular file's bytes; (inode, mode) of anything else there; None: nothing there.
    files: dict[str, bytes | tuple[int, int] | None] = field(default_factory=dict)
    hooks: dict[str, tuple[int, int, int, int]] = field(default_factory=dict)


class Tidy:
    """Call `begin` before each cell and the object after it (a note, or ""); see the module's docstring."""

    def __init__(self, workspace: Path, protected: Protected) -> None:
        self.workspace = workspace
        self.pins = protected  # the process's own
        self.protected = protected
        self.kept: dict[tuple[int, int], _Kept] = {}
        self.ours: set[tuple[int, int]] = set()  # repository folders the program made in an earlier cell

    def begin(self) -> None:
        """Take the walk the next tidy compares with, and keep what git reads in each repository found that the
        process has no pins for."""
        try:
            fresh = protect(self.workspace, make_missing=False, absent=self.pins.absent, skip=self.pins.skip)
        except UserError:  # too big a workspace now, or changing: the previous walk stays
            return
        before = fresh.before
        if before is not None and self.ours:  # the program's stay new to each walk: judged again at the cell's end
            before = Scan({r: i for r, i in before.dirs.items() if i not in self.ours}, before.files,
                          before.folders - self.ours, before.marks, before.entries, before.unreadable, before.truncated)
        repositories = None if fresh.repositories is None else fresh.repositories - self.ours
        self.protected = Protected(self.pins.git_dirs, tuple(dict.fromkeys((*self.pins.read_only, *fresh.read_only))),
                                   self.pins.absent, repositories, self.pins.skip, before)
        pinned = set(self.pins.git_dirs)
        real = Path(os.path.realpath(self.workspace))
        found = fresh.before.dirs if fresh.before is not None else {}
        # By the walk's identity of the folder (what the walk after the cell reports), not by its path.
        self.kept = {ident: kept for rel in fresh.git_dirs if rel not in pinned and (ident := found.get(rel))
                     and ident not in self.ours and (kept := _keep(real, rel))}

    def __call__(self) -> str:
        seen: list[Scan] = []
        note = remove_planted(self.workspace, self.protected, seen)
        before = self.protected.before
        if seen and before is not None:
            self.ours |= {i for i in seen[0].dirs.values() if i not in before.folders}
        real = Path(os.path.realpath(self.workspace))
        # Where each kept folder is now, by identity: the program may have renamed it.
        now = {ident: rel for rel, ident in seen[0].dirs.items()} if seen else {}
        restored = [x for ident, kept in self.kept.items() for x in _restore(real, now.get(ident, kept.rel), kept)]
        if restored:
            note = "; ".join(x for x in (note, f"put back {some(restored)}, which the program changed: git on the "
                                               "host would run what they name (the repository appeared after the "
                                               "interpreter started, so it is not read-only to it)") if x)
        return note


def _keep(workspace: Path, rel: str) -> _Kept | None:
    try:
        fd = open_folder(workspace, rel.split("/"))
    except (OSError, ValueError):
        return None
    try:
        kept = _Kept(os.fstat(fd).st_ino, rel)
        for name in KEPT_FILES:
            kept.files[name] = _state(fd, name)
        kept.hooks = _hooks(fd)
        return kept
    finally:
        os.close(fd)


def _state(dir_fd: int, name: str) -> bytes | tuple[int, int] | None:
    """A regular file's bytes, (inode, mode) of anything else (a link, a folder, a file too big to keep), or None."""
    try:
        fd = os.open(name, os.O_PATH | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=dir_fd)
    except OSError:
        return None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode) or st.st_size > _KEEP_LIMIT:
            return (st.st_ino, st.st_mode)
        with open(f"/proc/self/fd/{fd}", "rb") as f:  # this very file, whatever was renamed since
            return f.read(_KEEP_LIMIT + 1)
    except OSError:
        return None
    finally:
        os.close(fd)


def _hooks(repo_fd: int) -> dict[str, tuple[int, int, int, int]]:
    """Each hook's identity and state: (inode, mode, size, modification time)."""
    found = {}
    with contextlib.suppress(OSError):
        fd = open_folder(repo_fd, ("hooks",))
        try:
            for entry in os.scandir(fd):
                st = entry.stat(follow_symlinks=False)
                found[entry.name] = (st.st_ino, st.st_mode, st.st_size, st.st_mtime_ns)
        finally:
            os.close(fd)
    return found


def _restore(workspace: Path, rel: str, kept: _Kept) -> list[str]:
    """Put back the kept files of the folder `rel` and disarm a hook that changed; the paths restored."""
    try:
        fd = open_folder(workspace, rel.split("/"))
    except (OSError, ValueError):
        return []
    done = []
    try:
        if os.fstat(fd).st_ino != kept.ino:
            return []  # another folder there now: the walk after the call judged it
        for name, data in kept.files.items():
            if _state(fd, name) == data:
                continue
            unlink_at(fd, name)  # a folder or link there now: removed, never followed
            if isinstance(data, bytes):
                with contextlib.suppress(OSError):
                    replace_at(fd, name, data, os.stat(fd))
            # else nothing was there, or what was (a link of the person's) cannot be made again: none is
            # safe, as git reads a missing config as empty
            done.append(f"{rel}/{name}")
        done += [f"{rel}/hooks/{name}" for name in _changed_hooks(fd, kept.hooks)]
    finally:
        os.close(fd)
    return done


def _changed_hooks(repo_fd: int, before: dict[str, tuple[int, int, int, int]]) -> list[str]:
    """Hooks new or changed since `before`: a link removed, a file made not executable."""
    changed = []
    now = _hooks(repo_fd)
    with contextlib.suppress(OSError):
        if stat.S_ISLNK(os.lstat("hooks", dir_fd=repo_fd).st_mode):
            return ["(a link)"] if unlink_at(repo_fd, "hooks") else []
        fd = open_folder(repo_fd, ("hooks",))
        try:
            for name, state in now.items():
                if before.get(name) == state:
                    continue
                if (stat.S_ISLNK(state[1]) and unlink_at(fd, name)) or no_exec(fd, name):
                    changed.append(name)
        finally:
            os.close(fd)
    return changed
