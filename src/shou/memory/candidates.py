"""A search's first stage: the memories worth ranking, by BM25 over the FTS5 index, by cosine over the
in-memory vectors, and (for the best of those) by MaxSim over their word-piece vectors. memory/ranking.py
combines the three into the final order."""

from __future__ import annotations

import sqlite3
from typing import Any

from ..ranking import fts_query
from . import maxsim
from .index import Index

__all__ = ["bm25", "dense", "token_matches"]


def bm25(db: sqlite3.Connection, words: list[str], allowed: set[int] | None, candidates: int) -> dict[int, float]:
    """BM25 scores (higher is better) of up to `candidates` rows matching `words`, among `allowed`."""
    if not words:
        return {}
    # bm25() is lower-is-better (negative); negate it so every score is higher-is-better.
    rows = db.execute(
        "SELECT rowid, -bm25(memory_terms) FROM memory_terms WHERE memory_terms MATCH ? ORDER BY rank LIMIT ?",
        (fts_query(words), candidates if allowed is None else 10 * candidates),
    ).fetchall()
    return {r: s for r, s in rows if allowed is None or r in allowed}


def dense(vector: Any, index: Index, allowed: set[int] | None, candidates: int) -> dict[int, float]:
    """Cosines of the `candidates` rows nearest `vector` (unit length), among `allowed`."""
    import numpy as np

    if index.matrix is None:
        return {}
    sims = index.matrix @ vector
    if allowed is not None:
        mask = np.fromiter((r in allowed for r in index.rows), dtype=bool, count=len(index.rows))
        sims = np.where(mask, sims, -1.0)
    n = min(candidates, len(sims))
    top = np.argpartition(-sims, n - 1)[:n]
    return {index.rows[i]: float(sims[i]) for i in top if sims[i] > -1.0}


def token_matches(db: sqlite3.Connection, dim: int, query: Any, best: list[int]) -> dict[int, float]:
    """Token-match scores of these rows (those that have piece vectors) against the query's pieces."""
    if not best or len(query) == 0:
        return {}
    marks = ",".join("?" * len(best))
    found = db.execute(f"SELECT row, tokens FROM memories WHERE row IN ({marks}) AND tokens IS NOT NULL",
                       best).fetchall()
    values = maxsim.match(query, [blob for _, blob in found], dim)
    return {row: value for (row, _), value in zip(found, values, strict=True)}
