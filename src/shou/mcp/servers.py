"""MCP servers shou connects to: their settings, and one connection per server kept for the process.

`[mcp_servers.NAME]` in shou.toml names a server: `command`, `args`, `env` (stdio: shou starts it) or `url`,
`headers` (streamable HTTP), and `timeout` (seconds one call may take, default 60). Servers are commands
or places to send data, so a workspace's shou.toml may name them only once a person trusted it (the
`mcp_servers` setting is not `safe`: shou.config).

A server starts when a run first needs it and stays up for the next runs of the process (one connection
per server and event loop). The connection lives in a task of its own, which owns the SDK's `Client`
context; calls are made from the runs' tasks. A server that dies is started again for the next call.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import sys
import weakref
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, TextIO

from ..setting_tables import check_server_table

DEFAULT_TIMEOUT = 60.0
START_TIMEOUT = 30.0  # to start a server and list its tools


@dataclass(frozen=True, slots=True)
class ServerSpec:
    """How to reach one MCP server (`[mcp_servers.NAME]`)."""

    # What may hold a credential is left out of the repr: a spec in a log or a traceback shows none.
    name: str
    command: str | None = None
    args: tuple[str, ...] = field(default=(), repr=False)
    env: tuple[tuple[str, str], ...] = field(default=(), repr=False)  # pairs: a spec keys the connections
    url: str | None = field(default=None, repr=False)
    headers: tuple[tuple[str, str], ...] = field(default=(), repr=False)
    timeout: float = DEFAULT_TIMEOUT

    @classmethod
    def from_table(cls, name: str, table: Mapping[str, Any]) -> ServerSpec:
        """A `[mcp_servers.NAME]` table, checked (`UserError` says what is wrong)."""
        check_server_table(name, table)
        command, url = table.get("command"), table.get("url")
        args = table.get("args", [])
        timeout = table.get("timeout", DEFAULT_TIMEOUT)
        return cls(name, command, tuple(args), tuple(sorted(table.get("env", {}).items())), url,
                   tuple(sorted(table.get("headers", {}).items())), float(timeout))

    @property
    def where(self) -> str:
        """The server, for people and events: its program (and module or package), or its URL without
        login, query or key-like path parts. Never its whole command line: arguments may hold keys."""
        return describe_server(self)

    def secrets(self) -> set[str]:
        """What in this spec may be a credential (shou.redact.server_secrets): never shown or stored."""
        from ..redact_servers import server_secrets

        return server_secrets({"url": self.url, "args": self.args, "env": dict(self.env),
                               "headers": dict(self.headers)})


def describe_server(spec: ServerSpec) -> str:
    """`spec.where` (see there)."""
    return _describe_url(spec.url) if spec.url is not None else _describe_program(spec)


def _describe_url(url: str) -> str:
    """The URL's scheme, host, port and path: no login, query or fragment, and key-like path parts masked."""
    from urllib.parse import urlsplit

    from ..redact_servers import url_path_masked

    try:
        parts = urlsplit(url)
        host = parts.hostname or ""
        port = f":{parts.port}" if parts.port else ""
    except ValueError:
        return "(an HTTP server)"
    host = f"[{host}]" if ":" in host else host
    return f"{parts.scheme}://{host}{port}{url_path_masked(parts.path)}"


def _describe_program(spec: ServerSpec) -> str:
    """The program and what it runs (`python -m srv`, `uvx mcp-server-time`), never an argument that may be
    a key."""
    program = os.path.basename(spec.command or "")
    secrets = spec.secrets()
    for i, arg in enumerate(spec.args):
        if arg == "-m" and i + 1 < len(spec.args) and spec.args[i + 1] not in secrets:
            return f"{program} -m {spec.args[i + 1]}"
        if not arg.startswith("-"):
            plain = arg not in secrets and not any(c in arg for c in "=@:") and not os.path.isabs(arg)
            return f"{program} {arg}" if plain else program
    return program


def server_specs(tables: Mapping[str, Any] | None) -> dict[str, ServerSpec]:
    """The `mcp_servers` setting as specs."""
    return {name: spec if isinstance(spec, ServerSpec) else ServerSpec.from_table(name, spec)
            for name, spec in (tables or {}).items()}


