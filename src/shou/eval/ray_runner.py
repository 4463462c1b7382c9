"""Running the samples of a batch or an evaluation on a Ray cluster (`--ray ADDRESS`): the same contract as
`runner.run_local`, each sample a Ray task.

A task asks for its CPUs (and memory) and is run again when its worker or node dies (`max_retries`), never
for an ordinary error: a sample that errors is a result. A task run again after its node died resumes the
sample from its session log when the store is shared (`--store postgresql://...`) and the results folder is
on storage the nodes share; without its workspace it starts over from its fixture (see `sample.py`). The
driver alone writes results, each as it comes (`ResultsLog.add` keeps the first for a sample), and keeps at
most a window of twice the samples the cluster can run at once in flight, so its memory stays flat however
many samples there are.

A whole evaluation's `--max-cost` is kept between samples: the driver counts each result's cost, starts
no sample once nothing is left, and each sample runs against what was left when it started (samples run on
other machines cannot hold reservations against one budget; several in flight can together overshoot it by
at most what each was given).
"""

from __future__ import annotations

import asyncio
import logging
import uuid
from collections.abc import Callable, Iterable, Iterator
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from ..errors import ShouError
from ..usage import Usage
from .ray_cluster import LOCAL, RayOptions, connect, import_ray
from .ray_task import PackedEnv, carry_out, pack_env
from .results import ResultsLog
from .sample import Sample, SampleEnv

if TYPE_CHECKING:
    from ..agent.budget import Budget

__all__ = ["run_ray"]

logger = logging.getLogger("shou.eval")
OnResult = Callable[[dict[str, Any]], None]
WINDOW_PER_SLOT = 2  # samples in flight for each one the cluster runs at once: the next is queued when one ends
RESIZE_EVERY = 64  # results between looks at the cluster's size (an autoscaling cluster grows while it runs)


async def run_ray(samples: Iterable[Sample], env: SampleEnv, log: ResultsLog, *, address: str, jobs: int = 4,
                  on_result: OnResult | None = None, may_start: Callable[[], bool] = lambda: True,
                  options: RayOptions | None = None) -> int:
    """Carry out every sample `log` has no result for on the Ray cluster `address` names (`auto`, `local`
    with `jobs` CPUs, or HOST:PORT); returns how many were carried out. `may_start` is asked before each
    sample is sent (False: the run's budget is spent). Raises what a sample's task raised (a store or disk
    failure), or a ShouError when a task failed more often than it may be retried."""
    options = options or RayOptions.from_environ()
    ray = import_ray()
    packed = pack_env(replace(env, budgets=()))
    if address not in LOCAL:  # one machine: a retried sample finds its workspace (and its log) where it was
        _warn_unshared(env, packed.store_kind)
    connected = connect(ray, address, jobs, options)  # in this thread: Ray sets its signal handlers in the main one
    try:
        todo = (s for s in samples if s.key not in log.done)
        return await _Driver(ray, env, log, options, on_result, may_start).run(todo, packed)
    finally:
        if connected:
            ray.shutdown()


def _warn_unshared(env: SampleEnv, store_kind: str | None) -> None:
    """Say so when a sample retried on another node could not resume: its session is not where that node
    reads it."""
    if store_kind == "postgresql":
        return
    where = ("each sample's workspace (its .shou/shou.db)" if store_kind is None
             else "a SQLite file, which only the nodes that share its folder can open")
    logger.warning("--ray: the samples' sessions are in %s; a sample retried after its node died resumes only when "
                   "the results folder %s is on storage every node shares, and starts over from its fixture "
                   "otherwise. Give --store postgresql://... so that retried samples resume.", where, env.out)


