"""The memory store: one SQLite file with FTS5 (BM25) over the text and an embedding per memory.

Memories carry a time, a session, a source and tags. Adding a memory whose normalised text is already
stored (or, with embeddings, one nearly identical to a stored one) returns the stored memory instead.
Search ranks with `ranking.fuse`: BM25 and cosine similarity, weighted, plus a share of the score of
the neighbouring memories of the same session. Vectors are float32 blobs; a search takes one matrix
product over all of them, kept in memory and reloaded when the file changes (other processes included).
"""

from __future__ import annotations

import contextlib
import functools
import json
import sqlite3
import threading
import time as _time
import uuid
from collections.abc import Iterable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..errors import UserError
from ..store.migrate import migrate
from .embeddings import Embedder, default_embedder
from .ranking import RankParams, fts_query, fuse, query_terms
from .schema import COLUMNS, MIGRATIONS, filters, normalise, same_words, where_clause

if TYPE_CHECKING:
    import numpy as np
    import numpy.typing as npt

__all__ = ["Memory", "MemoryStore", "NewMemory", "recall"]


@dataclass(frozen=True, slots=True)
class Memory:
    """One stored memory; `score` is set on search results (higher is better) and 0 elsewhere."""

    id: str
    text: str
    time: float
    session: str = ""
    source: str = ""
    tags: tuple[str, ...] = ()
    score: float = 0.0


@dataclass(slots=True)
class NewMemory:
    """A memory to add: only `text` is required; `id` defaults to a new random one, `time` to now."""

    text: str
    id: str | None = None
    time: float | None = None
    session: str = ""
    source: str = ""
    tags: Sequence[str] = field(default_factory=tuple)


class _Index:
    """What a search needs in memory: session neighbours of every row and the matrix of vectors."""

    def __init__(self, db: sqlite3.Connection, with_vectors: bool) -> None:
        self.neighbours: dict[int, tuple[int, ...]] = {}
        rows: list[int] = []
        blobs: list[bytes] = []
        prev_row, prev_session = -1, ""
        query = "SELECT row, session, embedding FROM memories ORDER BY session, time, row"
        for row, session, blob in db.execute(query):
            if session and session == prev_session:
                # Memories of one session, in time order, form a chain: conversation turns.
                self.neighbours[row] = (prev_row,)
                self.neighbours[prev_row] = (*self.neighbours.get(prev_row, ()), row)
            prev_row, prev_session = row, session
            if with_vectors and blob is not None:
                rows.append(row)
                blobs.append(blob)
        self.rows = rows
        self.matrix: npt.NDArray[np.float32] | None = None
        if with_vectors:
            import numpy as np

            self.matrix = np.frombuffer(b"".join(blobs), dtype=np.float32).reshape(len(rows), -1) if rows else None


