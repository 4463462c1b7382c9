"""The checkpoint journal of a workspace: what each run's tool calls changed, and the bytes to put back.

Layout under `.shou/checkpoints/` (shou's own state: the file tools cannot write `.shou/`):

    blobs/<sha256>          file contents, content-addressed (one copy however many records name it)
    sessions/<hash>.jsonl   one append-only journal per session (the file name hashes the session name)

A journal line is a JSON record. `before` (written and fsynced, with its blob, before the file changes, so a
`kill -9` between the two still leaves the prior content on disk) and `after` name a path and its state; a
state is null (no file), `{"sha", "size", "mode"}` (kept), or `{"size", "mode", "big": true}` (larger than a
checkpoint may keep: recorded, not restorable). `undone` marks a run's steps after `after_step` as undone,
`dropped` a run whose blobs were dropped to stay under the size cap. The first line names the session and its
key, so a later session of the same name (after a delete) starts a journal of its own.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import orjson

from ..private import FILE_MODE
from ..workspace import check_state_file
from .history import Record

__all__ = ["DEFAULT_MAX_BYTES", "Book", "book_for", "dumps", "loads", "sha256"]

DEFAULT_MAX_BYTES = 50 * 2**20
FOLDER = "checkpoints"



def dumps(value: object) -> bytes:
    """A record or a scan's manifest as JSON. A path no UTF-8 encodes (a file name's undecodable bytes, which
    `os.scandir` gives as lone surrogates) is written as NUL and its UTF-8 (surrogates passed) in hex, and so
    is any text that starts with NUL (no path does): `loads` gives back the very name, so undo puts back that
    file, not one with a name like it."""
    try:
        data = orjson.dumps(value)
    except TypeError as e:
        if "surrogates" not in str(e):
            raise
    else:
        if _NUL_FIRST not in data:
            return data
    return orjson.dumps(_names(value, _name_out))


def loads(data: bytes) -> object:
    """What `dumps` wrote (`orjson.JSONDecodeError` when it is not JSON, or nested deeper than any record)."""
    value = orjson.loads(data)
    if _NUL_FIRST not in data:
        return value
    try:
        return _names(value, _name_in)
    except RecursionError:  # a planted line: no record nests more than a few levels
        raise orjson.JSONDecodeError("nested deeper than a checkpoint record", "", 0) from None


_NUL_FIRST = b'"\\u0000'  # a JSON string that starts with NUL


def _name_out(text: str) -> str:
    if text[:1] != "\0":
        try:
            text.encode("utf-8")
        except UnicodeEncodeError:
            pass
        else:
            return text
    return "\0" + text.encode("utf-8", "surrogatepass").hex()


def _name_in(text: str) -> str:
    if text[:1] == "\0":
        with contextlib.suppress(ValueError):
            return bytes.fromhex(text[1:]).decode("utf-8", "surrogatepass")
    return text


_DEEPEST = 16  # levels a record or manifest nests (they use three)


def _names(value: object, name: Callable[[str], str], depth: int = 0) -> object:
    if isinstance(value, str):
        return name(value)
    if depth > _DEEPEST:
        raise RecursionError("a checkpoint record nests deeper than any shou writes")
    if isinstance(value, dict):
        return {name(k) if isinstance(k, str) else k: _names(v, name, depth + 1) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_names(v, name, depth + 1) for v in value]
    return value


def sha256(data: bytes) -> str:
    """The hex SHA-256 of `data`: a blob's name."""
    return hashlib.sha256(data).hexdigest()


def _journal_name(session: str) -> str:
    # Session names are the person's (any characters); the file name must be a safe single component.
    return hashlib.sha256(session.encode("utf-8", "surrogateescape")).hexdigest()[:32] + ".jsonl"


def _folder(workspace: Path, sub: str) -> Path:
    """`.shou/checkpoints/<sub>/`, made if missing, no component a symlink (workspace.check_state_file)."""
    return check_state_file(workspace, FOLDER, sub, "_").parent


def _open_dir(path: Path) -> int:
    return os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view):]


