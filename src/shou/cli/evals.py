"""`shou eval` and `shou batch`: many tasks, checked (eval) or just carried out (batch), `-j` at a time, on this
machine or a Ray cluster; `shou eval compare A B`: what changed between two evaluations.

Exit codes: 0 every sample ran (whatever it scored); 1 some did not (the budget ran out; run the same command
again with a larger --max-cost to go on); 2 the command, the suite or the setup is wrong; 130 Ctrl-C (the same
command again continues where it stopped).
"""

from __future__ import annotations

import asyncio
import os
import signal
import time
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.console import Console

from ..errors import ShouError, UserError
from ..markup import escape
from .build import (
    ApprovalsOpt,
    BaseUrlOpt,
    FunctionsOpt,
    OptionOpt,
    ProviderOpt,
    SandboxOpt,
    StepsOpt,
    ToolsOpt,
    model_options,
)
from .common import err, fail, finite

ModelsOpt = Annotated[list[str] | None, typer.Option(
    "--model", "-m", metavar="MODEL", help="A model to run every case with (repeatable; 'oracle' replays each "
                                            "case's scripted solution). Default: the case's or the configured one.")]
# Counts are bounded (a run of 10**20 epochs or jobs was a hang making its samples, not an error)
JobsOpt = Annotated[int, typer.Option("--jobs", "-j", min=1, max=1000, metavar="N",
                                      help="Samples run at once (default 4).")]
OutOpt = Annotated[Path | None, typer.Option(
    "--out", metavar="DIR", help="The results folder (default: a new one under shou-results/); the same folder "
                                 "and command again continue a run.")]
EvalCostOpt = Annotated[float | None, typer.Option(
    "--max-cost", metavar="USD", min=0, max=1_000_000, callback=finite,
    help="Most US dollars the whole run may spend, its judges included.")]
RayOpt = Annotated[str | None, typer.Option(
    "--ray", metavar="ADDRESS", help="Run the samples on Ray: 'auto' (a bare --ray: a running cluster, or "
                                     "RAY_ADDRESS), 'local' (start one here) or HOST:PORT. Needs pip install "
                                     "'shou[ray]'.")]
JudgeOpt = Annotated[str | None, typer.Option(
    "--judge-model", metavar="MODEL", help="The LLM judges' model (default: the configured one).")]
CaseOpt = Annotated[list[str] | None, typer.Option("--case", metavar="ID", help="Only these cases (repeatable).")]
TagOpt = Annotated[list[str] | None, typer.Option("--tag", metavar="TAG", help="Only cases with a tag.")]
BatchModelOpt = Annotated[str | None, typer.Option(
    "--model", "-m", metavar="MODEL", help="The model (default: each task's, else the configured one).")]
StoreOpt = Annotated[str | None, typer.Option(
    "--store", metavar="URL", help="The store every sample's session goes to (postgresql://...), so that a "
                                   "sample retried on another Ray node resumes. Default: each workspace's own.")]


def _flags(base_url: str | None, provider: str | None, max_steps: int | None, tools: str | None,
           sandbox: str | None, option: list[str] | None, approvals: str | None) -> dict[str, Any]:
    """The settings the shared run flags give (as load_settings takes them)."""
    flags = {"base_url": base_url, "provider": provider, "max_steps": max_steps, "tools": tools, "sandbox": sandbox,
             "approvals": "deny" if approvals in (None, "ask") else approvals, **model_options(option or ())}
    return {k: v for k, v in flags.items() if v is not None}


def eval_command(
    suite: Annotated[str | None, typer.Argument(
        metavar="SUITE", help="A suite: a JSONL file of cases or a folder with suite.jsonl ('compare A B' compares "
                              "two results folders).")] = None,
    runs: Annotated[list[str] | None, typer.Argument(hidden=True)] = None,
    builtin: Annotated[str | None, typer.Option("--suite", metavar="NAME", help="A built-in suite: seeds.")] = None,
    model: ModelsOpt = None, epochs: Annotated[int, typer.Option("--epochs", min=1, max=1000, metavar="K",
                                                                 help="Runs of every case per model.")] = 1,
    jobs: JobsOpt = 4, out: OutOpt = None, max_cost: EvalCostOpt = None,
    judge_model: JudgeOpt = None, case: CaseOpt = None, tag: TagOpt = None,
    ray: RayOpt = None, store: StoreOpt = None,
    base_url: BaseUrlOpt = None, provider: ProviderOpt = None, max_steps: StepsOpt = None, tools: ToolsOpt = None,
    functions: FunctionsOpt = None, sandbox: SandboxOpt = None, option: OptionOpt = None,
    approvals: ApprovalsOpt = None,
) -> None:
    """Run an evaluation: every case of a suite, by each model, checked; a summary table, and results.jsonl,
    summary.json and report.html in the results folder."""
    if suite == "compare":
        _compare(runs or [])
        return
    if runs:
        raise fail(f"unexpected argument(s): {' '.join(runs)}")
    from ..eval.cases import Suite, select

    try:
        if builtin is not None:
            if suite is not None:
                raise UserError("give a suite or --suite NAME, not both")
            loaded = _builtin(builtin)
        elif suite is None:
            raise UserError("give a suite (a JSONL file or a folder with suite.jsonl) or --suite seeds")
        else:
            loaded = Suite.load(suite)
        picked = select(loaded.cases, case, tag)
        loaded = Suite(loaded.name, tuple(picked), loaded.source, loaded.www)
        flags = _flags(base_url, provider, max_steps, tools, sandbox, option, approvals)
    except ShouError as e:
        raise fail(str(e)) from None
    _run(loaded, "eval", flags, functions, model or [None], epochs, jobs, out, max_cost, judge_model, ray, store)


