"""How memories are ranked: query analysis for BM25, weighted score fusion and neighbour propagation.

Pure functions over plain dicts, so the store's SQL stays separate from the method and the benchmark
can measure exactly what every user gets.

The score of a memory is

    own(m)   = w_bm25 * bm25(m) / max bm25  +  w_dense * clip((cos(m) - floor) / (max cos - floor), 0, 1)
    score(m) = own(m) + neighbour_weight * sum over d = 1..window of decay^(d-1) * max own(n at distance d)

where the memories at distance 1 are those just before and after m in the same session (in time
order), at distance 2 the ones beyond those, and so on. In a conversation the words of a question often
sit in the turns around the answer ("what did you research?" / "adoption agencies"), so a turn whose
neighbours match is more likely the one wanted. Scores are
normalised per query (divided by the best) because raw BM25 and cosine live on different scales, and
weighted sums of normalised scores kept more of the strong BM25 signal than reciprocal-rank fusion did.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass

__all__ = ["STOP_WORDS", "RankParams", "fts_query", "fuse", "query_terms"]

# Function words and question words: a question asks "what did X do", and matching "what" or "did"
# only adds noise to an OR query. Kept short on purpose: content words are never dropped.
_STOP_TEXT = """
a about above after again against all am an and any are as at be because been before being below between
both but by can could did do does doing down during each few for from further had has have having he her
here hers herself him himself his how i if in into is it its itself just let like ll me might more most
much my myself no nor not now of off on once only or other our ours ourselves out over own re s same
shall she should so some such t than that the their theirs them themselves then there these they this
those through to too under until up upon us ve very was we were what when where which while who whom
whose why will with would yet you your yours yourself yourselves kind sort type ever also
"""
STOP_WORDS = frozenset(_STOP_TEXT.split())

_WORD_RE = re.compile(r"[^\W_]+(?:'[^\W_]+)?", re.UNICODE)


@dataclass(frozen=True, slots=True)
class RankParams:
    """The weights of the ranking; the defaults were chosen on the LoCoMo development split."""

    w_bm25: float = 1.0
    w_dense: float = 0.6
    dense_floor: float = 0.2
    neighbour_weight: float = 0.4
    neighbour_window: int = 2
    neighbour_decay: float = 0.5
    candidates: int = 200


def query_terms(query: str) -> list[str]:
    """The distinct content words of `query`, lowercased, in order (stop words and possessives dropped)."""
    seen: dict[str, None] = {}
    for word in _WORD_RE.findall(query.lower().replace("\u2019", "'")):
        if word.endswith("n't"):
            continue  # didn't, won't, can't: negated auxiliaries, all function words
        word = word.removesuffix("'s")
        if "'" in word:  # I'll, you're, we've: the part before the apostrophe
            word = word.split("'", 1)[0]
        if word and word not in STOP_WORDS:
            seen.setdefault(word, None)
    return list(seen)


def fts_query(terms: list[str]) -> str:
    """An FTS5 MATCH expression that ORs the terms; each is quoted, so no term is read as syntax."""
    return " OR ".join('"' + t.replace('"', '""') + '"' for t in terms)


def fuse(
    bm25: Mapping[int, float], dense: Mapping[int, float], neighbours: Mapping[int, tuple[int, ...]],
    params: RankParams,
) -> dict[int, float]:
    """Combine BM25 scores (higher is better) and cosines by memory row into final scores.

    `neighbours` gives, for every row in `bm25` or `dense`, the rows next to it in its session; a row
    only reached through a neighbour gets a score too.
    """
    own: dict[int, float] = {}
    top_bm25 = max(bm25.values(), default=0.0)
    if top_bm25 > 0:
        for row, s in bm25.items():
            own[row] = params.w_bm25 * s / top_bm25
    top_cos = max(dense.values(), default=0.0)
    if dense and top_cos > params.dense_floor:
        span = top_cos - params.dense_floor
        for row, c in dense.items():
            part = (c - params.dense_floor) / span
            if part > 0:
                own[row] = own.get(row, 0.0) + params.w_dense * part
    if params.neighbour_weight <= 0 or params.neighbour_window < 1:
        return own
    # Only the best own scores (and the rows around them) are worth propagating: a row outside them
    # cannot climb into the results, and walking every weak match would cost most of a query.
    pool = sorted(own, key=own.__getitem__, reverse=True)[: params.candidates]
    final = dict(own)
    for row in _within(pool, neighbours, params.neighbour_window):
        near, weight = 0.0, params.neighbour_weight
        for ring in _rings(row, neighbours, params.neighbour_window):
            near += weight * max((own.get(n, 0.0) for n in ring), default=0.0)
            weight *= params.neighbour_decay
        final[row] = own.get(row, 0.0) + near
    return final


def _within(rows: list[int], neighbours: Mapping[int, tuple[int, ...]], steps: int) -> set[int]:
    """`rows` and every row at most `steps` neighbour links away from one of them."""
    reached = set(rows)
    frontier = set(rows)
    for _ in range(steps):
        frontier = {n for r in frontier for n in neighbours.get(r, ())} - reached
        reached |= frontier
    return reached


def _rings(row: int, neighbours: Mapping[int, tuple[int, ...]], steps: int) -> list[set[int]]:
    """The rows exactly 1, 2, ... `steps` links from `row` (both sides of it in a conversation)."""
    seen = {row}
    ring = {row}
    rings: list[set[int]] = []
    for _ in range(steps):
        ring = {n for r in ring for n in neighbours.get(r, ())} - seen
        if not ring:
            break
        seen |= ring
        rings.append(ring)
    return rings
