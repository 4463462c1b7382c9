"""Reflection: a critic checks a final answer before the run accepts it.

The critic is one model call (`review_model`, or the agent's model) that sees the task, what the tools
returned during the run, and the proposed answer, and must call `review(approved, feedback)`. A rejected
answer's feedback goes back into the conversation as a note for the agent, which goes on working; after
`max_reviews` reviews the next answer stands. The call is budgeted, logged and traced like any other
(`purpose: "review"`), as a sub-run so it never enters the conversation itself.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ..events import Feedback, Notice, Reviewed
from ..messages import Message
from .turn import must_call, tool_arguments

if TYPE_CHECKING:
    from .loop import Run

CRITIC = (
    "You review an AI agent's work before it is handed to the person who asked. You see the task, what the "
    "agent's tools returned, and the agent's proposed final answer. Check that the answer does what the task "
    "asked, is supported by the tool results, and makes no claim they contradict. Call `review` exactly once: "
    "approved=true if the answer can be handed over as it is; otherwise approved=false with feedback that "
    "says precisely what is wrong or missing and what to do about it."
)
REVIEW_SPEC: dict[str, Any] = {"type": "function", "function": {
    "name": "review",
    "description": "Approve the proposed answer, or reject it with feedback for the agent.",
    "parameters": {"type": "object", "properties": {
        "approved": {"type": "boolean", "description": "Whether the answer can be handed over as it is."},
        "feedback": {"type": "string", "description": "What is wrong or missing, and how to fix it (when not "
                                                       "approved)."}},
        "required": ["approved", "feedback"], "additionalProperties": False}}}
REJECTED = ("[shou] A reviewer checked your answer and did not approve it:\n{feedback}\n\nFix this (use the tools "
            "if needed), then give your final answer again.")
RESULT_CHARS = 2000  # of each tool result shown to the critic
RESULTS_SHOWN = 30  # the most recent ones
FEEDBACK_CHARS = 4000  # of the critic's feedback passed on to the agent


class Critic:
    """Reviews the final answers of one run; `reviews` counts the reviews made so far.

    Made per run as its answer check (`Run.answer_checker`, set by agent/runs.py): whether an answer stands.
    """

    def __init__(self, run: Run, first: int) -> None:
        self.run = run
        self.first = first  # where the run's own messages start in the session (its task)
        self.reviews = 0

    async def __call__(self, step: int, answer: str) -> bool:
        """Whether `answer` stands: approved, not reviewed (the reviews allowed are made, or the budget allows
        none, which a notice says), or False when the critic turned it down and its feedback is in the
        conversation."""
        if self.reviews >= self.run.agent.max_reviews:
            return True
        verdict = await self.review(step, answer)
        if isinstance(verdict, str):  # the budget does not allow a review: the answer stands
            self.run.emit(Notice(self.run.run_id, step, "review", f"not reviewed: {verdict}"))
            return True
        return verdict

    def _evidence(self) -> str:
        """What the run's tools returned, newest last, each cut to a readable size."""
        return tool_evidence(self.run.session.messages[self.first:])

    async def review(self, step: int, answer: str) -> bool | str:
        """Ask the critic about `answer`: True (approved), False (rejected: the feedback is in the
        conversation now), or why the budget allows no review."""
        run = self.run
        agent = run.agent
        self.reviews += 1
        prompt = (f"# Task\n{run.task}\n\n# What the tools returned\n{self._evidence()}\n\n"
                  f"# Proposed final answer\n{answer}\n\nCall `review` now.")
        messages = [Message.system(CRITIC), Message.user(prompt)]
        turn = await run.caller.call(messages, [REVIEW_SPEC], step, settings=must_call(agent.model_settings),
                                     model=agent.review_model, run_id=run.sub_id(), parent=run.run_id,
                                     purpose="review", deltas=False)
        if isinstance(turn, str):
            return turn
        approved, feedback = _verdict(turn.completion.message)
        run.emit(Reviewed(run.run_id, step, approved, feedback))
        if not approved:
            run.emit(Feedback(run.run_id, step, REJECTED.format(feedback=feedback or "(no reason given)")))
        return approved


def tool_evidence(messages: list[Message]) -> str:
    """What the tools returned in `messages` (each call with its arguments), newest last, each cut to a readable
    size: what a judge of the work is shown."""
    calls = {}
    lines = []
    for m in messages:
        for c in m.tool_calls:
            calls[c.id] = c
        if m.role == "tool":
            call = calls.get(m.tool_call_id or "")
            args = call.arguments[:300] if call is not None else ""
            text = m.text if len(m.text) <= RESULT_CHARS else m.text[:RESULT_CHARS] + " [...]"
            lines.append(f"- {m.name}({args}) returned:\n{text}")
    if not lines:
        return "(no tool was called)"
    return "\n".join(lines[-RESULTS_SHOWN:])


def _verdict(message: Message) -> tuple[bool, str]:
    """The critic's `review` call; a critic that answers otherwise approves (it must not stall the run)."""
    args = tool_arguments(message, "review")
    if args is None:
        return True, message.text.strip()[:FEEDBACK_CHARS]
    approved = args.get("approved")
    if isinstance(approved, str):
        approved = approved.strip().lower() in ("true", "yes", "1")
    feedback = str(args.get("feedback") or "").strip()
    if len(feedback) > FEEDBACK_CHARS:  # a reply, not a channel for a megabyte into every later request
        feedback = feedback[:FEEDBACK_CHARS] + " [...]"
    return approved is True or (type(approved) is int and approved == 1), feedback
