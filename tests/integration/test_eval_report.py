"""The HTML report of `shou eval`, opened as file:// in Debian's Chromium by Playwright: the per-model table,
a failed case opened down to its transcript and trace, a hostile answer, tool output and file name that run
nothing, sessions whose log is missing or damaged, and a run of 10,000 samples.

The evaluation is real (the oracle plays each case's solution, a scripted model answers 42 whatever it is
asked), so the transcripts and traces come from real session logs."""

from __future__ import annotations

import json
import os
import re
import shutil
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from ..fixtures.needs import need, need_module

need_module("playwright")

from playwright.async_api import Page, async_playwright, expect  # noqa: E402

from shou.errors import ToolError  # noqa: E402
from shou.eval import Case, Report, Suite, answer_contains, run_suite  # noqa: E402
from shou.eval.html import DetailLimits, render_html, script_json  # noqa: E402
from shou.eval.report import summarize  # noqa: E402
from shou.eval.results import read_results  # noqa: E402
from shou.tools.builtin._browser_session import find_chromium  # noqa: E402

try:  # how shou itself finds the browser: SHOU_BROWSER_EXECUTABLE, else the system's Chromium
    CHROMIUM = find_chromium(None, None)
except ToolError as e:
    CHROMIUM = None
    need(False, str(e))

ARGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-component-update",
        "--no-first-run"]
# Hostile text in every place a run can put it: the answer, a tool's arguments and output, a file's name.
TAG = '<img src=x onerror="window.pwned=1">'
CLOSE = "</script><script>window.pwned=1</script>"
HOSTILE_FILE = TAG + ".txt"
HOSTILE_ANSWER = f"done {CLOSE} {TAG} \u2028<!-- &amp;"
SCRIPTED = "scripted-42"


def calc(expression: str) -> dict[str, Any]:
    return {"tool_calls": [{"name": "calculator", "arguments": {"expression": expression}}]}


def tool(name: str, **arguments: str) -> dict[str, Any]:
    return {"tool_calls": [{"name": name, "arguments": arguments}]}


SUITE = Suite("report-demo", [
    Case("add", "What is 2+3?", checks=[answer_contains("5")], solution=[calc("2+3"), {"text": "5"}]),
    Case("mul", "What is 6*7?", checks=[answer_contains("42")], solution=[calc("6*7"), {"text": "42"}]),
    Case("hostile", "Write the file, read it back, then answer.", checks=[answer_contains("never said")],
         solution=[tool("write_file", path=HOSTILE_FILE, content=CLOSE), tool("read_file", path=HOSTILE_FILE),
                   {"text": HOSTILE_ANSWER}]),
])


@pytest.fixture(scope="module")
def evaluated(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Report, Path]]:
    """The suite by the oracle, by a scripted model that calls the calculator and answers 42, and by a model
    whose script is missing (every sample an error), two epochs each; its report and results folder."""
    root = tmp_path_factory.mktemp("eval-report")
    script = root / f"{SCRIPTED}.json"
    script.write_text(json.dumps([calc("6*7"), {"text": "42"}]))
    models = ["oracle", f"scripted:{script}", f"scripted:{root / 'missing.json'}"]
    with pytest.MonkeyPatch.context() as mp:
        for name in list(os.environ):
            if name.startswith(("SHOU_", "OPENAI_")) or name.endswith("_API_KEY"):
                mp.delenv(name)
        mp.setenv("SHOU_CONFIG_DIR", str(root / "config"))
        mp.setenv("HOME", str(root))
        mp.chdir(root)
        report = run_suite(SUITE, models=models, epochs=2, jobs=2, out=root / "results")
    yield report, root / "results"


@pytest.fixture
async def browser() -> AsyncIterator[Any]:
    async with async_playwright() as pw:
        b = await pw.chromium.launch(executable_path=CHROMIUM, args=ARGS)
        try:
            yield b
        finally:
            await b.close()


