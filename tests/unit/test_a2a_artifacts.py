"""A2A task artifacts (serve/a2a_tasks.py): only files a run's write_file/edit_file calls wrote, matched by call id
and tool, never what the files API does not serve, and with the server's secrets replaced."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from shou.events import Event, ToolCallFinished, ToolCallStarted
from shou.messages import ToolCall
from shou.redact import Redactor
from shou.serve.a2a_tasks import artifacts_of, written_paths

KEY = "sk-SECRET-artifact-key-4242"


def _call(call_id: str, name: str, ok: bool, **args: str) -> list[tuple[int, Event]]:
    started = ToolCallStarted(run_id="r", step=1, call=ToolCall(call_id, name, json.dumps(args)))
    finished = ToolCallFinished(run_id="r", step=1, call_id=call_id, name=name, content="", is_error=not ok)
    return [(0, started), (0, finished)]


@pytest.mark.parametrize("other", ["calculator", "read_file", "shell"])
def test_a_refused_write_then_another_tool_under_its_call_id_is_no_write(other: str) -> None:
    # A model that reuses a call id (providers do, and the model may choose them): a refused write into
    # .shou/ stayed "started", and the next successful call under that id, of any tool, made it "written".
    rows = [*_call("c1", "write_file", False, path=".shou/serve.db"), *_call("c1", other, True, path="x")]
    assert written_paths(rows) == []
    # an id started again by another tool, finished by a write's success, is not the write's either
    rows = [(0, ToolCallStarted(run_id="r", step=1, call=ToolCall("c2", "write_file", '{"path": ".shou/a"}'))),
            *_call("c2", other, True)]
    assert written_paths(rows) == []


def test_writes_that_succeeded_are_listed_once_in_order() -> None:
    rows = [*_call("a", "write_file", True, path="out/b.txt"), *_call("b", "edit_file", True, path="a.txt"),
            *_call("a", "write_file", True, path="out/b.txt"), *_call("c", "write_file", False, path="c.txt")]
    assert written_paths(rows) == ["out/b.txt", "a.txt"]


def test_artifacts_are_never_state_nor_the_configuration_folder_and_hide_secrets(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    workspace = tmp_path / "ws"
    config = workspace / ".config" / "shou"
    config.mkdir(parents=True)
    monkeypatch.setenv("SHOU_CONFIG_DIR", str(config))
    (config / "approvals.key").write_bytes(b"k" * 32)
    (workspace / ".shou").mkdir()
    (workspace / ".shou" / "serve.db").write_bytes(b"every user's sessions")
    (workspace / ".env").write_text(f"KEY={KEY}\n")
    rows = [*_call("1", "write_file", True, path=".shou/serve.db"),
            *_call("2", "write_file", True, path="./.shou//serve.db"),
            *_call("3", "edit_file", True, path=".config/shou/approvals.key"),
            *_call("4", "edit_file", True, path=".env")]
    got = artifacts_of(rows, workspace, "http://x", Redactor([KEY]))
    assert [a.name for a in got] == [".env"]
    assert got[0].parts[0].raw == b"KEY=[redacted]\n"
