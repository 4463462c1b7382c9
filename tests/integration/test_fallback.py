"""FallbackModel over the real HTTP client: a failing provider hands over to the next, is then left alone
for the cooldown, and configuration errors are never papered over."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from typing import Any

import pytest

from shou import Agent
from shou.errors import ModelAuthError, ModelResponseError, ModelUnavailableError
from shou.messages import Message
from shou.models.base import Completion, Retrying, TextChunk
from shou.models.fallback import FallbackModel
from shou.models.openai_compat import OpenAICompatible
from shou.models.runtime import RetryPolicy
from shou.models.scripted import FaultPlan, ScriptedModel
from shou.tools.builtin.calc import calculator

CALC = {"tool_calls": [{"name": "calculator", "arguments": {"expression": "6*7"}}]}
ANSWER = {"text": "6*7 is 42"}
DOWN = FaultPlan(rate=1.0, kinds=("500",))  # every request answered 500
HELLO = [Message.user("say hello")]


def client(srv, name: str, retries: int = 1, **kw: Any) -> OpenAICompatible:
    return OpenAICompatible(name, base_url=srv.base_url, retry=RetryPolicy(max_retries=retries, base=0.01), **kw)


async def collect(model: Any) -> list:
    return [e async for e in model.stream(HELLO, [])]


async def test_a_run_falls_back_when_the_first_provider_is_down_and_then_skips_it(serve, workspace: Path) -> None:
    down = serve([CALC, ANSWER] * 4, faults=DOWN)
    backup = serve([CALC, ANSWER] * 2)
    model = FallbackModel([client(down, "primary"), client(backup, "backup")], cooldown=60)
    assert model.name == "openai:primary"
    agent = Agent(model, [calculator], workspace=workspace)
    events = [e async for e in agent.stream("what is 6*7?")]
    finished = events[-1]
    assert finished.status == "completed" and finished.answer == "6*7 is 42"
    assert len(down.requests) == 2  # step 1: the first attempt and its one retry, then the switch
    assert len(backup.requests) == 2  # step 2 went straight to the backup: the primary is cooling down
    switches = [e.text for e in events if e.type == "notice" and e.kind == "retry" and "trying" in e.text]
    assert len(switches) == 1
    assert "openai:primary failed" in switches[0] and "trying openai:backup" in switches[0]
    assert "500" in switches[0]
    responses = [e for e in events if e.type == "model_response"]
    assert [r.model for r in responses] == ["backup", "backup"]

    again = await agent.arun("what is 6*7?")  # within the cooldown: the primary is not asked at all
    assert again.status == "completed" and again.answer == "6*7 is 42"
    assert len(down.requests) == 2 and len(backup.requests) == 4
    await model.aclose()


async def test_after_the_cooldown_the_first_model_is_tried_again(serve) -> None:
    flaky = serve([{"error": 503}, {"text": "primary is back"}])
    backup = serve([{"text": "from the backup"}])
    # A cooldown long next to one loopback request (which a busy machine could stretch past 0.2 s), waited
    # out by watching the order rather than by a sleep; one that never ended fails at the deadline.
    model = FallbackModel([client(flaky, "primary", retries=0), client(backup, "backup")], cooldown=2)
    first = await collect(model)
    assert isinstance(first[0], Retrying) and first[-1].message.text == "from the backup"
    assert [m.name for m in model.order()] == ["openai:backup", "openai:primary"]  # cooling: tried last
    deadline = time.monotonic() + 30
    while model.order()[0].name != "openai:primary" and time.monotonic() < deadline:
        await asyncio.sleep(0.05)
    assert [m.name for m in model.order()] == ["openai:primary", "openai:backup"]
    second = await collect(model)
    assert second[-1].message.text == "primary is back" and second[-1].sent_model == "primary"
    await model.aclose()


async def test_chunks_before_the_failure_are_voided_by_the_switch(serve) -> None:
    cut = serve([{"text": "the primary starts to answer and is cut", "chunk_size": 4, "cut_after": 700}])
    backup = serve([{"text": "whole answer"}])
    model = FallbackModel([client(cut, "primary", retries=0), client(backup, "backup")])
    events = await collect(model)
    switch = next(i for i, e in enumerate(events) if isinstance(e, Retrying))
    assert any(isinstance(e, TextChunk) for e in events[:switch])  # output had started
    assert "cut off" in events[switch].reason and events[switch].delay == 0.0
    after = "".join(e.text for e in events[switch:] if isinstance(e, TextChunk))
    assert after == "whole answer" and events[-1].message.text == "whole answer"
    await model.aclose()


async def test_rate_limiting_falls_back_too(serve) -> None:
    limited = serve([{"error": 429, "message": "slow down"}])
    backup = serve([{"text": "ok"}])
    model = FallbackModel([client(limited, "primary", retries=0), client(backup, "backup")])
    events = await collect(model)
    assert "slow down" in next(e for e in events if isinstance(e, Retrying)).reason
    assert events[-1].message.text == "ok"
    await model.aclose()


async def test_a_refused_key_is_not_fallen_back_from(serve, workspace: Path) -> None:
    locked = serve([ANSWER], api_key="x")
    backup = serve([ANSWER])
    model = FallbackModel([client(locked, "primary", api_key="wrong"), client(backup, "backup")])
    result = await Agent(model, [calculator], workspace=workspace).arun("hello")
    assert result.status == "error" and "API key" in (result.error or "")
    assert len(backup.requests) == 0  # a wrong key is for the person to fix, not for another provider to hide
    with pytest.raises(ModelAuthError):
        await collect(model)
    assert [m.name for m in model.order()] == ["openai:primary", "openai:backup"]  # no cooldown for it either
    await model.aclose()


async def test_a_rejected_request_is_not_fallen_back_from(serve) -> None:
    rejecting = serve([{"error": 400, "message": "context too long"}])
    backup = serve([ANSWER])
    model = FallbackModel([client(rejecting, "primary"), client(backup, "backup")])
    with pytest.raises(ModelResponseError, match="context too long"):
        await collect(model)
    assert len(backup.requests) == 0
    await model.aclose()


async def test_when_every_model_fails_the_error_names_each(serve) -> None:
    one, two = serve([ANSWER], faults=DOWN), serve([ANSWER], faults=DOWN)
    model = FallbackModel([client(one, "first", retries=0), client(two, "second", retries=0)])
    events: list = []
    with pytest.raises(ModelUnavailableError) as err:
        async for event in model.stream(HELLO, []):
            events.append(event)
    assert "openai:first" in str(err.value) and "openai:second" in str(err.value)
    assert err.value.status == 500
    assert [type(e) for e in events] == [Retrying]  # one switch, none after the last model
    await model.aclose()


async def test_the_answering_model_is_named_in_sent_model(serve) -> None:
    down = serve([ANSWER], faults=DOWN)
    local = ScriptedModel([{"text": "offline answer"}], name="local-backup")  # sets no sent_model itself
    model = FallbackModel([client(down, "primary", retries=0), local])
    done = (await collect(model))[-1]
    assert isinstance(done, Completion) and done.sent_model == "local-backup"
    assert done.message.text == "offline answer"
    await model.aclose()


async def test_a_budget_holds_a_call_at_the_dearest_model_that_may_answer(serve, workspace: Path) -> None:
    """The fallback costs 100x the primary. The call's worst case is held at the fallback's price, so when it
    answers it cannot take the run over its budget; a call that only fits at the primary's price is not made."""
    from shou.pricing import PriceTable
    from shou.trace import traces

    down = serve([ANSWER] * 4, faults=DOWN)
    backup = serve([{"text": "from the backup", "usage": {"prompt_tokens": 10, "completion_tokens": 4000}}] * 2)
    table = PriceTable({"cheap": {"input_price": 0.0, "output_price": 1.0},
                        "dear": {"input_price": 0.0, "output_price": 100.0}})
    model = FallbackModel([client(down, "cheap"), client(backup, "dear")])
    assert model.model == "cheap" and model.provider == "openai"
    store_path = workspace / "s.db"
    from shou import SQLiteStore

    store = SQLiteStore(store_path)
    # $0.05 buys 500 reply tokens at the fallback's price (50,000 at the primary's): max_tokens is 500
    result = await Agent(model, [], workspace=workspace, prices=table, max_cost=0.05, store=store).arun("hi", "s")
    assert result.status == "completed", result.error
    assert backup.requests[0]["max_tokens"] == 500 and down.requests[0]["max_tokens"] == 500
    # the scripted backup says it wrote 4000 tokens; a real provider stops at max_tokens. What it reports is
    # what is charged, at the fallback's price.
    assert result.usage.cost == pytest.approx(4000 * 100 / 1e6)
    call = traces(store, "s")[0].model_calls[0]
    assert call.model == "cheap" and call.sent_model == "dear"
    store.close()
    # $0.02 leaves 200 reply tokens at the fallback's price: below what a call is worth, so none is made
    few = await Agent(model, [], workspace=workspace, prices=table, max_cost=0.02).arun("hi")
    assert few.status == "budget" and "cheap or dear" in (few.error or "")
    assert len(backup.requests) == 1
    await model.aclose()


