"""ToolSet: the tools a run offers, by name, in a stable order."""

from __future__ import annotations

from collections.abc import Iterable, Iterator

from ..errors import UserError
from .base import Tool


class ToolSet:
    """An ordered, name-unique collection of tools."""

    __slots__ = ("_tools",)

    def __init__(self, tools: Iterable[Tool] = ()) -> None:
        self._tools: dict[str, Tool] = {}
        for t in tools:
            self.add(t)

    def add(self, t: Tool) -> None:
        """Add a tool; a second tool with the same name is a developer error."""
        if not isinstance(t, Tool):
            raise UserError(f"{t!r} is not a Tool: decorate the function with @tool or build a Tool(...)")
        if t.name in self._tools:
            raise UserError(f"two tools are named {t.name!r}; tool names must be unique")
        self._tools[t.name] = t

    def get(self, name: str) -> Tool | None:
        """The tool called `name`, or None."""
        return self._tools.get(name)

    @property
    def names(self) -> list[str]:
        """Tool names in the order they were added."""
        return list(self._tools)

    def only(self, names: Iterable[str]) -> ToolSet:
        """A ToolSet with just `names`; an unknown name is an error that lists the valid ones."""
        wanted = [n.strip() for n in names if n.strip()]
        unknown = [n for n in wanted if n not in self._tools]
        if unknown:
            raise UserError(f"unknown tool(s) {', '.join(unknown)}; available: {', '.join(self._tools)}")
        return ToolSet(self._tools[n] for n in wanted)

    def __iter__(self) -> Iterator[Tool]:
        return iter(self._tools.values())

    def __len__(self) -> int:
        return len(self._tools)

    def __contains__(self, name: object) -> bool:
        return name in self._tools
