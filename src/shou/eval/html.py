"""The evaluation's report as one self-contained HTML file (no script or style from anywhere else).

Everything from a run (answers, check details, model names) is untrusted text: it is escaped, never markup.
"""

from __future__ import annotations

import html

from .report import Report

__all__ = ["render_html"]


def _e(value: object) -> str:
    return html.escape(str(value), quote=True)


def render_html(report: Report) -> str:
    """The report page."""
    rows = []
    for m in report.models.values():
        lo, hi = m.interval
        rows.append(f"<tr><td>{_e(m.model)}</td><td>{m.passed}/{m.samples}</td><td>{m.rate:.1%} "
                    f"({lo:.1%}–{hi:.1%})</td><td>{m.errors}</td></tr>")
    cases = []
    for r in report.results:
        cases.append(f"<tr><td>{_e(r['case'])}</td><td>{_e(r['model'])}</td><td>{_e(r['epoch'])}</td>"
                     f"<td>{_e(r['outcome'])}</td><td>{_e(r['answer'][:300])}</td></tr>")
    return ("<!doctype html><html lang=en><meta charset=utf-8><title>shou eval</title>"
            "<h1>shou eval</h1><table id=models><tr><th>model<th>pass<th>rate (95% CI)<th>errors</tr>"
            + "".join(rows) + "</table><table id=cases><tr><th>case<th>model<th>epoch<th>outcome<th>answer</tr>"
            + "".join(cases) + "</table></html>")
