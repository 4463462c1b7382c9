"""Prices, costs and budgets: what a call costs, and that no call starts that could break a budget."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from shou.agent.budget import DEFAULT_REPLY_RESERVE, Accounts, Budget
from shou.config import load_settings
from shou.errors import ConfigError
from shou.models.base import ModelSettings
from shou.pricing import Price, PriceTable
from shou.usage import Usage, format_cost


def test_cost_is_tokens_times_price_with_cached_input_cheaper() -> None:
    price = Price(2.0, 8.0, 0.5)
    assert price.cost(Usage(1000, 100)) == pytest.approx((1000 * 2 + 100 * 8) / 1e6)
    assert price.cost(Usage(1000, 100, cached_tokens=400)) == pytest.approx((600 * 2 + 400 * 0.5 + 100 * 8) / 1e6)
    assert Price(2.0, 8.0).cost(Usage(1000, 0, cached_tokens=400)) == pytest.approx(1000 * 2 / 1e6)  # upper bound


def test_price_lookup_exact_dated_unknown_and_local() -> None:
    table = PriceTable({"my-model": {"input_price": 1, "output_price": 3}, "gpt-4o-mini": {"output_price": 0.7}})
    assert table.lookup("my-model") == Price(1.0, 3.0)
    assert table.lookup("gpt-4o-mini") == Price(0.15, 0.7, 0.075)  # an override of one field keeps the others
    assert table.lookup("gpt-4o-mini-2024-07-18") == table.lookup("gpt-4o-mini")  # a dated version
    assert table.lookup("gpt-4o-mini-large") is None  # not a date: another model
    assert table.lookup("qwen3-unknown") is None
    assert table.cost("qwen3-unknown", Usage(10, 10, 1)) is None  # unknown, never zero
    assert table.cost("local:smollm2-135m", Usage(10, 10, 1)) == 0.0  # runs here: free


def test_unknown_costs_stay_unknown_when_summed() -> None:
    known, unknown = Usage(1, 1, 1, cost=0.5), Usage(1, 1, 1, cost=None)
    assert (known + known).cost == 1.0
    assert (known + unknown).cost is None and (unknown + known).cost is None
    assert (Usage() + known).cost == 0.5  # nothing spent yet is a known zero
    assert format_cost(None) == "cost unknown" and format_cost(0.01234) == "$0.0123"


def test_budget_caps_the_reply_to_what_is_left_and_refuses_what_cannot_fit() -> None:
    accounts = Accounts(PriceTable({"m": {"input_price": 1, "output_price": 2}}), [Budget(max_cost=0.01)], "m")
    settings, held = accounts.reserve(1000, None)
    assert isinstance(held, list) and settings is not None
    assert settings.max_tokens == DEFAULT_REPLY_RESERVE  # plenty left: the default reply limit
    held[0].settle(Usage(1000, 100, 1, cost=0.0012))
    accounts.budgets[0].spent = Usage(1000, 100, 1, cost=0.009)  # as if more was spent
    settings, held = accounts.reserve(300, ModelSettings(temperature=0.2))
    assert isinstance(held, list) and settings is not None
    # $0.001 left, $0.0003 of it for the prompt: room for 350 reply tokens at $2 per million
    assert (settings.max_tokens, settings.temperature) == (350, 0.2)
    held[0].release()
    accounts.budgets[0].spent = Usage(1000, 100, 1, cost=0.0092)
    _, why = accounts.reserve(300, None)  # room for 250: not worth a call
    assert isinstance(why, str) and "only 250 tokens" in why and "spent $0.0092" in why


def test_budget_refuses_a_call_whose_prompt_alone_is_too_dear() -> None:
    accounts = Accounts(PriceTable({"m": {"input_price": 1, "output_price": 2}}), [Budget(max_cost=0.001)], "m")
    _, why = accounts.reserve(5000, None)
    assert isinstance(why, str) and "--max-cost of $0.0010" in why and "spent $0 and 0 tokens" in why


def test_cost_budget_needs_a_price() -> None:
    accounts = Accounts(PriceTable(), [Budget(max_cost=1.0)], "mystery-model")
    _, why = accounts.reserve(10, None)
    assert isinstance(why, str) and '[models."mystery-model"]' in why


def test_concurrent_reservations_never_overshoot_together() -> None:
    """Calls in flight at once (sub-agents on one budget) hold their worst case: whatever they then use,
    the sum stays within the budget."""
    budget = Budget(max_tokens=20_000)
    accounts = Accounts(PriceTable(), [budget], "m")
    held = []
    for _ in range(50):
        settings, got = accounts.reserve(1000, ModelSettings(max_tokens=1000))
        if isinstance(got, str):
            break
        assert settings is not None
        held.append((got, settings.max_tokens))
    assert len(held) == 10  # 10 x (1000 + 1000) fill it; the 11th is refused while they run
    for reservations, reply in held:
        for r in reservations:
            r.settle(Usage(1000, reply, 1))  # each uses its whole worst case
    assert budget.spent.total_tokens <= 20_000
    _, why = accounts.reserve(1000, ModelSettings(max_tokens=1000))
    assert isinstance(why, str)


def test_a_run_and_a_session_budget_both_apply() -> None:
    run, session = Budget(max_tokens=100_000), Budget(max_tokens=3000, spent=Usage(1500, 400, 2))
    accounts = Accounts(PriceTable(), [run, session], "m")
    settings, held = accounts.reserve(500, None)
    assert isinstance(held, list) and settings is not None and settings.max_tokens == 600
    _, why = accounts.reserve(500, None)  # the first is still in flight: its worst case is held
    assert (isinstance(why, str) and "session" not in why) or "tokens" in why
    assert run.reserved_tokens == 1100  # the refused call left nothing held
    for r in held:
        r.release()
    assert run.reserved_tokens == 0 and session.reserved_tokens == 0


def _config(tmp_path: Path, user: str, workspace: str = "") -> dict:
    home, ws = tmp_path / "home", tmp_path / "ws"
    home.mkdir(exist_ok=True)
    ws.mkdir(exist_ok=True)
    (home / "shou.toml").write_text(user)
    if workspace:
        (ws / "shou.toml").write_text(workspace)
    return {"SHOU_CONFIG_DIR": str(home), "SHOU_WORKSPACE": str(ws), "PATH": os.environ.get("PATH", "")}


def test_prices_from_the_users_toml_and_the_environment(tmp_path: Path) -> None:
    env = _config(tmp_path, '[models."scripted"]\ninput_price = 2.0\noutput_price = 8\ncached_input_price = 0.5\n')
    settings = load_settings(env=env)
    assert settings.models == {"scripted": {"input_price": 2.0, "output_price": 8.0, "cached_input_price": 0.5}}
    assert PriceTable(settings.models).lookup("scripted") == Price(2.0, 8.0, 0.5)
    env["SHOU_MODELS"] = '{"other": {"input_price": 1, "output_price": 1}}'
    assert set(load_settings(env=env).models) == {"scripted", "other"}  # price tables add up across sources


@pytest.mark.parametrize("bad", [
    '[models."x"]\ninput_price = -1\noutput_price = 1\n',
    '[models."x"]\ninput_price = "cheap"\noutput_price = 1\n',
    '[models."x"]\ninput_price = 1\n',  # a model with no built-in price needs both
    '[models."x"]\ninput = 1\noutput_price = 1\n',
    'models = 3\n',
])
def test_bad_price_tables_are_refused_clearly(tmp_path: Path, bad: str) -> None:
    with pytest.raises(ConfigError, match="models"):
        load_settings(env=_config(tmp_path, bad))


def test_an_untrusted_workspace_may_lower_a_budget_but_not_raise_it_nor_set_prices(tmp_path: Path) -> None:
    user = 'max_cost = 1.0\ntoken_budget = 50000\nrpm = 60\n'
    workspace = ('max_cost = 100.0\ntoken_budget = 1000\nrpm = 1000\n'
                 '[models."gpt-4o-mini"]\ninput_price = 0\noutput_price = 0\n')
    settings = load_settings(env=_config(tmp_path, user, workspace))
    assert settings.max_cost == 1.0  # not raised
    assert settings.token_budget == 1000  # lowered
    assert settings.rpm == 60
    assert settings.models == {}  # prices that would make a budget free are not the workspace's to set
    assert any("models" in i.names for i in settings.ignored)


def test_the_prompt_calibration_is_per_model_only_grows_and_is_shared_with_sub_runs() -> None:
    prices = PriceTable()
    parent = Accounts(prices, [Budget(max_tokens=100_000)], "big")
    child = Accounts(prices, [Budget(max_tokens=100_000)], "big", parent.ratios)  # a sub-agent's
    parent.calibrate(1000, 10_000, "big")  # the provider counts 10x shou's estimate
    parent.calibrate(1000, 1000, "cheap")  # another model's call must not reset what was learned for "big"
    parent.calibrate(1000, 2000, "big")  # a smaller shortfall later: the larger one stands
    assert parent.ratios == {"big": 10.0}
    _, held = child.reserve(1000, ModelSettings(max_tokens=500), "big")
    assert not isinstance(held, str) and held[0].tokens == 10_000 + 500


def test_nan_and_infinite_budgets_are_refused_by_the_agent(tmp_path: Path) -> None:
    from shou import Agent
    from shou.errors import UserError
    from shou.models.scripted import ScriptedModel

    for kw in ({"token_budget": float("nan")}, {"token_budget": float("inf")}, {"max_cost": float("nan")},
               {"max_cost": float("inf")}, {"max_cost": -1.0}):
        with pytest.raises(UserError):
            Agent(ScriptedModel([{"text": "hi"}]), [], workspace=tmp_path, **kw)


def test_a_usage_read_from_a_log_cannot_be_negative_or_a_made_up_cost() -> None:
    assert Usage.from_log({"input_tokens": -1e9, "output_tokens": "3", "cost": -1000.0}) == \
        Usage(0, 0, 0, False, 0, None)
    assert Usage.from_log({"input_tokens": 5, "output_tokens": 3, "requests": 1, "cost": float("nan")}).cost is None
    assert Usage.from_log({"input_tokens": 5, "output_tokens": 3, "requests": 1}).cost is None  # before costs
    assert Usage.from_log({"input_tokens": 5, "output_tokens": 3, "requests": 1, "cost": 0.25, "estimated": True}) \
        == Usage(5, 3, 1, True, 0, 0.25)


@pytest.mark.parametrize("budget", [None, 1_000_000])
def test_a_run_learns_the_prompt_calibration_with_or_without_a_budget(tmp_path: Path, budget: int | None,
                                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    # A run with no budget of its own still learns the shortfall: its sub-agents' budgets share what it learned.
    from shou import Agent
    from shou.models.scripted import ScriptedModel

    learned: list[tuple[int, int, str | None]] = []
    real = Accounts.calibrate

    def spy(self: Accounts, estimated: int, reported: int, model: str | None = None) -> None:
        learned.append((estimated, reported, model))
        real(self, estimated, reported, model)

    monkeypatch.setattr(Accounts, "calibrate", spy)
    agent = Agent(ScriptedModel([{"text": "hi"}]), [], workspace=tmp_path, token_budget=budget)
    assert agent.run("hello").answer == "hi"
    assert len(learned) == 1
    estimated, reported, model = learned[0]
    assert estimated > 0 and reported > 0 and model == "scripted"
