"""The approval prompt and `shou approvals` show bidi controls, zero-width characters and line separators
escaped, so a command cannot read as another (issue 28 red team)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from shou.cli.render import json_text, printable

HIDDEN = ["\u202e", "\u202a", "\u202d", "\u2066", "\u2069", "\u200b", "\u200d", "\u200f", "\ufeff", "\u2028",
          "\u2029"]


@pytest.mark.parametrize("ch", HIDDEN)
def test_hidden_characters_are_shown_escaped(ch: str) -> None:
    shown = printable(f"rm -rf /{ch}txt.ssl")
    assert ch not in shown and f"\\u{ord(ch):04x}" in shown
    listed = json_text({"command": f"a{ch}b"})
    assert ch not in listed and json.loads(listed)["command"] == f"a{ch}b"


def test_shou_approvals_lists_them_escaped(serve, shou, tmp_path: Path, workspace: Path) -> None:
    cfg = tmp_path / "config"
    cfg.mkdir()
    (cfg / "shou.toml").write_text('[permissions]\nask = ["shell"]\n')
    line = "echo safe \u202e; rm -rf x \u2066\u200b"
    srv = serve([{"tool_calls": [{"name": "shell", "arguments": {"command": line}, "id": "c1"}]}, {"text": "ok"}])
    env = {"SHOU_CONFIG_DIR": str(cfg)}
    r = shou("run", "go", "--approvals", "defer", "-s", "hid", server=srv, **env)
    assert r.returncode == 1 and "waiting_approval" in r.stderr, r.stderr
    for out in (shou("approvals", **env).stdout, shou("approvals", "--json", **env).stdout, r.stderr):
        assert not any(ch in out for ch in HIDDEN), out
    assert "\\u202e" in shou("approvals", **env).stdout
