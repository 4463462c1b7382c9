"""A repository's configuration and hooks, kept read-only to sandboxed code and to the file tools.

An allow rule such as `git status` trusts git, and git runs what its configuration names
(`core.fsmonitor`, `core.pager`, `core.hooksPath`, filter drivers, aliases) and the hooks it finds. If the
model could write those, a narrow rule would run arbitrary code. So the config and hooks of every
repository in the workspace (the top one and any other found by one walk of its folders: a person's folder
may hold several) are bound read-only in the sandbox (and each repository folder over itself, so that it
cannot be renamed away from those binds; a `commondir` the program makes is removed after the call), and
`is_git_control_path` makes the file tools refuse them (at any depth, and the `.git` file that could point
git at a folder of the model's). A repository the program makes is disarmed after its call (`git_disarm`):
the person's git on the host would obey it outside any sandbox.

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
from dataclasses import dataclass
from pathlib import Path

from .errors import UserError
from .git_disarm import disarm, unlink_at

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
MODULE_DEPTH = 4  # submodules of submodules: .git/modules/a/modules/b/...


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


def _inside(workspace: Path, path: Path) -> str | None:
    """`path` resolved, relative to the (resolved) workspace, or None when it lies outside it."""
    # A link swapped for a file mid-way makes readlink fail (EINVAL): the caller says the workspace moved.
    real = os.path.realpath(path)
    rel = os.path.relpath(real, workspace)
    return None if rel == ".." or rel.startswith("../") or rel == "." else rel


def _pointer(path: Path) -> str | None:
    """The folder a `.git` file (`gitdir: X`) or `commondir` file names, as written."""
    with contextlib.suppress(OSError, UnicodeDecodeError):
        text = path.read_bytes()[:4096].decode().strip()
        return text.removeprefix("gitdir:").strip() if path.name == ".git" else text
    return None


def _git_dirs(workspace: Path, skip: frozenset[str], nested: bool = True) -> tuple[list[str], list[str]]:
    """The repository folders git would use inside the workspace (`.` for the workspace itself), and the
    `.git` files: one walk of its folders (`nested`: all of them, else the top one only), then each
    repository's `commondir` and submodules."""
    dirs, files = _walk(workspace, skip, nested)
    for rel in list(dirs):
        common = _pointer(workspace / rel / "commondir")
        if common:
            shared = _inside(workspace, workspace / rel / common)
            if shared is not None and os.path.isdir(workspace / shared):
                dirs.append(shared)
    for gitdir in list(dict.fromkeys(dirs)):
        dirs += _modules(workspace, gitdir, MODULE_DEPTH)
    for gitdir in list(dict.fromkeys(dirs)):
        dirs += _worktrees(workspace, gitdir)
    return list(dict.fromkeys(dirs)), files


def _worktrees(workspace: Path, gitdir: str) -> list[str]:
    """The folders of a repository's linked worktrees (`worktrees/<name>`), wherever the worktrees lie: git
    reads each one's `config.worktree` for the worktree whose `.git` file names it (outside the workspace too)."""
    root = os.path.join(workspace, gitdir, "worktrees")
    with contextlib.suppress(OSError), os.scandir(root) as it:
        return [_at(gitdir, f"worktrees/{e.name}") for e in it if e.is_dir(follow_symlinks=False)]
    return []


def _walk(workspace: Path, skip: frozenset[str], nested: bool) -> tuple[list[str], list[str]]:
    """The repository folders and `.git` files found in one walk of the workspace's folders, following no
    link, leaving out shou's `.shou` and the top names in `skip`, and not entering a repository folder."""
    dirs: list[str] = []
    files: list[str] = []
    stack = ["."]
    top = str(workspace)
    while stack:
        rel = stack.pop()
        try:  # string paths: a walk of thousands of folders spends a third of its time in pathlib
            with os.scandir(top if rel == "." else f"{top}/{rel}") as it:
                entries = {e.name: e for e in it}
        except OSError:  # removed meanwhile, or no folder now
            continue
        if ".git" in entries and (found := _dotgit(workspace, rel, entries[".git"], files)) is not None:
            dirs.append(found)
        if _looks_bare(entries):
            dirs.append(rel)
            continue  # its insides are git's (its submodules: `_modules`)
        if nested:
            left_out = skip | {".shou"} if rel == "." else frozenset()
            stack += [_at(rel, e.name) for e in entries.values()
                      if e.name != ".git" and e.name not in left_out and e.is_dir(follow_symlinks=False)]
    return dirs, files


def _at(rel: str, name: str) -> str:
    return name if rel == "." else f"{rel}/{name}"


def _looks_bare(entries: dict[str, os.DirEntry[str]]) -> bool:
    """Whether a folder holding `entries` is a repository folder to git (a bare repository, or a linked
    worktree's folder, whose `commondir` says where its objects and refs are)."""
    head = entries.get("HEAD")
    if head is None or head.is_dir():
        return False
    if "commondir" in entries:
        return True
    objects, refs = entries.get("objects"), entries.get("refs")
    return objects is not None and refs is not None and objects.is_dir() and refs.is_dir()


