"""The tool-call pipeline of a run: every call the run makes, from the model's turns, from code, from an MCP
client, goes the same way, in named stages:

    judge:    repeat guard                         (a model's turn only; looks, has no effect)
    screen:   size limit ─► policy ─► approval ─► question   (one call at a time, in the model's order)
    announce: every admitted call's start, then one commit (write-ahead)
    run:      answer ─► vision fallback ─► repeat note ─► checkpoint ─► validate ─► timeout ─► contain ─► mark untrusted
              ─► truncate ─► tool
              (in parallel, at most `max_parallel_tools` at once; each result recorded as it arrives)

Judging comes first, over the whole turn, so a call repeated past the warning stops the run before any call
of that turn was screened (no person is asked about a turn that will not run) or run. Screening is one call
at a time because a person is asked one question at a time and a deferred call must be recorded before the
turn stops. Announcing comes between screening and running so that a kill at any moment never leaves an
effect without its start in the log. Each stage's controls are composed once per run (`ToolPipeline`).

Results are redacted on their way to the log by the run's emitter, the one path of every event: the model
sees them only from there, so redaction is not a control here.
"""

from __future__ import annotations

import contextlib
from collections.abc import Sequence
from typing import TYPE_CHECKING

from ..events import Notice, RunStatus, ToolCallFinished, ToolCallStarted
from ..tools.pipeline import Control, Invocation, Next, compose, run_parallel
from .approvals import Gate
from .asking import InputAnswer, InputGate
from .checkpointing import Checkpoint
from .guards import RepeatGuard
from .tool_controls import Approval, PolicyCheck, RepeatNote, Repeats, SizeLimit, Verdict, VisionFallback, admit

if TYPE_CHECKING:
    from ..messages import ToolCall
    from ..tools.base import ToolContext, ToolResult
    from ..tools.executor import ToolExecutor
    from .approvals import Question
    from .scope import RunScope

__all__ = ["Ending", "ToolPipeline", "order"]

Ending = tuple[RunStatus, str, str | None]  # how a run ends: status, answer, why


