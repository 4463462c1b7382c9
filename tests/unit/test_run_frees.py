"""A finished run leaves no reference cycle behind: its pipelines, caller and tool context point back at it,
so unless it lets go of them when it ends, the run, its session and every message and event object they hold
wait for the garbage collector. At hundreds of runs a second those collections were a third of the loop's
extra cost over 50e96f5 in the peers' benchmark (bench/README, issue 30)."""

from __future__ import annotations

import gc
import json
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from shou import Agent, SQLiteStore
from shou.agent.loop import Run
from shou.agent.toolpipe import ToolPipeline
from shou.agent.turn import Caller
from shou.session import Session
from shou.tools.base import ToolContext
from shou.tools.builtin.calc import calculator

KEPT_BY_A_CYCLE = (Run, Session, Caller, ToolPipeline, ToolContext)


@contextmanager
def collector_off() -> Iterator[list[object]]:
    """The collector off inside; at the end, one collection whose unreachable objects are given back."""
    gc.collect()
    was = gc.isenabled()
    gc.disable()
    found: list[object] = []
    try:
        yield found
    finally:
        gc.set_debug(gc.DEBUG_SAVEALL)
        try:
            gc.collect()
            found.extend(gc.garbage)
        finally:
            gc.set_debug(0)
            gc.garbage.clear()
            if was:
                gc.enable()


def _script(tmp_path: Path) -> str:
    path = tmp_path / "script.json"
    path.write_text(json.dumps([
        {"tool_calls": [{"name": "calculator", "arguments": {"expression": "2+3"}}]},
        {"tool_calls": [{"name": "calculator", "arguments": {"expression": "5*4"}}]},
        {"text": "ANSWER: 20"},
    ]))
    return "scripted:" + str(path)


def _one_run(tmp_path: Path, store: bool) -> None:
    """A run with two tool calls, every reference to it held here (gone when this returns)."""
    agent = Agent(_script(tmp_path), [calculator], workspace=tmp_path,
                  store=SQLiteStore(tmp_path / "s.db") if store else None)
    try:
        result = agent.run("what is (2+3)*4?")
    finally:
        agent.close()
    assert result.ok and result.answer == "ANSWER: 20" and result.steps == 3


@pytest.mark.parametrize("store", [False, True], ids=["in memory", "sqlite"])
def test_a_finished_run_is_freed_without_the_collector(tmp_path: Path, store: bool) -> None:
    with collector_off() as found:
        _one_run(tmp_path, store)
    left = sorted({type(o).__name__ for o in found if isinstance(o, KEPT_BY_A_CYCLE)})
    assert not left, f"a finished run left these to the garbage collector: {left}"
