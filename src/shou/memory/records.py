"""What the memory store holds and takes: `Memory`, `NewMemory`, and the checks a new memory must pass."""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from ..errors import UserError
from .entities import Fact

__all__ = ["Fact", "Memory", "NewMemory", "from_row", "validate"]


@dataclass(frozen=True, slots=True)
class Memory:
    """One stored memory; `score` is set on search results (higher is better) and 0 elsewhere."""

    id: str
    text: str
    time: float
    session: str = ""
    source: str = ""
    tags: tuple[str, ...] = ()
    score: float = 0.0


@dataclass(slots=True)
class NewMemory:
    """A memory to add: only `text` is required; `id` defaults to a new random one, `time` to now.

    `facts` are relations the caller states outright (a model through `save_memory`), linked in addition
    to those read from the text.
    """

    text: str
    id: str | None = None
    time: float | None = None
    session: str = ""
    source: str = ""
    tags: Sequence[str] = field(default_factory=tuple)
    facts: Sequence[Fact] = field(default_factory=tuple)


def from_row(row: tuple[Any, ...]) -> Memory:
    """The Memory in a row of `schema.COLUMNS`."""
    _row, mem_id, text, when, session, source, tags = row
    return Memory(mem_id, text, when, session, source, tuple(json.loads(tags)))


def validate(item: NewMemory, where: str) -> None:
    """Refuse what the store could not hold or later show: no text, text that is not valid Unicode (lone
    surrogates), a time that is not a finite moment between the years 1 and 9999, a fact without both of
    its entities."""
    if not item.text.strip():
        raise UserError(f"{where}: a memory needs some text")
    for label, value in (("text", item.text), ("id", item.id or ""), ("session", item.session),
                         ("source", item.source), *(("tag", t) for t in item.tags),
                         *(("fact", f"{f.subject} {f.predicate} {f.object}") for f in item.facts)):
        try:
            value.encode("utf-8")
        except UnicodeEncodeError:
            raise UserError(f"{where}: its {label} is not valid Unicode (a lone surrogate)") from None
    for fact in item.facts:
        if not fact.subject.strip() or not fact.object.strip() or not fact.predicate.strip():
            raise UserError(f"{where}: a fact needs a subject, a relation and an object, got {fact!r}")
    if item.time is not None:
        import datetime
        import math

        try:
            ok = math.isfinite(item.time) and datetime.datetime.fromtimestamp(item.time).year >= 1
        except (OverflowError, OSError, ValueError):
            ok = False
        if not ok:
            raise UserError(f"{where}: time {item.time!r} is not a moment a calendar can show")
