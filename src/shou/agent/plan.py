"""Plan and execute: a planning call breaks the task into steps, each step runs as its own ReAct loop, a
failed step leads to a new plan for what remains, and one last call writes the answer from the results.

The planner is offered one tool, `submit_plan(steps)`. Each step is a sub-run (shou.agent.subrun) with all
the agent's tools, `plan_step_max_steps` model calls and `plan_step_timeout` seconds; its context is the
task, the plan and the results of the steps before it. A step that ends in anything but `completed`
fails, and so does a completed one whose verdict (agent/verdict.py: the step's model, asked whether the
step achieved what it was for) is "not done"; the planner is then called again with the plan, what was
done and why the step failed (at most `max_replans` times). `PlanUpdated` events carry the plan after
every change, so a consumer can show it as a live checklist, and a resumed run picks the plan up where the
log left it.
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

from ..events import PlanStep, PlanUpdated, RunFinished, RunStatus, StepFinished
from ..messages import Message
from .subrun import outcome, sub_config
from .turn import must_call, tool_arguments
from .verdict import judge_step

if TYPE_CHECKING:
    from ..session import Session
    from .agent import Agent
    from .config import AgentConfig
    from .loop import Run

# How a step's sub-run is started (agent/runs.py's run_sub): given, so a plan builds its steps like any run.
StartSub = Callable[["Run", "Agent", str, "str | None"], Awaitable[tuple[RunFinished, "Session"]]]

PLANNER = (
    "You plan how an AI agent will carry out a task. The agent has these tools: {tools}. Break the task into "
    "a short list of concrete steps (usually 2 to 6), each one a piece of work the agent can finish with its "
    "tools and report on. Do not add steps for things the task does not need. Call `submit_plan` with the "
    "steps, in order."
)
REPLAN = (
    "The plan below was being carried out and a step failed. Submit a new plan for what remains to be done "
    "(the steps marked done are done and stay done; do not repeat them). Take into account why the step "
    "failed: try another way, or split the work differently."
)
STEP = (
    "# Task\n{task}\n\n# Plan\n{plan}\n\n# Results of the steps before this one\n{results}\n\n"
    "# Now do step {number}\n{text}\n\nDo this step only, with your tools. When it is done, reply with what "
    "you did and what you found: your reply is all the next steps will know of this one."
)
ANSWER = (
    "# Task\n{task}\n\n# What was done\nThe task was carried out in steps; here is each step and its result.\n"
    "{results}\n\nWrite the final answer to the task for the person who asked, from these results."
)
SUBMIT_SPEC: dict[str, Any] = {"type": "function", "function": {
    "name": "submit_plan",
    "description": "Submit the plan: the steps, in the order they are to be carried out.",
    "parameters": {"type": "object", "properties": {
        "steps": {"type": "array", "items": {"type": "string"}, "minItems": 1,
                  "description": "One entry per step: what to do, concretely."}},
        "required": ["steps"], "additionalProperties": False}}}
MAX_STEPS = 20  # of one plan: more is a planner gone wrong
RESULT_CHARS = 4000  # of one step's result carried into later prompts
STEP_CHARS = 2000  # of one step's description


class Planner:
    """Drives one planned run: `execute()` returns how it ended, like the ReAct loop; `start` runs a step."""

    def __init__(self, run: Run, start: StartSub) -> None:
        self.run = run
        self.start = start
        self.revision = 0
        self.steps: list[PlanStep] = []
        self.replans = 0

    async def execute(self) -> tuple[RunStatus, str, str | None]:
        """Plan, carry out the steps (re-planning after a failure), then answer."""
        run = self.run
        agent = run.agent
        failed = self._pick_up()
        if failed is None:
            ended = await self._plan()
            if ended is not None:
                return ended
            failed = -1
        while True:
            if failed >= 0:
                why = self.steps[failed].result
                if self.replans >= agent.max_replans:
                    return "error", "", (f"step {failed + 1} of the plan failed and {self.replans} re-plan(s) are "
                                         f"all that max_replans allows: {why}")
                self.replans += 1
                ended = await self._plan(failed=failed)
                if ended is not None:
                    return ended
                failed = -1
            i = next((n for n, s in enumerate(self.steps) if s.status == "pending"), None)
            if i is None:
                break
            self._set(i, status="running", run_id=f"{run.run_id}.s{self.revision}.{i + 1}")
            self._publish()
            done, session = await self.start(run, self._step_agent(), self._step_prompt(i), self.steps[i].run_id)
            result = outcome(done, session)
            why = done.status
            if done.status == "completed":
                verdict = await judge_step(run, self.steps[i].text, result, session)
                if isinstance(verdict, str):
                    return "budget", "", verdict
                achieved, reason = verdict
                if achieved:
                    self._set(i, status="done", result=result)
                    self._publish()
                    continue
                why = "its verdict: not done"
                result = f"not done: {reason or '(no reason given)'}\nThe step's report: {result}"
            self._set(i, status="failed", result=result)
            self._publish(f"step {i + 1} failed ({why})", awaiting=i + 1)
            failed = i
        return await self._answer()

    # ------------------------------------------------------------------ planning

    def _pick_up(self) -> int | None:
        """Continue the plan a killed run logged: None if there is none; else the step whose failure waits for
        a re-plan (-1: none). A step that was running counts as failed: what it did is unknown, so the
        planner decides what to do rather than running it blindly again."""
        resumed = self.run.resume
        if resumed is None or resumed.plan is None:
            return None
        plan = resumed.plan
        self.revision = plan.revision
        self.replans = max(0, plan.revision - 1)
        self.steps = list(plan.steps)
        failed = plan.awaiting - 1
        for i, step in enumerate(self.steps):
            if step.status == "running":
                self._set(i, status="failed", result="interrupted: the process stopped during this step, so what "
                                                     "it did is unknown; check before doing it again")
                failed = i
        self._publish("resumed", awaiting=failed + 1)
        return failed

    async def _plan(self, failed: int | None = None) -> tuple[RunStatus, str, str | None] | None:
        """Ask for a plan (a new one for what remains when step `failed` failed); None when it is in place."""
        run = self.run
        agent = run.agent
        system = PLANNER.format(tools=", ".join(t for t in agent.tools.names if t != "delegate") or "none")
        prompt = f"# Task\n{run.task}"
        if failed is not None:
            prompt += f"\n\n{REPLAN}\n\n# The plan so far\n{self._checklist(results=True)}"
        messages = [Message.system(system), Message.user(prompt)]
        turn = await run.caller.call(messages, [SUBMIT_SPEC], run.step, settings=must_call(agent.model_settings),
                                     run_id=run.sub_id(), parent=run.run_id, purpose="plan", deltas=False)
        if isinstance(turn, str):
            return "budget", "", turn
        steps = _submitted(turn.completion.message) or [run.task if failed is None else
                                                        self.steps[failed].text]
        kept = self.steps[: failed + 1] if failed is not None else []
        self.steps = kept + [PlanStep(text) for text in steps[:MAX_STEPS]]
        self.revision += 1
        self._publish(f"re-planned after step {failed + 1} failed" if failed is not None else "")
        return None

    # ------------------------------------------------------------------ steps

    @staticmethod
    def step_config(config: AgentConfig) -> AgentConfig:
        """The config a step of a plan of `config` runs with: a sub-run's, with the plan's step limits."""
        return sub_config(config, max_steps=config.plan_step_max_steps, run_timeout=config.plan_step_timeout)

    def _step_agent(self) -> Agent:
        agent = self.run.agent
        return agent.variant(self.step_config(agent.config))

    def _step_prompt(self, i: int) -> str:
        return STEP.format(task=self.run.task, plan=self._checklist(current=i), results=self._results() or "(none)",
                           number=i + 1, text=self.steps[i].text)

    def _results(self) -> str:
        return "\n\n".join(f"## Step {n}: {s.text}\n{_cut(s.result)}" for n, s in enumerate(self.steps, 1)
                           if s.status == "done")

    def _checklist(self, current: int | None = None, results: bool = False) -> str:
        marks = {"pending": "[ ]", "running": "[>]", "done": "[x]", "failed": "[!]"}
        lines = []
        for n, s in enumerate(self.steps, 1):
            mark = "[>]" if current == n - 1 else marks[s.status]
            line = f"{n}. {mark} {s.text}"
            if results and s.result and s.status in ("done", "failed"):
                line += f"\n   {'result' if s.status == 'done' else 'why it failed'}: {_cut(s.result, 1500)}"
            lines.append(line)
        return "\n".join(lines)

    async def _answer(self) -> tuple[RunStatus, str, str | None]:
        """The last call: the final answer from the steps' results, in the run's own conversation."""
        run = self.run
        agent = run.agent
        run.step += 1
        messages = [Message.system(agent.instructions),
                    Message.user(ANSWER.format(task=run.task, results=self._results() or "(no step had a result)"))]
        turn = await run.caller.call(messages, [], run.step, purpose="answer")
        if isinstance(turn, str):
            run.step -= 1
            return "budget", "", turn
        run.emit(StepFinished(run.run_id, run.step, run.usage))
        if turn.completion.finish_reason == "length":
            return "truncated", turn.message.text, "the final answer was cut at the output limit"
        return "completed", turn.message.text, None

    # ------------------------------------------------------------------ state

    def _set(self, i: int, **changes: Any) -> None:
        s = self.steps[i]
        self.steps[i] = PlanStep(changes.get("text", s.text), changes.get("status", s.status),
                                 changes.get("result", s.result), changes.get("run_id", s.run_id))

    def _publish(self, note: str = "", awaiting: int = 0) -> None:
        run = self.run
        run.emit(PlanUpdated(run.run_id, self.revision, tuple(self.steps), note, awaiting))
        run.commit()


def _submitted(message: Message) -> list[str]:
    """The steps of the planner's `submit_plan` call (none when it did not make one that parses), each cut to
    a readable size: every later step's prompt carries them all."""
    steps = (tool_arguments(message, "submit_plan") or {}).get("steps")
    if not isinstance(steps, list):
        return []
    return [_cut(text, STEP_CHARS) for s in steps if (text := (s if isinstance(s, str) else json.dumps(s)).strip())]


def _cut(text: str, limit: int = RESULT_CHARS) -> str:
    return text if len(text) <= limit else text[:limit] + " [...]"
