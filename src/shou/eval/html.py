"""The evaluation's report as one self-contained HTML file: no script, style, font or image from anywhere else,
so it works offline, opened as file://.

The per-model table is plain HTML (it reads without the script). The cases are data the page's small script
lays out (filters, pages of cases, a case's samples, a sample's transcript and trace built when opened): the
result lines in one JSON block, each embedded sample's sessions in a block of its own (parsed only when
opened) and the requests' contents in one shared block. Which samples' transcripts and traces are embedded is
bounded (`DetailLimits`): failures first, then a spread of passes, within a size budget; every other sample
says why it was left out and which command shows it.

Everything from a run (answers, tool output, file names, model names) is untrusted text: in HTML it is escaped;
in the JSON blocks `<`, `>`, `&`, U+2028 and U+2029 are \\u-escaped, so no text can end a block or start
markup; the script only ever sets text, never markup. The page's Content-Security-Policy lets only its own
script run (by hash) and loads nothing from the network, should any of that ever fail.
"""

from __future__ import annotations

import base64
import hashlib
import html
import json
import math
import re
import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any

from ..jsonfile import load_json
from .report import ModelSummary, Report
from .results import manifest_problem
from .transcripts import Contents, cap, read_sample

__all__ = ["DetailLimits", "render_html", "script_json"]

_ROW_TEXT = 2_000  # characters of an answer, error or check detail in the case list (the trace has more)
_ROW_FILES = 50  # files written, listed per sample in the case list


@dataclass(frozen=True)
class DetailLimits:
    """How many samples' transcripts and traces the page embeds: failed ones (errors included) first, then
    `passed` passes spread over the run, until `budget` characters of them are in."""

    failed: int = 300
    passed: int = 60
    budget: int = 16_000_000
    sample: int = 2_000_000  # one sample's most (a run of a thousand steps is left out, not the rest)


_UNSAFE = re.compile("[<>&\u2028\u2029\ud800-\udfff]")


def script_json(value: Any) -> str:
    """`value` as JSON that is safe inside a `<script>` element: no `<`, `>` or `&` (so no `</script>` or
    `<!--`), no U+2028/2029, and no lone surrogate (which UTF-8 cannot hold), each written as a \\u escape."""
    try:
        text = json.dumps(value, ensure_ascii=False, separators=(",", ":"), default=str, allow_nan=False)
    except ValueError:  # NaN or infinity, which JSON.parse refuses: null instead
        text = json.dumps(_finite(value), ensure_ascii=False, separators=(",", ":"), default=str)
    return _UNSAFE.sub(lambda m: f"\\u{ord(m.group()):04x}", text)


def _finite(value: Any) -> Any:
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, list | tuple):
        return [_finite(v) for v in value]
    if isinstance(value, dict):
        return {k: _finite(v) for k, v in value.items()}
    return value


def _e(value: object) -> str:
    """Text for HTML: escaped, and lone surrogates (from a result line's JSON) made U+FFFD."""
    return html.escape(re.sub("[\ud800-\udfff]", "\ufffd", str(value)), quote=True)


def _asset(name: str) -> str:
    return resources.files("shou.eval").joinpath(f"web/{name}").read_text(encoding="utf-8")


# ---------------------------------------------------------------------------------------------- figures


def _pct(x: float | None) -> str:
    return "–" if x is None else f"{x:.1%}"


def _money(cost: float | None) -> str:
    """As `shou trace` shows a cost: unknown is said, never shown as zero."""
    if cost is None:
        return "unknown"
    if cost == 0:
        return "$0"
    return f"${cost:.2f}" if cost >= 1 else f"${cost:.4f}" if cost >= 0.0001 else f"${cost:.6f}"


def _secs(x: float | None) -> str:
    if x is None:
        return "–"
    return f"{x:.2f} s" if x < 10 else f"{x:.1f} s" if x < 60 else f"{int(x // 60)}m{int(x % 60):02d}s"


def _ci(m: ModelSummary) -> str:
    """The pass rate, its interval in words and as a bar."""
    lo, hi = m.interval
    bar = (f'<span class="ci" aria-hidden="true"><span class="ci-range" style="left:{lo * 100:.2f}%;'
           f'width:{max(hi - lo, 0) * 100:.2f}%"></span><span class="ci-point" style="left:{m.rate * 100:.2f}%">'
           "</span></span>")
    return f'<span class="rate">{_pct(m.rate)}</span> <span class="dim">({_pct(lo)} – {_pct(hi)})</span>{bar}'


def _model_row(m: ModelSummary) -> str:
    k = m.epochs
    at_k = f"{_pct(m.pass_at(k))} <span class=dim>(k={k})</span>" if k > 1 else "–"
    spread = f"±{m.spread:.1%}" if m.spread is not None else "–"
    cells = [f"{m.samples:,}", f"{m.passed:,}", _ci(m), at_k, spread, f"{m.errors:,}", _money(m.cost),
             f"{m.tokens:,}", _secs(m.latency(0.5)), _secs(m.latency(0.95))]
    return f'<tr><th scope="row">{_e(m.model)}</th>' + "".join(f"<td>{c}</td>" for c in cells) + "</tr>"


