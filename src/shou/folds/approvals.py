"""The session's approvals: calls waiting for a person, what was decided, and the rules granted."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ..events import ApprovalDecided, ApprovalRequested, ToolCallFinished
from .vacant import VACANT, owned

__all__ = ["ApprovalsFold"]


class ApprovalsFold:
    """`requested`: call id -> its request, while it waits. `decisions`: call id -> what was decided.
    `granted`: the decisions that allowed a rule for the rest of the session. A sub-run's approvals are its
    own (they are never folded here)."""

    __slots__ = ("decisions", "granted", "requested")

    def __init__(self) -> None:
        self.requested: dict[str, ApprovalRequested] = VACANT
        self.decisions: dict[str, ApprovalDecided] = VACANT
        self.granted: list[ApprovalDecided] = []

    def on_requested(self, event: ApprovalRequested) -> None:
        """A call waits for a person."""
        self.requested = owned(self.requested)
        self.requested[event.call.id] = event

    def on_decided(self, event: ApprovalDecided) -> None:
        """A call was decided; an allow for the session (or for good) grants its rule."""
        self.decisions = owned(self.decisions)
        self.decisions[event.call_id] = event
        self.requested.pop(event.call_id, None)
        if event.allow and event.scope in ("session", "rule") and event.rule:
            self.granted.append(event)

    def on_finished(self, event: ToolCallFinished) -> None:
        """A call ended (ran, refused, or closed as interrupted): it waits no more."""
        self.requested.pop(event.call_id, None)

    def handlers(self) -> dict[type, Callable[[Any], None]]:
        """Event type -> handler, for a run's own events."""
        return {ApprovalRequested: self.on_requested, ApprovalDecided: self.on_decided,
                ToolCallFinished: self.on_finished}
