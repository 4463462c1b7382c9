"""Linked facts: entities and relations read from memories, the one-hop search, the graph view, the
migration of stores written before entities existed."""

from __future__ import annotations

import json
import random
import sqlite3
from pathlib import Path
from types import SimpleNamespace

import pytest

from shou.memory import Fact, MemoryStore, NewMemory, memory_status
from shou.memory.entities import read_entities, read_facts
from shou.memory.schema import MIGRATIONS
from shou.store.migrate import migrate
from shou.tools.base import ToolContext
from shou.tools.builtin.memory import save_memory

QUESTION = "Which city does Alice work in?"
PAIR = [
    NewMemory("Alice started at Quillon Labs last spring as a data engineer", id="alice-job"),
    NewMemory("Quillon Labs has its only office in Lyon, near the old silk district", id="quillon-office"),
]


OTHER_ALICE = [  # what else a store would know about Alice: none of it says where she works
    "Alice adopted a grey cat named Pixel", "Alice runs along the river on Sunday mornings",
    "Alice is learning Portuguese before her trip", "Alice's sister lives in Montreal",
    "Alice recommended a thriller by Tana French",
]


def distractors(n: int, seed: int = 7) -> list[NewMemory]:
    """Unrelated memories written like real ones: people, jobs, cities, offices, friends."""
    rng = random.Random(seed)
    people = ["Bob", "Carmen", "Dmitri", "Erin", "Farid", "Grace", "Hiro", "Ines", "Jonas", "Kemi", "Liam", "Mira"]
    orgs = ["Tessel Systems", "Brightwater Bank", "Northwind Foods", "Orbital Dynamics", "Kestrel Media",
            "Pinecone Studio", "Harbor Health", "Vantage Labs"]
    cities = ["Paris", "Berlin", "Madrid", "Oslo", "Toronto", "Nairobi", "Osaka", "Lisbon", "Denver", "Porto"]
    shapes = [
        "{p} works at {o} in {c} and commutes by bike",
        "{o} opened a second office in {c} this year",
        "{p} visited {c} for a conference on city planning",
        "{p} says the office coffee at {o} is terrible",
        "{p} moved to {c} after finishing a degree",
        "The {c} team at {o} ships releases every Friday",
        "{p} wants to work remotely from {c} next winter",
        "{p} recommended a bakery near the {c} train station",
        "{p} is learning to cook dishes from {c}",
        "{p} and {q} played chess at the {c} club",
    ]
    out: list[NewMemory] = []
    seen: set[str] = set()
    while len(out) < n:
        p, q = rng.sample(people, 2)
        text = rng.choice(shapes).format(p=p, q=q, o=rng.choice(orgs), c=rng.choice(cities))
        if text not in seen:
            seen.add(text)
            out.append(NewMemory(text, id=f"d{len(out)}"))
    return out


def ids(found: list) -> list[str]:
    return [m.id for m in found]


@pytest.mark.parametrize("embeddings", [False, True], ids=["bm25", "hybrid"])
@pytest.mark.parametrize("seed", [7, 11])
@pytest.mark.parametrize("about_alice", [0, 2])
def test_linked_fact_is_found_through_its_entity(tmp_path: Path, embeddings: bool, seed: int,
                                                  about_alice: int) -> None:
    if embeddings and not memory_status()[0]:
        pytest.skip("the memory extra is not installed")
    items = distractors(300 - about_alice, seed)
    for n, text in enumerate(OTHER_ALICE[:about_alice]):
        items.insert(30 * n + 7, NewMemory(text, id=f"alice{n}"))
    items[150:150] = PAIR[:1]
    items[40:40] = PAIR[1:]  # stored long before the memory that links to it
    with MemoryStore(tmp_path / "m.db", embeddings=embeddings) as store:
        store.add_many(items)
        top = ids(store.search(QUESTION, k=5))
        assert "alice-job" in top and "quillon-office" in top, top


def test_without_the_link_the_office_is_not_found(tmp_path: Path) -> None:
    """The office memory shares no word with the question: without the hop it cannot rank."""
    from shou.memory import RankParams

    items = [*distractors(300), *PAIR]
    with MemoryStore(tmp_path / "m.db", embeddings=False, params=RankParams(hop_weight=0)) as store:
        store.add_many(items)
        assert "quillon-office" not in ids(store.search(QUESTION, k=5))


def test_entities_and_relations_are_read_from_text() -> None:
    assert set(read_entities("Hey Mel! Alice started at Quillon Labs in Lyon.").values()) == {
        "Mel", "Alice", "Quillon Labs", "Lyon"}
    assert read_entities("Thanks, that was great. I'm off to bed") == {}
    assert Fact("Quillon Labs", "has its only office in", "Lyon") in read_facts(PAIR[1].text)
    assert read_facts("Alice, Bob and Carol went home") == []  # a list, not a relation


