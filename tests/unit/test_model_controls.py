"""The model pipeline's controls that used to be wrapper models and branches of `Caller.call` (fallback, cache,
prepare, budget, trace), each with a fake `next`; then the whole pipeline around the scripted model: it is
served from the cache and stopped by the budget through the same head as the wire client."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from shou import Agent
from shou.agent.budget import Accounts, Budget, Budgets
from shou.agent.model_trace import Trace
from shou.agent.modelcall import RunCall, Turn
from shou.errors import ModelUnavailableError
from shou.events import ModelRequest, ModelResponse, Notice, RunFinished, TextDelta
from shou.messages import Message
from shou.models.backend import pipeline
from shou.models.base import Completion, Retrying, TextChunk
from shou.models.cache import Cache, CachedModel, ResponseCache
from shou.models.controls import Prepare
from shou.models.fallback import Fallback, FallbackModel
from shou.models.pipeline import ModelCall
from shou.models.scripted import ScriptedModel
from shou.pricing import PriceTable
from shou.tools.builtin.calc import calculator
from shou.usage import Usage

DONE = Completion(Message.assistant("ok"), Usage(3, 2, 1), "stop", "m")


class Named:
    """A model the fake `next` answers for; it never answers itself."""

    def __init__(self, name: str) -> None:
        self.name = name

    async def aclose(self) -> None:
        """Nothing to release."""


def drain(head: Any, call: ModelCall) -> list[Any]:
    async def go() -> list[Any]:
        return [e async for e in head(call)]

    return asyncio.run(go())


def call_to(model: Any) -> ModelCall:
    return ModelCall([Message.user("hi")], [], None, model)


def test_cache_answers_a_repeated_call_without_calling_next(tmp_path: Path) -> None:
    inner = Named("inner")
    model = CachedModel(inner, ResponseCache(tmp_path / "c.db"))
    asked: list[Any] = []

    async def next(call: ModelCall) -> AsyncIterator[Any]:
        asked.append(call.model)
        yield TextChunk("ok")
        yield DONE

    first = drain(lambda c: Cache()(c, next), call_to(model))
    second = drain(lambda c: Cache()(c, next), call_to(model))
    assert asked == [inner]  # the miss went on as a call to the inner model; the hit did not go on
    assert first[-1] is DONE and not first[-1].cached
    assert second[-1].cached and second[-1].usage == Usage() and second[-1].message.text == "ok"
    other = call_to(inner)
    sentinel = object()
    assert Cache()(other, lambda c: sentinel) is sentinel  # any other model: straight through


def test_fallback_passes_the_call_to_the_next_model_when_one_fails() -> None:
    one, two = Named("one"), Named("two")
    chain = FallbackModel([one, two])
    asked: list[str] = []

    async def next(call: ModelCall) -> AsyncIterator[Any]:
        asked.append(call.model.name)
        if call.model is one:
            yield TextChunk("half")
            raise ModelUnavailableError("down", status=503)
        yield DONE

    events = drain(lambda c: Fallback()(c, next), call_to(chain))
    assert asked == ["one", "two"]
    assert [e.model for e in events if isinstance(e, Retrying)] == ["one"]
    assert events[-1].sent_model == "two"
    assert chain.order() == [two, one]  # the failed one is tried last while it cools down
    sentinel = object()
    assert Fallback()(call_to(one), lambda c: sentinel) is sentinel


def test_prepare_runs_once_before_the_rest() -> None:
    class Backend:
        name = "b"
        prepared = 0

        def prepare(self, call: ModelCall) -> None:
            self.prepared += 1
            call.prepared = b"body"

    model = Backend()
    seen: list[Any] = []
    Prepare()(call_to(model), lambda c: seen.append(c.prepared))
    assert model.prepared == 1 and seen == [b"body"]


def run_call(tokens: int = 10) -> RunCall:
    return RunCall([Message.user("hi")], [], None, Named("m"), 1, tokens, "r1", "", "", True)


def test_budget_refuses_a_call_whose_prompt_does_not_fit_before_next_is_called() -> None:
    budget = Budget(max_tokens=100)
    call = run_call(tokens=500)

    def next(c: ModelCall) -> Any:
        raise AssertionError("sent")

    assert drain(lambda c: Budgets(Accounts(PriceTable(), [budget], "m"))(c, next), call) == []
    assert "prompt alone is about 500 tokens" in call.refused
    assert budget.reserved_tokens == 0 and budget.spent == Usage()


def test_budget_lowers_the_reply_limit_and_settles_with_the_turns_usage() -> None:
    budget = Budget(max_tokens=1000)
    call = run_call()
    used = Usage(10, 20, 1)

    async def next(c: RunCall) -> AsyncIterator[Any]:
        assert c.settings is not None and c.settings.max_tokens == 990  # what the budget has left
        assert budget.reserved_tokens == 1000
        c.turn = Turn(DONE, used, DONE.message, frozenset())
        yield DONE

    events = drain(lambda c: Budgets(Accounts(PriceTable(), [budget], "m"))(c, next), call)
    assert events == [DONE]
    assert budget.reserved_tokens == 0 and budget.spent == used


def test_budget_makes_no_further_attempt_once_a_billed_failure_leaves_no_room() -> None:
    budget = Budget(max_tokens=1000)
    call = run_call()
    after: list[str] = []

    async def next(c: RunCall) -> AsyncIterator[Any]:
        c.void = Usage(10, 900, 0, estimated=True)  # as the trace estimates a failed attempt
        yield Retrying(1, 0.0, "cut off")
        after.append("second attempt")
        yield DONE

    events = drain(lambda c: Budgets(Accounts(PriceTable(), [budget], "m"))(c, next), call)
    assert events == [] and after == []
    assert "a failed attempt of the call used about 910 tokens" in call.refused
    assert budget.reserved_tokens == 0 and budget.spent.total_tokens == 910


class FakeRun:
    """What the trace control uses of a run: emit, commit (ahead), its session's trace keys, the agent's counter."""

    def __init__(self) -> None:
        self.events: list[Any] = []
        self.commits = 0
        self.usage = Usage()
        self.session = SimpleNamespace(trace_keys=set())
        self.agent = SimpleNamespace(redactor=None, token_counter=SimpleNamespace(text=lambda s: len(s) // 4,
                                                                                  messages=lambda m: 1))
        self.accounts = Accounts(PriceTable(), [], "m")

    def emit(self, event: Any) -> None:
        self.events.append(event)

    def commit(self) -> None:
        self.commits += 1

    async def commit_ahead(self) -> None:
        self.commit()


def test_trace_logs_the_request_before_next_and_the_response_before_the_completion_goes_on() -> None:
    run = FakeRun()
    call = run_call()

    async def next(c: RunCall) -> AsyncIterator[Any]:
        assert [type(e) for e in run.events] == [ModelRequest] and run.commits == 1  # durable before it is sent
        yield TextChunk("a" * 40)
        yield Retrying(1, 0.0, "cut off", "m")
        yield TextChunk("ok")
        yield DONE

    events = drain(lambda c: Trace(run)(c, next), call)  # type: ignore[arg-type]
    assert events[-1] is DONE and call.turn is not None and call.turn.usage.total_tokens == 5
    kinds = [type(e).__name__ for e in run.events]
    assert kinds == ["ModelRequest", "TextDelta", "Notice", "TextDelta", "ModelResponse"]
    retry = run.events[2]
    assert isinstance(retry, Notice) and retry.kind == "retry" and retry.usage == call.void
    assert call.void is not None and call.void.output_tokens == 10 and call.void.input_tokens == 10
    response = run.events[-1]
    assert isinstance(response, ModelResponse) and response.retries == 1 and response.request_id == call.request_id
    assert run.usage.total_tokens == 5 + 20  # the reply and the billed failed attempt


def test_trace_counts_what_a_failed_call_streamed_on_its_model_error_notice() -> None:
    run = FakeRun()
    call = run_call()

    async def next(c: RunCall) -> AsyncIterator[Any]:
        yield TextChunk("a" * 40)
        raise ModelUnavailableError("down", status=503)

    with pytest.raises(ModelUnavailableError):
        drain(lambda c: Trace(run)(c, next), call)  # type: ignore[arg-type]
    notice = run.events[-1]
    assert isinstance(notice, Notice) and notice.kind == "model_error" and notice.usage == call.void
    assert call.turn is None and isinstance(run.events[1], TextDelta)


def test_every_backend_shares_the_one_models_pipeline_head() -> None:
    assert pipeline() is pipeline()  # composed once per process, not per call


def test_the_scripted_model_is_served_from_the_cache_through_the_run_pipeline(tmp_path: Path) -> None:
    turns = [{"tool_calls": [{"name": "calculator", "arguments": {"expression": "6*7"}}]}, {"text": "42"}]
    cache = ResponseCache(tmp_path / "c.db")
    first = ScriptedModel(turns)
    a = Agent(CachedModel(first, cache), [calculator], workspace=tmp_path).run("what is 6*7?")
    again = ScriptedModel([])  # an empty script: any request that reaches it fails the run
    b = Agent(CachedModel(again, cache), [calculator], workspace=tmp_path).run("what is 6*7?")
    assert a.status == b.status == "completed" and b.answer == "42"
    assert len(first.requests) == 2 and again.requests == []
    assert b.usage.total_tokens == 0 and b.usage.cost == 0.0


def test_the_scripted_model_is_stopped_by_the_budget_in_the_same_pipeline(tmp_path: Path) -> None:
    big = {"usage": {"prompt_tokens": 100, "completion_tokens": 5000}}
    model = ScriptedModel([{"text": "x", **big}] * 3)
    chain = FallbackModel([model])  # and as a member of a fallback chain: the chain gets the budget too

    async def go() -> list[Any]:
        agent = Agent(chain, [calculator], workspace=tmp_path, token_budget=200)
        return [e async for e in agent.stream("hi")]

    events = asyncio.run(go())
    assert isinstance(events[-1], RunFinished) and events[-1].status == "budget"
    assert model.requests == []  # refused before anything was sent or logged
    assert not [e for e in events if isinstance(e, ModelRequest)]
