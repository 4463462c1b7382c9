"""`ask_user` outside a terminal: offered only when asked for, the run stops `waiting_input`, the question
survives the process, `shou answer` records the answer and `shou resume` gives it to the model."""

from __future__ import annotations

import json
from pathlib import Path

from .conftest import tool_messages


def ask(question: str, choices: list[str] | None = None) -> dict:
    args: dict = {"question": question}
    if choices is not None:
        args["choices"] = choices
    return {"tool_calls": [{"name": "ask_user", "arguments": args}]}


def offered(request: dict) -> list[str]:
    return [t["function"]["name"] for t in request.get("tools", [])]


def test_off_by_default_without_a_terminal(serve, shou) -> None:
    srv = serve([{"text": "done"}])
    r = shou("run", "hello", server=srv)
    assert r.returncode == 0, r.stderr
    assert "ask_user" not in offered(srv.requests[0])


def test_a_batch_run_waits_for_the_answer_and_resumes_with_it(serve, shou, workspace: Path) -> None:
    srv = serve([ask("Which colour?", ["red", "blue"]), {"text": "painting it blue"}])
    r = shou("run", "paint the shed", "-o", "ask_user", "true", "-s", "q1", server=srv)
    assert r.returncode == 1 and "waiting_input" in r.stderr, r.stderr
    assert "Which colour?" in r.stderr and "shou answer" in r.stderr
    assert "ask_user" in offered(srv.requests[0])
    assert json.loads(shou("sessions", "--json").stdout)[0]["status"] == "waiting_input"
    # Nothing waits in another session; a bad call id is refused; neither is a traceback.
    bad = shou("answer", "nope", "blue")
    assert bad.returncode == 2 and "no session 'nope'" in bad.stderr and "Traceback" not in bad.stderr
    bad = shou("answer", "q1", "blue", "--call", "x")
    assert bad.returncode == 2 and "no question 'x'" in bad.stderr
    ok = shou("answer", "q1", "blue")
    assert ok.returncode == 0, ok.stderr
    again = shou("answer", "q1", "green")
    assert again.returncode == 2 and "no question waits" in again.stderr  # answered already
    r = shou("resume", "q1", server=srv)  # no ask_user setting here: the recorded answer still goes through
    assert r.returncode == 0, r.stderr
    assert "painting it blue" in r.stdout
    assert len(srv.requests) == 2
    [result] = tool_messages(srv.requests[1])
    assert result["content"] == "blue"
    assert json.loads(shou("sessions", "--json").stdout)[0]["status"] == "completed"


def test_bad_questions_are_the_models_to_fix(serve, shou) -> None:
    srv = serve([{"tool_calls": [{"name": "ask_user", "arguments": {"choices": ["a"]}}]}, {"text": "ok"}])
    r = shou("run", "x", "-o", "ask_user", "true", server=srv)
    assert r.returncode == 0, r.stderr
    [result] = tool_messages(srv.requests[1])
    assert "question" in result["content"]  # the validation error names the missing argument
