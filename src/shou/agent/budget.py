"""Budgets: how much a run (and a session) may spend, in tokens and dollars, checked before each call.

A model call is allowed only if its worst case fits what is left: its prompt tokens plus the most it may
reply (`max_tokens`), priced at the model's rates. The worst case is reserved while the call runs and
settled with what it really used, so calls running at once (sub-agents sharing a parent's budget) can
never together overshoot: at most the one call that was in flight when the budget ran out finishes.
`Budgets` is the control of the model pipeline that does this for every call of a run.
"""

from __future__ import annotations

import math
from collections.abc import AsyncIterator
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING

from ..models.base import ModelSettings, Retrying, model_ids
from ..pricing import Price, PriceTable
from ..usage import Usage, format_cost

if TYPE_CHECKING:
    from ..models.pipeline import Next, StreamEvent
    from .modelcall import RunCall

__all__ = ["DEFAULT_REPLY_RESERVE", "Accounts", "Budget", "Budgets", "Reservation"]

# The reply limit sent with every request while a budget applies and no max_tokens is set: the worst case
# must be finite for the check to mean anything. Lowered to what the budget has left, but not below
# MIN_REPLY: a call that may only say a few words is not worth making.
DEFAULT_REPLY_RESERVE = 4096
MIN_REPLY = 256


@dataclass
class Reservation:
    """A call's worst case, held against the budget until the call is settled."""

    budget: Budget
    tokens: int
    cost: float
    open: bool = True

    def settle(self, usage: Usage) -> None:
        """Replace the reservation with what the call used."""
        if self.open:
            self.open = False
            self.budget.reserved_tokens -= self.tokens
            self.budget.reserved_cost -= self.cost
            self.budget.spent = self.budget.spent + usage

    def release(self) -> None:
        """The call failed before using anything countable: give the reservation back."""
        self.settle(Usage())

    def spend(self, usage: Usage) -> bool:
        """Count what a failed attempt of the call used (billed too) while its worst case stays held for the
        next attempt; whether the budget still holds both."""
        budget = self.budget
        budget.spent = budget.spent + usage
        return budget.holds()


@dataclass
class Budget:
    """Limits (`max_cost` USD, `max_tokens` input + output), what was spent, and what is reserved. `label`
    names the limit in messages (`--max-cost`, `session_max_cost`)."""

    max_cost: float | None = None
    max_tokens: int | None = None
    spent: Usage = field(default_factory=Usage)
    cost_label: str = "--max-cost"
    token_label: str = "--token-budget"
    reserved_tokens: int = 0
    reserved_cost: float = 0.0

    @property
    def limited(self) -> bool:
        """Whether any limit applies."""
        return self.max_cost is not None or self.max_tokens is not None

    def room(self, prompt_tokens: int, price: Price | None, model: str) -> int | str:
        """The most reply tokens a call with this prompt may have and stay within the budget (a large number
        when nothing limits it), or why no call fits at all."""
        room = 1 << 40
        if self.max_tokens is not None:
            left = self.max_tokens - self.spent.total_tokens - self.reserved_tokens
            room = left - prompt_tokens
            if room <= 0:
                return (f"the next call's prompt alone is about {prompt_tokens:,} tokens and {max(left, 0):,} are left "
                        f"of the {self.token_label} of {self.max_tokens:,}; {self.spent_text()}")
        if self.max_cost is not None:
            if price is None:
                return (f"{self.cost_label} needs the price of model {model!r}: set input_price and output_price "
                        f'under [models."{model}"] in shou.toml (USD per million tokens)')
            if self.spent.cost is None:
                return f"{self.cost_label} cannot be kept: some calls so far have an unknown cost; {self.spent_text()}"
            left = self.max_cost - self.spent.cost - self.reserved_cost
            prompt_cost = prompt_tokens * price.input / 1_000_000
            if left - prompt_cost <= 0:
                return (f"the next call's prompt alone would cost about {format_cost(prompt_cost)} and "
                        f"{format_cost(max(left, 0.0))} is left of the {self.cost_label} of "
                        f"{format_cost(self.max_cost)}; {self.spent_text()}")
            if price.output > 0:
                room = min(room, int((left - prompt_cost) * 1_000_000 / price.output))
        return room

    def holds(self) -> bool:
        """Whether what was spent and what is held fit the limits."""
        if self.max_tokens is not None and self.spent.total_tokens + self.reserved_tokens > self.max_tokens:
            return False
        if self.max_cost is not None:
            spent = self.spent.cost
            return spent is not None and spent + self.reserved_cost <= self.max_cost * (1 + 1e-9)
        return True

    def hold(self, prompt_tokens: int, reply_tokens: int, price: Price | None) -> Reservation:
        """Reserve a call's worst case (checked with `room()` first)."""
        cost = price.worst_case(prompt_tokens, reply_tokens) if price is not None and self.max_cost is not None else 0.0
        self.reserved_tokens += prompt_tokens + reply_tokens
        self.reserved_cost += cost
        return Reservation(self, prompt_tokens + reply_tokens, cost)

    def describe(self) -> str:
        """The limits, for people: `--max-cost of $0.05`."""
        parts = []
        if self.max_cost is not None:
            parts.append(f"{self.cost_label} of {format_cost(self.max_cost)}")
        if self.max_tokens is not None:
            parts.append(f"{self.token_label} of {self.max_tokens:,} tokens")
        return " and ".join(parts)

    def spent_text(self) -> str:
        """What was spent, for people."""
        cost = format_cost(self.spent.cost) if self.spent.cost is not None else "an unknown amount"
        return f"spent {cost} and {self.spent.total_tokens:,} tokens in {self.spent.requests} call(s)"


