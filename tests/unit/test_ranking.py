"""The shared ranking pieces (terms, BM25, fusion), the memory cues and the token-vector packing."""

from __future__ import annotations

import datetime as dt
import sqlite3

import pytest
from hypothesis import given
from hypothesis import strategies as st

from shou.context import relevance
from shou.memory.cues import asks_when, named_periods, question_share, states_time
from shou.memory.schema import same_words
from shou.ranking import STOP_WORDS, Signal, bm25_scores, fts_query, fuse, query_terms, terms


def test_one_tokeniser_for_memory_and_context() -> None:
    # The context window's relevance filter and the memory store rank with the same terms.
    import shou.ranking

    assert relevance.bm25_scores is shou.ranking.bm25_scores and relevance.fuse is shou.ranking.fuse
    assert "stop" not in " ".join(vars(relevance)).lower()  # no second stop-word list
    assert {"the", "what", "did", "you"} <= STOP_WORDS
    assert terms("Running books, Alice's novels") == ["run", "book", "alic", "novel"]
    assert terms("我喜欢北京") == ["我", "喜", "欢", "北", "京"]  # one term per CJK character
    assert terms("café naïve") == ["café", "naïve"]  # not ASCII: not stemmed


def test_bm25_here_ranks_as_sqlite_fts5() -> None:
    """bm25_scores (the context window) and FTS5's bm25() (the memory store) order documents alike: same
    terms, k1 and b; only the idf differs (FTS5's drops to ~0 for a term in half the documents)."""
    docs = ["the cat sat on the mat", "a dog chased the cat around the garden", "birds sing at dawn",
            "cats and dogs and cats again", "the weather is mild", "trains leave at noon", "soup of the day",
            "a long walk by the river", "the dog sleeps"]
    query = "cat dog"
    mine = bm25_scores(query, docs)
    db = sqlite3.connect(":memory:")
    db.execute("CREATE VIRTUAL TABLE t USING fts5(terms, tokenize='unicode61 remove_diacritics 0')")
    db.executemany("INSERT INTO t(rowid, terms) VALUES (?, ?)", [(i, " ".join(terms(d))) for i, d in enumerate(docs)])
    theirs = dict(db.execute("SELECT rowid, -bm25(t) FROM t WHERE t MATCH ?", (fts_query(query_terms(query)),)))
    assert {i for i, v in enumerate(mine) if v > 0} == set(theirs)
    assert sorted(theirs, key=lambda i: -mine[i]) == sorted(theirs, key=lambda i: -theirs[i])


def test_fuse_floors_and_weights() -> None:
    fused = fuse(Signal({"a": 10.0, "b": 5.0}), Signal({"b": 0.9, "c": 0.2, "d": 0.1}, weight=0.5, floor=0.2))
    assert fused == pytest.approx({"a": 1.0, "b": 0.5 + 0.5})
    assert fuse(Signal({"a": 0.1}, floor=0.2)) == {}  # nothing above the floor: no evidence


@given(st.text(max_size=200))
def test_fts_query_never_breaks_fts5(text: str) -> None:
    db = sqlite3.connect(":memory:")
    db.execute("CREATE VIRTUAL TABLE t USING fts5(terms)")
    db.execute("INSERT INTO t(terms) VALUES ('alpha beta')")
    words = query_terms(text)
    if words:
        db.execute("SELECT rowid FROM t WHERE t MATCH ?", (fts_query(words),)).fetchall()


def test_cues() -> None:
    assert asks_when("When did Melanie paint a sunrise?") and asks_when("How long has she lived there?")
    assert not asks_when("What did Melanie paint?")
    assert states_time("(8 May, 2023) Mel: I painted it last year")
    assert not states_time("(8 May, 2023) Mel: I painted a lake")  # the timestamp header is not a cue
    assert question_share("How are you? I'm fine. And you?") == pytest.approx(2 / 3)


def test_named_periods() -> None:
    now = dt.datetime(2026, 11, 30, 12).timestamp()
    june = named_periods("What happened in June?", now)
    assert len(june) == 1 and dt.datetime(2021, 6, 3).timestamp() in june[0]
    assert dt.datetime(2021, 7, 3).timestamp() not in june[0]
    assert named_periods("what may happen", now) == []  # the verb, not the month
    (may,) = named_periods("plans for May 2023", now)
    assert dt.datetime(2023, 5, 9).timestamp() in may and dt.datetime(2024, 5, 9).timestamp() not in may
    (week,) = named_periods("what did I save last week", now)
    assert dt.datetime(2026, 11, 25).timestamp() in week and dt.datetime(2026, 11, 30).timestamp() not in week


def test_same_words_counts_negation() -> None:
    assert same_words("The user likes tea", "the user LIKES tea!")
    assert not same_words("The user likes tea", "The user doesn't like tea")
    assert not same_words("prefers dark mode", "prefers light mode")


def test_token_packing_and_matching() -> None:
    np = pytest.importorskip("numpy")
    from shou.memory.maxsim import match, pack, unpack

    rng = np.random.default_rng(0)
    a = rng.normal(size=(5, 16)).astype(np.float32)
    a /= np.linalg.norm(a, axis=1, keepdims=True)
    assert np.abs(unpack(pack(a), 16) - a).max() < 0.01
    assert unpack(pack(a[:0]), 16).shape == (0, 16)
    b = rng.normal(size=(3, 16)).astype(np.float32)
    b /= np.linalg.norm(b, axis=1, keepdims=True)
    query = np.concatenate([a[:2], b[:1]])
    scores = match(query, [pack(a), b"", pack(b)], 16)
    expected = [float((query @ m.T).max(axis=1).mean()) for m in (a, b)]
    assert scores[0] == pytest.approx(expected[0], abs=0.02) and scores[1] == 0.0
    assert scores[2] == pytest.approx(expected[1], abs=0.02)
    with pytest.raises(ValueError):
        unpack(b"x" * 7, 16)
