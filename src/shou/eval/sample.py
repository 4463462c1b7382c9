"""One sample: a case's tasks carried out by one model in one epoch, in a workspace of its own, then checked.

Durability comes from the session log, not from this module: each task runs in a session named after the
sample (`KEY`, or `KEY.1`, `KEY.2`, ... for a case of several tasks) in the sample's store. Carried out again
after a crash, a sample looks at its sessions first:
- a task whose run finished is not run again (its `RunFinished` is the result: a kill between the run's end
  and the result line loses nothing and counts nothing twice);
- a task whose run a killed process left open is resumed (`Agent.aresume`: finished tool calls are never
  repeated, one cut short is reported to the model as interrupted);
- a sample with nothing durable yet (killed before its first commit), whose workspace is gone (a Ray node
  died and its disk with it), or whose run was cancelled rather than left open, starts over from its fixture
  in a fresh workspace, its old sessions deleted first: resuming without the workspace the log describes, or
  a run that was closed, would not be exact.
"""

from __future__ import annotations

import asyncio
import hashlib
import os
import re
import shutil
import stat
import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..beneath import remove_tree
from ..errors import ConfigError, UserError
from ..events import ModelResponse, RunFinished, RunResumed, RunStarted
from .cases import Case, bind, fixture_path_problem
from .outcome import Outcome, Verdict

if TYPE_CHECKING:
    from ..agent.agent import Agent
    from ..agent.budget import Budget
    from .judge import JudgeEnv

__all__ = ["AgentMaker", "Sample", "SampleEnv", "run_sample", "sample_key", "session_names"]

AgentMaker = Callable[["Sample", Path], "Agent | Awaitable[Agent]"]
MAX_LISTED = 200  # files listed as written by a sample
EVAL_BUDGET = "the evaluation's --max-cost"  # the label of the budget every run of an evaluation shares


@dataclass(frozen=True)
class Sample:
    """A case, the model spec that carries it out (None: the case's or the configured one; `oracle`: the
    case's scripted solution) and the epoch (1-based)."""

    case: Case
    model: str | None
    epoch: int = 1

    @property
    def key(self) -> str:
        """The sample's id: its result line, session and workspace folder are named by it."""
        return sample_key(self.case.id, self.model, self.epoch)


def sample_key(case_id: str, model: str | None, epoch: int) -> str:
    """`CASE@MODEL#EPOCH`, the model's spec made filename-safe (with a hash when that changed it)."""
    spec = model or "default"
    slug = re.sub(r"[^A-Za-z0-9._-]+", "-", spec).strip("-")[:40] or "model"
    if slug != spec:
        slug += "-" + hashlib.sha256(spec.encode()).hexdigest()[:6]
    return f"{case_id}@{slug}#{epoch}"


def session_names(sample: Sample) -> list[str]:
    """The session of each of the sample's tasks."""
    n = len(sample.case.tasks)
    return [sample.key] if n == 1 else [f"{sample.key}.{i}" for i in range(1, n + 1)]


@dataclass(frozen=True)
class SampleEnv:
    """What every sample of one evaluation shares: the results folder (workspaces go in `out/work/`), how an
    agent is made for a sample's workspace (its store included), and the judge's needs."""

    out: Path
    make_agent: AgentMaker
    judge: JudgeEnv | None = None
    values: Mapping[str, str] = field(default_factory=dict)  # placeholders besides {{workspace}} ({{server}})
    budgets: tuple[Budget, ...] = ()  # held by every run of the evaluation (its --max-cost)
    shared_store: bool = False  # the agents' store serves every sample (PostgreSQL): not closed per sample

    def workspace(self, sample: Sample) -> Path:
        """The sample's workspace folder: named after the sample, but with no '#', which would end the path of
        a file:// URL of a workspace file (`{{workspace}}` in a case's task)."""
        return self.out / "work" / sample.key.replace("#", "-")


async def run_sample(sample: Sample, env: SampleEnv) -> dict[str, Any] | None:
    """Carry out `sample` (resuming what a killed process left) and check it; its result line, or None when the
    evaluation's own budget stopped it (it was not evaluated: it starts over when the run goes on with more).
    A case whose setup is wrong (a bad setting, an unknown model) gives an `error` result; a store or disk
    failure is raised: the sample is then neither finished nor lost, and the next attempt resumes it."""
    started = time.time()
    ws = env.workspace(sample)
    sample = replace(sample, case=bind(sample.case, {**env.values, "workspace": str(ws.resolve())}))
    names = session_names(sample)
    try:
        agent = await _agent_for(sample, env, ws, names)
    except (UserError, ConfigError, ValueError) as e:
        return _result(sample, env, names, [], [], started, error=f"{type(e).__name__}: {e}")
    try:
        finals: list[RunFinished] = []
        for task, name in zip(sample.case.tasks, names, strict=True):
            finals.append(await _carry_out(agent, task, name))
            if finals[-1].status != "completed":
                break  # a later task builds on this one; it is not tried
    finally:
        await _close(agent, env)
    if _out_of_budget(finals[-1]):
        return None
    outcome = Outcome(finals[-1].answer, tuple(f.answer for f in finals), finals[-1].status, ws,
                      sample.case.tasks[len(finals) - 1], env.judge)
    verdicts = [await check(outcome) for check in sample.case.checks]
    return await asyncio.to_thread(_result, sample, env, names, finals, verdicts, started)


