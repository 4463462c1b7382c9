"""CachedModel over the real HTTP client: a repeated request is answered from disk with no provider call,
anything that changes the answer misses, and only complete replies are kept."""

from __future__ import annotations

import sqlite3
from pathlib import Path
from typing import Any

import pytest

from shou import Agent
from shou.messages import Message
from shou.models.base import Completion, ModelSettings, Retrying, TextChunk, ToolCallChunk
from shou.models.cache import CachedModel, ResponseCache, cache_key
from shou.models.openai_compat import OpenAICompatible
from shou.models.runtime import RetryPolicy
from shou.models.scripted import ScriptedModel
from shou.tools.builtin.calc import calculator
from shou.usage import Usage

CALC = {"tool_calls": [{"name": "calculator", "arguments": {"expression": "6*7"}}]}
ANSWER = {"text": "6*7 is 42, computed with the calculator.", "chunk_size": 8}
HELLO = [Message.user("say hello")]


def cached(srv, cache_dir: Path, **kw: Any) -> CachedModel:
    inner = OpenAICompatible("m", base_url=srv.base_url, retry=RetryPolicy(max_retries=2, base=0.01), **kw)
    return CachedModel(inner, ResponseCache(cache_dir / "cache" / "responses.db"))


async def collect(model: Any, messages: list[Message] = HELLO, settings: ModelSettings | None = None) -> list:
    return [e async for e in model.stream(messages, [], settings)]


def completion(events: list) -> Completion:
    done = [e for e in events if isinstance(e, Completion)]
    assert len(done) == 1 and events[-1] is done[0]
    return done[0]


async def test_a_repeated_run_is_answered_from_the_cache(serve, workspace: Path, tmp_path: Path) -> None:
    srv = serve([CALC, ANSWER])  # two turns only: a third request would be answered 400
    model = cached(srv, tmp_path)
    agent = Agent(model, [calculator], workspace=workspace)
    first = [e async for e in agent.stream("what is 6*7?")]
    assert len(srv.requests) == 2
    second = [e async for e in agent.stream("what is 6*7?")]  # a fresh session: the same requests again
    await model.aclose()
    assert len(srv.requests) == 2  # nothing new reached the provider
    assert first[-1].status == second[-1].status == "completed"
    assert first[-1].answer == second[-1].answer == ANSWER["text"]
    assert [e.type for e in first] == [e.type for e in second]  # text deltas, call deltas, tool runs alike
    assert sum(e.type == "text_delta" for e in second) == 5
    assert [e.text for e in first if e.type == "text_delta"] == [e.text for e in second if e.type == "text_delta"]
    ran = [e.content for e in second if e.type == "tool_call_finished"]
    assert ran == ["42"]  # the cached call still runs its tool: only the model's side is replayed


async def test_a_hit_replays_the_chunks_and_a_free_cached_completion(serve, tmp_path: Path) -> None:
    srv = serve([{"text": "hello there, how are you today?", "chunk_size": 5}])
    model = cached(srv, tmp_path)
    miss = await collect(model)
    hit = await collect(model)
    await model.aclose()
    assert len(srv.requests) == 1
    assert hit[:-1] == miss[:-1] and all(isinstance(e, TextChunk) for e in hit[:-1])
    fresh, again = completion(miss), completion(hit)
    assert not fresh.cached and fresh.usage.requests == 1 and fresh.usage.input_tokens > 0
    assert again.cached
    assert again.usage == Usage() and again.usage.requests == 0 and again.usage.cost == 0.0
    assert (again.message, again.finish_reason, again.model, again.sent_model) == \
        (fresh.message, fresh.finish_reason, fresh.model, fresh.sent_model)
    assert again.sent_model == "m"


async def test_a_tool_call_reply_replays_its_call_fragments(serve, tmp_path: Path) -> None:
    srv = serve([{**CALC, "chunk_size": 3}])
    model = cached(srv, tmp_path)
    tools = [calculator.spec()]
    miss = [e async for e in model.stream(HELLO, tools)]
    hit = [e async for e in model.stream(HELLO, tools)]
    await model.aclose()
    assert len(srv.requests) == 1
    assert [e for e in hit if isinstance(e, ToolCallChunk)] == [e for e in miss if isinstance(e, ToolCallChunk)]
    assert completion(hit).message.tool_calls == completion(miss).message.tool_calls
    assert completion(hit).finish_reason == "tool_calls"


