"""A run with guardrails (agent/guardrails.py): its input checked before it acts, its answer before it stands.

`GuardedRun` wraps whatever the run is made of (the plain loop, a reviewed run, a planned run): it becomes the
run's `drive`, around the one it had, so the loop itself knows nothing of guardrails.

- Input: the checks on the task start with the run, at the same time as its first model call, not before it
  (a judge's call would double the time to the first token). An `InputGate` at the head of the run's model-call
  pipeline holds every reply until the checks have passed: a reply that arrives first waits, so none of its tool
  calls runs; checks that trip first cancel the call. A resumed run checks its task again, to the end, before
  it goes on (the killed process may have logged calls the checks never cleared).
- Output: a `completed` run's answer is checked before it is returned, after the critic (if any) let it stand.
  Its text is not streamed while the model writes it: it is shown (one `TextDelta`) once the checks passed.

A tripped check is a `GuardrailTripped` event and the run ends `blocked`, the check's reason as its error; a
killed run whose log holds one ends `blocked` when resumed, without running anything again.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ..chain import compose
from ..events import Feedback, GuardrailTripped, TextDelta, ToolCallFinished
from ..messages import ToolCall
from ..session import INTERRUPTED
from .guardrails import Guardrail, first_trip

if TYPE_CHECKING:
    from ..models.pipeline import Next
    from .loop import Ending, Run

__all__ = ["Blocked", "GuardedRun", "InputGate", "blocked_error"]

Trip = tuple[Guardrail, str] | None
NOTE = {"input": "[shou] A task given here was blocked by the input guardrail {name!r}: {reason}. Nothing of it was "
                   "done, and its text is withheld from this conversation.",
        "output": "[shou] Your answer above was blocked by the output guardrail {name!r}: {reason}. It was not "
                  "handed over to the person."}


class Blocked(Exception):
    """A guardrail tripped: raised from the model-call pipeline to the run's drive, which ends the run."""

    def __init__(self, guard: Guardrail, reason: str, calls: tuple[ToolCall, ...] = ()) -> None:
        super().__init__(reason)
        self.guard = guard
        self.reason = reason
        self.calls = calls  # the held reply's tool calls: never run, each given a "not run" result


class InputGate:
    """A model-call control: no reply leaves it before `checks` passed; checks that trip cancel the call and
    every later call fails with `Blocked`. The guardrails' own judge calls pass straight through."""

    def __init__(self, checks: asyncio.Future[Trip]) -> None:
        self.checks = checks

    async def __call__(self, call: Any, next: Next) -> AsyncIterator[Any]:
        """Pass `call` on; hold its reply until the checks are done."""
        checks = self.checks
        if call.purpose == "guardrail" or (checks.done() and checks.result() is None):
            async for event in next(call):
                yield event
            return
        if not checks.done():
            reply = asyncio.ensure_future(_drain(next(call)))  # its trace emits what it streams, as it comes
            try:
                await asyncio.wait({reply, checks}, return_when=asyncio.FIRST_COMPLETED)
                if not checks.done() or checks.result() is None:
                    await reply  # the reply came first, or the checks passed: it stands once they have
                    await asyncio.shield(checks)
            finally:
                if not reply.done():
                    reply.cancel()
                    await asyncio.gather(reply, return_exceptions=True)  # a cancel of this task still stops it
        tripped = checks.result()
        if tripped is not None:
            turn = call.turn
            raise Blocked(*tripped, calls=turn.message.tool_calls if turn is not None else ())


async def _hold_text(call: Any, next: Next) -> AsyncIterator[Any]:
    """A model-call control of a run with output guardrails: its text is not streamed as it comes (the CLI, SSE
    and the page would show an answer before it was checked); the answer is shown once it passed."""
    call.deltas = False
    async for event in next(call):
        yield event


async def _drain(events: AsyncIterator[Any]) -> None:
    try:
        async for _ in events:
            pass
    finally:
        close = getattr(events, "aclose", None)
        if close is not None:
            await close()


