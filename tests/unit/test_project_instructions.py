"""The pieces of issue 34's project instructions and custom commands: which folders a call touches, the
nested files a run takes (bounded, trusted, deduplicated), and commands' names, templates and trust."""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

import pytest

from shou.errors import UserError
from shou.instructions import instruction_files
from shou.instructions.commands import BUILTIN, expand, invocation, load_commands, validate_name
from shou.instructions.nested import MAX_CHARS, MAX_FILES, NestedInstructions, folder_parts, nested_files
from shou.instructions.touched import literal_prefix, shell_paths, touched_paths
from shou.messages import Message, ToolCall
from shou.trust import TrustStore


def test_the_paths_a_call_names() -> None:
    assert touched_paths("read_file", json.dumps({"path": "src/a.py"})) == ["src/a.py"]
    assert touched_paths("list_files", json.dumps({"pattern": "pkg/sub/**/*.py"})) == ["pkg/sub"]
    assert touched_paths("mcp_fs", json.dumps({"paths": ["a/b.txt", "c/d.txt", 3]})) == ["a/b.txt", "c/d.txt"]
    assert touched_paths("read_file", "not json") == [] and touched_paths("read_file", "[1]") == []
    # the arguments are parsed only when a path's key may be in them, spelled plainly or with JSON escapes
    assert touched_paths("add", json.dumps({"a": 1, "b": 2})) == []
    assert touched_paths("mcp_fs", '{"\\u0070ath": "docs/guide.md"}') == ["docs/guide.md"]
    assert touched_paths("shell", json.dumps({"command": "cat docs/x.md"})) == ["docs/x.md"]
    assert shell_paths("cd lib && pytest tests/unit -k x --rootdir=conf/dir; echo $HOME/x https://a.b/c") == \
        ["lib", "tests/unit", "conf/dir"]
    assert shell_paths("cat 'un closed/x") == ["closed/x"]  # split on spaces when shlex fails
    assert literal_prefix("a/b/c.py") == "a/b/c.py" and literal_prefix("*.py") == ""


def test_the_folders_of_a_path(tmp_path: Path) -> None:
    assert folder_parts(tmp_path, "a/b/c.py") == [("a",), ("a", "b"), ("a", "b", "c.py")]
    assert folder_parts(tmp_path, str(tmp_path / "x" / "y")) == [("x",), ("x", "y")]
    assert folder_parts(tmp_path, "../elsewhere/a") == [] and folder_parts(tmp_path, "/etc/passwd") == []
    assert folder_parts(tmp_path, "a/.git/b") == [("a",)]  # hidden folders are never looked in
    assert folder_parts(tmp_path, "node_modules/x/AGENTS.md") == []


def _calls(*paths: str) -> list[Message]:
    return [Message("assistant", "", tool_calls=[ToolCall(f"c{i}", "read_file", json.dumps({"path": p}))])
            for i, p in enumerate(paths)]


def _trust_all(root: Path, config: Path) -> None:
    for path, data in instruction_files(root).items():
        TrustStore(config).trust(path, data)


