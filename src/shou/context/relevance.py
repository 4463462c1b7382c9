"""Scoring older messages and tools against the current step: BM25, plus embeddings when installed.

No model call per message: one BM25 pass over the candidates (and, with the `memory` extra, one batch of
embeddings), fused as memory search fuses them (`shou.ranking`). The candidate sets are small (a session's
older turns, a tool list), so a compact in-process BM25 beats building an index.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from ..ranking import DENSE_FLOOR, DENSE_WEIGHT, Signal, bm25_scores, fuse
from ..tools.base import Tool

__all__ = ["Embedder", "bm25_scores", "default_embed", "rank", "select_tools"]

Embedder = Callable[[list[str]], list[list[float]]]


def default_embed() -> Embedder | None:
    """MiniLM sentence embeddings when the `memory` extra is installed (loaded on first use), else None."""
    from ..memory.embeddings import default_embedder, memory_status

    if not memory_status()[0]:
        return None

    def embed(texts: list[str]) -> list[list[float]]:
        model = default_embedder()
        return [] if model is None else [list(map(float, row)) for row in model.encode(texts)]

    return embed


def rank(query: str, documents: Sequence[str], embed: Embedder | None = None) -> list[float]:
    """Relevance of each document: BM25, fused with embedding similarity (`ranking.fuse`) when `embed` is
    given. Documents with no lexical or semantic signal score 0."""
    lexical = bm25_scores(query, documents)
    if embed is None or not documents:
        return lexical
    vectors = embed([query, *documents])
    qv = vectors[0]
    dense = [sum(a * b for a, b in zip(qv, v, strict=False)) for v in vectors[1:]]
    fused = fuse(Signal(dict(enumerate(lexical))), Signal(dict(enumerate(dense)), DENSE_WEIGHT, DENSE_FLOOR))
    return [fused.get(i, 0.0) for i in range(len(documents))]


def select_tools(
    tools: Sequence[Tool],
    query: str,
    *,
    max_tools: int = 20,
    core: Sequence[str] = (),
    min_score: float = 0.5,
) -> list[Tool]:
    """With more than `max_tools` tools, the ones relevant to `query` plus the `core` ones.

    A tool passes with a BM25 score of at least `min_score` over its name and description; when none
    passes, every tool is offered (better too many than none).
    """
    if len(tools) <= max_tools:
        return list(tools)
    docs = [f"{t.name.replace('_', ' ')} {t.name} {t.description}" for t in tools]
    scores = bm25_scores(query, docs)
    picked = {t.name for t, s in zip(tools, scores, strict=True) if s >= min_score}
    if not picked:
        return list(tools)
    ranked = sorted((i for i, t in enumerate(tools) if t.name in picked), key=lambda i: -scores[i])
    keep = {tools[i].name for i in ranked[:max_tools]} | set(core)
    return [t for t in tools if t.name in keep]
