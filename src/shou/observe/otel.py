"""OpenTelemetry export of a run's event stream, in the GenAI semantic conventions.

`OtelObserver` (`Agent(..., observers=[OtelObserver()])`) turns events into spans:

```
invoke_agent shou        RunStarted / RunResumed .. RunFinished           (INTERNAL, the run's root)
├── chat MODEL           ModelRequest .. ModelResponse (same request_id)   (CLIENT)
└── execute_tool NAME    ToolCallStarted .. ToolCallFinished (same call id) (INTERNAL)
```

Attributes follow https://opentelemetry.io/docs/specs/semconv/gen-ai/; what they have no name for is
`shou.*`. Messages, tool arguments and results are content, exported only with `content=True`. Spans are
batched and POSTed (OTLP/HTTP, protobuf) on the SDK's worker thread: a slow or dead collector costs the run
nothing but dropped spans (bounded queue, short timeout). The SQLite log stays the complete record; a run
killed midway leaves its spans unended (never exported). The global tracer provider is left alone (an
embedding app may have its own): each endpoint gets one provider per process, shut down at exit.
"""

from __future__ import annotations

import json
import logging
import os
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Mapping
from typing import Any

from ..events import (
    Event,
    Handoff,
    ModelRequest,
    ModelResponse,
    Notice,
    RunFinished,
    RunResumed,
    RunStarted,
    ToolCallFinished,
    ToolCallStarted,
)

try:
    from opentelemetry import trace
    from opentelemetry.context import Context
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.trace import Span, SpanKind, Status, StatusCode

    from .otel_export import (  # noqa: F401 - the configuration's names, as this module always offered them
        EXIT_TIMEOUT_S,
        EXPORT_TIMEOUT_S,
        _acquire,
        _bounded,
        _env_headers,
        _otlp,
        _release,
        _Shared,
        _timeout,
        _traces_url,
    )
except ImportError as e:  # pragma: no cover - depends on the install
    raise ImportError(f"OpenTelemetry export needs the otel extra: pip install 'shou[otel]' ({e})") from e

__all__ = ["OtelObserver", "otel_from_settings"]

log = logging.getLogger(__name__)

MAX_CONTENTS = 4096  # request contents kept for input messages (a run resends its history by hash)
MAX_OPEN = 10_000  # open spans kept per kind; past this the oldest are dropped (a long-lived server must not leak)
_OK_STATUSES = frozenset({"completed", "waiting_approval"})
_PARAMS = {  # ModelRequest.params key -> attribute
    "max_tokens": "gen_ai.request.max_tokens", "max_completion_tokens": "gen_ai.request.max_tokens",
    "temperature": "gen_ai.request.temperature", "top_p": "gen_ai.request.top_p", "seed": "gen_ai.request.seed",
    "frequency_penalty": "gen_ai.request.frequency_penalty", "presence_penalty": "gen_ai.request.presence_penalty",
    "stop": "gen_ai.request.stop_sequences",
}
_TRUE = frozenset({"1", "true", "yes", "on", "span_only", "span_and_event"})

MessagesOf = Callable[[ModelRequest], "list[dict[str, Any]] | None"]
"""Resolves a request's content-addressed messages to their wire dicts (e.g. from the store's blobs)."""