class ToolPipeline:
    """The stages every tool call of one run passes (composed once, at the run's first call): `await
    pipeline(calls)` screens, announces, runs and records them, and says how the run must end if it must."""

    __slots__ = ("concurrency", "ctx", "judge", "notes", "oversized", "run", "scope", "screen", "stages")

    def __init__(self, scope: RunScope, executor: ToolExecutor, ctx: ToolContext) -> None:
        agent = scope.agent
        self.scope, self.ctx, self.concurrency = scope, ctx, executor.concurrency
        self.notes: dict[str, str] = {}  # the repeat warnings of the current turn, by call id
        self.oversized: set[str] = set()  # the ids of the current turn's calls whose arguments were too big
        judging = [Repeats(RepeatGuard(agent.repeat_limit), self.notes)]
        gate = Gate(scope)
        questions: dict[str, Question] = {}  # what the policy left to a person, by call id
        screening = [SizeLimit(scope, self.oversized), PolicyCheck(gate, questions), Approval(gate, questions),
                     InputGate(scope)]
        # Always there: a question answered while the run waited gets its answer even if the resuming
        # process was started without `ask_user` (a plain `shou resume` after `shou answer`).
        shaping: list[Control[ToolResult]] = [InputAnswer(scope)]
        if not agent.vision:
            shaping.append(VisionFallback())
        shaping.append(RepeatNote(scope, self.notes, agent.repeat_limit))
        shaping.append(Checkpoint(scope, executor.tools))  # what the call changes in the workspace, for `shou undo`
        self.judge: Next[Verdict] = compose(judging, admit)
        self.screen: Next[Verdict] = compose(screening, admit)
        self.run: Next[ToolResult] = compose(shaping, executor.head)
        self.stages: dict[str, tuple[object, ...]] = {"judge": tuple(judging), "screen": tuple(screening),
                                                      "run": (*shaping, *executor.controls)}

    async def __call__(self, calls: Sequence[ToolCall], *, turn: bool = False,
                       oversized: frozenset[str] = frozenset()) -> Ending | None:
        """Take `calls` through every stage. `turn` says they are a model turn's, fresh (judged for repeats;
        `oversized` are the ids of those whose arguments were too big); otherwise they are a resumed turn's,
        code's or an MCP client's. Returns how the run ends (`loop`, `waiting_approval`, `waiting_input`), if it
        does."""
        if not calls:
            return None
        invs = [Invocation(c, self.ctx) for c in calls]
        if turn:
            stopped = await self._judge(invs, oversized)
            if stopped is not None:
                return stopped
        admitted, waiting, asking = await self._screen(invs)
        wait = (f"{waiting} call(s) wait for approval: `shou approvals` lists them, `shou approve ID` or "
                "`shou deny ID` decides, `shou resume` goes on") if waiting else None
        ending: Ending | None = ("waiting_approval", "", wait) if wait else None
        if asking and ending is None:  # approvals first: once decided, the resumed run still waits for the answer
            ending = ("waiting_input", "", f"{asking} question(s) wait for the user's answer: `shou answer "
                                           "SESSION TEXT` answers, `shou resume` goes on")
        if not admitted:
            self.scope.commit()
            return ending
        self._announce(admitted)
        await self.scope.commit_ahead()  # the message and its calls are in the log before any can have an effect
        await self._run(admitted)
        return ending

    async def _judge(self, invs: list[Invocation], oversized: frozenset[str]) -> Ending | None:
        scope = self.scope
        scope.unfinished.update((inv.call.id, inv.call) for inv in invs)
        self.notes.clear()
        self.oversized.clear()
        self.oversized.update(oversized)
        for inv in invs:
            if await self.judge(inv) == "stop":
                why = f"{inv.call.name} was called with the same arguments again after a warning"
                scope.emit(Notice(scope.run_id, scope.step, "loop", why))
                scope.finish_unfinished("the same call was repeated and the run was stopped")
                return "loop", "", why
        return None

    async def _screen(self, invs: list[Invocation]) -> tuple[list[Invocation], int, int]:
        """The calls that may run now, how many wait for a decision and how many for an answer (they stay
        unanswered, to be decided or answered and resumed); every refused call has been answered."""
        admitted: list[Invocation] = []
        waiting = asking = 0
        unfinished = self.scope.unfinished
        for inv in invs:
            verdict = await self.screen(inv)
            if verdict == "run":
                admitted.append(inv)
            elif verdict == "wait":
                waiting += 1
                unfinished.pop(inv.call.id, None)
            elif verdict == "wait_input":
                asking += 1
                unfinished.pop(inv.call.id, None)
        return admitted, waiting, asking

    def _announce(self, admitted: list[Invocation]) -> None:
        scope = self.scope
        run_id, step, unfinished = scope.run_id, scope.step, scope.unfinished
        for inv in admitted:
            unfinished[inv.call.id] = inv.call
            scope.emit(ToolCallStarted(run_id, step, inv.call))

    async def _run(self, admitted: list[Invocation]) -> None:
        scope = self.scope
        run_id, step, unfinished = scope.run_id, scope.step, scope.unfinished
        remaining = len(admitted)
        running = run_parallel(admitted, self.run, self.concurrency)
        async with contextlib.aclosing(running):
            async for done in running:
                remaining -= 1
                result, call = done.result, done.call
                unfinished.pop(call.id, None)
                scope.emit(ToolCallFinished(run_id, step, call.id, call.name, result.content, result.is_error,
                                            done.latency, result.image, result.details))
                if remaining:  # others still run: this one must not look unfinished if the process dies meanwhile
                    scope.commit()
        # The last result is committed with the next request (or the run's end), before either happens.


def order(pipeline: ToolPipeline) -> dict[str, list[str]]:
    """The controls of each stage, outermost first, by class name: what the module's docstring documents."""
    return {stage: [type(c).__name__ for c in controls] for stage, controls in pipeline.stages.items()}
