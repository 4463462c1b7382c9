"""What the tool-call controls may see of the run they work for: a narrow view, so they need not know `Run`."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from ..events import Event
    from ..messages import ToolCall
    from ..session import Session

__all__ = ["RunScope"]


class RunScope(Protocol):
    """The run a tool call belongs to: who it is (`run_id`, the current `step`), its agent and session, the calls
    of its current step that are not answered yet, and the one way its events go (`emit`, then `commit` to
    make them durable)."""

    agent: Any
    session: Session
    run_id: str
    step: int
    unfinished: dict[str, ToolCall]

    def emit(self, event: Event) -> None:
        """Hand `event` to the run's emitter."""
        ...

    def commit(self) -> None:
        """Make everything emitted so far durable."""
        ...

    async def commit_ahead(self) -> None:
        """`commit()` before a side effect, in one transaction with the other runs that commit meanwhile."""
        ...

    def finish_unfinished(self, why: str) -> None:
        """Answer every call that is not answered yet, saying `why` it never finished."""
        ...
