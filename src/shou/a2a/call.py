"""One conversation turn with a remote A2A agent: send a message, follow its task to where it stops.

The message is sent with the SDK's client (streaming when the card offers it, else a blocking send); the
task's updates are followed until it is completed, failed, canceled or rejected, or waits for input or
authentication, or the agent answered with a message. A stream that ends before that is followed by polling
the task. Everything happens within the agent's `timeout`: past it the task is asked to cancel (for at most
`CANCEL_GRACE` seconds) and the call ends with what it knew.

What the agent says comes from outside: the caller (shou.a2a.tool) hands it to the model marked untrusted.
Its text is gathered from the parts shou can show (text, data as JSON, text files' contents; other files are
named, never fetched), up to `ANSWER_CHARS`.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from .http import agent_client
from .spec import RemoteAgentSpec

if TYPE_CHECKING:
    from a2a.types import AgentCard, Part, StreamResponse, Task

__all__ = ["ANSWER_CHARS", "CANCEL_GRACE", "Outcome", "converse"]

CANCEL_GRACE = 3.0
POLL = 1.0
ANSWER_CHARS = 100_000
FILE_TEXT_CHARS = 20_000  # of one text file an agent sends inline
# TaskState names as A2A writes them on the wire (the proto's TASK_STATE_INPUT_REQUIRED is input-required).
ENDING = frozenset({"completed", "failed", "canceled", "rejected", "input-required", "auth-required"})
Progress = Callable[[str, str], None]  # (state, the status message's text)


@dataclass
class Outcome:
    """Where the remote task stopped: its `state` (an A2A state, `message` when the agent answered with a
    message and no task, `timeout` when the time ran out), what it said, and the ids to go on with."""

    state: str = "submitted"
    text: str = ""
    task_id: str = ""
    context_id: str = ""
    artifacts: dict[str, tuple[str, list[str]]] = field(default_factory=dict)  # id -> (name, texts)

    @property
    def answer(self) -> str:
        """The status message's text and the artifacts' texts, at most `ANSWER_CHARS`."""
        pieces = [self.text] if self.text else []
        for name, texts in self.artifacts.values():
            body = "".join(texts)
            if body:
                pieces.append(f"[artifact {name}]\n{body}" if name else body)
        joined = "\n\n".join(pieces)
        return joined if len(joined) <= ANSWER_CHARS else joined[:ANSWER_CHARS] + "\n[... cut]"


def state_name(state: int) -> str:
    """`TASK_STATE_INPUT_REQUIRED` -> `input-required`."""
    from a2a.types import TaskState

    return TaskState.Name(state).removeprefix("TASK_STATE_").lower().replace("_", "-")


def part_text(part: Part) -> str:
    """What the model is shown of one part."""
    kind = part.WhichOneof("content")
    name = part.filename or "a file"
    if kind == "text":
        return part.text
    if kind == "data":
        from google.protobuf.json_format import MessageToDict

        return json.dumps(MessageToDict(part.data), ensure_ascii=False)
    if kind == "raw":
        textual = part.media_type.startswith("text/") or part.media_type in ("application/json", "")
        if textual:
            try:
                text = part.raw.decode("utf-8")
            except UnicodeDecodeError:
                text = None
            if text is not None:
                cut = text if len(text) <= FILE_TEXT_CHARS else text[:FILE_TEXT_CHARS] + "\n[... cut]"
                return f"[file {name}]\n{cut}"
        return f"[file {name} ({part.media_type or 'bytes'}), {len(part.raw):,} bytes, not shown]"
    if kind == "url":
        return f"[file {name} at {part.url[:300]}, not fetched]"
    return ""


def parts_text(parts: Any) -> str:
    """The parts' texts, one after another."""
    return "\n".join(t for t in (part_text(p) for p in parts) if t)


