"""ToolSet: the tools a run offers, by name, in a stable order."""

from __future__ import annotations

import inspect
from collections.abc import Callable, Iterable, Iterator
from typing import Any

from ..errors import UserError
from .base import Tool, tool


def as_tool(fn: Any) -> Tool:
    """`fn` as a tool, as `@tool` makes one; a lambda or anything but a function is a `UserError` that says
    what to pass instead."""
    if not (inspect.isfunction(fn) or inspect.ismethod(fn)):
        raise UserError(f"{fn!r} is not a tool: pass a function (typed parameters and a docstring), "
                        "a function decorated with @tool, or a Tool(...)")
    if fn.__name__ == "<lambda>":
        # A lambda has neither a name nor a docstring to describe it to the model, nor type hints.
        raise UserError(f"{fn!r} is a lambda, which cannot be a tool (no name, docstring or type hints): "
                        "define it with def, typed parameters and a docstring")
    return tool(fn)


class ToolSet:
    """An ordered, name-unique collection of tools."""

    __slots__ = ("_tools",)

    def __init__(self, tools: Iterable[Tool | Callable[..., Any]] = ()) -> None:
        self._tools: dict[str, Tool] = {}
        for t in tools:
            self.add(t)

    def add(self, t: Tool | Callable[..., Any]) -> None:
        """Add a tool, or a plain function made one as `@tool` would make it (from its signature and
        docstring); a second tool with the same name is a developer error."""
        if not isinstance(t, Tool):
            t = as_tool(t)
        if t.name in self._tools:
            raise UserError(f"two tools are named {t.name!r}; tool names must be unique")
        self._tools[t.name] = t

    def get(self, name: str) -> Tool | None:
        """The tool called `name`, or None."""
        return self._tools.get(name)

    def idempotent(self, name: str) -> bool:
        """Whether tool `name` is marked idempotent (an unknown name is not)."""
        t = self._tools.get(name)
        return t is not None and bool(t.idempotent)

    def untrusted_output(self, name: str) -> bool:
        """Whether tool `name` may return outside content (an unknown name may)."""
        t = self._tools.get(name)
        return t is None or bool(t.untrusted_output)

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
