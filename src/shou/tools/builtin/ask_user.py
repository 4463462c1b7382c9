"""`ask_user`: the model asks the person a question and gets the answer as the call's result.

The tool is only the declaration (name, schema, description): how the person is asked belongs to the run
(shou.agent.asking): on the terminal, or later (`defer`: the run stops `waiting_input`, and `shou answer`, the
API or the web page answers). Run on its own, with nobody to ask, it says so.
"""

from __future__ import annotations

from ...errors import ToolError
from ..base import tool

__all__ = ["MAX_CHOICES", "ask_user"]

MAX_CHOICES = 10


@tool(idempotent=True)
def ask_user(question: str, choices: list[str] | None = None) -> str:
    """Ask the user a question and wait for the answer. Use it only when you cannot go on without them (a
    missing fact, a choice that is theirs to make), never to confirm what you were already asked to do.

    Args:
        question: The question, complete and short: the user sees nothing else of your work.
        choices: A few answers to offer (at most 10), when the answer is one of them; the user may still
            write another.
    """
    raise ToolError("no one can be asked in this run; do without the answer, or say what you need in your reply")
