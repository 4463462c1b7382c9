"""The model requests a session's log holds: the contents it stores (trace keys) and those never answered."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ..events import ENDED_CALL_NOTICES, ModelRequest, ModelResponse, Notice, RunFinished

__all__ = ["RequestsFold"]


class RequestsFold:
    """`trace_keys`: hashes of the request contents the log holds (`ModelRequest.contents`), so the trace
    stores each one once. `asked`: run id -> its model request with no answer (nor failure) logged yet; a
    killed process's may have been billed. The same for a run's events and a sub-run's."""

    __slots__ = ("asked", "trace_keys")

    def __init__(self) -> None:
        self.trace_keys: set[str] = set()
        self.asked: dict[str, ModelRequest] = {}

    def on_request(self, event: ModelRequest) -> None:
        """A model call was made: it waits for its answer (kept without the contents it logged: what a killed
        process's unanswered call may have cost needs none of them, and a run waiting for the model would hold
        its request's new messages and tool specs again; issue 35)."""
        contents = event.contents
        if contents:
            self.trace_keys.update(contents)
            event = ModelRequest(event.run_id, event.step, event.message_count, event.tool_count, event.tokens,
                                 event.request_id, event.model, event.provider, event.messages, event.tools_ref,
                                 event.params, None, event.purpose, parent=event.parent)
        self.asked[event.run_id] = event

    def on_answer(self, event: ModelResponse | RunFinished) -> None:
        """The run's call was answered, or the run ended: nothing of it is under way any more."""
        self.asked.pop(event.run_id, None)

    def on_notice(self, event: Notice) -> None:
        """A notice that ends a call without an answer (a model error, an interruption, an abandoned call)."""
        if event.kind in ENDED_CALL_NOTICES:
            self.asked.pop(event.run_id, None)

    def handlers(self) -> dict[type, Callable[[Any], None]]:
        """Event type -> handler, for a run's and for a sub-run's events alike."""
        return {ModelRequest: self.on_request, ModelResponse: self.on_answer, RunFinished: self.on_answer,
                Notice: self.on_notice}
