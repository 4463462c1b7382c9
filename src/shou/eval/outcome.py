"""What a check sees (`Outcome`) and what it gives (`Verdict`)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .judge import JudgeEnv

__all__ = ["Outcome", "Verdict"]


@dataclass(frozen=True)
class Outcome:
    """What a check looks at: the last task's answer, every task's answer, how the last run ended, the
    workspace, the last task, and what an LLM judge needs (None: no judge model for this evaluation)."""

    answer: str
    answers: tuple[str, ...]
    status: str
    workspace: Path
    task: str = ""
    judge: JudgeEnv | None = None


@dataclass(frozen=True)
class Verdict:
    """A check's result: `score` in [0, 1], whether it `passed`, why (`detail`), and what a judge's call
    cost (USD; None: unknown) and its tokens."""

    check: str
    score: float
    passed: bool
    detail: str = ""
    cost: float | None = 0.0
    tokens: int = 0

    def to_dict(self) -> dict[str, Any]:
        """The JSON form kept in results.jsonl."""
        return {"check": self.check, "score": self.score, "passed": self.passed, "detail": self.detail,
                "cost": self.cost, "tokens": self.tokens}
