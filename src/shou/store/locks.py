"""Session locks: one process at a time runs a session, as byte-range locks the kernel drops with the process."""

from __future__ import annotations

import errno
import fcntl
import hashlib
import os
import struct
import threading
from pathlib import Path

from ..errors import UserError


class SessionBusy(UserError):
    """Another process is running the session."""


class LockFile:
    """Session locks as byte-range locks on one file beside the store (Linux open-file-description locks).

    Session `s` is the byte at offset hash(s); a lock belongs to the open file description, so two holders
    in one process exclude each other too, and the kernel drops it when the process dies. Taking and
    dropping one is a single `fcntl` each: no file is created per session.
    """

    def __init__(self, path: Path) -> None:
        self.fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
        self.held: set[int] = set()  # one description: holders in this process are told apart here
        # `held` is checked, the byte locked and `held` filled as one step: the kernel lets every thread of the
        # process lock the byte (one description), so two threads must not both pass the check first.
        self.guard = threading.Lock()

    @staticmethod
    def _offset(session: str) -> int:
        return int.from_bytes(hashlib.sha256(session.encode("utf-8", "surrogatepass")).digest()[:7], "big")

    def _fcntl(self, op: int, kind: int, offset: int) -> None:
        fcntl.fcntl(self.fd, op, struct.pack("@hhqqi4x", kind, os.SEEK_SET, offset, 1, 0))

    def take(self, session: str) -> SessionLock:
        """Lock `session`'s byte; `SessionBusy` when someone holds it."""
        offset = self._offset(session)
        with self.guard:
            if offset in self.held:
                raise _busy(session)
            try:
                self._fcntl(fcntl.F_OFD_SETLK, fcntl.F_WRLCK, offset)
            except OSError as e:
                if e.errno not in (errno.EAGAIN, errno.EACCES):
                    raise
                raise _busy(session) from None
            self.held.add(offset)
        return SessionLock(self, offset, session)

    def close(self) -> None:
        """Drop every lock this file holds."""
        if self.fd >= 0:
            fd, self.fd = self.fd, -1
            os.close(fd)


def _busy(session: str) -> SessionBusy:
    return SessionBusy(f"session {session!r} is being run by another shou process or run; wait for it to finish, "
                       "or use another session (--session NAME)")


class SessionLock:
    """A session taken by this process; `release()` gives it back."""

    __slots__ = ("file", "offset", "session")  # one per in-flight session (issue 35)
    lost = False  # a lock file's lock goes only with its process (PostgreSQL's can go with a connection)

    def __init__(self, file: LockFile, offset: int, session: str) -> None:
        self.file = file
        self.offset = offset
        self.session = session

    def check(self) -> None:
        """Nothing to check: the lock is held until `release()` or the process's end."""

    def release(self) -> None:
        """Let other processes have the session."""
        if self.offset >= 0 and self.file.fd >= 0:
            with self.file.guard:
                self.file._fcntl(fcntl.F_OFD_SETLK, fcntl.F_UNLCK, self.offset)
                self.file.held.discard(self.offset)
        self.offset = -1


def held(path: Path, session: str) -> bool:
    """Whether a process holds `session`'s lock in the lock file at `path`, asked without writing anything
    (the folder may be read-only: the file is neither created nor opened for writing)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except FileNotFoundError:
        return False  # no lock file: no process has ever taken a session here
    try:
        probe = struct.pack("@hhqqi4x", fcntl.F_WRLCK, os.SEEK_SET, LockFile._offset(session), 1, 0)
        kind = struct.unpack("@hhqqi4x", fcntl.fcntl(fd, fcntl.F_OFD_GETLK, probe))[0]
        return kind != fcntl.F_UNLCK
    finally:
        os.close(fd)
