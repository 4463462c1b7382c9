"""The memory store: one SQLite file holding the memories, their BM25 index, vectors and linked entities.

Memories carry a time, a session, a source and tags. Adding a memory whose normalised text is already
stored (or, with embeddings, one nearly identical to a stored one) returns the stored memory instead.
On the way in each memory gets its search terms (`shou.ranking.terms`, indexed by FTS5), its cues (how
much of it asks, whether it tells a time), its entities and relations (memory/graph.py) and, with the
`memory` extra, its sentence vector and word-piece vectors. Search ranks with memory/ranking.py over an
in-memory `Index`, reloaded when the file changes (other processes included). Memories stored by older
versions, or without embeddings, get what they lack when a store opens them.
"""

from __future__ import annotations

import contextlib
import functools
import json
import sqlite3
import threading
import time as _time
import uuid
from collections.abc import Iterable, Iterator, Mapping, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import replace
from pathlib import Path
from typing import Any

from ..private import make_dirs, private_file
from ..ranking import terms
from ..store.migrate import migrate
from . import candidates, graph, maxsim
from .cues import question_share, states_time
from .embeddings import Embedder, default_embedder
from .entities import Fact
from .graph import EntityView
from .index import Index
from .ranking import Query, RankParams, score
from .records import Memory, NewMemory, from_row, validate
from .schema import COLUMNS, MIGRATIONS, filters, normalise, same_words, where_clause

__all__ = ["Fact", "Memory", "MemoryStore", "NewMemory", "recall", "validate"]

_CHUNK = 256