def batch(
    tasks: Annotated[Path, typer.Argument(metavar="TASKS.jsonl", help="One task per line: {\"id\", \"task\", "
                                                                      "\"files\"?, \"model\"?, ...}.")],
    model: BatchModelOpt = None,
    jobs: JobsOpt = 4, out: OutOpt = None, max_cost: EvalCostOpt = None, ray: RayOpt = None, store: StoreOpt = None,
    base_url: BaseUrlOpt = None, provider: ProviderOpt = None, max_steps: StepsOpt = None, tools: ToolsOpt = None,
    functions: FunctionsOpt = None, sandbox: SandboxOpt = None, option: OptionOpt = None,
    approvals: ApprovalsOpt = None,
) -> None:
    """Carry out many tasks, each in its own session and a fresh copy of its fixture; results.jsonl (one line
    per task: status, answer, steps, tokens, cost, latency, session) and the files each wrote, in --out."""
    from ..eval.cases import Suite, load_cases

    try:
        suite = Suite(tasks.stem, tuple(load_cases(tasks, batch=True)), str(tasks.resolve()))
        flags = _flags(base_url, provider, max_steps, tools, sandbox, option, approvals)
    except ShouError as e:
        raise fail(str(e)) from None
    _run(suite, "batch", flags, functions, [model], 1, jobs, out, max_cost, None, ray, store)


def _builtin(name: str) -> Any:
    from ..eval.cases import Suite
    from ..eval.suites import builtin_suite

    folder = builtin_suite(name)
    return Suite.load(folder, name)


def _run(suite: Any, kind: str, flags: dict[str, Any], functions: list[Path] | None, models: list[str | None],
         epochs: int, jobs: int, out: Path | None, max_cost: float | None, judge_model: str | None,
         ray: str | None, store: str | None) -> None:
    from ..eval.driver import evaluate
    from ..eval.make import settings_maker
    from ..eval.report import summary_table

    if not suite.cases:
        raise fail("no case to run (check --case and --tag)")
    shared = None
    if store:
        from ..store.spec import open_store

        try:
            shared = open_store(store, Path.cwd(), None)
        except ShouError as e:
            raise fail(str(e)) from None
    maker = settings_maker(flags, functions=functions or (), store=shared if shared is not None else "workspace")
    progress = _Progress(kind)
    _stop_like_a_kill(progress)
    try:
        report = asyncio.run(evaluate(suite, out=out, models=models, epochs=epochs, jobs=jobs, agent=maker,
                                      max_cost=max_cost, judge_model=judge_model, kind=kind, ray=ray,
                                      store=store, on_start=progress.start, on_result=progress.result))
    except ShouError as e:
        progress.stop()
        raise fail(str(e)) from None
    finally:
        progress.stop()
        if shared is not None:
            shared.close()
    out_console = Console(highlight=False)
    out_console.print(summary_table(report))
    out_console.print(f"results: {escape(report.folder)}/results.jsonl, report: {escape(report.folder)}/report.html")
    if report.not_run:
        err.print(f"[yellow]{report.not_run} sample(s) were not run[/] (the --max-cost was reached); the same "
                  "command with a larger --max-cost goes on")
        raise typer.Exit(1)


def _stop_like_a_kill(progress: _Progress) -> None:
    """Ctrl-C stops the run the way `kill -9` would: at once, leaving every run open in its log. Cancelling
    the runs instead would record them as cancelled, and they could then only start over; as they are, the
    same command resumes each from its log (every side effect was logged before it happened)."""

    def stop(signum: int, frame: Any) -> None:
        progress.stop()
        err.print("\n[yellow]stopped[/]: run the same command again to continue where it stopped")
        os._exit(130)

    signal.signal(signal.SIGINT, stop)


class _Progress:
    """A progress bar on stderr: samples done, pass/fail/error counts, spend so far, ETA."""

    def __init__(self, kind: str) -> None:
        self.kind = kind
        self.counts = {"pass": 0, "fail": 0, "error": 0}
        self.cost: float | None = 0.0
        self._bar: Any = None
        self._task: Any = None
        self._started = time.monotonic()

    def start(self, total: int, done: int) -> None:
        from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn

        if done:
            err.print(f"continuing: {done} of {total} samples have results already")
        self._bar = Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                             TextColumn("{task.fields[counts]}"), TimeRemainingColumn(), console=err,
                             transient=False)
        self._task = self._bar.add_task(self.kind, total=total, completed=done, counts=self._text())
        self._bar.start()

    def _text(self) -> str:
        c = self.counts
        cost = "unknown" if self.cost is None else f"${self.cost:.4f}"
        return f"pass {c['pass']} fail {c['fail']} error {c['error']} · {cost}"

    def result(self, result: dict[str, Any]) -> None:
        self.counts[result["outcome"]] = self.counts.get(result["outcome"], 0) + 1
        if self.cost is not None:
            self.cost = None if result.get("cost") is None else self.cost + result["cost"]
        if self._bar is not None:
            self._bar.update(self._task, advance=1, counts=self._text())

    def stop(self) -> None:
        if self._bar is not None:
            self._bar.stop()
            self._bar = None


def _compare(runs: list[str]) -> None:
    from ..eval.compare import compare, print_comparison

    if len(runs) != 2:
        raise fail("give two results folders: shou eval compare RUN_A RUN_B")
    try:
        diff = compare(Path(runs[0]), Path(runs[1]))
    except ShouError as e:
        raise fail(str(e)) from None
    print_comparison(Console(highlight=False), diff)
