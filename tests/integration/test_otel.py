"""A real run exported over OTLP/HTTP to a loopback collector: GenAI spans, content only when asked, and a
collector that never answers costs the run nothing."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from shou import Agent, SQLiteStore
from shou.events import RunFinished, ToolCallFinished
from shou.models.openai_compat import OpenAICompatible
from shou.models.scripted_server import ScriptedServer
from shou.observe.otel import OtelObserver, otel_from_settings
from shou.tools.builtin.calc import calculator
from tests.fixtures.otlp_collector import SPAN_KIND_CLIENT, SPAN_KIND_INTERNAL, STATUS_ERROR, OtlpCollector

SCRIPT = [
    {"tool_calls": [{"name": "calculator", "arguments": {"expression": "123 * 45"}, "id": "call_1"}],
     "usage": {"prompt_tokens": 30, "completion_tokens": 12}},
    {"text": "123 * 45 = 5535.", "usage": {"prompt_tokens": 52, "completion_tokens": 9}},
]
CONTENT_KEYS = {"gen_ai.input.messages", "gen_ai.output.messages", "gen_ai.tool.call.arguments",
                "gen_ai.tool.call.result"}


@pytest.fixture
def collector() -> Iterator[OtlpCollector]:
    with OtlpCollector() as c:
        yield c


@pytest.fixture
def scripted() -> Iterator[ScriptedServer]:
    srv = ScriptedServer(SCRIPT).start()
    yield srv
    srv.close()


async def run_with(observer: OtelObserver, srv: ScriptedServer, tmp_path: Path) -> tuple[str, SQLiteStore]:
    model = OpenAICompatible("scripted", base_url=srv.base_url, api_key="k", provider="openai")
    store = SQLiteStore(tmp_path / "s.db")
    agent = Agent(model, [calculator], workspace=tmp_path, store=store, observers=[observer])
    result = await agent.arun("What is 123 * 45?", "otel")
    assert result.status == "completed" and "5535" in result.answer
    return result.run_id, store


async def test_a_run_is_exported_as_genai_spans(collector: OtlpCollector, scripted: ScriptedServer,
                                                tmp_path: Path) -> None:
    observer = OtelObserver(endpoint=collector.endpoint)
    try:
        run_id, store = await run_with(observer, scripted, tmp_path)
        assert observer.force_flush(10)
    finally:
        observer.shutdown()
    store.close()

    (run,) = collector.named("invoke_agent")
    chats, tools = collector.named("chat "), collector.named("execute_tool ")
    assert run.name == "invoke_agent shou" and run.parent_span_id == "" and run.kind == SPAN_KIND_INTERNAL
    assert [s.name for s in chats] == ["chat scripted"] * 2 and [s.name for s in tools] == ["execute_tool calculator"]
    assert len(collector.spans) == 4
    for child in (*chats, *tools):
        assert (child.trace_id, child.parent_span_id) == (run.trace_id, run.span_id)
    assert run.resource["service.name"] == "shou"

    assert run.attributes["gen_ai.operation.name"] == "invoke_agent"
    assert run.attributes["gen_ai.agent.name"] == "shou"
    assert run.attributes["gen_ai.conversation.id"] == "otel"
    assert run.attributes["shou.run.id"] == run_id and run.attributes["shou.run.status"] == "completed"
    assert (run.attributes["gen_ai.usage.input_tokens"], run.attributes["gen_ai.usage.output_tokens"]) == (82, 21)
    assert run.status_code != STATUS_ERROR

    first, second = sorted(chats, key=lambda s: s.start_ns)
    for chat, (tokens_in, tokens_out), finish in ((first, (30, 12), "tool_calls"), (second, (52, 9), "stop")):
        a = chat.attributes
        assert chat.kind == SPAN_KIND_CLIENT
        assert (a["gen_ai.operation.name"], a["gen_ai.provider.name"], a["gen_ai.request.model"]) \
            == ("chat", "openai", "scripted")
        assert a["gen_ai.response.model"] == "scripted"
        assert (a["gen_ai.usage.input_tokens"], a["gen_ai.usage.output_tokens"]) == (tokens_in, tokens_out)
        assert a["gen_ai.response.finish_reasons"] == [finish] and a["shou.retries"] == 0
    (tool,) = tools
    assert tool.attributes["gen_ai.operation.name"] == "execute_tool"
    assert (tool.attributes["gen_ai.tool.name"], tool.attributes["gen_ai.tool.call.id"]) == ("calculator", "call_1")
    assert tool.kind == SPAN_KIND_INTERNAL and tool.status_code != STATUS_ERROR
    assert first.end_ns <= tool.start_ns <= tool.end_ns <= second.start_ns <= second.end_ns <= run.end_ns
    assert not any(CONTENT_KEYS & set(s.attributes) for s in collector.spans)  # no content by default


async def test_content_is_exported_when_asked(collector: OtlpCollector, scripted: ScriptedServer,
                                              tmp_path: Path) -> None:
    # Configured the CLI's way, through the environment, with gzip on the wire.
    env = {"OTEL_EXPORTER_OTLP_ENDPOINT": collector.endpoint, "OTEL_EXPORTER_OTLP_COMPRESSION": "gzip"}
    observer = otel_from_settings(env, enabled=False, content=True)
    assert observer is not None
    try:
        await run_with(observer, scripted, tmp_path)
        assert observer.force_flush(10)
    finally:
        observer.shutdown()
    assert set(collector.encodings) == {"gzip"}
    (tool,) = collector.named("execute_tool ")
    assert json.loads(tool.attributes["gen_ai.tool.call.arguments"]) == {"expression": "123 * 45"}
    assert "5535" in tool.attributes["gen_ai.tool.call.result"]
    first, second = sorted(collector.named("chat "), key=lambda s: s.start_ns)
    assert json.loads(first.attributes["gen_ai.output.messages"])[0]["parts"][0]["name"] == "calculator"
    assert json.loads(second.attributes["gen_ai.output.messages"]) == [
        {"role": "assistant", "parts": [{"type": "text", "content": "123 * 45 = 5535."}], "finish_reason": "stop"}]
    (run,) = collector.named("invoke_agent")
    assert "What is 123 * 45?" in run.attributes["gen_ai.input.messages"]


async def test_a_collector_that_never_answers_does_not_hold_up_the_run(scripted: ScriptedServer,
                                                                       tmp_path: Path) -> None:
    with OtlpCollector(hang=True) as stuck:
        observer = OtelObserver(endpoint=stuck.endpoint, timeout_s=0.3)
        try:
            run_id, store = await run_with(observer, scripted, tmp_path)
            observer.force_flush(1.0)  # gives up (False) or times out: either way it returns
        finally:
            observer.shutdown(timeout_s=1.0)
        events = list(store.events("otel"))
        store.close()
    assert isinstance(events[-1], RunFinished) and events[-1].run_id == run_id
    assert events[-1].status == "completed"
    assert any(isinstance(e, ToolCallFinished) and e.content.strip().startswith("5535") for e in events)


def test_the_cli_exports_when_the_endpoint_variable_is_set(shou, serve, collector: OtlpCollector) -> None:
    srv = serve(SCRIPT)
    r = shou("run", "-o", "otel_content", "true", "what is 123 * 45?", server=srv,
             OTEL_EXPORTER_OTLP_ENDPOINT=collector.endpoint)
    assert r.returncode == 0, r.stderr
    (run,) = collector.named("invoke_agent")  # flushed at exit
    chats, (tool,) = collector.named("chat "), collector.named("execute_tool ")
    assert [c.attributes["gen_ai.request.model"] for c in chats] == ["scripted-test", "scripted-test"]
    assert all(c.parent_span_id == run.span_id for c in [*chats, tool])
    assert [c.attributes["gen_ai.usage.input_tokens"] for c in chats] == [30, 52]
    # content was asked for: the request's messages come back from the stored trace
    assert "what is 123 * 45?" in chats[0].attributes["gen_ai.input.messages"]
    assert tool.attributes["gen_ai.tool.call.result"] == "5535"


async def test_a_planned_run_and_its_sub_runs_are_one_trace(collector: OtlpCollector, tmp_path: Path) -> None:
    """The plan call, each step's own run and the final answer hang under the run's span: one trace."""
    done = {"tool_calls": [{"name": "step_verdict", "arguments": {"done": True, "reason": "done"}}]}
    script = [{"tool_calls": [{"name": "submit_plan", "arguments": {"steps": ["Compute 6*7", "Say it"]}}]},
              {"tool_calls": [{"name": "calculator", "arguments": {"expression": "6*7"}}]}, {"text": "42"}, done,
              {"text": "It is 42."}, done, {"text": "6*7 is 42."}]
    srv = ScriptedServer(script).start()
    observer = OtelObserver(endpoint=collector.endpoint)
    try:
        model = OpenAICompatible("scripted", base_url=srv.base_url, api_key="k", provider="openai")
        agent = Agent(model, [calculator], workspace=tmp_path, observers=[observer], planning=True)
        result = await agent.arun("What is 6*7? Plan it.")
        assert result.status == "completed", result.error
        assert observer.force_flush(10)
    finally:
        observer.shutdown()
        srv.close()
    spans = collector.spans
    roots = [s for s in spans if not s.parent_span_id]
    assert len(roots) == 1 and roots[0].attributes["shou.run.id"] == result.run_id
    assert len(collector.named("invoke_agent")) >= 3 and len(collector.named("chat ")) == len(script)
    assert {s.trace_id for s in spans} == {roots[0].trace_id}
