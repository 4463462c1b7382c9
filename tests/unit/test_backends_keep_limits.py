"""Every model backend keeps `rpm` and the token budget: the scripted and the local model, not only the wire
client (issue 30). Rate limits are checked on the limiter's own clock, never on wall time; this file imports
only what existed before the model pipeline, so it shows what the pipeline changed."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest

from shou import Agent
from shou.config import load_settings
from shou.events import Notice, RunFinished
from shou.messages import Message
from shou.models import get_model
from shou.models.base import Completion, ModelSettings, Waiting
from shou.models.scripted import ScriptedModel
from shou.tools.builtin.calc import calculator


class StoppedClock:
    """A limiter clock that moves only when the limiter waits: each wait is recorded and passes at once."""

    def __init__(self) -> None:
        self.t = 1000.0
        self.waits: list[float] = []

    def now(self) -> float:
        return self.t

    async def wait(self, changed: asyncio.Event, seconds: float) -> None:
        self.waits.append(seconds)
        self.t += seconds
        await asyncio.sleep(0)


def _local() -> None:
    pytest.importorskip("llama_cpp")
    from shou.models.local import local_available

    ok, why = local_available()
    if not ok:
        pytest.skip(why)


def _script(tmp_path: Path, turns: list[dict[str, Any]]) -> str:
    path = tmp_path / "script.json"
    path.write_text(json.dumps(turns))
    return str(path)


def _calls(n: int) -> list[dict[str, Any]]:
    return [{"tool_calls": [{"name": "calculator", "arguments": {"expression": f"{i}+1"}}]} for i in range(n)]


def test_the_scripted_model_keeps_rpm(tmp_path: Path) -> None:
    spec = "scripted:" + _script(tmp_path, [*_calls(2), {"text": "done"}])
    model = get_model(settings=load_settings({"model": spec, "rpm": 2, "workspace": str(tmp_path)}))
    clock = StoppedClock()
    model.limiter.clock = clock  # type: ignore[attr-defined]
    result = Agent(model, [calculator], workspace=tmp_path).run("count")
    assert result.status == "completed" and result.usage.requests == 3
    assert len(clock.waits) == 1 and clock.waits[0] == pytest.approx(61.0)  # 60 s window + 1 s margin


def test_the_local_model_keeps_rpm(tmp_path: Path) -> None:
    _local()
    model = get_model(settings=load_settings({"model": "local", "rpm": 2, "workspace": str(tmp_path)}))
    clock = StoppedClock()
    model.limiter.clock = clock  # type: ignore[attr-defined]

    async def ask() -> list[Any]:
        return [e async for e in model.stream([Message.user("Say hi.")], [], ModelSettings(max_tokens=2))]

    async def three() -> list[list[Any]]:
        return [await ask() for _ in range(3)]

    replies = asyncio.run(three())
    assert all(isinstance(r[-1], Completion) for r in replies)
    assert len(clock.waits) == 1 and clock.waits[0] == pytest.approx(61.0)
    assert [e.delay for r in replies for e in r if isinstance(e, Waiting)] == [pytest.approx(61.0)]


def test_the_scripted_model_keeps_the_token_budget(tmp_path: Path) -> None:
    big = {"usage": {"prompt_tokens": 100, "completion_tokens": 5000}}
    turns = [{**t, **big} for t in _calls(3)] + [{"text": "done"}]
    budget = 6000
    agent = Agent(ScriptedModel(turns), [calculator], workspace=tmp_path, token_budget=budget)
    events = asyncio.run(_drain(agent, "count"))
    result = events[-1]
    assert isinstance(result, RunFinished)
    assert result.status == "budget"
    assert result.usage.total_tokens <= budget


def test_the_local_model_keeps_the_token_budget(tmp_path: Path) -> None:
    _local()
    from shou.models.local import LocalModel

    budget = 700
    agent = Agent(LocalModel(seed=1, max_tokens=2000), [calculator], workspace=tmp_path, token_budget=budget,
                  max_steps=8)
    result = agent.run("Use the calculator on 2+2, then on 3+3, then on 4+4, then on 5+5, one call per step.")
    assert result.status == "budget", (result.status, result.usage, result.error)
    assert result.usage.total_tokens <= budget


async def _drain(agent: Agent, task: str) -> list[Any]:
    events = [e async for e in agent.stream(task)]
    assert not [e for e in events if isinstance(e, Notice) and e.kind == "model_error"]
    return events
