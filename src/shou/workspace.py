"""Files under a workspace root, opened without ever following a symlink.

The model, the programs it runs in the sandbox and the repository it works in all control what is in the
workspace, while shou itself runs with the person's rights (often root). So shou never checks a path and
then opens it by name again: it walks the path one component at a time from an open directory, each step
`openat(..., O_NOFOLLOW)`, so a symlink anywhere on the way is refused and a process swapping a folder for
a symlink at the same moment cannot redirect the open. `..` is resolved on the spelling before the walk
(nothing is followed, so the spelling is the truth). Only regular files are read or written (a FIFO would
block, a device would never end), and a file with more than one hard link is never written. The walk is
shou.beneath's; which paths the model's tools may open, and shou's own state, are this module's.

`.shou/` holds shou's own state (session log, memory, spilled outputs, the rules a person writes). The
model's file tools may read it but never write it; shou's own writes there go through `state_dir` and
`open_state`, which refuse symlinks the same way.
"""

from __future__ import annotations

import os
import secrets
import stat
import threading
from collections.abc import Callable
from pathlib import Path

from .beneath import _KINDS, NotFound, Opened, open_beneath, relative_parts
from .errors import ToolError, UserError
from .host_paths import (
    HOME_FILES,
    HOME_FOLDERS,
    config_parts,
    hidden_config,
    host_parts,
    missing_host_files,
    read_only_tops,
)
from .private import DIR_MODE, FILE_MODE, check_owned, tighten_tree

__all__ = [
    "HOME_FILES",
    "HOME_FOLDERS",
    "STATE_DIR",
    "NotFound",
    "Opened",
    "check_state_file",
    "config_matcher",
    "config_parts",
    "hidden_config",
    "host_parts",
    "in_config",
    "is_state_path",
    "missing_host_files",
    "open_beneath",
    "open_file",
    "open_state",
    "read_bytes_beneath",
    "read_only_tops",
    "read_state_text",
    "relative_parts",
    "save_output",
    "state_database",
    "state_dir",
    "write_bytes_beneath",
    "write_lock",
]

STATE_DIR = ".shou"


def in_config(root: Path, parts: tuple[str, ...]) -> bool:
    """Whether the workspace path `parts` lies in the user's shou config folder (`config_parts`), in any
    letter case (some file systems fold it)."""
    return config_matcher(root)(parts)


def config_matcher(root: Path) -> Callable[[tuple[str, ...]], bool]:
    """`in_config` for many paths of one workspace: the config folder's place is looked up once."""
    folders = [tuple(p.casefold() for p in c) for c in config_parts(root)]

    def inside(parts: tuple[str, ...]) -> bool:
        folded = tuple(p.casefold() for p in parts)
        return any(folded[: len(c)] == c for c in folders)

    return inside


def is_state_path(parts: tuple[str, ...]) -> bool:
    """Whether the path lies in a `.shou/` folder, at any depth (any letter case: some file systems fold it):
    a subfolder's `.shou/` is the state of whoever runs shou there later."""
    return any(p.casefold() == STATE_DIR for p in parts)