class MemoryStore:
    """Long-term memories in one SQLite file (created with its folder on first use).

    `embeddings=True` uses all-MiniLM-L6-v2 when the `memory` extra is installed and BM25 alone when
    not; `False` forces BM25 alone; an `Embedder` instance is used as given. A new memory is a copy of a
    stored one when their normalised texts are equal or, with embeddings, when their cosine is at least
    `near_duplicate` and their word sets nearly match (None: exact copies only).
    """

    def __init__(
        self, path: str | Path, *, embeddings: bool | Embedder = True, near_duplicate: float | None = 0.97,
        params: RankParams | None = None,
    ) -> None:
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.embedder: Embedder | None = (
            (default_embedder() if embeddings else None) if isinstance(embeddings, bool) else embeddings
        )
        self.near_duplicate = near_duplicate
        self.params = params or RankParams()
        self._db = sqlite3.connect(self.path, isolation_level=None, check_same_thread=False, timeout=10.0)
        self._db.execute("PRAGMA journal_mode=WAL")
        self._db.execute("PRAGMA synchronous=NORMAL")
        self._db.execute("PRAGMA foreign_keys=ON")
        self._lock = threading.RLock()
        self._index: _Index | None = None
        self._index_version: tuple[int, int] = (-1, -1)
        self._writes = 0
        migrate(self._db, MIGRATIONS)

    @classmethod
    def for_workspace(cls, workspace: str | Path, **kwargs: Any) -> MemoryStore:
        """The store at `<workspace>/.shou/memory.db` (never through a symlink)."""
        from ..workspace import state_database

        return cls(state_database(Path(workspace), "memory.db"), **kwargs)

    @property
    def mode(self) -> str:
        """"hybrid" (BM25 + embeddings) or "bm25"."""
        return "hybrid" if self.embedder is not None else "bm25"

    def close(self) -> None:
        """Close the file."""
        self._db.close()

    def __enter__(self) -> MemoryStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ------------------------------------------------------------------ writing

    def add(
        self, text: str, *, id: str | None = None, time: float | None = None, session: str = "", source: str = "",
        tags: Sequence[str] = (),
    ) -> tuple[Memory, bool]:
        """Store one memory; returns it and True, or the stored copy and False when it is a duplicate."""
        return self.add_many([NewMemory(text, id, time, session, source, tags)])[0]

    def add_many(self, items: Iterable[NewMemory]) -> list[tuple[Memory, bool]]:
        """Store many memories in one transaction, embedding them in batches; see `add`."""
        items = list(items)
        for n, item in enumerate(items, start=1):
            validate(item, f"memory {n}" if len(items) > 1 else "the memory")
        vectors = self.embedder.encode([i.text for i in items]) if self.embedder is not None and items else None
        results: list[tuple[Memory, bool]] = []
        with self._lock:
            index = self._current_index() if vectors is not None and self.near_duplicate is not None else None
            accepted: list[tuple[int, Memory]] = []  # stored so far in this batch, by position in `vectors`
            with self._transaction():
                for pos, item in enumerate(items):
                    vec = vectors[pos] if vectors is not None else None
                    copy = self._find_copy(item, vec, index, vectors, accepted)
                    if copy is not None:
                        results.append((copy, False))
                        continue
                    mem = self._insert(item, vec)
                    results.append((mem, True))
                    accepted.append((pos, mem))
        return results

    @contextlib.contextmanager
    def _transaction(self) -> Iterator[None]:
        with self._lock:
            self._db.execute("BEGIN IMMEDIATE")
            try:
                yield
                self._db.execute("COMMIT")
            except BaseException:
                self._db.execute("ROLLBACK")
                raise
            finally:
                self._writes += 1  # the in-memory index must be rebuilt

    def _find_copy(
        self, item: NewMemory, vec: Any, index: _Index | None, batch: Any, accepted: list[tuple[int, Memory]]
    ) -> Memory | None:
        if item.id is not None:
            row = self._db.execute(f"SELECT {COLUMNS} FROM memories WHERE id = ?", (item.id,)).fetchone()
            if row is not None:
                return _memory(row)
        row = self._db.execute(f"SELECT {COLUMNS} FROM memories WHERE norm = ?", (normalise(item.text),)).fetchone()
        if row is not None or vec is None or self.near_duplicate is None:
            return _memory(row) if row is not None else None
        # A close vector alone is not enough: "prefers dark mode" and "prefers light mode" embed almost
        # alike, and dropping the second would lose an update. The words must be nearly the same too.
        if index is not None and index.matrix is not None:
            sims = index.matrix @ vec
            for i in sims.argsort()[::-1][:5]:
                if sims[i] < self.near_duplicate:
                    break
                mem = self.get_row(index.rows[i])
                if mem is not None and same_words(mem.text, item.text):
                    return mem
        for pos, mem in accepted:  # copies within the batch being added
            if float(batch[pos] @ vec) >= self.near_duplicate and same_words(mem.text, item.text):
                return mem
        return None

    def _insert(self, item: NewMemory, vec: Any) -> Memory:
        mem_id = item.id or uuid.uuid4().hex[:12]
        now = _time.time()
        when = item.time if item.time is not None else now
        tags = tuple(dict.fromkeys(t.strip() for t in item.tags if t.strip()))
        cur = self._db.execute(
            "INSERT INTO memories(id, text, norm, time, session, source, tags, created, embedding, model) "
            "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
            (mem_id, item.text, normalise(item.text), when, item.session, item.source, json.dumps(tags), now,
             vec.tobytes() if vec is not None else None, self.embedder.name if vec is not None else None),
        )
        self._db.executemany("INSERT INTO memory_tags(tag, row) VALUES (?, ?)", [(t, cur.lastrowid) for t in tags])
        return Memory(mem_id, item.text, when, item.session, item.source, tags)

    def forget(
        self, ids: Sequence[str] = (), *, before: float | None = None, unused_since: float | None = None,
        session: str | None = None, source: str | None = None, tags: Sequence[str] = (), everything: bool = False,
    ) -> int:
        """Delete memories: by id, or those matching every filter given; returns how many went.

        `before` matches memories older than that time; `unused_since` those not recalled since then.
        With no id and no filter nothing is deleted unless `everything` is set.
        """
        where, args = filters(session=session, source=source, tags=tags, until=before)
        if unused_since is not None:
            where.append("COALESCE(last_used, created) < ?")
            args.append(unused_since)
        if ids:
            where.append(f"id IN ({','.join('?' * len(ids))})")
            args.extend(ids)
        if not where and not everything:
            return 0
        with self._lock:
            cur = self._db.execute(f"DELETE FROM memories {where_clause(where)}", args)
            self._writes += 1
        return cur.rowcount

    # ------------------------------------------------------------------ reading

    def get(self, id: str) -> Memory | None:
        """The memory with this id, if stored."""
        row = self._db.execute(f"SELECT {COLUMNS} FROM memories WHERE id = ?", (id,)).fetchone()
        return _memory(row) if row else None

    def get_row(self, row: int) -> Memory | None:
        """The memory in this internal row."""
        found = self._db.execute(f"SELECT {COLUMNS} FROM memories WHERE row = ?", (row,)).fetchone()
        return _memory(found) if found else None

    def count(self) -> int:
        """How many memories are stored."""
        return int(self._db.execute("SELECT count(*) FROM memories").fetchone()[0])

    def list(
        self, limit: int = 50, offset: int = 0, *, session: str | None = None, source: str | None = None,
        tags: Sequence[str] = (), since: float | None = None, until: float | None = None,
    ) -> list[Memory]:
        """Memories newest first, optionally filtered (tags: any of them)."""
        where, args = filters(session=session, source=source, tags=tags, since=since, until=until)
        sql = f"SELECT {COLUMNS} FROM memories {where_clause(where)} ORDER BY time DESC, row DESC LIMIT ? OFFSET ?"
        return [_memory(r) for r in self._db.execute(sql, [*args, limit, offset])]

    def search(
        self, query: str, k: int = 10, *, session: str | None = None, source: str | None = None,
        tags: Sequence[str] = (), since: float | None = None, until: float | None = None,
    ) -> list[Memory]:
        """The `k` memories best matching `query`, best first, among those passing the filters."""
        where, args = filters(session=session, source=source, tags=tags, since=since, until=until)
        allowed = None
        if where:
            allowed = {r for (r,) in self._db.execute(f"SELECT row FROM memories {where_clause(where)}", args)}
        with self._lock:
            index = self._current_index()
        # The query is embedded in another thread while SQLite runs BM25 here: both release the GIL.
        vector = None
        if self.embedder is not None and index.matrix is not None and query.strip():
            vector = _encoder_pool().submit(self.embedder.encode, [query])
        bm25 = self._bm25(query, allowed)
        dense = self._dense(vector.result()[0], index, allowed) if vector is not None else {}
        scores = fuse(bm25, dense, index.neighbours, self.params)
        ranked = sorted(
            ((s, r) for r, s in scores.items() if allowed is None or r in allowed), key=lambda x: (-x[0], x[1])
        )[:k]
        marks = ",".join("?" * len(ranked))
        rows = {r[0]: r for r in self._db.execute(f"SELECT {COLUMNS} FROM memories WHERE row IN ({marks})",
                                                   [r for _, r in ranked])}
        return [replace(_memory(rows[r]), score=round(s, 6)) for s, r in ranked if r in rows]

    def touch(self, ids: Sequence[str]) -> None:
        """Note that these memories were recalled now (`forget(unused_since=...)` spares them)."""
        if ids:
            with self._lock:
                # No index rebuild: last_used plays no part in ranking.
                self._db.execute(f"UPDATE memories SET last_used = ?, hits = hits + 1 WHERE id IN "
                                 f"({','.join('?' * len(ids))})", [_time.time(), *ids])

    def _bm25(self, query: str, allowed: set[int] | None) -> dict[int, float]:
        terms = query_terms(query)
        if not terms:
            return {}
        # bm25() is lower-is-better (negative); negate it so every score is higher-is-better.
        rows = self._db.execute(
            "SELECT rowid, -bm25(memories_fts) FROM memories_fts WHERE memories_fts MATCH ? ORDER BY rank LIMIT ?",
            (fts_query(terms), self.params.candidates if allowed is None else 10 * self.params.candidates),
        ).fetchall()
        return {r: s for r, s in rows if allowed is None or r in allowed}

    def _dense(self, vector: Any, index: _Index, allowed: set[int] | None) -> dict[int, float]:
        import numpy as np

        if index.matrix is None:
            return {}
        sims = index.matrix @ vector
        if allowed is not None:
            mask = np.fromiter((r in allowed for r in index.rows), dtype=bool, count=len(index.rows))
            sims = np.where(mask, sims, -1.0)
        n = min(self.params.candidates, len(sims))
        top = np.argpartition(-sims, n - 1)[:n]
        return {index.rows[i]: float(sims[i]) for i in top if sims[i] > -1.0}

    def _backfill(self, embedder: Embedder) -> None:
        """Embed memories stored without a vector (BM25-only mode) or with another model's vector."""
        missing = self._db.execute(
            "SELECT row, text FROM memories WHERE embedding IS NULL OR model IS NOT ?", (embedder.name,)
        ).fetchall()
        for start in range(0, len(missing), 256):
            chunk = missing[start:start + 256]
            vectors = embedder.encode([text for _, text in chunk])
            updates = [(v.tobytes(), embedder.name, row) for v, (row, _) in zip(vectors, chunk, strict=True)]
            with self._transaction():
                self._db.executemany("UPDATE memories SET embedding = ?, model = ? WHERE row = ?", updates)

    def _current_index(self) -> _Index:
        # data_version changes when another connection commits; _writes when this one does.
        version = (self._db.execute("PRAGMA data_version").fetchone()[0], self._writes)
        if self._index is None or version != self._index_version:
            if self.embedder is not None:
                self._backfill(self.embedder)
                version = (self._db.execute("PRAGMA data_version").fetchone()[0], self._writes)
            self._index = _Index(self._db, with_vectors=self.embedder is not None)
            self._index_version = version
        return self._index


