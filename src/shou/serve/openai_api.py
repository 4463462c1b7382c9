"""The OpenAI-compatible face: `POST /v1/chat/completions` runs an agent as if it were a model.

The last user message is the task; the earlier user and assistant messages become the history of a new
session (logged as completed runs, so the agent sees them as its own conversation); system and developer
messages are added to the agent's instructions. A `response_format` (`json_schema`, or `json_object`) asks
for a typed answer (agent/output.py), the content then being its JSON. The run is an ordinary API run (it is
listed, traced and streamed like any other), read back as chat completion chunks: the agent's text as content
deltas, its tool calls and results as SSE comments, which OpenAI clients skip.
"""

from __future__ import annotations

import secrets
import time
from collections.abc import AsyncIterator
from typing import Any

import orjson
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse

from ..agent.agent import Agent
from ..agent.emitter import Emitter
from ..events import (
    WAITING,
    ApprovalRequested,
    Event,
    InputRequested,
    ModelResponse,
    RunFinished,
    RunStarted,
    TextDelta,
    ToolCallFinished,
    ToolCallStarted,
)
from ..messages import Message
from ..session import Session, new_session_name
from ..usage import Usage
from .jobs import Refused
from .names import stored_name
from .schema import ChatMessage, ChatRequest
from .server import SSE_HEADERS, Server, read_json
from .stream import run_events
from .typed import check_output_schema, requested_schema

AGENT = "shou"
_COMMENT_CHARS = 500


def _text(message: ChatMessage) -> str:
    content = message.content
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    # each text part's text is a string: schema.ChatMessage refuses anything else with a 400
    return "".join(p["text"] for p in content if isinstance(p, dict) and p.get("type") == "text")


def split_request(messages: list[ChatMessage]) -> tuple[str, list[tuple[str, str]], str]:
    """`(task, history as (role, text), extra instructions)`; 400 when there is no user message to answer."""
    last = max((i for i, m in enumerate(messages) if m.role == "user"), default=-1)
    if last < 0 or not _text(messages[last]).strip():
        raise HTTPException(400, "messages: the last user message is the task, and there is none")
    instructions = "\n\n".join(_text(m) for m in messages if m.role in ("system", "developer") and _text(m))
    history = [(m.role, _text(m)) for m in messages[:last] if m.role in ("user", "assistant") and _text(m)]
    return _text(messages[last]), history, instructions


def seed_history(session: Session, history: list[tuple[str, str]], model: str, agent: Agent | None = None) -> None:
    """Log `history` in `session` as finished runs: each user turn a run, each assistant turn its answer;
    through `agent`'s emitter (its redaction and observers), as every event goes."""
    emitter = agent.emitter(session) if agent is not None else Emitter(session)
    record = emitter.emit
    run_id, step = "", 0
    for role, text in history:
        if role == "user":
            if run_id:
                record(RunFinished(run_id, "completed", "", step, Usage(), 0.0))
            run_id, step = f"hist_{secrets.token_hex(4)}", 0
            record(RunStarted(run_id, session.name, text, model, started_at=time.time()))
        elif run_id:
            step += 1
            record(ModelResponse(run_id, step, Message.assistant(text), Usage(), 0.0, "stop"))
    if run_id:
        record(RunFinished(run_id, "completed", "", step, Usage(), 0.0))
    emitter.commit()


async def models(request: Request) -> Response:
    srv: Server = request.app.state.server
    srv.user(request)
    names = [AGENT, *srv.runner.agent.agents]
    return JSONResponse({"object": "list", "data": [{"id": n, "object": "model", "created": 0, "owned_by": "shou"}
                                                     for n in names]})


