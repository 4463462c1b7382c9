"""Text ranking shared by long-term memory and the context window: one tokeniser, one stop-word list,
BM25 and one way to fuse scores.

`terms` turns text into the search terms everything is matched on: lowercased words, stop words dropped,
English words stemmed (Snowball), CJK characters one term each. The memory store indexes these very terms
in SQLite FTS5, and `bm25_scores` ranks small in-process collections (older messages, tool lists) with
them, so a word matches the same way everywhere.

`fuse` combines signals that live on different scales (BM25, cosine similarity) by rescaling each to
[0, 1] over the query's candidates, between a floor and the best score, and adding them with weights.
Weighted sums of normalised scores kept more of a strong BM25 match than reciprocal-rank fusion, which
only sees positions (bench/README.md, LoCoMo).
"""

from __future__ import annotations

import functools
import math
import re
from collections import Counter
from collections.abc import Hashable, Mapping, Sequence
from dataclasses import dataclass
from typing import Generic, TypeVar

__all__ = [
    "DENSE_FLOOR", "DENSE_WEIGHT", "STOP_WORDS", "Signal", "bm25_scores", "fts_query", "fuse", "query_terms", "terms",
]

K = TypeVar("K", bound=Hashable)

# Function words and question words: a question asks "what did X do", and matching "what" or "did" only
# adds noise. Content words are never in it.
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

# How much similarity in meaning adds to a BM25 match (whose best is 1 after `fuse`), and the cosine below
# which it adds nothing: unrelated sentences reach about 0.2 with MiniLM.
DENSE_WEIGHT = 0.6
DENSE_FLOOR = 0.2

# A word (letters and digits, an inner apostrophe allowed: "don't", "Alice's") or one CJK character,
# since CJK text has no spaces to split on and a character is a reasonable unit for BM25.
_CJK = "\u2e80-\u9fff\uac00-\ud7af\uf900-\ufaff"


@functools.cache
def _word_re() -> re.Pattern[str]:
    # Compiled on first use: ~5 ms, which a run that never ranks anything (no memories, few tools) would pay.
    return re.compile(rf"[{_CJK}]|(?:(?![{_CJK}])[^\W_])+(?:'(?:(?![{_CJK}])[^\W_])+)?", re.UNICODE)


@functools.cache
def _stemmer() -> object:
    import snowballstemmer

    return snowballstemmer.stemmer("english")


@functools.lru_cache(maxsize=65536)
def _stem(word: str) -> str:
    # Only plain ASCII words go through the English stemmer; it would mangle other languages.
    if word.isascii() and word.isalpha() and len(word) > 2:
        return str(_stemmer().stemWord(word))  # type: ignore[attr-defined]
    return word


def terms(text: str) -> list[str]:
    """The search terms of `text`, in order and with repeats: lowercase, stop words out, stemmed.

    "Alice's books" -> ["alic", "book"]; "didn't", "won't" (negated auxiliaries) are function words;
    "I'll", "we've" keep the part before the apostrophe.
    """
    out: list[str] = []
    for word in _word_re().findall(text.lower().replace("\u2019", "'")):
        if "'" in word:
            if word.endswith("n't"):
                continue
            word = word.removesuffix("'s").split("'", 1)[0]
        if word and word not in STOP_WORDS:
            out.append(_stem(word))
    return out


def query_terms(text: str) -> list[str]:
    """The distinct terms of `text`, in order of first appearance."""
    return list(dict.fromkeys(terms(text)))


def fts_query(words: Sequence[str]) -> str:
    """An FTS5 MATCH expression ORing the terms; each is quoted, so none is read as query syntax."""
    return " OR ".join('"' + w.replace('"', '""') + '"' for w in words)


def bm25_scores(query: str, documents: Sequence[str], k1: float = 1.2, b: float = 0.75) -> list[float]:
    """BM25 score of each document for `query` (0 when no query term occurs), for small collections.

    k1 and b are FTS5's; the idf is log(1 + (N - n + 0.5) / (n + 0.5)), which stays positive for a term in
    most of a handful of documents (FTS5's, without the 1 +, falls to nearly 0 there).
    """
    wanted = set(terms(query))
    if not wanted or not documents:
        return [0.0] * len(documents)
    docs = [terms(d) for d in documents]
    n = len(docs)
    avg = sum(len(d) for d in docs) / n or 1.0
    df = Counter(w for d in docs for w in set(d) if w in wanted)
    scores = []
    for d in docs:
        score = 0.0
        for w, f in Counter(w for w in d if w in wanted).items():
            idf = math.log(1 + (n - df[w] + 0.5) / (df[w] + 0.5))
            score += idf * f * (k1 + 1) / (f + k1 * (1 - b + b * len(d) / avg))
        scores.append(score)
    return scores


@dataclass(frozen=True, slots=True)
class Signal(Generic[K]):
    """One ranking signal: scores by candidate (higher is better), its weight, and the score below which a
    candidate gets nothing from it (a cosine of 0.2 between unrelated sentences is not evidence)."""

    scores: Mapping[K, float]
    weight: float = 1.0
    floor: float = 0.0


def fuse(*signals: Signal[K]) -> dict[K, float]:
    """Sum of each signal rescaled to [0, 1] between its floor and its best score, times its weight.

    A candidate that no signal lifts above its floor is left out.
    """
    fused: dict[K, float] = {}
    for signal in signals:
        top = max(signal.scores.values(), default=0.0)
        if signal.weight <= 0 or top <= signal.floor:
            continue
        span = top - signal.floor
        for key, score in signal.scores.items():
            part = (score - signal.floor) / span
            if part > 0:
                fused[key] = fused.get(key, 0.0) + signal.weight * part
    return fused
