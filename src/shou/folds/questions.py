"""The session's questions to the person (`ask_user`): the ones still open, and the answers given."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ..events import WAITING, HistoryCleared, InputAnswered, InputRequested, RunFinished, ToolCallFinished
from .vacant import VACANT, owned

__all__ = ["QuestionsFold"]


class QuestionsFold:
    """`asked`: call id -> its question, while it waits for an answer (kept across a restart: the log holds
    it). `answers`: call id -> the answer given, until the call has its result."""

    __slots__ = ("answers", "asked")

    def __init__(self) -> None:
        self.asked: dict[str, InputRequested] = VACANT
        self.answers: dict[str, InputAnswered] = VACANT

    def on_asked(self, event: InputRequested) -> None:
        """A question waits for the person."""
        self.asked = owned(self.asked)
        self.asked[event.call_id] = event

    def on_answered(self, event: InputAnswered) -> None:
        """The person answered: the question is no longer open; the call takes the answer when it runs."""
        if self.asked.pop(event.call_id, None) is not None:
            self.answers = owned(self.answers)
            self.answers[event.call_id] = event

    def on_finished(self, event: ToolCallFinished) -> None:
        """The call ended (answered, or closed as interrupted): nothing of it waits any more."""
        self.asked.pop(event.call_id, None)
        self.answers.pop(event.call_id, None)

    def on_run_finished(self, event: RunFinished) -> None:
        """A run ended (not to wait for a person): nothing it asked waits any more."""
        if event.status not in WAITING:
            self.asked.clear()
            self.answers.clear()

    def on_cleared(self, event: HistoryCleared) -> None:
        """`/clear`: no run goes on from a cleared conversation."""
        self.asked.clear()
        self.answers.clear()

    def handlers(self) -> dict[type, Callable[[Any], None]]:
        """Event type -> handler, for a run's own events."""
        return {InputRequested: self.on_asked, InputAnswered: self.on_answered, ToolCallFinished: self.on_finished,
                RunFinished: self.on_run_finished, HistoryCleared: self.on_cleared}
