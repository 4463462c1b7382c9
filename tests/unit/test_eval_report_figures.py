"""The report's figures: Wilson's interval, pass@k, latency quantiles and the spread across epochs, against
known values and, where a property says more than examples, with hypothesis."""

from __future__ import annotations

import itertools
import math
import statistics
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from shou.eval.report import ModelSummary, pass_at_k, summarize, wilson

Z = 1.96


@pytest.mark.parametrize(("passed", "n", "lo", "hi"), [
    (0, 10, 0.0, 0.27754),  # the textbook cases: a rate of 0 still has room above it
    (5, 10, 0.23659, 0.76341),
    (10, 10, 0.72246, 1.0),
    (1, 1, 0.20654, 1.0),
    (81, 263, 0.25529, 0.36621),  # the roots of (n + z²)p² - (2x + z²)p + x²/n = 0, worked by hand
])
def test_wilson_known_values(passed: int, n: int, lo: float, hi: float) -> None:
    got = wilson(passed, n)
    assert got == pytest.approx((lo, hi), abs=5e-5)


def test_wilson_of_nothing_is_all_of_0_to_1() -> None:
    assert wilson(0, 0) == (0.0, 1.0)


def test_wilson_at_the_ends_holds_the_rate_exactly() -> None:
    # 6/6 used to give an upper bound of 0.9999999999999999, just below the rate it is the interval of
    for n in range(1, 200):
        assert wilson(n, n)[1] == 1.0
        assert wilson(0, n)[0] == 0.0


@given(st.integers(1, 100_000).flatmap(lambda n: st.tuples(st.integers(0, n), st.just(n))))
def test_wilson_holds_the_rate_inside_0_to_1(case: tuple[int, int]) -> None:
    passed, n = case
    lo, hi = wilson(passed, n)
    assert 0.0 <= lo <= passed / n <= hi <= 1.0


@given(st.integers(1, 10_000).flatmap(lambda n: st.tuples(st.integers(0, n), st.just(n))))
def test_wilson_is_symmetric_in_passes_and_failures(case: tuple[int, int]) -> None:
    passed, n = case
    lo, hi = wilson(passed, n)
    lo2, hi2 = wilson(n - passed, n)
    assert (lo, hi) == pytest.approx((1 - hi2, 1 - lo2), abs=1e-12)


@given(st.integers(1, 10_000).flatmap(lambda n: st.tuples(st.integers(0, n), st.just(n))))
def test_wilson_bounds_solve_the_score_equation(case: tuple[int, int]) -> None:
    """What defines the interval: the rates p0 whose score test |p - p0| <= z·sqrt(p0(1-p0)/n) accepts p; an end
    inside (0, 1) is where that holds with equality."""
    passed, n = case
    p = passed / n
    for end in wilson(passed, n):
        if 1e-9 < end < 1 - 1e-9:
            assert n * (p - end) ** 2 == pytest.approx(Z * Z * end * (1 - end), rel=1e-6, abs=1e-12)


@pytest.mark.parametrize(("n", "c", "k", "want"), [
    (10, 3, 1, 0.3),  # pass@1 is the rate
    (5, 2, 2, 0.7),  # 1 - C(3,2)/C(5,2) = 1 - 3/10
    (3, 1, 3, 1.0),  # every draw holds the one correct sample
    (2, 0, 1, 0.0),
    (4, 4, 2, 1.0),
    (10, 1, 5, 0.5),
])
def test_pass_at_k_known_values(n: int, c: int, k: int, want: float) -> None:
    assert pass_at_k(n, c, k) == pytest.approx(want)


def test_pass_at_k_needs_k_samples() -> None:
    with pytest.raises(ValueError, match="at least 3"):
        pass_at_k(2, 1, 3)


@given(st.integers(1, 12).flatmap(lambda n: st.tuples(st.just(n), st.integers(0, n), st.integers(1, n))))
def test_pass_at_k_is_the_chance_a_draw_of_k_holds_a_correct_one(case: tuple[int, int, int]) -> None:
    n, c, k = case
    draws = list(itertools.combinations(range(n), k))
    hits = sum(any(i < c for i in draw) for draw in draws)  # samples 0..c-1 are the correct ones
    assert pass_at_k(n, c, k) == pytest.approx(hits / len(draws))


@given(st.integers(2, 60).flatmap(lambda n: st.tuples(st.just(n), st.integers(0, n - 1), st.integers(1, n - 1))))
def test_pass_at_k_grows_with_k_and_with_correct_samples(case: tuple[int, int, int]) -> None:
    n, c, k = case
    assert 0.0 <= pass_at_k(n, c, k) <= pass_at_k(n, c, k + 1) <= 1.0
    assert pass_at_k(n, c, k) <= pass_at_k(n, c + 1, k)


