"""Second review of the issue 28 serve/secrets fixes: each test failed on the first fixes."""

from __future__ import annotations

import contextlib
import json
import os
import pty
import select
import stat
import subprocess
import sys
import time
from pathlib import Path

import pytest

from ..fixtures.serving import start_serve, stream_run
from .conftest import shou_env

S_QUOTE = 'Pa"ss\\wd-Split99xyz'  # a password with a quote and a backslash: JSON escapes both
S_UTF8 = "pässwört-Geheim-4242"  # non-ASCII: \u-escaped in JSON with ensure_ascii
S_PLAIN = "PlainSplitSecret-Q1w2E3r4"


def _escaped(v: str) -> str:
    return json.dumps(v)[1:-1]


def _turns(chunk: int) -> list[dict]:
    return [{"text": "t", "chunk_size": chunk,
             "tool_calls": [{"name": "calculator", "arguments": {"expression": f"1 # {S_QUOTE} {S_PLAIN} {S_UTF8}"}}]},
            {"text": "done"}]


@pytest.mark.parametrize("chunk", [3, 4000])
def test_call_argument_deltas_hide_json_escaped_secrets(serve, tmp_path: Path, workspace: Path, chunk: int) -> None:
    """BROKEN: tool_call_delta events (SSE of shou serve) carry env secrets in their JSON-escaped spelling."""
    srv = serve(_turns(chunk))
    env = shou_env(tmp_path, srv, MY_DB_PASSWORD=S_QUOTE, MY_SERVICE_TOKEN=S_PLAIN, OTHER_SECRET=S_UTF8)
    s = start_serve(workspace, env, "--tools", "calculator")
    try:
        with s.client() as c:
            run = c.post("/v1/runs", json={"task": "go"}).json()["run_id"]
            events = stream_run(c, run)
    finally:
        s.stop()
    args = "".join(m["data"].get("arguments") or "" for m in events if m["event"] == "tool_call_delta")
    assert _escaped(S_PLAIN) not in args  # held
    assert _escaped(S_QUOTE) not in args, args  # fails: Pa\"ss\\wd-Split99xyz
    assert _escaped(S_UTF8) not in args, args  # fails: p\u00e4ssw\u00f6rt-Geheim-4242


def test_response_cache_holds_no_json_escaped_secret(serve, shou, tmp_path: Path) -> None:
    """BROKEN: with cache = true, ~/.cache/shou/responses.db keeps the call arguments' escaped secrets."""
    srv = serve(_turns(3))
    r = shou("run", "--json", "--tools", "calculator", "go", server=srv, SHOU_CACHE="true",
             MY_DB_PASSWORD=S_QUOTE, MY_SERVICE_TOKEN=S_PLAIN, OTHER_SECRET=S_UTF8)
    assert r.returncode == 0, r.stderr
    db = tmp_path / ".cache" / "shou" / "responses.db"
    blob = b"".join(p.read_bytes() for p in (db, Path(f"{db}-wal")) if p.exists())
    for v in (S_QUOTE, S_UTF8):
        twice = json.dumps(_escaped(v))[1:-1].encode()  # the arguments text, stored inside JSON
        assert twice not in blob and _escaped(v).encode() not in blob, v


PATH_TOKEN = "PathTok9Xq2Lm4Np7Rt"
CODE_QUERY = "AzCode5Qw12Er34Ty"
FRAG = "FragTok7Hh3Jj9Kk"
PASSPHRASE = "correct horse battery staple"
SHORT_PW = "hunter2pw"


def _mcp_config(tmp_path: Path) -> None:
    cfg = tmp_path / "config"
    cfg.mkdir(exist_ok=True)
    py = json.dumps(sys.executable)
    (cfg / "shou.toml").write_text(f'''
[mcp_servers.pathtok]
url = "http://127.0.0.1:9/api/mcp/s/{PATH_TOKEN}/mcp"
[mcp_servers.azure]
url = "http://127.0.0.1:9/api/mcp?code={CODE_QUERY}"
[mcp_servers.frag]
url = "http://127.0.0.1:9/mcp#{FRAG}"
[mcp_servers.db]
command = {py}
args = ["-c", "import sys; sys.exit(1)", "-p", "{SHORT_PW}"]
env = {{ DB_PASSPHRASE = "{PASSPHRASE}" }}
''')


@pytest.mark.parametrize("secret", [PATH_TOKEN, CODE_QUERY, FRAG, SHORT_PW, PASSPHRASE])
def test_mcp_table_values_are_redacted_everywhere(serve, shou, tmp_path: Path, secret: str) -> None:
    """BROKEN: a token in a url path segment (Zapier-style /s/TOKEN/), `?code=` (Azure Functions), a fragment,
    `-p PASSWORD` and an env name not key-like reach `shou config` and, echoed, the answer / .shou/shou.db.
    (The notice masks the path as `***`, so shou knows it is secret; the redactor does not.)"""
    _mcp_config(tmp_path)
    shown = shou("config")
    srv = serve([{"text": f"echo {secret}"}])
    r = shou("run", "--json", "x", server=srv, timeout=180)
    assert secret not in shown.stdout, "shou config"
    assert secret not in r.stdout, "run --json answer"


def test_token_file_readable_by_others_is_refused(serve, tmp_path: Path, workspace: Path) -> None:
    """WEAK: --token-file (and --tokens) mode 0644 is accepted silently, and the token is still printed."""
    tf = tmp_path / "tok"
    tf.write_text("T0kenFileValue-ABCDEFGH1234\n")
    tf.chmod(0o644)
    srv = serve([{"text": "x"}])
    try:
        s = start_serve(workspace, shou_env(tmp_path, srv), "--token-file", str(tf))
    except RuntimeError as e:
        assert "may be read by group or others" in str(e) and "chmod 600" in str(e), e  # refused, and says why
        assert "T0kenFileValue" not in str(e)
        return
    try:
        assert not s.url, "a world-readable token file was accepted"
    finally:
        s.stop()