def open_file(root: Path, path: str, *, write: bool = False, create: bool = False) -> Opened:
    """Open the regular file `path` of the workspace for reading (or also writing), confined.

    Reading and writing refuse the user's config folder; writing refuses `.shou/` and files with other hard
    links; `create` makes the file and its folders.
    """
    parts = relative_parts(root, path)
    shown = "/".join(parts) or "."
    if write and is_state_path(parts):
        raise ToolError(f"{shown!r} is inside .shou/, where shou keeps its own state (session log, memory, the "
                        "rules a person writes); the file tools cannot write there")
    if in_config(root, parts):
        # Not read either: it holds the key that signs approvals and the person's API keys, and what a tool
        # reads reaches the model, the session log and whoever `shou serve` shows them to.
        raise ToolError(f"{shown!r} is inside shou's user configuration folder (the person's trusted settings, "
                        "keys and approvals); the file tools cannot read or write there")
    if write and any(parts[: len(c)] == c for c, _ in host_parts(root)):
        raise ToolError(f"{shown!r} is something the host runs code from or trusts (a shell start-up file, ~/.ssh, "
                        "the Python packages that run shou, shou's cache); the file tools cannot write there")
    if write:
        _refuse_git_control(root, parts, shown)
    flags = os.O_RDWR if write else os.O_RDONLY
    try:
        fd = open_beneath(root, parts, flags | (os.O_CREAT if create else 0), make_parents=create)
    except OSError as e:
        raise ToolError(f"cannot open {shown!r}: {e.strerror or e}") from None
    opened = Opened(fd, shown)
    if write and opened.stat.st_nlink > 1:
        opened.__exit__()
        raise ToolError(f"{shown!r} has {opened.stat.st_nlink} hard links; the file tools do not write files "
                        "that are also reachable under another name")
    return opened


def _refuse_git_control(root: Path, parts: tuple[str, ...], shown: str) -> None:
    """A repository's config and hooks are not the model's to write: an allow rule for git trusts them."""
    from .git_protect import is_git_control_path, protected_paths

    spelled = "/".join(parts)
    protected = protected_paths(root, make_missing=False)
    if is_git_control_path(parts) or any(spelled == p or spelled.startswith(p + "/") for p in protected):
        raise ToolError(f"{shown!r} is a git repository's configuration, hooks or pointer (.git); the file tools "
                        "do not write there, because git runs what they name (an allowed `git status` would run "
                        "it). Change it yourself if it needs changing")


# The calls of one turn run in parallel, and an upload may come meanwhile: an edit reads a file, then replaces
# it whole, so two writers of one file at once would each write the original plus their own change and one
# change would be lost. Whoever writes a workspace file holds its lock: one of a bounded set, chosen by the
# file's path, however many files a long-lived process touches.
_WRITE_LOCKS = tuple(threading.Lock() for _ in range(64))


def write_lock(root: Path, path: str) -> threading.Lock:
    """The lock every writer of the workspace file `path` holds while it reads and writes it."""
    key = (str(root), "/".join(relative_parts(root, path)))
    return _WRITE_LOCKS[hash(key) % len(_WRITE_LOCKS)]


def read_bytes_beneath(root: Path, rel: str, max_bytes: int) -> bytes:
    """The content of the regular file `rel` in the workspace, confined (`ToolError` otherwise)."""
    with open_file(root, rel) as f:
        return f.read(max_bytes)


def write_bytes_beneath(root: Path, rel: str, data: bytes) -> bool:
    """Create or overwrite the file `rel` (and its folders) with `data`; True when it existed before."""
    try:
        f = open_file(root, rel, write=True)
        existed = True
    except NotFound:
        f = open_file(root, rel, write=True, create=True)
        existed = False
    with f:
        f.replace(data)
    return existed


# ---------------------------------------------------------------- shou's own state under .shou/


def state_dir(workspace: Path) -> Path:
    """`<workspace>/.shou`, made if missing; `UserError` if it is a symlink or not a folder.

    A cloned repository (or anything else) may have put a symlink there; shou never writes through one.
    """
    path = Path(workspace) / STATE_DIR
    try:
        os.mkdir(path, DIR_MODE)  # its user's alone: it holds what tools read and models said (shou.private)
    except FileExistsError:
        pass
    except OSError as e:
        raise UserError(f"cannot create {path}: {e.strerror or e}") from None
    st = os.lstat(path)
    if stat.S_ISLNK(st.st_mode):
        raise UserError(f"{path} is a symlink; shou keeps its state there and never follows a link for it. "
                        "Remove the link (rm .shou) and run again")
    if not stat.S_ISDIR(st.st_mode):
        raise UserError(f"{path} is not a folder; shou keeps its state there. Move it away and run again")
    check_owned(path, st)  # another user's, or one they may write: they could read what shou writes there
    tighten_tree(path)  # one an older shou made 0755, with 0644 files
    return path