@functools.cache
def _encoder_pool() -> ThreadPoolExecutor:
    return ThreadPoolExecutor(max_workers=1, thread_name_prefix="shou-memory-embed")


def recall(store: MemoryStore, query: str, k: int = 5) -> list[Memory]:
    """The memories to put before a run: the `k` best for `query`, marked as used."""
    found = store.search(query, k)
    store.touch([m.id for m in found])
    return found


def _memory(row: tuple[Any, ...]) -> Memory:
    _row, mem_id, text, when, session, source, tags = row
    return Memory(mem_id, text, when, session, source, tuple(json.loads(tags)))


def validate(item: NewMemory, where: str) -> None:
    """Refuse what the store could not hold or later show: no text, text that is not valid Unicode (lone
    surrogates), a time that is not a finite moment between the years 1 and 9999."""
    if not item.text.strip():
        raise UserError(f"{where}: a memory needs some text")
    for label, value in (("text", item.text), ("id", item.id or ""), ("session", item.session),
                         ("source", item.source), *(("tag", t) for t in item.tags)):
        try:
            value.encode("utf-8")
        except UnicodeEncodeError:
            raise UserError(f"{where}: its {label} is not valid Unicode (a lone surrogate)") from None
    if item.time is not None:
        import datetime
        import math

        try:
            ok = math.isfinite(item.time) and datetime.datetime.fromtimestamp(item.time).year >= 1
        except (OverflowError, OSError, ValueError):
            ok = False
        if not ok:
            raise UserError(f"{where}: time {item.time!r} is not a moment a calendar can show")
