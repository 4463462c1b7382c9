"""Deny and ask rules for `shell` see every program a line runs, read with a bash parser, and a program
only the running shell knows meets every such rule (issue 28: `deny shell(rm *)` missed these)."""

from __future__ import annotations

from pathlib import Path

import pytest

from shou.permissions import Policy

from .conftest import tool_messages

DENY = Policy(deny=["shell(rm *)"])
# From the issue, then variants of each way through.
THROUGH = [
    "exec -c rm -r x", "exec -a name rm x", "bash <<< 'rm -r x'", "sh <<< \"rm -r x\"", "${x:-rm} -r x",
    "a=rm; $a -r x", '"$(printf rm)" -r x', "`printf rm` -r x", "$(echo rm) x", "find . -name '*.o' -exec rm {} \\;",
    "find . -execdir rm -f {} +", "ls | xargs rm", "xargs -0 -n 1 rm -f < list", "bash -c 'true; rm -r x'",
    "env -i PATH=/bin rm x", "nice -n 5 ionice -c 3 rm x", "timeout -s KILL 5 rm x", "sudo -u root rm x",
    "echo ok && (cd /tmp; rm x)", "cat <(rm x)", "echo $(rm x)", "x=$(rm -r y) true", "eval 'rm x'",
    "eval \"$cmd\"", "trap 'rm x' EXIT", "bash <<'EOF'\nrm -r x\nEOF", "echo 'rm x' | sh", "sh ./cleanup.sh",
    "source ./cleanup.sh", ". ./cleanup.sh", "/bin/r? x", "$'\\x72m' -r x", "r''m x", "\\rm x", "\"rm\" x",
    "f() { rm \"$@\"; }; f x", "case a in a) rm x;; esac", "command -p rm x", "busybox rm x",
    "su bob -c 'rm x'", "bash -xc 'r\"\"m -r x'", "time rm x", "if true; then rm -r x; fi", "! rm x",
]
HARMLESS = ["ls -la", "git status", "echo rm is a word", "grep -r 'rm -rf' .", "printf '%s\\n' rm",
            "cat README.md | wc -l", "make test", "python -m pytest -q", "echo $HOME", "find . -name '*.py'",
            "[ -f x ] && echo hi", "for i in $(seq 3); do echo $i; done", "python3 - <<'EOF'\nprint(1)\nEOF",
            "bash -c 'ls | wc -l'", "diff <(sort a) <(sort b)", "trap 'echo bye' EXIT", "ls [ab]*"]


@pytest.mark.parametrize("line", THROUGH)
def test_a_deny_rule_sees_through_the_shell(line: str) -> None:
    assert DENY.decide("shell", {"command": line}).outcome == "deny", line


@pytest.mark.parametrize("line", HARMLESS)
def test_lines_that_run_no_rm_are_not_denied(line: str) -> None:
    assert DENY.decide("shell", {"command": line}).outcome == "allow", line


def test_an_opaque_program_asks_where_there_is_an_ask_rule_and_says_why() -> None:
    ask = Policy(ask=["shell(rm *)"])
    assert ask.decide("shell", {"command": "a=rm; $a x"}).outcome == "ask"
    assert ask.decide("shell", {"command": "ls $dir"}).outcome == "allow"  # the program is known: ls
    why = DENY.decide("shell", {"command": "${x:-rm} y"}).why
    assert "deny = shell(rm *)" in why and "${x:-rm}" in why and "cannot see" in why
    assert Policy().decide("shell", {"command": "$a x"}).outcome == "allow"  # no rule: the sandbox decides


def test_a_denied_line_is_not_run_through_the_cli(serve, shou, workspace: Path, tmp_path: Path) -> None:
    (tmp_path / "config").mkdir()
    (tmp_path / "config" / "shou.toml").write_text('[permissions]\ndeny = ["shell(rm *)"]\n')
    (workspace / "victim.txt").write_text("keep me")
    lines = ["a=rm; $a victim.txt", "bash <<< 'rm victim.txt'", "exec -c rm victim.txt", '"$(printf rm)" victim.txt']
    turns: list[dict] = []
    for n, line in enumerate(lines):
        turns += [{"tool_calls": [{"name": "shell", "arguments": {"command": line}, "id": f"c{n}"}]}, {"text": "no"}]
    srv = serve(turns)
    for n in range(len(lines)):
        r = shou("run", "clean up", "--yes", server=srv)
        assert r.returncode == 0, r.stderr
        assert "denied by policy" in tool_messages(srv.requests[2 * n + 1])[0]["content"], lines[n]
    assert (workspace / "victim.txt").read_text() == "keep me"
