"""A plan step's verdict: did the step's run do what the step was for?

A step's run ending `completed` only says its model stopped calling tools: a step whose tool failed and
whose model replied "FAILED" ended `completed` too, and was marked done. So after each completed step the
step's model is asked, in a call of its own that must call `step_verdict(done, reason)`, whether the step
was achieved, from the step, what its tools returned and its reply. `done=false` fails the step, and the
plan is revised (agent/plan.py). A model that answers without the call leaves the step as its run ended
(done), so that a model that cannot be made to call a tool does not fail every plan; a notice says so.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ..events import Notice
from ..messages import Message
from .review import tool_evidence
from .turn import must_call, tool_arguments

if TYPE_CHECKING:
    from ..session import Session
    from .loop import Run

JUDGE = (
    "You check one step of a plan that an AI agent carried out. You see the step, what the agent's tools "
    "returned while doing it, and the agent's report. Decide whether the step achieved what it was for. A step "
    "whose tools failed, whose report says it failed or could not be done, or whose result is missing or "
    "contradicted by the tool results, is not done. Call `step_verdict` exactly once."
)
VERDICT_SPEC: dict[str, Any] = {"type": "function", "function": {
    "name": "step_verdict",
    "description": "Say whether the step achieved what it was for.",
    "parameters": {"type": "object", "properties": {
        "done": {"type": "boolean", "description": "True only if the step achieved what it was for."},
        "reason": {"type": "string", "description": "Why: what was achieved, or what failed and why."}},
        "required": ["done", "reason"], "additionalProperties": False}}}
REASON_CHARS = 2000


async def judge_step(run: Run, step: str, report: str, session: Session) -> tuple[bool, str] | str:
    """The verdict on a completed step: (done, reason), or why the budget allows no call (a string)."""
    agent = run.agent
    prompt = (f"# Task of the whole plan\n{run.task}\n\n# The step\n{step}\n\n# What the tools returned\n"
              f"{tool_evidence(session.messages)}\n\n# The agent's report\n{report or '(none)'}\n\n"
              "Call `step_verdict` now.")
    turn = await run.caller.call([Message.system(JUDGE), Message.user(prompt)], [VERDICT_SPEC], run.step,
                                 settings=must_call(agent.model_settings), run_id=run.sub_id(), parent=run.run_id,
                                 purpose="verdict", deltas=False)
    if isinstance(turn, str):
        return turn
    args = tool_arguments(turn.completion.message, "step_verdict")
    if args is None:
        run.emit(Notice(run.run_id, run.step, "verdict", "the step's model gave no step_verdict; the step counts "
                                                         "as its run ended (done)"))
        return True, ""
    done = args.get("done")
    if isinstance(done, str):
        done = done.strip().lower() in ("true", "yes", "1")
    reason = str(args.get("reason") or "").strip()
    if len(reason) > REASON_CHARS:  # carried into every later prompt of the plan
        reason = reason[:REASON_CHARS] + " [...]"
    return done is True or (type(done) is int and done == 1), reason