@pytest.mark.skipif(os.geteuid() != 0, reason="root + runuser to read as nobody")
def test_chat_history_is_private(serve, tmp_path: Path, workspace: Path) -> None:
    """BROKEN (the 'state files 0600' item): `shou chat` writes ~/.config/shou/history 0644 (prompt_toolkit
    FileHistory, umask), holding every prompt typed."""
    srv = serve([{"text": "ok"}] * 3)
    env = shou_env(tmp_path, srv)
    pid, fd = pty.fork()
    if pid == 0:
        os.chdir(workspace)
        os.execvpe(sys.executable, [sys.executable, "-m", "shou", "chat"], env)

    def drain(t: float) -> None:
        end = time.time() + t
        while time.time() < end:
            if select.select([fd], [], [], 0.2)[0]:
                try:
                    os.read(fd, 4096)
                except OSError:
                    return

    drain(8)
    os.write(fd, b"my password is hunter2-SECRET-PASTE\r")
    drain(6)
    os.write(fd, b"/exit\r")
    drain(3)
    os.kill(pid, 9)
    os.waitpid(pid, 0)
    hist = tmp_path / "config" / "history"
    assert hist.exists()
    assert stat.S_IMODE(hist.stat().st_mode) & 0o077 == 0, oct(hist.stat().st_mode)
    assert stat.S_IMODE(hist.parent.stat().st_mode) & 0o077 == 0, oct(hist.parent.stat().st_mode)


@pytest.mark.skipif(os.geteuid() != 0, reason="root + runuser to act as nobody")
def test_a_foreign_dot_shou_is_refused(serve, tmp_path: Path) -> None:
    """BROKEN: in a workspace another local user can write (sticky/group-shared dir), that user pre-creates
    `.shou/` (theirs, 0777) and `.shou/shou.db-wal`, holds it open, and reads root's WAL after the run
    (SQLite re-owns the inode to root 0600, but an fd opened before stays readable)."""
    import tempfile

    base = Path(tempfile.mkdtemp(prefix="rt-foreign-", dir="/tmp"))
    base.chmod(0o755)
    workspace = base / "ws"
    workspace.mkdir()
    workspace.chmod(0o1777)
    wal = workspace / ".shou" / "shou.db-wal"
    subprocess.run(["runuser", "-u", "nobody", "--", "bash", "-c",
                    f"umask 000; mkdir -p {workspace}/.shou; touch {wal}"], check=True)
    spy = subprocess.Popen(["runuser", "-u", "nobody", "--", "bash", "-c",
                            f"exec 3<{wal}; echo open; sleep 20; strings <&3 | grep -c ROOT-SECRET"],
                           stdout=subprocess.PIPE, text=True)
    assert spy.stdout is not None and spy.stdout.readline().strip() == "open"  # it holds the WAL open now
    srv = serve([{"tool_calls": [{"name": "shell", "arguments": {
        "command": "for i in $(seq 1 3000); do echo ROOT-SECRET-$i; done"}}]}, {"text": "done"}])
    r = subprocess.run([sys.executable, "-m", "shou", "run", "--tools", "shell", "go"], cwd=workspace,
                       env=shou_env(tmp_path, srv), capture_output=True, text=True, timeout=120)
    seen = spy.communicate(timeout=60)[0].strip()
    if r.returncode != 0:  # refused, saying why, and nothing of the run written
        assert "belongs to another user" in r.stderr and "Traceback" not in r.stderr, r.stderr
        assert sorted(p.name for p in wal.parent.iterdir()) == ["shou.db-wal"] and wal.stat().st_size == 0
        return
    assert seen in ("", "0"), f"nobody read {seen} lines of root's run from the WAL"


def test_an_mcp_output_schema_cannot_freeze_the_server(serve, tmp_path: Path, workspace: Path) -> None:
    """BROKEN: an MCP tool's outputSchema `{"items": {"type": "array", "uniqueItems": true}}` and a result of
    9000 distinct small objects (~80 KB, far under the 5 MB cap) is validated by jsonschema on the event loop
    (quadratic uniqueItems): every request to `shou serve` (even /healthz) waits ~70 s, past any tool timeout."""
    import threading

    import httpx

    cfg = tmp_path / "config"
    cfg.mkdir(exist_ok=True)
    server = Path(__file__).parent.parent / "fixtures" / "uniq_items_mcp.py"
    (cfg / "shou.toml").write_text(f'[mcp_servers.u]\ncommand = {json.dumps(sys.executable)}\n'
                                   f'args = [{json.dumps(str(server))}, "9000"]\n')
    srv = serve([{"tool_calls": [{"name": "u__get", "arguments": {}}]}, {"text": "done"}])
    s = start_serve(workspace, shou_env(tmp_path, srv))
    worst = [0.0]
    done = threading.Event()

    def probe() -> None:
        while not done.is_set():
            t = time.monotonic()
            with contextlib.suppress(httpx.HTTPError):
                httpx.get(s.url + "/healthz", timeout=300)
            worst[0] = max(worst[0], time.monotonic() - t)
            time.sleep(0.2)

    try:
        with s.client(timeout=600) as c:
            run = c.post("/v1/runs", json={"task": "go"}).json()["run_id"]
            threading.Thread(target=probe, daemon=True).start()
            stream_run(c, run)
    finally:
        done.set()
        s.stop()
    assert worst[0] < 10, f"the server did not answer /healthz for {worst[0]:.0f} s"