class Connection:
    """One server's connection: started on first use, started again after it died."""

    def __init__(self, spec: ServerSpec) -> None:
        self.spec = spec
        self.client: Any = None  # mcp.Client while connected
        self.error: str | None = None  # why the last start failed, or why the connection ended
        self.starts = 0
        self._task: asyncio.Task[None] | None = None
        self._ready = asyncio.Event()
        self._stop = asyncio.Event()
        self._lock = asyncio.Lock()

    @property
    def alive(self) -> bool:
        """Whether the server is connected now. A stdio server that exited leaves the SDK's client open with
        its stream closed: that counts as gone (looked up defensively: it is the SDK's private state, and
        a call on such a client fails with `Connection closed` anyway)."""
        if self.client is None or self._task is None or self._task.done():
            return False
        dispatcher = getattr(getattr(self.client, "session", None), "_dispatcher", None)
        return not getattr(dispatcher, "_closed", False)

    async def get(self) -> Any:
        """The connected client, starting (or restarting) the server if needed; `ConnectionError` if it
        cannot be started."""
        async with self._lock:
            if not self.alive:
                await self._start()
            return self.client

    def lost(self, why: str) -> None:
        """A call found the server gone: the next `get()` starts it again."""
        self.error = why
        self.client = None
        if self._task is not None and not self._task.done():
            self._stop.set()

    async def _start(self) -> None:
        try:
            import mcp  # noqa: F401
        except ImportError:
            raise ConnectionError("MCP servers need the mcp package: pip install 'shou[mcp]'") from None
        if self._task is not None and not self._task.done():  # a dead connection's task: let it end
            self._stop.set()
        self.client, self.error = None, None
        self._ready, self._stop = asyncio.Event(), asyncio.Event()
        self.starts += 1
        self._task = asyncio.ensure_future(self._own(self._ready, self._stop))
        try:
            async with asyncio.timeout(START_TIMEOUT):
                await self._ready.wait()
        except TimeoutError:
            self._task.cancel()
            self.error = f"it did not start within {START_TIMEOUT:g} s"
        if self.client is None:
            raise ConnectionError(f"MCP server {self.spec.name!r} ({self.spec.where}) could not be started: "
                                  f"{self.error or 'it stopped at once'}")

    async def _own(self, ready: asyncio.Event, stop: asyncio.Event) -> None:
        """The task that holds the SDK client's context for as long as the connection lives."""
        from mcp import Client

        log = _log_file(self.spec.name) if self.spec.url is None else None
        try:
            # the SDK waits a little longer than a call may take: the tool timeout (with its message) comes first
            async with Client(_transport(self.spec, log), read_timeout_seconds=self.spec.timeout + 5) as client:
                from .results import bound_result_checks

                # results are checked off the loop, within the call's time (the tool timeout ends it first)
                bound_result_checks(client, self.spec.timeout)
                self.client = client
                ready.set()
                await stop.wait()
        except BaseException as e:  # a server that exits, crashes or never answers ends up here
            self.error = _describe(e)
            if isinstance(e, asyncio.CancelledError):
                raise
        finally:
            if not stop.is_set():  # ended by itself, not replaced: nothing is connected now
                self.client = None
            ready.set()
            if log is not None:
                log.close()

    async def close(self) -> None:
        """Stop the server (or end the HTTP session)."""
        if self._task is not None and not self._task.done():
            self._stop.set()
            with contextlib.suppress(BaseException):
                async with asyncio.timeout(5):
                    await self._task
            if not self._task.done():
                self._task.cancel()


def _transport(spec: ServerSpec, errlog: TextIO | None) -> Any:
    if spec.url is not None:
        from mcp.client.streamable_http import streamable_http_client

        from .http import http_client
        from .stdio import MAX_MESSAGE_BYTES

        # one message is read up to a bound, as from a stdio server (shou.mcp.http)
        http = http_client(dict(spec.headers), spec.timeout)
        return streamable_http_client(spec.url, http_client=http, max_sse_event_size=MAX_MESSAGE_BYTES)
    from mcp.client.stdio import StdioServerParameters, stdio_client

    from .stdio import install

    install()  # one message of a server is read up to a bound, not whole whatever its size

    command = sys.executable if spec.command in ("python", "python3") else spec.command
    # The SDK passes a server only a few harmless variables (PATH, HOME, ...) and the table's `env`: shou's
    # own environment holds the provider keys, which are never sent anywhere they were not meant for.
    # a reply that is not UTF-8 gets U+FFFD where its bad bytes were: strict decoding ended the SDK's reader,
    # leaving that call and every later one of the server waiting until their timeouts
    params = StdioServerParameters(command=command or "", args=list(spec.args), env=dict(spec.env),
                                   encoding_error_handler="replace")
    return stdio_client(params, errlog=errlog or sys.stderr)


def _log_file(name: str) -> TextIO:
    """Where a server's stderr goes (its own log, not the person's terminal): `~/.cache/shou/mcp/NAME.log`."""
    from ..models import cache_dir

    folder = cache_dir(os.environ) / "mcp"
    try:
        folder.mkdir(parents=True, exist_ok=True, mode=0o700)
        return open(folder / f"{name}.log", "a", encoding="utf-8")
    except OSError:
        return open(os.devnull, "w", encoding="utf-8")


def _describe(e: BaseException) -> str:
    """Why a connection failed, for people and events: a URL it quotes loses its login and keys."""
    from ..config import redact_urls

    inner = getattr(e, "exceptions", None)
    if inner:  # anyio task groups wrap the real error
        return _describe(inner[0])
    return redact_urls(f"{type(e).__name__}: {e}") if str(e) else type(e).__name__


_POOLS: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, dict[ServerSpec, Connection]] = (
    weakref.WeakKeyDictionary())


def connection(spec: ServerSpec) -> Connection:
    """The process's connection to `spec` on the running event loop (made on first use, not started)."""
    pool = _POOLS.setdefault(asyncio.get_running_loop(), {})
    found = pool.get(spec)
    if found is None:
        found = pool[spec] = Connection(spec)
    return found


async def close_all() -> None:
    """Stop every server started on the running event loop."""
    pool = _POOLS.pop(asyncio.get_running_loop(), {})
    await asyncio.gather(*(c.close() for c in pool.values()), return_exceptions=True)