class MemoryStore:
    """Long-term memories in one SQLite file (created with its folder on first use).

    `embeddings=True` uses all-MiniLM-L6-v2 when the `memory` extra is installed and BM25 alone when
    not; `False` forces BM25 alone; an `Embedder` instance is used as given. A new memory is a copy of a
    stored one when their normalised texts are equal or, with embeddings, when their cosine is at least
    `near_duplicate` and their word sets nearly match (None: exact copies only).
    """

    SIGNED = True  # a workspace file: memories carry the user's signature (memory/signing.py)

    def __init__(
        self, path: str | Path, *, embeddings: bool | Embedder = True, near_duplicate: float | None = 0.97,
        params: RankParams | None = None, env: Mapping[str, str] | None = None,
    ) -> None:
        self.path = Path(path)
        self._env = env  # whose config folder holds the signing key (memory/signing.py)
        self._signed: tuple[Any, set[int]] | None = None
        make_dirs(self.path.parent)
        private_file(self.path)  # 0600 before SQLite makes it (and its -wal, -shm) with the umask's mode
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
        self._index: Index | None = None
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
        tags: Sequence[str] = (), facts: Sequence[Fact] = (),
    ) -> tuple[Memory, bool]:
        """Store one memory; returns it and True, or the stored copy and False when it is a duplicate (the
        `facts` given are then linked to the copy)."""
        return self.add_many([NewMemory(text, id, time, session, source, tags, facts)])[0]

    def add_many(self, items: Iterable[NewMemory]) -> list[tuple[Memory, bool]]:
        """Store many memories in one transaction, embedding them in batches; see `add`."""
        items = list(items)
        for n, item in enumerate(items, start=1):
            validate(item, f"memory {n}" if len(items) > 1 else "the memory")
        vectors, pieces = self._encode([i.text for i in items]) if items else (None, None)
        results: list[tuple[Memory, bool]] = []
        with self._lock:
            index = self._current_index() if vectors is not None and self.near_duplicate is not None else None
            accepted: list[tuple[int, Memory]] = []  # stored so far in this batch, by position in `vectors`
            with self._transaction():
                for pos, item in enumerate(items):
                    vec = vectors[pos] if vectors is not None else None
                    copy = self._find_copy(item, vec, index, vectors, accepted)
                    if copy is not None:
                        if item.facts:
                            graph.link(self._db, self._row_of(copy.id), "", item.facts)
                        results.append((copy, False))
                        continue
                    mem = self._insert(item, vec, pieces[pos] if pieces is not None else None)
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

    def _encode(self, texts: list[str]) -> tuple[Any, list[bytes] | None]:
        """Sentence vectors and packed piece vectors of `texts` (None for what this store does not keep)."""
        if self.embedder is None:
            return None, None
        if not self._pieces:
            return self.embedder.encode(texts), None
        vectors, pieces = self.embedder.encode_tokens(texts)  # type: ignore[attr-defined]
        return vectors, [maxsim.pack(p) for p in pieces]

    @property
    def _pieces(self) -> bool:
        return self.embedder is not None and hasattr(self.embedder, "encode_tokens")

    def _row_of(self, mem_id: str) -> int:
        return int(self._db.execute("SELECT row FROM memories WHERE id = ?", (mem_id,)).fetchone()[0])

    def _find_copy(
        self, item: NewMemory, vec: Any, index: Index | None, batch: Any, accepted: list[tuple[int, Memory]]
    ) -> Memory | None:
        if item.id is not None:
            row = self._db.execute(f"SELECT {COLUMNS} FROM memories WHERE id = ?", (item.id,)).fetchone()
            if row is not None:
                return from_row(row)
        row = self._db.execute(f"SELECT {COLUMNS} FROM memories WHERE norm = ?", (normalise(item.text),)).fetchone()
        if row is not None or vec is None or self.near_duplicate is None:
            return from_row(row) if row is not None else None
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

    def _insert(self, item: NewMemory, vec: Any, pieces: bytes | None) -> Memory:
        mem_id = item.id or uuid.uuid4().hex[:12]
        now = _time.time()
        when = item.time if item.time is not None else now
        tags = tuple(dict.fromkeys(t.strip() for t in item.tags if t.strip()))
        values = (mem_id, item.text, normalise(item.text), when, item.session, item.source, json.dumps(tags), now,
                  vec.tobytes() if vec is not None else None, self.embedder.name if vec is not None else None,
                  *_read(item.text), pieces)
        signed = (", sig", ", ?", (self._sign(mem_id, item.text),)) if self.SIGNED else ("", "", ())
        cur = self._db.execute(
            "INSERT INTO memories(id, text, norm, time, session, source, tags, created, embedding, model, terms, "
            f"asks, timed, tokens{signed[0]}) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?{signed[1]})",
            (*values, *signed[2]),
        )
        row = int(cur.lastrowid or 0)
        self._db.executemany("INSERT INTO memory_tags(tag, row) VALUES (?, ?)", [(t, row) for t in tags])
        graph.link(self._db, row, item.text, item.facts)
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
        with self._transaction():
            cur = self._db.execute(f"DELETE FROM memories {where_clause(where)}", args)
            graph.prune(self._db)
        return cur.rowcount

    # ------------------------------------------------------------------ reading

    def get(self, id: str) -> Memory | None:
        """The memory with this id, if stored."""
        row = self._db.execute(f"SELECT {COLUMNS} FROM memories WHERE id = ?", (id,)).fetchone()
        return from_row(row) if row else None

    def get_row(self, row: int) -> Memory | None:
        """The memory in this internal row."""
        found = self._db.execute(f"SELECT {COLUMNS} FROM memories WHERE row = ?", (row,)).fetchone()
        return from_row(found) if found else None

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
        return [from_row(r) for r in self._db.execute(sql, [*args, limit, offset])]

    def search(
        self, query: str, k: int = 10, *, session: str | None = None, source: str | None = None,
        tags: Sequence[str] = (), since: float | None = None, until: float | None = None, signed_only: bool = False,
    ) -> list[Memory]:
        """The `k` memories best matching `query`, best first, among those passing the filters (and, with
        `signed_only`, among those the user's own runs wrote: see memory/signing.py)."""
        where, args = filters(session=session, source=source, tags=tags, since=since, until=until)
        allowed = None
        if where:
            allowed = {r for (r,) in self._db.execute(f"SELECT row FROM memories {where_clause(where)}", args)}
        if signed_only:
            signed = self.signed_rows()
            allowed = signed if allowed is None else allowed & signed
            if not allowed:
                return []
        with self._lock:
            index = self._current_index()
        # The query is embedded in another thread while SQLite runs BM25 here: both release the GIL.
        encoded: Future[tuple[Any, list[bytes] | None]] | None = None
        if self.embedder is not None and index.matrix is not None and query.strip():
            encoded = _encoder_pool().submit(self._encode_query, query)
        analysed = Query.analyse(query, graph.named_in(self._db, query))
        bm25 = self._bm25(analysed.terms, allowed)
        vector, pieces = encoded.result() if encoded is not None else (None, None)
        dense = candidates.dense(vector, index, allowed, self.params.candidates) if vector is not None else {}
        matches = None
        if pieces is not None:
            assert self.embedder is not None
            matches = functools.partial(candidates.token_matches, self._db, self.embedder.dim, pieces)
        final = score(analysed, bm25, dense, index, self.params, allowed, matches)
        ranked = sorted(((v, r) for r, v in final.items()), key=lambda x: (-x[0], x[1]))[:k]
        marks = ",".join("?" * len(ranked))
        rows = {r[0]: r for r in self._db.execute(f"SELECT {COLUMNS} FROM memories WHERE row IN ({marks})",
                                                   [r for _, r in ranked])}
        return [replace(from_row(rows[r]), score=round(v, 6)) for v, r in ranked if r in rows]

    def graph(self, name: str, limit: int = 50) -> EntityView | None:
        """What is linked to the entity called `name` (any case): the memories naming it, its relations and
        the entities named alongside it; None when no memory names it."""
        return graph.describe(self._db, name, limit)

    def touch(self, ids: Sequence[str]) -> None:
        """Note that these memories were recalled now (`forget(unused_since=...)` spares them)."""
        if ids:
            with self._lock:
                # No index rebuild: last_used plays no part in ranking.
                self._db.execute(f"UPDATE memories SET last_used = ?, hits = hits + 1 WHERE id IN "
                                 f"({','.join('?' * len(ids))})", [_time.time(), *ids])

    def _encode_query(self, query: str) -> tuple[Any, Any]:
        assert self.embedder is not None
        if not self._pieces:
            return self.embedder.encode([query])[0], None
        vectors, pieces = self.embedder.encode_tokens([query])  # type: ignore[attr-defined]
        return vectors[0], pieces[0]

    def _bm25(self, words: list[str], allowed: set[int] | None) -> dict[int, float]:
        # A method, not a call of candidates.bm25 in search(): PostgresMemoryStore has its own full-text index.
        return candidates.bm25(self._db, words, allowed, self.params.candidates)

    def _backfill(self) -> None:
        """Give memories what they lack: terms, cues and links (stored by an older version), vectors (stored
        without embeddings or by another model), piece vectors. Each chunk is read inside its own write
        transaction, so two processes opening one old store do not both fill the same rows."""
        while True:
            with self._transaction():
                unread = self._db.execute("SELECT row, text FROM memories WHERE terms IS NULL LIMIT 1000").fetchall()
                self._db.executemany("UPDATE memories SET terms = ?, asks = ?, timed = ? WHERE row = ?",
                                     [(*_read(text), row) for row, text in unread])
                if unread:
                    graph.unlink(self._db, [row for row, _ in unread])
                for row, text in unread:
                    graph.link(self._db, row, text)
            if not unread:
                break
        if self.embedder is None:
            return
        lacking = "embedding IS NULL OR model IS NOT ?" + (" OR tokens IS NULL" if self._pieces else "")
        while True:
            chunk = self._db.execute(f"SELECT row, text FROM memories WHERE {lacking} LIMIT ?",
                                     (self.embedder.name, _CHUNK)).fetchall()
            if not chunk:
                return
            vectors, pieces = self._encode([text for _, text in chunk])
            blobs = pieces if pieces is not None else [None] * len(chunk)
            updates = [(v.tobytes(), self.embedder.name, p, row)
                       for v, p, (row, _) in zip(vectors, blobs, chunk, strict=True)]
            with self._transaction():
                self._db.executemany("UPDATE memories SET embedding = ?, model = ?, tokens = ? WHERE row = ?", updates)

    # ------------------------------------------------------------------ signatures

    def _sign(self, mem_id: str, text: str) -> str:
        from .signing import memory_key, signature

        return signature(memory_key(self._env), self.path.resolve(), mem_id, text)

    def signed_rows(self) -> set[int]:
        """The rows the user's own runs wrote here (their signature verifies for this store's path)."""
        from .signing import verified_rows

        return verified_rows(self)

    def _current_index(self) -> Index:
        # data_version changes when another connection commits; _writes when this one does.
        version = (self._db.execute("PRAGMA data_version").fetchone()[0], self._writes)
        if self._index is None or version != self._index_version:
            self._backfill()
            version = (self._db.execute("PRAGMA data_version").fetchone()[0], self._writes)
            self._index = Index(self._db, with_vectors=self.embedder is not None)
            self._index_version = version
        return self._index


def _read(text: str) -> tuple[str, float, int]:
    """What the store derives from a memory's text for search: its terms, question share, whether it tells a
    time."""
    return " ".join(terms(text)), question_share(text), int(states_time(text))


@functools.cache
def _encoder_pool() -> ThreadPoolExecutor:
    return ThreadPoolExecutor(max_workers=1, thread_name_prefix="shou-memory-embed")


def recall(store: MemoryStore, query: str, k: int = 5) -> list[Memory]:
    """The memories to put before a run: the `k` best for `query`, marked as used."""
    # A workspace's file may come from anyone: only what the user's own runs wrote is recalled. (A
    # PostgreSQL store is the operator's database, not a workspace file.)
    found = store.search(query, k, signed_only=store.SIGNED)
    store.touch([m.id for m in found])
    return found
