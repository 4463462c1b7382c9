"""Token and cost accounting shared by the model client, the loop and the events."""

from __future__ import annotations

from dataclasses import dataclass

from .frozen import fast_init


@fast_init  # made ~15 times a task (each reply's usage, and three sums of them)
@dataclass(frozen=True, slots=True)
class Usage:
    """Tokens a model call (or a sum of them) consumed; `requests` counts model calls. `estimated` is true
    when some of the counts were not reported by the provider but counted by shou's tokenizer.
    `cached_tokens` is the part of `input_tokens` the provider served from its prompt cache. `cost` is in
    US dollars; None means unknown (a model without a configured price took part), never a silent zero.
    """

    input_tokens: int = 0
    output_tokens: int = 0
    requests: int = 0
    estimated: bool = False
    cached_tokens: int = 0
    cost: float | None = 0.0

    @property
    def total_tokens(self) -> int:
        """Input plus output tokens."""
        return self.input_tokens + self.output_tokens

    def __add__(self, other: Usage) -> Usage:
        return Usage(
            self.input_tokens + other.input_tokens,
            self.output_tokens + other.output_tokens,
            self.requests + other.requests,
            self.estimated or other.estimated,
            self.cached_tokens + other.cached_tokens,
            None if self.cost is None or other.cost is None else self.cost + other.cost,
        )

    @classmethod
    def from_wire(cls, data: dict | None) -> Usage:
        """Read the `usage` object of a Chat Completions response (one request). Its cost is unknown until
        priced (`shou.pricing`)."""
        if not data:
            return cls(requests=1, cost=None)  # no counts: the loop estimates them
        details = data.get("prompt_tokens_details")
        cached = details.get("cached_tokens") if isinstance(details, dict) else None
        if cached is None:
            cached = data.get("prompt_cache_hit_tokens")  # DeepSeek's name for it
        return cls(_count(data.get("prompt_tokens")), _count(data.get("completion_tokens")), 1,
                   cached_tokens=_count(cached), cost=None)


    @classmethod
    def from_log(cls, data: dict) -> Usage:
        """A usage as stored in a log, checked: a log may be damaged or planted (a cloned repository's), and a
        negative count or cost would lower what a budget sees as spent. Counts are whole numbers from 0; a
        cost that is missing (a log from before costs were kept), negative or not finite is unknown."""
        if not isinstance(data, dict):
            return cls(requests=1, cost=None)
        cost = data.get("cost")
        if isinstance(cost, bool) or not isinstance(cost, int | float) or not 0 <= cost < float("inf"):
            cost = None
        return cls(_count(data.get("input_tokens")), _count(data.get("output_tokens")), _count(data.get("requests")),
                   data.get("estimated") is True, _count(data.get("cached_tokens")), cost)


NO_USAGE = Usage()  # one for every run and session that has spent nothing yet (a Usage is never changed)
MOST_TOKENS = 2**53  # more tokens than any reply has; beyond it a count would not even survive JSON


def _count(value: object) -> int:
    """A token count a provider reported, as a whole number from 0 to 2**53: a negative one would lower what
    budgets see as spent, and text, lists or NaN would crash the run, so they count as 0 (the loop then
    estimates the counts itself)."""
    if isinstance(value, bool) or not isinstance(value, int | float) or value != value:
        return 0
    return int(min(max(value, 0), MOST_TOKENS))


def format_cost(cost: float | None) -> str:
    """A cost for people: `$0.0123`, or `unknown`."""
    if cost is None:
        return "cost unknown"
    if cost == 0:
        return "$0"
    return f"${cost:.4f}" if cost < 1 else f"${cost:.2f}"
