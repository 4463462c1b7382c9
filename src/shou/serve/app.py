"""The HTTP API of `shou serve` (Starlette): runs, their event streams, sessions, approvals, docs and the page.

Every handler but the page, the API's documents and the health check first names the user (`Server.user()`:
401 without a valid token, on every server: with no tokens file the person's own token, printed as a link
at start); every run and session is looked up as that user's, so another user's is a 404,
indistinguishable from one that does not exist. Session names are each user's own (shou.serve.names): a name
is resolved in the caller's namespace, and every answer shows the caller's names, never the store's.
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import time
from collections.abc import AsyncIterator
from typing import Any

from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import HTMLResponse, JSONResponse, Response, StreamingResponse
from starlette.routing import Route

from ..session import Session, new_session_name
from ..store.locks import SessionBusy
from ..tools.executor import parse_arguments
from ..trace import usage_json
from . import page
from .answering import answer_question, waiting_questions
from .deciding import decide_calls, waiting_calls
from .docs import docs_page
from .files_api import file_content, list_folder, run_screenshot, upload_file
from .fork_api import fork_session_route
from .info_api import server_config, usage
from .jobs import Job, Refused
from .leftovers import close_leftovers
from .names import shown_event, shown_name, shown_text, stored_name
from .schema import AnswerIn, Decision, RunRequest, openapi
from .server import SSE_HEADERS, Server, error, read_json, store_errors, whole_number
from .stream import run_events, sse
from .typed import check_output_schema

log = logging.getLogger("shou.serve")


def last_event_id(request: Request) -> int:
    raw = (request.headers.get("last-event-id") or request.query_params.get("after") or "0").strip()
    if (after := whole_number(raw)) is None:
        raise HTTPException(400, f"Last-Event-ID must be an event id (a number), not {raw[:40]!r}")
    return after


# ---------------------------------------------------------------------------------------------- runs


async def create_run(request: Request) -> Response:
    srv: Server = request.app.state.server
    user = srv.user(request)
    body: RunRequest = await read_json(request, RunRequest)
    if body.options.code and not srv.runner.allows_code():
        raise HTTPException(400, "options.code: this server does not offer running code (run_code is not among "
                                 "its tools)")
    if body.options.output_schema is not None:
        check_output_schema(body.options.output_schema)
    # the caller's own name (shou.serve.names): another user's session of that name is never met
    session = srv.queue.session_of(user, body.session) if body.session else stored_name(user, new_session_name())
    if body.session and srv.queue.session_owner(session) is None and srv.store.exists(session):
        raise HTTPException(404, f"no session {body.session!r}")  # made outside the API: nobody's to take
    job = srv.runner.submit(user, session, body.task, body.options.model_dump(exclude_defaults=True))
    return JSONResponse(job.public(), 202)


def _as_logged(srv: Server, job: Job) -> Job:
    """`job` as its session's log has it: its end may be in the log (a stream has shown it) a moment before the
    replica that ran it records it in the queue, and a client that saw the end must never read "running"."""
    if job.status not in ("queued", "running"):
        return job
    end = srv.runner.logged_end(job)
    if end is None:
        return job
    return dataclasses.replace(job, status=end.status, answer=end.answer, error=end.error or "",
                               usage=usage_json(end.usage), finished=time.time())


async def list_runs(request: Request) -> Response:
    srv: Server = request.app.state.server
    user = srv.user(request)
    return JSONResponse({"runs": [_as_logged(srv, j).public() for j in srv.queue.runs(user)]})


async def get_run(request: Request) -> Response:
    srv: Server = request.app.state.server
    job = srv.job(request, srv.user(request))
    return JSONResponse(_as_logged(srv, job).public())


async def run_stream(request: Request) -> Response:
    srv: Server = request.app.state.server
    job = srv.job(request, srv.user(request))
    after = last_event_id(request)
    items = run_events(srv.store, srv.hub, srv.queue, job.session, job.run_id, after)
    return StreamingResponse(sse(items, lambda event: shown_event(job.user, event)), media_type="text/event-stream",
                             headers=SSE_HEADERS)


async def cancel_run(request: Request) -> Response:
    srv: Server = request.app.state.server
    job = srv.job(request, srv.user(request))
    updated = srv.runner.cancel(job) or job
    return JSONResponse(updated.public(), 202)


async def run_trace(request: Request) -> Response:
    srv: Server = request.app.state.server
    job = srv.job(request, srv.user(request))
    from .. import trace as tr

    run = tr.find_run(srv.store, job.run_id)
    if run is None:
        raise HTTPException(404, f"run {job.run_id!r} has logged nothing yet")
    tr.resolve(srv.store, run.model_calls)
    data = tr.run_json(run)  # its own `session` only: what its calls hold (any depth) is the model's and tools'
    data["session"] = shown_name(job.user, data["session"])
    return JSONResponse(data)


# ---------------------------------------------------------------------------------------------- sessions


async def list_sessions(request: Request) -> Response:
    srv: Server = request.app.state.server
    user = srv.user(request)
    return JSONResponse({"sessions": [{**s, "name": shown_name(user, s["name"])} for s in srv.queue.sessions(user)]})


async def get_session(request: Request) -> Response:
    srv: Server = request.app.state.server
    user = srv.user(request)
    name = request.path_params["name"]
    stored = srv.own_session(name, user)
    session = Session(stored, srv.store)
    info = next((s for s in srv.queue.sessions(user) if s["name"] == stored), None)
    return JSONResponse({"name": name, "status": info["status"] if info else "",
                         "messages": [m.to_wire() for m in session.messages],
                         "runs": [j.public() for j in srv.queue.runs(user, stored)]})


async def delete_session(request: Request) -> Response:
    srv: Server = request.app.state.server
    user = srv.user(request)
    name = request.path_params["name"]  # the caller's name; `session`: the store's (shou.serve.names)
    session = srv.own_session(name, user)
    # marked in the transaction that finds it theirs with nothing under way, so that a run, a fork or another
    # delete cannot come between the check and the delete
    why = srv.queue.begin_delete(session, user)
    if why == "gone":
        raise HTTPException(404, f"no session {name!r}")
    if why:
        raise HTTPException(409, {"running": f"session {name!r} has a run under way; cancel it first",
                                  "forking": f"a fork into {name!r} is under way; try again when it is done",
                                  "deleting": f"session {name!r} is being deleted"}[why])
    try:
        lock = srv.store.lock(session)
    except SessionBusy as e:
        srv.queue.end_delete(session)
        raise HTTPException(409, shown_text(user, str(e), session)) from None
    try:
        key = srv.queue.session_id(session)
        try:
            srv.store.delete(session)
        except BaseException:
            srv.queue.end_delete(session)
            raise
        srv.queue.forget_session(session)
        if key:  # its browser, interpreter and spills go with it, not to the next session of that name
            await close_leftovers(srv.workspace, key)
    finally:
        lock.release()
    return Response(status_code=204)


# ---------------------------------------------------------------------------------------------- questions


async def list_questions(request: Request) -> Response:
    srv: Server = request.app.state.server
    user = srv.user(request)
    rows = [{"call_id": q.call_id, "run_id": q.run_id.split(".", 1)[0], "session": shown_name(user, session),
             "question": q.question,
             "choices": list(q.choices), "since": q.at} for session, q in waiting_questions(srv, user)]
    return JSONResponse({"questions": rows})


async def answer_run(request: Request) -> Response:
    srv: Server = request.app.state.server
    user = srv.user(request)
    run_id = request.path_params["run_id"]
    body: AnswerIn = await read_json(request, AnswerIn)
    matches = [(s, q) for s, q in waiting_questions(srv, user) if q.run_id.split(".", 1)[0] == run_id
               and (body.call_id is None or q.call_id == body.call_id)]
    if not matches:
        raise HTTPException(404, f"run {run_id!r} waits for no answer" + (f" to call {body.call_id!r}"
                                                                           if body.call_id else ""))
    if len(matches) > 1:
        raise HTTPException(409, f"{len(matches)} questions of run {run_id!r} wait: give call_id")
    session, asked = matches[0]
    try:
        answer_question(srv, session, asked.call_id, body.text, f"api:{user}")
    except SessionBusy as e:
        raise HTTPException(409, shown_text(user, str(e), session)) from None
    except KeyError:
        raise HTTPException(409, f"call {asked.call_id!r} was answered meanwhile") from None
    return JSONResponse({"call_id": asked.call_id, "run_id": run_id, "session": shown_name(user, session)})


# ---------------------------------------------------------------------------------------------- approvals


async def list_approvals(request: Request) -> Response:
    srv: Server = request.app.state.server
    user = srv.user(request)
    rows = []
    for session, req in waiting_calls(srv, user):
        args, _ = parse_arguments(req.call.arguments)
        rows.append({"call_id": req.call.id, "run_id": req.run_id.split(".", 1)[0],
                     "session": shown_name(user, session),
                     "tool": req.call.name, "arguments": args if isinstance(args, dict) else req.call.arguments,
                     "why": req.why, "rule": req.rule, "since": req.at})
    return JSONResponse({"approvals": rows})


async def decide_approval(request: Request) -> Response:
    srv: Server = request.app.state.server
    user = srv.user(request)
    call_id = request.path_params["call_id"]
    body: Decision = await read_json(request, Decision)
    run_id = request.path_params.get("run_id") or body.run_id
    matches = [s for s, req in waiting_calls(srv, user) if req.call.id == call_id
               and (run_id is None or req.run_id.split(".", 1)[0] == run_id)]
    if not matches:
        raise HTTPException(404, f"no call {call_id!r} is waiting for approval")
    if len(matches) > 1:  # providers reuse call ids: deciding the wrong run's call would run it
        raise HTTPException(409, f"calls of several runs have the id {call_id!r}: give run_id (in the body, or "
                                 "POST /v1/runs/{run_id}/approvals/{call_id})")
    try:
        run_id = decide_calls(srv, matches[0], [call_id], body.allow, body.reason, f"api:{user}")
    except SessionBusy as e:
        raise HTTPException(409, shown_text(user, str(e), matches[0])) from None
    except KeyError:
        raise HTTPException(409, f"call {call_id!r} was decided meanwhile") from None
    return JSONResponse({"call_id": call_id, "allow": body.allow, "run_id": run_id})


# ---------------------------------------------------------------------------------------------- the rest


async def openapi_json(request: Request) -> Response:
    return JSONResponse(openapi())


async def docs(request: Request) -> Response:
    return HTMLResponse(docs_page(openapi()))


async def index(request: Request) -> Response:
    return await page.index(request)  # the page and its files: page.py


async def healthz(request: Request) -> Response:
    srv: Server = request.app.state.server
    try:
        srv.store.ping()
    except Exception as e:
        return JSONResponse({"ok": False, "replica": srv.runner.replica, "error": f"store: {e}"}, 503)
    return JSONResponse({"ok": True, "replica": srv.runner.replica, "runs": len(srv.runner.active)})


async def _http_error(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, HTTPException)
    response = error(exc.status_code, str(exc.detail))
    if exc.status_code == 401:
        response.headers["WWW-Authenticate"] = 'Bearer realm="shou"'
    return response


async def _unavailable(request: Request, exc: Exception) -> Response:
    log.warning("%s %s: the store is unavailable: %s", request.method, request.url.path, exc)
    return error(503, "the store is unavailable for the moment; try again", "unavailable")


async def _refused(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, Refused)
    return error(exc.status, str(exc))


class SecurityHeaders:
    """Headers on every answer: no page may frame ours (a hidden Approve button), no type sniffing."""

    def __init__(self, app: Any) -> None:
        self.app = app

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return

        async def with_headers(message: Any) -> None:
            if message["type"] == "http.response.start":
                message.setdefault("headers", [])
                message["headers"] = [*message["headers"], (b"x-frame-options", b"DENY"),
                                      (b"x-content-type-options", b"nosniff"), (b"referrer-policy", b"no-referrer")]
            await send(message)

        if "\x00" in scope.get("path", "") or b"%00" in scope.get("query_string", b""):
            # no id, name or filter holds a NUL, and PostgreSQL's text cannot even be asked about one
            await error(400, "the address holds a NUL character")(scope, receive, with_headers)
            return
        await self.app(scope, receive, with_headers)


def _a2a_routes(server: Server) -> list[Any]:
    """The A2A face (agent card, JSON-RPC and HTTP+JSON: shou.serve.a2a_routes), when a2a-sdk is installed
    (`pip install 'shou[a2a]'`); without it the server serves everything else."""
    import importlib.util

    if importlib.util.find_spec("a2a") is None:
        return []
    from .a2a_routes import a2a_routes

    return a2a_routes(server)


def create_app(server: Server) -> Starlette:
    """The ASGI application; the runner starts and stops with it."""
    from .openai_api import chat_completions, models

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        await server.runner.start()
        try:
            yield
        finally:
            await server.runner.stop()

    routes = [
        Route("/v1/questions", list_questions), Route("/v1/runs/{run_id}/answer", answer_run, methods=["POST"]),
        Route("/", index), Route("/healthz", healthz), Route("/openapi.json", openapi_json), Route("/docs", docs),
        Route("/static/{path:path}", page.static),  # the page's modules, styles and vendored libraries
        Route("/v1/runs", create_run, methods=["POST"]), Route("/v1/runs", list_runs, methods=["GET"]),
        Route("/v1/runs/{run_id}", get_run), Route("/v1/runs/{run_id}/events", run_stream),
        Route("/v1/runs/{run_id}/cancel", cancel_run, methods=["POST"]), Route("/v1/runs/{run_id}/trace", run_trace),
        Route("/v1/sessions", list_sessions), Route("/v1/sessions/{name}", get_session, methods=["GET"]),
        Route("/v1/sessions/{name}", delete_session, methods=["DELETE"]),
        Route("/v1/sessions/{name}/fork", fork_session_route, methods=["POST"]),
        Route("/v1/approvals", list_approvals), Route("/v1/approvals/{call_id}", decide_approval, methods=["POST"]),
        Route("/v1/runs/{run_id}/approvals/{call_id}", decide_approval, methods=["POST"]),
        Route("/v1/chat/completions", chat_completions, methods=["POST"]), Route("/v1/models", models),
        Route("/v1/config", server_config), Route("/v1/usage", usage), Route("/v1/files", list_folder),
        Route("/v1/files/content", file_content, methods=["GET"]),
        Route("/v1/files/content", upload_file, methods=["PUT"]),
        Route("/v1/runs/{run_id}/screenshots/{call_id}", run_screenshot),
        *_a2a_routes(server),
    ]
    app = Starlette(routes=routes, lifespan=lifespan, middleware=[Middleware(SecurityHeaders)],
                    exception_handlers={HTTPException: _http_error, Refused: _refused,
                                        **dict.fromkeys(store_errors(), _unavailable)})
    app.state.server = server
    return app

