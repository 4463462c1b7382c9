"""`working_memory`: the agent's scratchpad for a session, always in its context."""

from __future__ import annotations

from typing import Literal

from ...errors import ToolError
from ..base import ToolContext, ToolResult, tool

MAX_CHARS = 6000


@tool
def working_memory(ctx: ToolContext, content: str, mode: Literal["replace", "append"] = "append") -> ToolResult:
    """Update your working memory: a short scratchpad of key facts, decisions and intermediate results
    that stays in your context for the rest of this session, even after old messages are summarised.

    Args:
        content: The text to add, or the whole new scratchpad when mode is 'replace'.
        mode: 'append' adds a line; 'replace' rewrites the scratchpad (use it to drop what is done).
    """
    current = str(ctx.state.get("working_memory", ""))
    new = content.strip() if mode == "replace" else "\n".join(p for p in (current, content.strip()) if p)
    if len(new) > MAX_CHARS:
        raise ToolError(f"the working memory would be {len(new)} characters, over the {MAX_CHARS} limit; "
                        "rewrite it shorter with mode='replace'")
    ctx.state["working_memory"] = new
    return ToolResult(f"working memory updated ({len(new)} characters)", details={"working_memory": new})
