"""`shou serve` without `--tokens` still asks every request for a token: every local account can reach a
loopback port, so the port says nothing about who is asking. The server prints a link whose fragment
carries its token; the page takes it from there."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from ..fixtures.serving import Served, start_serve, stream_run
from .conftest import shou_env

TASK = {"task": "read /root/secret with read_file"}


def _start(served: list[Served], workspace: Path, env: dict[str, str], *args: str) -> Served:
    s = start_serve(workspace, env, *args)
    served.append(s)
    return s


def test_no_tokens_means_one_generated_token_and_401_without_it(serve, served, tmp_path: Path,
                                                                workspace: Path) -> None:
    srv = serve([{"text": "hello local"}])
    s = _start(served, workspace, shou_env(tmp_path, srv))
    assert s.link.startswith(s.url + "/#token=") and len(s.token) >= 16, s.log()
    with s.client("") as anon, s.client("x" * 24) as wrong:
        for c in (anon, wrong):
            assert c.post("/v1/runs", json=TASK).status_code == 401
            assert c.get("/v1/runs").status_code == 401
            assert c.get("/v1/sessions").status_code == 401
            assert c.get("/v1/approvals").status_code == 401
            assert c.get("/v1/runs/run_x/events").status_code == 401  # SSE
            assert c.get("/v1/models").status_code == 401
            r = c.post("/v1/chat/completions", json={"model": "shou", "messages": [{"role": "user", "content": "x"}]})
            assert r.status_code == 401 and r.json()["error"]["type"] == "unauthorized"
            assert r.headers["www-authenticate"].startswith("Bearer")
        assert anon.get("/").status_code == 200  # the page itself, which then asks for the token
    assert srv.requests == []  # nothing reached the model
    with s.client() as c:  # the printed token works, as user "local"
        run = c.post("/v1/runs", json={"task": "hi"})
        assert run.status_code == 202
        assert stream_run(c, run.json()["run_id"])[-1]["data"]["answer"] == "hello local"
    assert s.token not in "".join(line for line in s.log().splitlines() if "#token=" not in line)


@pytest.mark.skipif(os.geteuid() != 0 or not shutil.which("runuser") or not shutil.which("curl"),
                    reason="needs root, runuser and curl to ask as another local user")
def test_another_local_user_cannot_use_a_root_run_server(serve, served, tmp_path: Path, workspace: Path) -> None:
    srv = serve([{"text": "should never be asked"}])
    s = _start(served, workspace, shou_env(tmp_path, srv))

    def as_nobody(*curl: str) -> str:
        r = subprocess.run(["runuser", "-u", "nobody", "--", "curl", "-s", "-o", "/dev/null", "-w", "%{http_code}",
                            *curl], capture_output=True, text=True, timeout=60, cwd="/")
        return r.stdout

    assert as_nobody("-H", "Content-Type: application/json", "-d", '{"task": "read_file /etc/shadow"}',
                     s.url + "/v1/runs") == "401"
    assert as_nobody(s.url + "/v1/sessions") == "401"
    assert srv.requests == []
    with s.client() as c:
        assert c.get("/v1/runs").json()["runs"] == []


def test_the_token_from_the_environment_or_a_file(serve, served, tmp_path: Path, workspace: Path) -> None:
    srv = serve([{"text": "a"}, {"text": "b"}])
    s = _start(served, workspace, shou_env(tmp_path, srv, SHOU_SERVE_TOKEN="env-token-0123456789"))
    # the operator's own token is not printed: the link has none, and the page asks for it
    assert s.link and s.token == "" and "env-token-0123456789" not in s.log()
    with s.client("env-token-0123456789") as c:
        assert c.get("/v1/runs").status_code == 200
    s.stop()
    (tmp_path / "token").write_text("file-token-0123456789/+=\n")
    (tmp_path / "token").chmod(0o600)
    s = _start(served, workspace, shou_env(tmp_path, srv), "--token-file", str(tmp_path / "token"))
    assert s.link and s.token == "" and "file-token-0123456789" not in s.log()
    with s.client("file-token-0123456789/+=") as c, s.client("env-token-0123456789") as other:
        assert c.get("/v1/runs").status_code == 200
        assert other.get("/v1/runs").status_code == 401


@pytest.mark.parametrize(("env", "args", "says"), [
    ({"SHOU_SERVE_TOKEN": "short"}, (), "at least 16"),
    ({}, ("--token-file", "missing-file"), "cannot read the token file"),
    ({}, ("--token-file", "tok", "--tokens", "tok"), "not both"),
])
def test_a_bad_token_is_a_clear_error(tmp_path: Path, workspace: Path, env: dict[str, str], args: tuple[str, ...],
                                      says: str) -> None:
    (workspace / "tok").write_text("x" * 20 + " alice\n")
    r = subprocess.run([sys.executable, "-m", "shou", "serve", "--port", "0", *args], cwd=workspace,
                       env=shou_env(tmp_path, None, **env), capture_output=True, text=True, timeout=60)
    assert r.returncode == 2 and says in r.stderr and "Traceback" not in r.stderr, r.stderr
