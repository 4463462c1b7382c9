"""The run's own controls around a tool call (agent/toolpipe.py composes them with the executor's).

Screening controls answer with a `Verdict` before anything runs: `run` (go on), `wait` (a person decides
later), `refused` (answered with the reason, not run), `stop` (the run ends). Result controls wrap the
running call and shape what the model gets back. Each is `async def __call__(call, next)`.
"""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING, Literal

from ..events import Notice, ToolCallFinished
from ..tools.base import ToolResult
from ..tools.pipeline import Invocation, Next
from ..tools.untrusted import mark_untrusted
from .guards import RepeatGuard
from .turn import MAX_ARGUMENT_CHARS

if TYPE_CHECKING:
    from .approvals import Gate, Question
    from .scope import RunScope

__all__ = ["Approval", "PolicyCheck", "RepeatNote", "Repeats", "SizeLimit", "Verdict", "VisionFallback", "admit",
           "without_image"]

Verdict = Literal["run", "wait", "wait_input", "refused", "stop"]  # wait_input: an `ask_user` question (asking.py)
OVERSIZED = (f"Error: not run: the arguments were over {MAX_ARGUMENT_CHARS} characters. Send large content in "
             "several smaller calls (e.g. write a file in parts).")


async def admit(call: Invocation) -> Verdict:
    """The end of a screening pipeline: nothing objected."""
    return "run"


class Repeats:
    """Counts identical consecutive calls of the model's turns (`RepeatGuard`): the call that reaches the limit
    is run with a warning (kept in `notes` for `RepeatNote`), the one after it stops the run."""

    __slots__ = ("guard", "notes")

    def __init__(self, guard: RepeatGuard, notes: dict[str, str]) -> None:
        self.guard, self.notes = guard, notes

    async def __call__(self, inv: Invocation, next: Next[Verdict]) -> Verdict:
        """`stop` for a call repeated past the warning; otherwise what the rest says."""
        call = inv.call
        verdict = self.guard.check(call)
        if verdict == "stop":
            return "stop"
        if verdict == "warn":
            self.notes[call.id] = self.guard.note(call)
        return await next(inv)


class SizeLimit:
    """Refuses a call whose arguments were over `MAX_ARGUMENT_CHARS` (the turn kept only a note of them, and
    their ids in `oversized`), telling the model to send less per call."""

    __slots__ = ("oversized", "scope")

    def __init__(self, scope: RunScope, oversized: set[str]) -> None:
        self.scope, self.oversized = scope, oversized

    async def __call__(self, inv: Invocation, next: Next[Verdict]) -> Verdict:
        """`refused` (answered) for an oversized call; otherwise what the rest says."""
        call = inv.call
        if call.id not in self.oversized and len(call.arguments) <= MAX_ARGUMENT_CHARS:
            return await next(inv)
        scope = self.scope
        scope.unfinished.pop(call.id, None)
        scope.emit(ToolCallFinished(scope.run_id, scope.step, call.id, call.name, OVERSIZED, is_error=True))
        return "refused"


class PolicyCheck:
    """The permission policy (with the decisions already recorded for the call): runs the call, refuses it with
    the reason, or leaves it to a person (the question is kept in `questions` for `Approval`)."""

    __slots__ = ("gate", "questions")

    def __init__(self, gate: Gate, questions: dict[str, Question]) -> None:
        self.gate, self.questions = gate, questions

    async def __call__(self, inv: Invocation, next: Next[Verdict]) -> Verdict:
        """`refused` as the policy decides; otherwise what the rest says."""
        ruling = self.gate.judge(inv.call)
        if ruling == "refused":
            return "refused"
        if not isinstance(ruling, str):
            self.questions[inv.call.id] = ruling
        return await next(inv)


class Approval:
    """Asks a person about a call the policy left to one (the agent's `approvals`): it runs, waits for a
    decision made later (`defer`), or is refused with the reason."""

    __slots__ = ("gate", "questions")

    def __init__(self, gate: Gate, questions: dict[str, Question]) -> None:
        self.gate, self.questions = gate, questions

    async def __call__(self, inv: Invocation, next: Next[Verdict]) -> Verdict:
        """`wait` or `refused` as the person decides; otherwise what the rest says."""
        question = self.questions.pop(inv.call.id, None)
        if question is None:
            return await next(inv)
        verdict = await self.gate.ask(inv.call, question)
        return await next(inv) if verdict == "run" else verdict


class RepeatNote:
    """Appends the repeat warning `Repeats` kept for a call to its result, and says so in a notice."""

    __slots__ = ("limit", "notes", "scope")

    def __init__(self, scope: RunScope, notes: dict[str, str], limit: int) -> None:
        self.scope, self.notes, self.limit = scope, notes, limit

    async def __call__(self, inv: Invocation, next: Next[ToolResult]) -> ToolResult:
        """The result, with the warning when there is one."""
        result = await next(inv)
        notes = self.notes
        if not notes or inv.call.id not in notes:
            return result
        scope, call = self.scope, inv.call
        scope.emit(Notice(scope.run_id, scope.step, "repeat", f"{call.name} repeated {self.limit} times"))
        return replace(result, content=result.content + notes[call.id])


class VisionFallback:
    """For a text-only model, an image result becomes its text stand-in (`without_image`)."""

    __slots__ = ()

    async def __call__(self, inv: Invocation, next: Next[ToolResult]) -> ToolResult:
        """The result, without its image."""
        result = await next(inv)
        if result.image is None:
            return result
        content, image = without_image(result.content, result.details)
        return replace(result, content=content, image=image)


def without_image(content: str, details: dict | None) -> tuple[str, None]:
    """A tool result for a text-only model: the image's text stand-in (a page's text) instead of the image."""
    text = str((details or {}).get("page_text") or "").strip()
    note = "\n\n[An image was returned, but this model cannot see images (set vision on for a model that can)."
    if not text:
        return content + note + "]", None
    # a page's text is outside content, like the page itself
    return content + note + " The page's text instead:]\n" + mark_untrusted(text, "browser"), None
