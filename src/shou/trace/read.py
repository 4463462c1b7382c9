"""Reading traces from a store: the session log's rows, a run or a model call found by id, requests resolved.

A model call's request is stored by content hash (`ModelRequest.messages`, see shou.agent.recorder) and read
only when wanted (`resolve()`); retention may have deleted a message since.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING, Any

import orjson

from ..event_codec import event_from_dict
from ..events import FAILED_CALL_NOTICES, Event
from .builder import build
from .records import ModelCallTrace, RunTrace

if TYPE_CHECKING:
    from ..store.sqlite import SQLiteStore

__all__ = ["find_model_call", "find_run", "logged_rows", "recent_outcomes", "resolve", "traces"]


def logged_rows(store: SQLiteStore, where: str, params: Sequence[Any] = ()) -> list[tuple[str, float, Event]]:
    """`(session, ts, event)` of the stored events matching `where` (a fixed clause from this module),
    oldest first. The one place that reads the events table directly: `SQLiteStore.rows()` leaves out the
    time each event was logged, which traces and the usage report need."""
    store.commit()
    out = []
    for session, ts, data in store._db.execute(
            f"SELECT session, ts, data FROM events WHERE {where} ORDER BY id", tuple(params)):
        try:
            out.append((session, ts, event_from_dict(orjson.loads(data))))
        except (ValueError, TypeError, KeyError, AttributeError):  # a newer shou's event, or damage: left out
            continue
    return out


def recent_outcomes(store: SQLiteStore, limit: int) -> list[Event]:
    """The workspace's last `limit` events that say how a model or tool call went (responses, tool results,
    failed attempts), oldest first: what a process's failure-rate alert starts from."""
    store.commit()
    rows = store._db.execute(
        "SELECT data FROM events WHERE type IN ('model_response', 'tool_call_finished') OR (type = 'notice' AND "
        f"json_valid(data) AND json_extract(data, '$.kind') IN ({', '.join('?' * len(FAILED_CALL_NOTICES))})) "
        "ORDER BY id DESC LIMIT ?", (*FAILED_CALL_NOTICES, limit)).fetchall()
    out = []
    for (data,) in reversed(rows):
        try:
            out.append(event_from_dict(orjson.loads(data)))
        except (ValueError, TypeError, KeyError, AttributeError):
            continue
    return out


def traces(store: SQLiteStore, session: str) -> list[RunTrace]:
    """The traces of `session`'s runs, oldest first (requests not resolved)."""
    return build(logged_rows(store, "session = ?", (session,)))


def find_run(store: SQLiteStore, run_id: str) -> RunTrace | None:
    """The trace of run `run_id`, or None when no such run is logged (read with its whole session, whose
    earlier requests may hold contents the run's requests refer to)."""
    store.commit()
    row = store._db.execute("SELECT session FROM events WHERE run_id = ? ORDER BY id LIMIT 1", (run_id,)).fetchone()
    if row is None:
        return None
    return next((r for r in traces(store, row[0]) if r.run_id == run_id), None)


def find_model_call(store: SQLiteStore, call_id: str) -> tuple[RunTrace, ModelCallTrace] | None:
    """The model call named `call_id` (a request id, or `RUN:STEP` in logs from before calls were named),
    with its request resolved, and its run; None when there is no such call."""
    run_id = call_id.split(":", 1)[0] if call_id.startswith("run_") else ""
    if not run_id:
        hits = logged_rows(store, "type IN ('model_request', 'model_response') AND "
                                  "json_extract(data, '$.request_id') = ?", (call_id,))
        run_id = hits[0][2].run_id if hits else ""
    run = find_run(store, run_id) if run_id else None
    call = next((c for c in run.model_calls if c.id == call_id), None) if run is not None else None
    if run is None or call is None:
        return None
    resolve(store, [call])
    return run, call


def resolve(store: SQLiteStore | None, calls: Iterable[ModelCallTrace]) -> None:
    """Fill in the requests of `calls` (their messages and tool specs) from the contents their session's
    log holds. A message whose contents retention removed reads `{"_pruned": hash}`."""
    for call in calls:
        if not call.recorded:
            continue
        found = call.contents
        call.messages = [found.get(k, {"_pruned": k}) for k in call.message_refs]
        tools = found.get(call.tools_ref, []) if call.tools_ref else []
        call.tools = tools if isinstance(tools, list) else None
        call.pruned = sum(k not in found for k in (*call.message_refs, call.tools_ref) if k)
