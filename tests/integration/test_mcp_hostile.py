"""Hostile MCP servers (made with the SDK, tests/fixtures/mcp_servers.py) cannot stall or swell a run: a result
of a hundred megabytes is not held in memory, and a catastrophic `pattern` in a tool's schema does not freeze
the event loop."""

from __future__ import annotations

import contextlib
import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from ..fixtures.mcp_servers import http_server
from .conftest import FIXTURES, shou_env

HUGE_MB = 100


def _peak_rss_mb(proc: subprocess.Popen[bytes]) -> float:
    """The process's peak resident memory (VmHWM), read until it exits."""
    peak = 0.0
    while proc.poll() is None:
        try:
            status = Path(f"/proc/{proc.pid}/status").read_text()
        except OSError:
            break
        for line in status.splitlines():
            if line.startswith("VmHWM:"):
                peak = max(peak, int(line.split()[1]) / 1024)
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(0.05)  # until it exits, sampling as it runs
    return peak


def _run(tmp_path: Path, workspace: Path, srv, servers: dict, *args: str) -> tuple[list[dict], float, str]:
    env = shou_env(tmp_path, srv, SHOU_MCP_SERVERS=json.dumps(servers))
    out, err = tmp_path / "out.txt", tmp_path / "err.txt"
    with open(out, "wb") as o, open(err, "wb") as e:
        proc = subprocess.Popen([sys.executable, "-m", "shou", "run", "--json", *args], cwd=workspace, env=env,
                                stdout=o, stderr=e)
        try:
            peak = _peak_rss_mb(proc)
            proc.wait(300)
        finally:
            if proc.poll() is None:
                proc.kill()
    events = [json.loads(line) for line in out.read_text().splitlines() if line.startswith("{")]
    return events, peak, err.read_text()


def test_a_huge_result_is_not_held_and_the_run_goes_on(serve, tmp_path: Path, workspace: Path) -> None:
    servers = {"huge": {"command": sys.executable, "args": [str(FIXTURES / "mcp_servers.py"), "huge", str(HUGE_MB)]},
               "small": {"command": sys.executable, "args": [str(FIXTURES / "mcp_servers.py"), "huge", "0.1"]}}
    srv = serve([{"tool_calls": [{"name": "huge__dump", "arguments": {}}]},
                 {"tool_calls": [{"name": "small__dump", "arguments": {}}]},
                 {"text": "done"}])
    events, peak, err = _run(tmp_path, workspace, srv, servers, "Dump it.")
    assert events and events[-1]["type"] == "run_finished", err
    assert events[-1]["status"] == "completed" and events[-1]["answer"] == "done"
    huge, small = [e for e in events if e["type"] == "tool_call_finished"]
    # its start is passed on, with a note saying what was dropped and why (an error: it is not all there)
    assert huge["is_error"] and "y" * 1000 in huge["content"], huge["content"][:300]
    assert re.search(r"result was [\d,]{11,} bytes, over the 5,000,000 shou reads", huge["content"])
    assert "ask for less" in huge["content"] and len(huge["content"]) < 30_000
    # a result under the bound is passed on, and capped for the model like any tool's output
    assert not small["is_error"] and "omitted" in small["content"] and len(small["content"]) < 30_000
    assert peak < 300, f"shou's peak RSS was {peak:.0f} MB"


def test_a_huge_http_result_is_not_held(serve, tmp_path: Path, workspace: Path) -> None:
    srv = serve([{"tool_calls": [{"name": "huge__dump", "arguments": {}}]}, {"text": "done"}])
    with http_server(tmp_path / "port", "http-huge", str(HUGE_MB), "json") as port:
        servers = {"huge": {"url": f"http://127.0.0.1:{port}/mcp"}}
        events, peak, err = _run(tmp_path, workspace, srv, servers, "Dump it.")
    assert events and events[-1]["type"] == "run_finished", err
    assert events[-1]["status"] == "completed" and events[-1]["answer"] == "done"
    (huge,) = [e for e in events if e["type"] == "tool_call_finished"]
    assert huge["is_error"] and "could not read" in huge["content"]
    assert "over the 5,000,000" in huge["content"] and "ask for less" in huge["content"]
    assert peak < 300, f"shou's peak RSS was {peak:.0f} MB"


