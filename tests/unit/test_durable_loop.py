"""The loop's honest endings and write-ahead log, with the in-process scripted model and a real SQLite file."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import orjson
import pytest

from shou import Agent, tool
from shou.agent.emitter import Emitter
from shou.events import ModelResponse, RunStarted, ToolCallStarted
from shou.messages import Message, ToolCall
from shou.models.scripted import ScriptedModel
from shou.session import Session
from shou.store.sqlite import SQLiteStore
from shou.tools.base import ToolContext
from shou.usage import Usage


@pytest.fixture
def effects() -> list[str]:
    return []


@pytest.fixture
def tools(effects: list[str], tmp_path: Path) -> list:
    @tool
    def addlog(a: int, b: int) -> int:
        """Add two numbers and log that it happened (a side effect).

        Args:
            a: first
            b: second
        """
        effects.append(f"addlog {a} {b}")
        return a + b

    @tool(idempotent=True)
    def peek(key: str) -> str:
        """Look something up (harmless to repeat).

        Args:
            key: what
        """
        effects.append(f"peek {key}")
        return f"value of {key}"

    return [addlog, peek]


def call(name: str, **args: object) -> dict:
    return {"name": name, "arguments": args}


def tool_texts(request: dict) -> list[str]:
    return [m["content"] for m in request["messages"] if m["role"] == "tool"]


async def test_calls_of_a_reply_cut_at_the_output_limit_never_run(tools, effects, tmp_path: Path) -> None:
    model = ScriptedModel([
        {"tool_calls": [call("addlog", a=12, b=3)], "finish_reason": "length"},
        {"tool_calls": [call("addlog", a=12, b=345)]},
        {"text": "357"},
    ])
    result = await Agent(model, tools, workspace=tmp_path).arun("add 12 and 345")
    assert result.status == "completed" and result.answer == "357"
    assert effects == ["addlog 12 345"]  # the cut call (12, 3) never ran
    [cut] = tool_texts(model.requests[1])
    assert "cut off at the output limit" in cut and "not run" in cut


async def test_replies_that_keep_being_cut_end_the_run_truncated(tools, effects, tmp_path: Path) -> None:
    model = ScriptedModel([{"text": "The answer is a very long", "finish_reason": "length"}] * 3 + [{"text": "x"}])
    result = await Agent(model, tools, workspace=tmp_path).arun("write a lot")
    assert result.status == "truncated" and "3 times" in (result.error or "")
    assert len(model.requests) == 3
    told = [m["content"] for m in model.requests[1]["messages"] if m["role"] == "user"][-1]
    assert "cut off at the output limit" in told  # the model was asked to do less per step


async def test_missing_usage_is_estimated_and_marked(tools, tmp_path: Path) -> None:
    # zero counts are what the client reports when the provider sent no usage at all
    model = ScriptedModel([{"text": "hello there, this is the answer", "usage": {"prompt_tokens": 0,
                                                                                "completion_tokens": 0}}])
    result = await Agent(model, tools, workspace=tmp_path).arun("say hello")
    assert result.usage.estimated and result.usage.input_tokens > 0 and result.usage.output_tokens > 0
    model = ScriptedModel([{"text": "hi", "usage": {"prompt_tokens": 7, "completion_tokens": 2}}])
    result = await Agent(model, tools, workspace=tmp_path).arun("say hi")
    assert (result.usage.input_tokens, result.usage.output_tokens, result.usage.estimated) == (7, 2, False)


async def test_an_oversized_argument_is_refused_and_not_stored(tools, effects, tmp_path: Path) -> None:
    huge = "9" * 1_200_000
    model = ScriptedModel([{"tool_calls": [{"name": "addlog", "arguments": f'{{"a": {huge}, "b": 1}}'}]},
                           {"text": "too big"}])
    store = SQLiteStore(tmp_path / "db")
    result = await Agent(model, tools, workspace=tmp_path, store=store).arun("x", "big")
    assert result.status == "completed" and effects == []
    [refusal] = tool_texts(model.requests[1])
    assert "over 1000000 characters" in refusal
    assert sum(len(d) for (d,) in sqlite3.connect(tmp_path / "db").execute("SELECT data FROM events")) < 20_000
    store.close()


async def test_everything_is_in_the_log_before_it_is_seen_or_acted_on(tools, tmp_path: Path) -> None:
    db = tmp_path / "db"
    seen_in_log: list[bool] = []

    def logged(kind: str, needle: str) -> bool:
        rows = sqlite3.connect(db).execute("SELECT type, data FROM events").fetchall()
        return any(t == kind and needle in d for t, d in rows)

    @tool
    def probe(tag: str, ctx: ToolContext) -> str:
        """Check that this very call is in the log before it runs.

        Args:
            tag: a marker
        """
        seen_in_log.append(logged("tool_call_started", tag) and logged("model_response", tag))
        return "ok"

    model = ScriptedModel([{"tool_calls": [call("probe", tag="first-marker"), call("probe", tag="second-marker")]},
                           {"text": "done"}])
    store = SQLiteStore(db)
    async for event in Agent(model, [probe], workspace=tmp_path, store=store).stream("go", "wal"):
        if event.type in ("text_delta", "tool_call_delta"):
            continue
        stored = [orjson.loads(d) for (d,) in sqlite3.connect(db).execute("SELECT data FROM events")]
        assert event.to_dict() in stored, f"{event.type} was shown before it was in the log"
    assert seen_in_log == [True, True]
    store.close()


def killed_run(store: SQLiteStore, calls: list[ToolCall], started: list[str], finished: dict[str, str]) -> None:
    """What a process killed in the middle of a step leaves in the log."""
    s = Session("k", store)
    Emitter(s).emit(RunStarted("r", "k", "do it", "m"))
    Emitter(s).emit(ModelResponse("r", 1, Message.assistant(None, calls), Usage(5, 5, 1), 0.1, "tool_calls"))
    for c in calls:
        if c.id in started:
            Emitter(s).emit(ToolCallStarted("r", 1, c))
    from shou.events import ToolCallFinished

    for call_id, content in finished.items():
        Emitter(s).emit(ToolCallFinished("r", 1, call_id, next(c.name for c in calls if c.id == call_id), content))
    s.commit()


async def test_resume_reports_interrupted_calls_and_reruns_only_harmless_ones(tools, effects, tmp_path: Path) -> None:
    calls = [ToolCall("c1", "addlog", '{"a": 1, "b": 1}'), ToolCall("c2", "addlog", '{"a": 2, "b": 2}'),
             ToolCall("c3", "peek", '{"key": "k"}'), ToolCall("c4", "addlog", '{"a": 4, "b": 4}')]
    store = SQLiteStore(tmp_path / "db")
    # c1 finished; c2 and c3 were running when the process died; c4 never started.
    killed_run(store, calls, started=["c1", "c2", "c3"], finished={"c1": "2"})
    model = ScriptedModel([{"text": "all done"}])
    agent = Agent(model, tools, workspace=tmp_path, store=store)
    result = await agent.aresume("k")
    assert result.status == "completed" and result.answer == "all done" and result.run_id == "r"
    assert effects == ["peek k", "addlog 4 4"]  # c1 and c2 never again; c3 idempotent; c4 first time
    results = dict(zip(["c1", "c2", "c3", "c4"], tool_texts(model.requests[0]), strict=True))
    assert results["c1"] == "2" and "interrupted" in results["c2"] and "outcome is unknown" in results["c2"]
    assert results["c3"] == "value of k" and results["c4"] == "8"
    assert [m["role"] for m in model.requests[0]["messages"][1:]] == ["user", "assistant", "tool", "tool", "tool",
                                                                      "tool"]
    with pytest.raises(Exception, match="no unfinished run"):
        await agent.aresume("k")
    store.close()


async def test_resume_asks_again_for_a_turn_that_never_arrived(tools, effects, tmp_path: Path) -> None:
    from shou.events import ModelRequest

    store = SQLiteStore(tmp_path / "db")
    s = Session("k", store)
    Emitter(s).emit(RunStarted("r", "k", "add", "m"))
    Emitter(s).emit(ModelRequest("r", 1, 2, 2))
    s.commit()  # killed while the model was answering
    model = ScriptedModel([{"tool_calls": [call("addlog", a=1, b=2)]}, {"text": "3"}])
    result = await Agent(model, tools, workspace=tmp_path, store=store).aresume("k")
    assert (result.status, result.answer, result.steps, effects) == ("completed", "3", 2, ["addlog 1 2"])
    store.close()


async def test_a_new_run_closes_a_killed_one_so_the_request_is_valid(tools, effects, tmp_path: Path) -> None:
    store = SQLiteStore(tmp_path / "db")
    killed_run(store, [ToolCall("c1", "addlog", '{"a": 1, "b": 1}')], started=["c1"], finished={})
    model = ScriptedModel([{"text": "fine"}])
    result = await Agent(model, tools, workspace=tmp_path, store=store).arun("something else", "k")
    assert result.status == "completed" and effects == []
    msgs = model.requests[0]["messages"]
    assert [m["role"] for m in msgs[1:]] == ["user", "assistant", "tool", "user"]
    assert "interrupted" in msgs[3]["content"]
    statuses = [orjson.loads(d)["status"] for (d,) in sqlite3.connect(tmp_path / "db").execute(
        "SELECT data FROM events WHERE type = 'run_finished' ORDER BY id")]
    assert statuses == ["interrupted", "completed"]
    store.close()


async def test_a_recorded_final_answer_is_closed_without_asking_again(tools, tmp_path: Path) -> None:
    store = SQLiteStore(tmp_path / "db")
    s = Session("k", store)
    Emitter(s).emit(RunStarted("r", "k", "hi", "m"))
    Emitter(s).emit(ModelResponse("r", 1, Message.assistant("hello!"), Usage(3, 2, 1), 0.1, "stop"))
    s.commit()  # killed before the run's end was written
    model = ScriptedModel([])
    result = await Agent(model, tools, workspace=tmp_path, store=store).aresume("k")
    assert (result.status, result.answer, model.requests) == ("completed", "hello!", [])
    store.close()
