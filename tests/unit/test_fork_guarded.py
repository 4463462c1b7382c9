"""A fork of a session whose run a guardrail blocked (issue 34 review): the fork keeps the run's blocked ending
and the note that tells the session's next run the answer was never handed over, rather than a `cancelled` run
whose withheld answer reads as if the person had it. Real runs, a real SQLite log."""

from __future__ import annotations

from pathlib import Path

from shou import Agent, ScriptedModel, output_guardrail
from shou.session import Session, fork_session
from shou.store.sqlite import SQLiteStore


@output_guardrail
def no_numbers(answer: str) -> bool:
    return any(c.isdigit() for c in answer)


async def test_a_fork_at_a_blocked_answer_keeps_the_block_and_its_note(tmp_path: Path) -> None:
    store = SQLiteStore(tmp_path / "db")
    agent = Agent(ScriptedModel([{"text": "the code is 1234"}]), [], workspace=tmp_path, store=store,
                  guardrails=[no_numbers])
    result = await agent.arun("tell me the code", "s")
    assert result.status == "blocked"
    made, point = fork_session(store, "s", None, "f")
    assert made == "f" and point.status == "blocked" and point.closing == ()
    source, fork = Session("s", store), Session("f", store)
    assert [(m.role, m.text) for m in fork.messages] == [(m.role, m.text) for m in source.messages]
    assert "not handed over" in fork.messages[-1].text
    model = ScriptedModel([{"text": "ok"}])
    again = await Agent(model, [], workspace=tmp_path, store=store).arun("go on", "f")
    assert again.status == "completed"
    assert any("not handed over" in str(m.get("content")) for m in model.requests[0]["messages"])
    store.close()
