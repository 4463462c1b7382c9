"""Many concurrent runs against a provider that allows N requests per rolling window: with a shared
RateLimiter none of them is ever answered 429; without it, the same load is."""

from __future__ import annotations

import asyncio
from pathlib import Path

from shou import Agent
from shou.models.openai_compat import OpenAICompatible
from shou.models.ratelimit import RateLimiter
from shou.models.runtime import RetryPolicy
from shou.tools.builtin.calc import calculator

from ..fixtures.limited_provider import LimitedProvider

LIMIT, WINDOW, RUNS = 8, 1.5, 20  # 40 requests: five windows' worth
SCRIPT = [{"tool_calls": [{"name": "calculator", "arguments": {"expression": "6*7"}}]}, {"text": "6*7 is 42"}]


async def run_all(model: OpenAICompatible, workspace: Path) -> list:
    agent = Agent(model, [calculator], workspace=workspace)
    try:
        return await asyncio.gather(*(agent.arun(f"what is 6*7? (run {i})") for i in range(RUNS)))
    finally:
        await model.aclose()


async def test_a_shared_limiter_keeps_twenty_concurrent_runs_under_the_providers_limit(workspace: Path) -> None:
    with LimitedProvider(SCRIPT, limit=LIMIT, window=WINDOW) as provider:
        limiter = RateLimiter(rpm=LIMIT, period=WINDOW)
        model = OpenAICompatible("m", base_url=provider.base_url, retry=RetryPolicy(max_retries=2, base=0.01),
                                 limiter=limiter)
        results = await run_all(model, workspace)
    assert [r.status for r in results] == ["completed"] * RUNS, [r.error for r in results if r.error]
    assert all(r.answer == "6*7 is 42" for r in results)
    assert provider.rejected == 0
    assert provider.answered == 2 * RUNS
    assert provider.most_in_a_window() <= LIMIT


async def test_without_a_limiter_the_same_load_is_answered_429(workspace: Path) -> None:
    # The control: proves the provider does enforce its limit, so the test above could fail.
    with LimitedProvider(SCRIPT, limit=LIMIT, window=WINDOW) as provider:
        model = OpenAICompatible("m", base_url=provider.base_url, retry=RetryPolicy(max_retries=0))
        results = await run_all(model, workspace)
    assert provider.rejected >= RUNS - LIMIT
    assert any(r.status != "completed" and "rate limited" in (r.error or "") for r in results)


async def test_tokens_per_minute_are_settled_from_the_real_usage(workspace: Path) -> None:
    with LimitedProvider(SCRIPT, limit=100, window=WINDOW) as provider:
        limiter = RateLimiter(tpm=1_000_000, period=WINDOW)
        model = OpenAICompatible("m", base_url=provider.base_url, limiter=limiter)
        result = await Agent(model, [calculator], workspace=workspace).arun("what is 6*7?")
        await model.aclose()
    assert result.status == "completed"
    requests, tokens = limiter.usage()
    assert requests == 2
    # what the provider reported (prompt + completion of both replies), not the estimate from body sizes
    assert tokens == result.usage.total_tokens


async def test_a_long_wait_for_the_limit_is_announced_with_its_reason(serve, workspace: Path, monkeypatch) -> None:
    """A run held back by the limiter says so (a notice naming the limit), instead of seeming stuck; a request
    larger than tpm is named as such."""
    import shou.models.controls as controls

    monkeypatch.setattr(controls, "ANNOUNCED_WAIT", 0.3)  # the real threshold is 5 s; the window here is 1 s
    srv = serve([{"text": "one"}, {"text": "two"}])
    limiter = RateLimiter(tpm=50, period=1.0, margin=0.1)
    model = OpenAICompatible("m", base_url=srv.base_url, limiter=limiter)
    agent = Agent(model, [], workspace=workspace, model_settings=None)
    first = [e async for e in agent.stream("hi")]
    second = [e async for e in agent.stream("hi again")]
    await model.aclose()
    assert first[-1].status == second[-1].status == "completed"
    waits = [e.text for e in second if e.type == "notice" and e.kind == "rate_limit"]
    assert len(waits) == 1 and "more than tpm = 50" in waits[0] and "raise tpm" in waits[0]
    assert not [e for e in first if e.type == "notice" and e.kind == "rate_limit"]  # the first had no wait


async def test_rpm_from_the_settings_keeps_twenty_runs_under_a_real_per_minute_limit(tmp_path: Path,
                                                                                     workspace: Path) -> None:
    """The acceptance line as a user meets it, in real time: `rpm = 10` in shou.toml, a provider that allows
    10 requests per rolling minute, 20 runs at once in one process. Takes a minute: the second ten wait."""
    from shou.config import load_settings
    from shou.models import build_model

    (tmp_path / "config").mkdir()
    (tmp_path / "config" / "shou.toml").write_text("rpm = 10\nmodel_retries = 0\n")
    with LimitedProvider([{"text": "ok"}], limit=10, window=60.0) as provider:
        settings = load_settings(env={"SHOU_CONFIG_DIR": str(tmp_path / "config"), "SHOU_WORKSPACE": str(workspace),
                                      "SHOU_BASE_URL": provider.base_url, "SHOU_MODEL": "m", "HOME": str(tmp_path)})
        model = build_model(settings)
        agent = Agent(model, [], workspace=workspace)
        try:
            results = await asyncio.gather(*(agent.arun(f"hello {i}") for i in range(20)))
        finally:
            await model.aclose()
    assert [r.status for r in results] == ["completed"] * 20, [r.error for r in results if r.error]
    assert provider.rejected == 0 and provider.answered == 20 and provider.most_in_a_window() <= 10
