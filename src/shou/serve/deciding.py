"""Deciding calls that wait for a person, for every face of `shou serve` (the REST API's
`POST /v1/approvals/...`, an A2A message that answers an `input-required` task).

One path: the session is taken (its lock), caught up, each decision recorded through the server's agent's
emitter (signed when it allows), and the run queued again once nothing of it waits any more; then the
session's streams are woken.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from ..session import Session

if TYPE_CHECKING:
    from .server import Server

__all__ = ["decide_calls", "waiting_calls"]


def waiting_calls(srv: Server, user: str) -> list[tuple[str, Any]]:
    """`(session, request)` of every call of `user`'s runs that waits for a decision."""
    out = []
    for info in srv.queue.sessions(user, "waiting_approval"):
        out.extend((info["name"], req) for req in Session(info["name"], srv.store).pending_approvals.values())
    return out


def decide_calls(srv: Server, session_name: str, call_ids: Sequence[str], allow: bool, reason: str, by: str) -> str:
    """Record `allow` (with `reason`, by `by`) on each of `call_ids`, which wait in `session_name`, and queue
    their run again when nothing of it waits any more; returns the run's id. `SessionBusy` when the session
    is held elsewhere; `KeyError(call_id)` when a call no longer waits (decided meanwhile): the decisions
    recorded before it stand."""
    from ..agent.approvals import decide

    session = Session(session_name, srv.store)
    session.key = srv.queue.session_id(session_name) or session.key  # what its runs' grants are signed for
    session.acquire()
    run_id = ""
    try:
        session.refresh()
        emitter = srv.runner.agent.emitter(session)
        for call_id in call_ids:
            req = decide(session, call_id, allow, reason, srv.workspace, by=by, emitter=emitter)
            run_id = req.run_id.split(".", 1)[0]
        left = bool(session.pending_approvals)
    finally:
        session.release()
    if not left and run_id:
        srv.runner.resume(run_id)
    srv.hub.notify(session_name)
    return run_id
