"""What a memory search needs in memory, rebuilt when the store's file changes: the vectors as one matrix,
each memory's neighbours, time and cues, and which entities each memory names.

Neighbours: the memories of one session, in time order, form a chain (the turns of a conversation).
Memories without a session are chained by time instead, within one source, as long as no more than
`EPISODE_GAP` passes between two of them: notes saved or imported together belong together, and a long
silence starts a new episode.
"""

from __future__ import annotations

import sqlite3
from collections import defaultdict
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import numpy as np
    import numpy.typing as npt

__all__ = ["EPISODE_GAP", "Index"]

EPISODE_GAP = 30 * 60.0


class Index:
    """A snapshot of the store for ranking (see the module docstring); read-only once built."""

    def __init__(self, db: sqlite3.Connection, with_vectors: bool) -> None:
        self.neighbours: dict[int, tuple[int, ...]] = {}
        self.times: dict[int, float] = {}
        self.asks: dict[int, float] = {}
        self.timed: set[int] = set()
        self.episodic: set[int] = set()  # rows chained by time (no session): a weaker guess than a session
        rows: list[int] = []
        blobs: list[bytes] = []
        prev: tuple[int, str, str, float] | None = None  # row, session, source, time
        query = ("SELECT row, session, source, time, asks, timed, embedding FROM memories "
                 "ORDER BY session = '', session, source, time, row")
        for row, session, source, when, asks, timed, blob in db.execute(query):
            if prev is not None and _chained(prev, session, source, when):
                self.neighbours[row] = (prev[0],)
                self.neighbours[prev[0]] = (*self.neighbours.get(prev[0], ()), row)
                if not session:
                    self.episodic.update((row, prev[0]))
            prev = (row, session, source, when)
            self.times[row] = when
            if asks:
                self.asks[row] = asks
            if timed:
                self.timed.add(row)
            if with_vectors and blob is not None:
                rows.append(row)
                blobs.append(blob)
        self.size = len(self.times)
        self.rows = rows
        self.matrix: npt.NDArray[np.float32] | None = None
        if with_vectors:
            import numpy as np

            self.matrix = np.frombuffer(b"".join(blobs), dtype=np.float32).reshape(len(rows), -1) if rows else None

        self.entities_of: dict[int, tuple[int, ...]] = {}
        self.rows_of: dict[int, list[int]] = defaultdict(list)
        named: dict[int, list[int]] = defaultdict(list)
        for entity, row in db.execute("SELECT entity, row FROM mentions"):
            named[row].append(entity)
            self.rows_of[entity].append(row)
        self.entities_of = {row: tuple(ids) for row, ids in named.items()}

    def mentions(self, entity: int) -> int:
        """How many memories name `entity`."""
        return len(self.rows_of.get(entity, ()))


def _chained(prev: tuple[int, str, str, float], session: str, source: str, when: float) -> bool:
    _, prev_session, prev_source, prev_time = prev
    if session or prev_session:
        return bool(session) and session == prev_session
    return source == prev_source and 0 <= when - prev_time <= EPISODE_GAP