@dataclass(frozen=True, slots=True)
class GuardedRun:
    """`inner` (a `RunKind`: what the run is made of otherwise) with the config's guardrails around it."""

    inner: Any

    def attach(self, run: Run) -> None:
        """The inner kind, then the guard as the run's drive, around the inner drive (or the plain loop)."""
        self.inner.attach(run)
        run.drive = _Guard(run.drive)


class _Guard:
    """The drive of a guarded run (one per run)."""

    def __init__(self, inner: Callable[[Run], Awaitable[Ending]] | None) -> None:
        self.inner = inner

    async def __call__(self, run: Run) -> Ending:
        guards = run.agent.config.guardrails
        inputs = tuple(g for g in guards if g.kind == "input")
        outputs = tuple(g for g in guards if g.kind == "output")
        resume = run.resume
        given = run.agent.config.checked_input
        text = f"{given}\n\n{run.task}" if given else run.task  # all the caller said, not only its last words
        if resume is not None and resume.blocked is not None:  # tripped before the kill: never go on
            _close_pending(run)
            return "blocked", "", blocked_error(resume.blocked)
        checks: asyncio.Future[Trip]
        if resume is not None:  # checked to the end first: the log may hold calls the checks never cleared
            tripped = await first_trip(run, inputs, text)
            if tripped is not None:
                _close_pending(run)
                return _blocked(run, Blocked(*tripped))
            checks = asyncio.get_running_loop().create_future()
            checks.set_result(None)
        else:
            checks = asyncio.ensure_future(first_trip(run, inputs, text))
        controls: list[Any] = [InputGate(checks)]
        if outputs:
            controls.append(_hold_text)
        run.caller.head = compose(controls, run.caller.head)
        try:
            status, answer, error = await (run.steps() if self.inner is None else self.inner(run))
            if checks.done() and checks.result() is not None:  # tripped where a call swallowed the error
                raise Blocked(*checks.result())  # type: ignore[misc]
            if status == "completed":
                tripped = await first_trip(run, outputs, answer)
                if tripped is not None:
                    raise Blocked(*tripped)
                if outputs and answer:  # held back while it was checked: shown now that it passed
                    run.emit(TextDelta(run.run_id, run.step, answer))
        except Blocked as b:
            return _blocked(run, b)
        finally:
            if not checks.done():
                checks.cancel()
                await asyncio.gather(checks, return_exceptions=True)
        return status, answer, error


def _blocked(run: Run, blocked: Blocked) -> Ending:
    """Record the trip; the run's ending, with the reason as its error."""
    guard = blocked.guard
    for call in blocked.calls:  # the held reply's calls: reported to the conversation as not run
        run.unfinished[call.id] = call
    run.emit(event := GuardrailTripped(run.run_id, run.step, guard.kind, guard.name, blocked.reason))
    run.finish_unfinished(f"the {guard.kind} guardrail {guard.name!r} blocked the run")  # before the note below
    # The conversation goes on in the session's next run: its model is told what happened (and that a blocked
    # answer never reached the person, so it does not build on it).
    note = NOTE[guard.kind].format(name=guard.name, reason=blocked.reason)
    run.emit(Feedback(run.run_id, run.step, note))
    run.commit()
    return "blocked", "", blocked_error(event)


def _close_pending(run: Run) -> None:
    """A resumed run that ends blocked: the killed run's calls without a result get one (none runs now)."""
    assert run.resume is not None
    for call in run.resume.unanswered:
        if call.id in run.resume.started:  # begun before the kill (a resumed run's own): its outcome is unknown
            run.emit(ToolCallFinished(run.run_id, run.step, call.id, call.name, INTERRUPTED, is_error=True))
        else:
            run.unfinished[call.id] = call


def blocked_error(event: GuardrailTripped) -> str:
    """A blocked run's error: which guardrail stopped it, and why."""
    return f"blocked by the {event.kind} guardrail {event.name!r}: {event.reason}"