class Book:
    """The checkpoints of one workspace: blobs and per-session journals, with a size cap on the blobs.

    One per workspace and process (`book_for`); its lock orders the appends of a run's parallel calls.
    """

    def __init__(self, workspace: Path, max_bytes: int = DEFAULT_MAX_BYTES) -> None:
        self.workspace = Path(workspace)
        self.max_bytes = max_bytes
        self.lock = threading.RLock()
        self._sizes: dict[str, int] | None = None  # blob name -> size, read once, then kept up to date

    # ------------------------------------------------------------ blobs

    @property
    def keep_limit(self) -> int:
        """The largest file whose content a checkpoint keeps: a quarter of the cap, at most 16 MB."""
        return min(16 * 2**20, max(self.max_bytes // 4, 0))

    def put_blob(self, data: bytes, *, sync: bool = True) -> str:
        """Store `data` and return its name; a blob already stored is not written again. `sync` makes it
        durable against a power loss too (fsynced); without it, a blob a crash damaged is found by its hash
        when read (`get_blob`), never used."""
        name = sha256(data)
        folder = _folder(self.workspace, "blobs")
        dir_fd = _open_dir(folder)
        try:
            with contextlib.suppress(FileNotFoundError):
                os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
                return name
            tmp = f".{name}.{os.getpid()}.{threading.get_ident()}"
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW | os.O_CLOEXEC, FILE_MODE,
                         dir_fd=dir_fd)
            try:
                _write_all(fd, data)
                if sync:
                    os.fsync(fd)  # the before-image is on disk before the file it saves can change
            finally:
                os.close(fd)
            os.rename(tmp, name, src_dir_fd=dir_fd, dst_dir_fd=dir_fd)
            if sync:
                os.fsync(dir_fd)
        finally:
            os.close(dir_fd)
        with self.lock:
            if self._sizes is not None:
                self._sizes[name] = len(data)
        return name

    def get_blob(self, name: str) -> bytes | None:
        """The content stored as `name`, or None when it is gone (dropped, damaged)."""
        if len(name) != 64 or not all(c in "0123456789abcdef" for c in name):
            return None
        try:
            dir_fd = _open_dir(_folder(self.workspace, "blobs"))
        except OSError:
            return None
        try:
            fd = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=dir_fd)
        except OSError:
            return None
        finally:
            os.close(dir_fd)
        with os.fdopen(fd, "rb") as f:
            data = f.read()
        return data if sha256(data) == name else None

    def blob_sizes(self) -> dict[str, int]:
        """Every stored blob and its size."""
        with self.lock:
            if self._sizes is None:
                sizes: dict[str, int] = {}
                with os.scandir(_folder(self.workspace, "blobs")) as entries:
                    for entry in entries:
                        if not entry.name.startswith("."):
                            with contextlib.suppress(OSError):
                                sizes[entry.name] = entry.stat(follow_symlinks=False).st_size
                self._sizes = sizes
            return self._sizes

    def delete_blobs(self, names: set[str]) -> None:
        """Remove the named blobs (those no record needs any more)."""
        dir_fd = _open_dir(_folder(self.workspace, "blobs"))
        try:
            for name in names:
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(name, dir_fd=dir_fd)
                with self.lock:
                    if self._sizes is not None:
                        self._sizes.pop(name, None)
        finally:
            os.close(dir_fd)

    # ------------------------------------------------------------ journals

    def append(self, session: str, key: str, record: Record) -> None:
        """Append `record` to the session's journal and fsync it (first making the journal, headed by the
        session's name and key; a journal left by an earlier session of that name is dropped first)."""
        line = dumps({**record, "t": time.time()}) + b"\n"
        folder = _folder(self.workspace, "sessions")
        name = _journal_name(session)
        with self.lock:
            dir_fd = _open_dir(folder)
            try:
                head = self._head(dir_fd, name)
                if head is not None and head.get("key") != key:
                    os.unlink(name, dir_fd=dir_fd)  # another session's, of the same name, deleted since
                    head = None
                fd = os.open(name, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC,
                             FILE_MODE, dir_fd=dir_fd)
                try:
                    if head is None:
                        _write_all(fd, dumps({"k": "session", "session": session, "key": key}) + b"\n")
                    _write_all(fd, line)
                    os.fsync(fd)
                finally:
                    os.close(fd)
            finally:
                os.close(dir_fd)

    @staticmethod
    def _head(dir_fd: int, name: str) -> Record | None:
        try:
            fd = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=dir_fd)
        except FileNotFoundError:
            return None
        with os.fdopen(fd, "rb") as f:
            first = f.readline()
        with contextlib.suppress(orjson.JSONDecodeError):
            head = loads(first)
            if isinstance(head, dict) and head.get("k") == "session":
                return head
        return {}

    def records(self, session: str) -> list[Record]:
        """The session's journal, oldest first ([] when it has none); a line cut short by a kill is skipped."""
        return list(self._read(_journal_name(session)))

    def _read(self, name: str) -> Iterator[Record]:
        try:
            dir_fd = _open_dir(_folder(self.workspace, "sessions"))
        except OSError:
            return
        try:
            fd = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=dir_fd)
        except OSError:
            return
        finally:
            os.close(dir_fd)
        with os.fdopen(fd, "rb") as f:
            for line in f:
                try:
                    record = loads(line)
                except orjson.JSONDecodeError:
                    continue
                if isinstance(record, dict):
                    yield record

    def sessions(self) -> list[str]:
        """The sessions that have a journal (reading only each journal's first line)."""
        folder = _folder(self.workspace, "sessions")
        dir_fd = _open_dir(folder)
        try:
            with os.scandir(folder) as entries:
                names = [e.name for e in entries if e.name.endswith(".jsonl")]
            heads = [self._head(dir_fd, name) for name in names]
        finally:
            os.close(dir_fd)
        return [str(h["session"]) for h in heads if h and "session" in h]

    def journals(self) -> dict[str, list[Record]]:
        """Every session's journal, by session name."""
        out: dict[str, list[Record]] = {}
        folder = _folder(self.workspace, "sessions")
        with os.scandir(folder) as entries:
            names = [e.name for e in entries if e.name.endswith(".jsonl")]
        for name in names:
            records = list(self._read(name))
            if records and records[0].get("k") == "session":
                out[str(records[0]["session"])] = records
        return out

    def drop_journal(self, session: str) -> None:
        """Remove the session's journal (its blobs go with the next `collect`)."""
        with self.lock:
            dir_fd = _open_dir(_folder(self.workspace, "sessions"))
            try:
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(_journal_name(session), dir_fd=dir_fd)
            finally:
                os.close(dir_fd)

    def collect(self, needed: set[str]) -> None:
        """Delete every blob not in `needed` (the ones live records name)."""
        self.delete_blobs(set(self.blob_sizes()) - needed)


_BOOKS: dict[str, Book] = {}
_BOOKS_LOCK = threading.Lock()


def book_for(workspace: Path, max_bytes: int | None = None) -> Book:
    """The `Book` of `workspace` (one per process); `max_bytes` updates its cap when given."""
    key = os.path.realpath(workspace)
    with _BOOKS_LOCK:
        book = _BOOKS.get(key)
        if book is None:
            book = _BOOKS[key] = Book(Path(workspace))
    if max_bytes is not None:
        book.max_bytes = max_bytes
    return book

