"""Issue 30: every face's events take the one emitter path. A secret in an MCP server's URL (the server is
down, so the connection failure is reported) and in the model's reply must be absent from the store, the SSE
stream of `shou serve` and the OTel spans it exports (a real OTLP collector over loopback)."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.fixtures.otlp_collector import OtlpCollector

from ..fixtures.serving import start_serve, stream_run
from .conftest import shou_env

TOKEN = "PathTok4Vb8Nm2Qw6Zx"  # a Zapier-style token in a URL path segment


@pytest.fixture
def collector() -> Iterator[OtlpCollector]:
    with OtlpCollector() as c:
        yield c


def test_an_mcp_url_secret_reaches_neither_store_nor_sse_nor_otel(serve, collector: OtlpCollector,
                                                                   tmp_path: Path, workspace: Path) -> None:
    cfg = tmp_path / "config"  # the user's config: trusted
    cfg.mkdir(exist_ok=True)
    (cfg / "shou.toml").write_text(f'[mcp_servers.zap]\nurl = "http://127.0.0.1:9/api/mcp/s/{TOKEN}/mcp"\n')
    srv = serve([{"text": f"the server was http://127.0.0.1:9/api/mcp/s/{TOKEN}/mcp"}])
    env = shou_env(tmp_path, srv, OTEL_EXPORTER_OTLP_ENDPOINT=collector.endpoint, SHOU_OTEL_CONTENT="true")
    s = start_serve(workspace, env)
    try:
        with s.client() as c:
            run = c.post("/v1/runs", json={"task": "where is the server?"}).json()["run_id"]
            events = stream_run(c, run)
    finally:
        s.stop()
    # Stopped by SIGTERM after a graceful shutdown (not killed by it: the spans still queued were sent).
    assert s.proc.returncode == 128 + 15, s.log()
    kinds = [m["event"] for m in events]
    assert "notice" in kinds and kinds[-1] == "run_finished", kinds  # the failed connection was reported
    sse = json.dumps(events)
    assert "zap" in sse and TOKEN not in sse, "SSE stream"
    dbs = [p for p in tmp_path.rglob("*.db*") if "cache" not in p.parts]
    assert dbs, sorted(str(p) for p in tmp_path.rglob("*"))
    blob = b"".join(p.read_bytes() for p in dbs)
    assert b"[redacted]" in blob and TOKEN.encode() not in blob, "store"
    deadline = time.monotonic() + 10  # the collector decodes on its own thread
    while not collector.named("invoke_agent") and time.monotonic() < deadline:
        time.sleep(0.1)
    spans = repr([(s.name, s.attributes, s.status_message) for s in collector.spans])
    assert collector.named("invoke_agent") and "[redacted]" in spans, (spans[:2000], s.log()[-3000:])
    assert TOKEN not in spans, "OTel spans"


def test_a_decision_by_shou_deny_passes_the_settings_redaction(serve, shou, tmp_path: Path, workspace: Path) -> None:
    """`shou deny` writes its ApprovalDecided through an emitter made from the settings (their secrets, their
    observers): a secret the environment holds, typed into the reason, is not stored."""
    secret = "DenySecret-7Hq2Wm9Kx4"
    cfg = tmp_path / "config"
    cfg.mkdir(exist_ok=True)
    (cfg / "shou.toml").write_text('[permissions]\nask = ["shell"]\n')
    srv = serve([{"tool_calls": [{"name": "shell", "arguments": {"command": "echo hi"}, "id": "call_1"}]}])
    r = shou("run", "go", "--approvals", "defer", "-s", "s1", server=srv, MY_SERVICE_TOKEN=secret)
    assert r.returncode == 1 and "waiting_approval" in r.stderr, r.stderr
    d = shou("deny", "call_1", "--yes", "--reason", f"the token {secret} must not be sent", MY_SERVICE_TOKEN=secret)
    assert d.returncode == 0, d.stderr
    blob = b"".join(p.read_bytes() for p in (workspace / ".shou").glob("*.db*"))
    assert b"must not be sent" in blob and secret.encode() not in blob, "store"
