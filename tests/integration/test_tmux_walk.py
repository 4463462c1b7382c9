"""A newcomer's walk in a real terminal (tmux): the README's quick-start commands in a fresh clone, then
`shou chat` continuing the session they made, `/compact`, `/quit`, and `shou show` reading it back."""

from __future__ import annotations

import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from ..fixtures.needs import need
from ..fixtures.terminal import Tmux
from .conftest import shou_env

ROOT = Path(__file__).resolve().parents[2]


def readme_commands() -> list[str]:
    """The shell lines of the README's first code block (the quick start)."""
    text = (ROOT / "README.md").read_text()
    block = re.search(r"```bash\n(.*?)```", text, re.S)
    assert block, "the README has no bash block"
    return [line for line in block.group(1).splitlines() if line.strip()]


@pytest.fixture
def clone(tmp_path: Path) -> Path:
    need(shutil.which("tmux") is not None, "tmux is installed (.ci/install)")
    need((ROOT / ".git").exists(), "the tests run from a git checkout")
    target = tmp_path / "clone"
    subprocess.run(["git", "clone", "-q", str(ROOT), str(target)], check=True)
    return target


def test_quick_start_then_chat_in_a_terminal(serve, clone: Path, tmp_path: Path) -> None:
    [quick] = readme_commands()
    install, run = (part.strip() for part in quick.split("&&"))
    assert install.startswith("pip install -e '.[local]'")  # CI installed that (and more) from this checkout
    assert run.startswith("shou run ")
    env = shou_env(tmp_path, None, TERM="xterm-256color", PROMPT_TOOLKIT_NO_CPR="1")
    env["PATH"] = f"{Path(sys.executable).parent}:{env.get('PATH', '/usr/bin:/bin')}"
    term = Tmux(clone, env)
    try:
        # 1. The README's command, as typed: the offline model answers (no key, no network).
        term.type(run.replace("shou ", f"{shlex.quote(sys.executable)} -m shou ", 1))
        screen = term.wait_for(r"(completed|max_steps|error) · session \S+ ·", timeout=300)
        assert "5535" in screen, screen
        session = re.search(r"· session (\S+) ·", screen).group(1)  # type: ignore[union-attr]
        # 2. The same session in chat, against a scripted model this time.
        srv = serve([{"text": "We computed 123 * 45 = 5535 before."},
                     {"text": "Summary: the user asked for 123 * 45; it is 5535."}])
        mark = len(term.screen())
        term.type(f"SHOU_BASE_URL={srv.base_url} SHOU_MODEL=scripted-test SHOU_API_KEY=k "
                  f"{shlex.quote(sys.executable)} -m shou chat -c")
        term.wait_for(rf"session {re.escape(session)}", after=mark)
        term.wait_for("›", after=mark)
        term.type("What did we compute?")
        term.wait_for(r"We computed 123 \* 45 = 5535 before\.", after=mark)
        term.wait_for(r"completed · session", after=mark)
        term.type("/compact")
        term.wait_for(r"compacted: \d+ → \d+ tokens|nothing to compact yet", after=mark)
        term.type("/quit")
        term.wait_for(r"bye", after=mark)  # typed earlier, the next line can reach the chat, not the shell
        term.type("echo walk-$((40 + 2))")
        term.wait_for(r"walk-42", after=mark, timeout=20)
        # 3. The whole conversation, read back.
        mark = len(term.screen())
        term.type(f"{shlex.quote(sys.executable)} -m shou show {session} | cat")
        shown = term.wait_for(r"We computed 123 \* 45", after=mark)
        assert "What is 123 * 45?" in shown[mark:] and "What did we compute?" in shown[mark:]
    finally:
        term.close()
    history = [m["content"] for m in srv.requests[0]["messages"] if m["role"] == "user"]
    assert history[0] == "What is 123 * 45?" and history[-1] == "What did we compute?"


def test_the_approval_prompt_in_a_terminal(serve, tmp_path: Path, workspace: Path) -> None:
    """`shell` under ask: answered `y` (runs once), then `a` (always: a rule in the user's shou.toml), after
    which the same command runs without a question."""
    need(shutil.which("tmux") is not None, "tmux is installed (.ci/install)")
    cfg = tmp_path / "config"
    cfg.mkdir()
    (cfg / "shou.toml").write_text('# my settings\nmax_steps = 12\n\n[permissions]\nask = ["shell"]\n')
    srv = serve([{"tool_calls": [{"name": "shell", "arguments": {"command": "echo one >> log.txt"}}]},
                 {"text": "first done"},
                 {"tool_calls": [{"name": "shell", "arguments": {"command": "echo two >> log.txt"}}]},
                 {"text": "second done"},
                 {"tool_calls": [{"name": "shell", "arguments": {"command": "echo two >> log.txt"}}]},
                 {"text": "third done"}])
    env = shou_env(tmp_path, srv, TERM="xterm-256color", SHOU_CONFIG_DIR=str(cfg))
    env["PATH"] = f"{Path(sys.executable).parent}:{env.get('PATH', '/usr/bin:/bin')}"
    term = Tmux(workspace, env)
    run = f"{shlex.quote(sys.executable)} -m shou run"
    try:
        term.type(f"{run} 'log one'")
        term.wait_for(r"shou wants to run shell")
        assert "command: echo one >> log.txt" in term.screen()
        term.wait_for(r"allow\? \[y/n/s/a\]")
        term.type("y")
        term.wait_for("first done")
        mark = len(term.screen())
        term.type(f"{run} 'log two'")
        term.wait_for(r"allow\? \[y/n/s/a\]", after=mark)
        term.type("a")
        term.wait_for("second done", after=mark)
        mark = len(term.screen())
        term.type(f"{run} 'log two again'")
        term.wait_for("third done", after=mark)
        assert "shou wants to run" not in term.screen()[mark:]  # the rule now allows it
    finally:
        term.close()
    assert (workspace / "log.txt").read_text() == "one\ntwo\ntwo\n"
    config = (cfg / "shou.toml").read_text()
    assert config.startswith("# my settings\nmax_steps = 12") and 'shell(echo two >> log.txt)' in config
