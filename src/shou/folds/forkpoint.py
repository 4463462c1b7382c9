"""Where a session's log can be cut for a fork (`shou fork SESSION --at STEP`), and what closes the cut.

Steps are counted across the whole session: step K is the session's K-th model step of its own runs (the
K-th `StepFinished` without a `parent`, in log order), as `shou show` numbers them after `#`; `RUN_ID:STEP`
names a step of one run instead. The cut keeps everything logged through that step's `StepFinished`: the
sub-runs it made, its tool results. When the step ended its run, the run's own ending is kept too (with
the notices and reviews logged between them). Otherwise the run went on after the step, and the fork gets
a synthetic `RunFinished` (status `cancelled`) so that nothing is left for `shou resume` to continue and no
request can hold a call without its answer. A step whose calls still wait for approval is no clean cut.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from ..errors import UserError
from ..events import (
    WAITING,
    Event,
    Feedback,
    GuardrailTripped,
    Notice,
    PlanUpdated,
    Reviewed,
    RunFinished,
    StepFinished,
)
from .conversation import ConversationFold
from .openrun import OpenRunFold

__all__ = ["ForkPoint", "fork_point"]

# Own events that may stand between a run's last StepFinished and its RunFinished without the run going on: an
# output guardrail's trip and the note it leaves for the session's next run (agent/guarded.py) too, or a fork
# at a blocked answer ended `cancelled` and its conversation held the withheld answer as if it was handed over.
# Feedback of a run that went on is left out all the same: the cut is after the step unless the run ended.
_TRAILING = (Notice, Reviewed, PlanUpdated, GuardrailTripped, Feedback)


@dataclass(frozen=True, slots=True)
class ForkPoint:
    """A clean cut: copy the source's rows through id `through`, then append `closing` (a synthetic end of the
    run the step belongs to, or nothing). `step` is the session-wide step number; `status` the status of the
    fork's last run as its log will say."""

    through: int
    step: int
    closing: tuple[Event, ...]
    status: str


def fork_point(rows: Sequence[tuple[int, Event]], at: str | None, source: str) -> ForkPoint:
    """The cut of `source`'s log (its `(id, event)` rows, oldest first) at step `at` (None: its last step).
    A `UserError` says why a step does not exist or cannot be cut at."""
    steps = [(i, e) for i, (_, e) in enumerate(rows) if isinstance(e, StepFinished) and not e.parent]
    if not steps:
        raise UserError(f"session {source!r} has no finished step to fork at")
    index, number = _find(steps, at, source)
    end = rows[index][1]
    assert isinstance(end, StepFinished)
    last = index
    finished: RunFinished | None = None
    for j in range(index + 1, len(rows)):
        event = rows[j][1]
        if event.parent:
            continue  # a sub-run's: kept when its run's end is
        if isinstance(event, RunFinished) and event.run_id == end.run_id:
            last, finished = j, event
            break
        if not isinstance(event, _TRAILING):
            break  # the run went on (another step, a compaction, feedback): cut right after the step
    if finished is not None and finished.status in WAITING:
        raise UserError(f"step {number} of session {source!r} has calls waiting for a person (approval or an "
                        "answer); decide or answer them first (shou approvals, shou answer), or fork at another step")
    closing: tuple[Event, ...] = ()
    if finished is None:
        closing = (RunFinished(end.run_id, status="cancelled", answer="", steps=end.step, usage=end.usage,
                               wall_time=0.0, error=f"forked from session {source} at step {number}: the rest "
                                                    "of this run is not in this session"),)
    _check_clean([e for _, e in rows[:index + 1]], number, source)
    return ForkPoint(rows[last][0], number, closing, finished.status if finished is not None else "cancelled")


def _find(steps: list[tuple[int, StepFinished]], at: str | None, source: str) -> tuple[int, int]:
    """(index in the rows, session-wide number) of the step `at` names."""
    if at is None or not at.strip():
        return steps[-1][0], len(steps)
    at = at.strip()
    if ":" in at:
        run_id, _, step = at.rpartition(":")
        if not (step.isascii() and step.isdigit()):
            raise UserError(f"--at {at!r}: give a step number, or RUN_ID:STEP")
        for number, (index, event) in enumerate(steps, 1):
            if event.run_id == run_id and event.step == int(step):
                return index, number
        raise UserError(f"session {source!r} has no step {step} of run {run_id!r} (shou show lists its steps)")
    if not (at.isascii() and at.isdigit()) or int(at) < 1:
        raise UserError(f"--at {at!r}: give a step number from 1 (the session's steps, as shou show numbers "
                        "them after #), or RUN_ID:STEP")
    if int(at) > len(steps):
        raise UserError(f"session {source!r} has {len(steps)} finished step(s); cannot fork at step {at}")
    return steps[int(at) - 1][0], int(at)


def _check_clean(events: list[Event], number: int, source: str) -> None:
    """Refuse a cut that leaves a call of the step without its result (a request built from the fork would
    hold it): `events` run through the step's `StepFinished`."""
    run = OpenRunFold()
    talk = ConversationFold(run)
    tables = (talk.handlers(), run.handlers())  # the conversation reads the open run before it ends
    for event in events:
        if event.parent:
            continue
        for table in tables:
            handle = table.get(type(event))
            if handle is not None:
                handle(event)
    if run.run is None or run.run.unanswered or run.run.awaiting_response or talk.held:
        raise UserError(f"step {number} of session {source!r} is no clean point to fork at (a call there has no "
                        "result yet); fork at another step")
