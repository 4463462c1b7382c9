"""What every model call of a session used and cost: its runs', its sub-runs', and compaction summaries'."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ..events import Compacted, ModelResponse, Notice
from ..usage import NO_USAGE, Usage

__all__ = ["SpendingFold", "spent_by"]


def spent_by(event: Any) -> Usage | None:
    """What `event` itself adds to what was spent, or None when it adds nothing."""
    kind = type(event)
    if kind is ModelResponse:
        return event.usage
    if kind is Compacted:
        return event.spent
    if kind is Notice:
        return event.usage  # a void attempt that was billed, or a call a killed process left under way
    return None


class SpendingFold:
    """The session's spending (for session budgets). The same for a run's events and a sub-run's."""

    __slots__ = ("spent",)

    def __init__(self) -> None:
        self.spent = NO_USAGE

    def on_response(self, event: ModelResponse) -> None:
        """A model call answered: its usage counts."""
        self.spent = self.spent + event.usage

    def on_compacted(self, event: Compacted) -> None:
        """A summary was made: what it cost counts, unless its calls were logged on their own."""
        self.spent = self.spent + event.spent

    def on_notice(self, event: Notice) -> None:
        """A failed or abandoned attempt the provider may have billed."""
        if event.usage is not None:
            self.spent = self.spent + event.usage

    def handlers(self) -> dict[type, Callable[[Any], None]]:
        """Event type -> handler, for a run's and for a sub-run's events alike."""
        return {ModelResponse: self.on_response, Compacted: self.on_compacted, Notice: self.on_notice}
