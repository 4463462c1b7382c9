"""Runs composed of runs: what a run is made of is chosen once, where it is built, never inside its loop.

A `Run` (agent/loop.py) is the plain ReAct loop and the events around it; it knows neither plans nor
reviews. `build_run` composes one from its agent's config:

- `ReactRun`: the loop as it is.
- `ReviewedRun`: a run whose answers a reviewer checks (agent/review.py): a rejected answer's feedback goes
  into the conversation and the run is re-entered where it stood, until an answer stands.
- `GuardedRun` (agent/guarded.py): any of these with the config's guardrails around it, on a run that is not
  a sub-run (the run it works for checked the task, and checks the answer).
- `PlannedRun`: a planner (agent/plan.py) drives the run, each step of its plan a sub-run built here too,
  from a narrower config (agent/subrun.py), which makes it a `ReactRun`.

A resumed run whose log holds a plan is a `PlannedRun` whatever the config says, so the plan goes on.
Sub-agents (agent/delegate.py) and plan steps start their runs with `run_sub`, through the same `build_run`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

from ..events import Event, RunFinished
from .guarded import GuardedRun
from .loop import Ending, Run
from .output import attach_output
from .plan import Planner
from .review import Critic
from .subrun import SubSession

if TYPE_CHECKING:
    from ..session import OpenRun, Session
    from .agent import Agent
    from .budget import Budget
    from .config import AgentConfig

__all__ = ["GuardedRun", "PlannedRun", "ReactRun", "ReviewedRun", "RunKind", "build_run", "kind_of", "run_sub"]


@dataclass(frozen=True, slots=True)
class ReactRun:
    """The plain loop: ask the model, run its calls, until it answers."""

    def attach(self, run: Run) -> None:
        """Nothing to add: a `Run` is this loop."""


@dataclass(frozen=True, slots=True)
class ReviewedRun:
    """`inner`, whose answers a reviewer must approve (at most `max_reviews` times) before one stands."""

    inner: ReactRun

    def attach(self, run: Run) -> None:
        """The inner run, with a reviewer (one per run: it counts its reviews) on its answer step."""
        self.inner.attach(run)
        run.answer_checker = Critic


@dataclass(frozen=True, slots=True)
class PlannedRun:
    """A planner drives the run; each step is a sub-run of kind `steps` (what a step's config makes)."""

    steps: RunKind

    def attach(self, run: Run) -> None:
        """The planner in place of the loop."""
        run.drive = self

    async def __call__(self, run: Run) -> Ending:
        """Plan, carry out the steps (each a sub-run built by `build_run`), answer."""
        return await Planner(run, run_sub).execute()


RunKind = ReactRun | ReviewedRun | PlannedRun | GuardedRun


def kind_of(config: AgentConfig, resume: OpenRun | None = None, *, sub: bool = False) -> RunKind:
    """What a run of `config` is made of (`resume`: the killed run it continues; `sub`: whether it is a sub-run,
    which its parent's guardrails cover)."""
    if config.guardrails and not sub:
        return GuardedRun(kind_of(config, resume, sub=True))
    if config.planning or (resume is not None and resume.plan is not None):
        return PlannedRun(kind_of(Planner.step_config(config), sub=True))
    if config.reflect and config.max_reviews > 0:
        return ReviewedRun(ReactRun())
    return ReactRun()


def build_run(agent: Agent, task: str, session: Session, emit: Callable[[Event], None] | None, *,
              resume: OpenRun | None = None, run_id: str | None = None, budgets: list[Budget] | None = None,
              ratios: dict[str, float] | None = None, sub: bool = False) -> Run:
    """A run of `task` by `agent`, composed from its config (the arguments are `Run`'s; `sub`: it is a sub-run)."""
    run = Run(agent, task, session, emit, resume=resume, run_id=run_id, budgets=budgets, ratios=ratios)
    kind_of(agent.config, resume, sub=sub).attach(run)
    attach_output(run)  # a typed answer: after the kind, so a reviewer checks only a valid answer
    return run


async def run_sub(parent: Run, agent: Agent, task: str, run_id: str | None = None) -> tuple[RunFinished, Session]:
    """Carry out `task` with `agent` as a sub-run of `parent` (agent/subrun.py); returns how it ended and its
    conversation."""
    session = SubSession(parent.session)
    me = parent.run_id

    def forward(event: Event) -> None:  # a grandchild's events keep the parent they name
        parent.emit(event if event.parent else replace(event, parent=me))

    run = build_run(agent, task, session, forward, run_id=run_id or parent.sub_id(), budgets=parent.accounts.budgets,
                    ratios=parent.accounts.ratios, sub=True)
    done = await run.execute()
    parent.usage = parent.usage + done.usage  # the parent's total includes what its sub-runs spent
    return done, session
