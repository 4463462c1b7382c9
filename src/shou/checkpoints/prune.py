"""Keeping checkpoints bounded: under the size cap (oldest runs dropped first) and gone with their session."""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable

import orjson

from .history import Record, live_blobs, pending_scans
from .journal import Book, loads

__all__ = ["drop_session", "forget_deleted", "prune_to_cap"]


def drop_session(book: Book, session: str) -> None:
    """Remove the session's checkpoints (it was deleted): its journal, and the blobs no other one needs."""
    with book.lock:
        book.drop_journal(session)
        needed: set[str] = set()
        for records in book.journals().values():
            needed |= live_blobs(records) | _pending(book, records)
        book.collect(needed)


def _pending(book: Book, records: list[Record]) -> set[str]:
    """The blobs a command still running (or killed, not recovered yet) needs: its scan and what it kept."""
    needed: set[str] = set()
    for r in pending_scans(records):
        manifest = str(r.get("manifest", ""))
        needed.add(manifest)
        data = book.get_blob(manifest)
        if data is None:
            continue
        try:
            files = loads(data).get("files") or {}  # type: ignore[attr-defined]
        except (orjson.JSONDecodeError, AttributeError):
            continue
        needed.update(v[4] for v in files.values() if isinstance(v, list) and len(v) == 5 and v[4])
    return needed


def forget_deleted(book: Book, exists: Callable[[str], bool]) -> list[str]:
    """Drop the checkpoints of every session `exists` says is gone; returns their names."""
    gone = [name for name in book.sessions() if not exists(name)]
    for name in gone:
        drop_session(book, name)
    return gone


def prune_to_cap(book: Book, keep_run: str = "") -> int:
    """Bring the blobs under the book's cap: first those no record names (contents kept before a command
    that changed nothing), then the oldest runs' (never `keep_run`'s), each marked `dropped` in its journal.
    Returns how many runs were dropped."""
    with book.lock:
        sizes = book.blob_sizes()
        if sum(sizes.values()) <= book.max_bytes:
            return 0
        journals = book.journals()
        uses: Counter[str] = Counter()
        pending: set[str] = set()
        found: list[tuple[float, str, str, str, set[str]]] = []  # (first time, session, key, run, blobs)
        for session, records in journals.items():
            key = str(records[0].get("key", ""))
            pending |= _pending(book, records)
            dropped = {r.get("run") for r in records if r.get("k") == "dropped"}
            by_run: dict[str, tuple[float, set[str]]] = {}
            for r in records:
                run = r.get("run")
                if r.get("k") not in ("before", "after") or not isinstance(run, str) or run in dropped:
                    continue
                first, blobs = by_run.setdefault(run, (float(r.get("t", 0.0)), set()))
                state = r.get("state")
                if isinstance(state, dict) and isinstance(state.get("sha"), str):
                    blobs.add(state["sha"])
            for run, (first, blobs) in by_run.items():
                found.append((first, session, key, run, blobs))
                uses.update(blobs)
        book.collect(set(uses) | pending)
        total = sum(sizes.get(b, 0) for b in uses)
        dropped_runs = 0
        for _, session, key, run, blobs in sorted(found):
            if total <= book.max_bytes:
                break
            if run == keep_run or not blobs:  # dropping a run that keeps no content frees nothing
                continue
            book.append(session, key, {"k": "dropped", "run": run})
            dropped_runs += 1
            for blob in blobs:
                uses[blob] -= 1
                if uses[blob] == 0:
                    total -= sizes.get(blob, 0)
        if dropped_runs:
            book.collect({b for b, n in uses.items() if n > 0} | pending)
        return dropped_runs