class OtelObserver:
    """Export a run's events as OpenTelemetry spans (GenAI semantic conventions) over OTLP/HTTP.

    `endpoint` is the base OTLP/HTTP URL (`http://127.0.0.1:4318`); spans go to `{endpoint}/v1/traces`.
    Left None, it comes from `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT` (the full URL) or
    `OTEL_EXPORTER_OTLP_ENDPOINT` (a base URL) in `env` (default `os.environ`), else `http://localhost:4318`.
    `headers` are added to every export (also read from `OTEL_EXPORTER_OTLP_[TRACES_]HEADERS`). `content`
    exports messages, tool arguments and results; `messages_of` resolves a request's input messages for
    `gen_ai.input.messages` (called on the agent's loop: keep it quick); left out, they come from the contents
    the request events carry. `tracer_provider` replaces the
    OTLP export with yours (its exporters, its lifetime). `timeout_s` bounds one export, retries included
    (default `OTEL_EXPORTER_OTLP_[TRACES_]TIMEOUT` in ms, else 3 s).
    """

    def __init__(
        self, *, endpoint: str | None = None, content: bool = False, headers: dict[str, str] | None = None,
        agent_name: str = "shou", tracer_provider: TracerProvider | None = None, messages_of: MessagesOf | None = None,
        timeout_s: float | None = None, env: Mapping[str, str] | None = None,
    ) -> None:
        self.content = content
        self.agent_name = agent_name
        self.messages_of = messages_of
        self._shared: _Shared | None = None
        if tracer_provider is None:
            self._shared = _acquire(endpoint, headers or {}, timeout_s, os.environ if env is None else env)
            tracer_provider = self._shared.provider
        self._provider: TracerProvider = tracer_provider
        self._tracer = tracer_provider.get_tracer("shou.observe.otel")
        self._lock = threading.Lock()  # one observer may serve agents in several threads
        self._runs: dict[str, tuple[Span, Context, str]] = {}  # run id -> span, its context, its model spec
        self._chats: dict[tuple[str, str], Span] = {}  # (run id, request key) -> open chat span
        self._tools: dict[tuple[str, str], Span] = {}  # (run id, call id) -> open execute_tool span
        # Request contents by hash, as the events carried them (`ModelRequest.contents`: redacted, like the log),
        # for `gen_ai.input.messages` when no `messages_of` is given: the events are the source, not a global.
        self._contents: OrderedDict[str, Any] = OrderedDict()
        # Dispatch on the exact type: the per-token deltas are not in it, so they cost one dict lookup.
        self._handlers: dict[type[Event], Callable[[Any, int], None]] = {
            RunStarted: self._run_started, RunResumed: self._run_started, RunFinished: self._run_finished,
            ModelRequest: self._model_request, ModelResponse: self._model_response,
            ToolCallStarted: self._tool_started, ToolCallFinished: self._tool_finished, Notice: self._notice,
            Handoff: self._handoff,
        }

    def __call__(self, event: Event) -> None:
        """Map one event to span starts and ends. Never raises: telemetry must not end a run."""
        handler = self._handlers.get(type(event))
        if handler is None:
            return
        now = time.time_ns()
        try:
            with self._lock:
                handler(event, now)
        except Exception:  # a mapping bug or a broken provider: lose the span, keep the run
            log.debug("OpenTelemetry export of %s failed", type(event).__name__, exc_info=True)

    def force_flush(self, timeout_s: float = 5.0) -> bool:
        """Export the ended spans now; True if that finished within `timeout_s` (the SDK's own flush does
        not honour a timeout, so it runs on a helper thread that is abandoned when late)."""
        return _bounded(lambda: self._provider.force_flush(), timeout_s)

    def shutdown(self, timeout_s: float = EXIT_TIMEOUT_S) -> None:
        """Stop exporting: later events are ignored. The shared provider is flushed and shut down with its
        last observer; a `tracer_provider` passed in is left to its owner."""
        with self._lock:
            self._handlers, self._runs, self._chats, self._tools = {}, {}, {}, {}
        if self._shared is not None:
            _release(self._shared, timeout_s)
            self._shared = None

    def _start(self, name: str, run_id: str | None, kind: SpanKind, start: int, attrs: dict[str, Any],
               parent: str = "") -> Span:
        """A span, the child of run `run_id`'s span when that is open, else of the run it works for (`parent`:
        a plan or review call, a summary, a sub-agent), so a run and its sub-runs are one trace."""
        runs = self._runs
        state = (runs.get(run_id) if run_id else None) or (runs.get(parent) if parent else None)
        return self._tracer.start_span(name, context=state[1] if state else None, kind=kind, start_time=start,
                                       attributes={k: v for k, v in attrs.items() if v is not None})

    def _run_started(self, event: RunStarted | RunResumed, now: int) -> None:
        old = self._runs.pop(event.run_id, None)
        if old is not None:  # the same run again (a resume in this process): close the earlier part
            old[0].end(now)
        attrs: dict[str, Any] = {"gen_ai.operation.name": "invoke_agent", "gen_ai.agent.name": self.agent_name,
                                 "gen_ai.conversation.id": event.session, "shou.run.id": event.run_id}
        spec = ""
        if isinstance(event, RunStarted):
            spec = event.model
            provider, model = _split_spec(spec)
            attrs.update({"gen_ai.request.model": model or None, "gen_ai.provider.name": provider or None})
            if self.content and event.task:
                attrs["gen_ai.input.messages"] = _json([{"role": "user", "parts": _text_parts(event.task)}])
        else:
            attrs["shou.run.resumed_at_step"] = event.step
        span = self._start(f"invoke_agent {self.agent_name}", None, SpanKind.INTERNAL, now, attrs, event.parent)
        _put(self._runs, event.run_id, (span, trace.set_span_in_context(span), spec))

    def _run_finished(self, event: RunFinished, now: int) -> None:
        run_id = event.run_id
        for opened in (self._chats, self._tools):  # children the run never closed (a model error mid-call)
            for key in [k for k in opened if k[0] == run_id]:
                _fail(opened.pop(key), event.status, None, now)
        state = self._runs.pop(run_id, None)
        span = state[0] if state else self._start(  # attached mid-run: a span for what is known
            f"invoke_agent {self.agent_name}", None, SpanKind.INTERNAL, now - int(event.wall_time * 1e9),
            {"gen_ai.operation.name": "invoke_agent", "gen_ai.agent.name": self.agent_name, "shou.run.id": run_id})
        usage = event.usage
        _set(span, {
            "shou.run.status": event.status, "shou.run.steps": event.steps, "shou.cost_usd": usage.cost,
            "gen_ai.usage.input_tokens": usage.input_tokens, "gen_ai.usage.output_tokens": usage.output_tokens,
            "gen_ai.output.messages": _json([{"role": "assistant", "parts": _text_parts(event.answer),
                                              "finish_reason": "stop"}]) if self.content and event.answer else None,
        })
        if event.status not in _OK_STATUSES:
            _fail(span, event.status, event.error, now)
        else:
            span.end(now)

    def _model_request(self, event: ModelRequest, now: int) -> None:
        provider, model = event.provider, event.model
        state = self._runs.get(event.run_id)
        if not (provider and model) and state is not None:  # events from before requests named their model
            spec_provider, spec_model = _split_spec(state[2])
            provider, model = provider or spec_provider, model or spec_model
        attrs: dict[str, Any] = {"gen_ai.operation.name": "chat", "shou.step": event.step,
                                 "gen_ai.provider.name": provider or None, "gen_ai.request.model": model or None}
        for key, value in (event.params or {}).items():
            if key in _PARAMS:
                attrs[_PARAMS[key]] = [value] if key == "stop" and isinstance(value, str) else value
        if self.content:
            try:
                wire = self.messages_of(event) if self.messages_of is not None else self._messages(event)
                attrs["gen_ai.input.messages"] = _json([_genai_message(m) for m in wire]) if wire else None
            except Exception:  # a resolver that fails (a pruned blob) costs the messages, not the span
                log.debug("messages_of failed for request %s", event.request_id, exc_info=True)
        span = self._start(f"chat {model}" if model else "chat", event.run_id, SpanKind.CLIENT, now, attrs,
                           event.parent)
        _put(self._chats, (event.run_id, event.request_id or f"step-{event.step}"), span)

    def _messages(self, event: ModelRequest) -> list[Any]:
        """The request's messages from the contents this and earlier requests carried (newest kept)."""
        known = self._contents
        if event.contents:
            known.update(event.contents)
            while len(known) > MAX_CONTENTS:
                known.popitem(last=False)
        out = []
        for key in event.messages:
            wire = known.get(key)
            if wire is not None:
                known.move_to_end(key)
                out.append(wire)
        return out

    def _model_response(self, event: ModelResponse, now: int) -> None:
        span = self._chats.pop((event.run_id, event.request_id or f"step-{event.step}"), None)
        if span is None:  # its request was never seen: the span is placed by the response's latency
            start = now - int(event.latency * 1e9)
            span = self._start(f"chat {event.model}" if event.model else "chat", event.run_id, SpanKind.CLIENT,
                               start, {"gen_ai.operation.name": "chat", "shou.step": event.step})
        usage = event.usage
        _set(span, {
            "gen_ai.usage.input_tokens": usage.input_tokens, "gen_ai.usage.output_tokens": usage.output_tokens,
            "gen_ai.response.model": event.model or event.sent_model or None, "shou.retries": event.retries,
            "shou.fallback_model": event.sent_model or None,
            "gen_ai.response.finish_reasons": [event.finish_reason] if event.finish_reason else None,
            "gen_ai.usage.cache_read.input_tokens": usage.cached_tokens or None, "shou.cost_usd": usage.cost,
            "shou.usage.estimated": usage.estimated or None, "shou.cached": event.cached or None,
            "gen_ai.response.time_to_first_chunk": event.ttft,
            "gen_ai.output.messages": _json([_genai_message(event.message.to_wire(), event.finish_reason)])
            if self.content else None,
        })
        span.end(now)

    def _notice(self, event: Notice, now: int) -> None:
        """A failed attempt that was billed: an event on its call's span, with what it used."""
        usage = event.usage
        if usage is None:
            return
        span = next((self._chats[k] for k in reversed(self._chats) if k[0] == event.run_id), None)
        if span is not None:
            span.add_event("shou.failed_attempt", {
                k: v for k, v in {"gen_ai.usage.input_tokens": usage.input_tokens,
                                  "gen_ai.usage.output_tokens": usage.output_tokens, "shou.cost_usd": usage.cost,
                                  "shou.notice.kind": event.kind}.items() if v is not None}, now)

    def _handoff(self, event: Handoff, now: int) -> None:
        """The run was handed to another agent (agent/handoff.py): an event on the run's span."""
        state = self._runs.get(event.run_id)
        if state is not None:
            state[0].add_event("shou.handoff", {"shou.handoff.from": event.source, "shou.handoff.to": event.target,
                                                "shou.step": event.step}, now)

    def _tool_span(self, run_id: str, name: str, call_id: str, step: int, start: int) -> Span:
        return self._start(f"execute_tool {name}", run_id, SpanKind.INTERNAL, start, {
            "gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": name, "gen_ai.tool.call.id": call_id,
            "gen_ai.tool.type": "function", "shou.step": step})

    def _tool_started(self, event: ToolCallStarted, now: int) -> None:
        call = event.call
        span = self._tool_span(event.run_id, call.name, call.id, event.step, now)
        if self.content:
            span.set_attribute("gen_ai.tool.call.arguments", call.arguments)
        _put(self._tools, (event.run_id, call.id), span)

    def _tool_finished(self, event: ToolCallFinished, now: int) -> None:
        span = self._tools.pop((event.run_id, event.call_id), None)
        if span is None:  # refused or cut before it ran: a short span still shows the model asked for it
            span = self._tool_span(event.run_id, event.name, event.call_id, event.step, now - int(event.latency * 1e9))
        if self.content:
            span.set_attribute("gen_ai.tool.call.result", event.content)
        if event.is_error:
            _fail(span, "tool_error", event.content if self.content else None, now)
        else:
            span.end(now)


