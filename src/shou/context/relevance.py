"""Scoring older messages and tools against the current step: BM25, plus embeddings when installed.

No model call per message: one BM25 pass over the candidates (and, with the `memory` extra, one batch of
embeddings), fused by reciprocal rank. The candidate sets are small (a session's older turns, a tool
list), so a compact in-process BM25 beats building an index.
"""

from __future__ import annotations

import math
import re
from collections import Counter
from collections.abc import Callable, Sequence

from ..tools.base import Tool

_WORD = re.compile(r"[A-Za-z0-9_]+|[\u2e80-\u9fff\uac00-\ud7af]")  # words; CJK one character a token
STOP = frozenset(
    [
        "a",
        "an",
        "and",
        "are",
        "as",
        "at",
        "be",
        "but",
        "by",
        "for",
        "from",
        "has",
        "have",
        "i",
        "in",
        "is",
        "it",
        "its",
        "me",
        "my",
        "of",
        "on",
        "or",
        "our",
        "so",
        "that",
        "the",
        "their",
        "them",
        "then",
        "there",
        "this",
        "to",
        "was",
        "we",
        "were",
        "what",
        "when",
        "where",
        "which",
        "who",
        "will",
        "with",
        "you",
        "your",
    ]
)


def tokenize(text: str) -> list[str]:
    """Lower-cased words without stop words; a crude plural strip so 'files' finds 'file'."""
    out = []
    for w in _WORD.findall(text.lower()):
        if w in STOP:
            continue
        if len(w) > 3 and w.endswith("s") and not w.endswith("ss"):
            w = w[:-1]
        out.append(w)
    return out


def bm25_scores(query: str, documents: Sequence[str], k1: float = 1.2, b: float = 0.75) -> list[float]:
    """BM25 score of each document for `query` (0 when no query word occurs)."""
    q = set(tokenize(query))
    if not q or not documents:
        return [0.0] * len(documents)
    docs = [tokenize(d) for d in documents]
    n = len(docs)
    avg = sum(len(d) for d in docs) / n or 1.0
    df = Counter(w for d in docs for w in set(d) if w in q)
    scores = []
    for d in docs:
        tf = Counter(w for w in d if w in q)
        s = 0.0
        for w, f in tf.items():
            idf = math.log(1 + (n - df[w] + 0.5) / (df[w] + 0.5))
            s += idf * f * (k1 + 1) / (f + k1 * (1 - b + b * len(d) / avg))
        scores.append(s)
    return scores


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


def rank(query: str, documents: Sequence[str], embed: Embedder | None = None, k: int = 60) -> list[float]:
    """Relevance of each document: BM25, fused with embedding similarity by reciprocal rank when `embed`
    is given. Documents with no lexical or semantic signal score 0."""
    lexical = bm25_scores(query, documents)
    if embed is None or not documents:
        return lexical
    vectors = embed([query, *documents])
    qv = vectors[0]
    dense = [sum(a * b for a, b in zip(qv, v, strict=False)) for v in vectors[1:]]
    fused = [0.0] * len(documents)
    for scores in (lexical, dense):
        order = sorted(range(len(documents)), key=lambda i: -scores[i])
        for r, i in enumerate(order):
            if scores[i] > 0:
                fused[i] += 1.0 / (k + r + 1)
    return fused


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
