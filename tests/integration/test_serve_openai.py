"""The official `openai` package, pointed at `shou serve`, uses a shou agent as if it were a model."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from ..fixtures.serving import Served, start_serve
from .conftest import shou_env

TOKEN = "client-token-0123456789"


def calc(expression: str) -> dict:
    return {"tool_calls": [{"name": "calculator", "arguments": {"expression": expression}}]}


@pytest.fixture
def served(serve, tmp_path: Path, workspace: Path) -> Iterator[tuple[Served, object]]:
    srv = serve([calc("123 * 45"), {"text": "123 * 45 = 5535"}, {"text": "You asked about 123 * 45."}])
    (tmp_path / "tokens").write_text(f"{TOKEN} carol\n")
    (tmp_path / "tokens").chmod(0o600)  # a tokens file must be its owner's alone
    s = start_serve(workspace, shou_env(tmp_path, srv), "--tokens", str(tmp_path / "tokens"))
    yield s, srv
    s.stop()


def test_openai_client_streams_an_answer_that_used_a_tool(served) -> None:
    import openai

    s, srv = served
    client = openai.OpenAI(base_url=s.url + "/v1", api_key=TOKEN, max_retries=0)
    assert "shou" in [m.id for m in client.models.list().data]
    stream = client.chat.completions.create(
        model="shou", stream=True, stream_options={"include_usage": True},
        messages=[{"role": "system", "content": "Answer in one line."},
                  {"role": "user", "content": "What is 123 * 45?"}])
    text, usage, finish = "", None, None
    for chunk in stream:
        if chunk.usage is not None:
            usage = chunk.usage
        for choice in chunk.choices:
            text += choice.delta.content or ""
            finish = choice.finish_reason or finish
    assert text == "123 * 45 = 5535" and finish == "stop"
    assert usage is not None and usage.prompt_tokens > 0 and usage.completion_tokens > 0
    # The agent really called the tool: its result went back to the model.
    tool_msgs = [m for m in srv.requests[1]["messages"] if m["role"] == "tool"]
    assert [m["content"] for m in tool_msgs] == ["5535"]
    assert "Answer in one line." in srv.requests[0]["messages"][0]["content"]  # system -> instructions
    # History: earlier turns reach the model as the conversation, the last user message is the task.
    reply = client.chat.completions.create(model="shou", messages=[
        {"role": "user", "content": "What is 123 * 45?"}, {"role": "assistant", "content": "5535"},
        {"role": "user", "content": "What did I ask?"}])
    assert reply.choices[0].message.content == "You asked about 123 * 45."
    roles = [(m["role"], m.get("content")) for m in srv.requests[2]["messages"] if m["role"] != "system"]
    assert roles == [("user", "What is 123 * 45?"), ("assistant", "5535"), ("user", "What did I ask?")]


def test_openai_client_errors(served) -> None:
    import openai

    s, _ = served
    with pytest.raises(openai.AuthenticationError):
        openai.OpenAI(base_url=s.url + "/v1", api_key="wrong-0123456789abcdef", max_retries=0).models.list()
    client = openai.OpenAI(base_url=s.url + "/v1", api_key=TOKEN, max_retries=0)
    with pytest.raises(openai.NotFoundError):
        client.chat.completions.create(model="gpt-4o", messages=[{"role": "user", "content": "hi"}])
    with pytest.raises(openai.BadRequestError):
        client.chat.completions.create(model="shou", messages=[{"role": "system", "content": "only this"}])


def test_a_run_that_waits_for_an_approval_is_said_so_at_once(serve, tmp_path: Path, workspace: Path) -> None:
    # A chat completion whose agent asks to run a command the person must approve: the non-streamed answer
    # never came (no byte, no keep-alive) until the client gave up, and the stream said nothing of the wait.
    import httpx
    import openai

    config = tmp_path / "config"
    config.mkdir(exist_ok=True)
    (config / "shou.toml").write_text('[permissions]\nask = ["shell"]\n')
    shell = {"tool_calls": [{"name": "shell", "arguments": {"command": "echo hi"}}]}
    srv = serve([shell, {"text": "ran it"}, shell, {"text": "ran it again"}])
    (tmp_path / "tokens").write_text(f"{TOKEN} carol\n")
    (tmp_path / "tokens").chmod(0o600)
    s = start_serve(workspace, shou_env(tmp_path, srv), "--tokens", str(tmp_path / "tokens"))
    try:
        client = openai.OpenAI(base_url=s.url + "/v1", api_key=TOKEN, max_retries=0, timeout=60)
        with pytest.raises(openai.APIStatusError) as caught:
            client.chat.completions.create(model="shou", messages=[{"role": "user", "content": "run echo hi"}])
        assert caught.value.status_code == 409, caught.value
        message = str(caught.value)
        assert "waiting for a person" in message and "approval of shell" in message and "/v1/approvals" in message
        with s.client(TOKEN) as c:
            (waiting,) = c.get("/v1/approvals").json()["approvals"]
            assert c.post(f"/v1/approvals/{waiting['call_id']}", json={"allow": True}).status_code == 200
            run_id = message.split("run ", 1)[1].split()[0]
            deadline = time.monotonic() + 60
            while c.get(f"/v1/runs/{run_id}").json()["status"] != "completed":
                assert time.monotonic() < deadline, "the approved run never ended"
                time.sleep(0.05)  # the run's status, polled: the API has no event for it
            assert c.get(f"/v1/runs/{run_id}").json()["answer"] == "ran it"

            lines: list[str] = []
            body = {"model": "shou", "stream": True, "messages": [{"role": "user", "content": "again"}]}
            with httpx.stream("POST", s.url + "/v1/chat/completions", json=body, timeout=60,
                              headers={"Authorization": f"Bearer {TOKEN}"}) as r:
                for line in r.iter_lines():
                    lines.append(line)
                    if line.startswith(": waiting for a person: approval of shell"):
                        (waiting,) = c.get("/v1/approvals").json()["approvals"]
                        c.post(f"/v1/approvals/{waiting['call_id']}", json={"allow": True})
            assert any(line.startswith(": waiting for a person") for line in lines), lines
            data = [line for line in lines if line]
            assert data[-1] == "data: [DONE]" and any("ran it again" in line for line in data), lines
    finally:
        s.stop()
