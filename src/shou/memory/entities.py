"""Entities and relations read from a memory's text, without a model.

An entity is a run of capitalised words ("Alice", "Quillon Labs", "Bank of America", "LGBTQ"): names of
people, places, organisations and titles, which is what links one memory to another. A relation is what a
sentence says between two of them: "Alice started at Quillon Labs" gives (Alice, "started at", Quillon
Labs). The reading is deliberately simple and predictable; it misses lowercase names and catches a few
capitalised words that are not names, and the ranking only follows rare entities (a word that is in
every memory links nothing), so those few cost little.
"""

from __future__ import annotations

import itertools
import re
from dataclasses import dataclass

from .cues import DAYS, MONTHS

__all__ = ["Fact", "entity_key", "read_entities", "read_facts"]

# Capitalised words that start sentences without naming anything: greetings, interjections, pronouns and
# function words. Months and days are times, not entities (memory/cues.py reads them).
_NOT_NAME_TEXT = """
    hey hi hello thanks thank wow yeah yes yep yup oh ok okay sure great well so congrats congratulations sorry
    please awesome cool nice good haha lol definitely absolutely totally really glad omg ah aw aww hmm hm um
    uh no nope right true anyway btw also and but or if when what where who why how which that this these
    those there here it its i im we you they he she my our your their me us them his her let lets just still
    even maybe yay whoa woah today yesterday tomorrow tonight last next recently lately since after before
    during then now the a an in on at to for of with from by as is are was were be been do does did have has
    had can could would should will not all some any every each many much more most one two three first
"""
_NOT_NAMES = frozenset(_NOT_NAME_TEXT.split()) | frozenset(MONTHS) | frozenset(DAYS)

_WORD = r"(?:[A-Z][\w'\u2019&-]*|[0-9]+[A-Z][\w-]*)"
_JOIN = r"(?:of|the|de|du|la|le|von|van|der|&|for)"
_SPAN = re.compile(rf"{_WORD}(?:\s+(?:{_JOIN}\s+)*{_WORD})*")
_SENTENCE_START = re.compile(r"(?:^|[.!?;:\"\u201c(\[\n]\s*|\s[-\u2013\u2014]\s*)$")
_SENTENCES = re.compile(r"[^.!?\n]+")
_PREDICATE = re.compile(r"[a-z][\w'\u2019-]*(?: [\w'\u2019-]+)*")
MAX_NAME_WORDS = 6
MAX_PREDICATE_WORDS = 8


def entity_key(name: str) -> str:
    """How an entity is looked up: lowercase, single spaces, no possessive ("Alice's" -> "alice")."""
    key = " ".join(name.replace("\u2019", "'").lower().split())
    return key.removesuffix("'s").removesuffix("'").strip()


_JOINERS = frozenset({"of", "the", "de", "du", "la", "le", "von", "van", "der", "&", "for"})


def _common(word: str) -> bool:
    """A common word, also with a contraction ("I'm", "Let's")."""
    return word.lower().replace("\u2019", "'").split("'", 1)[0] in _NOT_NAMES


def _spans(text: str) -> list[tuple[int, int, str]]:
    """(start, end, name) of each entity in `text`, in order."""
    found: list[tuple[int, int, str]] = []
    for m in _SPAN.finditer(text):
        words = m.group(0).split()
        start = m.start()
        # A sentence's first word is capitalised anyway: drop it when it is a common word ("Thanks Alice").
        if _SENTENCE_START.search(text[: m.start()]):
            while words and _common(words[0]):
                start = text.index(words[0], start) + len(words[0])
                words = words[1:]
        while words and words[-1].lower() in _JOINERS:
            words = words[:-1]
        if not words or len(words) > MAX_NAME_WORDS:
            continue
        name = " ".join(words).rstrip("'\u2019").removesuffix("'s").removesuffix("\u2019s")
        key = entity_key(name)
        if len(key) < 2 or _common(key):
            continue
        begin = text.index(words[0], start)
        found.append((begin, begin + len(" ".join(words)), name))
    return found


def read_entities(text: str) -> dict[str, str]:
    """The entities a text names: key -> name as first written."""
    out: dict[str, str] = {}
    for _, _, name in _spans(text):
        out.setdefault(entity_key(name), name)
    return out


@dataclass(frozen=True, slots=True)
class Fact:
    """A relation between two entities: (subject, predicate, object), e.g. ("Alice", "works at", "Quillon Labs")."""

    subject: str
    predicate: str
    object: str


def read_facts(text: str) -> list[Fact]:
    """The relations a text states between consecutive entities of one sentence, predicate = the words
    between them (at most a few): "Quillon Labs has its only office in Lyon" -> (Quillon Labs, "has its
    only office in", Lyon)."""
    facts: list[Fact] = []
    for sentence in _SENTENCES.finditer(text):
        spans = _spans(sentence.group(0))
        for (_, end, a), (start, _, b) in itertools.pairwise(spans):
            between = " ".join(sentence.group(0)[end:start].strip(" ,\"'\u201c\u201d").split())
            # Words only: "Alice, Bob" is a list and "Caroline: Hey Mel" a speaker, neither a relation.
            if not _PREDICATE.fullmatch(between) or len(between.split()) > MAX_PREDICATE_WORDS:
                continue
            if between in {"and", "or", "nor", "but", "then", "and then"} or entity_key(a) == entity_key(b):
                continue
            facts.append(Fact(a, between, b))
    return facts