class Accounts:
    """A run's money side: prices its calls, and holds each call's worst case against every budget that
    applies (the run's, the session's, a parent's)."""

    __slots__ = ("_dearest", "budgets", "model", "prices", "ratios")

    def __init__(self, prices: PriceTable, budgets: list[Budget], model: str,
                 ratios: dict[str, float] | None = None) -> None:
        self.prices = prices
        self.budgets = [b for b in budgets if b.limited]
        self.model = model
        # How far shou's prompt estimate fell short of each model's own count: learned from every reply, shared
        # with the run's sub-runs (`ratios` is the parent's), so parallel sub-agents start from what was learned.
        self.ratios: dict[str, float] = {} if ratios is None else ratios
        self._dearest: dict[tuple[str, ...], tuple[Price | None, str]] | None = None  # made when a budget applies

    def reserve(self, prompt_tokens: int, settings: ModelSettings | None,
                model: str | tuple[str, ...] | None = None) -> tuple[ModelSettings | None, list[Reservation] | str]:
        """The settings to send and the reservations, or why the call may not be made. While a budget
        applies, the request's `max_tokens` is at most what the budgets have left, so its worst case (prompt
        plus `max_tokens`) is what was checked. `model` is the model's name, or the names of every model that
        may answer (a fallback chain: the call is priced at the dearest, as any of them may be the one)."""
        if not self.budgets:
            return settings, []
        models = (model,) if isinstance(model, str) else model or (self.model,)
        ratios = self.ratios
        prompt = math.ceil(prompt_tokens * max((ratios.get(m, 1.0) for m in models), default=1.0))
        want = settings.max_tokens if settings is not None and settings.max_tokens else DEFAULT_REPLY_RESERVE
        price, model = self.dearest(models)
        reply = want
        for budget in self.budgets:
            room = budget.room(prompt, price, model)
            if isinstance(room, str):
                return settings, room
            if room < min(want, MIN_REPLY):
                priced = f" at the price of {model}" if budget.max_cost is not None else ""
                return settings, (f"the next call (about {prompt:,} prompt tokens) would leave room for a reply of "
                                  f"only {max(room, 0):,} tokens under the {budget.describe()}{priced}; "
                                  f"{budget.spent_text()}")
            reply = min(reply, room)
        if settings is None or settings.max_tokens != reply:
            settings = replace(settings or ModelSettings(), max_tokens=reply)
        return settings, [budget.hold(prompt, reply, price) for budget in self.budgets]

    def dearest(self, models: tuple[str, ...]) -> tuple[Price | None, str]:
        """The price to hold a call to any of `models` at (the highest input and output prices of them), and
        the name to give in messages; None and the first model without a price when any has none."""
        known_prices = self._dearest
        if known_prices is None:
            known_prices = self._dearest = {}
        found = known_prices.get(models)
        if found is None:
            prices = [(self.prices.lookup(m), m) for m in models]
            unknown = [m for p, m in prices if p is None]
            if unknown:
                found = None, unknown[0]
            elif len(prices) == 1:
                found = prices[0]
            else:
                known = [p for p, _ in prices if p is not None]
                found = Price(max(p.input for p in known), max(p.output for p in known)), " or ".join(models)
            known_prices[models] = found
        return found

    def calibrate(self, estimated: int, reported: int, model: str | None = None) -> None:
        """Learn how far shou's prompt estimate falls short of `model`'s count. It only ever grows: a budget
        must not assume the estimate is over, nor forget a shortfall it saw."""
        if estimated > 0 and reported > 0:
            model = model or self.model
            ratio = reported / estimated
            if ratio > self.ratios.get(model, 1.0):
                self.ratios[model] = ratio

    def priced(self, usage: Usage, model: str | None = None) -> Usage:
        """`usage` with its cost at `model`'s price (None when unknown)."""
        # built directly, not by dataclasses.replace(): this runs for every call
        u, cost = usage, self.prices.cost(model or self.model, usage)
        return Usage(u.input_tokens, u.output_tokens, u.requests, u.estimated, u.cached_tokens, cost)


