"""A repository's configuration and hooks, kept read-only to sandboxed code and to the file tools.

An allow rule such as `git status` trusts git, and git runs what its configuration names
(`core.fsmonitor`, `core.pager`, `core.hooksPath`, filter drivers, aliases) and the hooks it finds. If the
model could write those, a narrow rule would run arbitrary code. So the config and hooks of every
repository in the workspace (the top one and any other found by one walk of its folders, `git_walk`, which
takes for a repository whatever git could: a person's folder may hold several) are bound read-only in the
sandbox (and each repository folder over itself, so that it cannot be renamed away from those binds; a
`commondir` the program makes is removed after the call), and
`is_git_control_path` makes the file tools refuse them (at any depth, and the `.git` file that could point
git at a folder of the model's). A repository the program makes is disarmed after its call (`git_disarm`):
the person's git on the host would obey it outside any sandbox. What is new is told by comparing a walk after
the call with the one before it, by identity (`remove_planted`); an error never turns that off.

Git inside the sandbox also gets `GIT_ENV`, settings that outrank every config file: no fsmonitor, no
descent into submodules (a repository the program made and registered in the index as a submodule
would otherwise be entered, and its own config obeyed) and no implicit bare repositories (a folder laid
out as one would be taken for the repository).
"""

from __future__ import annotations

import contextlib
import errno
import os
import resource
import stat
from dataclasses import dataclass, field
from pathlib import Path

from .beneath import open_folder
from .errors import UserError
from .git_disarm import disarm, some, unlink_at
from .git_walk import LIMIT, Scan, resolve, scan

__all__ = ["GIT_CONTROL_NAMES", "GIT_ENV", "Protected", "fd_room", "is_git_control_path", "open_path_beneath",
           "open_pin", "protect", "protected_paths", "remove_planted"]

# Inside a git folder: what git reads to decide what to run, and where the rest of it lives.
GIT_CONTROL_NAMES = frozenset({"config", "config.worktree", "hooks", "commondir"})
_GIT_SETTINGS = (("core.fsmonitor", "false"), ("diff.ignoreSubmodules", "all"), ("safe.bareRepository", "explicit"))
GIT_ENV = {"GIT_CONFIG_COUNT": str(len(_GIT_SETTINGS))}
for _i, (_key, _value) in enumerate(_GIT_SETTINGS):
    GIT_ENV[f"GIT_CONFIG_KEY_{_i}"], GIT_ENV[f"GIT_CONFIG_VALUE_{_i}"] = _key, _value
# Read by git when present, but only worth binding read-only then: where missing, the sandbox must not make
# them (a mount point would have to be created in the user's repository), so `remove_planted` undoes them.
PLANTABLE = ("commondir", "config.worktree")


def is_git_control_path(parts: tuple[str, ...]) -> bool:
    """Whether a workspace path (its components) is a repository's `.git` file, config or hooks."""
    for i, part in enumerate(parts):
        if part.casefold() == ".git":
            rest = [p.casefold() for p in parts[i + 1:]]
            if not rest or GIT_CONTROL_NAMES.intersection(rest):
                return True
    return False


@dataclass(frozen=True)
class Protected:
    """What the sandbox must pin: `git_dirs` bound read-write over themselves (a mount point cannot be
    renamed or removed, so the binds beneath stay where git looks), parents first; `read_only` paths."""

    git_dirs: tuple[str, ...]
    read_only: tuple[str, ...]
    # Start-up files missing in the workspace (`workspace.missing_host_files`): removed when the program makes them.
    absent: tuple[str, ...] = ()
    # Every repository folder found before the call, by identity (device, inode): one found after it that is
    # none of them is the program's, and is disarmed (`git_disarm`). By identity, not path: the program may
    # move a person's `proj` away (the pins move with it) and make a `proj/.git` of its own in its place.
    # None: not looked for, nothing disarmed.
    repositories: frozenset[tuple[int, int]] | None = None
    # The workspace's top names left out of the walk: bound read-only, nothing can be planted there.
    skip: tuple[str, ...] = ()
    # The walk this was made from (`git_walk.scan`): what `remove_planted` compares the walk after the call with.
    # Not compared: the warm sandboxes keep one sandbox while the pins are the same.
    before: Scan | None = field(default=None, compare=False, hash=False)


