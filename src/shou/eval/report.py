"""What a results folder says: per model, the pass rate with its 95% confidence interval, pass@k and the
spread across epochs, cost, tokens and latency; and the terminal's summary table.

The interval is Wilson's score interval (it stays inside [0, 1] and means something for small suites and
rates near 0 or 1, unlike the normal approximation). pass@k for k epochs is the unbiased estimator of the
Codex paper (1 - C(n-c, k) / C(n, k) per case, averaged). A sample that errored counts as not passed: an
evaluation that breaks is not a better one.
"""

from __future__ import annotations

import math
import statistics
from collections import defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

__all__ = ["ModelSummary", "Report", "pass_at_k", "summarize", "wilson"]


def wilson(passed: int, n: int, z: float = 1.96) -> tuple[float, float]:
    """Wilson's 95% score interval for `passed` successes out of `n` ((0, 1) when n is 0)."""
    if n == 0:
        return 0.0, 1.0
    p = passed / n
    denom = 1 + z * z / n
    centre = (p + z * z / (2 * n)) / denom
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / denom
    # The interval always holds p; rounding alone would leave 1.0 (or 0.0) just outside it at the ends.
    return max(0.0, min(p, centre - half)), min(1.0, max(p, centre + half))


def pass_at_k(n: int, c: int, k: int) -> float:
    """The chance that at least one of k samples drawn from n (c of them correct) is correct."""
    if k > n:
        raise ValueError(f"pass@{k} needs at least {k} samples, not {n}")
    if n - c < k:
        return 1.0
    return 1.0 - math.comb(n - c, k) / math.comb(n, k)


def _quantile(xs: list[float], q: float) -> float | None:
    if not xs:
        return None
    xs = sorted(xs)
    i = (len(xs) - 1) * q
    lo = math.floor(i)
    hi = min(lo + 1, len(xs) - 1)
    return xs[lo] + (xs[hi] - xs[lo]) * (i - lo)


@dataclass
class ModelSummary:
    """One model's figures over the samples it ran."""

    model: str
    samples: int = 0
    passed: int = 0
    failed: int = 0
    errors: int = 0
    cost: float | None = 0.0
    tokens: int = 0
    latencies: list[float] = field(default_factory=list)
    by_case: dict[str, list[bool]] = field(default_factory=lambda: defaultdict(list))
    by_epoch: dict[int, list[bool]] = field(default_factory=lambda: defaultdict(list))

    @property
    def rate(self) -> float:
        """The pass rate (pass@1 over all samples)."""
        return self.passed / self.samples if self.samples else 0.0

    @property
    def interval(self) -> tuple[float, float]:
        """The pass rate's 95% Wilson interval."""
        return wilson(self.passed, self.samples)

    @property
    def epochs(self) -> int:
        """The fewest epochs any case of this model has (pass@k is defined up to it)."""
        return min((len(v) for v in self.by_case.values()), default=0)

    def pass_at(self, k: int) -> float | None:
        """pass@k averaged over the cases (None when some case has fewer than k samples)."""
        if not self.by_case or k > self.epochs:
            return None
        return statistics.fmean(pass_at_k(len(v), sum(v), k) for v in self.by_case.values())

    @property
    def spread(self) -> float | None:
        """The standard deviation of the per-epoch pass rates (None with one epoch)."""
        rates = [sum(v) / len(v) for v in self.by_epoch.values() if v]
        return statistics.pstdev(rates) if len(rates) > 1 else None

    def latency(self, q: float) -> float | None:
        """The q-quantile of the samples' run latency (seconds)."""
        return _quantile(self.latencies, q)

    def to_dict(self) -> dict[str, Any]:
        """The figures as JSON."""
        lo, hi = self.interval
        k = self.epochs
        return {"model": self.model, "samples": self.samples, "passed": self.passed, "failed": self.failed,
                "errors": self.errors, "pass_rate": self.rate, "ci95": [lo, hi], "epochs": k,
                "pass_at_k": {str(i): self.pass_at(i) for i in sorted({1, k}) if k}, "spread": self.spread,
                "cost": self.cost, "tokens": self.tokens, "latency_p50": self.latency(0.5),
                "latency_p95": self.latency(0.95)}


@dataclass
class Report:
    """An evaluation's figures: one `ModelSummary` per model (in the order the models were given), and the
    result lines they come from."""

    models: dict[str, ModelSummary]
    results: list[dict[str, Any]]
    folder: str = ""
    not_run: int = 0

    @property
    def total_cost(self) -> float | None:
        """What every sample cost together (None when some cost is unknown)."""
        costs = [m.cost for m in self.models.values()]
        return None if any(c is None for c in costs) else sum(c for c in costs if c is not None)

    def to_dict(self) -> dict[str, Any]:
        """The report as JSON (`summary.json` of a results folder)."""
        return {"folder": self.folder, "models": [m.to_dict() for m in self.models.values()],
                "samples": len(self.results), "not_run": self.not_run, "cost": self.total_cost}


def summarize(results: Iterable[Mapping[str, Any]], models: Iterable[str] = (), folder: str = "",
              not_run: int = 0) -> Report:
    """The figures of `results` (result lines), per model; `models` fixes their order."""
    out: dict[str, ModelSummary] = {m: ModelSummary(m) for m in models}
    kept: list[dict[str, Any]] = []
    for r in results:
        kept.append(dict(r))
        s = out.setdefault(r["model"], ModelSummary(r["model"]))
        s.samples += 1
        ok = r["outcome"] == "pass"
        s.passed += ok
        s.errors += r["outcome"] == "error"
        s.failed += r["outcome"] == "fail"
        s.cost = None if s.cost is None or r.get("cost") is None else s.cost + r["cost"]
        s.tokens += int(r.get("tokens", {}).get("total", 0))
        if r.get("latency") is not None and not (r["outcome"] == "error" and not r.get("steps")):  # ran at all
            s.latencies.append(float(r["latency"]))
        s.by_case[r["case"]].append(ok)
        s.by_epoch[int(r.get("epoch", 1))].append(ok)
    return Report(out, kept, folder, not_run)


def _money(x: float | None) -> str:
    if x is None:
        return "unknown"
    return f"${x:.4f}" if x < 1 else f"${x:.2f}"


def _secs(x: float | None) -> str:
    return "-" if x is None else f"{x:.2f}s"


def summary_table(report: Report) -> Any:
    """The report as a rich Table for the terminal."""
    from rich.table import Table

    table = Table(title="shou eval" + (f": {report.folder}" if report.folder else ""), title_justify="left")
    for name, justify in (("model", "left"), ("pass", "right"), ("rate (95% CI)", "right"), ("pass@k", "right"),
                          ("errors", "right"), ("cost", "right"), ("tokens", "right"), ("p50", "right"),
                          ("p95", "right")):
        table.add_column(name, justify=justify)  # type: ignore[arg-type]
    for m in report.models.values():
        lo, hi = m.interval
        k = m.epochs
        at_k = m.pass_at(k) if k > 1 else None
        spread = f" ±{m.spread:.0%}" if m.spread is not None else ""
        table.add_row(m.model, f"{m.passed}/{m.samples}", f"{m.rate:.0%} ({lo:.0%}-{hi:.0%}){spread}",
                      f"{at_k:.0%} @{k}" if at_k is not None else "-", str(m.errors), _money(m.cost),
                      f"{m.tokens:,}", _secs(m.latency(0.5)), _secs(m.latency(0.95)))
    return table