async def test_a_different_temperature_or_message_misses(serve, tmp_path: Path) -> None:
    srv = serve([{"text": f"answer {i}"} for i in range(4)])
    model = cached(srv, tmp_path)
    await collect(model, settings=ModelSettings(temperature=0.0))
    await collect(model, settings=ModelSettings(temperature=0.0))
    assert len(srv.requests) == 1
    await collect(model, settings=ModelSettings(temperature=0.7))
    assert len(srv.requests) == 2
    await collect(model, [Message.user("say goodbye")], settings=ModelSettings(temperature=0.0))
    assert len(srv.requests) == 3
    # the reply limit is not part of the key: the stored reply (a few tokens) answers a request it fits...
    fits = await collect(model, settings=ModelSettings(temperature=0.0, max_tokens=50))
    assert len(srv.requests) == 3 and completion(fits).message.text == "answer 0" and completion(fits).cached
    # ...and not one it would be cut by
    other = await collect(model, settings=ModelSettings(temperature=0.0, max_tokens=1))
    assert len(srv.requests) == 4 and completion(other).message.text == "answer 3"
    await model.aclose()


async def test_the_endpoint_is_part_of_the_key(serve, tmp_path: Path) -> None:
    one, two = serve([{"text": "from one"}]), serve([{"text": "from two"}])
    a, b = cached(one, tmp_path), cached(two, tmp_path)  # one cache file, two providers
    assert completion(await collect(a)).message.text == "from one"
    assert completion(await collect(b)).message.text == "from two"
    assert (len(one.requests), len(two.requests)) == (1, 1)
    await a.aclose()
    await b.aclose()


async def test_streaming_or_not_shares_the_entry(serve, tmp_path: Path) -> None:
    srv = serve([{"text": "same either way"}])
    streamed, whole = cached(srv, tmp_path), cached(srv, tmp_path, stream=False)
    await collect(streamed)
    hit = completion(await collect(whole))
    assert hit.cached and hit.message.text == "same either way" and len(srv.requests) == 1
    await streamed.aclose()


async def test_a_reply_cut_at_the_output_limit_is_not_stored(serve, tmp_path: Path) -> None:
    srv = serve([{"text": "a long answer that was cut", "finish_reason": "length"}, {"text": "whole"}])
    model = cached(srv, tmp_path)
    assert completion(await collect(model)).finish_reason == "length"
    again = completion(await collect(model))
    assert len(srv.requests) == 2 and not again.cached and again.message.text == "whole"
    await model.aclose()
    assert len(model.cache) == 1


async def test_what_streamed_before_a_retry_is_not_replayed(serve, tmp_path: Path) -> None:
    # the first attempt is cut off after some text; the retry's reply is the one stored
    srv = serve([{"text": "first attempt, never finished", "cut_after": 700, "chunk_size": 4},
                 {"text": "second attempt", "chunk_size": 4}])
    model = cached(srv, tmp_path)
    miss = await collect(model)
    retry = next(i for i, e in enumerate(miss) if isinstance(e, Retrying))
    assert any(isinstance(e, TextChunk) for e in miss[:retry]) and len(srv.requests) == 2  # text, then the cut
    hit = await collect(model)
    await model.aclose()
    assert not any(isinstance(e, Retrying) for e in hit)
    assert "".join(e.text for e in hit if isinstance(e, TextChunk)) == "second attempt"
    assert completion(hit).cached


async def test_a_failed_request_is_not_stored(serve, tmp_path: Path) -> None:
    srv = serve([{"error": 400, "message": "bad request"}, {"text": "fine"}])
    model = cached(srv, tmp_path)
    try:
        await collect(model)
    except Exception as e:
        assert "bad request" in str(e)
    else:
        raise AssertionError("the 400 should have raised")
    assert completion(await collect(model)).message.text == "fine"
    await model.aclose()
    assert len(model.cache) == 1


