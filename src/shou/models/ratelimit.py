"""Client-side rate limits: stay under a provider's requests- and tokens-per-minute so it never answers 429.

`RateLimiter` keeps a log of the requests it let through (when, and how many tokens) and lets the next one
go only when it keeps BOTH limits in every window of `period` seconds. That is a sliding-window log, not
a refilling bucket: a bucket lets a burst through right after a quiet spell, and a provider that counts
per rolling minute answers that burst with 429s. Waiters go in arrival order, each sleeping exactly until
the log says its request fits. `limiter_for` is the process-wide registry: every model in the process that
talks to one provider (keyed by base URL) shares one limiter, so two runs cannot each spend the whole limit.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
import time
import weakref
from collections import deque

__all__ = ["Clock", "Grant", "RateLimiter", "limiter_for"]


class Clock:
    """The time a limiter reads and how it waits: monotonic seconds, and a wait that ends early when
    `changed` is set. A test gives a limiter its own clock to see the waits without spending them."""

    def now(self) -> float:
        """Seconds on a clock that never goes back."""
        return time.monotonic()

    async def wait(self, changed: asyncio.Event, seconds: float) -> None:
        """Wait `seconds`, or until `changed` is set."""
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(changed.wait(), seconds)


MONOTONIC = Clock()


class _Entry:
    """One request in the log: when it was let through and the tokens it counts for."""

    __slots__ = ("at", "tokens")

    def __init__(self, at: float, tokens: int) -> None:
        self.at = at
        self.tokens = tokens


class Grant:
    """Permission to send one request. `settle(actual)` replaces the estimate with the real token count."""

    __slots__ = ("_entry", "_limiter")

    def __init__(self, limiter: RateLimiter, entry: _Entry) -> None:
        self._limiter = limiter
        self._entry = entry

    @property
    def tokens(self) -> int:
        """The tokens this request counts for now: the estimate until settled."""
        return self._entry.tokens

    def settle(self, actual_tokens: int) -> None:
        """Count the request for `actual_tokens` (input plus output, from the response's usage) from now on,
        so `tpm` tracks what the provider counts, not the guess made before sending."""
        self._limiter._settle(self._entry, max(0, int(actual_tokens)))


class _LoopState:
    """The asyncio primitives of one event loop: they are bound to the loop that first uses them."""

    __slots__ = ("changed", "lock", "loop")

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.lock = asyncio.Lock()  # FIFO: waiters are served in arrival order
        self.changed = asyncio.Event()  # a settle may let the head waiter go sooner
        self.loop = weakref.ref(loop)  # weak: the registry's key is the loop, and it must be free to go

    def wake(self) -> None:
        """Set `changed` from any thread: the head waiter recomputes its wait."""
        loop = self.loop()
        if loop is None:
            return
        try:
            running = asyncio.get_running_loop()
        except RuntimeError:
            running = None
        if loop is running:
            self.changed.set()
        else:
            with contextlib.suppress(RuntimeError):  # that loop is closed: nobody waits there any more
                loop.call_soon_threadsafe(self.changed.set)


class RateLimiter:
    """At most `rpm` requests and `tpm` tokens in any window of `period` seconds (None: no such limit).

    `await acquire(tokens)` returns a `Grant` once sending a request of `tokens` tokens keeps both limits.
    A request larger than `tpm` on its own waits for a window with no tokens in it, then goes (it cannot
    ever fit; waiting forever would deadlock the run). Each request counts for `period + margin` seconds:
    the provider counts by arrival, and a request arrives a little after it is granted, by a different
    delay each time (a new connection's handshakes, a busy event loop, the network): two granted exactly
    `period` apart could arrive less than that apart. `margin` defaults to a quarter of the period, at most
    1 s (1.7% of the throughput of a per-minute limit).

    One limiter can serve many tasks of one event loop; used from several loops (e.g. sync runs, each
    with its own loop) it keeps one log and makes its asyncio primitives per loop.
    """

    def __init__(self, rpm: int | None = None, tpm: int | None = None, period: float = 60.0,
                 margin: float | None = None, clock: Clock = MONOTONIC) -> None:
        if period <= 0:
            raise ValueError(f"period must be positive, not {period}")
        if margin is not None and margin < 0:
            raise ValueError(f"margin must not be negative, not {margin}")
        self.period = period
        self.clock = clock
        self.margin = min(1.0, period / 4) if margin is None else margin
        self._log: deque[_Entry] = deque()
        self._guard = threading.Lock()  # the log is shared by every loop; its updates are tiny
        self._loops: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, _LoopState] = weakref.WeakKeyDictionary()
        self.rpm: int | None = None
        self.tpm: int | None = None
        self.configure(rpm, tpm)

    def __repr__(self) -> str:
        return f"RateLimiter(rpm={self.rpm}, tpm={self.tpm}, period={self.period:g})"

    def configure(self, rpm: int | None, tpm: int | None) -> None:
        """Set new limits; the log of recent requests stays (the provider still counts them)."""
        for name, value in (("rpm", rpm), ("tpm", tpm)):
            if value is not None and value < 1:
                raise ValueError(f"{name} must be at least 1 (or None for no limit), not {value}")
        self.rpm, self.tpm = rpm, tpm
        self._wake_all()  # looser limits may let the head waiter go now

    async def acquire(self, tokens: int = 0) -> Grant:
        """Wait until a request of `tokens` tokens keeps both limits, then count it and return its grant."""
        tokens = max(0, int(tokens))
        state = self._state()
        async with state.lock:  # one waiter at a time computes its wait; the rest queue in order behind it
            while True:
                state.changed.clear()
                with self._guard:
                    now = self.clock.now()
                    wait = self._wait(now, tokens)
                    if wait <= 0:
                        entry = _Entry(now, tokens)
                        self._log.append(entry)
                        return Grant(self, entry)
                await self.clock.wait(state.changed, wait)

    def expected_wait(self, tokens: int = 0) -> float:
        """Seconds a request of `tokens` tokens would wait if asked for now, waiters ahead of it aside."""
        with self._guard:
            return max(0.0, self._wait(self.clock.now(), max(0, int(tokens))))

    def why(self, tokens: int) -> str:
        """Which limit holds a request of `tokens` tokens back, for people."""
        if self.tpm is not None and tokens > self.tpm:
            return (f"this request alone counts about {tokens:,} tokens, more than tpm = {self.tpm:,}: each such "
                    "request waits for a minute with no other traffic (raise tpm, or lower max_tokens)")
        limits = [f"{name} = {value:,}" for name, value in (("rpm", self.rpm), ("tpm", self.tpm)) if value]
        return f"the provider's rate limit ({', '.join(limits)}) is used up for now"

    def usage(self) -> tuple[int, int]:
        """The requests and tokens counted in the current window."""
        with self._guard:
            self._prune(self.clock.now())
            return len(self._log), sum(e.tokens for e in self._log)

    def _state(self) -> _LoopState:
        loop = asyncio.get_running_loop()
        with self._guard:
            state = self._loops.get(loop)
            if state is None:
                state = self._loops[loop] = _LoopState(loop)
            return state

    def _prune(self, now: float) -> None:
        span = self.period + self.margin
        log = self._log
        while log and log[0].at + span <= now:
            log.popleft()

    def _wait(self, now: float, tokens: int) -> float:
        """Seconds until a request of `tokens` fits the log (0 when it fits now). Called under the guard."""
        self._prune(now)
        log, span = self._log, self.period + self.margin
        until = now
        if self.rpm is not None and len(log) >= self.rpm:
            # the oldest requests must leave the window until only rpm - 1 remain
            until = max(until, log[len(log) - self.rpm].at + span)
        if self.tpm is not None and log:
            used = sum(e.tokens for e in log)
            allowed = self.tpm - tokens if tokens <= self.tpm else 0  # too big alone: wait for an empty window
            if used > allowed:
                for e in log:  # oldest first: the window frees tokens in that order
                    used -= e.tokens
                    if used <= allowed:
                        until = max(until, e.at + span)
                        break
        return until - now

    def _settle(self, entry: _Entry, tokens: int) -> None:
        with self._guard:
            lower = tokens < entry.tokens
            entry.tokens = tokens
        if lower:
            self._wake_all()

    def _wake_all(self) -> None:
        with self._guard:
            states = list(self._loops.values())
        for state in states:
            state.wake()


_registry: dict[str, RateLimiter] = {}
_registry_lock = threading.Lock()


def limiter_for(key: str, rpm: int | None, tpm: int | None) -> RateLimiter | None:
    """The process-wide limiter for provider `key` (its base URL), made on first use; None when both limits
    are None. Asked again with other limits, the same limiter takes the newest ones (and keeps its log: the
    provider still counts the requests it holds), so every model of that provider shares one budget."""
    if rpm is None and tpm is None:
        return None
    with _registry_lock:
        limiter = _registry.get(key)
        if limiter is None:
            limiter = _registry[key] = RateLimiter(rpm, tpm)
        elif (limiter.rpm, limiter.tpm) != (rpm, tpm):
            limiter.configure(rpm, tpm)
        return limiter
