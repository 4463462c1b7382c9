"""Retry policy for model calls: exponential backoff with jitter, honouring `Retry-After`."""

from __future__ import annotations

import email.utils
import random
import time
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class RetryPolicy:
    """How often and how patiently to retry a retryable model error.

    The n-th retry (0-based) waits `base * 2**n`, scaled by a random factor in [0.5, 1.5) so many
    clients do not retry in step, capped at `max_delay`. A server's `Retry-After` wins when present
    (still capped, so a hostile header cannot park the agent for an hour).
    """

    # Eight retries: a provider failing 30% of requests fails nine in a row once in 50,000 requests; the
    # waits add up to about a minute and a half before shou gives up.
    max_retries: int = 8
    base: float = 0.5
    max_delay: float = 30.0
    max_unreachable_retries: int = 2  # no connection at all: a stopped server or a wrong URL, say so soon

    def delay(self, retry: int, retry_after: float | None = None) -> float:
        """Seconds to wait before retry number `retry` (0-based)."""
        if retry_after is not None and retry_after >= 0:
            return min(retry_after, self.max_delay)
        return min(self.base * (2**retry) * random.uniform(0.5, 1.5), self.max_delay)


def parse_retry_after(value: str | None) -> float | None:
    """Read a `Retry-After` header: delta seconds or an HTTP date; None when absent or unreadable."""
    if not value:
        return None
    value = value.strip()
    try:
        return max(0.0, float(value))
    except ValueError:
        pass
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    return max(0.0, when.timestamp() - time.time())
