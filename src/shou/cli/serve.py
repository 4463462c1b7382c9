"""`shou serve`: the HTTP API and web page (docs/serve.md), on SQLite or on PostgreSQL shared by replicas."""

from __future__ import annotations

import asyncio
import dataclasses
import ipaddress
import os
import signal
import socket
from pathlib import Path
from typing import Annotated

import typer

from ..markup import escape
from .build import (
    BaseUrlOpt,
    FunctionsOpt,
    ModelOpt,
    OptionOpt,
    Options,
    ProviderOpt,
    SandboxOpt,
    StepsOpt,
    ToolsOpt,
    build_agent,
    close_resources,
)
from .common import WorkspaceOpt, err, fail, finite


def listening_socket(host: str, port: int) -> socket.socket:
    """A bound, listening, non-blocking TCP socket for uvicorn (port 0: any free one)."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    # IPPROTO_TCP named, not 0: asyncio sets TCP_NODELAY only on sockets that say they are TCP, and without it
    # a response written in two parts (head, body) waits ~40 ms for the client's delayed ACK.
    sock = socket.socket(family, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((host, port))
        sock.listen(2048)
    except OSError:
        sock.close()
        raise
    sock.setblocking(False)
    return sock


def _loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def serve(
    host: Annotated[str, typer.Option("--host", help="Address to listen on.")] = "127.0.0.1",
    port: Annotated[int, typer.Option("--port", min=0, max=65535, help="Port (0: any free one).")] = 8300,
    store: Annotated[str | None, typer.Option(
        "--store", help="postgresql://... (shared by replicas), or a SQLite file (default: .shou/serve.db; "
                        ".shou/shou.db shares sessions with `shou run`).")] = None,
    tokens: Annotated[Path | None, typer.Option(
        "--tokens", help="File of `TOKEN USER` lines; without it only loopback is served, to one token.")] = None,
    token_file: Annotated[Path | None, typer.Option(
        "--token-file", help="Without --tokens: a file holding the one token (default: SHOU_SERVE_TOKEN, or a new "
        "one); the link printed at start carries it.")] = None,
    max_runs_per_user: Annotated[int, typer.Option(
        "--max-runs-per-user", min=1, max=100_000, help="Runs one user may have queued or running at once.")] = 8,
    max_concurrent: Annotated[int, typer.Option(
        "--max-concurrent", min=1, max=10_000, help="Runs this replica executes at once.")] = 64,
    lease: Annotated[float, typer.Option(
        "--lease", min=1.0, max=7 * 86400.0, callback=finite,
        help="Seconds a dead replica's runs wait before another takes them.")] = 15.0,
    replica: Annotated[str, typer.Option("--replica", help="This replica's name (default: random).")] = "",
    model: ModelOpt = None, base_url: BaseUrlOpt = None, provider: ProviderOpt = None, max_steps: StepsOpt = None,
    workspace: WorkspaceOpt = None, tools: ToolsOpt = None, functions: FunctionsOpt = None, sandbox: SandboxOpt = None,
    option: OptionOpt = None,
    ask_user: Annotated[bool, typer.Option(
        "--ask-user", help="Offer runs the ask_user tool: a question stops the run waiting_input until answered "
                           "(the page, POST /v1/runs/RUN/answer, shou answer). Also: ask_user = true.")] = False,
) -> None:
    """Serve agents over HTTP: REST runs with streamed events, an OpenAI-compatible endpoint, and a web page."""
    from ..errors import ShouError
    from ..serve.auth import TOKEN_ENV, Tokens

    if tokens is not None and token_file is not None:
        raise fail("give --tokens (a file of `TOKEN USER` lines) or --token-file (one token), not both")
    try:
        token_set, link_token = (Tokens.load(tokens), None) if tokens is not None else Tokens.local(token_file)
    except ShouError as e:
        raise fail(str(e)) from None
    supplied = token_file is not None or bool(os.environ.get(TOKEN_ENV, "").strip())  # not ours to print
    if link_token is not None and not _loopback(host):
        raise fail(f"refusing to serve {host} without --tokens: anyone who can reach it could run tools here")
    if ask_user:
        option = [*(option or ()), "ask_user=true"]
    opts = Options(model, base_url, provider, max_steps, workspace, tools, functions, None, sandbox, None, option,
                   False, "defer")
    try:
        agent, settings = build_agent(opts, open_store=False)  # serve opens its own store
    except ShouError as e:
        raise fail(str(e)) from None
    # uvicorn stops gracefully on SIGTERM, then raises the signal again for the handler it found: with the
    # default one the process died there, before the store closed and before the spans still queued for
    # the OTel collector were sent (atexit never ran). This handler only notes it; the exit code says it.
    stopped: list[int] = []
    previous = signal.signal(signal.SIGTERM, lambda signum, frame: stopped.append(signum))
    try:
        asyncio.run(_serve(agent, settings, host, port, store, (token_set, link_token, supplied), max_runs_per_user,
                           max_concurrent, lease, replica, stopped))
    finally:
        asyncio.run(close_resources(agent))
        signal.signal(signal.SIGTERM, signal.SIG_IGN if stopped else previous)  # the exit flush is not cut short
    if stopped:
        raise typer.Exit(128 + signal.SIGTERM)


def _print_link(base: str, token: str | None) -> None:
    """The page's address with the token in its fragment: a browser never sends a fragment, so the token is
    in no request line, proxy log or Referer; the page reads it and takes it out of the address bar. A token
    the operator supplied (`--token-file`, SHOU_SERVE_TOKEN) is theirs to keep: it is not printed (terminal
    scrollback, a captured log), and the page asks for it."""
    from urllib.parse import quote

    if token is None:
        err.print("[yellow]no --tokens: serving loopback only, to user 'local'; every request needs the token "
                  "you gave (Authorization: Bearer TOKEN)[/]")
        err.print(f"shou serve: open {base}/", soft_wrap=True, markup=False, highlight=False)
        return
    err.print("[yellow]no --tokens: serving loopback only, to user 'local'; every request needs this token "
              "(Authorization: Bearer TOKEN)[/]")
    err.print(f"shou serve: open {base}/#token={quote(token, safe='')}", soft_wrap=True, markup=False,
              highlight=False)


async def _serve(agent, settings, host: str, port: int, store_spec: str | None, auth, max_runs_per_user: int,
                 max_concurrent: int, lease: float, replica: str, stopped: list[int]) -> None:
    import uvicorn

    from ..errors import ShouError
    from ..serve import open_store
    from ..serve.app import create_app
    from ..serve.hub import Hub
    from ..serve.jobs import RunQueue
    from ..serve.runner import Runner
    from ..serve.server import Server
    from ..serve.tenancy import UserMemory

    try:
        store = open_store(store_spec, settings.workspace, settings.trace_retention_days)
    except ShouError as e:
        raise fail(str(e)) from None
    if store is not agent.store and agent.store is not None:
        agent.store.close()
    agent.store = store
    if getattr(store, "url", None) and not settings.memory_store:  # long-term memory in the same database
        from ..memory.postgres import PostgresMemoryStore

        agent.settings = dataclasses.replace(settings, memory_store=store.url)
        # Recalled into each run's context, as the workspace's memory.db is by `shou run`.
        agent.memory = PostgresMemoryStore(store.url, embeddings=bool(settings.memory_embeddings))
    queue = RunQueue.open(store)
    runner = Runner(agent, store, queue, Hub(), replica=replica, max_concurrent=max_concurrent, lease=lease,
                    max_runs_per_user=max_runs_per_user, users=UserMemory(agent.settings, store))
    tokens, link_token, supplied = auth
    app = create_app(Server(runner, tokens, settings.workspace, local=link_token is not None))
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    try:
        sock = listening_socket(host, port)
    except OSError as e:
        raise fail(f"cannot listen on {host}:{port}: {e.strerror or e}") from None
    bound = sock.getsockname()[1]
    server = uvicorn.Server(uvicorn.Config(app, log_level="warning", access_log=False, timeout_graceful_shutdown=5,
                                           lifespan="on"))
    task = asyncio.create_task(server.serve(sockets=[sock]))
    while not server.started and not task.done():  # noqa: ASYNC110 - uvicorn offers a flag, not an event
        await asyncio.sleep(0.05)
    if stopped:  # a SIGTERM before uvicorn took the signal over: it must still stop the server
        server.should_exit = True
    if server.started:
        where = f"[{host}]" if family == socket.AF_INET6 else host
        err.print(f"shou serve: replica {escape(runner.replica)}, store {escape(str(store.path))}")
        err.print(f"shou serve: listening on http://{where}:{bound}", soft_wrap=True)
        if link_token is not None:
            _print_link(f"http://{where}:{bound}", None if supplied else link_token)
    try:
        await task
    finally:
        queue.close()
        store.close()
