"""Answering the questions runs wait on (`ask_user`, stopped `waiting_input`), for every face of `shou serve`
(the REST API's `POST /v1/runs/{run_id}/answer`, the web page, an A2A message to an `input-required` task).

One path, as deciding approvals goes: the session is taken (its lock), caught up, the answer recorded through
the server's agent's emitter, and the run queued again once nothing of it waits any more; then the session's
streams are woken.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ..session import Session

if TYPE_CHECKING:
    from .server import Server

__all__ = ["answer_question", "waiting_questions"]


def waiting_questions(srv: Server, user: str) -> list[tuple[str, Any]]:
    """`(session, question)` of every question of `user`'s runs that waits for an answer."""
    out = []
    for info in srv.queue.sessions(user, "waiting_input"):
        out.extend((info["name"], q) for q in Session(info["name"], srv.store).pending_questions.values())
    return out


def answer_question(srv: Server, session_name: str, call_id: str, text: str, by: str) -> str:
    """Record `text` (by `by`) as the answer to question `call_id`, which waits in `session_name`, and queue its
    run again when nothing of it waits any more; returns the run's id. `SessionBusy` when the session is held
    elsewhere; `KeyError(call_id)` when the question no longer waits (answered meanwhile)."""
    from ..agent.asking import answer

    session = Session(session_name, srv.store)
    session.acquire()
    try:
        session.refresh()
        asked = answer(session, call_id, text, by, emitter=srv.runner.agent.emitter(session))
        run_id = asked.run_id.split(".", 1)[0]
        left = bool(session.pending_questions or session.pending_approvals)
    finally:
        session.release()
    if not left:
        srv.runner.resume(run_id)
    srv.hub.notify(session_name)
    return run_id