async def test_any_model_without_a_request_body_is_keyed_by_name_messages_tools_and_settings(tmp_path: Path) -> None:
    inner = ScriptedModel([{"text": "one"}, {"text": "two"}])
    model = CachedModel(inner, ResponseCache(tmp_path / "c.db"))
    assert completion(await collect(model)).message.text == "one"
    assert completion(await collect(model)).cached
    assert completion(await collect(model, settings=ModelSettings(extra={"seed": 1}))).message.text == "two"
    assert len(inner.requests) == 2
    base = cache_key(inner, HELLO, [], None)
    assert base == cache_key(inner, HELLO, [], ModelSettings())  # no settings is the default settings
    assert base != cache_key(inner, HELLO, [], ModelSettings(parallel_tool_calls=False))
    assert base != cache_key(inner, HELLO, [{"type": "function", "function": {"name": "f"}}], None)


async def test_the_cache_is_a_wal_sqlite_file_made_on_first_use(serve, tmp_path: Path) -> None:
    srv = serve([{"text": "stored"}])
    model = cached(srv, tmp_path)
    path = tmp_path / "cache" / "responses.db"
    assert not path.parent.exists()  # building the model touches nothing
    await collect(model)
    await model.aclose()
    assert model.model == "m" and model.base_url == srv.base_url and model.name == "openai:m"  # forwarded
    model.cache.close()
    with sqlite3.connect(path) as db:
        assert db.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
        rows = db.execute("SELECT key, created FROM responses").fetchall()
    assert len(rows) == 1 and len(rows[0][0]) == 64 and rows[0][1] > 0


def test_with_fallback_models_each_provider_has_its_own_entries(serve, shou, tmp_path: Path) -> None:
    """The cache sits in front of each model of the chain: a reply of provider A never answers a request that
    goes to provider B, even for the same model name and messages."""
    config = tmp_path / "config"
    config.mkdir(exist_ok=True)
    (config / "shou.toml").write_text('cache = true\nfallback_models = ["openai:backup"]\n')
    a = serve([{"text": "answer from provider A"}])
    b = serve([{"text": "answer from provider B"}])
    first = shou("run", "hi", server=a, OPENAI_BASE_URL=b.base_url, OPENAI_API_KEY="k")
    assert first.returncode == 0 and "provider A" in first.stdout, first.stderr
    second = shou("run", "hi", server=b, OPENAI_BASE_URL=a.base_url, OPENAI_API_KEY="k")
    assert second.returncode == 0 and "provider B" in second.stdout, second.stderr
    assert len(b.requests) == 1
    third = shou("run", "hi", server=a, OPENAI_BASE_URL=b.base_url, OPENAI_API_KEY="k")  # A again: a hit
    assert "provider A" in third.stdout and len(a.requests) == 1


@pytest.mark.parametrize("damage", ["garbage", "locked"])
async def test_a_cache_that_cannot_be_used_is_a_miss_never_a_failed_call(serve, tmp_path: Path, damage: str) -> None:
    path = tmp_path / "cache" / "responses.db"
    path.parent.mkdir()
    holder = None
    if damage == "garbage":
        path.write_bytes(b"this is not a database" * 100)
    else:
        ResponseCache(path).put("k", {})  # a real cache, then another process holds its write lock
        holder = sqlite3.connect(path, isolation_level=None)
        holder.execute("BEGIN EXCLUSIVE")
    srv = serve([{"text": "hello"}, {"text": "hello"}])
    model = cached(srv, tmp_path)
    for _ in range(2):
        assert completion(await collect(model)).message.text == "hello"
    assert len(srv.requests) == 2  # asked each time: nothing could be kept or read, nothing failed
    if holder is not None:
        holder.rollback()
        holder.close()
    await model.aclose()


def test_a_reply_that_echoes_a_known_secret_is_kept_without_it(serve, shou, tmp_path: Path) -> None:
    """The cache outlives the workspace and a hit replays into other logs: what it keeps is redacted like the
    log is."""
    config = tmp_path / "config"
    config.mkdir(exist_ok=True)
    (config / "shou.toml").write_text("cache = true\n")
    key = "sk-live-Echo1234567890abcdef"
    srv = serve([{"text": f"your key is {key}"}])
    r = shou("run", "hi", server=srv, SHOU_API_KEY=key)
    assert r.returncode == 0, r.stderr
    raw = (tmp_path / ".cache" / "shou" / "responses.db").read_bytes()
    wal = tmp_path / ".cache" / "shou" / "responses.db-wal"
    raw += wal.read_bytes() if wal.exists() else b""
    assert key.encode() not in raw and b"your key is [redacted]" in raw
