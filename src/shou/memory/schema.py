"""The memory store's SQL: the schema as named migrations, the duplicate key and filter clauses."""

from __future__ import annotations

import hashlib
import re
from collections.abc import Sequence
from typing import Any

from ..ranking import terms

__all__ = ["COLUMNS", "MIGRATIONS", "filters", "normalise", "same_words", "where_clause"]

MIGRATIONS: list[tuple[str, list[str]]] = [
    (
        "001_memories_fts_tags",
        [
            """CREATE TABLE memories (
                row INTEGER PRIMARY KEY AUTOINCREMENT,
                id TEXT NOT NULL UNIQUE,
                text TEXT NOT NULL,
                norm TEXT NOT NULL,
                time REAL NOT NULL,
                session TEXT NOT NULL DEFAULT '',
                source TEXT NOT NULL DEFAULT '',
                tags TEXT NOT NULL DEFAULT '[]',
                created REAL NOT NULL,
                last_used REAL,
                hits INTEGER NOT NULL DEFAULT 0,
                embedding BLOB,
                model TEXT
            )""",
            "CREATE INDEX memories_by_norm ON memories(norm)",
            "CREATE INDEX memories_by_session ON memories(session, time, row)",
            "CREATE TABLE memory_tags (tag TEXT NOT NULL, row INTEGER NOT NULL REFERENCES memories(row) "
            "ON DELETE CASCADE, PRIMARY KEY (tag, row))",
            # External-content FTS: the text lives once, in `memories`; triggers keep the index in step.
            "CREATE VIRTUAL TABLE memories_fts USING fts5(text, content='memories', content_rowid='row', "
            "tokenize='porter unicode61 remove_diacritics 2')",
            "CREATE TRIGGER memories_ai AFTER INSERT ON memories BEGIN "
            "INSERT INTO memories_fts(rowid, text) VALUES (new.row, new.text); END",
            "CREATE TRIGGER memories_ad AFTER DELETE ON memories BEGIN "
            "INSERT INTO memories_fts(memories_fts, rowid, text) VALUES ('delete', old.row, old.text); END",
        ],
    ),
    (
        # BM25 over shou's own terms (shou.ranking.terms, shared with the context window) instead of FTS5's
        # porter tokenizer; per-memory cues and token vectors for ranking; entities and relations.
        # Existing rows get their terms, cues and entities when the store opens (`terms IS NULL`).
        "002_terms_cues_entities",
        [
            "DROP TRIGGER memories_ai",
            "DROP TRIGGER memories_ad",
            "DROP TABLE memories_fts",
            "ALTER TABLE memories ADD COLUMN terms TEXT",
            "ALTER TABLE memories ADD COLUMN asks REAL NOT NULL DEFAULT 0",
            "ALTER TABLE memories ADD COLUMN timed INTEGER NOT NULL DEFAULT 0",
            "ALTER TABLE memories ADD COLUMN tokens BLOB",
            "CREATE INDEX memories_unread ON memories(row) WHERE terms IS NULL",
            "CREATE VIRTUAL TABLE memory_terms USING fts5(terms, content='memories', content_rowid='row', "
            "tokenize='unicode61 remove_diacritics 0')",
            "CREATE TRIGGER memory_terms_ai AFTER INSERT ON memories WHEN new.terms IS NOT NULL BEGIN "
            "INSERT INTO memory_terms(rowid, terms) VALUES (new.row, new.terms); END",
            "CREATE TRIGGER memory_terms_ad AFTER DELETE ON memories WHEN old.terms IS NOT NULL BEGIN "
            "INSERT INTO memory_terms(memory_terms, rowid, terms) VALUES ('delete', old.row, old.terms); END",
            "CREATE TRIGGER memory_terms_au AFTER UPDATE OF terms ON memories BEGIN "
            "INSERT INTO memory_terms(memory_terms, rowid, terms) SELECT 'delete', old.row, old.terms "
            "WHERE old.terms IS NOT NULL; "
            "INSERT INTO memory_terms(rowid, terms) SELECT new.row, new.terms WHERE new.terms IS NOT NULL; END",
            "CREATE TABLE entities (id INTEGER PRIMARY KEY, key TEXT NOT NULL UNIQUE, name TEXT NOT NULL)",
            "CREATE TABLE mentions (entity INTEGER NOT NULL REFERENCES entities(id) ON DELETE CASCADE, "
            "row INTEGER NOT NULL REFERENCES memories(row) ON DELETE CASCADE, PRIMARY KEY (entity, row)) WITHOUT ROWID",
            "CREATE INDEX mentions_by_row ON mentions(row)",
            # `stated`: given with the memory (save_memory's facts) rather than read from its text.
            "CREATE TABLE relations (id INTEGER PRIMARY KEY, "
            "subject INTEGER NOT NULL REFERENCES entities(id) ON DELETE CASCADE, predicate TEXT NOT NULL, "
            "object INTEGER NOT NULL REFERENCES entities(id) ON DELETE CASCADE, "
            "row INTEGER NOT NULL REFERENCES memories(row) ON DELETE CASCADE, stated INTEGER NOT NULL DEFAULT 0)",
            "CREATE UNIQUE INDEX relations_once ON relations(subject, predicate, object, row)",
            "CREATE INDEX relations_by_object ON relations(object)",
            "CREATE INDEX relations_by_row ON relations(row)",
        ],
    ),
    (
        # The HMAC of the user's own runs (memory/signing.py): recall takes only rows whose signature verifies.
        "003_signatures",
        ["ALTER TABLE memories ADD COLUMN sig TEXT"],
    ),
]

COLUMNS = "row, id, text, time, session, source, tags"
NORM_RE = re.compile(r"[\W_]+", re.UNICODE)
_NEGATION = re.compile(r"\b(?:no|not|nor|never|none|nothing|nobody|without)\b|n[\'\u2019]t\b", re.IGNORECASE)


def normalise(text: str) -> str:
    """The duplicate key: lowercase words only, so case, spacing and punctuation do not matter."""
    return hashlib.sha1(NORM_RE.sub(" ", text.lower()).strip().encode()).hexdigest()


def same_words(a: str, b: str) -> bool:
    """Whether the texts say the same with the same content words (order, case, function words aside).

    Negations count as content: "likes tea" and "does not like tea" differ.
    """
    return bool(terms(a)) and _content(a) == _content(b)


def _content(text: str) -> frozenset[str]:
    # The search terms, plus how many negations: terms() drops "not" and "doesn't" as function words.
    return frozenset(terms(text)) | {f"\0not{len(_NEGATION.findall(text))}"}


def filters(
    *, session: str | None = None, source: str | None = None, tags: Sequence[str] = (), since: float | None = None,
    until: float | None = None,
) -> tuple[list[str], list[Any]]:
    """SQL conditions (ANDed) and their arguments for the metadata filters given; tags match any."""
    where: list[str] = []
    args: list[Any] = []
    for column, value in (("session", session), ("source", source)):
        if value is not None:
            where.append(f"{column} = ?")
            args.append(value)
    if tags:
        where.append(f"row IN (SELECT row FROM memory_tags WHERE tag IN ({','.join('?' * len(tags))}))")
        args.extend(tags)
    if since is not None:
        where.append("time >= ?")
        args.append(since)
    if until is not None:
        where.append("time < ?")
        args.append(until)
    return where, args


def where_clause(conditions: list[str]) -> str:
    """`WHERE a AND b`, or nothing for no conditions."""
    return "WHERE " + " AND ".join(conditions) if conditions else ""
