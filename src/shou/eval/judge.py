"""The LLM judge check: a model reads the task, the answer and a rubric, and calls `verdict(score, reason)`.

The answer is the model's output under test, so it is untrusted: it reaches the judge inside the
untrusted-content delimiters with the rule that nothing inside them is an instruction, and a judge that
gives no well-formed verdict fails the check (never passes it). The call goes through the model's own
pipeline (retries, rate limits); its tokens and cost are the verdict's, and so the case's.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ..messages import Message
from ..models.base import Completion, ModelSettings, model_id
from ..tools.untrusted import UNTRUSTED_RULE, mark_untrusted
from .outcome import Outcome, Verdict

if TYPE_CHECKING:
    from ..models.base import Model
    from ..pricing import PriceTable

__all__ = ["Judge", "JudgeEnv"]

SYSTEM = ("You grade one answer of an AI agent against a rubric. Read the task, the rubric and the answer, then "
          "call `verdict` exactly once with a score from 0 (fails the rubric) to 1 (meets it fully) and a short "
          "reason. " + UNTRUSTED_RULE)
SPEC: dict[str, Any] = {"type": "function", "function": {
    "name": "verdict", "description": "Grade the answer against the rubric.",
    "parameters": {"type": "object", "properties": {
        "score": {"type": "number", "minimum": 0, "maximum": 1, "description": "0 fails the rubric, 1 meets it."},
        "reason": {"type": "string", "description": "Why, in a sentence or two."}},
        "required": ["score", "reason"], "additionalProperties": False}}}
MAX_ANSWER_CHARS = 20_000


@dataclass(frozen=True)
class JudgeEnv:
    """What a judge needs from its evaluation: a model for a spec (None: the evaluation's judge model), and
    the prices its cost is counted at."""

    model_for: Callable[[str | None], Model]
    prices: PriceTable | None = None


@dataclass(frozen=True)
class Judge:
    """See `shou.eval.checks.judge`."""

    rubric: str
    model: str | None = None
    threshold: float = 0.5

    def describe(self) -> str:
        rubric = self.rubric if len(self.rubric) <= 60 else self.rubric[:59] + "…"
        return f"judge: {rubric}"

    async def __call__(self, outcome: Outcome) -> Verdict:
        env = outcome.judge
        if env is None:
            return Verdict(self.describe(), 0.0, False, "no judge model is configured for this evaluation")
        model = env.model_for(self.model)
        answer = outcome.answer if len(outcome.answer) <= MAX_ANSWER_CHARS else outcome.answer[:MAX_ANSWER_CHARS]
        prompt = (f"# Task\n{outcome.task}\n\n# Rubric\n{self.rubric}\n\n# The agent's answer\n"
                  f"{mark_untrusted(answer or '(no answer)', 'the agent under test')}\n\nCall `verdict` now.")
        completion: Completion | None = None
        try:
            async for event in model.stream([Message.system(SYSTEM), Message.user(prompt)], [SPEC],
                                            ModelSettings(temperature=0.0, tool_choice="required")):
                if isinstance(event, Completion):
                    completion = event
        except Exception as e:  # the judge failing fails the check, with why; the evaluation goes on
            return Verdict(self.describe(), 0.0, False, f"the judge failed: {type(e).__name__}: {e}", None)
        finally:
            await model.aclose()
        if completion is None:
            return Verdict(self.describe(), 0.0, False, "the judge gave no reply", None)
        usage = completion.usage
        cost = env.prices.cost(completion.sent_model or model_id(model), usage) if env.prices is not None else None
        score, reason = _verdict(completion.message)
        if score is None:
            return Verdict(self.describe(), 0.0, False, f"the judge gave no verdict: {reason}", cost,
                           usage.total_tokens)
        return Verdict(self.describe(), score, score >= self.threshold, reason, cost, usage.total_tokens)


def _verdict(message: Message) -> tuple[float | None, str]:
    """The score and reason of the judge's `verdict` call (None and why when there is none)."""
    for call in message.tool_calls:
        if call.name != "verdict":
            continue
        try:
            args = json.loads(call.arguments or "{}")
        except ValueError:
            return None, "its verdict's arguments are not JSON"
        score = args.get("score") if isinstance(args, dict) else None
        if isinstance(score, bool) or not isinstance(score, int | float) or not 0 <= score <= 1:
            return None, f"its score {score!r} is not a number from 0 to 1"
        return float(score), str(args.get("reason") or "")[:500]
    return None, (message.text or "no call")[:200]
