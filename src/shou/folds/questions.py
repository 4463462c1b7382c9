"""The session's questions to the person (`ask_user`): the ones still open, and the answers given."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ..events import InputAnswered, InputRequested, ToolCallFinished

__all__ = ["QuestionsFold"]


class QuestionsFold:
    """`asked`: call id -> its question, while it waits for an answer (kept across a restart: the log holds
    it). `answers`: call id -> the answer given, until the call has its result."""

    __slots__ = ("answers", "asked")

    def __init__(self) -> None:
        self.asked: dict[str, InputRequested] = {}
        self.answers: dict[str, InputAnswered] = {}

    def on_asked(self, event: InputRequested) -> None:
        """A question waits for the person."""
        self.asked[event.call_id] = event

    def on_answered(self, event: InputAnswered) -> None:
        """The person answered: the question is no longer open; the call takes the answer when it runs."""
        if self.asked.pop(event.call_id, None) is not None:
            self.answers[event.call_id] = event

    def on_finished(self, event: ToolCallFinished) -> None:
        """The call ended (answered, or closed as interrupted): nothing of it waits any more."""
        self.asked.pop(event.call_id, None)
        self.answers.pop(event.call_id, None)

    def handlers(self) -> dict[type, Callable[[Any], None]]:
        """Event type -> handler, for a run's own events."""
        return {InputRequested: self.on_asked, InputAnswered: self.on_answered, ToolCallFinished: self.on_finished}
