"""Assembling each request under a token budget.

A request is one system message (instructions, project rules, the skills catalog and the skills loaded,
working memory, the summary of compacted history, recalled memories) followed by conversation *blocks*: a
user message, a plain assistant message, or an assistant message with tool calls together with all of its
results. Blocks are never split, so a request never holds an orphaned tool call or result. The current task
is always kept; then the most recent blocks; then older blocks by relevance to the current step, in their
original order.

When the history does not fit (after compaction, which the run does first: `compaction_point`), large tool
results are written to files and sent as a preview with the path; then a task too big to leave room is
shortened the same way. Whatever is still left out is said in a note after the task (`ledger.py`): every
finished call whose result is not shown, with a one-line result and the file to read it back from.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

from ..frozen import fast_init
from ..messages import Message
from ..tools.truncate import truncate
from . import ledger
from .ledger import Spill
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


LARGE_SHARE = 0.2  # a tool result over this share of the budget is sent as a preview when things do not fit
PREVIEW_TOKENS = 300
LEDGER_SHARE = 0.2  # the most of the budget the note of left-out calls may take


@fast_init
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
                skills: str = "", loaded_skills: Mapping[str, str] | None = None,
                project: Mapping[str, str] | None = None, nested: Mapping[str, str] | None = None) -> str:
    """The one system message, in sections (`untrusted`: the tools can return outside content; `skills`: the
    skills catalog, `SkillSet.catalog()`; `loaded_skills`: name -> body of the skills loaded with use_skill;
    `project`: file name -> text of the workspace's root `AGENTS.md`/`CLAUDE.md`; `nested`: workspace path ->
    text of the folders' own instruction files the run came across)."""
    parts = [instructions.strip()] if instructions.strip() else []
    if untrusted:
        from ..tools.untrusted import UNTRUSTED_RULE

        parts.append(UNTRUSTED_RULE)
    if rules.strip():
        parts.append("## Project rules (.shou/AGENTS.md)\n" + rules.strip())
    for name, text in (project or {}).items():
        if text.strip():
            parts.append(f"## Project instructions ({name})\n" + text.strip())
    if memory_md.strip():
        parts.append("## Curated memory (.shou/MEMORY.md)\n" + memory_md.strip())
    if skills.strip():
        parts.append(skills.strip())
    for path, text in (nested or {}).items():
        if text.strip():
            folder = path.rpartition("/")[0]
            parts.append(f"## Project instructions for {folder}/ ({path}; they apply to the work under {folder}/)\n"
                         + text.strip())
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
        parts.append(f"({omitted} older messages are not shown here to save space; the note after the task "
                     "lists the tool calls among them and where to read their results.)")
    return "\n\n".join(parts)


class ContextBuilder:
    """Builds requests for one model under its window. `idempotent(name)` and `untrusted(name)` say which
    tools are read-only and which return outside content (for the note of left-out calls)."""

    def __init__(self, counter: TokenCounter, window: int, policy: ContextPolicy, *,
                 idempotent: Callable[[str], bool] | None = None,
                 untrusted: Callable[[str], bool] | None = None) -> None:
        self.counter = counter
        self.window = window
        self.policy = policy
        self.idempotent = idempotent or (lambda name: False)
        self.untrusted = untrusted or (lambda name: False)

    @property
    def budget(self) -> int:
        """Tokens available to the messages of a request. A small window cannot give 4k to the answer: the
        reserve is at most a quarter of it."""
        return max(1024, self.window - min(self.policy.reserve_output, self.window // 4))

    def history_tokens(self, history: list[Message]) -> int:
        """Tokens of `history` sent whole."""
        return sum(self.counter.message(m) for m in history)

    def compaction_point(self, history: list[Message], start: int, fixed: int = 0,
                         pinned: int | None = None) -> int | None:
        """Where to cut for compaction (the messages in `start`..cut but the task `pinned` are summarised),
        or None if not needed. `fixed` is what every request costs besides `history[start:]`: the system
        text, the tool specs, and the task when it is no longer in that range.

        The newest block is always kept verbatim, and the task never needs summarising (it is always sent),
        so a cut that would only take the task is no cut at all."""
        if not self.policy.auto_compact:
            return None
        live = history[start:]
        if fixed + self.history_tokens(live) < self.policy.compact_at * self.window:
            return None
        keep = self.policy.keep_recent * self.window
        pin = None if pinned is None else pinned - start
        others = [(lo, hi) for lo, hi in blocks_of(live) if pin is None or not lo <= pin < hi]
        kept = 0
        for k, (lo, hi) in enumerate(reversed(others)):
            kept += self.history_tokens(live[lo:hi])
            if kept > keep:
                cut = start + (hi if k else lo)  # the newest block alone is over: fold everything before it
                break
        else:
            return None
        return cut if any(i != pinned for i in range(start, cut)) else None

    def build(self, system: Callable[[int], str], history: list[Message], *, pinned: int | None = None,
              tool_tokens: int = 0, query: str = "", spill: Spill | None = None,
              earlier: list[Message] | None = None) -> Built:
        """The request: the system text (`system(omitted)`) plus as much of `history` as fits, `pinned`
        (the current task) always. `earlier` are the compacted messages (their calls are listed in the
        note); `spill` writes a left-out or previewed text to a file the model can read back."""
        sys_msg = Message.system(system(0))
        base = self.budget - tool_tokens - self.counter.message(sys_msg) - OMITTED_NOTE_TOKENS
        blocks = blocks_of(history)
        done_before = self._entries(earlier or [])
        cap = int(base * LEDGER_SHARE)
        msgs = list(history)
        if self.history_tokens(msgs) + ledger.bound(done_before, False, cap, self.counter.text) <= base:
            return self._assemble(system, msgs, blocks, set(range(len(blocks))), done_before, pinned, spill, cap,
                                  tool_tokens)
        msgs = self._previews(msgs, base, spill)
        newest = blocks[-1][0] if blocks else len(msgs)
        since = history[(pinned + 1 if pinned is not None else 0):newest]
        room = base - ledger.bound(done_before + self._entries(since), True, cap, self.counter.text)
        pin_block = next((b for b, (lo, hi) in enumerate(blocks) if lo <= (pinned or 0) < hi), None)
        if pinned is None:
            pin_block = None
        if pin_block is not None:
            msgs = self._fit_task(msgs, blocks, pin_block, room, spill)
        sizes = [self.history_tokens(msgs[lo:hi]) for lo, hi in blocks]
        chosen = self._choose(msgs, blocks, sizes, pin_block, room, query)
        return self._assemble(system, msgs, blocks, chosen, done_before, pinned, spill, cap, tool_tokens)

    def _entries(self, messages: list[Message]) -> list[ledger.Entry]:
        return ledger.entries_of(messages, self.idempotent, self.untrusted)

    def _choose(self, msgs: list[Message], blocks: list[tuple[int, int]], sizes: list[int], pin_block: int | None,
                budget: int, query: str) -> set[int]:
        """The blocks to send: the task's, the newest ones, then older ones by relevance to `query`."""
        if sum(sizes) <= budget:  # what was shortened (results, the task) made it all fit
            return set(range(len(blocks)))
        chosen: set[int] = set()
        used = 0
        if pin_block is not None:
            chosen.add(pin_block)
            used += sizes[pin_block]
        recent_cap = used + (budget - used) * self.policy.recent_share  # a share of what the task leaves
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
                             for m in msgs[blocks[b][0]:blocks[b][1]]) for b in older]
            scores = rank(query, docs, self.policy.embed)
            for score, b in sorted(zip(scores, older, strict=True), reverse=True):
                if score <= 0:
                    break
                if used + sizes[b] <= budget:
                    chosen.add(b)
                    used += sizes[b]
        return chosen

    def _assemble(self, system: Callable[[int], str], msgs: list[Message], blocks: list[tuple[int, int]],
                  chosen: set[int], done_before: list[ledger.Entry], pinned: int | None, spill: Spill | None,
                  cap: int, tool_tokens: int) -> Built:
        """The request from the chosen blocks, with the note of what is left out after the task."""
        left_out = [m for b, (lo, hi) in enumerate(blocks) if b not in chosen for m in msgs[lo:hi]]
        omitted = len(left_out)
        # The calls since the task are this run's: earlier runs' are the summary's to keep (listing, and
        # writing out, a long session's every result again in each run would cost more than it helps).
        since = [m for b, (lo, hi) in enumerate(blocks) if b not in chosen and (pinned is None or lo > pinned)
                 for m in msgs[lo:hi]]
        note = ledger.note_text(done_before + self._entries(since), spill, omitted, cap, self.counter.text)
        out: list[Message] = []
        for b in sorted(chosen):
            lo, hi = blocks[b]
            out.extend(msgs[lo:hi])
            if note and pinned is not None and lo <= pinned < hi:
                out.append(Message.user(note))
                note = ""
        if note:  # no task in this history (a chat's compacted session): the note goes first
            out.insert(0, Message.user(note))
        sys_msg = Message.system(system(omitted)) if omitted else Message.system(system(0))
        full = [sys_msg, *out]
        tokens = self.counter.messages(full)
        excess = tokens + tool_tokens - self.budget
        if excess > 0:  # one block alone is too big (a huge result and no file to put it in): shrink its tools
            out = self._shrink(out, excess)
            full = [sys_msg, *out]
            tokens = self.counter.messages(full)
        return Built(full, tokens + tool_tokens, omitted)

    def _previews(self, msgs: list[Message], base: int, spill: Spill | None) -> list[Message]:
        """Large tool results as a preview and the path of a file holding the whole result."""
        large = max(PREVIEW_TOKENS * 2, int(base * LARGE_SHARE))
        out = list(msgs)
        for i, m in enumerate(out):
            if m.role != "tool" or self.counter.message(m) <= large:
                continue
            label = ("untrusted-" if self.untrusted(m.name or "") else "") + (m.name or "tool")
            path = spill(f"result:{m.tool_call_id}:{len(m.text)}", label, m.text) if spill else None
            hint = (f"the whole result ({len(m.text)} characters) is in {path}; read it with read_file and "
                    "offset") if path else "the full result is in the session log"
            out[i] = Message.tool(m.tool_call_id or "", m.name or "", self.fit_text(m.text, PREVIEW_TOKENS, hint))
        return out

    def _fit_task(self, msgs: list[Message], blocks: list[tuple[int, int]], pin_block: int, room: int,
                  spill: Spill | None) -> list[Message]:
        """The task shortened into a file when it leaves no room: its head and tail, and where the whole is."""
        lo, hi = blocks[pin_block]
        task = msgs[lo]
        if task.role != "user":  # the pinned message is not a task (a resumed run's last message): leave it
            return msgs
        size = self.counter.message(task)
        others = self.history_tokens(msgs) - self.history_tokens(msgs[lo:hi])
        target = max(room // 2, room - others)
        if size <= target or task.images or spill is None:
            return msgs
        path = spill(f"task:{len(task.text)}:{hash(task.text)}", "task", task.text)
        if path is None:
            return msgs
        hint = (f"the task is too long to send whole: all of it ({len(task.text)} characters) is in {path}; "
                "read the parts not shown with read_file and offset")
        out = list(msgs)
        out[lo] = Message.user(self.fit_text(task.text, max(256, target), hint))
        return out

    def fit_text(self, text: str, target: int, hint: str) -> str:
        """`text` cut (head and tail, with `hint` between) to about `target` tokens."""
        chars = target * 3
        cut = text
        for _ in range(6):  # characters per token vary by text: converge on the target
            cut = truncate(text, max_bytes=max(200, chars), hint=hint).text
            got = self.counter.text(cut)
            if got <= target:
                break
            chars = int(chars * target / got * 0.95)
        return cut

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
            shrunk = Message.tool(m.tool_call_id or "", m.name or "",
                                  self.fit_text(m.text, target - 8, "the full result is in the session log"))
            out[i] = shrunk
            excess -= have - self.counter.message(shrunk)
        return out