async def _agent_for(sample: Sample, env: SampleEnv, ws: Path, names: list[str]) -> Agent:
    """The sample's agent, on its workspace: the one a killed attempt left (if its log holds something), or a
    fresh copy of the fixture."""
    if await asyncio.to_thread(ws.is_dir):
        agent = await _make(env, sample, ws)
        if any(_has_events(agent, n) for n in names) and not _stopped(agent, names):
            answered = getattr(agent.model, "answered", None)
            if answered is not None:  # a scripted model (the oracle) goes on where the log says it was
                answered(_responses(agent, names))
            return agent
        await _close(agent, env)
        if not await asyncio.to_thread(remove_tree, ws):  # an agent's tree may be any depth: no recursion
            raise UserError(f"the workspace {ws} an earlier attempt left could not be removed; remove it, and "
                            "run again")
    await asyncio.to_thread(_fixture, ws, sample.case.files)
    agent = await _make(env, sample, ws)
    for name in names:  # a shared store may hold the sessions of an attempt whose workspace is gone
        if agent.store is not None and agent.store.exists(name):
            agent.store.delete(name)
    return agent


async def _make(env: SampleEnv, sample: Sample, ws: Path) -> Agent:
    """The maker's agent with the case's limits and the evaluation's budgets, whichever maker made it."""
    made = env.make_agent(sample, ws)
    agent: Agent = await made if isinstance(made, Awaitable) else made  # type: ignore[assignment]
    fields = sample.case.limits.fields()
    if env.budgets:
        fields["shared_budgets"] = (*agent.config.shared_budgets, *env.budgets)
    if fields:
        agent.config = replace(agent.config, **fields)
    return agent


def _stopped(agent: Agent, names: list[str]) -> bool:
    """Whether a run of the sample was stopped from outside (cancelled, closed as interrupted, or refused by
    the evaluation's budget) rather than left open: its log cannot be resumed, so the sample starts over in a
    fresh workspace."""
    for name in names:
        end = last_run_end(agent, name)
        if end is not None and (end.status in ("cancelled", "interrupted") or _out_of_budget(end)):
            return True
    return False


def _out_of_budget(end: RunFinished) -> bool:
    """Whether the evaluation's `--max-cost` (not the case's own limit) ended the run."""
    return end.status == "budget" and EVAL_BUDGET in (end.error or "")


def _responses(agent: Agent, names: list[str]) -> int:
    """How many model calls of the sample were answered (their `ModelResponse` logged), sub-runs' included."""
    assert agent.store is not None
    return sum(1 for name in names if agent.store.exists(name)
               for _, event in agent.store.rows(name) if isinstance(event, ModelResponse))


def _has_events(agent: Agent, name: str) -> bool:
    return agent.store is not None and agent.store.exists(name)


async def _carry_out(agent: Agent, task: str, name: str) -> RunFinished:
    """The end of `task`'s run in session `name`: recorded already, resumed, or run now."""
    done = last_run_end(agent, name)
    if done is not None:
        return done
    session = agent.session(name)
    result = await (agent.aresume(session) if session.open_run is not None else agent.arun(task, session))
    return RunFinished(result.run_id, result.status, result.answer, result.steps, result.usage, result.wall_time,
                       result.error)


def last_run_end(agent: Agent, name: str) -> RunFinished | None:
    """The `RunFinished` of the session's last top-level run, if that run finished (None: no run, or one
    still open)."""
    store = agent.store
    if store is None or not store.exists(name):
        return None
    last: str | None = None
    end: RunFinished | None = None
    for _, event in store.rows(name):
        if event.parent:
            continue
        if isinstance(event, RunStarted | RunResumed):
            last, end = event.run_id, None
        elif isinstance(event, RunFinished) and event.run_id == last:
            end = event
    return end


async def _close(agent: Agent, env: SampleEnv) -> None:
    """Close what is the sample's own: its model's connections and its store. MCP servers and browsers are
    shared by the samples running at once: the evaluation closes them at its end."""
    try:
        await agent.model.aclose()
    finally:
        if agent.store is not None and not env.shared_store:
            agent.store.close()


