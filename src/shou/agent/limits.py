"""The longest task shou takes, a person's or a sub-agent's: here, below the config and the delegate tool,
which both check it (and so need not import each other for it)."""

from __future__ import annotations

__all__ = ["MAX_TASK_CHARS"]

MAX_TASK_CHARS = 400_000  # of one task, a person's or a sub-agent's (about 100k tokens)