def _state_parts(workspace: Path, parts: tuple[str, ...]) -> tuple[str, ...]:
    for part in parts:
        if not part or "/" in part or part in (".", ".."):
            raise UserError(f"bad name under .shou: {part!r}")
    return (STATE_DIR, *parts)


def open_state(workspace: Path, *parts: str, flags: int = os.O_RDONLY, mode: int = FILE_MODE) -> int:
    """Open `.shou/<parts...>` with `flags`, making folders as needed, following no symlink.

    Raises `UserError` (not `ToolError`: this is shou's own state, and the message is for the person).
    """
    state_dir(workspace)
    try:
        fd = open_beneath(Path(workspace), _state_parts(workspace, parts), flags,
                          make_parents=bool(flags & os.O_CREAT), mode=mode, dir_mode=DIR_MODE)
    except ToolError as e:
        why = str(e).split(";")[0]  # the part that says what is in the way, without the model's advice
        raise UserError(f"cannot use {Path(workspace, STATE_DIR, *parts)}: {why}; shou never follows links "
                        "or writes odd files for its own state (remove what is in the way)") from None
    try:
        check_owned(Path(workspace, STATE_DIR, *parts), os.fstat(fd))
    except BaseException:
        os.close(fd)
        raise
    return fd


def check_state_file(workspace: Path, *parts: str) -> Path:
    """The path of `.shou/<parts...>` after checking that no component is a symlink (for SQLite, which
    opens files by name itself); the folder is made when missing."""
    path = state_dir(workspace)
    for i, part in enumerate(_state_parts(workspace, parts)[1:]):
        path = path / part
        last = i == len(parts) - 1
        try:
            st = os.lstat(path)
        except FileNotFoundError:
            if last:
                return path
            os.mkdir(path, DIR_MODE)
            continue
        if stat.S_ISLNK(st.st_mode) or not (stat.S_ISREG(st.st_mode) if last else stat.S_ISDIR(st.st_mode)):
            raise UserError(f"{path} is {_KINDS.get(stat.S_IFMT(st.st_mode), 'not a regular file')}; shou "
                            "keeps its state there and never follows links for it. Remove it and run again")
        check_owned(path, st)
    return path


def state_database(workspace: Path, name: str) -> Path:
    """The path of the SQLite file `.shou/<name>`, after checking that neither it nor the files SQLite
    keeps beside it (`-wal`, `-shm`, `-journal`) is a symlink: SQLite opens them by name itself."""
    for suffix in ("-wal", "-shm", "-journal"):
        check_state_file(workspace, name + suffix)
    return check_state_file(workspace, name)


def read_state_text(workspace: Path, name: str, limit: int = 20_000) -> str:
    """`.shou/<name>` as text, capped at `limit` characters, or "" when absent, unreadable or a link."""
    try:
        with Opened(open_beneath(Path(workspace), (STATE_DIR, name), os.O_RDONLY), name) as f:
            return f.read(4 * limit + 4).decode("utf-8", "replace")[:limit]
    except (ToolError, OSError):
        return ""


def save_output(workspace: Path, label: str, data: bytes, *, folder: str = "outputs", suffix: str = ".txt") -> str:
    """Write `data` to a new file under `.shou/<folder>/` and return its workspace-relative path.

    The name is made here, never taken from the model or a provider: `label` keeps only letters, digits,
    `_` and `-` (and 40 of them), and a random suffix makes it new (`O_EXCL`: nothing is overwritten).
    """
    safe = "".join(c for c in label if c.isascii() and (c.isalnum() or c in "_-"))[:40] or "output"
    name = f"{safe}-{secrets.token_hex(6)}{suffix}"
    fd = open_state(workspace, folder, name, flags=os.O_WRONLY | os.O_CREAT | os.O_EXCL, mode=FILE_MODE)
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view):]
    finally:
        os.close(fd)
    return f"{STATE_DIR}/{folder}/{name}"
