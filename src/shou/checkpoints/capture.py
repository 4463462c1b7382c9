"""Recording what a tool call changes: the file tools say which path they are about to change; for sandboxed
commands (which say nothing) the workspace is scanned before and after.

A file tool calls `CallRecorder.before(path)` under the file's write lock, before it changes the file: the
prior content goes to a blob and the journal (both fsynced) first. `after(path)` records what it left.

A command can change any file, so `scan` lists the workspace's regular files by (size, mtime, inode, mode)
with a bounded walk (no symlink followed; `.shou/` and `.git/` skipped), and `precapture` keeps the content of
the small files it has not kept already. The scan after the command says what changed; a changed file's prior
content can be put back only when the scan before kept it (small enough, within the budget).
"""

from __future__ import annotations

import contextlib
import os
import stat
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import orjson

from ..beneath import up
from ..errors import ToolError, UserError
from ..workspace import NotFound, open_file, relative_parts
from .history import Record, State, pending_scans
from .journal import Book, dumps, loads, sha256

__all__ = ["CallRecorder", "Scan", "current_state", "precapture", "recover", "scan", "state_of"]

SCAN_LIMIT = 20_000  # entries a scan looks at before it stops (a huge tree is watched in part, said so)
SKIP = frozenset({".shou", ".git"})
PRECAPTURE_FILE = 1 * 2**20  # the largest file whose content is kept before a command, just in case
PRECAPTURE_BUDGET = 16 * 2**20  # the most content read per command for that

Sig = tuple[int, int, int, int]  # size, mtime_ns, inode, mode


def _state(data: bytes | None, st: os.stat_result, sha: str | None) -> State:
    mode = stat.S_IMODE(st.st_mode)
    if data is None and sha is None:
        # which file it is (inode, and a time it was there): undo tells it if a command moves it (`_identity_only`)
        return {"size": st.st_size, "mode": mode, "mtime": st.st_mtime_ns, "big": True, "ino": st.st_ino,
                "seen": time.time_ns()}
    # the time too: a state shou kept only by size and time (too big then, under a smaller cap or past a
    # command's budget) is compared with this one by them
    return {"sha": sha, "size": st.st_size, "mode": mode, "mtime": st.st_mtime_ns}


def state_of(book: Book, root: Path, path: str, *, keep: bool = True, sync: bool = True) -> State:
    """The file at `path` now: None when there is none; its content kept as a blob (when `keep` and small
    enough; fsynced when `sync`), or only its size and mode when it is too big. `ToolError` when it is no
    regular file."""
    try:
        f = open_file(root, path)
    except NotFound:
        return None
    with f:
        if f.stat.st_size > book.keep_limit:
            return _state(None, f.stat, None)
        data = f.read(book.keep_limit)
        sha = book.put_blob(data, sync=sync) if keep else sha256(data)
        return _state(data, os.fstat(f.fd), sha)


def current_state(book: Book, root: Path, path: str) -> State | str:
    """The file at `path` now, as `same_state` compares it (nothing stored), or why it cannot be read."""
    try:
        return state_of(book, root, path, keep=False)
    except ToolError as e:
        return str(e)


