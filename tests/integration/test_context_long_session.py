"""A 60-turn session with large tool outputs through the real HTTP client: the window holds, every request
is well-formed, and a fact from turn 3 survives compaction."""

from __future__ import annotations

import random
from pathlib import Path

from shou import Agent, SQLiteStore, tool
from shou.context.builder import ContextPolicy
from shou.context.tokens import TokenCounter
from shou.context.validate import validate_messages
from shou.messages import Message
from shou.models.openai_compat import OpenAICompatible

WINDOW = 8000
FACT = "the vault code is 7341"


@tool
def fetch_log(n: int) -> str:
    """Fetch log number n."""
    rng = random.Random(n)
    words = " ".join(rng.choice(["alpha", "beta", "gamma", "delta", "omega", "sigma"]) + str(rng.randint(0, 99))
                     for _ in range(900))
    return (f"log {n}: {FACT}. " if n == 3 else f"log {n}: ") + words


def test_sixty_turns_stay_in_the_window(serve, workspace: Path) -> None:
    turns = [{"text": f"Reading log {i}.", "tool_calls": [{"name": "fetch_log", "arguments": {"n": i}}]}
             for i in range(60)]
    turns.append({"text": "The vault code is 7341."})
    summary = f"Summary: read logs in order; {FACT} (from log 3); keep reading the remaining logs."
    turns += [{"summary": True, "text": summary} for _ in range(40)]
    srv = serve(turns)
    store = SQLiteStore.for_workspace(workspace)
    agent = Agent(OpenAICompatible("m", base_url=srv.base_url), [fetch_log], max_steps=70, workspace=workspace,
                  store=store, context=ContextPolicy(window=WINDOW, reserve_output=500))
    result = agent.run("Read all 60 logs, then tell me the vault code.", "long")
    assert result.status == "completed", result.error
    counter = TokenCounter("m")
    normal = [r for r in srv.requests if "[shou:compact]" not in str(r["messages"][0]["content"])]
    compactions = [r for r in srv.requests if r not in normal]
    assert len(normal) == 61 and compactions
    for body in normal:
        messages = [Message.from_wire(m) for m in body["messages"]]
        validate_messages(messages)
        assert counter.messages(messages) + counter.text(str(body.get("tools"))) <= WINDOW
    assert any(f"log 3: {FACT}" in r["messages"][1]["content"] for r in compactions)  # turn 3 was summarised
    assert all(FACT in r["messages"][0]["content"] for r in normal[-20:])  # and the summary kept it after
    full = sum(len(str(m["content"])) for m in normal[-1]["messages"])
    assert full < 4 * WINDOW * 1.5
    events = list(store.events("long"))
    kinds = [e.type for e in events]
    assert "compacted" in kinds
    assert sum(e.type == "tool_call_finished" for e in events) == 60  # the log keeps every original result
    store.close()