class _Follow:
    """What the updates of one task told so far."""

    def __init__(self, progress: Progress) -> None:
        self.outcome = Outcome()
        self.progress = progress
        self.done = False
        self._last: tuple[str, str] = ("", "")

    def take(self, response: StreamResponse) -> None:
        kind = response.WhichOneof("payload")
        if kind == "task":
            self.task(response.task)
        elif kind == "status_update":
            update = response.status_update
            self._ids(update.task_id, update.context_id)
            self.status(update.status)
        elif kind == "artifact_update":
            update = response.artifact_update
            self._ids(update.task_id, update.context_id)
            self.artifact(update.artifact, update.append)
        elif kind == "message":  # an answer without a task: nothing more will come
            self._ids(response.message.task_id, response.message.context_id)
            self.outcome.state, self.outcome.text, self.done = "message", parts_text(response.message.parts), True

    def task(self, task: Task) -> None:
        self._ids(task.id, task.context_id)
        self.outcome.artifacts.clear()
        for artifact in task.artifacts:
            self.artifact(artifact, append=False)
        self.status(task.status)

    def artifact(self, artifact: Any, append: bool) -> None:
        key = artifact.artifact_id or str(len(self.outcome.artifacts))
        name, texts = self.outcome.artifacts.get(key, (artifact.name, []))
        if not append:
            texts = []
        texts.append(parts_text(artifact.parts))
        self.outcome.artifacts[key] = (artifact.name or name, texts)

    def status(self, status: Any) -> None:
        state = state_name(status.state)
        text = parts_text(status.message.parts) if status.HasField("message") else ""
        self.outcome.state = state
        if text:
            self.outcome.text = text
        if (state, text) != self._last:
            self._last = (state, text)
            self.progress(state, text)
        self.done = state in ENDING

    def _ids(self, task_id: str, context_id: str) -> None:
        self.outcome.task_id = task_id or self.outcome.task_id
        self.outcome.context_id = context_id or self.outcome.context_id


async def converse(spec: RemoteAgentSpec, card: AgentCard, message: str, *, task_id: str = "",
                   context_id: str = "", progress: Progress = lambda state, text: None) -> Outcome:
    """Send `message` (to task `task_id` / context `context_id` when given) and follow the task to where it
    stops, within `spec.timeout`. Raises the SDK's errors (`A2AClientError`, `A2AError`) and `ValueError`
    when the card and the client share no transport; returns `Outcome(state="timeout")` when time ran out."""
    from a2a.client import ClientConfig, ClientFactory
    from a2a.types import GetTaskRequest, Message, Part, Role, SendMessageRequest

    http = agent_client(spec)
    follow = _Follow(progress)
    sent = Message(message_id=uuid.uuid4().hex, role=Role.ROLE_USER, parts=[Part(text=message)],
                   task_id=task_id, context_id=context_id)
    try:
        client = ClientFactory(ClientConfig(httpx_client=http, streaming=True,
                                            supported_protocol_bindings=["JSONRPC", "HTTP+JSON"])).create(card)
        try:
            async with asyncio.timeout(spec.timeout):
                async with contextlib.aclosing(client.send_message(SendMessageRequest(message=sent))) as stream:
                    async for response in stream:
                        follow.take(response)
                        if follow.done:
                            break
                while not follow.done:  # the stream ended early, or the agent does not stream: ask
                    if not follow.outcome.task_id:
                        raise ValueError("the agent answered with neither a task nor a message")
                    await asyncio.sleep(POLL)
                    follow.task(await client.get_task(GetTaskRequest(id=follow.outcome.task_id)))
        except TimeoutError:
            follow.outcome.state = "timeout"
            await _cancel(client, follow.outcome.task_id)
        return follow.outcome
    finally:
        await http.aclose()


async def _cancel(client: Any, task_id: str) -> None:
    """Ask the agent to cancel a task the call no longer waits for (best effort, briefly)."""
    if not task_id:
        return
    from a2a.types import CancelTaskRequest

    with contextlib.suppress(Exception):
        async with asyncio.timeout(CANCEL_GRACE):
            await client.cancel_task(CancelTaskRequest(id=task_id))
