"""Long-term memory in PostgreSQL, for several processes (replicas) sharing one store.

```python
from shou.memory.postgres import PostgresMemoryStore

with PostgresMemoryStore("postgresql://shou@db/shou") as store:
    store.add("The user prefers tabs over spaces", tags=["preference"])
    print(store.search("how should I indent?", k=3))
```

`PostgresMemoryStore` is the SQLite `MemoryStore` (memory/store.py) on another database: the same methods,
duplicate rules and ranking (memory/ranking.py), run by the same code over `pg_schema.PgConnection`. What
differs is underneath:

- BM25 runs in PostgreSQL over a GIN-indexed `tsvector` of the memory's terms, with SQLite FTS5's formula
  (k1 1.2, b 0.75, idf floored at 1e-6), so keyword scores match the SQLite store's;
- vectors are float32 `bytea` columns, scored in the process with numpy like the SQLite store's (no pgvector);
- a write transaction holds an advisory lock (writers take turns, as SQLite's do, so two replicas saving one
  fact store one copy) and bumps a version that every search compares with its index's: a memory one replica
  adds, or forgets, is seen by the next search of every other.

psycopg 3 is imported when a store opens, so shou works without it.
"""

from __future__ import annotations

import contextlib
import re
import sqlite3
import threading
from collections.abc import Iterator
from typing import cast

from .embeddings import Embedder, default_embedder
from .index import Index
from .pg_schema import WRITE_LOCK, PgConnection, migrate
from .ranking import RankParams
from .store import MemoryStore

__all__ = ["PostgresMemoryStore", "is_postgres_url"]

# SQLite FTS5's bm25() constants, so both stores rank keywords alike.
_K1 = 1.2
_B = 0.75
_IDF_FLOOR = 1e-6

# BM25 of the memories matching any query term. Parameters: the terms as a tsquery ('a' | 'b'), the terms
# as text, the number of memories and their mean size (from the index's snapshot), then the limit.
_BM25 = f"""
WITH hits AS (
    SELECT m.row, m.size, u.lexeme, cardinality(u.positions) AS tf
    FROM shou_memory_items m CROSS JOIN LATERAL unnest(m.fts) u
    WHERE m.fts @@ to_tsquery('simple', ?) AND u.lexeme = ANY(tsvector_to_array(to_tsvector('simple', ?)))
), df AS (SELECT lexeme, count(*) AS n FROM hits GROUP BY lexeme)
SELECT h.row, sum(
    greatest(ln((greatest(?::float8 - df.n, 0) + 0.5) / (df.n + 0.5)), {_IDF_FLOOR})
    * h.tf * {_K1 + 1} / (h.tf + {_K1} * ({1 - _B} + {_B} * h.size / ?::float8)))
FROM hits h JOIN df USING (lexeme) {{where}}
GROUP BY h.row ORDER BY 2 DESC, 1 LIMIT ?
"""


def is_postgres_url(value: object) -> bool:
    """Whether a `memory_store` setting names a PostgreSQL database rather than a file."""
    return isinstance(value, str) and value.startswith(("postgresql://", "postgres://"))


class PostgresMemoryStore(MemoryStore):
    """Long-term memories in the PostgreSQL database at `url` (a libpq URL), tables created on first use.

    `embeddings`, `near_duplicate` and `params` are `MemoryStore`'s. One connection, used under the store's
    lock; share a store between the threads of a process, open one per process.
    """

    SIGNED = False  # the operator's database, not a file a repository can ship: nothing to sign

    def __init__(
        self, url: str, *, embeddings: bool | Embedder = True, near_duplicate: float | None = 0.97,
        params: RankParams | None = None,
    ) -> None:
        # MemoryStore.__init__ opens a SQLite file; this sets what its methods use instead.
        self.url = url
        self.embedder: Embedder | None = (
            (default_embedder() if embeddings else None) if isinstance(embeddings, bool) else embeddings
        )
        self.near_duplicate = near_duplicate
        self.params = params or RankParams()
        self._lock = threading.RLock()
        self._index: Index | None = None
        self._index_version: tuple[int, int] = (-1, -1)
        self._sizes: tuple[int, float] = (0, 0.0)  # memories and their mean number of terms, for BM25
        self._pg = PgConnection(url, self._lock)
        # The inherited methods, graph.py and index.py issue sqlite3-style SQL: PgConnection runs it.
        self._db = cast(sqlite3.Connection, self._pg)
        try:
            migrate(self._pg.conn)
        except BaseException:
            self._pg.close()
            raise

    @property
    def path(self) -> str:  # type: ignore[override]  # where it is, for messages: the URL without a password
        """The database's URL, password masked."""
        return re.sub(r"(?i)(password=)[^&]*", r"\1***", re.sub(r"(://[^:/@?]*:)[^@/?]*@", r"\1***@", self.url))

    def close(self) -> None:
        """Close the connection."""
        self._pg.close()

    def __enter__(self) -> PostgresMemoryStore:
        return self

    @contextlib.contextmanager
    def _transaction(self) -> Iterator[None]:
        with self._pg.transaction():
            self._db.execute("SELECT pg_advisory_xact_lock(?)", (WRITE_LOCK,))
            yield
            # Tell the other replicas (and this one) to reload; a transaction that wrote nothing does not.
            self._db.execute("UPDATE shou_memory_state SET version = version + 1 "
                             "WHERE txid_current_if_assigned() IS NOT NULL")

    def _version(self) -> int:
        return int(self._db.execute("SELECT version FROM shou_memory_state").fetchone()[0])

    def _current_index(self) -> Index:
        with self._lock:
            if self._index is None or self._index_version != (self._version(), 0):
                self._backfill()
                with self._pg.transaction(snapshot=True):  # the version, index and sizes of one moment
                    version = self._version()
                    index = Index(self._db, with_vectors=self.embedder is not None)
                    count, mean = self._db.execute("SELECT count(*), coalesce(avg(size), 0) FROM memories").fetchone()
                self._index, self._index_version, self._sizes = index, (version, 0), (int(count), float(mean))
            return self._index

    def _bm25(self, words: list[str], allowed: set[int] | None) -> dict[int, float]:
        if not words or (allowed is not None and not allowed):
            return {}
        count, mean = self._sizes
        query = " | ".join("'" + w.replace("\\", "\\\\").replace("'", "''") + "'" for w in words)
        args: list[object] = [query, " ".join(words), count, mean or 1.0]
        where = ""
        if allowed is not None:
            where = "WHERE h.row = ANY(?)"
            args.append(sorted(allowed))
        found = self._db.execute(_BM25.format(where=where), [*args, self.params.candidates]).fetchall()
        # A memory committed after the index was built waits for the next search (it has no neighbours yet).
        known = self._index.times if self._index is not None else {}
        return {int(r): float(s) for r, s in found if r in known}
