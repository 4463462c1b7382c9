"""An evaluation (or a batch) from start to report: its results folder, its samples (each case, by each model,
in each epoch), the budget for the whole of it, the run on this machine or on Ray, and the summary written
next to the results (`summary.json`, `report.html`)."""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..errors import UserError
from ..usage import Usage
from .cases import Suite
from .judge import JudgeEnv
from .make import agent_maker, settings_maker
from .report import Report, summarize
from .results import ResultsLog, default_folder, open_run_folder, read_results
from .runner import run_local
from .sample import EVAL_BUDGET, AgentMaker, Sample, SampleEnv

if TYPE_CHECKING:
    from ..agent.agent import Agent
    from ..agent.budget import Budget

__all__ = ["evaluate", "samples_of"]


MAX_EPOCHS = 1000  # as `--epochs` takes
MAX_JOBS = 1000  # as `-j` takes


def samples_of(suite: Suite, models: Sequence[str | None], epochs: int) -> Iterator[Sample]:
    """Every sample of the run: each case by each model in each epoch, case by case."""
    for case in suite.cases:
        for model in models:
            for epoch in range(1, epochs + 1):
                yield Sample(case, model, epoch)


def manifest_of(suite: Suite, models: Sequence[str | None], epochs: int, kind: str) -> dict[str, Any]:
    """What makes a run itself (the same command again continues it); see results.open_run_folder."""
    from importlib.metadata import version

    ids = "\n".join(c.id for c in suite.cases).encode()
    return {"kind": kind, "suite": suite.name, "source": suite.source,
            "cases": {"count": len(suite.cases), "sha256": hashlib.sha256(ids).hexdigest()},
            "models": [m or "default" for m in models], "epochs": epochs, "shou": version("shou")}


async def evaluate(suite: Suite, *, out: Path | None = None, models: Sequence[str | None] = (None,), epochs: int = 1,
                   jobs: int = 4, agent: Agent | AgentMaker | None = None, max_cost: float | None = None,
                   judge_model: str | None = None, kind: str = "eval", ray: str | None = None,
                   store: str | None = None, on_start: Callable[[int, int], None] | None = None,
                   on_result: Callable[[dict[str, Any]], None] | None = None) -> Report:
    """Run `suite` and report on it (see `shou.eval.run_suite`). `on_start(total, done_already)` and
    `on_result(result)` follow progress."""
    # bounded as the command line bounds them: 10**20 epochs was a hang counting and making samples, not an error
    if not 1 <= epochs <= MAX_EPOCHS or not 1 <= jobs <= MAX_JOBS:
        raise UserError(f"--epochs must be from 1 to {MAX_EPOCHS} and -j from 1 to {MAX_JOBS}")
    if not models:
        models = (None,)
    if len(set(models)) != len(models):
        raise UserError("a model is given twice")
    folder = (out or default_folder(kind)).resolve()
    open_run_folder(folder, manifest_of(suite, models, epochs, kind))
    log = ResultsLog(folder)
    server = None
    try:
        total = len(suite.cases) * len(models) * epochs
        if on_start is not None:
            on_start(total, len(log.done))
        budget = _budget(max_cost, log)
        server = _Site(suite.www) if suite.www is not None else None
        values = {"server": server.url} if server is not None else {}
        env = SampleEnv(folder, _maker(agent, store), _judge(judge_model), values, (budget,) if budget else (),
                        shared_store=bool(store))
        samples = samples_of(suite, models, epochs)
        if ray is not None:
            from .ray_runner import run_ray

            await run_ray(samples, env, log, address=ray, jobs=jobs, on_result=on_result,
                          may_start=lambda: _room(budget))
        else:
            await run_local(samples, env, log, jobs=jobs, on_result=on_result, may_start=lambda: _room(budget))
    finally:
        log.close()
        if server is not None:
            server.close()
    order = {c.id: i for i, c in enumerate(suite.cases)}
    ranks = {m or "default": i for i, m in enumerate(models)}
    results = sorted(read_results(folder), key=lambda r: (order.get(r["case"], len(order)),
                                                          ranks.get(r["model"], len(ranks)), r.get("epoch", 1)))
    report = summarize(results, [m or "default" for m in models], str(folder))  # in the suite's order
    report.not_run = total - len(report.results)
    _write_summary(folder, report)
    return report


def _maker(agent: Agent | AgentMaker | None, store: str | None) -> AgentMaker:
    if agent is None:
        shared = None
        if store:
            from ..store.spec import open_store

            shared = open_store(store, Path.cwd(), None)
        return settings_maker({}, store=shared if shared is not None else "workspace")
    if callable(agent) and not hasattr(agent, "config"):
        return agent
    return agent_maker(agent)  # type: ignore[arg-type]


def _budget(max_cost: float | None, log: ResultsLog) -> Budget | None:
    """The whole run's budget, counting what the samples a continued run finished already spent."""
    if max_cost is None:
        return None
    from ..agent.budget import Budget

    spent = 0.0
    for cost in log.done.values():
        spent += cost or 0.0
    return Budget(max_cost, None, Usage(cost=spent), cost_label=EVAL_BUDGET)


def _room(budget: Budget | None) -> bool:
    """Whether another sample may start: the run's budget (if any) has something left."""
    if budget is None:
        return True
    spent = budget.spent.cost
    return spent is not None and spent + budget.reserved_cost < (budget.max_cost or 0.0)


def _judge(judge_model: str | None) -> JudgeEnv:
    """Judges use `judge_model` (or the model a check names, else the configured one), priced by the settings."""
    from ..config import load_settings
    from ..models import get_model
    from ..pricing import PriceTable

    settings = load_settings({})

    def model_for(spec: str | None) -> Any:
        return get_model(spec or judge_model, settings)

    return JudgeEnv(model_for, PriceTable(getattr(settings, "models", None)))


def _write_summary(folder: Path, report: Report) -> None:
    """`summary.json` and `report.html` beside the results (each written whole, then renamed into place)."""
    from .html import render_html

    for name, text in (("summary.json", json.dumps(report.to_dict(), indent=1)), ("report.html", render_html(report))):
        tmp = folder / (name + ".tmp")
        tmp.write_text(text, encoding="utf-8")
        os.replace(tmp, folder / name)


class _Site:
    """A folder served read-only over HTTP on 127.0.0.1 (a port of its own) while a suite runs."""

    def __init__(self, root: Path) -> None:
        import functools
        import threading
        from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer

        class Quiet(SimpleHTTPRequestHandler):
            def log_message(self, format: str, *args: Any) -> None:
                pass

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), functools.partial(Quiet, directory=str(root)))
        self.url = f"http://127.0.0.1:{self._server.server_address[1]}"
        threading.Thread(target=self._server.serve_forever, daemon=True, name="shou-eval-www").start()

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()
