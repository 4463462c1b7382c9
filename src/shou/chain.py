"""Composing a pipeline of controls: the one mechanism behind the model-call and tool-call pipelines.

A control is called as `control(call, next)`, where `next` is the rest of the pipeline; `compose` links
them once (never per call), so a call costs one closure call per control.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, TypeVar

__all__ = ["compose"]

N = TypeVar("N", bound=Callable[..., Any])


def compose(controls: Sequence[Callable[[Any, Any], Any]], terminal: N) -> N:
    """The head of `controls` in order (the first is outermost) ending in `terminal`."""
    head: Any = terminal
    for control in reversed(controls):
        head = _link(control, head)
    return head


def _link(control: Callable[[Any, Any], Any], rest: Callable[..., Any]) -> Callable[[Any], Any]:
    def step(call: Any) -> Any:
        return control(call, rest)

    return step
