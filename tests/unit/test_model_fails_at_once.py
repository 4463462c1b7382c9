"""A model call that fails before its first event (a backend's `stream()` raising as it is called, or its
`prepare()` failing) is recorded like one that fails mid-stream: the run ends with the error, and its
`model_error` notice (what the failure-rate alert counts) is in the log. Controls that wrap the rest of the
pipeline take `next(call)` inside their guarded block, so no control can be skipped by where a failure is
raised."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from shou import Agent
from shou.errors import ModelError
from shou.events import Notice, RunFinished
from shou.models.backend import Backend
from shou.models.pipeline import ModelCall


class RaisesAtOnce:
    """A `Model` (not a Backend) whose stream() raises when it is called, before returning anything."""

    name = "at-once"

    def stream(self, messages: list[Any], tools: list[Any], settings: Any = None) -> AsyncIterator[Any]:
        raise ModelError("the provider refused the request outright")

    async def aclose(self) -> None:
        pass


class PrepareFails(Backend):
    """A Backend whose request cannot even be prepared."""

    name = "prepare-fails"

    def prepare(self, call: ModelCall) -> None:
        raise ModelError("the request could not be encoded")

    async def attempt(self, call: ModelCall) -> AsyncIterator[Any]:  # pragma: no cover - never reached
        raise AssertionError("attempted after prepare failed")
        yield

    async def aclose(self) -> None:
        pass


@pytest.mark.parametrize("model", [RaisesAtOnce(), PrepareFails()], ids=["stream raises", "prepare raises"])
def test_a_call_that_fails_at_once_is_recorded_like_any_failed_call(tmp_path: Path, model: Any) -> None:
    agent = Agent(model, [], workspace=tmp_path, token_budget=10_000)
    events = asyncio.run(_events(agent))
    done = events[-1]
    assert isinstance(done, RunFinished) and done.status == "error"
    assert "refused the request outright" in (done.error or "") or "could not be encoded" in (done.error or "")
    notices = [e for e in events if isinstance(e, Notice) and e.kind == "model_error"]
    assert len(notices) == 1 and model.name in notices[0].text


async def _events(agent: Agent) -> list[Any]:
    return [e async for e in agent.stream("hello")]
