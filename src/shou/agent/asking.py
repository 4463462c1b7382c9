"""Questions back to the person: how a run answers the model's `ask_user` calls.

How a question is put is the agent's `ask_user`:
- an `Asker` (the terminal prompt of `shou chat` / an interactive `shou run`): the person answers now;
- `"defer"` (`shou serve`, a batch, `--approvals defer`): the question is logged (`InputRequested`), the run
  stops `waiting_input`, and `shou answer`, the API or the web page records the answer (`InputAnswered`)
  later, from any process; the resumed run gives it to the call as its result;
- None: the tool is not offered.

Both ways leave the question and the answer in the session log, so a run killed or a server restarted while
it waits still knows what was asked, and a resumed run never asks twice. The answer is only text for the
model (a person's words, as a task is): it widens nothing a run may do.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any, Literal

from ..events import InputAnswered, InputRequested
from ..tools.base import ToolResult
from ..tools.executor import parse_arguments
from .approvals import person

if TYPE_CHECKING:
    from ..tools.pipeline import Invocation, Next
    from .emitter import Emitter
    from .scope import RunScope
    from .tool_controls import Verdict

__all__ = ["ASK_USER", "MAX_ANSWER", "Asker", "InputAnswer", "InputGate", "answer", "question_of"]

ASK_USER = "ask_user"
MAX_ANSWER = 20_000  # characters: an answer is a message, not a file
MAX_QUESTION = 4_000
Asker = Callable[[str, tuple[str, ...]], Awaitable[str]]
AskMode = Asker | Literal["defer"] | None


def question_of(arguments: str) -> tuple[str, tuple[str, ...]] | None:
    """The question and choices of an `ask_user` call's arguments; None when they are not a question (the
    executor then tells the model what is wrong)."""
    args, problem = parse_arguments(arguments)
    if problem is not None or not isinstance(args, dict):
        return None
    question, choices = args.get("question"), args.get("choices") or []
    if not isinstance(question, str) or not question.strip() or len(question) > MAX_QUESTION:
        return None
    if not isinstance(choices, list) or len(choices) > 10 or not all(isinstance(c, str) and c for c in choices):
        return None
    return question.strip(), tuple(c.strip() for c in choices)


def _sub_run(scope: RunScope) -> bool:
    # A sub-run's events are never folded into the session (they have their own context), so a question it
    # deferred could never be found and answered: only the main run waits for a person.
    return "." in scope.run_id


class InputGate:
    """The screening control of `ask_user` calls under `defer`: a call answered already runs (and gets the
    answer); one not answered yet is asked (`InputRequested`, once) and waits (`wait_input`)."""

    __slots__ = ("scope",)

    def __init__(self, scope: RunScope) -> None:
        self.scope = scope

    async def __call__(self, inv: Invocation, next: Next[Verdict]) -> Verdict:
        """`wait_input` for a question still to answer; otherwise what the rest says."""
        scope, call = self.scope, inv.call
        if call.name != ASK_USER or scope.agent.ask_user != "defer" or _sub_run(scope):
            return await next(inv)
        session = scope.session
        if call.id in session.answers:
            return await next(inv)
        if call.id not in session.pending_questions:
            asked = question_of(call.arguments)
            if asked is None:
                return await next(inv)  # the executor answers bad arguments
            scope.emit(InputRequested(scope.run_id, scope.step, call.id, asked[0], asked[1], time.time()))
        return "wait_input"


class InputAnswer:
    """The run-stage control of `ask_user` calls: the answer recorded for the call (`defer`), or the person's
    answer now (an `Asker`), as the call's result."""

    __slots__ = ("scope",)

    def __init__(self, scope: RunScope) -> None:
        self.scope = scope

    async def __call__(self, inv: Invocation, next: Next[ToolResult]) -> ToolResult:
        """The answer; other calls (and an `ask_user` with no one to ask) go on to the tool."""
        scope, call = self.scope, inv.call
        if call.name != ASK_USER:
            return await next(inv)
        given = scope.session.answers.get(call.id)
        if given is not None:
            return _result(given.answer)
        mode = scope.agent.ask_user
        if mode is None:
            return await next(inv)
        if not callable(mode):
            if _sub_run(scope):
                return ToolResult.error("only the main agent can ask the user; say what you need in your answer")
            return await next(inv)
        asked = question_of(call.arguments)
        if asked is None:
            return await next(inv)
        scope.emit(InputRequested(scope.run_id, scope.step, call.id, asked[0], asked[1], time.time()))
        scope.commit()  # the question is in the log while the person thinks
        text = (await mode(*asked))[:MAX_ANSWER]
        scope.emit(InputAnswered(scope.run_id, scope.step, call.id, text, person(), time.time()))
        return _result(text)


def _result(text: str) -> ToolResult:
    return ToolResult(text if text.strip() else "(the user gave no answer)", details={"answer": text})


def answer(session: Any, call_id: str, text: str, by: str | None = None, *,
           emitter: Emitter | None = None) -> InputRequested:
    """Record the person's answer to a question that waits in `session` (held by the caller, caught up),
    through `emitter` (default: one for the session, with no secrets to replace nor observers); returns the
    question answered. `KeyError` when no such question waits there; `ValueError` for an answer too long."""
    asked = session.pending_questions.get(call_id)
    if asked is None:
        raise KeyError(call_id)
    if len(text) > MAX_ANSWER:
        raise ValueError(f"the answer is {len(text)} characters, over the {MAX_ANSWER} allowed")
    if emitter is None:
        from .emitter import Emitter

        emitter = Emitter(session)
    emitter.emit(InputAnswered(asked.run_id, asked.step, call_id, text, by or person(), time.time()))
    emitter.commit()
    return asked
