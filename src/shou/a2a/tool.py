"""A remote A2A agent as a shou tool: `NAME(message, task_id?, context_id?)`.

The tool is offered as any other (its calls pass the permission policy, approvals, the timeout and the
untrusted-output mark of every tool call: shou.agent.toolpipe), its description from the configured one or
the card (shou.a2a.card). A call:

- reports the remote task as a sub-run of the calling run (shou.tools.base.RunEvents): a `run_started`
  (model `a2a:NAME`, task: the message), a `notice` of kind `a2a` per change of the task's state or status
  message (at most `MAX_NOTICES`), and a `run_finished`, all with `parent` set to the calling run. So
  `shou run` and the web page show it as they show a sub-agent, live: each notice is committed at once;
- returns the agent's answer with the task and context ids (to go on with it), marked untrusted;
- when the agent asks for input (`input-required`), returns its question as the result: the model answers
  by calling the tool again with the answer and those ids. `auth-required` is an error: the credentials
  are the configured headers, which the model cannot change;
- on failure, rejection, cancellation, a timeout, or a remote side that misbehaves (a card or reply over
  its bound, an endless stream, invalid JSON, a card that points elsewhere), returns an error result saying
  which, within the agent's timeout.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any

from ..events import Notice, RunFinished, RunStarted
from ..tools.base import NAME_RE, Tool, ToolContext, ToolResult
from ..usage import Usage
from .call import CANCEL_GRACE, Outcome, converse
from .card import CardError, card_for, describe
from .spec import RemoteAgentSpec

if TYPE_CHECKING:
    from a2a.types import AgentCard

    from ..tools.base import RunEvents

__all__ = ["MAX_NOTICES", "remote_tool", "remote_tools"]

MAX_NOTICES = 50  # progress notices of one call: a chatty agent must not fill the log
NOTICE_CHARS = 500
MESSAGE_CHARS = 400_000  # what one message to an agent may hold (a task's limit)
_SCHEMA = {
    "type": "object",
    "properties": {
        "message": {"type": "string", "maxLength": MESSAGE_CHARS,
                    "description": "What to ask or tell the agent, in full: it sees nothing of this conversation."},
        "task_id": {"type": "string", "maxLength": 200,
                    "description": "When answering a question the agent asked: the task_id it gave."},
        "context_id": {"type": "string", "maxLength": 200,
                       "description": "To continue an earlier conversation with the agent: the context_id it gave."},
    },
    "required": ["message"],
    "additionalProperties": False,
}


class _Report:
    """The remote task as a sub-run of the calling run (nothing when the call is made outside a run)."""

    def __init__(self, events: RunEvents | None, spec: RemoteAgentSpec, session: str, message: str) -> None:
        self.events = events
        self.sub_id = events.sub_id() if events is not None else ""
        self.parent = events.run_id if events is not None else ""
        self.started = time.perf_counter()
        self.notices = 0
        if events is not None:
            events.emit(RunStarted(self.sub_id, session, message, f"a2a:{spec.name}", started_at=time.time(),
                                   parent=self.parent))
            events.commit()

    def progress(self, state: str, text: str) -> None:
        if self.events is None or self.notices > MAX_NOTICES:
            return
        self.notices += 1
        flat = " ".join(text.split())
        shown = f"{state}: {flat}" if flat else state
        if self.notices > MAX_NOTICES:
            shown = f"(more updates of the remote task are not shown; the last: {state})"
        self.events.emit(Notice(self.sub_id, 0, "a2a", shown[:NOTICE_CHARS], parent=self.parent))
        self.events.commit()  # shown while the call still runs

    def end(self, status: str, answer: str, error: str | None) -> None:
        if self.events is None:
            return
        self.events.emit(RunFinished(self.sub_id, status, answer, 0, Usage(),  # type: ignore[arg-type]
                                     time.perf_counter() - self.started, error, parent=self.parent))


def _result(spec: RemoteAgentSpec, outcome: Outcome, details: dict[str, Any]) -> tuple[ToolResult, str, str | None]:
    """The tool's result for where the task stopped, and the sub-run's status and error."""
    name, ids = spec.name, f"task_id: {outcome.task_id or '-'}, context_id: {outcome.context_id or '-'}"
    answer = outcome.answer
    if outcome.state in ("completed", "message"):
        return ToolResult(f"{answer or '(the agent answered with nothing)'}\n\n[{ids}]", details=details), \
            "completed", None
    if outcome.state == "input-required":
        text = (f"The agent {name} needs more from you to go on ({ids}). To answer, call {name} again with your "
                f"answer as message and these task_id and context_id. It says:\n{answer or '(no question given)'}")
        return ToolResult(text, details=details), "completed", None
    if outcome.state == "timeout":
        why = f"did not finish within its timeout of {spec.timeout:g} s; its task was asked to cancel"
        return ToolResult.error(f"Error: the A2A agent {name} {why}. [{ids}]", details), "timeout", why
    if outcome.state == "auth-required":
        why = ("asks for authentication shou cannot give: the credentials it sends are the headers configured in "
               f"[a2a_agents.{name}]")
    else:
        why = f"ended its task {outcome.state}"
    return ToolResult.error(f"Error: the A2A agent {name} {why}. [{ids}]\n{answer}".rstrip(), details), "error", why


def remote_tool(spec: RemoteAgentSpec, card: AgentCard | None, problem: str = "") -> Tool:
    """The tool for `spec`'s agent; `card` when it was read (else it is read at the call, and `problem` says
    why it could not be read before)."""

    async def call(ctx: ToolContext, message: str, task_id: str = "", context_id: str = "") -> ToolResult:
        if not message.strip():
            return ToolResult.error("Error: give the agent a message: what to do, in full.")
        try:
            known = card if card is not None else await card_for(spec, fresh=True)
        except CardError as e:
            return ToolResult.error(f"Error: {e}")
        report = _Report(ctx.events if ctx is not None else None, spec, ctx.session if ctx else "", message)
        details: dict[str, Any] = {"agent": spec.name, "run_id": report.sub_id, "where": spec.where}
        status, error = "error", None
        try:
            outcome = await converse(spec, known, message, task_id=task_id, context_id=context_id,
                                     progress=report.progress)
            details.update(task_id=outcome.task_id, context_id=outcome.context_id, state=outcome.state)
            result, status, error = _result(spec, outcome, details)
            return result
        except BaseException as e:
            error = "the call was cancelled" if not isinstance(e, Exception) else _failure(e)
            status = "cancelled" if not isinstance(e, Exception) else "error"
            if isinstance(e, Exception):
                return ToolResult.error(f"Error: the A2A agent {spec.name} ({spec.where}) {error}", details)
            raise
        finally:
            report.end(status, "", error)

    return Tool(spec.name, describe(spec, card, problem), _SCHEMA, call, context_param="ctx",
                timeout=spec.timeout + CANCEL_GRACE + 2.0, untrusted_output=True)


def _failure(e: Exception) -> str:
    """What went wrong, in a sentence (the SDK's error messages say it; their class names say the rest)."""
    text = str(e).strip() or type(e).__name__
    if type(e).__name__ in ("TaskNotFoundError",):
        return f"does not know that task: {text}"
    if isinstance(e, ValueError) and "transport" in text:
        return f"offers no transport shou speaks: {text}"
    return f"failed: {text[:1000]}"


async def remote_tools(specs: dict[str, RemoteAgentSpec], taken: set[str]) -> tuple[list[Tool], list[str]]:
    """A tool per agent of `specs` (cards read at once, concurrently, each bounded), and what went wrong: an
    agent whose card cannot be read is still offered (its call says why it fails), one whose name is taken
    or is no tool name is not."""
    import asyncio

    problems: list[str] = []
    usable = {}
    for name, spec in specs.items():
        if name in taken:
            problems.append(f"A2A agent {name!r} is not offered: a tool of that name exists already")
        elif not NAME_RE.match(name):
            problems.append(f"A2A agent {name!r} is not offered: a tool name is 1-64 letters, digits, '_' or '-'")
        else:
            usable[name] = spec

    async def one(spec: RemoteAgentSpec) -> Tool:
        try:
            return remote_tool(spec, await card_for(spec))
        except CardError as e:
            problems.append(f"A2A agent {spec.name!r}: {e}")
            return remote_tool(spec, None, str(e))

    tools = list(await asyncio.gather(*(one(spec) for spec in usable.values())))
    return tools, problems
