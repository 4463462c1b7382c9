"""The trace's raw side: every model request's exact messages are recoverable from the log alone, each
distinct message is stored once however many requests carried it (in its session), and retention drops
old raw contents while the events (tokens, costs, statuses) stay."""

from __future__ import annotations

import json
import time
from pathlib import Path

from shou import Agent, SQLiteStore
from shou import trace as tr
from shou.events import ModelRequest, ModelResponse
from shou.models.openai_compat import OpenAICompatible
from shou.tools.builtin.calc import calculator


def _requests(store: SQLiteStore, session: str) -> list[ModelRequest]:
    return [e for e in store.events(session) if isinstance(e, ModelRequest)]


def _contents(store: SQLiteStore, session: str) -> dict:
    out: dict = {}
    for event in _requests(store, session):
        out.update(event.contents or {})
    return out


def test_a_fifty_step_run_stores_each_message_once_and_every_request_exactly(serve, workspace: Path) -> None:
    turns = [{"tool_calls": [{"name": "calculator", "arguments": {"expression": f"{i}*{i}"}}]} for i in range(49)]
    srv = serve([*turns, {"text": "done"}])
    store = SQLiteStore.for_workspace(workspace)
    agent = Agent(OpenAICompatible("m", base_url=srv.base_url), [calculator], max_steps=60, workspace=workspace,
                  store=store)
    assert agent.run("square 0..48", "s").status == "completed"
    requests = _requests(store, "s")
    assert len(requests) == 50 == len(srv.requests)
    contents = _contents(store, "s")
    # Every request is recoverable exactly as it was sent: messages in order, and the tool specs.
    for event, sent in zip(requests, srv.requests, strict=True):
        assert [contents[k] for k in event.messages] == sent["messages"]
        assert contents[event.tools_ref] == sent["tools"]
        assert event.request_id.startswith("mc_") and event.model == "m"
    responses = [e for e in store.events("s") if isinstance(e, ModelResponse)]
    assert [e.request_id for e in responses] == [e.request_id for e in requests]
    # Stored once: the distinct messages (system, task, 49 calls, 49 results) and the specs, not 50 histories.
    assert len(contents) <= 2 + 49 * 2 + 1
    stored = sum(len(json.dumps(e.contents or {})) for e in requests)
    last = sum(len(json.dumps(m)) for m in srv.requests[-1]["messages"])
    assert stored < 2 * last  # all 50 requests' history: 25x the last one if each were stored whole
    # The trace reads it back the same way.
    [run] = tr.traces(store, "s")
    tr.resolve(store, run.model_calls)
    assert [c.messages for c in run.model_calls] == [b["messages"] for b in srv.requests]
    store.close()


def test_a_continued_session_does_not_store_its_history_again(serve, workspace: Path) -> None:
    srv = serve([{"text": "one"}, {"text": "two"}, {"text": "three"}])
    store = SQLiteStore.for_workspace(workspace)
    for task in ("first", "second"):
        Agent(OpenAICompatible("m", base_url=srv.base_url), [], workspace=workspace, store=store).run(task, "s")
    store.close()
    store = SQLiteStore.for_workspace(workspace)  # another process continues the session
    Agent(OpenAICompatible("m", base_url=srv.base_url), [], workspace=workspace, store=store).run("third", "s")
    third = _requests(store, "s")[-1]
    # Only what is new in the third request (the reply "two" and the task "third") was stored with it.
    assert set(third.contents or {}) == set(third.messages[-2:])
    assert len(third.messages) == 6  # system, first, one, second, two, third
    store.close()


def test_retention_drops_old_raw_contents_and_keeps_the_summaries(serve, workspace: Path) -> None:
    srv = serve([{"text": "one"}, {"text": "two"}])
    store = SQLiteStore.for_workspace(workspace)
    Agent(OpenAICompatible("m", base_url=srv.base_url), [], workspace=workspace, store=store).run("first", "s")
    store._db.execute("UPDATE events SET ts = ?", (time.time() - 8 * 86400,))  # logged eight days ago
    store._db.execute("INSERT INTO events(session, run_id, type, ts, data) VALUES ('x', 'r', 'model_request', 0, "
                      "'{not json')")  # a damaged row does not stop retention for the rest
    store._db.execute("DELETE FROM meta")
    store.close()
    store = SQLiteStore.for_workspace(workspace)  # another process, a week later, continues the session
    Agent(OpenAICompatible("m", base_url=srv.base_url), [], workspace=workspace, store=store).run("second", "s")
    first, second = _requests(store, "s")
    assert first.contents is None  # pruned at this process's first write
    assert second.contents and set(second.messages) <= set(second.contents)  # stored again: all of it is new
    [old, new] = tr.traces(store, "s")
    tr.resolve(store, [*old.model_calls, *new.model_calls])
    assert old.model_calls[0].pruned == 0 and old.model_calls[0].messages[1]["content"] == "first"  # same hashes
    responses = [e for e in store.events("s") if isinstance(e, ModelResponse)]
    assert responses[0].usage.total_tokens > 0  # the summary stays
    assert store.apply_retention() == 0  # ran today already: not again
    store.retention_days = None
    store._db.execute("UPDATE events SET ts = 0")
    assert store.prune() == 0 and _requests(store, "s")[1].contents  # kept forever when retention is off
    store.close()
