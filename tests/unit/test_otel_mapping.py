"""OtelObserver's mapping of events to GenAI spans, fed hand-made events, spans kept in memory."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind, StatusCode

from shou.events import (
    Event,
    Handoff,
    ModelRequest,
    ModelResponse,
    Notice,
    RunFinished,
    RunResumed,
    RunStarted,
    StepFinished,
    TextDelta,
    ToolCallDelta,
    ToolCallFinished,
    ToolCallStarted,
)
from shou.messages import Message, ToolCall
from shou.observe import otel
from shou.observe.otel import OtelObserver, otel_from_settings
from shou.usage import Usage

RUN = "run_abc"
CALL = ToolCall("call_1", "calculator", '{"expression": "2+2"}')
CONTENT_KEYS = {"gen_ai.input.messages", "gen_ai.output.messages", "gen_ai.tool.call.arguments",
                "gen_ai.tool.call.result"}


@pytest.fixture
def memory() -> Iterator[tuple[TracerProvider, InMemorySpanExporter]]:
    exporter = InMemorySpanExporter()
    provider = TracerProvider(shutdown_on_exit=False)
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    yield provider, exporter
    provider.shutdown()


def a_run(*, request_ids: tuple[str, str] = ("req_1", "req_2"), model: str = "gpt-x") -> list[Event]:
    """A two-step run: the model calls the calculator, then answers."""
    r1, r2 = request_ids
    return [
        RunStarted(RUN, "sess_1", "What is 2+2?", "openai:gpt-x", ("calculator",), 1.0),
        ModelRequest(RUN, 1, 2, 1, 50, request_id=r1, model=model, provider="openai" if model else "",
                     params={"max_tokens": 256, "temperature": 0.2, "top_p": 0.9, "seed": 7, "tool_choice": "auto"}),
        TextDelta(RUN, 1, "let me"),
        ToolCallDelta(RUN, 1, 0, "calculator", '{"expr'),
        ModelResponse(RUN, 1, Message.assistant(None, [CALL]), Usage(11, 7, 1, cost=0.002), 0.5,
                      "tool_calls", "gpt-x-2024", r1, ttft=0.1, retries=1),
        ToolCallStarted(RUN, 1, CALL),
        ToolCallFinished(RUN, 1, "call_1", "calculator", "4", latency=0.01),
        StepFinished(RUN, 1, Usage(11, 7, 1)),
        ModelRequest(RUN, 2, 4, 1, 80, request_id=r2, model=model, provider="openai" if model else ""),
        ModelResponse(RUN, 2, Message.assistant("It is 4."), Usage(13, 3, 1, cost=None), 0.2, "stop", "gpt-x-2024",
                      r2, cached=True),
        RunFinished(RUN, "completed", "It is 4.", 2, Usage(24, 10, 2, cost=None), 1.5),
    ]


def play(observer: OtelObserver, events: list[Event]) -> None:
    for event in events:
        observer(event)


def by_name(exporter: InMemorySpanExporter) -> dict[str, list[ReadableSpan]]:
    out: dict[str, list[ReadableSpan]] = {}
    for span in exporter.get_finished_spans():
        out.setdefault(span.name, []).append(span)
    return out


def attrs(span: ReadableSpan) -> dict[str, Any]:
    return dict(span.attributes or {})


def test_a_run_maps_to_an_agent_span_with_chat_and_tool_children(memory) -> None:
    provider, exporter = memory
    play(OtelObserver(tracer_provider=provider, agent_name="helper"), a_run())
    spans = by_name(exporter)
    assert sorted(spans) == ["chat gpt-x", "execute_tool calculator", "invoke_agent helper"]
    (run,), chats, (tool,) = spans["invoke_agent helper"], spans["chat gpt-x"], spans["execute_tool calculator"]
    assert len(chats) == 2 and run.parent is None
    for child in (*chats, tool):
        assert child.parent is not None and child.parent.span_id == run.context.span_id
        assert child.context.trace_id == run.context.trace_id
    assert run.kind == SpanKind.INTERNAL and tool.kind == SpanKind.INTERNAL and chats[0].kind == SpanKind.CLIENT

    assert attrs(run) == {
        "gen_ai.operation.name": "invoke_agent", "gen_ai.agent.name": "helper", "gen_ai.conversation.id": "sess_1",
        "shou.run.id": RUN, "gen_ai.request.model": "gpt-x", "gen_ai.provider.name": "openai",
        "shou.run.status": "completed", "shou.run.steps": 2, "gen_ai.usage.input_tokens": 24,
        "gen_ai.usage.output_tokens": 10,
    }  # the total cost is unknown (one call had no price): no shou.cost_usd rather than a wrong one
    assert run.status.status_code == StatusCode.UNSET

    first, second = sorted(chats, key=lambda s: attrs(s)["shou.step"])
    assert attrs(first) == {
        "gen_ai.operation.name": "chat", "shou.step": 1, "gen_ai.provider.name": "openai",
        "gen_ai.request.model": "gpt-x", "gen_ai.request.max_tokens": 256, "gen_ai.request.temperature": 0.2,
        "gen_ai.request.top_p": 0.9, "gen_ai.request.seed": 7, "gen_ai.usage.input_tokens": 11,
        "gen_ai.usage.output_tokens": 7, "shou.retries": 1, "gen_ai.response.model": "gpt-x-2024",
        "gen_ai.response.finish_reasons": ("tool_calls",), "shou.cost_usd": 0.002,
        "gen_ai.response.time_to_first_chunk": 0.1,
    }
    second_attrs = attrs(second)
    assert second_attrs["shou.cached"] is True and "shou.cost_usd" not in second_attrs
    assert second_attrs["gen_ai.response.finish_reasons"] == ("stop",)
    assert (second_attrs["gen_ai.usage.input_tokens"], second_attrs["gen_ai.usage.output_tokens"]) == (13, 3)

    assert attrs(tool) == {"gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": "calculator",
                           "gen_ai.tool.call.id": "call_1", "gen_ai.tool.type": "function", "shou.step": 1}
    assert tool.status.status_code == StatusCode.UNSET
    assert first.start_time <= first.end_time <= tool.start_time <= tool.end_time <= run.end_time


def test_content_is_exported_only_when_asked(memory) -> None:
    provider, exporter = memory
    play(OtelObserver(tracer_provider=provider), a_run())
    assert not any(CONTENT_KEYS & set(attrs(s)) for s in exporter.get_finished_spans())

    exporter.clear()
    wire = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "What is 2+2?"}]
    seen: list[ModelRequest] = []

    def messages_of(request: ModelRequest) -> list[dict[str, Any]]:
        seen.append(request)
        return wire

    play(OtelObserver(tracer_provider=provider, content=True, messages_of=messages_of), a_run())
    spans = by_name(exporter)
    first, second = sorted(spans["chat gpt-x"], key=lambda s: attrs(s)["shou.step"])
    assert [r.request_id for r in seen] == ["req_1", "req_2"]
    assert json.loads(attrs(first)["gen_ai.input.messages"]) == [
        {"role": "system", "parts": [{"type": "text", "content": "Be brief."}]},
        {"role": "user", "parts": [{"type": "text", "content": "What is 2+2?"}]},
    ]
    assert json.loads(attrs(first)["gen_ai.output.messages"]) == [{
        "role": "assistant", "finish_reason": "tool_call",
        "parts": [{"type": "tool_call", "id": "call_1", "name": "calculator", "arguments": {"expression": "2+2"}}],
    }]
    assert json.loads(attrs(second)["gen_ai.output.messages"]) == [
        {"role": "assistant", "parts": [{"type": "text", "content": "It is 4."}], "finish_reason": "stop"}]
    (tool,) = spans["execute_tool calculator"]
    assert attrs(tool)["gen_ai.tool.call.arguments"] == '{"expression": "2+2"}'
    assert attrs(tool)["gen_ai.tool.call.result"] == "4"
    (run,) = spans["invoke_agent shou"]
    assert json.loads(attrs(run)["gen_ai.input.messages"])[0]["parts"][0]["content"] == "What is 2+2?"


def test_input_messages_need_a_resolver_and_content(memory) -> None:
    provider, exporter = memory
    play(OtelObserver(tracer_provider=provider, messages_of=lambda r: [{"role": "user", "content": "x"}]), a_run())
    assert not any("gen_ai.input.messages" in attrs(s) for s in exporter.get_finished_spans())


def test_a_failing_resolver_costs_the_messages_not_the_span(memory) -> None:
    provider, exporter = memory

    def messages_of(request: ModelRequest) -> list[dict[str, Any]]:
        raise KeyError("blob pruned")

    play(OtelObserver(tracer_provider=provider, content=True, messages_of=messages_of), a_run())
    chats = by_name(exporter)["chat gpt-x"]
    assert len(chats) == 2 and not any("gen_ai.input.messages" in attrs(s) for s in chats)


def test_a_failed_tool_call_and_a_refused_one(memory) -> None:
    provider, exporter = memory
    observer = OtelObserver(tracer_provider=provider, content=True)
    play(observer, a_run()[:2])
    observer(ToolCallStarted(RUN, 1, CALL))
    observer(ToolCallFinished(RUN, 1, "call_1", "calculator", "Error: division by zero", is_error=True))
    observer(ToolCallFinished(RUN, 1, "call_2", "shell", "Error: not allowed", is_error=True))  # never started
    spans = by_name(exporter)
    (failed,), (refused,) = spans["execute_tool calculator"], spans["execute_tool shell"]
    for span in (failed, refused):
        assert span.status.status_code == StatusCode.ERROR and attrs(span)["error.type"] == "tool_error"
        assert span.parent is not None and span.parent.span_id == observer._runs[RUN][0].get_span_context().span_id
    assert attrs(refused)["gen_ai.tool.call.id"] == "call_2" and failed.status.description == "Error: division by zero"


def test_tool_errors_carry_no_text_without_content(memory) -> None:
    provider, exporter = memory
    observer = OtelObserver(tracer_provider=provider)
    observer(ToolCallFinished(RUN, 1, "c9", "shell", "Error: secret path /home/x", is_error=True))
    (span,) = exporter.get_finished_spans()
    assert span.status.status_code == StatusCode.ERROR and not span.status.description


def test_a_failed_run_ends_its_open_model_call_and_is_an_error(memory) -> None:
    provider, exporter = memory
    observer = OtelObserver(tracer_provider=provider)
    play(observer, a_run()[:2])  # a request that never got its response
    observer(RunFinished(RUN, "error", "", 1, Usage(), 2.0, "the provider failed"))
    spans = by_name(exporter)
    (run,), (chat,) = spans["invoke_agent shou"], spans["chat gpt-x"]
    assert run.status.status_code == StatusCode.ERROR and run.status.description == "the provider failed"
    assert attrs(run)["shou.run.status"] == "error" and attrs(run)["error.type"] == "error"
    assert chat.status.status_code == StatusCode.ERROR
    assert observer._chats == {} and observer._runs == {}


@pytest.mark.parametrize(("status", "code"), [("waiting_approval", StatusCode.UNSET), ("max_steps", StatusCode.ERROR)])
def test_run_status(memory, status: str, code: StatusCode) -> None:
    provider, exporter = memory
    observer = OtelObserver(tracer_provider=provider)
    observer(RunStarted(RUN, "s", "t", "m"))
    observer(RunFinished(RUN, status, "", 3, Usage(), 1.0))  # type: ignore[arg-type]
    (run,) = exporter.get_finished_spans()
    assert run.status.status_code == code and attrs(run)["shou.run.status"] == status


def test_requests_without_ids_pair_by_step_and_name_the_model_of_the_run(memory) -> None:
    provider, exporter = memory
    play(OtelObserver(tracer_provider=provider), a_run(request_ids=("", ""), model=""))
    chats = by_name(exporter)["chat gpt-x"]  # the model named by the run's spec "openai:gpt-x"
    assert sorted(attrs(s)["shou.step"] for s in chats) == [1, 2]
    assert all(attrs(s)["gen_ai.provider.name"] == "openai" for s in chats)
    by_step = sorted(chats, key=lambda s: attrs(s)["shou.step"])
    assert [attrs(s)["gen_ai.usage.output_tokens"] for s in by_step] == [7, 3]


def test_a_resumed_run_gets_its_own_agent_span(memory) -> None:
    provider, exporter = memory
    observer = OtelObserver(tracer_provider=provider)
    observer(RunResumed(RUN, "sess_1", 4, 2.0))
    observer(ModelRequest(RUN, 5, 9, 1, request_id="r5", model="gpt-x", provider="openai"))
    observer(ModelResponse(RUN, 5, Message.assistant("done"), Usage(1, 1, 1), 0.1, "stop", "gpt-x", "r5"))
    observer(RunFinished(RUN, "completed", "done", 5, Usage(9, 9, 5), 3.0))
    spans = by_name(exporter)
    (run,), (chat,) = spans["invoke_agent shou"], spans["chat gpt-x"]
    assert attrs(run)["shou.run.resumed_at_step"] == 4 and attrs(run)["gen_ai.conversation.id"] == "sess_1"
    assert chat.parent is not None and chat.parent.span_id == run.context.span_id


def test_streamed_deltas_and_other_events_make_no_spans(memory) -> None:
    provider, exporter = memory
    observer = OtelObserver(tracer_provider=provider)
    for event in (TextDelta(RUN, 1, "x"), ToolCallDelta(RUN, 1, 0, None, "{"), Notice(RUN, 1, "retry", "again"),
                  StepFinished(RUN, 1)):
        observer(event)
    assert exporter.get_finished_spans() == () and observer._runs == {}


def test_open_spans_are_capped(memory, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(otel, "MAX_OPEN", 3)
    provider, _ = memory
    observer = OtelObserver(tracer_provider=provider)
    for i in range(5):
        observer(ToolCallStarted(RUN, 1, ToolCall(f"c{i}", "calculator")))
        observer(RunStarted(f"run_{i}", "s", "t", "m"))
    assert list(observer._tools) == [(RUN, "c2"), (RUN, "c3"), (RUN, "c4")]
    assert list(observer._runs) == ["run_2", "run_3", "run_4"]


def test_the_observer_never_raises() -> None:
    class Broken:
        def get_tracer(self, *a: Any, **kw: Any) -> Broken:
            return self

        def start_span(self, *a: Any, **kw: Any) -> None:
            raise RuntimeError("exporter bug")

    observer = OtelObserver(tracer_provider=Broken())  # type: ignore[arg-type]
    play(observer, a_run())  # nothing raised


def test_after_shutdown_events_are_ignored(memory) -> None:
    provider, exporter = memory
    observer = OtelObserver(tracer_provider=provider)
    observer.shutdown()
    play(observer, a_run())
    assert exporter.get_finished_spans() == ()


def test_endpoint_resolution() -> None:
    assert otel._traces_url("http://c:4318/", {}) == "http://c:4318/v1/traces"
    assert otel._traces_url(None, {}) == "http://localhost:4318/v1/traces"
    assert otel._traces_url(None, {"OTEL_EXPORTER_OTLP_ENDPOINT": "https://o.example/otlp/"}) \
        == "https://o.example/otlp/v1/traces"
    both = {"OTEL_EXPORTER_OTLP_ENDPOINT": "http://a:4318", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://b/x"}
    assert otel._traces_url(None, both) == "http://b/x"  # the signal's own variable, as is
    assert otel._env_headers({"OTEL_EXPORTER_OTLP_HEADERS": "api-key=a%20b, x=1,bad"}) == {"api-key": "a b", "x": "1"}
    assert otel._timeout(None, {"OTEL_EXPORTER_OTLP_TIMEOUT": "500"}) == 0.5
    assert otel._timeout(None, {}) == otel.EXPORT_TIMEOUT_S


def test_otel_from_settings() -> None:
    assert otel_from_settings({}, enabled=False, content=True) is None
    assert otel_from_settings({"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:9", "OTEL_SDK_DISABLED": "true"},
                              enabled=True, content=False) is None
    made = [
        otel_from_settings({}, enabled=True, content=False),
        otel_from_settings({"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:9"}, enabled=False, content=False),
        otel_from_settings({"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:9",
                            "OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT": "true"},
                           enabled=False, content=False),
    ]
    try:
        assert all(isinstance(o, OtelObserver) for o in made)
        assert [o.content for o in made if o is not None] == [False, False, True]
        assert made[1] is not None and made[2] is not None
        assert made[1]._provider is made[2]._provider  # one provider per endpoint
    finally:
        for o in made:
            if o is not None:
                o.shutdown(timeout_s=0.5)


def test_a_handoff_is_an_event_on_the_runs_span(memory) -> None:
    provider, exporter = memory
    events = a_run()
    events.insert(7, Handoff(RUN, 1, "main", "billing", "a refund"))  # after the step's tool call finished
    play(OtelObserver(tracer_provider=provider, agent_name="helper"), events)
    (run,) = by_name(exporter)["invoke_agent helper"]
    [handoff] = [e for e in run.events if e.name == "shou.handoff"]
    assert dict(handoff.attributes or {}) == {"shou.handoff.from": "main", "shou.handoff.to": "billing",
                                              "shou.step": 1}