def result(case: str, epoch: int, outcome: str, *, latency: float = 1.0, cost: float | None = 0.01,
           model: str = "m") -> dict[str, Any]:
    return {"sample": f"{case}@{model}#{epoch}", "case": case, "model": model, "epoch": epoch, "outcome": outcome,
            "latency": latency, "cost": cost, "tokens": {"input": 7, "output": 3, "total": 10}, "steps": 1}


def test_latency_quantiles_known_values() -> None:
    m = ModelSummary("m", latencies=[float(x) for x in range(1, 11)])
    assert m.latency(0.5) == pytest.approx(5.5)
    assert m.latency(0.95) == pytest.approx(9.55)  # between the 9th and 10th, 55% of the way
    assert ModelSummary("m").latency(0.5) is None
    assert ModelSummary("m", latencies=[3.0]).latency(0.95) == 3.0


@given(st.lists(st.floats(0, 1e4, allow_nan=False), min_size=2, max_size=50))
def test_latency_quantiles_match_statistics_inclusive_method(xs: list[float]) -> None:
    m = ModelSummary("m", latencies=list(xs))
    cuts = statistics.quantiles(xs, n=20, method="inclusive")  # the 5%, 10%, ... 95% points
    assert m.latency(0.5) == pytest.approx(cuts[9], rel=1e-9, abs=1e-9)
    assert m.latency(0.95) == pytest.approx(cuts[18], rel=1e-9, abs=1e-9)
    assert min(xs) <= m.latency(0.5) <= m.latency(0.95) <= max(xs)  # type: ignore[operator]


def test_summary_of_a_small_run() -> None:
    rows = [result("a", 1, "pass", latency=1.0), result("a", 2, "fail", latency=2.0),
            result("b", 1, "pass", latency=3.0), result("b", 2, "error", latency=4.0, cost=None)]
    m = summarize(rows, ["m"]).models["m"]
    assert (m.samples, m.passed, m.failed, m.errors, m.tokens) == (4, 2, 1, 1, 40)
    assert m.rate == 0.5 and m.interval == wilson(2, 4)
    assert m.epochs == 2
    assert m.pass_at(1) == pytest.approx(0.5)
    assert m.pass_at(2) == pytest.approx(1.0)  # each case passed once in its two epochs
    assert m.pass_at(3) is None
    assert m.spread == pytest.approx(0.5)  # epoch 1: 2/2, epoch 2: 0/2
    assert m.cost is None  # one unknown cost makes the sum unknown, never a smaller number
    assert m.latency(0.5) == pytest.approx(2.5)
    never_ran = {**result("c", 1, "error", latency=0.0), "steps": 0}  # a setup error: no run, so no latency
    assert summarize([*rows, never_ran], ["m"]).models["m"].latency(0.5) == pytest.approx(2.5)
    figures = m.to_dict()
    assert figures["pass_at_k"] == {"1": pytest.approx(0.5), "2": pytest.approx(1.0)}
    assert figures["ci95"] == list(wilson(2, 4))


def test_spread_needs_two_epochs_and_costs_add_up() -> None:
    m = summarize([result("a", 1, "pass"), result("b", 1, "fail")]).models["m"]
    assert m.spread is None
    assert m.cost == pytest.approx(0.02)
    spread = summarize([result("a", e, "pass" if e != 3 else "fail") for e in (1, 2, 3)]).models["m"].spread
    assert spread == pytest.approx(statistics.pstdev([1.0, 1.0, 0.0]))


@given(st.dictionaries(st.integers(0, 30), st.lists(st.sampled_from(["pass", "fail", "error"]), min_size=3,
                                                   max_size=3), min_size=1))
def test_pass_at_1_is_the_rate_when_every_case_ran_as_often(cases: dict[int, list[str]]) -> None:
    rows = [result(f"c{case}", e, outcome) for case, outcomes in cases.items()
            for e, outcome in enumerate(outcomes, 1)]
    m = summarize(rows).models["m"]
    assert m.samples == len(rows) and m.epochs == 3
    assert m.pass_at(1) == pytest.approx(m.rate)
    assert m.pass_at(1) <= m.pass_at(2) <= m.pass_at(3)  # type: ignore[operator]
    assert m.interval[0] <= m.rate <= m.interval[1]
    assert m.passed + m.failed + m.errors == m.samples
    assert math.isclose(sum(m.latencies), float(len(rows)))
