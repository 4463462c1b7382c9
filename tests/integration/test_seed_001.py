"""Seed 001 in two processes: the user's name is saved to long-term memory, and recalled in a new process."""

from __future__ import annotations

from pathlib import Path

from .conftest import tool_messages


def test_name_is_remembered_across_processes(serve, shou, workspace: Path) -> None:
    fact = "The user's name is 一枫; call them 枫哥."
    srv = serve([
        {"tool_calls": [{"name": "save_memory", "arguments": {"content": fact}}]},
        {"text": "好的，枫哥！I will call you 枫哥 from now on."},
        {"text": "I should call you 枫哥."},
    ])
    first = shou("run", "My name is 一枫, call me 枫哥 from now on", server=srv)
    assert first.returncode == 0, first.stderr
    assert "saved" in tool_messages(srv.requests[1])[0]["content"].lower()
    assert (workspace / ".shou" / "memory.db").exists()
    # A new process, a new session: only long-term memory can carry the name over.
    second = shou("run", "what should you call me?", "--session", "fresh", server=srv, timeout=180)
    assert second.returncode == 0, second.stderr
    request = srv.requests[2]["messages"]
    assert [m["role"] for m in request] == ["system", "user"]  # no earlier conversation in this session
    assert "Recalled from long-term memory" in request[0]["content"] and "枫哥" in request[0]["content"]