class Budgets:
    """The budget control of the model pipeline, its outermost: before anything is sent (or logged), the
    call's worst case is reserved against every budget of the run's `accounts`, and the request's reply limit
    lowered to what they have left (`call.settings`); a call that does not fit goes no further
    (`call.refused` says why). A failed attempt that was billed (`call.void`, as the trace below estimated
    it) is counted at once, and when another attempt's worst case no longer fits, none is made. The
    reservation is settled with what the call used (`call.turn`), or with what its failed attempt was billed.
    """

    __slots__ = ("accounts",)

    def __init__(self, accounts: Accounts) -> None:
        self.accounts = accounts

    def __call__(self, call: RunCall, next: Next) -> AsyncIterator[StreamEvent]:
        """The call's events, if its worst case fits the budgets. A run with no budget passes its calls on, with no
        generator of its own: a run waiting for the model holds every layer of its stack (issue 35)."""
        accounts = self.accounts
        if not accounts.budgets:
            return next(call)
        return self._held(call, next, accounts)

    @staticmethod
    async def _held(call: RunCall, next: Next, accounts: Accounts) -> AsyncIterator[StreamEvent]:
        settings, held = accounts.reserve(call.tokens, call.settings, model_ids(call.model))
        if isinstance(held, str):  # before the call that could break a budget, not after it
            call.refused = held
            return
        call.settings = settings
        try:
            events = next(call)  # inside: a backend that fails before its first event settles the same way
            try:
                async for event in events:
                    if type(event) is Retrying and call.void is not None and held:
                        refused = _over(held, call.void)
                        if refused:  # no further attempt is made: the rest of the pipeline is closed below
                            for r in held:
                                r.release()
                            call.refused = refused
                            return
                    yield event
            finally:
                close = getattr(events, "aclose", None)
                if close is not None:
                    await close()
        except BaseException:
            for r in held:
                r.settle(call.void or Usage())
            raise
        used = call.turn.usage if call.turn is not None else Usage()
        for r in held:
            r.settle(used)


def _over(held: list[Reservation], void: Usage) -> str:
    """Count a billed failed attempt against every budget; why another attempt no longer fits ("" if it does)."""
    over = [r.budget for r in held if not r.spend(void)]
    if not over:
        return ""
    return (f"a failed attempt of the call used about {void.total_tokens:,} tokens, and another attempt no "
            f"longer fits the {over[0].describe()}; {over[0].spent_text()}")
