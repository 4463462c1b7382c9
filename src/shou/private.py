"""shou's state is its user's alone: folders 0700, files 0600.

The session log, the serve database (and SQLite's `-wal` and `-shm` beside it, which hold the latest
writes in clear), memory, spilled outputs and traces hold what tools read and models said. On a machine
with other accounts a 0755 `.shou/` and 0644 files let any of them read it all. New files are made with
these modes whatever the umask; existing ones, made by an older shou, are tightened when shou opens them.
Only what the current user owns is changed, and no symlink is followed.

State another user could reach is refused (`check_owned`): a `.shou/` or state file that user made (say in a
shared, world-writable workspace) or one group or others may write. Tightening it would not help: that user may
keep a file open from before, and read through it what shou writes next (SQLite's `-wal` in clear).
"""

from __future__ import annotations

import contextlib
import os
import stat
import threading
from pathlib import Path

DIR_MODE = 0o700
FILE_MODE = 0o600
SQLITE_SIDECARS = ("-wal", "-shm", "-journal")

_tightened: set[str] = set()
_lock = threading.Lock()


def check_owned(path: str | os.PathLike[str], st: os.stat_result | None = None) -> None:
    """`UserError` when `path` (if it exists; not through a symlink) is another user's, or group or others
    may write it: shou's state must be its user's alone (see the module)."""
    from .errors import UserError

    try:
        st = st or os.lstat(path)
    except OSError:
        return
    if st.st_uid != os.geteuid():
        raise UserError(f"{path} belongs to another user (uid {st.st_uid}); shou keeps private state there and "
                        "will not use what another account made. Remove it (or run as its owner) and run again")
    if stat.S_IMODE(st.st_mode) & 0o022 and not stat.S_ISLNK(st.st_mode):
        raise UserError(f"{path} may be written by group or others (mode {stat.S_IMODE(st.st_mode):04o}); shou "
                        f"keeps private state there. Check what is in it, then `chmod go-w {path}` and run again")


def tighten(path: str | os.PathLike[str], st: os.stat_result | None = None) -> None:
    """Take group and other bits off `path` (not through a symlink) if the current user owns it."""
    try:
        st = st or os.lstat(path)
    except OSError:
        return
    if st.st_uid != os.geteuid() or not (stat.S_ISDIR(st.st_mode) or stat.S_ISREG(st.st_mode)):
        return
    if stat.S_IMODE(st.st_mode) & 0o077:
        with contextlib.suppress(OSError):
            os.chmod(path, stat.S_IMODE(st.st_mode) & ~0o077, follow_symlinks=False)


def private_dir(path: Path) -> None:
    """Make the folder `path` (0700) if missing, else tighten it. Its parents are the caller's."""
    try:
        os.mkdir(path, DIR_MODE)
    except FileExistsError:
        check_owned(path)
        tighten(path)


def make_dirs(path: Path) -> None:
    """`path` and any missing parents, each one made here 0700; folders that exist are left as they are
    (they may be the person's own, say, a `--store` elsewhere)."""
    missing = []
    for each in (path, *path.parents):
        if os.path.lexists(each):
            break
        missing.append(each)
    for each in reversed(missing):
        with contextlib.suppress(FileExistsError):
            os.mkdir(each, DIR_MODE)


def user_folder(path: Path) -> Path:
    """Make the user's own folder `path` (the config folder: keys, approvals, chat history) and its missing
    parents 0700, and tighten it if it exists: other accounts must not list or read it."""
    make_dirs(path)
    tighten(path)
    return path


def private_text_file(path: Path) -> Path:
    """Make `path` (in a folder of ours) 0600 if missing, else tighten it: for files another library writes
    with the umask's mode (prompt_toolkit's history)."""
    with contextlib.suppress(OSError):  # a link, or not writable: whoever opens it next says why
        os.close(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, FILE_MODE))
    tighten(path)
    return path


def private_file(path: Path) -> None:
    """Make the file `path` empty with mode 0600 if missing (SQLite then gives its `-wal` and `-shm` the
    same mode), else tighten it and the files SQLite keeps beside it. `UserError` when it or one of those
    is another user's (`check_owned`): a `-wal` made in advance by someone else would get every write."""
    if str(path) in ("", ":memory:") or str(path).startswith("file:"):
        return  # SQLite's names for a database in memory or a URI: no file of ours
    for each in (Path(f"{path}{s}") for s in SQLITE_SIDECARS):
        check_owned(each)
        tighten(each)
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, FILE_MODE)
    except FileExistsError:
        check_owned(path)
        tighten(path)
        return
    except OSError:
        return  # not ours to make here (a read-only place): whoever opens it says why
    os.close(fd)


def tighten_tree(root: Path) -> None:
    """Tighten `root` and everything under it, once per process (a `.shou/` from an older shou)."""
    key = os.path.abspath(root)
    with _lock:
        if key in _tightened:
            return
        _tightened.add(key)
    tighten(root)
    for folder, dirs, files in os.walk(root):  # os.walk follows no symlinked folder by default
        for name in (*dirs, *files):
            tighten(os.path.join(folder, name))
