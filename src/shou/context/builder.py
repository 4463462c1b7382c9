"""Assembling each request under a token budget.

A request is one system message (instructions, project rules, the skills catalog and the skills loaded,
working memory, the summary of compacted history, recalled memories) followed by conversation *blocks*: a
user message, a plain assistant message, or an assistant message with tool calls together with all of its
results. Blocks are never split, so a request never holds an orphaned tool call or result. The current task
is always kept; then the most recent blocks; then older blocks by relevance to the current step, in their
original order.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

from ..messages import Message
from ..tools.truncate import truncate
from .relevance import Embedder, rank
from .tokens import TokenCounter

OMITTED_NOTE_TOKENS = 24  # room for the "N older messages are not shown" line


@dataclass(frozen=True, slots=True)
class ContextPolicy:
    """How the context is kept in bounds.

    `window` defaults to the model's known window; `reserve_output` is kept free for the answer;
    automatic compaction starts when the uncompacted history passes `compact_at` of the window and keeps
    the newest `keep_recent` share verbatim. `recent_share` of the budget goes to the newest blocks
    before older ones compete on relevance. `recall_k` memories are recalled at the start of a run.
    """

    window: int | None = None
    reserve_output: int = 4096
    compact_at: float = 0.75
    keep_recent: float = 0.25
    recent_share: float = 0.7
    auto_compact: bool = True
    relevance: bool = True
    max_tools: int = 20
    core_tools: tuple[str, ...] = ("read_file", "write_file", "edit_file", "list_files", "shell", "run_code")
    recall_k: int = 5
    spill_chars: int = 20_000
    embed: Embedder | None = field(default=None, compare=False)


@dataclass(frozen=True, slots=True)
class Built:
    """A request's messages, their token count, and how many history messages were left out."""

    messages: list[Message]
    tokens: int
    omitted: int


def blocks_of(history: list[Message]) -> list[tuple[int, int]]:
    """Half-open index ranges of the atomic blocks of `history`."""
    out: list[tuple[int, int]] = []
    i, n = 0, len(history)
    while i < n:
        j = i + 1
        if history[i].role == "assistant" and history[i].tool_calls:
            while j < n and history[j].role == "tool":
                j += 1
            while j < n and history[j].role == "user" and history[j].images and history[j - 1].role != "user":
                j += 1  # images a tool returned ride in user messages right after the results
        out.append((i, j))
        i = j
    return out


def system_text(instructions: str, *, rules: str = "", memory_md: str = "", working_memory: str = "",
                summary: str = "", recalled: list[str] | None = None, omitted: int = 0, untrusted: bool = False,
                skills: str = "", loaded_skills: Mapping[str, str] | None = None) -> str:
    """The one system message, in sections (`untrusted`: the tools can return outside content; `skills`: the
    skills catalog, `SkillSet.catalog()`; `loaded_skills`: name -> body of the skills loaded with use_skill)."""
    parts = [instructions.strip()] if instructions.strip() else []
    if untrusted:
        from ..tools.untrusted import UNTRUSTED_RULE

        parts.append(UNTRUSTED_RULE)
    if rules.strip():
        parts.append("## Project rules (.shou/AGENTS.md)\n" + rules.strip())
    if memory_md.strip():
        parts.append("## Curated memory (.shou/MEMORY.md)\n" + memory_md.strip())
    if skills.strip():
        parts.append(skills.strip())
    if loaded_skills:
        # Kept here, not only in the use_skill result, so a loaded skill outlives compaction and trimming.
        parts.append("## Loaded skills (loaded with use_skill; follow them where they apply)\n" + "\n\n".join(
            f"### {name}\n{body.strip() or '(no instructions beyond its description)'}"
            for name, body in loaded_skills.items()))
    if recalled:
        parts.append("## Recalled from long-term memory\n" + "\n".join(f"- {r}" for r in recalled))
    if working_memory.strip():
        parts.append("## Working memory (your scratchpad; update it with the working_memory tool)\n"
                     + working_memory.strip())
    if summary.strip():
        parts.append("## Summary of the earlier conversation\n" + summary.strip())
    if omitted:
        parts.append(f"({omitted} older messages are not shown here to save space.)")
    return "\n\n".join(parts)