async def open_report(browser: Any, path: Path, *, width: int = 1280, bypass_csp: bool = False) -> Page:
    """The report in a fresh page; any script error on it fails the test (see `no_errors`)."""
    context = await browser.new_context(viewport={"width": width, "height": 900}, bypass_csp=bypass_csp)
    page = await context.new_page()
    errors: list[str] = []
    page.on("pageerror", lambda exc: errors.append(str(exc)))
    page.on("console", lambda msg: errors.append(msg.text) if msg.type == "error" else None)
    page.set_default_timeout(20_000)
    await page.goto(path.resolve().as_uri())
    await expect(page.locator("html")).to_have_attribute("data-ready", "1")
    page.errors = errors  # type: ignore[attr-defined]
    return page


def no_errors(page: Page) -> None:
    errors = page.errors  # type: ignore[attr-defined]
    assert not errors, f"errors on the page: {errors}"


def model_named(report: Report, prefix: str) -> str:
    return next(m for m in report.models if m.startswith(prefix))


async def open_sample(page: Page, case: str, model: str, epoch: int) -> Any:
    """Open `case`'s row and its sample by `model` in `epoch`; the sample's <details>."""
    button = page.locator("#cases button.case").filter(has_text=re.compile(f"^{re.escape(case)}$"))
    if await button.get_attribute("aria-expanded") != "true":
        await button.click()
    samples = page.locator(f"#{await button.get_attribute('aria-controls')} details.sample")
    sample = samples.filter(has_text=f"{model} · epoch {epoch} ")
    await expect(sample).to_have_count(1)
    await sample.locator("summary").first.click()
    return sample


async def test_the_model_table_shows_each_models_figures(evaluated: tuple[Report, Path], browser: Any) -> None:
    report, folder = evaluated
    page = await open_report(browser, folder / "report.html")
    rows = page.locator("#models tbody tr")
    await expect(rows).to_have_count(3)
    headers = await page.locator("#models thead th").all_text_contents()
    assert headers[:4] == ["Model", "Samples", "Passed", "Pass rate (95% CI)"]
    for i, m in enumerate(report.models.values()):
        cells = rows.nth(i).locator("th, td")
        await expect(cells.nth(0)).to_have_text(m.model)
        await expect(cells.nth(1)).to_have_text("6")
        await expect(cells.nth(2)).to_have_text(str(m.passed))
        lo, hi = m.interval
        await expect(cells.nth(3)).to_have_text(f"{m.rate:.1%} ({lo:.1%} – {hi:.1%})")
        await expect(cells.nth(4)).to_have_text(f"{m.pass_at(2):.1%} (k=2)")
        await expect(cells.nth(6)).to_have_text(str(m.errors))
        # no price for these models: said, not $0 (the broken one made no model call: it did cost nothing)
        await expect(cells.nth(7)).to_have_text("$0" if m.model.endswith("missing.json") else "unknown")
        await expect(cells.nth(8)).to_have_text(f"{m.tokens:,}")
        p50, p95 = m.latency(0.5), m.latency(0.95)
        if m.model.endswith("missing.json"):  # its samples never ran: no latency to show, not a zero
            assert p50 is None and p95 is None
            await expect(cells.nth(9)).to_have_text("–")
            continue
        assert p50 is not None and p95 is not None
        await expect(cells.nth(9)).to_have_text(f"{p50:.2f} s")
        await expect(cells.nth(10)).to_have_text(f"{p95:.2f} s")
    # what the run did, as the figures say: the oracle passes add and mul, fails hostile (its check wants
    # words it never says); the scripted model passes mul only; the missing script errs every time
    oracle, scripted, broken = report.models.values()
    assert (oracle.passed, scripted.passed, broken.errors) == (4, 2, 6)
    await expect(rows.nth(0).locator("td").nth(1)).to_have_text("4")
    await expect(rows.nth(2).locator("td").nth(5)).to_have_text("6")
    no_errors(page)