async def test_a_budget_with_a_fallback_of_unknown_price_says_so(serve, workspace: Path) -> None:
    from shou.pricing import PriceTable

    up = serve([ANSWER])
    model = FallbackModel([client(up, "cheap"), client(up, "mystery")])
    table = PriceTable({"cheap": {"input_price": 0.0, "output_price": 1.0}})
    result = await Agent(model, [], workspace=workspace, prices=table, max_cost=1.0).arun("hi")
    assert result.status == "budget" and "'mystery'" in (result.error or "") and up.requests == []
    await model.aclose()


def test_usage_by_model_names_the_fallback_that_answered(serve, shou, tmp_path: Path) -> None:
    config = tmp_path / "config"
    config.mkdir(exist_ok=True)
    (config / "shou.toml").write_text('fallback_models = ["openai:backup"]\nmodel_retries = 0\n'
                                      '[models."backup"]\ninput_price = 1.0\noutput_price = 1.0\n')
    failing = serve([{"error": 500, "retry_after": 0} for _ in range(4)])
    backup = serve([{"text": "from the backup", "usage": {"prompt_tokens": 1000, "completion_tokens": 10}}])
    r = shou("run", "hi", server=failing, OPENAI_BASE_URL=backup.base_url, OPENAI_API_KEY="k")
    assert r.returncode == 0, r.stderr
    usage = shou("usage", "--by", "model", "--json")
    assert usage.returncode == 0, usage.stderr
    import json

    rows = json.loads(usage.stdout)["rows"]
    assert [row["model"] for row in rows] == ["backup"] and rows[0]["cost"] == pytest.approx(1010 / 1e6)


