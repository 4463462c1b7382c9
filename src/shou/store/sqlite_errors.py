"""What a SQLite error says about the session store: the file is damaged, or it is healthy and cannot be used now.

Only SQLite's own verdict that the file is corrupt (`SQLITE_CORRUPT`, `SQLITE_NOTADB`, a failed `PRAGMA
quick_check`) lets `shou run` move a store aside. A full disk, a read-only mount, missing permissions or a
lock leave a healthy file that works again once the cause is fixed: renaming it would hide every session
from `shou sessions` and the next run would start an empty log, so those stop the command with what to do.
"""

from __future__ import annotations

import os
import sqlite3
import time
from pathlib import Path
from urllib.parse import quote

from ..errors import UserError

# SQLite's primary result codes (the low byte of an extended code).
_PERM, _BUSY, _LOCKED, _READONLY, _IOERR, _CORRUPT = 3, 5, 6, 8, 10, 11
_FULL, _CANTOPEN, _AUTH, _NOTADB = 13, 14, 23, 26

_ROOM = 256 * 1024  # less free space than this is a full disk to SQLite: a commit writes a few pages
READ_BLOCKED = (_READONLY, _IOERR, _FULL, _CANTOPEN)  # what stops a reader from making SQLite's files beside one


class StoreError(UserError):
    """The session store cannot be used; the message says why and what to do."""

    def __init__(self, message: str, path: Path, cause: BaseException | str) -> None:
        super().__init__(message)
        self.path = path
        self.cause = cause


class StoreDamaged(StoreError):
    """SQLite says the file is not a readable store (corrupt, or not a database at all)."""

    def __init__(self, path: Path, cause: BaseException | str) -> None:
        super().__init__(f"{path} is damaged ({cause}); `shou run` keeps it aside and starts a fresh session log",
                         path, cause)

    def move_aside(self) -> Path:
        """Rename the file (and SQLite's files beside it) out of the way, keeping it; returns its new path.
        A folder that cannot be written (a read-only mount) leaves it where it is, with a `StoreError`."""
        stamp = time.strftime("%Y%m%d-%H%M%S")
        kept = self.path.with_name(f"{self.path.name}.damaged-{stamp}")
        for suffix in ("", "-wal", "-shm", "-journal"):
            try:
                os.rename(f"{self.path}{suffix}", f"{kept}{suffix}")
            except FileNotFoundError:
                continue
            except OSError as e:
                raise StoreError(f"{self.path} is damaged ({self.cause}) and cannot be moved aside "
                                 f"({e.strerror}); make its folder writable, or move it away yourself",
                                 self.path, e) from None
        return kept


class StoreUnusable(StoreError):
    """The file is (as far as anyone knows) healthy but cannot be used now: a full disk, no permission, a lock."""


def code_of(error: BaseException) -> int:
    """SQLite's primary result code of `error` (0 when it carries none)."""
    return int(getattr(error, "sqlite_errorcode", 0) or 0) & 0xFF


def is_damage(error: BaseException) -> bool:
    """Whether SQLite said the file is corrupt or not a database."""
    return code_of(error) in (_CORRUPT, _NOTADB)


def explain(error: BaseException, path: Path) -> StoreError:
    """The `StoreError` for a `sqlite3.Error` raised while using the store at `path`."""
    if is_damage(error):
        return StoreDamaged(path, error)
    code = code_of(error)
    disk = disk_state(path)
    if code == _FULL or (code in (_IOERR, _CANTOPEN) and disk == "full"):
        why = (f"the disk holding {path} is full ({error}); free some space and try again (nothing stored "
               "was lost)")
    elif code in (_READONLY, _CANTOPEN, _PERM, _AUTH) or (code == _IOERR and disk == "read-only"):
        why = (f"cannot write the session log {path} ({error}): its file or folder is read-only or not yours; "
               "fix the permissions (or remount it writable) and try again (nothing stored was lost)")
    elif code in (_BUSY, _LOCKED) or "locked" in str(error):
        why = f"{path} is locked by another process for too long ({error}); try again"
    elif code == _IOERR:
        why = (f"cannot read or write {path} (disk I/O error: {error}); check the disk and its free space, "
               "then try again")
    else:
        why = f"cannot use the session log {path} ({error}); nothing was changed"
    return StoreUnusable(why, path, error)


def read_only(path: Path) -> StoreUnusable:
    """The `StoreUnusable` for a store file this process may not write (a read-only mount, another owner)."""
    return StoreUnusable(f"cannot write the session log {path}: the file or its disk is read-only; fix the "
                         "permissions (or remount it writable) and try again (nothing stored was lost)", path,
                         "read-only")


def unwritable(path: Path, error: OSError) -> StoreUnusable:
    """The `StoreUnusable` for a file beside the store (its lock file) that cannot be opened."""
    cause = "the disk is full" if disk_state(path) == "full" else error.strerror or str(error)
    return StoreUnusable(f"cannot open {path} ({cause}): free some space or fix the folder's permissions (or "
                         "remount it writable) and try again", path, error)


def disk_state(path: Path) -> str:
    """"full", "read-only" or "" for the file system holding `path` (SQLite reports a full disk while it
    maps its shared-memory file as a mere I/O error)."""
    try:
        st = os.statvfs(path.parent)
    except OSError:
        return ""
    if st.f_flag & os.ST_RDONLY:
        return "read-only"
    if st.f_bavail * st.f_frsize < _ROOM:
        return "full"
    return ""


def quick_check(db: sqlite3.Connection) -> str | None:
    """What SQLite's `PRAGMA quick_check` finds wrong with the file (None when it is sound). Tens of ms for
    100 MB: it reads every page once, without checking index contents against their tables."""
    problems = [str(row[0]) for row in db.execute("PRAGMA quick_check(3)").fetchall()]
    return None if problems == ["ok"] else "; ".join(" ".join(p.replace("*", " ").split()) for p in problems)


def read_only_uri(path: Path, immutable: bool = False) -> str:
    """The URI that opens `path` for reading (`immutable`: without the shared-memory file, trusting that no one
    changes the file meanwhile)."""
    # the path's bytes, percent-encoded: a folder whose name is not UTF-8 is opened all the same
    return f"file:{quote(os.fsencode(path))}?{'immutable=1' if immutable else 'mode=ro'}"
