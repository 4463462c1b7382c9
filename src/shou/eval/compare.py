"""`shou eval compare A B`: what changed from run A to run B.

Cases are paired by id (and by model when both runs ran the same models; otherwise all of a case's samples
count together, as when one model is compared with another). A case's pass rate is over its samples
(epochs); a case regressed when B's rate is lower than A's, and was fixed when it is higher.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..errors import UserError
from .report import Report, summarize
from .results import read_results

__all__ = ["Comparison", "compare", "print_comparison"]


@dataclass
class Comparison:
    """Two runs' reports and the cases whose pass rate went down, up, or that only one run has."""

    a: Report
    b: Report
    regressed: list[tuple[str, float, float]] = field(default_factory=list)
    fixed: list[tuple[str, float, float]] = field(default_factory=list)
    only_a: list[str] = field(default_factory=list)
    only_b: list[str] = field(default_factory=list)


def _rates(results: list[dict[str, Any]], by_model: bool) -> dict[str, float]:
    groups: dict[str, list[bool]] = defaultdict(list)
    for r in results:
        key = f"{r['case']} [{r['model']}]" if by_model else r["case"]
        groups[key].append(r["outcome"] == "pass")
    return {k: sum(v) / len(v) for k, v in groups.items()}


def compare(a: Path, b: Path) -> Comparison:
    """Compare the results folders `a` and `b`."""
    runs = []
    for folder in (a, b):
        if not (folder / "results.jsonl").is_file():
            raise UserError(f"{folder} is not a results folder (no results.jsonl)")
        runs.append(list(read_results(folder)))
    ra, rb = summarize(runs[0], folder=str(a)), summarize(runs[1], folder=str(b))
    by_model = set(ra.models) == set(rb.models)
    rates_a, rates_b = _rates(runs[0], by_model), _rates(runs[1], by_model)
    out = Comparison(ra, rb)
    for key in sorted(set(rates_a) | set(rates_b)):
        if key not in rates_b:
            out.only_a.append(key)
        elif key not in rates_a:
            out.only_b.append(key)
        elif rates_b[key] < rates_a[key]:
            out.regressed.append((key, rates_a[key], rates_b[key]))
        elif rates_b[key] > rates_a[key]:
            out.fixed.append((key, rates_a[key], rates_b[key]))
    return out


def print_comparison(console: Any, diff: Comparison) -> None:
    """The comparison in the terminal: each run's pass rate per model, then the cases that changed."""
    from rich.table import Table

    from ..markup import escape

    table = Table("run", "model", "pass rate", "errors", "cost", title="shou eval compare", title_justify="left")
    for name, report in (("A", diff.a), ("B", diff.b)):
        for m in report.models.values():
            cost = "unknown" if m.cost is None else f"${m.cost:.4f}"
            table.add_row(name, escape(m.model), f"{m.passed}/{m.samples} ({m.rate:.0%})", str(m.errors), cost)
    console.print(table)
    console.print(f"A: {escape(diff.a.folder)}\nB: {escape(diff.b.folder)}")
    for title, rows, colour in (("regressed", diff.regressed, "red"), ("fixed", diff.fixed, "green")):
        console.print(f"[{colour}]{title}: {len(rows)}[/]")
        for key, x, y in rows:
            console.print(f"  {escape(key)}: {x:.0%} -> {y:.0%}")
    for title, keys in (("only in A", diff.only_a), ("only in B", diff.only_b)):
        if keys:
            console.print(f"{title}: {', '.join(escape(k) for k in keys)}")