async def test_a_failed_case_opens_to_its_transcript_and_trace(evaluated: tuple[Report, Path], browser: Any) -> None:
    report, folder = evaluated
    page = await open_report(browser, folder / "report.html")
    scripted = model_named(report, "scripted:")
    add = page.locator("#cases tr.case").filter(has=page.locator("button.case", has_text="add"))
    await expect(add.locator(".mark.fail")).to_have_count(2)  # the scripted model's two epochs
    sample = await open_sample(page, "add", scripted, 1)
    await expect(sample.locator(".badge.fail").first).to_be_visible()
    await expect(sample.locator("pre.answer")).to_have_text("42")
    check = sample.locator("table.checks tbody tr")
    await expect(check).to_contain_text("answer contains '5'")
    await expect(check).to_contain_text("failed")
    await expect(check).to_contain_text("the answer was '42'")

    await sample.locator("details.transcript > summary").click()
    transcript = sample.locator("details.transcript")
    await expect(transcript.locator(".msg.user pre")).to_have_text("What is 2+3?")
    assistant = transcript.locator(".msg.assistant")
    await expect(assistant).to_have_count(2)
    await expect(assistant.nth(0).locator(".call-name")).to_have_text("→ calculator")
    await expect(assistant.nth(0).locator("pre")).to_have_text('{\n  "expression": "6*7"\n}')
    await expect(transcript.locator(".msg.tool pre")).to_have_text("42")  # the real calculator ran
    await expect(assistant.nth(1).locator("pre")).to_have_text("42")

    await sample.locator("details.trace > summary").click()
    trace = sample.locator("details.trace")
    await expect(trace.locator("tr.model-call")).to_have_count(2)
    await expect(trace.locator("tr.tool-call")).to_have_count(1)
    await expect(trace.locator("tr.tool-call")).to_contain_text("→ calculator")
    call = trace.locator("tr.model-call").first
    await expect(call.locator("td").nth(3)).to_have_text("unknown")
    await expect(trace).to_contain_text("completed · 2 steps · 2 model calls · 1 tool call")
    # the model call's full request: the system prompt, the task, and the tools it offered
    await call.locator("details.part > summary").first.click()
    request = call.locator("details.part").first
    await expect(request.locator(".msg.system")).to_contain_text("You are shou")
    await expect(request.locator(".msg.user")).to_have_text("userWhat is 2+3?")
    await expect(request.locator("details.part > summary")).to_contain_text("calculator")
    no_errors(page)


async def test_filters_failed_only_by_model_and_by_text(evaluated: tuple[Report, Path], browser: Any) -> None:
    folder = evaluated[1]
    page = await open_report(browser, folder / "report.html")
    cases = page.locator("#cases tbody tr.case")
    await expect(cases).to_have_count(3)
    await page.locator("#model-filter").select_option("oracle")
    await expect(page.locator("#cases thead th")).to_have_text(["Case", "oracle"])
    await page.locator("#failed-only").check()
    await expect(cases).to_have_count(1)  # the oracle fails hostile only
    await expect(cases.locator("button.case")).to_have_text("hostile")
    await page.locator("#model-filter").select_option("")
    await expect(cases).to_have_count(3)  # the broken model fails every case
    await page.locator("#failed-only").uncheck()
    await page.locator("#search").fill("the answer was '42'")  # a check's detail
    await expect(cases.locator("button.case")).to_have_text(["add", "hostile"])
    await expect(page.locator("#case-count")).to_have_text("2 of 3 cases")
    no_errors(page)


async def test_a_hostile_answer_tool_output_and_file_name_run_nothing(evaluated: tuple[Report, Path],
                                                                     browser: Any) -> None:
    folder = evaluated[1]
    text = (folder / "report.html").read_text(encoding="utf-8")
    assert CLOSE not in text and TAG not in text and "\u2028" not in text
    # CSP off: what is tested is that nothing from the run becomes markup, not that the policy blocks it
    page = await open_report(browser, folder / "report.html", bypass_csp=True)
    sample = await open_sample(page, "hostile", "oracle", 1)
    await expect(sample.locator("pre.answer")).to_have_text(HOSTILE_ANSWER)
    await expect(sample.locator("ul.files li")).to_have_text(HOSTILE_FILE)
    await sample.locator("details.transcript > summary").click()
    await expect(sample.locator(".msg.tool pre").nth(1)).to_have_text(CLOSE)  # read_file's output
    await sample.locator("details.trace > summary").click()
    for part in await sample.locator("details.trace details.part > summary").all():
        await part.click()  # every request and response, with the hostile messages in them
    await expect(sample.locator("details.trace tr.tool-call").nth(0)).to_contain_text(HOSTILE_FILE)
    found = await page.evaluate("""() => ({
        pwned: window.pwned === undefined ? null : window.pwned,
        images: document.images.length,
        running: [...document.scripts].filter(s => s.type !== "application/json").length,
        comments: document.createTreeWalker(document, NodeFilter.SHOW_COMMENT).nextNode() !== null,
    })""")
    assert found == {"pwned": None, "images": 0, "running": 1, "comments": False}
    no_errors(page)