def _models_table(report: Report) -> str:
    head = ["Model", "Samples", "Passed", "Pass rate (95% CI)", "pass@k", "Spread", "Errors", "Cost", "Tokens",
            "Latency p50", "Latency p95"]
    rows = "".join(_model_row(m) for m in report.models.values()) or \
        f'<tr><td colspan="{len(head)}">no samples ran</td></tr>'
    return ('<div class="scroll"><table id="models"><caption>Per model, over all its samples</caption><thead><tr>'
            + "".join(f'<th scope="col">{h}</th>' for h in head) + f"</tr></thead><tbody>{rows}</tbody></table></div>"
            '<p class="note">Pass rate: passed samples out of all (an error counts as not passed), with its 95% '
            "Wilson interval (the bar). pass@k: the chance that at least one of k epochs of a case passes, "
            "averaged over cases. Spread: the standard deviation of the pass rate across epochs. Latency: the "
            "quantiles of a sample's run time. A cost is unknown when a model has no price.</p>")


# ---------------------------------------------------------------------------------------------- samples


def _choose(results: Sequence[Mapping[str, Any]], limits: DetailLimits) -> list[int]:
    """The samples whose transcripts and traces are embedded, most wanted first: the failed ones in order,
    then passes spread evenly over the run (so every part of it, and each model, tends to have some)."""
    failed = [i for i, r in enumerate(results) if r.get("outcome") != "pass"][:limits.failed]
    passed = [i for i, r in enumerate(results) if r.get("outcome") == "pass"]
    if limits.passed <= 0:
        return failed
    step = max(1, math.ceil(len(passed) / limits.passed))
    return failed + passed[::step][:limits.passed]


def _row(r: Mapping[str, Any]) -> dict[str, Any]:
    """What the case list shows of a result line, its texts cut (results.jsonl has them whole)."""
    keep = ("sample", "case", "model", "epoch", "outcome", "score", "status", "steps", "tokens", "cost",
            "judge_cost", "latency", "workspace", "sessions", "tags")
    row = {k: r.get(k) for k in keep}
    wrote = r.get("wrote") if isinstance(r.get("wrote"), list) else []
    checks = r.get("checks") if isinstance(r.get("checks"), list) else []
    row.update(_cut({"answer": r.get("answer") or "", "answers": r.get("answers"), "error": r.get("error"),
                     "wrote": wrote[:_ROW_FILES], "checks": checks}))
    row["wrote_more"] = max(0, len(wrote) - _ROW_FILES)
    return row


def _cut(value: Any) -> Any:
    return cap(value, _ROW_TEXT, "results.jsonl")


@dataclass
class _Details:
    """The embedded samples' blocks, and what was left out and why."""

    blocks: list[str]
    embedded: dict[int, str]  # result index -> its block's id
    unreadable: int
    too_long: int
    contents: Contents
    past_budget: set[int]  # chosen, but the budget was spent before them


def _details(report: Report, limits: DetailLimits) -> _Details:
    """Read the chosen samples' logs one at a time (one session in memory at once), until the budget is spent."""
    out = _Details([], {}, 0, 0, Contents(), set())
    if not report.folder:
        return out
    folder = Path(report.folder)
    used = 0
    chosen = _choose(report.results, limits)
    for n, i in enumerate(chosen):
        if used >= limits.budget:
            out.past_budget.update(chosen[n:])
            break
        data = read_sample(folder, report.results[i], out.contents)
        block = script_json(data)
        if len(block) + out.contents.pending_size > limits.sample:
            out.contents.reject()
            out.too_long += 1
            block = script_json({"note": f"its transcript and trace take {len(block):,} characters, more than the "
                                         f"{limits.sample:,} the page gives one sample"})
        out.unreadable += "note" in data
        used += len(block) + out.contents.accept()
        out.embedded[i] = f"d{i}"
        out.blocks.append(f'<script type="application/json" id="d{i}">{block}</script>')
    return out


def _left_out(i: int, r: Mapping[str, Any], details: _Details, limits: DetailLimits, folder: str) -> str | None:
    if i in details.embedded:
        return None
    if not folder:
        return "the report was made without its results folder, where the session logs are"
    if i in details.past_budget:
        return f"the page's size limit ({limits.budget:,} characters of transcripts and traces) was reached"
    if r.get("outcome") == "pass":
        return f"the page holds the transcripts and traces of a sample of {limits.passed:,} passed samples"
    return f"the page holds the transcripts and traces of the first {limits.failed:,} failed samples"


# ---------------------------------------------------------------------------------------------- the page


