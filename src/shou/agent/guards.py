"""Guards that stop a run going wrong: repeated identical calls, step, time and token budgets."""

from __future__ import annotations

from typing import Literal

from ..jsonfile import canonical, loads
from ..messages import ToolCall

Verdict = Literal["ok", "warn", "stop"]

REPEAT_NOTE = (
    "\n\n[shou] You have now called {name} {count} times in a row with the same arguments and got the "
    "same kind of result. Repeating it will not help: change your approach (other arguments, another "
    "tool, or answer with what you know). Calling it again the same way ends the run."
)


def call_signature(call: ToolCall) -> tuple[str, str]:
    """Name and canonical arguments, so `{"a":1, "b":2}` and `{"b": 2, "a": 1}` count as the same."""
    try:
        args = canonical(loads(call.arguments or "{}"))
    except ValueError:
        args = (call.arguments or "").strip()
    return call.name, args


class RepeatGuard:
    """Counts identical consecutive calls: at `limit` it warns, at the next one it stops the run."""

    __slots__ = ("count", "last", "limit")

    def __init__(self, limit: int = 3) -> None:
        self.limit = limit
        self.last: tuple[str, str] | None = None
        self.count = 0

    def check(self, call: ToolCall) -> Verdict:
        """Judge the next call, in the order the model made them."""
        sig = call_signature(call)
        if sig == self.last:
            self.count += 1
        else:
            self.last, self.count = sig, 1
        if self.count > self.limit:
            return "stop"
        if self.count == self.limit:
            return "warn"
        return "ok"

    def note(self, call: ToolCall) -> str:
        """The text appended to a warned call's result."""
        return REPEAT_NOTE.format(name=call.name, count=self.count)