async def test_the_pages_policy_runs_no_script_but_its_own(evaluated: tuple[Report, Path], browser: Any,
                                                           tmp_path: Path) -> None:
    """Should escaping ever fail, the Content-Security-Policy still runs no planted script and loads nothing."""
    folder = evaluated[1]
    text = (folder / "report.html").read_text(encoding="utf-8")
    planted = text.replace("</main>", f'</main>{CLOSE}<img src="https://example.invalid/x.png" '
                                      'onerror="window.pwned=2">', 1)
    (tmp_path / "planted.html").write_text(planted, encoding="utf-8")
    page = await open_report(browser, tmp_path / "planted.html")
    assert await page.evaluate("window.pwned === undefined")
    await expect(page.locator("#cases tbody tr.case")).to_have_count(3)  # its own script ran


def test_script_json_is_safe_inside_a_script_element() -> None:
    text = script_json({"a": f"{CLOSE}<!--\u2028\u2029&", "k<": ["\ud800"]})
    assert not any(c in text for c in "<>&\u2028\u2029")
    assert json.loads(text) == {"a": f"{CLOSE}<!--\u2028\u2029&", "k<": ["\ud800"]}
    text.encode("utf-8")  # a lone surrogate is escaped, not left for the file's encoding to fail on


@given(st.recursive(st.none() | st.booleans() | st.integers() | st.text(),
                    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(), inner, max_size=4)))
def test_script_json_round_trips_anything(value: Any) -> None:
    text = script_json(value)
    assert json.loads(text) == value
    assert not any(c in text for c in "<>&\u2028\u2029")


async def test_a_missing_or_damaged_session_log_gets_a_note(evaluated: tuple[Report, Path], browser: Any,
                                                            tmp_path: Path) -> None:
    report, source = evaluated
    folder = tmp_path / "results"
    shutil.copytree(source, folder, symlinks=True)
    scripted = model_named(report, "scripted:")
    lines = {(r["case"], r["model"], r["epoch"]): r for r in read_results(folder)}
    gone = folder / lines[("add", scripted, 1)]["workspace"] / ".shou"
    shutil.rmtree(gone)
    damaged = folder / lines[("add", scripted, 2)]["workspace"] / ".shou" / "shou.db"
    for extra in damaged.parent.glob("shou.db-*"):
        extra.unlink()
    damaged.write_bytes(b"this is not a database" * 200)

    again = summarize(read_results(folder), report.models, str(folder))
    (folder / "report.html").write_text(render_html(again), encoding="utf-8")
    page = await open_report(browser, folder / "report.html")
    await expect(page.locator("#embedded-note")).to_contain_text("8 of them have a note instead")  # 6 errors, 2 here
    missing = await open_sample(page, "add", scripted, 1)
    await expect(missing.locator("p.unreadable")).to_contain_text("no session log at")
    await expect(missing.locator("pre.cmds")).to_contain_text("shou trace 'add@")
    broken = await open_sample(page, "add", scripted, 2)
    await expect(broken.locator("p.unreadable")).to_contain_text("could not be read")
    fine = await open_sample(page, "mul", scripted, 1)  # the others are as they were
    await fine.locator("details.transcript > summary").click()
    await expect(fine.locator(".msg.user pre")).to_have_text("What is 6*7?")
    no_errors(page)


def page_data(text: str) -> dict[str, Any]:
    """The case list's data, as the page's script reads it."""
    found = re.search(r'<script type="application/json" id="data">(.*?)</script>', text)
    assert found is not None
    return json.loads(found.group(1))


