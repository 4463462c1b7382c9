"""How memories are ranked for a query: pure functions over scores by memory row and the store's `Index`.

1. **Own score**: BM25 and cosine similarity fused (`shou.ranking.fuse`), times (1 - q·share of the memory
   that is questions): a turn that only asks ("What inspired you?") holds no answer.
2. **Neighbours**: plus a share of the best own score at each distance in the memory's chain (its
   session, or its episode when it has none): in a conversation the words of a question often sit in the
   turns around the answer ("what did you research?" / "adoption agencies"). An episode (memories without
   a session, chained by time) only lifts memories that match the query themselves.
3. **Time**: when the query asks when (how long, what year), memories that state a time ("yesterday",
   "last May", "two years ago") count more; when it names a period ("in June", "2022", "last week"),
   memories from that period do.
4. **Token matching** (with embeddings): the best candidates are reordered in part by how well each word
   of the query finds a close word in the memory (late interaction over MiniLM's token vectors), which
   finds "novels" for "books" where one vector per sentence blurs them.
5. **Linked facts**: when the query names a specific entity (one few memories name), the best matches
   that name it lift the memories of the other rare entities they name to just below themselves: "Alice
   started at Quillon Labs" lifts "Quillon Labs has its only office in Lyon" for "Which city does Alice
   work in?", which shares no word with it.

Each step is there for a reason that holds beyond one benchmark; the weights are round numbers, and
bench/README.md shows each step's effect on LoCoMo's development conversations.
"""

from __future__ import annotations

from collections.abc import Callable, Container, Iterable, Mapping
from dataclasses import dataclass, field

from ..ranking import DENSE_FLOOR, DENSE_WEIGHT, Signal, fuse, query_terms
from .cues import Period, asks_when, named_periods
from .index import Index

__all__ = ["Query", "RankParams", "rerank_by_tokens", "score"]


@dataclass(frozen=True, slots=True)
class RankParams:
    """The ranking's weights (see the module docstring for what each step does)."""

    w_bm25: float = 1.0
    w_dense: float = DENSE_WEIGHT
    dense_floor: float = DENSE_FLOOR
    question_weight: float = 0.5
    neighbour_weight: float = 0.4
    neighbour_window: int = 2
    neighbour_decay: float = 0.5
    time_weight: float = 0.3
    period_weight: float = 0.3
    hop_weight: float = 0.9
    hop_seeds: int = 5
    anchor_share: float = 0.1  # a query entity anchors a hop when at most this share of memories name it
    link_share: float = 0.02  # a hop follows entities at most this share of memories name
    token_weight: float = 0.3
    token_candidates: int = 100
    candidates: int = 200


@dataclass(frozen=True, slots=True)
class Query:
    """A query, analysed once: its terms, whether it asks when, the periods and stored entities it names."""

    text: str
    terms: list[str]
    asks_when: bool
    periods: list[Period]
    entities: frozenset[int] = field(default_factory=frozenset)

    @classmethod
    def analyse(cls, text: str, entities: Iterable[int] = (), now: float | None = None) -> Query:
        """Read `text`; `entities` are the ids of the stored entities it names (graph.named_in)."""
        return cls(text, query_terms(text), asks_when(text), named_periods(text, now), frozenset(entities))


def score(
    query: Query, bm25: Mapping[int, float], dense: Mapping[int, float], index: Index, params: RankParams,
    allowed: Container[int] | None = None, token_matches: Callable[[list[int]], Mapping[int, float]] | None = None,
) -> dict[int, float]:
    """Final scores by memory row; rows with no signal, or not `allowed`, are absent. `token_matches` gives
    the token-match scores of the rows it is asked about (step 5; without it, no token step)."""
    own = fuse(Signal(bm25, params.w_bm25), Signal(dense, params.w_dense, params.dense_floor))
    # Only the best own scores (and the rows around them) can climb into the results.
    pool = sorted(own, key=own.__getitem__, reverse=True)[: params.candidates]
    rows = _within(pool, index.neighbours, params.neighbour_window) if params.neighbour_weight > 0 else set(pool)
    final: dict[int, float] = {}
    for row in rows:
        if row in index.episodic and row not in own:
            # Notes saved close together may or may not belong together: an episode lifts a memory that
            # matches in its own right, but does not bring in one that does not match at all.
            continue
        near, weight = 0.0, params.neighbour_weight
        if weight > 0:
            for ring in _rings(row, index.neighbours, params.neighbour_window):
                near += weight * max((own.get(n, 0.0) for n in ring), default=0.0)
                weight *= params.neighbour_decay
        value = own.get(row, 0.0) * (1 - params.question_weight * index.asks.get(row, 0.0)) + near
        if query.asks_when and row in index.timed:
            value *= 1 + params.time_weight
        if query.periods and any(index.times[row] in p for p in query.periods):
            value *= 1 + params.period_weight
        if value > 0 and (allowed is None or row in allowed):
            final[row] = value
    if token_matches is not None and params.token_weight > 0:
        best = sorted(final, key=final.__getitem__, reverse=True)[: params.token_candidates]
        rerank_by_tokens(final, token_matches(best), params)
    # Last, so that a linked fact ends just below the memory that links it, whatever the steps before did.
    _hop(query, final, index, params, allowed)
    return final


def _hop(query: Query, final: dict[int, float], index: Index, params: RankParams,
         allowed: Container[int] | None) -> None:
    """Step 5, in place."""
    if params.hop_weight <= 0 or not query.entities:
        return
    anchor_cap = max(5, params.anchor_share * index.size)
    anchors = {e for e in query.entities if 0 < index.mentions(e) <= anchor_cap}
    if not anchors:
        return
    link_cap = max(3, params.link_share * index.size)
    lifted: dict[int, float] = {}
    seeds = [r for r in sorted(final, key=final.__getitem__, reverse=True)[: 4 * params.hop_seeds]
             if anchors & set(index.entities_of.get(r, ()))][: params.hop_seeds]
    for seed in seeds:
        share = params.hop_weight * final[seed]
        for entity in index.entities_of.get(seed, ()):
            if entity in query.entities or index.mentions(entity) > link_cap:
                continue
            for row in index.rows_of[entity]:
                if row != seed and share > lifted.get(row, 0.0) and (allowed is None or row in allowed):
                    lifted[row] = share
    for row, share in lifted.items():
        # At least, not plus: a linked fact ranks just below the memory that links it, never above it.
        final[row] = max(final.get(row, 0.0), share)


def rerank_by_tokens(final: dict[int, float], matches: Mapping[int, float], params: RankParams) -> None:
    """Step 4, in place: `matches` are the token-match scores (mean over query words of the best cosine with
    a word of the memory) of the best `token_candidates` rows, rescaled over them and added with weight
    `token_weight` relative to the best score."""
    if not matches or params.token_weight <= 0:
        return
    low, high = min(matches.values()), max(matches.values())
    if high <= low:
        return
    top = max(final[r] for r in matches)
    for row, value in matches.items():
        final[row] += params.token_weight * top * (value - low) / (high - low)


def _within(rows: list[int], neighbours: Mapping[int, tuple[int, ...]], steps: int) -> set[int]:
    """`rows` and every row at most `steps` neighbour links away from one of them."""
    reached = set(rows)
    frontier = set(rows)
    for _ in range(steps):
        frontier = {n for r in frontier for n in neighbours.get(r, ())} - reached
        reached |= frontier
    return reached


def _rings(row: int, neighbours: Mapping[int, tuple[int, ...]], steps: int) -> list[set[int]]:
    """The rows exactly 1, 2, ... `steps` links from `row` (both sides of it in a chain)."""
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
