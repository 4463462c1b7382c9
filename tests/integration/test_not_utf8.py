"""Text no UTF-8 encodes (a lone surrogate: a file name's undecodable bytes as `os.listdir` gives them, a
command's output, a provider's JSON `"\\ud800"`) never ends a run: it is logged and sent on with U+FFFD, on
both stores, and a checkpoint keeps a file name exactly, so undo puts back the very file."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest

from shou import Agent, tool
from shou.events import TextDelta, ToolCallFinished
from shou.models.openai_compat import OpenAICompatible
from shou.store.sqlite import SQLiteStore

from .conftest import tool_messages

UNDECODABLE = b"caf\xe9 \xff".decode("utf-8", "surrogateescape")  # Latin-1 bytes, as `os.listdir` gives them
SHOWN = "caf\ufffd \ufffd"
FILE_NAME = os.fsdecode(b"r\xe9sum\xe9.txt")


@tool
def listing() -> str:
    """List the folder."""
    return "files: " + UNDECODABLE


@pytest.fixture(params=["sqlite", "postgres"])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Any:
    if request.param == "sqlite":
        s: Any = SQLiteStore(tmp_path / "shou.db")
    else:
        from shou.store.postgres import PostgresStore

        s = PostgresStore(request.getfixturevalue("postgres_url"))
    yield s
    s.close()


async def test_a_tool_result_not_utf8_is_logged_and_sent_on_repaired(serve, store, workspace: Path) -> None:
    srv = serve([{"tool_calls": [{"name": "listing", "arguments": {}}]}, {"text": "done"}])
    agent = Agent(OpenAICompatible("m", base_url=srv.base_url), [listing], workspace=workspace, store=store)
    r = await agent.arun("list " + UNDECODABLE)
    assert (r.status, r.error, r.answer) == ("completed", None, "done")
    [finished] = [e for e in store.events(r.session) if isinstance(e, ToolCallFinished)]
    assert finished.content == "files: " + SHOWN and not finished.is_error  # the result is in the log
    assert tool_messages(srv.requests[1])[0]["content"] == "files: " + SHOWN  # and the model saw it
    assert srv.requests[0]["messages"][-1]["content"] == "list " + SHOWN


@pytest.mark.parametrize("stream", [False, True])
async def test_a_provider_reply_with_a_lone_surrogate_escape(serve, store, workspace: Path, stream: bool) -> None:
    # json.dumps writes "\ud800" as that escape: valid JSON text, which orjson refuses and json takes as is
    srv = serve([{"text": "odd \ud800 \udcff end"}])
    agent = Agent(OpenAICompatible("m", base_url=srv.base_url, stream=stream), [], workspace=workspace,
                  store=store)
    seen = [e async for e in agent.stream("hi")]
    [done] = [e for e in seen if e.type == "run_finished"]
    assert (done.status, done.answer) == ("completed", "odd \ufffd \ufffd end")
    texts = "".join(e.text for e in seen if isinstance(e, TextDelta))
    assert texts == "odd \ufffd \ufffd end"  # streamed in fragments, or at once
    [session] = [e.session for e in seen if e.type == "run_started"]
    assert [e.answer for e in store.events(session) if e.type == "run_finished"] == ["odd \ufffd \ufffd end"]


def test_a_command_changing_a_file_whose_name_is_not_utf8_is_logged_and_undone(serve, shou,
                                                                               workspace: Path) -> None:
    name = os.fsencode(FILE_NAME)
    (workspace / FILE_NAME).write_bytes(b"before\n")
    # and one made with a name that would set the terminal's title, were it printed as it is
    command = "ls; echo after > r*sum*.txt; echo x > \"$(printf 'e\\033]0;owned\\007.txt')\""
    srv = serve([{"tool_calls": [{"name": "shell", "arguments": {"command": command}}]}, {"text": "changed"}])
    r = shou("run", "change the file", "--session", "s1", server=srv, PYTHONIOENCODING="utf-8:strict")
    assert r.returncode == 0 and "Traceback" not in r.stderr, r.stderr
    assert (workspace / FILE_NAME).read_bytes() == b"after\n"
    assert "r\ufffdsum\ufffd.txt" in tool_messages(srv.requests[1])[0]["content"]
    u = shou("undo", PYTHONIOENCODING="utf-8:strict")  # a terminal that takes UTF-8 only
    assert u.returncode == 0 and "restored r\ufffdsum\ufffd.txt" in u.stdout, u.stdout + u.stderr
    assert "removed e\ufffd]0;owned\ufffd.txt" in u.stdout and "\x1b" not in u.stdout
    assert sorted(n for n in os.listdir(os.fsencode(workspace)) if not n.startswith(b".")) == [name]
    assert (workspace / FILE_NAME).read_bytes() == b"before\n"  # the very file, by its very name


@pytest.mark.parametrize("call", [{"name": "shell", "arguments": {"command": "echo \udcff > out.txt"}},
                                  {"name": "write_file", "arguments": {"path": "out.txt", "content": "x\ud800"}},
                                  {"name": "write_file", "arguments": {"path": "out\udcff.txt", "content": "x"}}])
def test_arguments_with_a_lone_surrogate_escape_are_refused_not_run(serve, shou, workspace: Path,
                                                                    call: dict[str, Any]) -> None:
    """The escape is ASCII on the wire and inside the arguments' JSON text: it became a lone surrogate only
    as the arguments were parsed, and crashed approvals (`internal error`) or the tool itself."""
    srv = serve([{"tool_calls": [call]}, {"text": "done"}])
    r = shou("run", "write it", "-y", server=srv)
    assert r.returncode == 0 and "Traceback" not in r.stderr and "internal error" not in r.stderr, r.stderr
    [result] = tool_messages(srv.requests[1])
    assert "lone surrogate escape" in result["content"]
    assert sorted(p.name for p in workspace.iterdir() if p.name != ".shou") == []  # nothing was run


@tool
def big_listing() -> str:
    """List a big folder."""
    return "\n".join(f"report-{UNDECODABLE}-{i:04d}.txt" for i in range(3000))


async def test_a_big_result_not_utf8_is_capped_and_spilled(serve, workspace: Path, tmp_path: Path) -> None:
    srv = serve([{"tool_calls": [{"name": "big_listing", "arguments": {}}]}, {"text": "done"}])
    store = SQLiteStore(tmp_path / "shou.db")
    agent = Agent(OpenAICompatible("m", base_url=srv.base_url), [big_listing], workspace=workspace, store=store)
    r = await agent.arun("list")
    assert (r.status, r.error) == ("completed", None)
    [finished] = [e for e in store.events(r.session) if isinstance(e, ToolCallFinished)]
    assert not finished.is_error and f"report-{SHOWN}-0000.txt" in finished.content and "omitted" in finished.content
    [spill] = (workspace / ".shou" / "outputs").iterdir()
    assert f"report-{SHOWN}-2999.txt" in spill.read_text(encoding="utf-8")


def test_a_workspace_whose_path_is_not_utf8(serve, shou, tmp_path: Path) -> None:
    ws = Path(os.fsdecode(os.path.join(os.fsencode(tmp_path), b"ws-\xff")))
    ws.mkdir()
    srv = serve([{"text": "done"}])
    assert shou("run", "hi", "-w", str(ws), server=srv).returncode == 0
    for command in (["sessions"], ["show"], ["trace"], ["usage"], ["undo"], ["diff"], ["approvals"]):
        r = shou(*command, "-w", str(ws), PYTHONIOENCODING="utf-8:strict")  # they open the log read-only
        assert r.returncode in (0, 2) and "Traceback" not in r.stderr, (command, r.stderr)
        assert "no sessions yet" not in r.stderr + r.stdout, command


def test_memory_commands_refuse_arguments_that_are_not_utf8(shou, workspace: Path) -> None:
    bad = os.fsdecode(b"tea \xff")
    for command in (["search", bad], ["list", "--session", bad], ["list", "--tag", bad], ["forget", bad],
                    ["graph", bad]):
        r = shou("memory", *command)
        assert r.returncode == 2 and "not valid UTF-8" in r.stderr and "Traceback" not in r.stderr, command
    (workspace / "q.jsonl").write_text('{"id": 1, "query": "tea \\ud800"}\n')
    r = shou("memory", "search", "--queries", "q.jsonl", "--bm25-only")
    assert r.returncode != 0 and "q.jsonl:1: its query is not valid Unicode" in r.stderr and "Traceback" not in r.stderr


def _plant_deep_journal(workspace: Path) -> None:
    """A journal line nested 600 deep (orjson takes up to 1024) holding a string that starts with NUL: the line
    `journal.loads` walks with `_names`, recursively, past Python's recursion limit."""
    folder = workspace / ".shou" / "checkpoints" / "sessions"
    folder.mkdir(parents=True, exist_ok=True)
    (folder / ("0" * 32 + ".jsonl")).write_bytes(b"[" * 600 + b'"\\u0000"' + b"]" * 600 + b"\n")


