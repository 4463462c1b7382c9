"""Integration fixtures: a scripted model served over loopback HTTP and `shou` run as a subprocess."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from shou.models.scripted import ScriptedServer

from ..fixtures.serving import Served

FIXTURES = Path(__file__).parent.parent / "fixtures"


@pytest.fixture
def workspace(tmp_path: Path) -> Path:
    ws = tmp_path / "ws"
    ws.mkdir()
    return ws


@pytest.fixture
def serve() -> Iterator[Callable[..., ScriptedServer]]:
    servers: list[ScriptedServer] = []

    def start(turns: list[dict[str, Any]], **kw: Any) -> ScriptedServer:
        srv = ScriptedServer(turns, **kw).start()
        servers.append(srv)
        return srv

    yield start
    for srv in servers:
        srv.close()


def shou_env(tmp_path: Path, server: ScriptedServer | None, **extra: str) -> dict[str, str]:
    """A clean environment: no provider keys from the machine, config and history under tmp_path."""
    env = {k: v for k, v in os.environ.items() if not k.endswith("_API_KEY") and not k.startswith(("SHOU_", "OPENAI_"))}
    env.update({"SHOU_CONFIG_DIR": str(tmp_path / "config"), "HOME": str(tmp_path), "NO_COLOR": "1",
                "COLUMNS": "200", "PYTHONUNBUFFERED": "1"})
    if server is not None:
        env.update({"SHOU_BASE_URL": server.base_url, "SHOU_MODEL": "scripted-test", "SHOU_API_KEY": "test-key"})
    env.update(extra)
    return env


@pytest.fixture
def shou(tmp_path: Path, workspace: Path) -> Callable[..., subprocess.CompletedProcess[str]]:
    def run(*args: str, server: ScriptedServer | None = None, timeout: float = 60, **env: str
            ) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "shou", *args], cwd=workspace, env=shou_env(tmp_path, server, **env),
            capture_output=True, text=True, timeout=timeout,
        )

    return run


def tool_messages(request: dict[str, Any]) -> list[dict[str, Any]]:
    """The tool-role messages of a recorded request."""
    return [m for m in request["messages"] if m["role"] == "tool"]


@pytest.fixture
def loopback_page() -> Iterator[str]:
    """The URL of a small HTML page served on 127.0.0.1 by a thread of the test process."""
    import threading
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

    class Page(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            body = b"<html><body><h1>Loopback page</h1><p>The answer is forty-two.</p></body></html>"
            self.send_response(200)
            self.send_header("Content-Type", "text/html")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: object) -> None:
            pass

    srv = ThreadingHTTPServer(("127.0.0.1", 0), Page)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{srv.server_address[1]}/"
    srv.shutdown()


@pytest.fixture(scope="session")
def postgres_server() -> Iterator[Any]:
    """One PostgreSQL cluster for the test session (Debian's package, a temp dir, a unix socket)."""
    from ..fixtures.postgres import start_postgres

    server = start_postgres()
    yield server
    server.stop()


@pytest.fixture
def postgres_url(postgres_server: Any, request: pytest.FixtureRequest) -> str:
    """A fresh, empty database on the session's PostgreSQL cluster."""
    import re
    import secrets

    name = re.sub(r"[^a-z0-9_]", "_", request.node.name.lower())[:40] + "_" + secrets.token_hex(3)
    return postgres_server.database(name)


@pytest.fixture
def served() -> Iterator[list[Served]]:
    """The `shou serve` processes a test starts (`tests.fixtures.serving.start_serve`), stopped after it."""
    started: list[Served] = []
    yield started
    for s in started:
        s.stop()
