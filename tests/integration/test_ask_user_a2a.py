"""`ask_user` over A2A: a run that asks is an `input-required` task carrying the question, and the next
message to the task is the answer; the same task then goes on to its end (a2a-sdk client, real HTTP)."""

from __future__ import annotations

from pathlib import Path

from a2a.types import GetTaskRequest, Role, TaskState
from google.protobuf.json_format import MessageToDict

from .conftest import tool_messages
from .test_a2a_serve import ALICE, Agent, collect, event_data, message, served, start, status_of, text_of, tokens

__all__ = ["served", "tokens"]  # the fixtures, used by name


async def test_input_required_for_a_question_then_the_next_message_answers_it(
        serve, served, tmp_path: Path, workspace: Path, tokens: Path) -> None:
    srv = serve([{"tool_calls": [{"name": "ask_user", "arguments": {"question": "Which colour?",
                                                                     "choices": ["red", "blue"]}}]},
                 {"text": "Painted it blue."}])
    s = start(served, tmp_path, workspace, srv, tokens, "--ask-user")
    async with Agent(s.url, ALICE) as alice:
        seen = await collect(alice.send_message(message("Paint the shed")))
        task_id, context_id = seen[0].task.id, seen[0].task.context_id
        waiting = status_of(seen[-1])
        assert waiting.state == TaskState.TASK_STATE_INPUT_REQUIRED
        data = next(MessageToDict(p.data) for p in waiting.message.parts if p.WhichOneof("content") == "data")
        assert [(q["question"], q["choices"]) for q in data["questions"]] == [("Which colour?", ["red", "blue"])]
        assert "Which colour?" in text_of(waiting)
        assert (await alice.get_task(GetTaskRequest(id=task_id))).status.state == TaskState.TASK_STATE_INPUT_REQUIRED
        rest = await collect(alice.send_message(message("blue", task_id=task_id, context_id=context_id)))
    assert rest[0].task.id == task_id
    assert event_data(rest[0])["type"] == "input_answered" and rest[0].task.status.message.role == Role.ROLE_USER
    final = status_of(rest[-1])
    assert final.state == TaskState.TASK_STATE_COMPLETED and text_of(final) == "Painted it blue."
    assert tool_messages(srv.requests[1])[0]["content"] == "blue"
