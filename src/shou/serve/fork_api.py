"""`POST /v1/sessions/{name}/fork`: a new session of the caller's whose history is one of theirs up to a step.

Both names are the caller's own (shou.serve.names): another user's session of either name is never met, so a
source of theirs is a 404 and a name of theirs is free, as everywhere. The new name is taken for the caller
before the log is copied, so two forks (or a run) cannot claim it at once, and let go again when the fork
fails. When the database went away under it, the name stays the caller's (the fork may have landed).
"""

from __future__ import annotations

import contextlib

from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from ..errors import UserError
from ..session import fork_session, new_session_name
from ..store.basics import SessionExists
from ..store.locks import SessionBusy
from .names import shown_name, shown_text, stored_name
from .schema import ForkRequest
from .server import Server, read_json, store_errors


async def fork_session_route(request: Request) -> Response:
    """Fork the caller's session `name` at `at` into `name` of the body (or a fresh one): 201 with the new name."""
    srv: Server = request.app.state.server
    user = srv.user(request)
    source = request.path_params["name"]
    origin = srv.own_session(source, user)  # the store's names (shou.serve.names); `source`, `given`: the caller's
    body: ForkRequest = await read_json(request, ForkRequest)
    # the new name is in the caller's namespace: another user's session of that name is never met
    name = srv.queue.session_of(user, body.name) if body.name else stored_name(user, new_session_name())
    given = shown_name(user, name)
    exists = HTTPException(409, f"session {given!r} exists already; give the fork another name")
    if srv.store.exists(name):
        raise exists
    took = srv.queue.adopt_session(name, user)
    # A name the caller holds already may be forked into again only while it has neither a log nor a run: what
    # an earlier fork the store failed under left (below). One with a run queued is that run's session.
    if not took and not srv.queue.join_fork(name, user):
        raise exists
    try:
        made, point = fork_session(srv.store, origin, None if body.at is None else str(body.at), name)
    except store_errors():
        # The database went away under the fork: 503, like every route (serve/app.py). Whether it landed is not
        # known (a commit under way when the connection broke lands a moment later), so the name stays the
        # caller's: a fork that landed is theirs, and one that did not may be asked for again under that name.
        _end(srv, name, let_go=False)
        raise
    except UserError as e:
        taken = isinstance(e, (SessionBusy, SessionExists))  # a fork of the caller's (another request) has it
        _end(srv, name, let_go=took and not taken)
        raise HTTPException(409 if taken else 400, shown_text(user, str(e), name, origin)) from None
    except BaseException:
        _end(srv, name, let_go=took)
        raise
    _end(srv, name, let_go=False)
    return JSONResponse({"name": shown_name(user, made), "source": source, "step": point.step}, 201)


def _end(srv: Server, name: str, let_go: bool) -> None:
    """Count this fork out of `name`; when it failed and took the name, give the name back unless another fork
    into it is under way or began meanwhile (on any replica), or a session is there now (shou.serve.owners).
    The count is bookkeeping: a database away here leaves the name the caller's, as a 503 does."""
    with contextlib.suppress(*store_errors()):
        srv.queue.end_fork(name, (lambda: not srv.store.exists(name)) if let_go else None)
