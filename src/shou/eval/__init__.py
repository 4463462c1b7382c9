"""Evaluations and batches: many tasks, checked and reported, on one machine or a Ray cluster.

```python
from shou.eval import Case, Suite, answer_contains, run_suite

suite = Suite("math", [Case("add", "What is 2+3?", checks=[answer_contains("5")])])
report = run_suite(suite, models=["deepseek:deepseek-chat"], epochs=3)
print(report.models["deepseek:deepseek-chat"].rate)
```
A check is any `check(answer, workspace) -> bool | float` function, or one of the checks here. Each
sample (a case, by a model, in an epoch) runs in a workspace of its own made from the case's fixture, in a
session of its own; a killed evaluation started again with the same arguments resumes where it stopped.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .cases import Case, Limits, Suite
from .checks import (
    answer_contains,
    answer_equals,
    answer_matches,
    file_contains,
    file_equals,
    file_exists,
    file_matches,
    function,
    judge,
    status_is,
)
from .outcome import Outcome, Verdict
from .report import ModelSummary, Report
from .sample import Sample

if TYPE_CHECKING:
    from ..agent.agent import Agent
    from .sample import AgentMaker

__all__ = ["Case", "Limits", "ModelSummary", "Outcome", "Report", "Sample", "Suite", "Verdict", "answer_contains",
           "answer_equals", "answer_matches", "evaluate", "file_contains", "file_equals", "file_exists",
           "file_matches", "function", "judge", "run_suite", "status_is"]


async def evaluate(suite: Suite, **options: Any) -> Report:
    """`run_suite` for code with an event loop running."""
    from .driver import evaluate as run

    return await run(suite, **options)


def run_suite(suite: Suite, *, agent: Agent | AgentMaker | None = None, models: Sequence[str | None] = (None,),
              epochs: int = 1, jobs: int = 4, out: str | Path | None = None, max_cost: float | None = None,
              judge_model: str | None = None, ray: str | None = None, store: str | None = None) -> Report:
    """Run every case of `suite` with each of `models` (model specs; None: the case's or the configured one;
    "oracle": each case's scripted solution), `epochs` times, `jobs` at a time, and report.

    `agent` is an `Agent` to run the cases with (on each sample's own workspace), a function
    `(sample, workspace) -> Agent`, or None for agents made from settings as `shou eval` makes them.
    Results go to `out` (default: a new folder under `shou-results/`); an `out` holding the same run continues
    it. `max_cost` (USD) bounds the whole evaluation; `judge_model` is the LLM judges' model; `ray` runs the
    samples on a Ray cluster ("auto", an address, or "" for a local one), `store` is the store they share
    (`postgresql://...`).
    """
    from .driver import evaluate as run

    return asyncio.run(run(suite, agent=agent, models=models, epochs=epochs, jobs=jobs,
                           out=Path(out) if out is not None else None, max_cost=max_cost, judge_model=judge_model,
                           ray=ray, store=store))