def test_a_sample_too_long_or_past_the_budget_is_left_out_saying_so(evaluated: tuple[Report, Path]) -> None:
    report = evaluated[0]
    text = render_html(report, limits=DetailLimits(sample=3_000))
    assert "were too long for the page" in text
    assert '<script type="application/json" id="contents">{}</script>' in text  # theirs left nothing behind
    blocks = re.findall(r'<script type="application/json" id="d[0-9]+">(.*?)</script>', text)
    notes = [json.loads(b).get("note", "") for b in blocks]
    with_logs = sum(1 for r in report.results if r["outcome"] != "error")  # the broken model's have none
    assert sum("more than the 3,000 the page gives one sample" in n for n in notes) == with_logs

    rows = page_data(render_html(report, limits=DetailLimits(budget=1)))["rows"]
    assert sum(r["detail"] is not None for r in rows) == 1  # the first one spends the budget
    assert all("size limit" in r["left_out"] for r in rows if r["detail"] is None)  # all were chosen: few

    rows = page_data(render_html(summarize(report.results, report.models)))["rows"]  # no folder: no logs
    assert all(r["detail"] is None and "without its results folder" in r["left_out"] for r in rows)


def synthetic(n_cases: int, models: tuple[str, ...] = ("a", "b"), epochs: int = 2) -> list[dict[str, Any]]:
    """Result lines without sessions: every third sample fails, every seventh errs."""
    rows = []
    for c in range(n_cases):
        for m in models:
            for e in range(1, epochs + 1):
                i = len(rows)
                outcome = "error" if i % 7 == 0 else "fail" if i % 3 == 0 else "pass"
                key = f"c{c}@{m}#{e}"
                rows.append({"sample": key, "case": f"c{c}", "model": m, "epoch": e, "outcome": outcome,
                             "passed": outcome == "pass", "score": float(outcome == "pass"), "status": "completed",
                             "answer": f"answer {i} " + "x" * 3000, "answers": None, "steps": 2,
                             "tokens": {"input": 100, "output": 20, "total": 120}, "cost": 0.0005,
                             "judge_cost": 0.0, "latency": 1.0 + i % 10, "sessions": [key], "session": key,
                             "workspace": f"work/{key}", "wrote": [], "checks": [], "error": None, "tags": []})
    return rows


async def test_ten_thousand_samples_stay_bounded_and_usable(browser: Any, tmp_path: Path) -> None:
    rows = synthetic(2500)
    assert len(rows) == 10_000
    report = summarize(rows, ["a", "b"], str(tmp_path))
    limits = DetailLimits(failed=40, passed=10)
    text = render_html(report, limits=limits)
    assert len(re.findall(r'type="application/json" id="d[0-9]', text)) == 50  # failures first, then a spread of passes
    assert len(text) < 30_000_000  # answers are cut in the case list: 10,000 of them, 3,000 characters each
    (tmp_path / "report.html").write_text(text, encoding="utf-8")
    page = await open_report(browser, tmp_path / "report.html")
    await expect(page.locator("#case-count")).to_have_text("2,500 of 2,500 cases, the first 100 shown")
    await expect(page.locator("#cases tbody tr.case")).to_have_count(100)
    await page.locator("#more").click()
    await expect(page.locator("#cases tbody tr.case")).to_have_count(200)
    await expect(page.locator("#models tbody tr").first).to_contain_text("$2.50")  # 5,000 samples at $0.0005
    # a pass that was not embedded says why and how to see it; its answer is cut, saying where it is whole
    assert rows[9998]["sample"] == "c2499@b#1" and rows[9998]["outcome"] == "pass"
    await page.locator("#search").fill("c2499")
    sample = await open_sample(page, "c2499", "b", 1)
    await expect(sample).to_contain_text("a sample of 10 passed samples")
    await expect(sample.locator("pre.answer")).to_contain_text("[cut: 3,012 characters in all; results.jsonl has")
    ws = tmp_path / "work" / "c2499@b#1"
    await expect(sample.locator("pre.cmds")).to_have_text(
        f"shou show 'c2499@b#1' -w '{ws}'\nshou trace 'c2499@b#1' -w '{ws}'")
    no_errors(page)


async def test_the_page_fits_a_phone(evaluated: tuple[Report, Path], browser: Any) -> None:
    report, folder = evaluated
    page = await open_report(browser, folder / "report.html", width=375)
    sample = await open_sample(page, "add", model_named(report, "scripted:"), 1)
    await sample.locator("details.transcript > summary").click()
    # the page itself does not scroll sideways: wide tables scroll in their own box
    width = await page.evaluate("document.documentElement.scrollWidth")
    assert width <= 375
    no_errors(page)
