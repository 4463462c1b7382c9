"""Compaction: the model rewrites older history as a summary that keeps what matters.

The session log keeps every original message; only the context sent to the model changes, recorded as a
`Compacted` event (summary, how many messages it covers, tokens before and after).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable

from ..messages import Message
from .tokens import TokenCounter

MARKER = "[shou:compact]"
PROMPT = f"""{MARKER} You compact an agent's conversation so that it can go on with less context.
Write a summary of the conversation below (and of the previous summary, if any) for the agent itself.
Keep every fact the user stated (names, preferences, numbers), decisions and their reasons, file paths,
commands and their outcomes, errors met, results obtained, and the open to-dos. Drop pleasantries and
repetition. Plain text or terse bullets; no preamble."""
PER_MESSAGE_CHARS = 2000
SUMMARY_MAX_TOKENS = 4096  # one summary's reply limit: its worst case must be finite for a budget to hold


def transcript(messages: list[Message]) -> str:
    """The messages as plain text for the summariser, each capped."""
    lines = []
    for m in messages:
        text = m.text
        if len(text) > PER_MESSAGE_CHARS:
            half = PER_MESSAGE_CHARS // 2
            text = f"{text[:half]} [... {len(text) - 2 * half} characters cut ...] {text[-half:]}"
        if m.role == "assistant" and m.tool_calls:
            calls = "; ".join(f"{c.name}({c.arguments[:300]})" for c in m.tool_calls)
            lines.append(f"assistant: {text} [calls: {calls}]" if text else f"assistant [calls: {calls}]")
        elif m.role == "tool":
            lines.append(f"tool {m.name} result: {text}")
        else:
            lines.append(f"{m.role}: {text}")
    return "\n".join(lines)


async def summarize(ask: Callable[[list[Message]], Awaitable[str]], counter: TokenCounter, messages: list[Message],
                    previous: str, max_input_tokens: int) -> str:
    """Fold `messages` into `previous` summary, in as many model calls as the window needs. `ask` makes one
    call (budgeted and logged by the caller) and returns the reply's text."""
    summary = previous
    chunk: list[Message] = []
    budget = max(512, max_input_tokens - counter.text(PROMPT) - counter.text(previous) - 256)
    used = 0
    pending: list[list[Message]] = []
    for m in messages:
        t = min(counter.message(m), PER_MESSAGE_CHARS // 2)
        if chunk and used + t > budget:
            pending.append(chunk)
            chunk, used = [], 0
        chunk.append(m)
        used += t
    if chunk:
        pending.append(chunk)
    for part in pending:
        request = [Message.system(PROMPT), Message.user(
            (f"Previous summary:\n{summary}\n\n" if summary else "") + "Conversation:\n" + transcript(part))]
        text = (await ask(request)).strip()
        if not text:
            raise RuntimeError("the model returned an empty summary")
        summary = text
    return summary
