"""examples/java/ShouClient.java (JDK only) against a live `shou serve` running the scripted model."""

from __future__ import annotations

import shutil
import subprocess
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import httpx
import pytest

from ..fixtures.needs import need
from ..fixtures.serving import Served, start_serve
from .conftest import shou_env

need(all(shutil.which(n) for n in ("java", "javac")), "a JDK (.ci/install: default-jdk-headless)")

SOURCE = Path(__file__).parents[2] / "examples" / "java" / "ShouClient.java"
TOKEN = "s3cret-java-token"
TASK = 'What is "6*7"? \\ ü'  # quotes, a backslash and non-ASCII: the client's JSON escaping


def calc(expression: str) -> dict:
    return {"tool_calls": [{"name": "calculator", "arguments": {"expression": expression}}]}


@pytest.fixture(scope="module")
def classes(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("java-classes")
    r = subprocess.run(["javac", "-d", str(out), str(SOURCE)],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, f"javac failed:\n{r.stdout}{r.stderr}"
    return out


def java(classes: Path, env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    # Java decodes its arguments with the locale's charset: a UTF-8 one, for the task's "ü"
    return subprocess.run(["java", "-cp", str(classes), "ShouClient", *args], env={**env, "LC_ALL": "C.UTF-8"},
                          capture_output=True, text=True, encoding="utf-8", timeout=90)


@pytest.fixture
def served(tmp_path: Path, workspace: Path, serve) -> Iterator[Served]:
    # The answer comes after 2 s, so the client is listening when its text streams; the pause halfway through
    # it lets the first fragments out as text_delta before the complete model_response.
    srv = serve([calc("6*7"), {"text": "6*7 = 42", "chunk_size": 2, "delay": 2, "stall": 1}])
    tokens = tmp_path / "tokens"
    tokens.write_text(f"# token user\n{TOKEN} alice\n")
    tokens.chmod(0o600)  # a tokens file must be its owner's alone
    s = start_serve(workspace, shou_env(tmp_path, srv), "--tokens", str(tokens))
    yield s
    s.stop()


def test_run_streams_the_tool_call_and_the_answer(classes: Path, served: Served, tmp_path: Path) -> None:
    r = java(classes, shou_env(tmp_path, None), "--url", served.url, "--token", TOKEN, "--session", "java", TASK)
    assert r.returncode == 0, f"stdout:\n{r.stdout}\nstderr:\n{r.stderr}\nserver:\n{served.log()}"
    lines = r.stdout.splitlines()
    assert '[tool_call_started] calculator {"expression": "6*7"}' in lines
    assert "[tool_call_finished] calculator -> 42" in lines  # the real calculator ran
    assert "6*7 = 42" in lines  # streamed: text_delta fragments (plus the rest from model_response), no [tag]
    assert "answer: 6*7 = 42" in lines
    assert lines[-1] == "status: completed"
    assert sum(line.startswith("[run_started] ") for line in lines) == 1
    with served.client(TOKEN) as c:
        [run] = c.get("/v1/runs").json()["runs"]
    assert run["task"] == TASK and run["session"] == "java" and run["status"] == "completed"


def test_wrong_token_is_refused_with_the_servers_message(classes: Path, served: Served, tmp_path: Path) -> None:
    env = shou_env(tmp_path, None, SHOU_URL=served.url, SHOU_TOKEN="not-the-token")  # URL and token from env
    r = java(classes, env, TASK)
    with served.client("not-the-token") as c:
        refused = c.post("/v1/runs", json={"task": TASK})
    assert refused.status_code == 401
    message = refused.json()["error"]["message"]
    assert r.returncode == 2, f"stdout:\n{r.stdout}\nstderr:\n{r.stderr}"
    assert f"HTTP 401: {message}" in r.stderr
    assert r.stdout == ""
    with served.client(TOKEN) as c:
        assert c.get("/v1/runs").json()["runs"] == []


class DroppingProxy:
    """An HTTP proxy in front of a server that cuts the first event stream right after its first event with an
    `id:`, and records the `Last-Event-ID` every event-stream request came with."""

    def __init__(self, upstream: str) -> None:
        self.last_event_ids: list[str | None] = []
        self.cut_after: str | None = None
        proxy = self

        class Handler(BaseHTTPRequestHandler):  # HTTP/1.0: the end of a response is the end of its connection
            def log_message(self, *args: object) -> None:
                pass

            def forwarded(self) -> dict[str, str]:
                return {k: v for k, v in self.headers.items() if k.lower() in
                        ("authorization", "accept", "content-type", "last-event-id")}

            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                r = httpx.post(upstream + self.path, content=body, headers=self.forwarded(), timeout=30)
                self.send_response(r.status_code)
                self.send_header("Content-Type", r.headers.get("content-type", "application/json"))
                self.send_header("Content-Length", str(len(r.content)))
                self.end_headers()
                self.wfile.write(r.content)

            def do_GET(self) -> None:
                proxy.last_event_ids.append(self.headers.get("Last-Event-ID"))
                first = len(proxy.last_event_ids) == 1
                with httpx.stream("GET", upstream + self.path, headers=self.forwarded(), timeout=60) as r:
                    self.send_response(r.status_code)
                    self.send_header("Content-Type", r.headers.get("content-type", "text/event-stream"))
                    self.end_headers()
                    event_id = None
                    for line in r.iter_lines():
                        self.wfile.write(line.encode() + b"\n")
                        self.wfile.flush()
                        if line.startswith("id:"):
                            event_id = line[3:].strip()
                        elif not line and first and event_id is not None:
                            proxy.cut_after = event_id
                            return  # drop the connection mid-run

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def test_a_dropped_stream_resumes_from_the_last_event_id(classes: Path, served: Served, tmp_path: Path) -> None:
    proxy = DroppingProxy(served.url)
    try:
        r = java(classes, shou_env(tmp_path, None), "--url", proxy.url, "--token", TOKEN, TASK)
    finally:
        proxy.close()
    assert r.returncode == 0, f"stdout:\n{r.stdout}\nstderr:\n{r.stderr}\nserver:\n{served.log()}"
    assert proxy.cut_after is not None
    assert proxy.last_event_ids == [None, proxy.cut_after]  # one reconnection, from the last id it saw
    assert f"reconnecting in 500 ms after event {proxy.cut_after}" in r.stderr
    lines = r.stdout.splitlines()
    for once in ("[run_started] ", "[tool_call_started] calculator ", "[tool_call_finished] calculator -> 42"):
        assert sum(line.startswith(once) for line in lines) == 1, (once, r.stdout)  # none lost, none repeated
    assert lines[-2:] == ["answer: 6*7 = 42", "status: completed"]