def test_a_planted_deep_journal_line_ends_no_run(serve, shou, workspace: Path) -> None:
    """Before the change the line was read by orjson alone (fine to depth 1024) and skipped as no session's
    head; now `loads` recurses into it because of the NUL, and the RecursionError escapes `Book._head` (which
    suppresses only JSONDecodeError), `forget_deleted`, and the run's first command."""
    _plant_deep_journal(workspace)
    srv = serve([{"tool_calls": [{"name": "shell", "arguments": {"command": "echo after > f.txt"}}]},
                 {"text": "done"}])
    r = shou("run", "change it", "-y", server=srv)
    assert r.returncode == 0 and "Traceback" not in r.stderr and "internal error" not in r.stderr, r.stderr[-2000:]
    assert "RecursionError" not in tool_messages(srv.requests[1])[0]["content"]
    u = shou("undo")
    assert u.returncode == 0 and "Traceback" not in u.stderr, u.stderr[-2000:]
    assert not (workspace / "f.txt").exists()


async def test_a_plan_step_with_a_lone_surrogate_escape(serve, workspace: Path, tmp_path: Path) -> None:
    """The planner's `submit_plan` arguments are read by `turn.tool_arguments` (json.loads), not by
    `parse_arguments`: the step's text held a lone surrogate, and the step's request, recorded outside the
    emitter (agent/recorder.py), ended the planned run with `internal error: TypeError`."""
    verdict = {"tool_calls": [{"name": "step_verdict", "arguments": {"done": True, "reason": "done"}}]}
    srv = serve([{"tool_calls": [{"name": "submit_plan", "arguments": {"steps": ["write \udcff now"]}}]},
                 {"text": "wrote it"}, verdict, {"text": "final"}])
    store = SQLiteStore(tmp_path / "shou.db")
    agent = Agent(OpenAICompatible("m", base_url=srv.base_url), [], workspace=workspace, store=store,
                  planning=True)
    r = await agent.arun("do it")
    assert (r.status, r.answer, r.error) == ("completed", "final", None)
    plan = next(e for e in store.events(r.session) if e.type == "plan")
    assert plan.steps[0].text == "write \ufffd now"
    store.close()
