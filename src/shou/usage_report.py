"""`shou usage`: tokens, requests and cost summed per day, model and session, from the session log.

Costs are never made up: a group with a call of unknown price has an unknown cost (None), with the
known part beside it (`known_cost`).
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Container, Iterable, Sequence
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Any

from .events import Compacted, ModelRequest, ModelResponse, Notice, RunStarted
from .trace import compaction_trace, logged_rows
from .usage import Usage

if TYPE_CHECKING:
    from .store.sqlite import SQLiteStore

__all__ = ["GROUPS", "UsageRow", "usage_report", "usage_total"]

GROUPS = ("day", "model", "session")


@dataclass(frozen=True, slots=True)
class UsageRow:
    """Tokens, requests and cost of one group (its keys not grouped by are empty). `cost` is None when
    some call's cost is unknown; `known_cost` is the part that is known."""

    day: str = ""
    model: str = ""
    session: str = ""
    input_tokens: int = 0
    output_tokens: int = 0
    cached_tokens: int = 0
    requests: int = 0
    cost: float | None = 0.0
    known_cost: float = 0.0
    estimated: bool = False

    def to_json(self) -> dict[str, Any]:
        """The row as JSON."""
        return asdict(self)


def usage_report(store: SQLiteStore, by: Sequence[str] = GROUPS, since: float | None = None,
                 sessions: Container[str] | None = None) -> list[UsageRow]:
    """Tokens, requests and cost summed per group of `by` (`day`: the UTC date of the call, `model`,
    `session`), for the model calls (answers and summaries) logged at or after `since` (Unix time), in
    `sessions` only when given (one user's, under `shou serve`)."""
    unknown = set(by) - set(GROUPS)
    if unknown:
        raise ValueError(f"cannot group usage by {', '.join(sorted(unknown))}; choose from {', '.join(GROUPS)}")
    run_model: dict[str, str] = {}
    asked: dict[str, str] = {}  # run id -> model of its latest request
    groups: dict[tuple[str, str, str], tuple[Usage, float]] = {}
    # run_started rows of any age: a call since `since` may belong to an older run, whose model it falls back to
    # Not the rows a fork copied (their writer `fork:SOURCE`): those calls were made, and paid, once.
    rows = logged_rows(store, "(type = 'run_started' OR (type IN ('model_request', 'model_response', 'compacted') "
                          "AND ts >= ?) OR (type = 'notice' AND ts >= ? AND json_extract(data, '$.usage') IS NOT "
                          "NULL)) AND substr(writer, 1, 5) != 'fork:'", (since or 0.0, since or 0.0))
    for session, ts, ev in rows:
        if sessions is not None and session not in sessions:
            continue
        if isinstance(ev, RunStarted):
            run_model[ev.run_id] = ev.model
            continue
        if isinstance(ev, ModelRequest):
            asked[ev.run_id] = ev.model
            continue
        if isinstance(ev, ModelResponse):
            # the name the answer was asked with (a fallback's, when one answered): what its price went by
            usage, model = ev.usage, ev.sent_model or asked.get(ev.run_id) or ev.model
        elif isinstance(ev, Compacted):
            usage, model = compaction_trace(ev).spent, ev.model
        elif isinstance(ev, Notice) and ev.usage is not None:  # a failed attempt that was billed
            usage, model = ev.usage, ev.model or asked.get(ev.run_id, "")
        else:
            continue
        model = model or run_model.get(ev.run_id, "") or "?"
        day = dt.datetime.fromtimestamp(ts, dt.UTC).date().isoformat()
        key = (day if "day" in by else "", model if "model" in by else "", session if "session" in by else "")
        acc, known = groups.get(key, (Usage(), 0.0))
        groups[key] = (acc + usage, known + (usage.cost or 0.0))
    return [_row(key, u, known) for key, (u, known) in sorted(groups.items())]


def _row(key: tuple[str, str, str], u: Usage, known: float) -> UsageRow:
    return UsageRow(*key, u.input_tokens, u.output_tokens, u.cached_tokens, u.requests, u.cost, known, u.estimated)


def usage_total(rows: Iterable[UsageRow]) -> UsageRow:
    """The sum of report rows (keys empty)."""
    u, known = Usage(), 0.0
    for r in rows:
        u = u + Usage(r.input_tokens, r.output_tokens, r.requests, r.estimated, r.cached_tokens, r.cost)
        known += r.known_cost
    return _row(("", "", ""), u, known)
