"""The Agent through the real HTTP client: concurrency, guards, cancellation, state kept valid."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import pytest

from shou import Agent, Session, SQLiteStore, ToolContext, tool
from shou.events import RunFinished
from shou.models.openai_compat import OpenAICompatible
from shou.models.runtime import RetryPolicy


def model_for(srv) -> OpenAICompatible:
    return OpenAICompatible("m", base_url=srv.base_url, retry=RetryPolicy(max_retries=1, base=0.01))


def assert_valid_conversation(wire: list[dict]) -> None:
    """Every tool call is answered by a tool message before the conversation moves on, and vice versa."""
    open_ids: list[str] = []
    for m in wire:
        if m["role"] == "tool":
            assert m["tool_call_id"] in open_ids, f"orphan tool result {m['tool_call_id']}"
            open_ids.remove(m["tool_call_id"])
            continue
        assert not open_ids or (m["role"] == "user" and isinstance(m["content"], list)), f"unanswered {open_ids}"
        if m["role"] == "assistant":
            open_ids = [c["id"] for c in m.get("tool_calls") or []]
    assert not open_ids


async def test_two_calls_in_one_turn_overlap_and_return_in_call_order(serve, workspace: Path) -> None:
    spans: dict[str, list[float]] = {}

    @tool
    async def nap(tag: str, seconds: float) -> str:
        """Sleep a while."""
        spans[tag] = [time.monotonic()]
        await asyncio.sleep(seconds)
        spans[tag].append(time.monotonic())
        return f"{tag} done"

    srv = serve([
        {"tool_calls": [{"name": "nap", "arguments": {"tag": "slow", "seconds": 0.6}, "id": "c1"},
                        {"name": "nap", "arguments": {"tag": "fast", "seconds": 0.1}, "id": "c2"}]},
        {"text": "both done"},
    ])
    result = await Agent(model_for(srv), [nap], workspace=workspace).arun("nap twice")
    assert result.status == "completed"
    assert spans["fast"][0] < spans["slow"][1] and spans["slow"][0] < spans["fast"][1]  # overlap
    assert spans["fast"][1] < spans["slow"][1]  # fast finished first ...
    tools = [(m["tool_call_id"], m["content"]) for m in srv.requests[1]["messages"] if m["role"] == "tool"]
    assert tools == [("c1", "slow done"), ("c2", "fast done")]  # ... yet results come back in call order


async def test_max_steps(serve, workspace: Path) -> None:
    srv = serve([{"tool_calls": [{"name": "calculator", "arguments": {"expression": f"{i}+1"}}]} for i in range(5)])
    from shou.tools.builtin.calc import calculator

    result = await Agent(model_for(srv), [calculator], max_steps=3, workspace=workspace).arun("count")
    assert (result.status, result.steps, len(srv.requests)) == ("max_steps", 3, 3)
    assert "3 steps" in (result.error or "")


async def test_deadline_stops_a_run_and_leaves_the_conversation_valid(serve, workspace: Path) -> None:
    @tool(timeout=60)
    async def slow(ctx: ToolContext) -> str:
        """Slow."""
        await asyncio.sleep(60)
        return "x"

    srv = serve([{"tool_calls": [{"name": "slow", "arguments": {}}]}, {"text": "hello again"}])
    store = SQLiteStore.for_workspace(workspace)
    agent = Agent(model_for(srv), [slow], run_timeout=0.5, workspace=workspace, store=store)
    t0 = time.monotonic()
    result = await agent.arun("be slow", "sess")
    assert result.status == "timeout" and time.monotonic() - t0 < 30  # the tool sleeps 60 s: only the deadline
    agent.run_timeout = 30
    again = await agent.arun("continue", "sess")  # same session: the interrupted call must be answered
    assert again.status == "completed"
    wire = srv.requests[1]["messages"]
    assert_valid_conversation(wire)
    assert "the run ended (timeout)" in next(m for m in wire if m["role"] == "tool")["content"]
    store.close()


async def test_stopping_the_stream_cancels_the_run_and_records_it(serve, workspace: Path) -> None:
    # The stream stalls halfway, so the run cannot finish on its own before the consumer stops it (a reply
    # that arrives whole could be played to the end before the generator is closed, on a busy machine).
    srv = serve([{"text": "a long answer " * 50, "chunk_size": 5, "stall": 5}])
    store = SQLiteStore.for_workspace(workspace)
    agent = Agent(model_for(srv), [], workspace=workspace, store=store)
    async for event in agent.stream("talk", "cancel-me"):
        if event.type == "text_delta":
            break
    # The abandoned generator is closed by the loop, a few turns later; wait for the run's last event (a run
    # that is never closed leaves none, and the stall is 5 s, so a run that went on ends "completed").
    deadline = time.monotonic() + 30
    while not isinstance(list(store.events("cancel-me"))[-1], RunFinished) and time.monotonic() < deadline:
        await asyncio.sleep(0.02)
    last = list(store.events("cancel-me"))[-1]
    assert isinstance(last, RunFinished) and last.status == "cancelled"
    store.close()


async def test_model_error_ends_the_run_with_status_error(serve, workspace: Path) -> None:
    srv = serve([{"error": 404}])
    result = await Agent(model_for(srv), [], workspace=workspace).arun("x")
    assert result.status == "error" and "was not found" in (result.error or "")


async def test_token_budget(serve, workspace: Path) -> None:
    from shou.tools.builtin.calc import calculator

    turn = {"tool_calls": [{"name": "calculator", "arguments": {"expression": "1"}}],
            "usage": {"prompt_tokens": 600, "completion_tokens": 10}}
    srv = serve([turn, {**turn, "tool_calls": [{"name": "calculator", "arguments": {"expression": "2"}}]}])
    result = await Agent(model_for(srv), [calculator], token_budget=1000, workspace=workspace).arun("x")
    # Checked before each call: after the first (610 tokens), the provider's count shows shou's estimate of
    # the prompt runs low, and the second call's prompt alone would not fit; it is never made.
    assert (result.status, result.steps, len(srv.requests)) == ("budget", 1, 1), result.error
    assert "token-budget of 1,000" in (result.error or "") and "610 tokens" in (result.error or "")
    assert srv.requests[0]["max_tokens"] <= 1000  # the first call's reply was capped to what the budget had


def test_sync_run_twice_on_one_agent(serve, workspace: Path) -> None:
    srv = serve([{"text": "one"}, {"text": "two"}])
    agent = Agent(model_for(srv), [], workspace=workspace)
    session = Session("s")
    assert agent.run("first", session).answer == "one"
    assert agent.run("second", session).answer == "two"  # a fresh event loop, a fresh connection pool
    assert [m["content"] for m in srv.requests[1]["messages"][1:]] == ["first", "one", "second"]


async def test_images_reach_vision_models_and_text_reaches_the_others(serve, workspace: Path) -> None:
    from shou import ImagePart, ToolResult

    @tool
    def snap() -> ToolResult:
        """Take a picture."""
        return ToolResult("Screenshot of Demo", image=ImagePart.from_bytes(b"\x89PNG fake"),
                          details={"page_text": "Hello from the page"})

    for vision in (True, False):
        srv = serve([{"tool_calls": [{"name": "snap", "arguments": {}}]}, {"text": "I see it."}])
        result = await Agent(model_for(srv), [snap], workspace=workspace, vision=vision).arun("look")
        assert result.status == "completed"
        sent = srv.requests[1]["messages"]
        assert_valid_conversation(sent)
        parts = [p for m in sent if isinstance(m["content"], list) for p in m["content"]]
        tool_text = next(m["content"] for m in sent if m["role"] == "tool")
        if vision:
            assert any(p["type"] == "image_url" and p["image_url"]["url"].startswith("data:image/png;base64,")
                       for p in parts)
            assert "Hello from the page" not in tool_text
        else:
            assert parts == []
            assert "cannot see images" in tool_text and "Hello from the page" in tool_text


async def test_working_memory_is_always_in_context_and_persists(serve, workspace: Path) -> None:
    from shou.tools.builtin.working_memory import working_memory

    srv = serve([
        {"tool_calls": [{"name": "working_memory", "arguments": {"content": "user prefers metric units"}}]},
        {"tool_calls": [{"name": "working_memory", "arguments": {"content": "budget is 300 EUR"}}]},
        {"text": "Noted."},
        {"text": "300 EUR, metric."},
    ])
    store = SQLiteStore.for_workspace(workspace)
    agent = Agent(model_for(srv), [working_memory], workspace=workspace, store=store)
    assert (await agent.arun("remember my preferences", "wm")).status == "completed"
    assert "user prefers metric units" in srv.requests[1]["messages"][0]["content"]
    store.close()
    store = SQLiteStore.for_workspace(workspace)  # as a new process would
    again = Agent(model_for(srv), [working_memory], workspace=workspace, store=store)
    assert again.session("wm").working_memory == "user prefers metric units\nbudget is 300 EUR"
    assert (await again.arun("what do you know?", "wm")).status == "completed"
    system = srv.requests[3]["messages"][0]["content"]
    assert "## Working memory" in system and "budget is 300 EUR" in system
    store.close()


async def test_agents_md_and_memory_md_reach_the_system_message(serve, workspace: Path, tmp_path: Path,
                                                                monkeypatch: pytest.MonkeyPatch) -> None:
    from shou.instructions import instruction_files
    from shou.trust import TrustStore

    (workspace / ".shou").mkdir(exist_ok=True)
    (workspace / ".shou" / "AGENTS.md").write_text("Always answer in French.")
    (workspace / ".shou" / "MEMORY.md").write_text("The project is called Heron.")
    monkeypatch.setenv("SHOU_CONFIG_DIR", str(tmp_path / "config"))
    for path, data in instruction_files(workspace).items():  # what `shou trust` records
        TrustStore(tmp_path / "config").trust(path, data)
    srv = serve([{"text": "Bonjour."}])
    assert (await Agent(model_for(srv), [], workspace=workspace).arun("hello")).status == "completed"
    system = srv.requests[0]["messages"][0]["content"]
    assert "Always answer in French." in system and "The project is called Heron." in system