async def chat_completions(request: Request) -> Response:
    srv: Server = request.app.state.server
    user = srv.user(request)
    body: ChatRequest = await read_json(request, ChatRequest)
    if body.model != AGENT and body.model not in srv.runner.agent.agents:
        raise HTTPException(404, f"no agent {body.model!r}; GET /v1/models lists them")
    task, history, instructions = split_request(body.messages)
    session = Session(stored_name(user, new_session_name()), srv.store)  # a new one, in the caller's namespace
    options: dict[str, Any] = {"instructions": instructions} if instructions else {}
    given = [text for text in (instructions, *(text for _, text in history)) if text]
    if given:  # the input guardrails check all the caller wrote, not only the last user message
        options["checked_input"] = "\n\n".join(given)
    if body.model != AGENT:
        options["agent"] = body.model
    schema = requested_schema(body.response_format)
    if schema is not None:  # a typed answer, as the client asked a model for structured output
        check_output_schema(schema, "response_format")
        options["output_schema"] = schema
    try:
        if history:
            seed_history(session, history, srv.runner.agent.model.name, srv.runner.agent)
        job = srv.runner.submit(user, session.name, task, options)
    except Refused:
        if history:  # nothing of a refused request is kept
            srv.store.delete(session.name)
        raise
    completion_id = "chatcmpl-" + job.run_id
    events = run_events(srv.store, srv.hub, srv.queue, job.session, job.run_id)
    if body.stream:
        usage = bool((body.stream_options or {}).get("include_usage"))
        return StreamingResponse(_chunks(events, completion_id, body.model, usage, typed=schema is not None),
                                 media_type="text/event-stream", headers=SSE_HEADERS)
    final: dict[str, Any] = {}
    asked: list[str] = []
    async for _, event in events:
        if isinstance(event, (ApprovalRequested, InputRequested)) and not event.parent:
            asked.append(_asked(event))
        elif isinstance(event, RunFinished) and event.run_id == job.run_id and not event.parent \
                and event.status in WAITING:
            # A chat client cannot approve or answer: it is told at once, with what the run waits for and
            # where to decide it, instead of waiting with no byte until the person decides elsewhere.
            return JSONResponse({"error": {
                "message": f"run {job.run_id} is waiting for a person ({'; '.join(asked) or event.status}): "
                           f"decide it on the web page or with GET /v1/approvals and POST /v1/approvals/CALL_ID "
                           f"(a question: POST /v1/runs/{job.run_id}/answer), then GET /v1/runs/{job.run_id} for "
                           "its answer", "type": event.status,
                "run_id": job.run_id}}, 409)
        elif isinstance(event, RunFinished) and event.run_id == job.run_id and not event.parent:
            final = {"answer": event.answer, "status": event.status, "usage": event.usage, "error": event.error}
        elif isinstance(event, dict) and event.get("type") == "run_finished":
            final = {"answer": event.get("answer", ""), "status": event.get("status"), "usage": Usage(),
                     "error": event.get("error")}
    if final.get("status") != "completed":
        return JSONResponse({"error": {"message": f"the run ended {final.get('status')}: {final.get('error')}",
                                       "type": "agent_error"}}, 502)
    return JSONResponse({
        "id": completion_id, "object": "chat.completion", "created": int(time.time()), "model": body.model,
        "choices": [{"index": 0, "message": {"role": "assistant", "content": final["answer"]},
                     "finish_reason": "stop"}],
        "usage": _usage(final["usage"]),
    })


def _asked(event: ApprovalRequested | InputRequested) -> str:
    """What a run waits for, in a line."""
    if isinstance(event, ApprovalRequested):
        return f"approval of {event.call.name} ({event.why})"[:300]
    return f"an answer to: {event.question}"[:300]


def _usage(usage: Usage) -> dict[str, int]:
    return {"prompt_tokens": usage.input_tokens, "completion_tokens": usage.output_tokens,
            "total_tokens": usage.input_tokens + usage.output_tokens}


def _chunk(completion_id: str, model: str, delta: dict[str, Any], finish: str | None = None,
           usage: dict[str, int] | None = None) -> bytes:
    data: dict[str, Any] = {"id": completion_id, "object": "chat.completion.chunk", "created": int(time.time()),
                            "model": model, "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]}
    if usage is not None:
        data["usage"] = usage
    return b"data: " + orjson.dumps(data) + b"\n\n"


def _comment(text: str) -> bytes:
    flat = " ".join(text.split())[:_COMMENT_CHARS]
    return f": {flat}\n\n".encode()


async def _chunks(events: AsyncIterator[tuple[int | None, Event | dict[str, Any]]], completion_id: str, model: str,
                  include_usage: bool, *, typed: bool = False) -> AsyncIterator[bytes]:
    """The run as chat completion chunks; `typed`: a typed answer, sent whole at the end (the model's text
    before it may be attempts that were turned down)."""
    yield _chunk(completion_id, model, {"role": "assistant", "content": ""})
    streamed: dict[int, str] = {}  # step -> the text sent for it
    async for _, event in events:
        if isinstance(event, dict):
            if event.get("type") == "run_finished":
                if event.get("answer"):
                    yield _chunk(completion_id, model, {"content": event["answer"]})
                break
            continue
        if event.parent:
            continue
        if isinstance(event, TextDelta):
            if typed:
                continue
            streamed[event.step] = streamed.get(event.step, "") + event.text
            yield _chunk(completion_id, model, {"content": event.text})
        elif isinstance(event, ToolCallStarted):
            yield _comment(f"tool {event.call.name} {event.call.arguments}")
        elif isinstance(event, ToolCallFinished):
            yield _comment(f"result {event.name}{' error' if event.is_error else ''} {event.content}")
        elif isinstance(event, (ApprovalRequested, InputRequested)):
            yield _comment(f"waiting for a person: {_asked(event)}")  # the run goes on once it is decided
        elif isinstance(event, RunFinished) and event.status not in WAITING:
            sent = streamed.get(event.steps, "")
            rest = event.answer[len(sent):] if event.answer.startswith(sent) else event.answer
            if rest:
                gap = "\n\n" if sent and rest == event.answer else ""
                yield _chunk(completion_id, model, {"content": gap + rest})
            if event.status != "completed":
                yield _comment(f"run ended {event.status}: {event.error or ''}")
            yield _chunk(completion_id, model, {}, "stop" if event.status == "completed" else "length")
            if include_usage:
                data = {"id": completion_id, "object": "chat.completion.chunk", "created": int(time.time()),
                        "model": model, "choices": [], "usage": _usage(event.usage)}
                yield b"data: " + orjson.dumps(data) + b"\n\n"
            break
    yield b"data: [DONE]\n\n"
