"""What tools left the agent that outlives compaction: its working memory and the skills it loaded."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ..events import HistoryCleared, ToolCallFinished
from .vacant import VACANT, owned

__all__ = ["ScratchFold"]


class ScratchFold:
    """`working_memory`: the agent's scratchpad. `loaded_skills`: skill name -> body, loaded by `use_skill`
    (the system prompt keeps them). Both come from a successful call's `details`; `/clear` forgets them."""

    __slots__ = ("loaded_skills", "working_memory")

    def __init__(self) -> None:
        self.working_memory = ""
        self.loaded_skills: dict[str, str] = VACANT

    def on_finished(self, event: ToolCallFinished) -> None:
        """A call ended: a successful one may have set the scratchpad or loaded a skill."""
        details = event.details
        if not details or event.is_error:
            return
        if "working_memory" in details:
            self.working_memory = str(details["working_memory"])
        skill = details.get("skill")
        if isinstance(skill, dict) and isinstance(skill.get("name"), str):
            self.loaded_skills = owned(self.loaded_skills)
            self.loaded_skills[skill["name"]] = str(skill.get("body", ""))

    def on_cleared(self, event: HistoryCleared) -> None:
        """`/clear`: the scratchpad and the skills go with the conversation."""
        self.working_memory = ""
        self.loaded_skills = VACANT

    def handlers(self) -> dict[type, Callable[[Any], None]]:
        """Event type -> handler, for a run's own events."""
        return {ToolCallFinished: self.on_finished, HistoryCleared: self.on_cleared}
