"""The A2A face of `shou serve`: the SDK's `RequestHandler` over the server's runner, queue and event log.

Not the SDK's `DefaultRequestHandler`: it runs an `AgentExecutor` inside the process that took the request and
keeps each task's events in an in-memory queue of that process, while a shou run is executed by whichever
replica claims it from the queue and its events are in the log. So each method maps onto what the REST API
does (shou.serve.app), through the same runner, queue, decisions and event streams, and answers from the
queue and the log alone (shou.serve.a2a_tasks): any replica, after any restart, answers the same.

- A message without `taskId` starts a run (a new task) in the session of its context, keyed by the caller
  and the `contextId` (one is made up when it has none): a later message with that `contextId` continues
  the same conversation. Its text parts (and data parts, as JSON) are the task; `metadata.agent` names an
  `[agents.NAME]` agent, `metadata.max_steps`, `token_budget` and `max_cost` (numbers within the REST API's
  bounds: anything else is invalid params) may only lower the operator's limits, as the REST API's options do.
  The caller's quota and a busy context are refused as there.
- A message to a task that is `input-required` (its run waits for approval of calls) decides them: "approve"
  or "deny" as its first word (the rest is the reason), or a data part `{"approve": bool, "reason": str,
  "call_id": str}`; the run goes on in the same task. A message to a task still working, or ended, is refused.
- Streams (`SendStreamingMessage`, `SubscribeToTask`) start with the task as it stands, then a status update
  per stored event after it (each with its event id), artifacts, and the last status; they end when the
  task ends or waits for input. Resubscribing replays from the log after the snapshot it starts with, as the
  REST stream's `Last-Event-ID` does: nothing is missed, nothing repeated.
- Cancel is the run's cancel; the answer waits up to `CANCEL_WAIT` seconds for the run to stop.
- Another user's task is not found; every call needs a token (shou.serve.a2a_routes).
- A request with a NUL character in any of its strings is invalid params, as the REST API refuses one
  (shou.serve.a2a_requests reads and checks a request before any method acts on it).
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncGenerator
from typing import Any

from a2a.server.context import ServerCallContext
from a2a.server.request_handlers import RequestHandler, validate_request_params
from a2a.types import (
    AgentCard,
    CancelTaskRequest,
    DeleteTaskPushNotificationConfigRequest,
    GetExtendedAgentCardRequest,
    GetTaskPushNotificationConfigRequest,
    GetTaskRequest,
    ListTaskPushNotificationConfigsRequest,
    ListTaskPushNotificationConfigsResponse,
    ListTasksRequest,
    ListTasksResponse,
    Message,
    SendMessageRequest,
    SubscribeToTaskRequest,
    Task,
    TaskArtifactUpdateEvent,
    TaskPushNotificationConfig,
    TaskState,
    TaskStatusUpdateEvent,
)
from a2a.utils.errors import (
    InvalidParamsError,
    InvalidRequestError,
    PushNotificationNotSupportedError,
    TaskNotCancelableError,
    TaskNotFoundError,
    UnsupportedOperationError,
)
from a2a.utils.task import apply_history_length, validate_history_length
from google.protobuf.json_format import MessageToDict
from pydantic import ValidationError

from ..agent.limits import MAX_TASK_CHARS
from ..events import ApprovalRequested, Event, InputRequested, RunFinished
from ..store.locks import SessionBusy
from .a2a_card import agent_card
from .a2a_requests import _Metadata, check_request, decision_of, message_text, session_for
from .a2a_tasks import artifacts_of, context_of, ending_status, is_final, pending_calls, task_of, update_of
from .answering import answer_question
from .deciding import decide_calls
from .jobs import Job, Refused
from .server import Server, whole_number
from .stream import run_events

__all__ = ["CANCEL_WAIT", "ShouRequestHandler", "session_for"]

CANCEL_WAIT = 15.0
ENDED = frozenset({TaskState.TASK_STATE_COMPLETED, TaskState.TASK_STATE_FAILED, TaskState.TASK_STATE_CANCELED,
                   TaskState.TASK_STATE_REJECTED})
A2AEvent = Task | Message | TaskStatusUpdateEvent | TaskArtifactUpdateEvent


class ShouRequestHandler(RequestHandler):
    """Answers A2A requests for the server `srv` (its runner, queue, store and workspace)."""

    def __init__(self, srv: Server) -> None:
        self.srv = srv

    # ------------------------------------------------------------------ helpers

    @staticmethod
    def _caller(context: ServerCallContext) -> tuple[str, str]:
        user = context.state.get("shou.user")
        if not user:  # every route authenticates first (a2a_routes); this is a second lock, not the first
            raise InvalidRequestError(message="no authenticated caller")
        return str(user), str(context.state.get("base_url", ""))

    def _job(self, task_id: str, user: str) -> Job:
        job = self.srv.queue.get(task_id, user) if task_id else None
        if job is None:
            raise TaskNotFoundError(message=f"no task {task_id[:100]!r}")
        return job

    def _rows(self, job: Job, after: int = 0) -> list[tuple[int, Event]]:
        return self.srv.store.run_rows(job.session, job.run_id, after)

    def _task(self, job: Job, base: str, rows: list[tuple[int, Event]] | None = None) -> Task:
        return task_of(job, self._rows(job) if rows is None else rows, self.srv.workspace, base,
                       redactor=self.srv.redactor)

    def _options(self, params: SendMessageRequest) -> dict[str, Any]:
        """The run options a message's metadata asks for (a named agent, lower limits), checked by the REST API's
        own field definitions (`_Metadata`), so that the two faces take the same values."""
        meta = {**MessageToDict(params.metadata), **MessageToDict(params.message.metadata)}
        try:
            asked = _Metadata.model_validate(meta)
        except ValidationError as e:
            first = e.errors(include_input=False, include_url=False)[0]
            where = ".".join(str(p) for p in first["loc"])
            raise InvalidParamsError(message=f"metadata.{where}: {first['msg']}") from None
        options: dict[str, Any] = asked.model_dump(exclude_none=True, exclude={"agent"})
        if asked.agent not in (None, "", "shou"):
            if asked.agent not in self.srv.runner.agent.agents:
                raise InvalidParamsError(message=f"no agent {asked.agent[:64]!r}; the card's skills name them")
            options["agent"] = asked.agent
        return options

    async def _begin(self, params: SendMessageRequest, user: str, base: str) -> tuple[Job, int, Task]:
        """The run a message starts or resumes, the event id its stream goes on after, and the task as the
        stream opens with it."""
        message = params.message
        if message.task_id:
            return self._answer(message, user, base)
        task = message_text(message)
        if not task.strip():
            raise InvalidParamsError(message="the message has no text: say what the agent is to do")
        if len(task) > MAX_TASK_CHARS:
            raise InvalidParamsError(message=f"the message is {len(task):,} characters; at most {MAX_TASK_CHARS:,}")
        context_id = message.context_id or uuid.uuid4().hex
        options = {**self._options(params), "a2a_context": context_id}
        try:
            job = self.srv.runner.submit(user, session_for(user, context_id), task, options)
        except Refused as e:
            if e.status == 409:
                raise InvalidRequestError(message=f"context {context_id[:100]!r} has a task under way: answer or "
                                                  "cancel it first") from None
            raise InvalidRequestError(message=str(e)) from None
        return job, 0, self._task(job, base, [])

    def _answer(self, message: Message, user: str, base: str) -> tuple[Job, int, Task]:
        """A message to an existing task: the decision on the calls it waits on."""
        job = self._job(message.task_id, user)
        if message.context_id and message.context_id != context_of(job):
            raise InvalidParamsError(message=f"task {job.run_id} is not of context {message.context_id[:100]!r}")
        if job.status == "waiting_input":
            return self._reply(job, message, user, base)
        if job.status != "waiting_approval":
            what = "still working" if job.status in ("queued", "running") else f"ended ({job.status})"
            raise UnsupportedOperationError(message=f"task {job.run_id} is {what}: it takes no message. Send a new "
                                                    "message with its contextId (and no taskId) to go on")
        allow, reason, call_id = decision_of(message)
        waiting = [r.call.id for r in pending_calls(self._rows(job), job.run_id) if isinstance(r, ApprovalRequested)]
        ids = [c for c in waiting if c == call_id] if call_id else waiting
        if not ids:
            raise InvalidParamsError(message=f"no call {call_id!r} waits in task {job.run_id}" if call_id else
                                     f"nothing waits for a decision in task {job.run_id}")
        try:
            decide_calls(self.srv, job.session, ids, allow, reason, f"a2a:{user}")
        except SessionBusy as e:
            raise InvalidRequestError(message=f"{e}; try again") from None
        except KeyError as e:
            raise InvalidRequestError(message=f"call {e.args[0]!r} was decided meanwhile") from None
        rows = self._rows(job)
        return job, max((i for i, _ in rows), default=0), self._task(job, base, rows)

    def _reply(self, job: Job, message: Message, user: str, base: str) -> tuple[Job, int, Task]:
        """A message to a task waiting for input: the answer to the question it asked."""
        text = message_text(message)
        asked = [q for q in pending_calls(self._rows(job), job.run_id) if isinstance(q, InputRequested)]
        if not asked:
            raise InvalidParamsError(message=f"nothing waits for an answer in task {job.run_id}")
        if not text.strip():
            raise InvalidParamsError(message="the message has no text: write your answer")
        try:
            answer_question(self.srv, job.session, asked[0].call_id, text, f"a2a:{user}")
        except SessionBusy as e:
            raise InvalidRequestError(message=f"{e}; try again") from None
        except (KeyError, ValueError) as e:
            raise InvalidRequestError(message=f"not answered: {e}") from None
        rows = self._rows(job)
        return job, max((i for i, _ in rows), default=0), self._task(job, base, rows)

    async def _follow(self, job: Job, after: int, base: str) -> AsyncGenerator[A2AEvent, None]:
        """The task's updates from the events stored after id `after`, until it ends or waits for input."""
        task_id, context_id = job.run_id, context_of(job)
        async for row_id, event in run_events(self.srv.store, self.srv.hub, self.srv.queue, job.session, task_id,
                                              after):
            if isinstance(event, dict):  # a keep-alive, or the end the queue made of a run that never logged
                if is_final(event, task_id):
                    yield TaskStatusUpdateEvent(task_id=task_id, context_id=context_id,
                                                status=ending_status(event, (), task_id, context_id))
                    return
                continue
            if row_id is None:  # a streaming fragment: not stored, so not part of the task
                continue
            if is_final(event, task_id):
                assert isinstance(event, RunFinished)
                rows = self._rows(job)
                if event.status == "completed":
                    for artifact in artifacts_of(rows, self.srv.workspace, base, self.srv.redactor):
                        yield TaskArtifactUpdateEvent(task_id=task_id, context_id=context_id, artifact=artifact,
                                                      last_chunk=True)
                final = TaskStatusUpdateEvent(task_id=task_id, context_id=context_id, status=ending_status(
                    event, pending_calls(rows, task_id), task_id, context_id, row_id))
                final.metadata.update({"event_id": row_id})
                yield final
                return
            update = update_of(row_id, event, task_id, context_id)
            if update is not None:
                yield update

    # ------------------------------------------------------------------ messages

    @validate_request_params
    async def on_message_send(self, params: SendMessageRequest, context: ServerCallContext) -> Task | Message:
        """Start or answer a task and wait until it ends or waits for input (unless `returnImmediately`)."""
        check_request(params)  # first in every method: an id with a NUL must not even reach the store's lookup
        user, base = self._caller(context)
        validate_history_length(params.configuration)
        job, after, first = await self._begin(params, user, base)
        if not params.configuration.return_immediately:
            async for _ in self._follow(job, after, base):
                pass
        if params.configuration.return_immediately:
            return apply_history_length(first, params.configuration)
        return apply_history_length(self._task(self.srv.queue.get(job.run_id) or job, base), params.configuration)

    @validate_request_params
    async def on_message_send_stream(self, params: SendMessageRequest, context: ServerCallContext
                                     ) -> AsyncGenerator[A2AEvent, None]:
        """Start or answer a task and stream it: the task, then its updates until it ends or waits for input."""
        check_request(params)
        user, base = self._caller(context)
        validate_history_length(params.configuration)
        job, after, first = await self._begin(params, user, base)
        yield apply_history_length(first, params.configuration)
        if first.status.state in ENDED or first.status.state == TaskState.TASK_STATE_INPUT_REQUIRED:
            return
        async for event in self._follow(job, after, base):
            yield event

    @validate_request_params
    async def on_subscribe_to_task(self, params: SubscribeToTaskRequest, context: ServerCallContext
                                   ) -> AsyncGenerator[A2AEvent, None]:
        """The task as it stands (its history: every event so far), then its updates after that."""
        check_request(params)
        user, base = self._caller(context)
        job = self._job(params.id, user)
        rows = self._rows(job)
        task = self._task(job, base, rows)
        if task.status.state in ENDED:
            raise UnsupportedOperationError(message=f"task {job.run_id} has ended ({TaskState.Name(task.status.state)})"
                                                    ": nothing more will come; GetTask returns it whole")
        yield task
        if task.status.state == TaskState.TASK_STATE_INPUT_REQUIRED:
            return
        async for event in self._follow(job, max((i for i, _ in rows), default=0), base):
            yield event

    # ------------------------------------------------------------------ tasks

    @validate_request_params
    async def on_get_task(self, params: GetTaskRequest, context: ServerCallContext) -> Task | None:
        """The task, from the queue and the log."""
        check_request(params)
        user, base = self._caller(context)
        validate_history_length(params)
        return apply_history_length(self._task(self._job(params.id, user), base), params)

    async def on_list_tasks(self, params: ListTasksRequest, context: ServerCallContext) -> ListTasksResponse:
        """The caller's newest tasks (at most 100 looked at), of a context and a state when asked."""
        check_request(params)
        user, base = self._caller(context)
        validate_history_length(params)
        size = params.page_size or 50
        if not 1 <= size <= 100:
            raise InvalidParamsError(message="pageSize is 1 to 100")
        start = whole_number(params.page_token) or 0  # a token is our own offset; any other starts over
        jobs = [j for j in self.srv.queue.runs(user) if not params.context_id or context_of(j) == params.context_id]
        tasks = []
        for job in jobs:
            full = params.history_length > 0 or params.include_artifacts
            task = task_of(job, self._rows(job) if full else [], self.srv.workspace, base, history=full,
                           redactor=self.srv.redactor)
            if params.status and task.status.state != params.status:
                continue
            tasks.append(apply_history_length(task, params) if full else task)
        page = tasks[start:start + size]
        more = start + size < len(tasks)
        return ListTasksResponse(tasks=page, page_size=size, total_size=len(tasks),
                                 next_page_token=str(start + size) if more else "")

    @validate_request_params
    async def on_cancel_task(self, params: CancelTaskRequest, context: ServerCallContext) -> Task | None:
        """Cancel the task's run, and answer with the task once it stopped (or after `CANCEL_WAIT` s)."""
        check_request(params)
        user, base = self._caller(context)
        job = self._job(params.id, user)
        rows = self._rows(job)
        if self._task(job, base, rows).status.state in ENDED:
            raise TaskNotCancelableError(message=f"task {job.run_id} has ended already")
        self.srv.runner.cancel(job)
        try:
            async with asyncio.timeout(CANCEL_WAIT):
                async for _ in self._follow(job, max((i for i, _ in rows), default=0), base):
                    pass
        except TimeoutError:
            pass
        return self._task(self.srv.queue.get(job.run_id) or job, base)

    # ------------------------------------------------------------------ what shou does not offer

    async def on_create_task_push_notification_config(self, params: TaskPushNotificationConfig,
                                                      context: ServerCallContext) -> TaskPushNotificationConfig:
        """Push notifications are not offered (the card says so): subscribe to a task's stream instead."""
        raise PushNotificationNotSupportedError

    async def on_get_task_push_notification_config(self, params: GetTaskPushNotificationConfigRequest,
                                                   context: ServerCallContext) -> TaskPushNotificationConfig:
        """Not offered."""
        raise PushNotificationNotSupportedError

    async def on_list_task_push_notification_configs(self, params: ListTaskPushNotificationConfigsRequest,
                                                     context: ServerCallContext
                                                     ) -> ListTaskPushNotificationConfigsResponse:
        """Not offered."""
        raise PushNotificationNotSupportedError

    async def on_delete_task_push_notification_config(self, params: DeleteTaskPushNotificationConfigRequest,
                                                      context: ServerCallContext) -> None:
        """Not offered."""
        raise PushNotificationNotSupportedError

    async def on_get_extended_agent_card(self, params: GetExtendedAgentCardRequest,
                                         context: ServerCallContext) -> AgentCard:
        """The card with the tools of each skill (for a caller with a token)."""
        _, base = self._caller(context)
        return agent_card(self.srv.runner.agent, base, extended=True)
