"""What a trusted config says about an MCP server (url login and key, args, env, headers) is secret: it is not
in `shou run --json` output, the stored session, `shou serve`'s event stream, `shou config` or `shou mcp list`,
even when a server fails to start or the model repeats it."""

from __future__ import annotations

import json
import socket
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from ..fixtures.mcp_servers import http_server as mcp_http_server
from ..fixtures.serving import start_serve, stream_run
from .conftest import shou_env

ARG_TOKEN = "argtok-7Hq2xZ9pLm4"  # --token=...
ARG_KEY = "argkey-Vb81Kd02Qw"  # --api-key X
ENV_TOKEN = "envtok-Rt55Yu77Io"
URL_PASS = "urlpass-Zx31Cv90Bn"
URL_QUERY = "urlquery-Po44Lk12Mj"
HEADER = "hdrsecret-Gf63Hj28Sd"
SECRETS = (ARG_TOKEN, ARG_KEY, ENV_TOKEN, URL_PASS, URL_QUERY, HEADER)
TOKEN = "alice-token-0123456789"


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture
def http_server(tmp_path: Path) -> Iterator[int]:
    with mcp_http_server(tmp_path / "port", "http") as port:
        yield port


@pytest.fixture
def config(tmp_path: Path, http_server: int) -> Path:
    """A trusted user config naming servers that carry credentials every way a table can."""
    cfg = tmp_path / "config"
    cfg.mkdir(exist_ok=True)
    py = json.dumps(sys.executable)
    closed = _closed_port()
    (cfg / "shou.toml").write_text(f"""
[mcp_servers.time]
command = {py}
args = ["-m", "mcp_server_time", "--local-timezone", "UTC"]
env = {{ TIME_SERVICE_TOKEN = "{ENV_TOKEN}" }}

[mcp_servers.broken]
command = {py}
args = ["-m", "mcp_server_time", "--token={ARG_TOKEN}", "--api-key", "{ARG_KEY}"]

[mcp_servers.remote]
url = "http://mcpuser:{URL_PASS}@127.0.0.1:{http_server}/mcp?api_key={URL_QUERY}"
headers = {{ X-Api-Key = "{HEADER}" }}

[mcp_servers.gone]
url = "http://mcpuser:{URL_PASS}@127.0.0.1:{closed}/mcp?token={URL_QUERY}"
""")
    return cfg


def _turns() -> list[dict]:
    return [
        {"tool_calls": [{"name": "remote__echo", "arguments": {"text": f"the header is {HEADER}"}}]},
        {"text": f"Keys: {' '.join(SECRETS)}."},
    ]


def _assert_hidden(text: str | bytes, where: str) -> None:
    data = text.encode() if isinstance(text, str) else text
    for secret in SECRETS:
        assert secret.encode() not in data, f"{secret} is in {where}"


def test_run_json_and_the_stored_session_hold_no_server_credential(serve, shou, config: Path,
                                                                    workspace: Path) -> None:
    srv = serve(_turns())
    r = shou("run", "--json", "Use the servers.", server=srv, timeout=180)
    assert r.returncode == 0, r.stderr
    _assert_hidden(r.stdout, "the --json output")
    _assert_hidden(r.stderr, "stderr")
    events = [json.loads(line) for line in r.stdout.splitlines() if line.startswith("{")]
    assert {"time__get_current_time", "remote__echo"} <= set(events[0]["tools"])  # working servers still work
    notices = [e["text"] for e in events if e["type"] == "notice" and e["kind"] == "mcp"]
    assert any("'broken'" in n for n in notices) and any("'gone'" in n for n in notices), notices
    # a server is named by its program or its host, never its whole command line or URL
    assert any("python" in n and "mcp_server_time" in n for n in notices if "'broken'" in n), notices
    assert any("127.0.0.1" in n for n in notices if "'gone'" in n), notices
    echoed = next(e for e in events if e["type"] == "tool_call_finished")
    assert "the header is [redacted]" in echoed["content"] and not echoed["is_error"]
    assert events[-1]["answer"].count("[redacted]") == len(SECRETS)
    for path in (workspace / ".shou").rglob("*"):
        if path.is_file():
            _assert_hidden(path.read_bytes(), str(path))
    # every model request is built from the redacted events: the provider never got them either
    _assert_hidden(json.dumps(srv.requests), "the model requests")


def test_config_and_mcp_list_mask_server_credentials(shou, config: Path) -> None:
    shown = shou("config")
    assert shown.returncode == 0, shown.stderr
    assert "mcp_servers" in shown.stdout
    _assert_hidden(shown.stdout + shown.stderr, "shou config")
    listed = shou("mcp", "list", "--json", timeout=180)
    assert listed.returncode == 0, listed.stderr
    _assert_hidden(listed.stdout + listed.stderr, "shou mcp list")
    rows = {row["name"]: row for row in json.loads(listed.stdout)}
    assert rows["remote"]["ok"] and rows["time"]["ok"] and not rows["broken"]["ok"] and not rows["gone"]["ok"]
    assert rows["remote"]["where"].startswith("http://127.0.0.1:") and rows["remote"]["where"].endswith("/mcp")


def test_the_serve_event_stream_holds_no_server_credential(serve, tmp_path: Path, workspace: Path,
                                                           config: Path) -> None:
    srv = serve(_turns())
    tokens = tmp_path / "tokens.txt"
    tokens.write_text(f"{TOKEN} alice\n")
    tokens.chmod(0o600)  # a tokens file must be its owner's alone
    served = start_serve(workspace, shou_env(tmp_path, srv), "--tokens", str(tokens))
    try:
        with served.client(TOKEN, timeout=180) as c:
            r = c.post("/v1/runs", json={"task": "Use the servers."})
            assert r.status_code == 202, r.text
            run_id = r.json()["run_id"]
            events = stream_run(c, run_id)
            assert events[-1]["event"] == "run_finished" and events[-1]["data"]["status"] == "completed"
            _assert_hidden(json.dumps(events), "the event stream")
            assert any(m["event"] == "notice" and "'gone'" in m["data"]["text"] for m in events)
            _assert_hidden(c.get(f"/v1/runs/{run_id}").text, "the run")
            _assert_hidden(c.get(f"/v1/runs/{run_id}/trace").text, "the trace")
    finally:
        served.stop()
    _assert_hidden(served.log(), "the server's log")


def test_trust_shows_a_workspace_server_table_with_its_credentials_masked(shou, workspace: Path) -> None:
    (workspace / "shou.toml").write_text(f"""
[mcp_servers.tracker]
url = "https://bot:{URL_PASS}@mcp.example.com/mcp"
headers = {{ Authorization = "Bearer {HEADER}" }}

[mcp_servers.local]
command = "uvx"
args = ["tracker-mcp", "--api-key", "{ARG_KEY}"]
env = {{ TRACKER_TOKEN = "{ENV_TOKEN}" }}
""")
    r = shou("trust", "--yes")
    assert r.returncode == 0, r.stderr
    assert "mcp_servers" in r.stdout and "mcp.example.com" in r.stdout and "tracker-mcp" in r.stdout
    _assert_hidden(r.stdout + r.stderr, "shou trust")