class CallRecorder:
    """The checkpoints of one tool call, handed to its tool as `ToolContext.checkpoint`.

    `notes` collects what the run should be told (a file too big to keep); the run's control emits them.
    """

    def __init__(self, book: Book, session: str, key: str, run: str, step: int, call: str, tool: str) -> None:
        self.book, self.session, self.key = book, session, key
        self.head = {"run": run, "step": step, "call": call, "tool": tool}
        self.notes: list[str] = []
        self.recorded = False  # whether anything was recorded (only then may the cap need keeping)
        self._lock = threading.Lock()

    def _append(self, kind: str, path: str, state: State, **more: object) -> None:
        self._record({"k": kind, **self.head, "path": path, "state": state, **more})

    def _record(self, record: dict[str, object]) -> None:
        self.recorded = True
        self.book.append(self.session, self.key, record)

    def _rel(self, path: str) -> str:
        return "/".join(relative_parts(self.book.workspace, path))

    def before(self, path: str, new: bytes | None = None) -> None:
        """Record the file at `path` as it is, durably, before the tool changes it (and the hash of `new`, the
        content it is about to write: after a kill between the two, undo knows the file is as shou left it).
        `ToolError` when that cannot be done: the change must not happen without its checkpoint."""
        rel = self._rel(path)
        try:
            state = state_of(self.book, self.book.workspace, rel)
            self._append("before", rel, state, **({"next": sha256(new)} if new is not None else {}))
        except (OSError, UserError) as e:
            raise ToolError(f"cannot record a checkpoint of {rel!r} before changing it ({e}); nothing was "
                            "changed") from None
        if state is not None and state.get("big"):
            with self._lock:
                self.notes.append(f"{rel} is {state['size']} bytes, too big to keep a checkpoint of "
                                  f"(limit {self.book.keep_limit}): `shou undo` cannot put back its content")

    def after(self, path: str) -> None:
        """Record what the tool left at `path` (best effort: the change is made either way)."""
        rel = self._rel(path)
        with contextlib.suppress(OSError, UserError, ToolError):
            self._append("after", rel, state_of(self.book, self.book.workspace, rel))

    def command_starts(self, before: Scan, kept: dict[str, State]) -> None:
        """Record the scan before a command (as a blob), durably, before the command runs: killed during it,
        the process leaves what `recover` needs to record its changes later."""
        files = {p: [*sig, (kept.get(p) or {}).get("sha")] for p, sig in before.files.items()}
        manifest = self.book.put_blob(dumps({"files": files, "complete": before.complete, "at": before.at}))
        self._record({"k": "scan", **self.head, "manifest": manifest})

    def command(self, before: Scan, kept: dict[str, State], after: Scan) -> list[str]:
        """Record what a command changed between two scans (`kept`: the prior states `precapture` kept);
        returns the changed paths."""
        try:
            return self._command(before, kept, after)
        finally:
            with contextlib.suppress(OSError, UserError):
                self._record({"k": "scanned", **self.head})

    def _command(self, before: Scan, kept: dict[str, State], after: Scan) -> list[str]:
        changed = [p for p in sorted(before.files.keys() | after.files.keys())
                   if before.files.get(p) != after.files.get(p)]
        for rel in changed:
            prior: State = None
            if rel in before.files:
                prior = kept.get(rel) or _identity_only(before.files[rel], before.at)
            with contextlib.suppress(OSError, UserError):
                self._append("before", rel, prior)
            self.after(rel)
        return changed


def _identity_only(sig: Sig, at: int | None) -> State:
    """A file whose content was not kept: what says which file it was, so that undo can tell it when a command
    moved it (`mv` keeps the inode, size, time and mode; a file made after `at`, the time the scan began, is
    not it even when its inode number is the freed one's)."""
    size, mtime, ino, mode = sig
    return {"size": size, "mode": mode, "mtime": mtime, "big": True, "ino": ino, "seen": at}


class Scan:
    """The workspace's regular files by path, each as (size, mtime_ns, inode, mode); `complete` is False when
    the walk stopped at its bound."""

    def __init__(self, files: dict[str, Sig], complete: bool, at: int | None = None) -> None:
        self.files = files
        self.complete = complete
        self.at = at  # when the scan began (ns since the epoch), None when not known


def scan(root: Path, limit: int = SCAN_LIMIT) -> Scan:
    """List the workspace's regular files (bounded, following no symlink, skipping shou's `.shou/` and git's
    `.git/` folders)."""
    files: dict[str, Sig] = {}
    at = time.time_ns()
    skip = _skipped(str(root))
    try:
        for seen, (rel, st) in enumerate(_walk(str(root), "", skip), 1):
            if seen > limit:
                return Scan(files, False, at)
            if st is not None:
                files[rel] = (st.st_size, st.st_mtime_ns, st.st_ino, stat.S_IMODE(st.st_mode))
    except (_Moved, OSError):  # a folder moved meanwhile, or the workspace cannot be opened
        return Scan(files, False, at)
    return Scan(files, True, at)


def _skipped(root: str) -> set[tuple[int, int]]:
    """The folders a scan never enters, as (device, inode): the workspace's own `.shou/` and `.git/`, however a
    file system that folds letter case lets them be spelled. Only those: a `.Shou/` on a file system that does
    not fold case, or a subfolder's `.shou/`, is an ordinary folder a command may change (and undo must see)."""
    found = set()
    for name in SKIP:
        with contextlib.suppress(OSError):
            st = os.stat(os.path.join(root, name), follow_symlinks=False)
            if stat.S_ISDIR(st.st_mode):
                found.add((st.st_dev, st.st_ino))
    return found