def _manifest(folder: str) -> dict[str, Any]:
    try:
        data = load_json(Path(folder, "run.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    # a run.json edited by hand (a 'created' of 1e30 was an OverflowError): the page goes without its facts
    return data if manifest_problem(data) is None else {}


def _header(report: Report, manifest: Mapping[str, Any]) -> str:
    suite = manifest.get("suite") or ""
    facts = [f"{len(report.results):,} samples"]
    if report.not_run:
        facts.append(f"<strong>{report.not_run:,} not run</strong> (the budget ran out, or the run was stopped)")
    if manifest.get("epochs"):
        facts.append(f"{_e(manifest['epochs'])} epoch(s)")
    facts.append(f"total cost {_money(report.total_cost)}")
    if isinstance(manifest.get("created"), int | float):
        facts.append("started " + time.strftime("%Y-%m-%d %H:%M", time.localtime(manifest["created"])))
    if manifest.get("shou"):
        facts.append(f"shou {_e(manifest['shou'])}")
    return (f'<header><h1>shou {_e(manifest.get("kind") or "eval")}'
            + (f' <span class="suite">{_e(suite)}</span>' if suite else "") + "</h1>"
            + (f'<p class="folder"><code>{_e(report.folder)}</code></p>' if report.folder else "")
            + f'<p class="facts">{" · ".join(facts)}</p></header>')


def _embedded_note(report: Report, details: _Details, limits: DetailLimits) -> str:
    n = len(report.results)
    shown = len(details.embedded)
    text = f"Transcripts and traces of {shown:,} of the {n:,} samples are in this page"
    if shown < n:
        text += (f" (failed ones first, up to {limits.failed:,}, then a sample of up to {limits.passed:,} passed "
                 "ones, within a size limit); every other sample names the command that shows its own")
    text += "."
    if details.unreadable:
        text += (f" {details.unreadable:,} of them have a note instead: no readable session log (none was made, "
                 "it is missing or damaged, or the run kept it in a shared store).")
    if details.too_long:
        text += f" {details.too_long:,} were too long for the page: they name the commands that show them."
    return f'<p class="note" id="embedded-note">{_e(text)}</p>'


def _filters(report: Report) -> str:
    options = "".join(f'<option value="{_e(m)}">{_e(m)}</option>' for m in report.models)
    return ('<form id="filters" role="search">'
            '<label><input type="checkbox" id="failed-only"> Failed only</label>'
            f'<label>Model <select id="model-filter"><option value="">all models</option>{options}</select></label>'
            '<label>Search <input type="search" id="search" placeholder="case, answer, error, check…" '
            'autocomplete="off"></label></form>')


def _csp(script: str) -> str:
    digest = base64.b64encode(hashlib.sha256(script.encode("utf-8")).digest()).decode()
    return (f"default-src 'none'; script-src 'sha256-{digest}'; style-src 'unsafe-inline'; img-src data:; "
            "base-uri 'none'; form-action 'none'")


def _page(report: Report, limits: DetailLimits) -> Iterator[str]:
    script, style = _asset("report.js"), _asset("report.css")
    manifest = _manifest(report.folder) if report.folder else {}
    title = "shou eval" + (f": {manifest['suite']}" if manifest.get("suite") else "")
    yield (f'<!doctype html><html lang="en"><head><meta charset="utf-8">'
           '<meta name="viewport" content="width=device-width, initial-scale=1">'
           f'<meta http-equiv="Content-Security-Policy" content="{_csp(script)}">'
           f'<meta name="referrer" content="no-referrer"><title>{_e(title)}</title><style>{style}</style></head><body>')
    yield _header(report, manifest)
    yield '<main><section aria-labelledby="h-models"><h2 id="h-models">Models</h2>'
    yield _models_table(report)
    yield "</section>"
    details = _details(report, limits)
    yield '<section aria-labelledby="h-cases"><h2 id="h-cases">Cases</h2>'
    yield _embedded_note(report, details, limits)
    yield _filters(report)
    yield ('<p id="case-count" aria-live="polite"></p><div class="scroll"><table id="cases"><caption>Each case, '
           "by each model (one mark per epoch: ✓ pass, ✗ fail, ! error). Open a case for its samples.</caption>"
           '<thead></thead><tbody></tbody></table></div><button type="button" id="more" hidden>Show more cases'
           "</button><noscript><p>The case list needs JavaScript; results.jsonl in the results folder holds every "
           "sample.</p></noscript></section></main>")
    # the rows one at a time: the page's text grows, no second copy of every result is made first
    yield (f'<script type="application/json" id="data">{{"folder":{script_json(report.folder)},"models":'
           f'{script_json(list(report.models))},"rows":[')
    for i, r in enumerate(report.results):
        left_out = _left_out(i, r, details, limits, report.folder)
        row = {**_row(r), "detail": details.embedded.get(i), "left_out": left_out}
        yield ("," if i else "") + script_json(row)
    yield "]}</script>"
    yield from details.blocks
    yield f'<script type="application/json" id="contents">{script_json(details.contents.items)}</script>'
    yield f"<script>{script}</script></body></html>"


def render_html(report: Report, *, limits: DetailLimits | None = None) -> str:
    """The report page of `report` (its sessions are read from `report.folder`, when it names one)."""
    return "".join(_page(report, limits or DetailLimits()))