def _inside(workspace: Path, path: Path) -> str | None:
    """`path` resolved, relative to the (resolved) workspace, or None when it lies outside it."""
    # A link swapped for a file mid-way makes readlink fail (EINVAL): the caller says the workspace moved. A chain
    # of links longer than the kernel follows is OSError too (bounded, never recursion: `git_walk.resolve`).
    real = os.fsdecode(resolve(os.fsencode(path)))
    rel = os.path.relpath(real, workspace)
    return None if rel == ".." or rel.startswith("../") or rel == "." else rel


def _at(rel: str, name: str) -> str:
    return name if rel == "." else f"{rel}/{name}"


def protected_paths(workspace: Path, *, make_missing: bool = True) -> list[str]:
    """Workspace-relative, resolved paths the sandbox must see read-only: each repository folder's
    `config` and `hooks` (with `make_missing`, made empty when missing, so that nothing new can appear
    there), its `commondir` and `config.worktree` when present, and a `.git` file."""
    # The top repository's only: the file tools refuse a `.git` folder's config and hooks at any depth
    # (`is_git_control_path`), and a walk of a workspace of $HOME on each write would cost seconds.
    return list(protect(workspace, make_missing=make_missing, nested=False).read_only)


def protect(workspace: Path, *, make_missing: bool = True, absent: tuple[str, ...] = (), skip: tuple[str, ...] = (),
            nested: bool = True) -> Protected:
    """The repository folders to pin and the paths to bind read-only (see `protected_paths`), of every
    repository in the workspace (`nested`; else the top one's only) but those under the top names in `skip`
    (bound read-only whole: `host_paths.read_only_tops`; a writable pin in one would open it to writes);
    `absent`: the start-up files missing in the workspace to remove when the program makes them
    (`workspace.missing_host_files`).

    Raises `UserError` when the workspace changes under our feet (a link swapped for a file while it is
    read): sandboxed code running in parallel is doing that, and the call is refused rather than half-protected.
    """
    try:
        return _protect(Path(os.path.realpath(workspace)), make_missing, absent, skip, nested)
    except (OSError, ValueError, RecursionError) as e:
        raise UserError(f"the workspace's repository changed while the sandbox was being prepared ({e}); "
                        "the command was not run. Stop whatever is rewriting .git and try again") from None


def _protect(workspace: Path, make_missing: bool, absent: tuple[str, ...], skip: tuple[str, ...],
             nested: bool) -> Protected:
    walk = scan(workspace, frozenset(skip), nested=nested)
    if walk.truncated:  # a repository past the bound would be left unpinned
        raise UserError(f"the workspace holds more than {LIMIT} files and folders: too many to find every git "
                        "repository in before each sandboxed call; the command was not run. Run shou in a "
                        "smaller folder")
    dirs = sorted(walk.dirs, key=lambda r: (r.count("/"), r))
    # A `.git` link git cannot follow (a chain past the kernel's bound) is no bind source either: it points git
    # nowhere, and a bind of it would fail the whole sandbox.
    found = [rel for rel in walk.files if _followable(workspace / rel)]
    for rel in dirs:
        try:
            found += _pins(workspace, rel, make_missing, walk)
        except (OSError, ValueError, RecursionError):
            # One folder's trouble (a link chain past the kernel's bound) must not unpin the others: its config
            # and hooks are left out, but the folder itself is still pinned (it is in `dirs`).
            continue
    # The workspace itself needs no pin: it is the bind everything else lies in.
    real_dirs = [rel for rel in dirs if rel != "." and not os.path.islink(workspace / rel)]
    return Protected(tuple(real_dirs), tuple(dict.fromkeys(found)), absent,
                     frozenset(walk.dirs.values()) if nested else None, skip, walk if nested else None)


def _pins(workspace: Path, rel: str, make_missing: bool, walk: Scan) -> list[str]:
    """The paths of the repository folder `rel` to bind read-only (see `protected_paths`)."""
    gitdir = workspace / rel
    try:
        owner = os.stat(gitdir)
    except FileNotFoundError:
        return []  # gone since the walk: nothing there to protect
    # Only a `.git` folder, or one git itself takes for a repository (a HEAD there), gets an empty config and
    # hooks: a person's folder that merely holds `objects` and `refs`, or that a pointer names, must not fill
    # with files of ours.
    shaped = rel.rpartition("/")[2] == ".git" or "HEAD" in walk.marks.get(walk.dirs[rel], {})
    found = []
    for name, is_dir in (("config", False), ("hooks", True)):
        path = gitdir / name
        if os.path.islink(path):
            target = _inside(workspace, path)
            if target is not None and os.path.exists(workspace / target):
                found.append(target)  # the link stays as it is; what it leads to is bound read-only
            continue
        if make_missing and shaped and not os.path.lexists(path):
            _make(path, is_dir, owner)
        if os.path.lexists(path):
            found.append(_at(rel, name))
    return found + [_at(rel, name) for name in PLANTABLE if _regular(gitdir / name)]