def _walk(top: str, prefix: str, skip: set[tuple[int, int]]) -> Iterator[tuple[str, os.stat_result | None]]:
    """Every folder (with None) and regular file below `top`, each folder before what it holds. One folder is
    open at a time, gone down into by name (following no link) and up from through `..`, which must be the
    folder gone down from (else `_Moved`): no recursion (a generator recursing once a level raised
    RecursionError on a tree 1,500 deep, which any command can make) and no path (one past PATH_MAX was
    skipped without a word, and undo never saw what a command did there)."""
    fd = os.open(top, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    stack: list[tuple[str, Iterator[tuple[str, os.stat_result]], tuple[int, int]]] = [
        (prefix, iter(_entries(fd)), (0, 0))]
    try:
        while stack:
            here, entries, parent = stack[-1]
            entry = next(entries, None)
            if entry is None:
                stack.pop()
                if stack:
                    fd, same = up(fd, parent)
                    if not same:
                        raise _Moved
                continue
            name, st = entry
            rel = here + name
            if stat.S_ISDIR(st.st_mode):
                # a nested repository's `.git/` too, by its exact name: git's internals, not the project's files
                if (st.st_dev, st.st_ino) in skip or name == ".git":
                    continue
                yield rel, None
                try:
                    inner = os.open(name, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=fd)
                except OSError:
                    continue
                mine = os.fstat(fd)
                os.close(fd)
                fd = inner
                stack.append((rel + "/", iter(_entries(fd)), (mine.st_dev, mine.st_ino)))
            elif stat.S_ISREG(st.st_mode):
                yield rel, st
    finally:
        os.close(fd)


class _Moved(Exception):
    """A folder of the workspace moved while it was walked."""


def _entries(fd: int) -> list[tuple[str, os.stat_result]]:
    found = []
    try:
        with os.scandir(fd) as it:
            for entry in it:
                with contextlib.suppress(OSError):
                    found.append((entry.name, entry.stat(follow_symlinks=False)))
    except OSError:
        pass
    return found


_KEPT: dict[tuple[str, str, Sig], str] = {}  # (workspace, path, signature) -> blob: a file unchanged is not reread
_KEPT_LOCK = threading.Lock()


def precapture(book: Book, taken: Scan) -> dict[str, State]:
    """Keep the content of the scan's small files (within a budget per command), so a command's changes to
    them can be undone; a file unchanged since it was last kept costs nothing."""
    kept: dict[str, State] = {}
    budget = PRECAPTURE_BUDGET
    root = str(book.workspace)
    blobs = book.blob_sizes()
    limit = min(PRECAPTURE_FILE, book.keep_limit)
    for rel, sig in taken.files.items():
        size, _, _, mode = sig
        with _KEPT_LOCK:
            sha = _KEPT.get((root, rel, sig))
        if sha is not None and sha in blobs:
            kept[rel] = {"sha": sha, "size": size, "mode": mode}
            continue
        if size > limit or size > budget:
            continue
        try:
            # Not fsynced one by one (thousands of files before a first command): a kill -9 loses nothing
            # written, and a blob a power loss damaged is caught by its hash when read.
            state = state_of(book, book.workspace, rel, sync=False)
        except (ToolError, OSError, UserError):
            continue
        if state is None or not state.get("sha"):
            continue
        budget -= size
        kept[rel] = state
        with _KEPT_LOCK:
            _KEPT[(root, rel, sig)] = state["sha"]
    return kept


def recover(book: Book, session: str) -> int:
    """Record the changes of the session's commands that a killed process left unrecorded (a `scan` record
    with no `scanned`), comparing the workspace now with the scan before each; returns how many. Call it only
    when no process runs the session (a running command's changes are its own to record)."""
    records = book.records(session)
    key = str(records[0].get("key", session)) if records else session
    found = 0
    for r in pending_scans(records):
        rec = CallRecorder(book, session, key, str(r.get("run", "")), int(r.get("step", 0)), str(r.get("call", "")),
                           str(r.get("tool", "")))
        before, kept = _manifest(book, r)
        rec.command(before, kept, scan(book.workspace) if before.files or before.complete else before)
        found += 1
    return found


def _manifest(book: Book, r: Record) -> tuple[Scan, dict[str, State]]:
    data = book.get_blob(str(r.get("manifest", "")))
    try:
        m = loads(data) if data is not None else {}
    except orjson.JSONDecodeError:
        m = {}
    if not isinstance(m, dict):
        m = {}
    files: dict[str, Sig] = {}
    kept: dict[str, State] = {}
    for path, v in (m.get("files") or {}).items():
        size, mtime, ino, mode, sha = v
        files[path] = (size, mtime, ino, mode)
        if sha:
            kept[path] = {"sha": sha, "size": size, "mode": mode}
    at = m.get("at")
    return Scan(files, bool(m.get("complete")), at if isinstance(at, int) else None), kept
