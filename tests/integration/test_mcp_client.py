"""MCP servers' tools in runs, with real servers from PyPI (mcp-server-time, -git, -fetch) over stdio."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from shou import Agent, ScriptedModel
from shou.events import ToolCallFinished
from shou.mcp import close_all, connection, server_specs

TIME = {"command": sys.executable, "args": ["-m", "mcp_server_time", "--local-timezone", "UTC"]}


def _events(stdout: str) -> list[dict]:
    return [json.loads(line) for line in stdout.splitlines() if line.startswith("{")]


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    path = tmp_path / "repo"
    path.mkdir()
    git = ["git", "-C", str(path), "-c", "user.email=t@example.com", "-c", "user.name=Tester"]
    subprocess.run([*git, "init", "-q"], check=True)
    (path / "a.txt").write_text("a\n")
    subprocess.run([*git, "add", "a.txt"], check=True)
    subprocess.run([*git, "commit", "-q", "-m", "Add the first file"], check=True)
    return path


def test_a_run_calls_time_git_and_fetch_servers(serve, shou, repo: Path, loopback_page: str) -> None:
    servers = {"time": TIME,
               "git": {"command": sys.executable, "args": ["-m", "mcp_server_git", "--repository", str(repo)]},
               "fetch": {"command": sys.executable, "args": ["-m", "mcp_server_fetch", "--ignore-robots-txt",
                                                             "--allow-private-ips"]}}
    srv = serve([
        {"tool_calls": [{"name": "time__get_current_time", "arguments": {"timezone": "UTC"}}]},
        {"tool_calls": [{"name": "git__git_log", "arguments": {"repo_path": str(repo), "max_count": 5}}]},
        {"tool_calls": [{"name": "fetch__fetch", "arguments": {"url": loopback_page, "max_length": 2000}}]},
        {"tool_calls": [{"name": "time__get_current_time", "arguments": {"timezone": "Nowhere/Atlantis"}}]},
        {"text": "Done."},
    ])
    r = shou("run", "--json", "What time is it, what was committed, and what does the page say?", server=srv,
             timeout=120, SHOU_MCP_SERVERS=json.dumps(servers))
    assert r.returncode == 0, r.stderr
    events = _events(r.stdout)
    started = events[0]
    assert {"time__get_current_time", "git__git_log", "fetch__fetch"} <= set(started["tools"])
    results = [e for e in events if e["type"] == "tool_call_finished"]
    assert [e["name"] for e in results] == ["time__get_current_time", "git__git_log", "fetch__fetch",
                                            "time__get_current_time"]
    now, log, fetched, bad = results
    assert not now["is_error"] and now["details"]["structured"]["timezone"] == "UTC"  # structured content kept
    assert "Add the first file" in log["content"] and not log["is_error"]
    assert "forty-two" in fetched["content"] and not fetched["is_error"]
    # an isError result is an error for the model, with the server's own message, not a schema failure
    assert bad["is_error"] and "Nowhere/Atlantis" in bad["content"]
    # what servers return is outside content, delimited like a web page
    assert all(e["content"].lstrip().startswith("<untrusted-content") for e in (now, log, fetched))
    # the model was offered the servers' own schemas
    offered = {t["function"]["name"]: t["function"] for t in srv.requests[0]["tools"]}
    assert offered["git__git_log"]["parameters"]["properties"]["repo_path"]["type"] == "string"
    assert offered["time__get_current_time"]["parameters"]["required"] == ["timezone"]


def _server_pids(marker: bytes) -> list[int]:
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit() and int(entry) != os.getpid():
            try:
                with open(f"/proc/{entry}/cmdline", "rb") as f:
                    cmdline = f.read()
                with open(f"/proc/{entry}/stat") as f:
                    parent = int(f.read().rsplit(")", 1)[1].split()[1])
            except (OSError, ValueError, IndexError):
                continue
            if marker in cmdline and parent == os.getpid():
                found.append(int(entry))
    return found


async def test_a_server_killed_between_two_calls_is_started_again(tmp_path: Path) -> None:
    specs = server_specs({"time": TIME})
    call = {"tool_calls": [{"name": "time__get_current_time", "arguments": {"timezone": "UTC"}}]}
    model = ScriptedModel([call, {"text": "one"}, call, {"text": "two"}])
    agent = Agent(model, [], workspace=tmp_path, mcp_servers=specs)
    try:
        assert (await agent.arun("first")).ok
        [pid] = _server_pids(b"mcp_server_time")
        os.kill(pid, signal.SIGKILL)
        deadline = time.monotonic() + 30
        while connection(specs["time"]).alive and time.monotonic() < deadline:
            await asyncio.sleep(0.05)
        seen = [e async for e in agent.stream("second")]
        [result] = [e for e in seen if isinstance(e, ToolCallFinished)]
        assert not result.is_error and '"timezone": "UTC"' in result.content
        assert connection(specs["time"]).starts == 2
        assert _server_pids(b"mcp_server_time") not in ([], [pid])
    finally:
        await close_all()


async def test_a_server_that_hangs_hits_the_call_timeout(tmp_path: Path) -> None:
    silent = socket.socket()  # accepts connections and never answers: the fetch never ends
    silent.bind(("127.0.0.1", 0))
    silent.listen(8)
    url = f"http://127.0.0.1:{silent.getsockname()[1]}/"
    specs = server_specs({"fetch": {"command": sys.executable, "timeout": 2,
                                    "args": ["-m", "mcp_server_fetch", "--ignore-robots-txt", "--allow-private-ips"]}})
    model = ScriptedModel([{"tool_calls": [{"name": "fetch__fetch", "arguments": {"url": url}}]},
                           {"text": "It did not answer."}])
    agent = Agent(model, [], workspace=tmp_path, mcp_servers=specs)
    try:
        t0 = time.monotonic()
        seen = [e async for e in agent.stream("fetch it")]
        # The silent socket never answers, so without the 2 s call timeout this waits on the fetch server's
        # own (longer) one and the message below is not ours; the bound leaves room for a slow server start.
        assert time.monotonic() - t0 < 60
        [result] = [e for e in seen if isinstance(e, ToolCallFinished)]
        assert result.is_error and "did not finish within 2 s" in result.content
        assert seen[-1].status == "completed"
    finally:
        await close_all()
        silent.close()


def test_workspace_servers_run_only_once_the_workspace_is_trusted(shou, workspace: Path) -> None:
    (workspace / "shou.toml").write_text(
        '[mcp_servers.time]\ncommand = "python"\nargs = ["-m", "mcp_server_time"]\n')
    r = shou("mcp", "list", "--json")
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout) == [] and "not trusted" in r.stderr
    assert shou("trust", "--yes").returncode == 0
    r = shou("mcp", "list", "--json")
    assert r.returncode == 0, r.stderr
    [row] = json.loads(r.stdout)
    assert row["ok"] and row["tools"] == ["time__get_current_time", "time__convert_time"]


def test_a_bad_server_table_is_a_clear_error(shou) -> None:
    r = shou("mcp", "list", SHOU_MCP_SERVERS=json.dumps({"x": {"command": "a", "url": "http://b"}}))
    assert r.returncode == 2 and "either command" in r.stderr and "Traceback" not in r.stderr


async def test_a_server_that_dies_mid_call_fails_that_call_and_serves_the_next(tmp_path: Path,
                                                                              loopback_page: str) -> None:
    silent = socket.socket()
    silent.bind(("127.0.0.1", 0))
    silent.listen(8)
    hang = f"http://127.0.0.1:{silent.getsockname()[1]}/"
    specs = server_specs({"fetch": {"command": sys.executable, "timeout": 30,
                                    "args": ["-m", "mcp_server_fetch", "--ignore-robots-txt", "--allow-private-ips"]}})
    model = ScriptedModel([{"tool_calls": [{"name": "fetch__fetch", "arguments": {"url": hang}}]}, {"text": "one"},
                           {"tool_calls": [{"name": "fetch__fetch", "arguments": {"url": loopback_page}}]},
                           {"text": "two"}])
    agent = Agent(model, [], workspace=tmp_path, mcp_servers=specs)

    async def kill_when_called() -> float:
        silent.setblocking(False)
        conn, _ = await asyncio.get_running_loop().sock_accept(silent)  # the fetch is under way: kill the server
        for pid in _server_pids(b"mcp_server_fetch"):
            os.kill(pid, signal.SIGKILL)
        conn.close()
        return time.monotonic()

    try:
        killer = asyncio.ensure_future(kill_when_called())
        first = [e async for e in agent.stream("fetch the silent one")]
        killed_at = await killer
        # Timed from the kill, not from the server's (slow, machine-dependent) start: the call had 30 s of its
        # timeout left then, so ending within 20 s of it means the death ended the call.
        assert time.monotonic() - killed_at < 20
        [failed] = [e for e in first if isinstance(e, ToolCallFinished)]
        assert failed.is_error and "stopped during the call" in failed.content
        second = [e async for e in agent.stream("fetch the page")]
        [ok] = [e for e in second if isinstance(e, ToolCallFinished)]
        assert not ok.is_error and "forty-two" in ok.content
        assert connection(specs["fetch"]).starts == 2
    finally:
        await close_all()
        silent.close()
