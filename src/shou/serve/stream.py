"""A run's events as Server-Sent Events, read from the store: the same ids from every replica.

Stored events are replayed after the client's `Last-Event-ID`, then followed live as the hub wakes the
stream. Streaming fragments from a run this replica executes are sent without an id; a fragment of a model
turn whose complete `model_response` was already sent is dropped, so text is never shown twice.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Callable
from typing import Any

import orjson

from ..events import WAITING, Event, RunFinished
from ..store.pg_link import is_connection_error
from .hub import Hub
from .jobs import ACTIVE, RunQueue

KEEPALIVE = 15.0
log = logging.getLogger("shou.serve")


def frame(event: Event | dict[str, Any], event_id: int | None = None) -> bytes:
    """One SSE message."""
    data = event.to_dict() if isinstance(event, Event) else event
    head = f"id: {event_id}\n" if event_id is not None else ""
    return f"{head}event: {data['type']}\ndata: ".encode() + orjson.dumps(data) + b"\n\n"


def is_end(event: Event, run_id: str) -> bool:
    """Whether `event` ends run `run_id` for good (waiting for approval does not)."""
    return (isinstance(event, RunFinished) and event.run_id == run_id and not event.parent
            and event.status not in WAITING)


async def run_events(store: Any, hub: Hub, queue: RunQueue, session: str, run_id: str,
                     after: int = 0) -> AsyncIterator[tuple[int | None, Event | dict[str, Any]]]:
    """`(id, event)` of run `run_id` after id `after`, then live ones, until the run's final `run_finished`;
    fragments have id None. When the queue says the run ended with nothing logged (cancelled before it
    started), a `run_finished` made from the queue's row ends the stream. While the database is away the
    stream waits for it (keep-alives still go out), then goes on from the last id sent."""
    answered: set[tuple[str, int]] = set()
    idle = 0.0
    with hub.watch(session, run_id) as watch:
        while True:
            watch.wake.clear()
            try:
                out = _collect(store, watch, session, run_id, after)
            except _Away as e:  # what was drained is read again from `after` next time: nothing stored is lost
                log.warning("run %s: its event stream waits for the store: %s", run_id, e)
                out, idle = [], idle + 1.0
                await asyncio.sleep(1.0)
            for row_id, event in out:
                if row_id is None:
                    if (event.run_id, getattr(event, "step", 0)) not in answered:
                        yield None, event
                    continue
                after = row_id
                if event.type == "model_response":
                    answered.add((event.run_id, getattr(event, "step", 0)))
                yield row_id, event
                if is_end(event, run_id):
                    return
            if not watch.items.empty():
                continue
            try:
                await asyncio.wait_for(watch.wake.wait(), 1.0)
                idle = 0.0
            except TimeoutError:
                idle += 1.0
                ending = _ending(store, queue, session, run_id, after)
                if ending is not None:
                    yield None, ending
                    return
            if idle >= KEEPALIVE:
                idle = 0.0
                yield None, {"type": ":keepalive"}


class _Away(Exception):
    """The database is away for the moment."""


def _reading(read: Any, *args: Any) -> Any:
    try:
        return read(*args)
    except Exception as e:
        if is_connection_error(e):
            raise _Away(str(e)) from None
        raise


def _collect(store: Any, watch: Any, session: str, run_id: str, after: int) -> list[tuple[int | None, Event]]:
    """What this replica's run produced since the last look, in order, with the stored rows it announced (or,
    woken from elsewhere, every stored row after `after`)."""
    out: list[tuple[int | None, Event]] = []
    bounded = False
    while not watch.items.empty():
        item = watch.items.get_nowait()
        if isinstance(item, int):
            bounded = True
            last = out_after(out, after)
            if item > last:
                out += [(i, e) for i, e in _reading(store.run_rows, session, run_id, last) if i <= item]
        else:
            out.append((None, item))
    if not bounded:  # woken from elsewhere (another replica's run, a decision) or looking on its own
        out += _reading(store.run_rows, session, run_id, out_after(out, after))
    return out


def _ending(store: Any, queue: RunQueue, session: str, run_id: str, after: int) -> dict[str, Any] | None:
    """The `run_finished` to end on when the queue says the run ended and nothing more is logged."""
    try:
        job = _reading(queue.get, run_id)
        ended = job is None or (job.status not in ACTIVE and job.status not in WAITING)
        if ended and not _reading(store.run_rows, session, run_id, after):  # nothing more will come
            return _ended(run_id, job)
    except _Away as e:
        log.warning("run %s: its event stream waits for the store: %s", run_id, e)
    return None


def out_after(out: list[tuple[int | None, Event]], after: int) -> int:
    """The last stored id in `out`, or `after`."""
    return max((i for i, _ in out if i is not None), default=after)


def _ended(run_id: str, job: Any) -> dict[str, Any]:
    status = job.status if job is not None else "failed"
    return {"type": "run_finished", "run_id": run_id, "status": status, "answer": job.answer if job else "",
            "steps": 0, "usage": job.usage if job else {}, "wall_time": 0.0,
            "error": (job.error if job else "") or "the run ended before it logged anything"}


async def sse(items: AsyncIterator[tuple[int | None, Event | dict[str, Any]]],
              shown: Callable[[Any], Any] = lambda event: event) -> AsyncIterator[bytes]:
    """Encode `(id, event)` pairs as SSE (keep-alives as comments), each event as `shown` has it (the
    caller's session names: shou.serve.names)."""
    async for event_id, event in items:
        if isinstance(event, dict) and event.get("type") == ":keepalive":
            yield b": keep-alive\n\n"
            continue
        yield frame(shown(event), event_id)