def _fixture(ws: Path, files: Path | Mapping[str, str | bytes] | None) -> None:
    """A fresh workspace: a copy of the fixture folder, or the given files."""
    ws.parent.mkdir(parents=True, exist_ok=True)
    if isinstance(files, Path):
        shutil.copytree(files, ws, symlinks=True)
        return
    ws.mkdir()
    for rel, content in (files or {}).items():
        problem = fixture_path_problem(rel, files)  # the Case checked it too: this guards a mapping changed since
        if problem:
            raise UserError(f"fixture file {rel!r}: {problem}")
        path = ws / rel
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_bytes(content.encode() if isinstance(content, str) else content)
        except OSError as e:  # a name this file system refuses: the case's fault, said as such
            raise UserError(f"fixture file {rel!r}: cannot write it ({e.strerror or e})") from None


def written_files(ws: Path, files: Path | Mapping[str, str | bytes] | None) -> list[str]:
    """The workspace files that are not as the fixture had them (new or changed), `.shou/` left out. The walk
    keeps its own stack (`os.walk` recurses once a level on Python 3.11: an agent's tree 1,500 deep was a
    RecursionError) and follows no link (a link is an entry of its own)."""
    out: list[str] = []
    stack = [ws]
    while stack:
        folder = stack.pop()
        try:
            with os.scandir(folder) as it:
                entries = sorted((e.name, e.is_dir(follow_symlinks=False)) for e in it)
        except OSError:
            continue
        for name, is_dir in entries:
            if is_dir:
                continue
            path = folder / name
            rel = path.relative_to(ws).as_posix()
            if _changed(path, rel, files):
                out.append(rel)
                if len(out) >= MAX_LISTED:
                    return out
        stack += [folder / n for n, is_dir in reversed(entries) if is_dir and not (folder == ws and n == ".shou")]
    return out


def _changed(path: Path, rel: str, files: Path | Mapping[str, str | bytes] | None) -> bool:
    """Whether the workspace's `path` is not as the fixture had it. Only a regular file of the fixture's size
    is read (an agent's FIFO blocked the read, and a sparse 64 GB file would have been read whole); a link is
    compared by where it points; anything else the fixture cannot have held."""
    if isinstance(files, Path):
        was = _spelled(files / rel, None)
    else:
        given = (files or {}).get(rel)
        was = None if given is None else ("file", given.encode() if isinstance(given, str) else given)
    return was is None or _spelled(path, len(was[1]) if was[0] == "file" else None) != was


def _spelled(path: Path, size: int | None) -> tuple[str, bytes] | None:
    """("link", its target) or ("file", its bytes); None for anything else, or a file whose size is not `size`."""
    try:
        st = os.lstat(path)
        if stat.S_ISLNK(st.st_mode):
            return "link", os.fsencode(os.readlink(path))
        if not stat.S_ISREG(st.st_mode) or (size is not None and st.st_size != size):
            return None
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError:
        return None
    with os.fdopen(fd, "rb") as f:
        return "file", f.read(st.st_size + 1)


def _result(sample: Sample, env: SampleEnv, names: list[str], finals: list[RunFinished], verdicts: list[Verdict],
            started: float, error: str | None = None) -> dict[str, Any]:
    """The sample's result line (see `shou.eval.results`)."""
    case = sample.case
    last = finals[-1] if finals else None
    usage = [f.usage for f in finals]
    costs = [u.cost for u in usage] + [v.cost for v in verdicts]
    status = last.status if last is not None else "error"
    if error is None and last is not None and last.status in ("error", "interrupted", "cancelled"):
        error = last.error or last.status
    passed = error is None and (all(v.passed for v in verdicts) if verdicts else status == "completed")
    score = (sum(v.score for v in verdicts) / len(verdicts)) if verdicts else float(passed)
    ws = env.workspace(sample)
    return {
        "sample": sample.key, "case": case.id, "model": sample.model or "default", "epoch": sample.epoch,
        "outcome": "error" if error is not None else "pass" if passed else "fail",
        "passed": passed, "score": round(score, 6), "status": status,
        "answer": last.answer if last is not None else "",
        "answers": [f.answer for f in finals] if len(case.tasks) > 1 else None,
        "steps": sum(f.steps for f in finals),
        "tokens": {"input": sum(u.input_tokens for u in usage), "output": sum(u.output_tokens for u in usage),
                   "total": sum(u.total_tokens for u in usage) + sum(v.tokens for v in verdicts)},
        "cost": None if any(c is None for c in costs) else round(sum(c for c in costs if c is not None), 8),
        "judge_cost": sum((v.cost or 0.0) for v in verdicts),
        "latency": round(sum(f.wall_time for f in finals), 4),
        "elapsed": round(time.time() - started, 4),
        "sessions": names, "session": names[len(finals) - 1] if finals else names[0],
        "workspace": os.path.relpath(ws, env.out),
        "wrote": written_files(ws, case.files) if ws.is_dir() else [],
        "checks": [v.to_dict() for v in verdicts],
        "error": error, "tags": list(case.tags), "finished_at": time.time(),
    }
