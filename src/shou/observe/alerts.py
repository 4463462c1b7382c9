"""Failure-rate alerts: when too many of the last model or tool calls failed, say so loudly.

`AlertMonitor` watches the event stream of every run it is attached to (one monitor per process, shared
by its runs, like a provider's failures are). Model calls count as failed when an attempt fails (a
`retry` notice) or the call fails for good (`model_error`: no retry left, or an error no retry helps),
and as good when a response arrives; tool calls by their results. When the share of
failures among the last `window` calls of a kind reaches `threshold` (once at least `min_calls` are
known), the monitor fires once: the run gets a `notice` event of kind `alert`, stderr gets a line, and
the webhook, if one is set, gets a JSON POST (on a thread of its own: an alert never slows a run).
It fires again only after the share has dropped below the threshold.
"""

from __future__ import annotations

import atexit
import logging
import sys
import threading
import time
from collections import deque
from collections.abc import Iterable
from typing import TextIO

from ..config import shown_url
from ..events import FAILED_CALL_NOTICES, Event, ModelResponse, Notice, ToolCallFinished

__all__ = ["AlertMonitor"]

_log = logging.getLogger("shou.alerts")
WEBHOOK_EXIT_WAIT = 5.0  # seconds the process waits at exit for alert posts still under way


class AlertMonitor:
    """Watches the share of failed model and tool calls; an observer (`Agent(observers=[...])`) that returns
    the alert notice for the run to record."""

    def __init__(self, window: int = 20, threshold: float = 0.5, *, webhook: str | None = None,
                 min_calls: int | None = None, stderr: TextIO | None = None) -> None:
        if window < 1 or not 0 < threshold <= 1:
            raise ValueError("alert window must be at least 1 and the threshold between 0 and 1")
        self.window = window
        self.threshold = threshold
        self.webhook = webhook
        self.min_calls = min(window, 5) if min_calls is None else max(1, min(min_calls, window))
        self.stderr = stderr
        self._calls: dict[str, deque[bool]] = {"model": deque(maxlen=window), "tool": deque(maxlen=window)}
        self._firing: dict[str, bool] = {"model": False, "tool": False}
        self._lock = threading.Lock()
        self.fired: list[dict[str, object]] = []  # every alert sent, newest last (for `shou` and tests)
        self._senders: list[threading.Thread] = []  # webhook posts under way
        self.seeded = False  # whether earlier calls' outcomes were taken in (`seed`)

    def flush(self, timeout: float = WEBHOOK_EXIT_WAIT) -> None:
        """Wait (at most `timeout` seconds in all) for the webhook posts under way: a process that ends right
        after an alert still delivers it."""
        deadline = time.monotonic() + timeout
        for sender in list(self._senders):
            sender.join(max(0.0, deadline - time.monotonic()))
        self._senders = [t for t in self._senders if t.is_alive()]

    def __call__(self, event: Event) -> Notice | None:
        """Take one event; returns the alert notice when this event made the share pass the threshold."""
        outcome = _outcome(event)
        return None if outcome is None else self._count(outcome[0], event, failed=outcome[1])

    def seed(self, events: Iterable[Event]) -> None:
        """Take in the outcomes of earlier calls (a process's first run picks up where the last runs of the
        workspace left off: "the last N calls" are not only this process's), as if they had been watched,
        without alerting again for them."""
        with self._lock:
            self.seeded = True
            for event in events:
                outcome = _outcome(event)
                if outcome is not None:
                    self._tally(*outcome)

    def _tally(self, kind: str, failed: bool) -> tuple[int, int, float, bool]:
        """Count one outcome: (failures, calls, share, whether this makes the alert fire). Under the lock."""
        calls = self._calls[kind]
        calls.append(failed)
        failures = sum(calls)
        share = failures / len(calls)
        if share < self.threshold:
            self._firing[kind] = False
            return failures, len(calls), share, False
        if self._firing[kind] or len(calls) < self.min_calls:
            return failures, len(calls), share, False
        self._firing[kind] = True
        return failures, len(calls), share, True

    def _count(self, kind: str, event: Event, *, failed: bool) -> Notice | None:
        with self._lock:
            failures, count, share, fire = self._tally(kind, failed)
        if not fire:
            return None
        text = (f"{failures} of the last {count} {kind} calls failed ({share:.0%}, alert threshold "
                f"{self.threshold:.0%})")
        alert = {"text": f"shou alert: {text}", "kind": kind, "failed": failures, "calls": count,
                 "share": round(share, 4), "threshold": self.threshold, "run_id": event.run_id, "at": time.time()}
        self.fired.append(alert)
        out = self.stderr or sys.stderr
        try:
            out.write(f"shou alert: {text}\n")
            out.flush()
        except (OSError, ValueError):  # a closed stderr: the notice and the webhook still carry it
            pass
        if self.webhook:
            sender = threading.Thread(target=self._post, args=(alert,), name="shou-alert-webhook", daemon=True)
            self._senders.append(sender)
            sender.start()
        return Notice(event.run_id, getattr(event, "step", 0), "alert", text)

    def _post(self, alert: dict[str, object]) -> None:
        """POST the alert as JSON; a webhook that fails is logged, never raised into a run."""
        assert self.webhook is not None
        import httpx

        try:
            httpx.post(self.webhook, json=alert, timeout=10, headers={"User-Agent": "shou"}).raise_for_status()
        except Exception as e:
            _log.warning("alert webhook %s failed: %s", shown_url(self.webhook), e)


def _outcome(event: Event) -> tuple[str, bool] | None:
    """What `event` says of a call: ("model" or "tool", whether it failed), or None."""
    if isinstance(event, ModelResponse):
        return "model", False
    if isinstance(event, ToolCallFinished):
        return "tool", event.is_error
    if isinstance(event, Notice) and event.kind in FAILED_CALL_NOTICES:  # an attempt, or a call, failed
        return "model", True
    return None


_SHARED: dict[tuple[int, float, str | None], AlertMonitor] = {}


def shared_monitor(window: int, threshold: float, webhook: str | None = None) -> AlertMonitor:
    """The process's monitor for these settings: every run of a process counts toward the same window. Its
    webhook posts are waited for (briefly) when the process exits."""
    key = (window, threshold, webhook)
    monitor = _SHARED.get(key)
    if monitor is None:
        if not _SHARED:
            atexit.register(_flush_shared)
        monitor = _SHARED[key] = AlertMonitor(window, threshold, webhook=webhook)
    return monitor


def _flush_shared() -> None:
    deadline = time.monotonic() + WEBHOOK_EXIT_WAIT
    for monitor in list(_SHARED.values()):
        monitor.flush(max(0.0, deadline - time.monotonic()))
