"""`ask_user` under `shou serve`: the run waits (`waiting_input`), the wait survives a server restart, the
web page (Debian's Chromium, driven by Playwright) shows the question with its choices (in the chat and in
the sidebar's list), and the answer given
there resumes the run; the API answers the same way, and refuses what it must."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from ..fixtures.needs import need, need_module
from ..fixtures.serving import serving, stream_run
from .conftest import shou_env, tool_messages

need_module("playwright")

from playwright.async_api import Page, async_playwright, expect  # noqa: E402

from shou.errors import ToolError  # noqa: E402
from shou.tools.builtin._browser_session import find_chromium  # noqa: E402

try:
    CHROMIUM = find_chromium(None, None)
except ToolError as e:
    CHROMIUM = None
    need(False, str(e))

TASK = "Paint the shed"


def ask(question: str, choices: list[str]) -> dict:
    return {"tool_calls": [{"name": "ask_user", "arguments": {"question": question, "choices": choices}}]}


@pytest.fixture
async def page() -> AsyncIterator[Page]:
    errors: list[str] = []
    async with async_playwright() as pw:
        browser = await pw.chromium.launch(executable_path=CHROMIUM, args=["--disable-gpu", "--no-first-run"])
        try:
            pg = await browser.new_page(viewport={"width": 1280, "height": 800})
            pg.on("pageerror", lambda exc: errors.append(str(exc)))
            pg.set_default_timeout(20_000)
            yield pg
        finally:
            await browser.close()
    assert not errors, f"errors on the page: {errors}"


async def test_a_question_waits_survives_a_restart_and_the_page_answers_it(serve, tmp_path: Path,
                                                                            workspace: Path, page: Page) -> None:
    srv = serve([ask("Which colour?", ["red", "blue"]), {"text": "Painted it blue."}])
    env = shou_env(tmp_path, srv)
    with serving(workspace, env, "--ask-user") as served, served.client() as c:
        run = c.post("/v1/runs", json={"task": TASK, "session": "shed"}).json()
        events = stream_run(c, run["run_id"])  # up to its first run_finished: the wait
        kinds = [m["event"] for m in events if m["id"] is not None]
        assert "input_requested" in kinds and "tool_call_started" not in kinds
        assert events[-1]["data"]["status"] == "waiting_input"
        assert c.get(f"/v1/runs/{run['run_id']}").json()["status"] == "waiting_input"
    assert len(srv.requests) == 1

    with serving(workspace, env, "--ask-user") as served:  # a new process: the wait is in the log and the queue
        with served.client() as c:
            assert c.get(f"/v1/runs/{run['run_id']}").json()["status"] == "waiting_input"
            [q] = c.get("/v1/questions").json()["questions"]
            assert (q["question"], q["choices"], q["session"], q["run_id"]) == (
                "Which colour?", ["red", "blue"], "shed", run["run_id"])
        await page.goto(served.link)
        listed = page.locator("#questions .question")  # the sidebar lists it (GET /v1/questions)
        await expect(listed).to_have_count(1)
        await expect(listed.locator(".question-text")).to_have_text("Which colour?")
        await page.locator("#sessions li button").filter(has_text="shed").first.click()
        card = page.locator("#chat .question")
        await expect(card).to_have_count(1)
        await expect(card.locator(".question-text")).to_have_text("Which colour?")
        await expect(card.locator("button.choice")).to_have_text(["red", "blue"])
        await expect(page.locator("#chat .run-head .status")).to_have_text("waiting for your answer")
        await page.screenshot(path=str(tmp_path / "question.png"))
        await card.locator("button.choice", has_text="blue").click()
        await expect(card.locator(".answered")).to_contain_text("blue")
        await expect(page.locator("#chat .answer")).to_have_text("Painted it blue.", timeout=30_000)
        await expect(page.locator("#chat .run-head .status")).to_have_text("completed")
        await expect(listed).to_have_count(0)
        with served.client() as c:
            assert c.get(f"/v1/runs/{run['run_id']}").json()["status"] == "completed"
            assert c.get("/v1/questions").json()["questions"] == []
    assert len(srv.requests) == 2
    [result] = tool_messages(srv.requests[1])
    assert result["content"] == "blue"


def test_the_api_answers_and_refuses_what_it_must(serve, tmp_path: Path, workspace: Path) -> None:
    srv = serve([ask("Name the file?", []), {"text": "Called it notes.md."}])
    with serving(workspace, shou_env(tmp_path, srv), "--ask-user") as served, served.client() as c:
        run = c.post("/v1/runs", json={"task": "write notes"}).json()
        rid = run["run_id"]
        first = stream_run(c, rid)
        assert first[-1]["data"]["status"] == "waiting_input"
        assert c.post(f"/v1/runs/{rid}/answer", json={"text": 5}).status_code == 400
        assert c.post(f"/v1/runs/{rid}/answer", json={"text": "x", "extra": 1}).status_code == 400
        assert c.post("/v1/runs/nope/answer", json={"text": "x"}).status_code == 404
        assert c.post(f"/v1/runs/{rid}/answer", json={"text": "x", "call_id": "other"}).status_code == 404
        assert c.post(f"/v1/runs/{rid}/answer", json={"text": "x" * 20_001}).status_code == 400
        ok = c.post(f"/v1/runs/{rid}/answer", json={"text": "notes.md"})
        assert ok.status_code == 200, ok.text
        assert ok.json()["run_id"] == rid
        assert c.post(f"/v1/runs/{rid}/answer", json={"text": "again"}).status_code in (404, 409)
        rest = stream_run(c, rid, after=first[-1]["id"])
        kinds = [m["event"] for m in rest if m["id"] is not None]
        assert "input_answered" in kinds and "run_resumed" in kinds
        assert rest[-1]["data"]["status"] == "completed" and rest[-1]["data"]["answer"] == "Called it notes.md."
    assert tool_messages(srv.requests[1])[0]["content"] == "notes.md"


def test_without_the_flag_serve_offers_no_question(serve, tmp_path: Path, workspace: Path) -> None:
    srv = serve([{"text": "hi"}])
    with serving(workspace, shou_env(tmp_path, srv)) as served, served.client() as c:
        run = c.post("/v1/runs", json={"task": "hello"}).json()
        assert stream_run(c, run["run_id"])[-1]["data"]["status"] == "completed"
    assert "ask_user" not in [t["function"]["name"] for t in srv.requests[0].get("tools", [])]


def test_a_waiting_run_can_be_cancelled_and_its_question_goes(serve, tmp_path: Path, workspace: Path) -> None:
    srv = serve([ask("Which colour?", ["red", "blue"]), {"text": "never"}])
    with serving(workspace, shou_env(tmp_path, srv), "--ask-user") as served, served.client() as c:
        rid = c.post("/v1/runs", json={"task": TASK}).json()["run_id"]
        first = stream_run(c, rid)
        assert first[-1]["data"]["status"] == "waiting_input"
        assert c.post(f"/v1/runs/{rid}/cancel").status_code == 202
        rest = stream_run(c, rid, after=first[-1]["id"])
        assert rest[-1]["event"] == "run_finished" and rest[-1]["data"]["status"] == "cancelled"
        assert c.get("/v1/questions").json()["questions"] == []
        assert c.post(f"/v1/runs/{rid}/answer", json={"text": "blue"}).status_code == 404
    assert len(srv.requests) == 1
