"""Running the samples of a batch or an evaluation on this machine: `jobs` at a time, each result written
as it comes (`results.py`), the samples a folder has results for skipped.

Workers pull samples from one iterator, so a run of 10,000 keeps only `jobs` of them in flight. A whole
evaluation's `--max-cost` is one budget every run's calls are held against (the reservation scheme of
agent/budget.py, so runs at once cannot together overshoot it); once it has nothing left, no further
sample starts. A failure of the store or the disk stops the run: what was in flight resumes next time.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterable, Iterator
from typing import Any

from .results import ResultsLog
from .sample import Sample, SampleEnv, run_sample

__all__ = ["run_local"]

OnResult = Callable[[dict[str, Any]], None]


async def run_local(samples: Iterable[Sample], env: SampleEnv, log: ResultsLog, *, jobs: int = 4,
                    on_result: OnResult | None = None, may_start: Callable[[], bool] = lambda: True) -> int:
    """Carry out every sample `log` has no result for, `jobs` at a time; returns how many were carried out.
    `may_start` is asked before each sample (False: the run's budget is spent; nothing more starts)."""
    todo: Iterator[Sample] = (s for s in samples if s.key not in log.done)
    count = 0
    spent = False  # the evaluation's budget stopped a sample: nothing more starts

    async def worker() -> None:
        nonlocal count, spent
        for sample in todo:  # one iterator shared by every worker: each sample is taken once
            if spent or not may_start():
                return
            result = await run_sample(sample, env)
            if result is None:
                spent = True
                return
            if log.add(result) and on_result is not None:
                on_result(result)
            count += 1

    try:
        async with asyncio.TaskGroup() as group:  # the first failure (a store that cannot be written) stops all
            for _ in range(max(1, jobs)):
                group.create_task(worker())
    except BaseExceptionGroup as group:  # the first failure, as itself (the others are the cancelled runs')
        raise group.exceptions[0] from None
    return count