def _followable(path: Path) -> bool:
    try:
        resolve(os.fsencode(path))
    except (OSError, ValueError):
        return False
    return True


def _make(path: Path, is_dir: bool, owner: os.stat_result) -> None:
    with contextlib.suppress(OSError):
        if is_dir:
            os.mkdir(path, 0o755)
        else:
            os.close(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o644))
        with contextlib.suppress(OSError):  # the repository's owner's, not root's
            os.lchown(path, owner.st_uid, owner.st_gid)


def _regular(path: Path) -> bool:
    with contextlib.suppress(OSError):
        return stat.S_ISREG(os.lstat(path).st_mode)
    return False


def remove_planted(workspace: Path, protected: Protected, seen: list[Scan] | None = None) -> str:
    """Undo a `commondir` or `config.worktree` the sandboxed code made in a repository folder (git would
    read its config and hooks from where they say), and a start-up file it made where the host would run it
    (`Protected.absent`: a shell's in a workspace of `$HOME`, Python's `sitecustomize` in any of the forms Python
    imports), and disarm what it made git could take for a repository (`_after_call`); a note naming what was
    removed, or "". Nothing is followed on the way: a folder on the way that the program swapped for a link is
    what is removed, never what the link leads to. `seen` gets the walk after the call (`git_cells`: where the
    repository folders are now, by identity)."""
    removed = []
    for rel in protected.git_dirs:
        for name in PLANTABLE:
            if f"{rel}/{name}" not in protected.read_only:
                removed += _remove_beneath(workspace, f"{rel}/{name}")
    notes = _after_call(workspace, protected, seen)
    startup = []
    for rel in protected.absent:  # a start-up file made in the workspace: the host would run it
        startup += _remove_beneath(workspace, rel, module=rel.endswith("customize.py"))
    if removed:
        notes.append(f"removed {', '.join(removed)}, which the program created: git would take the repository's "
                     "config and hooks from where it points")
    if startup:
        notes.append(f"removed {', '.join(startup)}, which the program created: the host would run it (a shell "
                     "start-up file, Python's sitecustomize, or the shou that `python -m shou` would import there)")
    return "; ".join(notes)


def _after_call(workspace: Path, protected: Protected, seen: list[Scan] | None = None) -> list[str]:
    """Walk the workspace again and compare with the walk before the call (`Protected.before`), by identity: a
    candidate folder (`git_walk`) that did not exist then is disarmed (`git_disarm.disarm`); a folder that existed
    but is a candidate only now (the program put a `HEAD` or `commondir` in a person's folder) loses those two
    entries when they are new, and nothing else (`_unmark`). Notes; one says so plainly when the walk was incomplete."""
    before = protected.before
    if before is None:
        return []
    real = Path(os.path.realpath(workspace))
    try:
        after = scan(real, frozenset(protected.skip))
    except Exception as e:  # said plainly, never a traceback that switches the tidy off
        return [f"the workspace could not be searched for git repositories the program made ({e}): any there "
                "is NOT disarmed; check before running git in it"]
    if seen is not None:
        seen.append(after)
    had = set(before.dirs.values())
    made = [rel for rel, ident in after.dirs.items() if ident not in before.folders]
    grown = {rel: ident for rel, ident in after.dirs.items() if ident in before.folders and ident not in had}
    notes = []
    if disarmed := disarm(real, made, protected.repositories or frozenset()):
        notes.append(disarmed)
    unmarked, failed = [], []
    for rel, ident in grown.items():
        try:
            unmarked += _unmark(real, rel, ident, before.marks.get(ident, {}))
        except Exception:  # one folder's error never leaves the others as they are
            failed.append(rel)
    if failed:
        notes.append(f"{some(failed)} could not be disarmed; do not run git in it")
    if unmarked:
        notes.append(f"removed {some(unmarked)}, which the program created: they made a folder look like a git "
                     "repository to git on the host")
    if why := after.incomplete(before.unreadable):
        notes.append(f"the search for git repositories the program made was incomplete ({why}): a repository "
                     "there may NOT be disarmed; check before running git in it")
    return notes


