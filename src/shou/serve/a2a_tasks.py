"""shou runs as A2A tasks: a run's row in the queue and its stored events, read as the SDK's types.

A task is a run (`Task.id` is the run id); its context is the A2A `contextId` the run was asked for in
(kept in the run's options), or, for a run made through the REST API, its session's name. Everything here
is derived from the queue and the event log, so any replica answers the same, after any restart:

- each stored event of the run (and its sub-runs) that a person follows (`SHOWN`) is one status message:
  its text says what happened in a line, a data part holds the event as the log has it (redacted), and its
  metadata the event's id (`event_id`), the same id the REST API's event stream gives it;
- a task's history is those messages in order, the first the run's task (role user); its status is the
  last one's, or how the run ended: completed with the answer, input-required with the calls waiting for a
  decision and how to give it, failed or canceled with why;
- the files the run wrote (`write_file`, `edit_file`) are its artifacts, as they are now in the workspace:
  inline up to `INLINE_BYTES`, else a link to `GET /v1/files/content` (which needs the caller's token).
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from pathlib import Path
from typing import Any
from urllib.parse import quote

from a2a.types import Artifact, Message, Part, Role, Task, TaskState, TaskStatus, TaskStatusUpdateEvent
from google.protobuf.json_format import ParseDict
from google.protobuf.struct_pb2 import Struct, Value

from ..events import (
    ApprovalDecided,
    ApprovalRequested,
    Event,
    Handoff,
    InputAnswered,
    InputRequested,
    ModelResponse,
    Notice,
    PlanUpdated,
    Reviewed,
    RunFinished,
    RunResumed,
    RunStarted,
    ToolCallFinished,
    ToolCallStarted,
)
from ..redact import Redactor
from ..tools.executor import parse_arguments
from .jobs import Job
from .names import shown_name

__all__ = ["INLINE_BYTES", "SHOWN", "artifacts_of", "context_of", "ending_status", "event_message", "is_final",
           "pending_calls", "task_of", "update_of", "written_paths"]

# The event types a task shows, each as one status message (the rest are a trace's: requests, step ends).
SHOWN = frozenset({"run_started", "run_resumed", "model_response", "tool_call_started", "tool_call_finished",
                   "approval_requested", "approval_decided", "input_requested", "input_answered", "notice",
                   "plan", "review", "handoff", "run_finished"})
INLINE_BYTES = 256 * 1024
LINE_CHARS = 300
_WRITERS = ("write_file", "edit_file")
_FAILED = TaskState.TASK_STATE_FAILED
_STATE = {"queued": TaskState.TASK_STATE_SUBMITTED, "running": TaskState.TASK_STATE_WORKING,
          "waiting_approval": TaskState.TASK_STATE_INPUT_REQUIRED,
          "waiting_input": TaskState.TASK_STATE_INPUT_REQUIRED, "completed": TaskState.TASK_STATE_COMPLETED,
          "cancelled": TaskState.TASK_STATE_CANCELED, "blocked": TaskState.TASK_STATE_REJECTED}


def context_of(job: Job) -> str:
    """The task's context: the A2A contextId it was asked for in, or its session's name (the user's own)."""
    return str(job.options.get("a2a_context") or shown_name(job.user, job.session))


def _short(text: str, limit: int = LINE_CHARS) -> str:
    flat = " ".join(text.split())
    return flat if len(flat) <= limit else flat[: limit - 1] + "…"


def _call_line(name: str, arguments: str) -> str:
    args, _ = parse_arguments(arguments)
    shown = ", ".join(f"{k}={json.dumps(v, ensure_ascii=False)}" for k, v in args.items()) if args else arguments
    return f"{name}({_short(shown, 200)})"


def _line(event: Event) -> str:
    """What happened, in a line."""
    sub = "↳ " if event.parent else ""
    if isinstance(event, RunStarted):
        return f"{sub}sub-run {event.run_id} started: {_short(event.task)}" if event.parent else event.task
    if isinstance(event, RunResumed):
        return f"{sub}resumed at step {event.step}"
    if isinstance(event, ModelResponse):
        calls = ", ".join(c.name for c in event.message.tool_calls)
        return sub + (_short(event.message.text) if event.message.text.strip() else f"calls {calls}")
    if isinstance(event, ToolCallStarted):
        return f"{sub}→ {_call_line(event.call.name, event.call.arguments)}"
    if isinstance(event, ToolCallFinished):
        return f"{sub}← {event.name}{' (error)' if event.is_error else ''}: {_short(event.content)}"
    if isinstance(event, ApprovalRequested):
        return f"{sub}{_call_line(event.call.name, event.call.arguments)} waits for approval ({event.why})"
    if isinstance(event, ApprovalDecided):
        return f"{sub}{'allowed' if event.allow else 'denied'}: {event.name} by {event.by} ({_short(event.reason)})"
    if isinstance(event, InputRequested):
        return f"{sub}the agent asks: {_short(event.question)}" + (
            f" (choices: {'; '.join(event.choices)})" if event.choices else "")
    if isinstance(event, InputAnswered):
        return f"{sub}answered by {event.by}: {_short(event.answer)}"
    if isinstance(event, Notice):
        return f"{sub}! {_short(event.text)}"
    if isinstance(event, PlanUpdated):
        return f"{sub}plan (revision {event.revision}): " + " ".join(
            f"{n}. [{s.status}] {_short(s.text, 80)}" for n, s in enumerate(event.steps, 1))
    if isinstance(event, Handoff):
        why = f": {_short(event.reason)}" if event.reason else ""
        return f"{sub}{event.source} hands over to {event.target}{why}"
    if isinstance(event, Reviewed):
        return f"{sub}review: {'approved' if event.approved else 'not approved: ' + _short(event.feedback)}"
    if isinstance(event, RunFinished):
        return f"{sub}sub-run {event.run_id} ended {event.status}" + (f": {_short(event.error)}" if event.error else "")
    return event.type


def _struct(data: dict[str, Any]) -> Struct:
    out = Struct()
    out.update(data)
    return out


def _value(data: Any) -> Value:
    return ParseDict(data, Value())


def event_message(event_id: int, event: Event, task_id: str, context_id: str) -> Message:
    """The status message of one stored event (its id in the metadata, the event itself as data)."""
    user = isinstance(event, ApprovalDecided | InputAnswered) or (isinstance(event, RunStarted) and not event.parent)
    return Message(message_id=f"{task_id}-{event_id}", task_id=task_id, context_id=context_id,
                   role=Role.ROLE_USER if user else Role.ROLE_AGENT,
                   parts=[Part(text=_line(event)), Part(data=_value(event.to_dict()), media_type="application/json")],
                   metadata=_struct({"event_id": event_id, "type": event.type}))


def is_final(event: Event | dict[str, Any], run_id: str) -> bool:
    """Whether `event` is the run's own end (a wait for approval included: the task then waits for input)."""
    if isinstance(event, dict):
        return event.get("type") == "run_finished"
    return isinstance(event, RunFinished) and event.run_id == run_id and not event.parent


def update_of(event_id: int, event: Event, task_id: str, context_id: str) -> TaskStatusUpdateEvent | None:
    """A `working` status update for a stored event the task shows (None for the others)."""
    if event.type not in SHOWN or is_final(event, task_id):
        return None
    return TaskStatusUpdateEvent(
        task_id=task_id, context_id=context_id, metadata=_struct({"event_id": event_id}),
        status=TaskStatus(state=TaskState.TASK_STATE_WORKING, message=event_message(event_id, event, task_id,
                                                                                     context_id)))


def ending_status(end: RunFinished | dict[str, Any], waiting: Iterable[ApprovalRequested | InputRequested],
                  task_id: str, context_id: str, event_id: int = 0) -> TaskStatus:
    """The status a run's end (stored as event `event_id`, or made up by the queue: 0) gives its task;
    `waiting` are the calls a run that waits for approval waits on, and the questions one waiting for input
    asked."""
    status = end.status if isinstance(end, RunFinished) else str(end.get("status", "failed"))
    answer = end.answer if isinstance(end, RunFinished) else str(end.get("answer", ""))
    error = (end.error if isinstance(end, RunFinished) else end.get("error")) or ""

    def said(key: str, text: str, data: Any = None) -> Message:  # the end's own event, as every status message
        parts = [Part(text=text)]
        if isinstance(end, RunFinished):
            data = {**end.to_dict(), **(data or {})}
        if data is not None:
            parts.append(Part(data=_value(data), media_type="application/json"))
        meta = _struct({"event_id": event_id, "type": "run_finished"}) if event_id else None
        return Message(message_id=f"{task_id}-{event_id or key}", task_id=task_id, context_id=context_id,
                       role=Role.ROLE_AGENT, parts=parts, metadata=meta)

    if status == "completed":
        return TaskStatus(state=TaskState.TASK_STATE_COMPLETED, message=said("answer", answer))
    if status == "waiting_input":
        asked = [{"call_id": q.call_id, "question": q.question, "choices": list(q.choices)}
                 for q in waiting if isinstance(q, InputRequested)]
        lines = " ".join(q["question"] + (f" (choices: {'; '.join(q['choices'])})" if q["choices"] else "")
                         for q in asked)
        text = f"The agent asks: {lines or 'a question'} Reply in this task with a message: your answer."
        return TaskStatus(state=TaskState.TASK_STATE_INPUT_REQUIRED, message=said("asking", text,
                                                                                    {"questions": asked}))
    if status == "waiting_approval":
        calls = [{"call_id": r.call.id, "tool": r.call.name, "arguments": parse_arguments(r.call.arguments)[0]
                  or r.call.arguments, "why": r.why} for r in waiting if isinstance(r, ApprovalRequested)]
        lines = "; ".join(f"{_call_line(c['tool'], json.dumps(c['arguments']))} ({c['why']})" for c in calls)
        text = (f"Waiting for approval: {lines or 'a call'}. Reply in this task with a message saying \"approve\" "
                "or \"deny\" (a reason may follow), or with a data part {\"approve\": true|false, \"reason\": \"...\", "
                "\"call_id\": \"...\"} (without call_id the decision is for every waiting call).")
        return TaskStatus(state=TaskState.TASK_STATE_INPUT_REQUIRED, message=said("waiting", text,
                                                                                    {"approvals": calls}))
    state = _STATE.get(status, _FAILED) if status in ("cancelled", "blocked") else _FAILED  # blocked: rejected
    why = f"The run ended {status}" + (f": {error}" if error else "")
    return TaskStatus(state=state, message=said("end", why))


def pending_calls(rows: list[tuple[int, Event]], run_id: str) -> list[ApprovalRequested | InputRequested]:
    """The calls the run's last stop left waiting: requested after its last resumption and not decided (or,
    for questions, not answered)."""
    asked: dict[str, ApprovalRequested | InputRequested] = {}
    for _, event in rows:
        if isinstance(event, RunResumed | RunStarted) and event.run_id == run_id:
            asked.clear()
        elif isinstance(event, ApprovalRequested):
            asked[event.call.id] = event
        elif isinstance(event, InputRequested) and not event.parent:
            asked[event.call_id] = event
        elif isinstance(event, ApprovalDecided | InputAnswered):
            asked.pop(event.call_id, None)
    return list(asked.values())


def task_of(job: Job, rows: list[tuple[int, Event]], workspace: Path, base_url: str, *, history: bool = True,
            artifacts: bool = True, redactor: Redactor | None = None) -> Task:
    """The task of run `job` as its stored events `rows` (all of them, in order) say it stands."""
    task_id, context_id = job.run_id, context_of(job)
    last = max((i for i, _ in rows), default=0)
    messages: list[Message] = []
    status = TaskStatus(state=_STATE.get(job.status, _FAILED))
    for event_id, event in rows:
        if is_final(event, task_id):
            status = ending_status(event, pending_calls(rows, task_id), task_id, context_id, event_id)
            if history:  # the end is an event too: the last message of the history, as of the stream
                messages.append(status.message)
        elif event.type in SHOWN:
            if isinstance(event, RunStarted | RunResumed) and not event.parent:
                status = TaskStatus(state=TaskState.TASK_STATE_WORKING)
            message = event_message(event_id, event, task_id, context_id)
            if history:
                messages.append(message)
            if not isinstance(event, RunStarted) or event.parent:
                status = TaskStatus(state=status.state, message=message)
    if status.state == TaskState.TASK_STATE_INPUT_REQUIRED and rows and not pending_calls(rows, task_id):
        status = TaskStatus(state=TaskState.TASK_STATE_WORKING, message=status.message)  # decided: it goes on
    if not rows and job.status not in ("queued", "running"):  # it ended before it logged anything
        status = ending_status({"status": job.status, "answer": job.answer, "error": job.error}, (), task_id,
                               context_id)
    if not rows and history:
        messages.append(Message(message_id=f"{task_id}-task", task_id=task_id, context_id=context_id,
                                role=Role.ROLE_USER, parts=[Part(text=job.task)]))
    task = Task(id=task_id, context_id=context_id, status=status, history=messages,
                metadata=_struct({"event_id": last, "session": shown_name(job.user, job.session)}))
    if artifacts and status.state == TaskState.TASK_STATE_COMPLETED:
        task.artifacts.extend(artifacts_of(rows, workspace, base_url, redactor))
    return task


def written_paths(rows: Iterable[tuple[int, Event]]) -> list[str]:
    """The workspace paths the run's `write_file` and `edit_file` calls wrote, in the order first written.

    A call is matched by its id *and* its tool: ids repeat (a provider's, or the model's own choice), so a
    refused write followed by another tool's successful call under the same id is no write."""
    started: dict[str, str] = {}
    paths: list[str] = []
    for _, event in rows:
        if isinstance(event, ToolCallStarted):
            started.pop(event.call.id, None)  # an id used again starts over
            if event.call.name in _WRITERS:
                args, _ = parse_arguments(event.call.arguments)
                if args and isinstance(args.get("path"), str):
                    started[event.call.id] = args["path"]
        elif isinstance(event, ToolCallFinished):
            path = started.pop(event.call_id, None)
            if path is not None and not event.is_error and event.name in _WRITERS and path not in paths:
                paths.append(path)
    return paths


def artifacts_of(rows: Iterable[tuple[int, Event]], workspace: Path, base_url: str,
                 redactor: Redactor | None = None) -> list[Artifact]:
    """An artifact per file the run wrote, as the file is now: its bytes inline when small (every secret
    `redactor` knows replaced, as the files API serves them), else a link to the files API. What the files API
    does not serve (`.shou/`, the person's configuration folder) is never an artifact, whatever the log says."""
    from ..errors import ToolError
    from ..workspace import NotFound, open_file, relative_parts
    from .files_api import MAX_FILE_BYTES, content_type, refused

    out = []
    for path in written_paths(rows):
        try:
            if refused(workspace, relative_parts(workspace, path)) is not None:
                continue
            with open_file(workspace, path) as f:
                shown, size = f.shown, f.stat.st_size
                data = f.read(INLINE_BYTES) if size <= INLINE_BYTES else b""
        except (NotFound, ToolError, OSError):  # gone since, or outside the fence now: nothing to hand back
            continue
        data = redactor.in_bytes(data) if redactor is not None else data
        name = shown.rsplit("/", 1)[-1]
        link = f"{base_url}/v1/files/content?path={quote(shown, safe='/')}"
        kind = content_type(name, data).split(";", 1)[0] if data or not size else "application/octet-stream"
        part = Part(raw=data, filename=name, media_type=kind) if size <= INLINE_BYTES else \
            Part(url=link, filename=name, media_type=kind)
        note = "" if size <= MAX_FILE_BYTES else f" (over {MAX_FILE_BYTES:,} bytes: not served)"
        out.append(Artifact(artifact_id=f"file:{shown}", name=shown, description=f"{shown}, {size:,} bytes{note}",
                            parts=[part], metadata=_struct({"path": shown, "size": size, "url": link})))
    return out
