"""`shou mcp serve`, tested with the official SDK's own client over stdio and streamable HTTP."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx2
import pytest
from mcp import Client
from mcp.client.stdio import StdioServerParameters, stdio_client
from mcp.client.streamable_http import streamable_http_client

from shou.models.scripted import ScriptedServer

from .conftest import shou_env

TOKEN = "test-token-for-this-server"
SCRIPT = [
    {"tool_calls": [{"name": "calculator", "arguments": {"expression": "6*7"}}]},
    {"text": "The product is 42."},
]


def _env(tmp_path: Path, srv: ScriptedServer) -> dict[str, str]:
    return shou_env(tmp_path, srv)


async def _exercise(client: Client, srv: ScriptedServer) -> None:
    names = [t.name for t in (await client.list_tools()).tools]
    assert "calculator" in names and "run_agent" in names and "delegate" not in names
    calc = await client.call_tool("calculator", {"expression": "6*7"})
    assert not calc.is_error and calc.content[0].text == "42"
    bad = await client.call_tool("calculator", {"expression": "1/0"})
    assert bad.is_error and "zero" in bad.content[0].text.lower()
    progress: list[tuple[float, str | None]] = []

    async def on_progress(value: float, total: float | None, message: str | None) -> None:
        progress.append((value, message))

    done = await client.call_tool("run_agent", {"task": "What is 6 times 7?"}, progress_callback=on_progress)
    assert not done.is_error and done.content[0].text == "The product is 42."
    assert done.structured_content["status"] == "completed" and done.structured_content["steps"] == 2
    assert any(m and m.startswith("→ calculator") for _, m in progress), progress
    # the run behind run_agent used the scripted model: its first request carried the task
    assert srv.requests[0]["messages"][-1]["content"] == "What is 6 times 7?"


async def test_serve_over_stdio(serve: Any, tmp_path: Path, workspace: Path) -> None:
    srv = serve(SCRIPT)
    params = StdioServerParameters(command=sys.executable, args=["-m", "shou", "mcp", "serve", "-w", str(workspace)],
                                   env=_env(tmp_path, srv), cwd=str(workspace))
    with open(tmp_path / "serve.log", "w") as log:
        async with Client(stdio_client(params, errlog=log), read_timeout_seconds=60) as client:
            await _exercise(client, srv)


@pytest.fixture
def http_server(serve: Any, tmp_path: Path, workspace: Path) -> Iterator[tuple[str, ScriptedServer]]:
    srv = serve(SCRIPT)
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    env = {**_env(tmp_path, srv), "SHOU_MCP_TOKEN": TOKEN}
    proc = subprocess.Popen([sys.executable, "-m", "shou", "mcp", "serve", "--http", str(port), "-w", str(workspace)],
                            env=env, cwd=workspace, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
            break
        except OSError:
            if proc.poll() is not None:
                raise AssertionError(proc.stderr.read() if proc.stderr else "shou mcp serve exited") from None
            time.sleep(0.1)
    yield f"http://127.0.0.1:{port}/mcp", srv
    proc.terminate()
    proc.wait(10)


async def test_serve_over_streamable_http(http_server: tuple[str, ScriptedServer]) -> None:
    url, srv = http_server
    http = httpx2.AsyncClient(headers={"Authorization": f"Bearer {TOKEN}"}, timeout=60)
    async with Client(streamable_http_client(url, http_client=http), read_timeout_seconds=60) as client:
        await _exercise(client, srv)


async def test_http_needs_the_token(http_server: tuple[str, ScriptedServer]) -> None:
    url, _ = http_server
    async with httpx2.AsyncClient(timeout=10) as http:
        for headers in ({}, {"Authorization": "Bearer wrong"}):
            r = await http.post(url, json={"jsonrpc": "2.0", "id": 1, "method": "tools/list"}, headers=headers)
            assert r.status_code == 401


async def test_a_call_the_policy_would_ask_about_is_refused(serve: Any, tmp_path: Path, workspace: Path) -> None:
    srv = serve([])
    (workspace / "notes.txt").write_text("keep me\n")
    env = _env(tmp_path, srv)
    env["SHOU_PERMISSIONS_ASK"] = "write_file"
    params = StdioServerParameters(command=sys.executable, args=["-m", "shou", "mcp", "serve", "-w", str(workspace)],
                                   env=env, cwd=str(workspace))
    with open(os.devnull, "w") as log:
        async with Client(stdio_client(params, errlog=log), read_timeout_seconds=60) as client:
            r = await client.call_tool("write_file", {"path": "notes.txt", "content": "overwritten"})
    assert r.is_error
    assert (workspace / "notes.txt").read_text() == "keep me\n"