# What makes a person's folder a repository to git that the program may add: never `objects` or `refs` (a
# folder of the agent's work may bear those names, and without a HEAD or commondir git takes no folder for one).
_UNMARKED = ("HEAD", "commondir")


def _unmark(workspace: Path, rel: str, ident: tuple[int, int], old: dict[str, int]) -> list[str]:
    """Remove the entries `HEAD` and `commondir` of the folder `rel` that are not the ones it held before (`old`:
    name to inode); the workspace paths removed."""
    try:
        fd = os.open(workspace, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC) if rel == "." else \
            open_folder(workspace, rel.split("/"))
    except OSError:
        return []
    try:
        if os.fstat(fd).st_ino != ident[1]:
            return []  # moved since the walk: another folder is there now
        gone = []
        for name in _UNMARKED:
            try:
                ino = os.lstat(name, dir_fd=fd).st_ino
            except OSError:
                continue
            if old.get(name) != ino and unlink_at(fd, name):
                gone.append(_at(rel, name))
        return gone
    finally:
        os.close(fd)


def _remove_beneath(workspace: Path, rel: str, *, module: bool = False) -> list[str]:
    """Remove what the program made at the workspace path `rel` (a folder with all it holds), opening each
    folder on the way without following a link; one on the way that is no folder now (the program put a link or
    a file in its place) is removed instead. `module`: every form Python imports the module `rel` names by (its
    `.pyc`, an extension module, a package folder) goes too. The workspace paths removed."""
    parts = rel.split("/")
    fd = os.open(workspace, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        for i, name in enumerate(parts[:-1]):
            try:
                inner = os.open(name, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=fd)
            except FileNotFoundError:
                return []
            except OSError:  # a link or a file where a folder was: the host would follow it
                return ["/".join(parts[: i + 1])] if unlink_at(fd, name) else []
            os.close(fd)
            fd = inner
        last = parts[-1]
        names = [last]
        if module:
            stem = last.removesuffix(".py")
            with contextlib.suppress(OSError):
                names = sorted(n for n in os.listdir(fd) if n == stem or n.startswith(stem + "."))
        prefix = "/".join(parts[:-1])
        return [f"{prefix}/{n}" if prefix else n for n in names if unlink_at(fd, n)]
    except OSError:
        return []
    finally:
        os.close(fd)


def fd_room(count: int) -> None:
    """Make room for `count` more open files (a sandbox holds one for each bind of each repository while it
    starts), raising this process's soft limit as far as its hard one allows. `UserError` when it cannot:
    a bind left out for want of a file descriptor would leave a repository writable."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    needed = len(os.listdir("/proc/self/fd")) + count + 256  # and what spawning the sandbox opens
    if needed <= soft:
        return
    if hard != resource.RLIM_INFINITY and needed > hard:
        raise UserError(f"the workspace holds {count} git paths to protect, more than this process may have files "
                        f"open (ulimit -n: {hard}); the command was not run. Raise the limit, or run shou in a "
                        "folder that holds fewer repositories")
    resource.setrlimit(resource.RLIMIT_NOFILE, (needed, hard))


def open_pin(dir_fd: int, rel: str) -> int | None:
    """`open_path_beneath`, or None when `rel` is missing or a link or file stands on the way (nothing to
    bind there); an error that says nothing of `rel` (no file descriptor left) is raised: never a bind quietly
    left out."""
    try:
        return open_path_beneath(dir_fd, rel)
    except OSError as e:
        if e.errno in (errno.EMFILE, errno.ENFILE, errno.ENOMEM):
            raise
        return None


def open_path_beneath(dir_fd: int, rel: str) -> int:
    """An O_PATH fd of `rel` under `dir_fd`, following no symlink on the way: a program running meanwhile
    (a stateful kernel) cannot swap a folder for a link and get a host file bound into its sandbox."""
    parts = rel.split("/")
    fd = os.open(".", os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC, dir_fd=dir_fd)
    try:
        for name in parts[:-1]:
            next_fd = os.open(name, os.O_PATH | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=fd)
            os.close(fd)
            fd = next_fd
        return os.open(parts[-1], os.O_PATH | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=fd)
    finally:
        os.close(fd)