class _Driver:
    """The loop that keeps a window of tasks in flight and writes each result as it comes."""

    def __init__(self, ray: Any, env: SampleEnv, log: ResultsLog, options: RayOptions, on_result: OnResult | None,
                 may_start: Callable[[], bool]) -> None:
        self.ray, self.env, self.log, self.options = ray, env, log, options
        self.on_result, self.may_start = on_result, may_start
        self.task = ray.remote(carry_out).options(**options.task_options())
        self.pending: dict[Any, Sample] = {}  # ObjectRef -> its sample
        self.count = 0

    async def run(self, todo: Iterator[Sample], packed: PackedEnv) -> int:
        """Carry out `todo` with the environment `packed`; how many results came."""
        token = uuid.uuid4().hex
        env_ref = self.ray.put(packed)
        window = self._window()
        more, since_resize = True, 0
        try:
            while True:
                while more and len(self.pending) < window:
                    more = self._submit(todo, token, env_ref)
                if not self.pending:
                    return self.count
                finished = await asyncio.to_thread(_wait_some, self.ray, list(self.pending))
                self._take(finished)
                since_resize += len(finished)
                if since_resize >= RESIZE_EVERY:
                    window, since_resize = await asyncio.to_thread(self._window), 0
        except BaseException:
            # What is in flight is stopped as a kill would stop it: its runs stay open in their logs, and the
            # same command resumes them (a cancel that let them finish as "cancelled" would make them start over).
            for ref in self.pending:
                try:
                    self.ray.cancel(ref, force=True)
                except Exception:  # a cluster already gone: its tasks went with it
                    logger.debug("could not cancel a sample's task", exc_info=True)
            raise

    def _submit(self, todo: Iterator[Sample], token: str, env_ref: Any) -> bool:
        """Send the next sample; whether there may be more."""
        if not self.may_start():
            return False
        sample = next(todo, None)
        if sample is None:
            return False
        budgets = tuple(_left(b) for b in self.env.budgets)
        self.pending[self.task.remote(token, env_ref, sample, budgets)] = sample
        return True

    def _take(self, finished: list[tuple[Any, Any, BaseException | None]]) -> None:
        """Write the finished samples' results (every one that came), then raise the first failure."""
        failure: BaseException | None = None
        for ref, result, error in finished:
            sample = self.pending.pop(ref)
            if error is not None:
                failure = failure or _failure(self.ray, sample, error, self.options)
                continue
            for budget in self.env.budgets:
                _count(budget, result)
            if self.log.add(result) and self.on_result is not None:
                self.on_result(result)
            self.count += 1
        if failure is not None:
            raise failure

    def _window(self) -> int:
        """Samples kept in flight: twice what the cluster can run at once (its CPUs over each sample's)."""
        cpus = float(self.ray.cluster_resources().get("CPU", 0.0))
        slots = cpus / self.options.cpus if self.options.cpus > 0 else cpus * 4  # CPU-free samples: 4 a CPU
        return max(2, int(WINDOW_PER_SLOT * max(slots, 1.0)))


def _wait_some(ray: Any, refs: list[Any]) -> list[tuple[Any, Any, BaseException | None]]:
    """Block until a task ends; every task ended by then, each with its result or its failure."""
    ready, rest = ray.wait(refs, num_returns=1)
    if rest:
        more, _ = ray.wait(rest, num_returns=len(rest), timeout=0)
        ready += more
    out: list[tuple[Any, Any, BaseException | None]] = []
    for ref in ready:
        try:
            out.append((ref, ray.get(ref), None))
        except Exception as e:  # the task's failure, raised by the driver once the others are written
            out.append((ref, None, e))
    return out


def _failure(ray: Any, sample: Sample, error: BaseException, options: RayOptions) -> BaseException:
    """What a failed task stops the run with: the sample's own exception (a store that cannot be written),
    or a ShouError when its worker or node died more often than it may be retried."""
    if isinstance(error, ray.exceptions.RayTaskError):
        cause = getattr(error, "cause", None)
        if isinstance(cause, BaseException):
            cause.__cause__ = error  # the worker's traceback, for whoever reads the chain
            return cause
    return ShouError(f"sample {sample.key}: its Ray task failed (retried up to {options.max_retries} time(s) "
                     f"when its worker or node died): {type(error).__name__}: {error}; the same command "
                     "resumes the run")


def _left(budget: Budget) -> Budget:
    """What a sample starting now may spend of `budget`: its limit, with what the finished samples spent."""
    return replace(budget, reserved_tokens=0, reserved_cost=0.0)


def _count(budget: Budget, result: dict[str, Any]) -> None:
    """Add a finished sample's spending (its judges' included) to the run's budget."""
    tokens = result.get("tokens") or {}
    budget.spent = budget.spent + Usage(input_tokens=int(tokens.get("input") or 0),
                                        output_tokens=int(tokens.get("output") or 0), cost=result.get("cost"))
