"""`shou approve` / `shou deny` never pick one of several waiting calls that share an id (issue 28, item 7)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest


def shell(command: str, call_id: str = "call_1") -> dict:
    return {"tool_calls": [{"name": "shell", "arguments": {"command": command}, "id": call_id}]}


@pytest.fixture
def ask_shell(tmp_path: Path) -> Path:
    cfg = tmp_path / "config"
    cfg.mkdir()
    (cfg / "shou.toml").write_text('[permissions]\nask = ["shell"]\n')
    return cfg


@pytest.fixture
def two_waiting(serve, shou, ask_shell: Path):
    """Sessions `mine` and `other` both stopped waiting on a call with the id `call_1`."""
    srv = serve([shell("echo mine > mine.txt"), shell("echo owned > pwned.txt"), {"text": "done"}, {"text": "done"}])
    env = {"SHOU_CONFIG_DIR": str(ask_shell)}
    for name, prompt in (("mine", "mine"), ("other", "other")):
        r = shou("run", prompt, "--approvals", "defer", "-s", name, server=srv, **env)
        assert r.returncode == 1 and "waiting_approval" in r.stderr, r.stderr
    listed = json.loads(shou("approvals", "--json", **env).stdout)
    assert sorted((a["session"], a["call_id"]) for a in listed) == [("mine", "call_1"), ("other", "call_1")]
    return srv, env


@pytest.mark.parametrize("verb", ["approve", "deny"])
def test_an_id_two_sessions_wait_on_is_refused_with_the_candidates(shou, workspace: Path, two_waiting, verb) -> None:
    srv, env = two_waiting
    r = shou(verb, "call_1", **env)
    assert r.returncode == 2, r.stdout
    assert "mine:call_1" in r.stderr and "other:call_1" in r.stderr and "--session" in r.stderr
    assert "Traceback" not in r.stderr
    # nothing was decided: both still wait, and resuming the other session runs nothing
    assert len(json.loads(shou("approvals", "--json", **env).stdout)) == 2
    r = shou("resume", "other", server=srv, **env)
    assert not (workspace / "pwned.txt").exists()


def test_session_option_and_prefix_pick_the_named_call_and_show_it_in_full(serve, shou, workspace: Path,
                                                                          two_waiting) -> None:
    srv, env = two_waiting
    ok = shou("approve", "call_1", "--session", "mine", **env)
    assert ok.returncode == 0, ok.stderr
    # the confirmation shows the session, the run and the whole call
    assert "session mine" in ok.stderr and "run " in ok.stderr and "echo mine > mine.txt" in ok.stderr
    assert "shell" in ok.stderr and "pwned" not in ok.stderr
    denied = shou("deny", "other:call_1", "--reason", "not mine", **env)
    assert denied.returncode == 0, denied.stderr
    assert "session other" in denied.stderr and "echo owned > pwned.txt" in denied.stderr
    assert json.loads(shou("approvals", "--json", **env).stdout) == []
    assert shou("resume", "other", server=srv, **env).returncode == 0
    assert shou("resume", "mine", server=srv, **env).returncode == 0
    assert not (workspace / "pwned.txt").exists()
    assert (workspace / "mine.txt").read_text() == "mine\n"


def test_a_wrong_session_is_a_clear_error(shou, two_waiting) -> None:
    _, env = two_waiting
    r = shou("approve", "call_1", "--session", "nobody", **env)
    assert r.returncode == 2 and "in session 'nobody'" in r.stderr and "Traceback" not in r.stderr
    r = shou("approve", "nobody:call_1", **env)
    assert r.returncode == 2 and "no call" in r.stderr


def test_on_a_terminal_the_call_is_decided_only_after_a_yes(tmp_path: Path, workspace: Path, two_waiting) -> None:
    import os
    import pty
    import subprocess
    import sys

    from .conftest import shou_env

    _, env = two_waiting

    def answer(text: str) -> subprocess.CompletedProcess[str]:
        leader, follower = pty.openpty()
        try:
            os.write(leader, text.encode())  # typed ahead: read when the prompt asks
            return subprocess.run([sys.executable, "-m", "shou", "approve", "mine:call_1"], cwd=workspace,
                                  env=shou_env(tmp_path, None, **env), stdin=follower, capture_output=True,
                                  text=True, timeout=60)
        finally:
            os.close(leader)
            os.close(follower)

    no = answer("n\n")
    assert no.returncode == 2 and "approve this call?" in no.stderr and "nothing decided" in no.stderr
    assert "session mine" in no.stderr and "echo mine > mine.txt" in no.stderr
    yes = answer("y\n")
    assert yes.returncode == 0 and "approved call_1" in yes.stdout, yes.stderr