def _dotgit(workspace: Path, rel: str, entry: os.DirEntry[str], files: list[str]) -> str | None:
    """The repository folder a `.git` in the workspace folder `rel` stands for, when inside the workspace:
    itself (a folder), where it leads (a link) or the folder it names (a `.git` file, which joins `files`)."""
    path = workspace / rel / ".git"
    if entry.is_symlink():
        candidate: Path | None = path  # a link to a folder: where it leads
    elif entry.is_dir(follow_symlinks=False):
        return _at(rel, ".git")
    elif entry.is_file(follow_symlinks=False):
        files.append(_at(rel, ".git"))
        named = _pointer(path)
        candidate = (workspace / rel / named) if named else None  # relative to the folder holding it
    else:
        return None
    target = _inside(workspace, candidate) if candidate is not None else None
    return target if target is not None and os.path.isdir(workspace / target) else None


def _modules(workspace: Path, gitdir: str, depth: int) -> list[str]:
    """The submodules' repository folders kept under `gitdir/modules/` (names may contain slashes)."""
    found: list[str] = []
    root = workspace / gitdir / "modules"
    if depth <= 0 or os.path.islink(root) or not os.path.isdir(root):
        return found
    for entry, subdirs, _ in os.walk(root):  # os.walk follows no links to folders
        rel = os.path.relpath(entry, workspace)
        if entry != str(root) and os.path.isfile(os.path.join(entry, "HEAD")):
            found.append(rel)
            found += _modules(workspace, rel, depth - 1)
            subdirs.clear()  # a repository folder's own insides are not more submodules
    return found


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
    except (OSError, ValueError) as e:
        raise UserError(f"the workspace's repository changed while the sandbox was being prepared ({e}); "
                        "the command was not run. Stop whatever is rewriting .git and try again") from None


def _protect(workspace: Path, make_missing: bool, absent: tuple[str, ...], skip: tuple[str, ...],
             nested: bool) -> Protected:
    dirs, found = _git_dirs(workspace, frozenset(skip), nested)
    for rel in dirs:
        gitdir = workspace / rel
        owner = os.stat(gitdir)
        for name, is_dir in (("config", False), ("hooks", True)):
            path = gitdir / name
            if os.path.islink(path):
                target = _inside(workspace, path)
                if target is not None and os.path.exists(workspace / target):
                    found.append(target)  # the link stays as it is; what it leads to is bound read-only
                continue
            if make_missing and not os.path.lexists(path):
                with contextlib.suppress(OSError):
                    if is_dir:
                        os.mkdir(path, 0o755)
                    else:
                        os.close(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o644))
                    with contextlib.suppress(OSError):  # the repository's owner's, not root's
                        os.lchown(path, owner.st_uid, owner.st_gid)
            if os.path.lexists(path):
                found.append(_at(rel, name))
        found += [_at(rel, name) for name in PLANTABLE if _regular(gitdir / name)]
    # The workspace itself needs no pin: it is the bind everything else lies in.
    real_dirs = [rel for rel in dirs if rel != "." and not os.path.islink(workspace / rel)]
    return Protected(tuple(sorted(set(real_dirs), key=lambda r: (r.count("/"), r))), tuple(dict.fromkeys(found)),
                     absent, _identities(workspace, dirs) if nested else None, skip)


def _identities(workspace: Path, dirs: list[str]) -> frozenset[tuple[int, int]]:
    found = set()
    for rel in dirs:
        with contextlib.suppress(OSError):
            st = os.lstat(workspace / rel)
            found.add((st.st_dev, st.st_ino))
    return frozenset(found)


def _regular(path: Path) -> bool:
    with contextlib.suppress(OSError):
        return stat.S_ISREG(os.lstat(path).st_mode)
    return False


def remove_planted(workspace: Path, protected: Protected) -> str:
    """Undo a `commondir` or `config.worktree` the sandboxed code made in a repository folder (git would
    read its config and hooks from where they say), and a start-up file it made where the host would run it
    (`Protected.absent`: a shell's in a workspace of `$HOME`, Python's `sitecustomize` in any of the forms Python
    imports), and disarm each repository folder it made (`git_disarm.disarm`: one not in
    `Protected.repositories`); a note naming what was removed, or "". Nothing is followed on the way: a folder
    on the way that the program swapped for a link is what is removed, never what the link leads to."""
    removed = []
    for rel in protected.git_dirs:
        for name in PLANTABLE:
            if f"{rel}/{name}" not in protected.read_only:
                removed += _remove_beneath(workspace, f"{rel}/{name}")
    made = disarm(workspace, _made(workspace, protected), protected.repositories or frozenset())
    startup = []
    for rel in protected.absent:  # a start-up file made in the workspace: the host would run it
        startup += _remove_beneath(workspace, rel, module=rel.endswith("customize.py"))
    notes = [made] if made else []
    if removed:
        notes.append(f"removed {', '.join(removed)}, which the program created: git would take the repository's "
                     "config and hooks from where it points")
    if startup:
        notes.append(f"removed {', '.join(startup)}, which the program created: the host would run it (a shell "
                     "start-up file, or Python's sitecustomize)")
    return "; ".join(notes)


def _made(workspace: Path, protected: Protected) -> list[str]:
    """The repository folders in the workspace now that were not there when `protected` was made."""
    if protected.repositories is None:
        return []
    real = Path(os.path.realpath(workspace))
    try:
        dirs, _ = _git_dirs(real, frozenset(protected.skip))
    except (OSError, ValueError):
        return []
    return [rel for rel in dirs if not _identities(real, [rel]) <= protected.repositories]


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
