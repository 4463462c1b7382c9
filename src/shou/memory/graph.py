"""Linked facts: the entities memories name and the relations between them, in the memory store's file.

Every memory is linked, when it is added, to the entities its text names (memory/entities.py) and to any
facts given with it (`save_memory(facts=...)`); relations keep the memory they came from, so forgetting
a memory forgets what it said. Search follows these links one hop (memory/ranking.py); `shou memory
graph NAME` shows them.
"""

from __future__ import annotations

import re
import sqlite3
from collections.abc import Sequence
from dataclasses import dataclass, field

from .entities import MAX_NAME_WORDS, Fact, entity_key, read_entities, read_facts

__all__ = ["EntityView", "Link", "describe", "link", "named_in", "prune"]


def link(db: sqlite3.Connection, row: int, text: str, facts: Sequence[Fact] = ()) -> None:
    """Record the entities memory `row` names and the relations it states (read from `text`, plus `facts`)."""
    names = read_entities(text)
    for fact in facts:
        names.setdefault(entity_key(fact.subject), fact.subject.strip())
        names.setdefault(entity_key(fact.object), fact.object.strip())
    ids = {key: _entity(db, key, name) for key, name in names.items() if key}
    db.executemany("INSERT OR IGNORE INTO mentions(entity, row) VALUES (?, ?)", [(i, row) for i in ids.values()])
    relations = [(f, 0) for f in read_facts(text)] + [(f, 1) for f in facts]
    db.executemany(
        "INSERT OR IGNORE INTO relations(subject, predicate, object, row, stated) VALUES (?, ?, ?, ?, ?)",
        [(ids[entity_key(f.subject)], " ".join(f.predicate.split()), ids[entity_key(f.object)], row, stated)
         for f, stated in relations if entity_key(f.subject) in ids and entity_key(f.object) in ids],
    )


def unlink(db: sqlite3.Connection, rows: Sequence[int]) -> None:
    """Forget what these memories linked (before they are re-read)."""
    marks = ",".join("?" * len(rows))
    db.execute(f"DELETE FROM mentions WHERE row IN ({marks})", list(rows))
    db.execute(f"DELETE FROM relations WHERE row IN ({marks}) AND stated = 0", list(rows))


def _entity(db: sqlite3.Connection, key: str, name: str) -> int:
    db.execute("INSERT INTO entities(key, name) VALUES (?, ?) ON CONFLICT(key) DO NOTHING", (key, name))
    return int(db.execute("SELECT id FROM entities WHERE key = ?", (key,)).fetchone()[0])


def prune(db: sqlite3.Connection) -> None:
    """Drop entities no memory names any more."""
    db.execute("DELETE FROM entities WHERE NOT EXISTS (SELECT 1 FROM mentions WHERE mentions.entity = entities.id)")


_WORDS = re.compile(r"[^\s,.;:!?()\[\]{}\"\u201c\u201d]+")


def named_in(db: sqlite3.Connection, query: str) -> dict[int, str]:
    """The stored entities a query names, in any case ("which city does alice work in?" names Alice):
    id -> key. Every run of up to a few words is looked up."""
    words = [entity_key(w) for w in _WORDS.findall(query)]
    grams = {" ".join(words[i:j]) for i in range(len(words))
             for j in range(i + 1, min(len(words), i + MAX_NAME_WORDS) + 1)}
    grams.discard("")
    if not grams:
        return {}
    found: dict[int, str] = {}
    grams_list = sorted(grams)
    for start in range(0, len(grams_list), 500):  # SQLite's limit on host parameters
        chunk = grams_list[start:start + 500]
        sql = f"SELECT id, key FROM entities WHERE key IN ({','.join('?' * len(chunk))})"
        found.update((int(i), str(k)) for i, k in db.execute(sql, chunk))
    return found


@dataclass(frozen=True, slots=True)
class Link:
    """One relation, as stored: subject --predicate--> object, from memory `memory` (its id)."""

    subject: str
    predicate: str
    object: str
    memory: str
    stated: bool


@dataclass(slots=True)
class EntityView:
    """What the store knows about one entity: the memories naming it, its relations, the entities named
    alongside it (with how many memories name both)."""

    name: str
    memories: list[tuple[str, str]] = field(default_factory=list)  # (memory id, text)
    relations: list[Link] = field(default_factory=list)
    alongside: list[tuple[str, int]] = field(default_factory=list)


def describe(db: sqlite3.Connection, name: str, limit: int = 50) -> EntityView | None:
    """The entity called `name` (any case), or None when no memory names it."""
    found = db.execute("SELECT id, name FROM entities WHERE key = ?", (entity_key(name),)).fetchone()
    if found is None:
        return None
    entity, shown = found
    view = EntityView(shown)
    view.memories = [(str(i), str(t)) for i, t in db.execute(
        "SELECT m.id, m.text FROM mentions x JOIN memories m ON m.row = x.row WHERE x.entity = ? "
        "ORDER BY m.time DESC, m.row DESC LIMIT ?", (entity, limit))]
    view.relations = [Link(s, p, o, m, bool(st)) for s, p, o, m, st in db.execute(
        "SELECT s.name, r.predicate, o.name, m.id, r.stated FROM relations r JOIN entities s ON s.id = r.subject "
        "JOIN entities o ON o.id = r.object JOIN memories m ON m.row = r.row WHERE r.subject = ? OR r.object = ? "
        "ORDER BY r.stated DESC, m.time DESC, r.id LIMIT ?", (entity, entity, limit))]
    view.alongside = [(str(n), int(c)) for n, c in db.execute(
        "SELECT e.name, count(*) AS c FROM mentions a JOIN mentions b ON b.row = a.row AND b.entity != a.entity "
        "JOIN entities e ON e.id = b.entity WHERE a.entity = ? GROUP BY b.entity ORDER BY c DESC, e.name LIMIT ?",
        (entity, limit))]
    return view