def test_nested_files_are_bounded_deduplicated_and_trusted(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SHOU_CONFIG_DIR", str(tmp_path / "config"))
    root = tmp_path / "ws"
    for i in range(MAX_FILES + 2):
        (root / f"d{i}").mkdir(parents=True)
        (root / f"d{i}" / "AGENTS.md").write_text(f"RULE-{i}")
    (root / "d0" / "CLAUDE.md").write_text("RULE-0")  # a copy: sent once
    (root / "d1" / "AGENTS.md").write_text("R" * (MAX_CHARS + 50))
    (root / "link").symlink_to(root / "d2")
    _trust_all(root, tmp_path / "config")
    assert set(nested_files(root)) == {*(root / f"d{i}" / "AGENTS.md" for i in range(MAX_FILES + 2)),
                                       root / "d0" / "CLAUDE.md"}  # the symlinked folder is not walked
    nested = NestedInstructions(root)
    warnings = nested.update(_calls("link/x.py", *(f"d{i}/x.py" for i in range(MAX_FILES + 2))))
    assert list(nested.texts) == [f"d{i}/AGENTS.md" for i in range(MAX_FILES)]
    assert nested.texts["d1/AGENTS.md"].endswith("read d1/AGENTS.md for the rest]")
    assert len(warnings) == 1 and "at most 8" in warnings[0]
    (root / "d0" / "AGENTS.md").write_text("CHANGED")
    again = NestedInstructions(root)
    warnings = again.update(_calls("d0/x.py"))
    assert again.texts == {"d0/CLAUDE.md": "RULE-0"} and "d0/AGENTS.md is new or changed" in warnings[0]


def test_a_cleared_conversation_is_read_again(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SHOU_CONFIG_DIR", str(tmp_path / "config"))
    (tmp_path / "a").mkdir()
    (tmp_path / "a" / "AGENTS.md").write_text("A")
    _trust_all(tmp_path, tmp_path / "config")
    nested = NestedInstructions(tmp_path)
    assert nested.update(_calls("b/x", "c/y")) == [] and nested.texts == {}
    assert nested.update(_calls("a/z")) == [] and nested.texts == {"a/AGENTS.md": "A"}


def test_command_invocations_and_templates() -> None:
    assert invocation("/review src/a.py  now") == ("review", "src/a.py  now")
    assert invocation("/review") == ("review", "")
    assert invocation("/etc/hosts is odd") is None and invocation("hello /x") is None
    assert expand("Review $1 then $2; all: $ARGUMENTS; none: $3.", 'a.py "b c.py"') == \
        'Review a.py then b c.py; all: a.py "b c.py"; none: .'
    assert expand("Fix it.", "quickly") == "Fix it.\n\nARGUMENTS: quickly"
    assert expand("Fix it.", "") == "Fix it."
    assert expand("$1|$2", "ignored", ["x y", "z"]) == "x y|z"
    assert validate_name("help") and validate_name("Bad") and validate_name("a" * 65) and not validate_name("fix-it_2")


def test_every_chat_command_is_a_name_no_custom_command_may_take() -> None:
    from shou.cli.repl import HELP, QUIT_WORDS

    chat = {word[1:] for word in re.findall(r"^  (/[a-z]+)", HELP, re.M)} | \
        {word[1:] for word in QUIT_WORDS if word.startswith("/")}
    assert chat == set(BUILTIN)


def test_commands_are_trusted_by_content_and_workspace_ones_override(tmp_path: Path) -> None:
    ws, user = tmp_path / "ws", tmp_path / "user"
    (ws / ".agents" / "commands").mkdir(parents=True)
    user.mkdir()
    (user / "fix.md").write_text("USER FIX $ARGUMENTS")
    (user / "mine.md").write_text("---\ndescription: mine\nallowed-tools: read_file grep\n---\nMINE")
    (user / "clear.md").write_text("shadows a built-in")
    (user / "bad.md").write_text("---\ndescription: [1, 2]\n---\nbody")
    (ws / ".agents" / "commands" / "fix.md").write_text("WORKSPACE FIX")
    (ws / ".agents" / "commands" / "other.md").write_text("OTHER")
    os.symlink(user / "mine.md", ws / ".agents" / "commands" / "linked.md")
    trusted = {ws.resolve() / ".agents" / "commands" / "fix.md"}
    found = load_commands(ws, user, lambda path, data: path in trusted)
    assert found.get("fix").template == "WORKSPACE FIX" and found.get("fix").source == "workspace"
    assert found.get("mine").allowed_tools == ("read_file", "grep") and found.get("mine").description == "mine"
    for name, why in (("other", "not trusted"), ("clear", "built-in"), ("bad", "must be text"),
                      ("linked", "symlink"), ("nothing", "no command /nothing")):
        with pytest.raises(UserError, match=why):
            found.get(name)
    assert "shou trust" in found.refused["other"]
    statuses = {(c.name, c.source): c.status for c in found.listed}
    assert statuses[("fix", "user")].startswith("overridden") and statuses[("fix", "workspace")] == "valid"
    (ws / ".agents" / "commands" / "fix.md").write_text("CHANGED")  # changed since trusted: refused again
    again = load_commands(ws, user, lambda path, data: path in trusted and data == b"WORKSPACE FIX")
    with pytest.raises(UserError, match="not trusted"):
        again.get("fix")
