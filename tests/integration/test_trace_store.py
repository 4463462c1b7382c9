"""The trace's raw side: every model request's exact messages are recoverable from the log, each distinct
message is stored once however many requests carried it, and retention drops old raw requests while the
events (tokens, costs, statuses) stay."""

from __future__ import annotations

import json
import time
from pathlib import Path

from shou import Agent, SQLiteStore
from shou.events import ModelRequest, ModelResponse
from shou.models.openai_compat import OpenAICompatible
from shou.tools.builtin.calc import calculator


def _requests(store: SQLiteStore, session: str) -> list[ModelRequest]:
    return [e for e in store.events(session) if isinstance(e, ModelRequest)]


def test_a_fifty_step_run_stores_each_message_once_and_every_request_exactly(serve, workspace: Path) -> None:
    turns = [{"tool_calls": [{"name": "calculator", "arguments": {"expression": f"{i}*{i}"}}]} for i in range(49)]
    srv = serve([*turns, {"text": "done"}])
    store = SQLiteStore.for_workspace(workspace)
    agent = Agent(OpenAICompatible("m", base_url=srv.base_url), [calculator], max_steps=60, workspace=workspace,
                  store=store)
    assert agent.run("square 0..48", "s").status == "completed"
    requests = _requests(store, "s")
    assert len(requests) == 50 == len(srv.requests)
    keys = {k for r in requests for k in r.messages}
    blobs = store.blobs([*keys, *(r.tools_ref for r in requests)])
    # Every request is recoverable exactly as it was sent: messages in order, and the tool specs.
    for event, sent in zip(requests, srv.requests, strict=True):
        assert [json.loads(blobs[k]) for k in event.messages] == sent["messages"]
        assert json.loads(blobs[event.tools_ref]) == sent["tools"]
        assert event.request_id.startswith("mc_") and event.model == "m"
    responses = [e for e in store.events("s") if isinstance(e, ModelResponse)]
    assert [e.request_id for e in responses] == [e.request_id for e in requests]
    # Stored once: the distinct messages (task, 49 calls, 49 results, the system prompt), not 50 histories.
    (rows, size), = store._db.execute("SELECT COUNT(*), SUM(size) FROM blobs").fetchall()
    last = sum(len(json.dumps(m)) for m in srv.requests[-1]["messages"])
    assert rows <= 2 + 49 * 2 + 2  # + the tool specs
    assert size < 2 * last  # all 50 requests' history: 25x the last one if each were stored whole
    store.close()


def test_retention_drops_old_raw_requests_and_keeps_the_summaries(serve, workspace: Path) -> None:
    srv = serve([{"text": "one"}, {"text": "two"}])
    store = SQLiteStore.for_workspace(workspace)
    Agent(OpenAICompatible("m", base_url=srv.base_url), [], workspace=workspace, store=store).run("first", "s")
    first = _requests(store, "s")[0]
    store._db.execute("UPDATE blobs SET ts = ?", (time.time() - 8 * 86400,))  # last used eight days ago
    store.close()
    store = SQLiteStore.for_workspace(workspace)  # another process, a week later
    Agent(OpenAICompatible("m", base_url=srv.base_url), [], workspace=workspace, store=store).run("second", "t")
    assert store.prune() == 0  # expired ones went at this process's first request
    kept = store.blobs(first.messages)
    system, task = first.messages
    assert task not in kept  # "first" was only used eight days ago: gone
    assert system in kept  # the same system prompt was used again today: its clock restarted
    responses = [e for e in store.events("s") if isinstance(e, ModelResponse)]
    assert responses and responses[0].usage.total_tokens > 0  # the summary stays
    store.retention_days = None
    store._db.execute("UPDATE blobs SET ts = 0")
    assert store.prune() == 0 and store.blobs([system])  # kept forever when retention is off
    store.close()