async def test_a_failed_attempt_is_priced_as_the_model_that_made_it(serve, workspace: Path) -> None:
    """m1 cuts its reply twice, then m2 (dearer) answers: the cut attempts were m1's, priced and reported as
    m1's, not at the chain's dearest price."""
    from shou import SQLiteStore
    from shou.pricing import PriceTable
    from shou.usage_report import usage_report

    long = " ".join(f"w{i}" for i in range(2000))
    cut = {"text": long, "chunk_size": 400, "cut_after": 6000}
    m1 = serve([cut, cut])
    m2 = serve([{"text": "from m2", "usage": {"prompt_tokens": 10, "completion_tokens": 5}}])
    table = PriceTable({"m1": {"input_price": 1.0, "output_price": 2.0},
                        "m2": {"input_price": 3.0, "output_price": 4.0}})
    store = SQLiteStore(workspace / "s.db")
    model = FallbackModel([client(m1, "m1", retries=1), client(m2, "m2")])
    result = await Agent(model, [], workspace=workspace, prices=table, store=store).arun("hi", "s")
    assert result.status == "completed" and result.answer == "from m2"
    rows = {r.model: r for r in usage_report(store, by=("model",))}
    assert set(rows) == {"m1", "m2"}
    m1_row = rows["m1"]
    assert m1_row.output_tokens > 0 and m1_row.cost == pytest.approx(
        (m1_row.input_tokens * 1.0 + m1_row.output_tokens * 2.0) / 1e6)
    assert rows["m2"].cost == pytest.approx((10 * 3.0 + 5 * 4.0) / 1e6)
    store.close()
    await model.aclose()