class ContextBuilder:
    """Builds requests for one model under its window."""

    def __init__(self, counter: TokenCounter, window: int, policy: ContextPolicy) -> None:
        self.counter = counter
        self.window = window
        self.policy = policy

    @property
    def budget(self) -> int:
        """Tokens available to the messages of a request."""
        return max(1024, self.window - self.policy.reserve_output)

    def history_tokens(self, history: list[Message]) -> int:
        """Tokens of `history` sent whole."""
        return sum(self.counter.message(m) for m in history)

    def compaction_point(self, history: list[Message], start: int, tool_tokens: int) -> int | None:
        """Where to cut for compaction (everything in `start`..cut is summarised), or None if not needed."""
        if not self.policy.auto_compact:
            return None
        live = history[start:]
        if self.history_tokens(live) + tool_tokens < self.policy.compact_at * self.window:
            return None
        keep = self.policy.keep_recent * self.window
        kept = 0
        for lo, hi in reversed(blocks_of(live)):
            kept += sum(self.counter.message(m) for m in live[lo:hi])
            if kept > keep:
                return start + hi if start + hi < len(history) else None
        return None

    def build(self, system: Callable[[int], str], history: list[Message], *, pinned: int | None = None,
              tool_tokens: int = 0, query: str = "") -> Built:
        """The request: the system text (`system(omitted)`) plus as much of `history` as fits, `pinned`
        (the current task) always."""
        count = self.counter.message
        sys_msg = Message.system(system(0))
        budget = self.budget - tool_tokens - count(sys_msg) - OMITTED_NOTE_TOKENS
        blocks = blocks_of(history)
        sizes = [sum(count(m) for m in history[lo:hi]) for lo, hi in blocks]
        if sum(sizes) <= budget:
            msgs = [sys_msg, *history]
            return Built(msgs, self.counter.messages(msgs) + tool_tokens, 0)
        chosen: set[int] = set()
        used = 0
        pin_block = next((b for b, (lo, hi) in enumerate(blocks) if lo <= (pinned or 0) < hi), None)
        if pinned is not None and pin_block is not None:
            chosen.add(pin_block)
            used += sizes[pin_block]
        recent_cap = budget * self.policy.recent_share
        for b in range(len(blocks) - 1, -1, -1):
            if b in chosen:
                continue
            if used + sizes[b] > recent_cap and b != len(blocks) - 1:
                break
            chosen.add(b)
            used += sizes[b]
        older = [b for b in range(len(blocks)) if b not in chosen and b < max(chosen, default=0)]
        if older and self.policy.relevance and query:
            docs = [" ".join(m.text + " ".join(c.arguments for c in m.tool_calls)
                             for m in history[blocks[b][0]:blocks[b][1]]) for b in older]
            scores = rank(query, docs, self.policy.embed)
            for score, b in sorted(zip(scores, older, strict=True), reverse=True):
                if score <= 0:
                    break
                if used + sizes[b] <= budget:
                    chosen.add(b)
                    used += sizes[b]
        msgs: list[Message] = []
        for b in sorted(chosen):
            lo, hi = blocks[b]
            msgs.extend(history[lo:hi])
        if used > budget:  # one block alone is too big (a huge tool result): shrink the newest block's tools
            msgs = self._shrink(msgs, used - budget)
        omitted = len(history) - sum(blocks[b][1] - blocks[b][0] for b in chosen)
        if omitted:
            sys_msg = Message.system(system(omitted))
        out = [sys_msg, *msgs]
        return Built(out, self.counter.messages(out) + tool_tokens, omitted)

    def _shrink(self, msgs: list[Message], excess: int) -> list[Message]:
        out = list(msgs)
        for i in range(len(out) - 1, -1, -1):
            m = out[i]
            if excess <= 0:
                break
            if m.role != "tool":
                continue
            have = self.counter.message(m)
            target = max(64, have - excess)
            chars = target * 3
            for _ in range(6):  # characters per token vary by text: converge on the target
                cut = truncate(m.text, max_bytes=chars, hint="the full result is in the session log")
                shrunk = Message.tool(m.tool_call_id or "", m.name or "", cut.text)
                got = self.counter.message(shrunk)
                if got <= target:
                    break
                chars = int(chars * target / got * 0.95)
            out[i] = shrunk
            excess -= have - got
        return out
