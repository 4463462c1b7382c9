"""A deleted session's name is no key to what it left: alice deletes `shared-name`, bob makes a session of
that name and finds none of her browser tabs, Python variables or spilled outputs, which are closed with
her session. Through the HTTP API of a real `shou serve`, the real sandbox and the real Chromium."""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from ..fixtures.needs import need, need_module
from ..fixtures.serving import Served, start_serve, stream_run
from .conftest import shou_env

need_module("playwright")
from shou.errors import ToolError  # noqa: E402
from shou.tools.builtin._browser_session import find_chromium  # noqa: E402

try:
    find_chromium(None, None)
except ToolError as e:
    need(False, str(e))

ALICE, BOB = "alice-token-0123456789", "bob-token-0123456789ab"
NAME = "shared-name"
HELD = "held-by-alice.txt"


def call(name: str, **arguments: object) -> dict:
    return {"tool_calls": [{"name": name, "arguments": arguments}]}


@pytest.fixture
def served(tmp_path: Path, workspace: Path) -> Iterator[list[Served]]:
    started: list[Served] = []
    yield started
    for s in started:
        s.stop()


def _holders(path: Path) -> list[str]:
    """The pids of processes that have `path` open."""
    found = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            fds = os.listdir(f"/proc/{pid}/fd")
        except OSError:
            continue
        for fd in fds:
            try:
                if os.readlink(f"/proc/{pid}/fd/{fd}").endswith(str(path.name)):
                    found.append(pid)
            except OSError:
                continue
    return found


def _results(c, run_id: str) -> list[str]:
    return [str(m["data"].get("content", "")) for m in stream_run(c, run_id) if m["event"] == "tool_call_finished"]


def test_a_session_name_taken_again_finds_nothing_of_the_deleted_one(serve, served, tmp_path: Path,
                                                                     workspace: Path) -> None:
    (workspace / "alice.html").write_text("<html><body><h1>ALICE-PAGE ?token=alice-browser-secret</h1></body></html>")
    cfg = tmp_path / "config"
    cfg.mkdir(exist_ok=True)
    (cfg / "shou.toml").write_text('tools = ["run_code", "shell", "browser", "read_file"]\n')
    (tmp_path / "tokens").write_text(f"{ALICE} alice\n{BOB} bob\n")
    (tmp_path / "tokens").chmod(0o600)  # a tokens file must be its owner's alone
    keep_open = f"held = open('/workspace/{HELD}', 'w')\nsecret = 'alice-python-secret'"
    turns = [
        call("run_code", language="python", code=keep_open, stateful=True),
        call("browser", action="tab_open", url=(workspace / "alice.html").as_uri()),
        call("shell", command="python3 -c \"print('ALICE-SPILL ' * 20000)\""),
        {"text": "alice done"},
        call("run_code", language="python", code="print(repr(globals().get('secret')))", stateful=True),
        call("browser", action="read"),
    ]
    srv = serve(turns)  # bob's last call, a read of alice's spill, is added once its name is known
    s = start_serve(workspace, shou_env(tmp_path, srv), "--tokens", str(tmp_path / "tokens"))
    served.append(s)
    with s.client(ALICE) as alice, s.client(BOB) as bob:
        run = alice.post("/v1/runs", json={"task": "leave things behind", "session": NAME}).json()
        results = _results(alice, run["run_id"])
        assert "alice.html" in results[1], results
        spills = sorted((workspace / ".shou" / "outputs").iterdir())
        assert spills, results
        assert _holders(workspace / HELD), "alice's interpreter holds her file open"

        assert alice.delete(f"/v1/sessions/{NAME}").status_code == 204
        assert not any(p.exists() for p in spills)  # her spilled outputs went with the session
        deadline = time.monotonic() + 30
        while _holders(workspace / HELD):  # her interpreter was stopped
            assert time.monotonic() < deadline, "alice's interpreter outlived her session"
            time.sleep(0.1)

        spill = spills[0].relative_to(workspace).as_posix()
        srv.extend([call("read_file", path=spill), {"text": "bob done"}])
        run = bob.post("/v1/runs", json={"task": "look around", "session": NAME})
        assert run.status_code == 202, run.text
        results = _results(bob, run.json()["run_id"])
        assert results[0].strip().endswith("None") and "alice-python" not in results[0], results  # no variable
        assert "ALICE" not in results[1] and "alice.html" not in results[1], results  # no tab of hers
        assert "ALICE-SPILL" not in results[2], results
        assert "not an output of this session" in results[2] or "no such file" in results[2].lower(), results