# -- mapping helpers ---------------------------------------------------------------------------------------

def _put(opened: dict[Any, Any], key: Any, value: Any) -> None:
    """Remember an open span; past MAX_OPEN the oldest is forgotten (never ended, never exported)."""
    opened[key] = value
    if len(opened) > MAX_OPEN:
        del opened[next(iter(opened))]


def _set(span: Span, attrs: dict[str, Any]) -> None:
    """Set the attributes that have a value (None: unknown or not applicable)."""
    span.set_attributes({k: v for k, v in attrs.items() if v is not None})


def _fail(span: Span, error_type: str, description: str | None, end: int) -> None:
    """End `span` as failed, with `error.type`."""
    span.set_attribute("error.type", error_type)
    span.set_status(Status(StatusCode.ERROR, description))
    span.end(end)


def _split_spec(spec: str) -> tuple[str, str]:
    """`"openai:gpt-4o"` -> `("openai", "gpt-4o")`; a bare name has no provider."""
    provider, sep, model = spec.partition(":")
    return (provider, model) if sep else ("", spec)


def _json(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"))


def _text_parts(text: str) -> list[dict[str, Any]]:
    return [{"type": "text", "content": text}] if text else []


def _genai_message(wire: dict[str, Any], finish_reason: str | None = None) -> dict[str, Any]:
    """A Chat Completions message dict in the GenAI conventions' form: a role and typed parts."""
    parts: list[dict[str, Any]] = []
    content = wire.get("content")
    if wire.get("role") == "tool":
        text = content if isinstance(content, str) else _json(content)
        parts.append({"type": "tool_call_response", "id": wire.get("tool_call_id"), "response": text})
    elif isinstance(content, str):
        parts.extend(_text_parts(content))
    elif isinstance(content, list):  # images keep their kind; their bytes are not worth a trace
        parts.extend({"type": "text", "content": p.get("text", "")} if p.get("type") == "text"
                     else {"type": "blob", "modality": "image"} for p in content)
    for call in wire.get("tool_calls") or ():
        fn = call.get("function") or {}
        try:
            arguments: Any = json.loads(fn.get("arguments") or "{}")
        except ValueError:  # a call whose arguments never parsed is exported as the text the model sent
            arguments = fn.get("arguments")
        parts.append({"type": "tool_call", "id": call.get("id"), "name": fn.get("name"), "arguments": arguments})
    out: dict[str, Any] = {"role": wire.get("role"), "parts": parts}
    if finish_reason is not None:  # OpenAI says "tool_calls", the conventions "tool_call"
        out["finish_reason"] = "tool_call" if finish_reason == "tool_calls" else finish_reason
    return out


def otel_from_settings(settings_env: Mapping[str, str], *, enabled: bool, content: bool,
                       messages_of: MessagesOf | None = None) -> OtelObserver | None:
    """The observer the CLI adds: when `enabled` (`--otel`) or an OTLP endpoint variable is set, unless
    `OTEL_SDK_DISABLED` is true. Content is exported when `content` (the `otel_content` setting) or
    `OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT` says so."""
    if (settings_env.get("OTEL_SDK_DISABLED") or "").strip().lower() == "true":
        return None
    if not (enabled or _otlp(settings_env, "ENDPOINT")):
        return None
    capture = (settings_env.get("OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT") or "").strip().lower()
    return OtelObserver(content=content or capture in _TRUE, env=settings_env, messages_of=messages_of)
