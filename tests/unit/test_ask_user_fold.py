"""The questions fold (folds/questions.py) on every prefix of a run that asks, waits, is answered and goes on,
read back from SQLite as a restarted process reads it; `answer()` and `question_of()` refuse what they must."""

from __future__ import annotations

from pathlib import Path

import pytest

from shou.agent.asking import MAX_ANSWER, answer, question_of
from shou.events import (
    InputAnswered,
    InputRequested,
    ModelResponse,
    RunFinished,
    RunResumed,
    RunStarted,
    ToolCallFinished,
    ToolCallStarted,
)
from shou.messages import Message, ToolCall
from shou.session import Session
from shou.store.sqlite import SQLiteStore
from shou.usage import Usage

CALL = ToolCall("c1", "ask_user", '{"question": "Which colour?", "choices": ["red", "blue"]}')
LOG = [
    RunStarted("r1", "s", "paint the shed", "m"),
    ModelResponse("r1", 1, Message.assistant("", tool_calls=(CALL,)), Usage(), 0.1),
    InputRequested("r1", 1, "c1", "Which colour?", ("red", "blue"), 1.0),
    RunFinished("r1", "waiting_input", "", 1, Usage(), 0.1, "1 question waits"),
    InputAnswered("r1", 1, "c1", "blue", "user:ada", 2.0),
    RunResumed("r1", "s", 1),
    ToolCallStarted("r1", 1, CALL),
    ToolCallFinished("r1", 1, "c1", "ask_user", "blue"),
    RunFinished("r1", "completed", "done", 2, Usage(), 0.2),
]


def expected(n: int) -> tuple[set[str], dict[str, str], bool]:
    """Open questions, answers waiting for their call, and whether the open run is one that stopped for a
    person (as for approvals, the flag stays until the run ends)."""
    asked = {"c1"} if 3 <= n < 5 else set()
    answers = {"c1": "blue"} if 5 <= n < 8 else {}
    return asked, answers, 4 <= n < len(LOG)


@pytest.mark.parametrize("n", range(len(LOG) + 1))
def test_every_prefix_folds_to_what_waits(tmp_path: Path, n: int) -> None:
    store = SQLiteStore(tmp_path / "shou.db", retention_days=None)
    try:
        writer = Session("s", store)
        for event in LOG[:n]:
            writer._write(event)
        writer.commit()
        for session in (writer, Session("s", store)):  # this process, and one started after a restart
            asked, answers, waiting = expected(n)
            assert set(session.pending_questions) == asked
            assert {k: v.answer for k, v in session.answers.items()} == answers
            run = session.open_run
            assert (run is not None and run.waiting) == waiting
            if n in (4, 5):  # the call keeps its place in the conversation: its result is to come
                assert [c.id for c in run.unanswered] == ["c1"]
    finally:
        store.close()


def test_answer_records_once_and_refuses_what_does_not_wait(tmp_path: Path) -> None:
    store = SQLiteStore(tmp_path / "shou.db", retention_days=None)
    try:
        session = Session("s", store)
        for event in LOG[:4]:
            session._write(event)
        session.commit()
        with pytest.raises(KeyError):
            answer(session, "other", "blue")
        with pytest.raises(ValueError, match="over the"):
            answer(session, "c1", "x" * (MAX_ANSWER + 1))
        asked = answer(session, "c1", "blue", "user:ada")
        assert asked.question == "Which colour?"
        assert Session("s", store).answers["c1"].answer == "blue"
        with pytest.raises(KeyError):  # answered: it waits no more
            answer(session, "c1", "red")
    finally:
        store.close()


@pytest.mark.parametrize("arguments, want", [
    ('{"question": " Which? ", "choices": ["a", "b"]}', ("Which?", ("a", "b"))),
    ('{"question": "Which?"}', ("Which?", ())),
    ('{"question": ""}', None),
    ('{"choices": ["a"]}', None),
    ('{"question": "Which?", "choices": "a"}', None),
    ('{"question": "Which?", "choices": [""]}', None),
    ('{"question": "Which?", "choices": ["x"] }'.replace('["x"]', str(["x"] * 11).replace("'", '"')), None),
    ("not json", None),
])
def test_question_of(arguments: str, want: object) -> None:
    assert question_of(arguments) == want


def test_a_run_that_ends_otherwise_leaves_no_question_open() -> None:
    session = Session()
    for event in [*LOG[:4], RunFinished("r1", "cancelled", "", 1, Usage(), 0.0, "cancelled while waiting")]:
        session._fold.apply(event)
    assert session.pending_questions == {} and session.answers == {}