def test_graph_view_and_forgetting(tmp_path: Path) -> None:
    with MemoryStore(tmp_path / "m.db", embeddings=False) as store:
        store.add_many(PAIR)
        store.add("Alice likes jazz", facts=[Fact("Alice", "plays", "the Saxophone")])
        view = store.graph("quillon LABS")
        assert view is not None and view.name == "Quillon Labs"
        triples = {(r.subject, r.predicate, r.object, r.stated) for r in view.relations}
        assert ("Alice", "started at", "Quillon Labs", False) in triples
        assert ("Quillon Labs", "has its only office in", "Lyon", False) in triples
        assert {name for name, _ in view.alongside} == {"Alice", "Lyon"}
        alice = store.graph("alice")
        assert alice is not None
        assert ("Alice", "plays", "the Saxophone", True) in {(r.subject, r.predicate, r.object, r.stated)
                                                              for r in alice.relations}
        store.forget(["quillon-office"])
        assert store.graph("Lyon") is None  # no memory names it any more
        view = store.graph("Quillon Labs")
        assert view is not None and [m for m, _ in view.memories] == ["alice-job"]


def test_store_from_before_entities_is_upgraded(tmp_path: Path) -> None:
    """A store written by the previous version (schema 001, porter FTS) is searchable and linked."""
    path = tmp_path / "old.db"
    db = sqlite3.connect(path, isolation_level=None)
    migrate(db, MIGRATIONS[:1])
    for n, item in enumerate([*PAIR, *distractors(50)]):
        db.execute("INSERT INTO memories(id, text, norm, time, created) VALUES (?, ?, ?, ?, ?)",
                   (item.id, item.text, f"norm{n}", 1000.0 + n, 1000.0 + n))
    db.close()
    with MemoryStore(path, embeddings=False) as store:
        assert store.count() == 52
        assert ids(store.search("Quillon office", k=1)) == ["quillon-office"]
        top = ids(store.search(QUESTION, k=5))
        assert "alice-job" in top and "quillon-office" in top
        assert store.graph("Lyon") is not None
        markets, _ = store.add("A new memory about Lyon's food markets")
    with MemoryStore(path, embeddings=False) as store:  # nothing is read twice
        mentions = store._db.execute("SELECT count(*) FROM mentions m JOIN entities e ON e.id = m.entity "
                                     "WHERE e.key = 'lyon'").fetchone()[0]
        assert mentions == 2
        assert set(ids(store.search("Lyon", k=2))) == {"quillon-office", markets.id}


async def test_save_memory_takes_facts(tmp_path: Path) -> None:
    ctx = ToolContext(workspace=tmp_path, session="s", settings=SimpleNamespace(memory_embeddings=False))
    args = save_memory.validate({"content": "My sister works in a hospital", "facts": [
        {"subject": "the user's sister", "relation": "works at", "object": "St Mary's Hospital"}]})
    result = await save_memory.call(args, ctx)
    assert not result.is_error
    with MemoryStore(tmp_path / ".shou" / "memory.db", embeddings=False) as store:
        view = store.graph("St Mary's Hospital")
        assert view is not None
        assert [(r.subject, r.predicate, r.stated) for r in view.relations] == [("the user's sister", "works at", True)]
        assert ids(store.search("where is St Mary's Hospital", k=1)) == [result.details["id"]]


def test_bad_facts_are_refused(tmp_path: Path) -> None:
    from shou.errors import UserError
    from shou.tools.base import ToolArgumentsError

    with pytest.raises(ToolArgumentsError):
        save_memory.validate({"content": "x", "facts": [{"subject": "A", "object": "B"}]})
    with MemoryStore(tmp_path / "m.db", embeddings=False) as store, pytest.raises(UserError, match="a fact needs"):
        store.add("x", facts=[Fact("A", " ", "B")])


def test_graph_cli(tmp_path: Path) -> None:
    import typer
    from typer.testing import CliRunner

    from shou.cli.memory import memory_app

    app = typer.Typer()
    app.add_typer(memory_app, name="memory")
    db = str(tmp_path / "m.db")
    runner = CliRunner()
    for item in PAIR:
        assert runner.invoke(app, ["memory", "add", item.text, "--store", db, "--bm25-only"]).exit_code == 0
    out = runner.invoke(app, ["memory", "graph", "quillon labs", "--store", db, "--json"])
    assert out.exit_code == 0, out.output
    data = json.loads(out.stdout)
    assert data["entity"] == "Quillon Labs" and len(data["memories"]) == 2
    assert {(r["subject"], r["relation"], r["object"]) for r in data["relations"]} == {
        ("Alice", "started at", "Quillon Labs"), ("Quillon Labs", "has its only office in", "Lyon")}
    text = runner.invoke(app, ["memory", "graph", "Lyon", "--store", db])
    assert text.exit_code == 0 and "has its only office in" in text.stdout
    missing = runner.invoke(app, ["memory", "graph", "Nobody", "--store", db])
    assert missing.exit_code == 2 and "no memory names" in missing.output