def test_a_catastrophic_schema_pattern_does_not_freeze_the_run(serve, shou) -> None:
    servers = {"regex": {"command": sys.executable, "args": [str(FIXTURES / "mcp_servers.py"), "regex"],
                         "timeout": 30}}
    evil = "a" * 40 + "!"  # `^(a+)+$` backtracks 2**40 ways on it in Python's re
    srv = serve([{"tool_calls": [{"name": "regex__check", "arguments": {"word": evil}}]},
                 {"tool_calls": [{"name": "regex__check", "arguments": {"word": "aaaa"}},
                                 {"name": "regex__ping", "arguments": {}}]},
                 {"text": "done"}])
    # A frozen event loop would outlast every timeout of the run: the process itself is bounded here.
    r = shou("run", "--json", "Check the words.", server=srv, timeout=100, SHOU_MCP_SERVERS=json.dumps(servers),
             SHOU_RUN_TIMEOUT="120")
    assert r.returncode == 0, r.stderr
    events = [json.loads(line) for line in r.stdout.splitlines() if line.startswith("{")]
    assert events[-1]["status"] == "completed" and events[-1]["answer"] == "done"
    bad, good, ping = [e for e in events if e["type"] == "tool_call_finished"]
    assert bad["is_error"] and "does not match" in bad["content"] and "(a+)+" in bad["content"]
    assert not good["is_error"] and "checked 4 letters" in good["content"]
    assert not ping["is_error"] and "pong" in ping["content"]
    # the model was offered the server's pattern: it is checked, in linear time, not dropped
    offered = {t["function"]["name"]: t["function"] for t in srv.requests[0]["tools"]}
    assert offered["regex__check"]["parameters"]["properties"]["word"]["pattern"] == "^(a+)+$"


UNREADABLE = "could not be read as a JSON-RPC message"


@pytest.mark.parametrize(("mode", "first_text"), [
    ("bytes", "x\ufffd\ufffdy"), ("escape", "x\ufffdy"), ("request", "xy"),
    ("deep", UNREADABLE), ("tail-deep", UNREADABLE), ("broken", UNREADABLE), ("shape", UNREADABLE)])
def test_a_reply_that_is_not_text_is_read_and_the_server_answers_on(serve, tmp_path: Path, workspace: Path,
                                                                    mode: str, first_text: str) -> None:
    """One raw 0xff (strict decoding) or one RecursionError ended the SDK's reader: that call and every later
    one of the server waited for their timeouts; a lone surrogate's escape (ASCII) was dropped by the SDK's
    parse and its call waited for its timeout. Each is read now (U+FFFD), and the server answers on. A reply the
    SDK cannot read at all (nested past its parser, cut short, of the wrong shape) answers its call with an error
    at once (it waited for its timeout); a request of the server's own that cannot be read answers nothing."""
    # the timeout is long: a call answered only by it (the old behaviour) fails the test by its text, not its time
    servers = {"raw": {"command": sys.executable, "args": [str(FIXTURES / "mcp_raw_bytes.py"), mode], "timeout": 60}}
    srv = serve([{"tool_calls": [{"name": "raw__dump", "arguments": {}}]},
                 {"tool_calls": [{"name": "raw__dump", "arguments": {}}]}, {"text": "done"}])
    events, _, err = _run(tmp_path, workspace, srv, servers, "Dump it twice.")
    assert "RecursionError" not in err and events and events[-1]["status"] == "completed", err[-3000:]
    first, second = [e for e in events if e["type"] == "tool_call_finished"]
    assert first_text in first["content"], first["content"]
    assert first["is_error"] == (first_text == UNREADABLE), first["content"]
    assert "xy" in second["content"] and not second["is_error"], second["content"]
