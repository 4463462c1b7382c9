"""Where OpenTelemetry spans go: the OTLP/HTTP exporter's configuration from the environment, and one
tracer provider per export configuration shared by a process's observers, shut down at exit within a bound.
"""

from __future__ import annotations

import atexit
import logging
import os
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import unquote

from opentelemetry.exporter.otlp.proto.http import Compression
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import SpanLimits, TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor

log = logging.getLogger("shou.observe.otel")

EXPORT_TIMEOUT_S = 3.0  # one export request, retries included: a hung collector holds the worker this long at most
MAX_QUEUE = 2048  # spans waiting for export; when the collector cannot keep up, the oldest are dropped
EXIT_TIMEOUT_S = 2.0  # what a process waits at exit for its last spans to go out
CONTENT_LIMIT = 65_536  # characters of one attribute value, unless OTEL_*ATTRIBUTE_VALUE_LENGTH_LIMIT says


def _traces_url(endpoint: str | None, env: Mapping[str, str]) -> str:
    """Where spans are POSTed, as the OTLP exporter spec resolves it."""
    if not endpoint and env.get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"):
        return env["OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"]  # the signal's own variable is the full URL, as is
    return (endpoint or env.get("OTEL_EXPORTER_OTLP_ENDPOINT") or "http://localhost:4318").rstrip("/") + "/v1/traces"


def _otlp(env: Mapping[str, str], name: str) -> str:
    """An OTLP exporter variable: the traces one (`OTEL_EXPORTER_OTLP_TRACES_X`), else the general one."""
    return (env.get(f"OTEL_EXPORTER_OTLP_TRACES_{name}") or env.get(f"OTEL_EXPORTER_OTLP_{name}") or "").strip()


def _env_headers(env: Mapping[str, str]) -> dict[str, str]:
    """`OTEL_EXPORTER_OTLP_[TRACES_]HEADERS`: `k=v,k2=v2`, values URL-encoded."""
    pairs = (item.partition("=") for item in _otlp(env, "HEADERS").split(","))
    return {unquote(k.strip()): unquote(v.strip()) for k, sep, v in pairs if sep and k.strip()}


def _timeout(timeout_s: float | None, env: Mapping[str, str]) -> float:
    if timeout_s is not None:
        return timeout_s
    try:
        return float(_otlp(env, "TIMEOUT")) / 1000  # the variables are in milliseconds
    except ValueError:
        return EXPORT_TIMEOUT_S


@dataclass(slots=True)
class _Shared:
    """One process-wide provider per export configuration, with the number of observers using it."""

    key: tuple[Any, ...]
    provider: TracerProvider
    users: int = 0


_PROVIDERS: dict[tuple[Any, ...], _Shared] = {}
_PROVIDERS_LOCK = threading.Lock()


def _acquire(endpoint: str | None, headers: dict[str, str], timeout_s: float | None, env: Mapping[str, str]) -> _Shared:
    url, timeout = _traces_url(endpoint, env), _timeout(timeout_s, env)
    headers = {**_env_headers(env), **headers}
    compression = _otlp(env, "COMPRESSION").lower()
    compression = compression if compression in ("gzip", "deflate") else "none"
    service = env.get("OTEL_SERVICE_NAME") or "shou"
    key = (url, tuple(sorted(headers.items())), timeout, compression, service)
    with _PROVIDERS_LOCK:
        shared = _PROVIDERS.get(key)
        if shared is None:
            exporter = OTLPSpanExporter(url, headers=headers, timeout=timeout, compression=Compression(compression))
            processor = BatchSpanProcessor(exporter, max_queue_size=MAX_QUEUE, schedule_delay_millis=1000,
                                           max_export_batch_size=512, export_timeout_millis=timeout * 1000)
            limited = any(os.environ.get(f"OTEL_{v}ATTRIBUTE_VALUE_LENGTH_LIMIT") for v in ("SPAN_", ""))
            # The SDK's own exit hook would wait up to 30 s for a hung collector: ours waits EXIT_TIMEOUT_S.
            provider = TracerProvider(resource=Resource.create({"service.name": service}), shutdown_on_exit=False,
                                      span_limits=SpanLimits(max_span_attribute_length=None if limited
                                                             else CONTENT_LIMIT))
            provider.add_span_processor(processor)
            shared = _PROVIDERS[key] = _Shared(key, provider)
        shared.users += 1
        return shared


def _release(shared: _Shared, timeout_s: float) -> None:
    with _PROVIDERS_LOCK:
        shared.users -= 1
        if shared.users > 0 or _PROVIDERS.get(shared.key) is not shared:
            return
        del _PROVIDERS[shared.key]
    _bounded(shared.provider.shutdown, timeout_s)


@atexit.register
def _shutdown_all() -> None:
    """At exit: send what is queued, waiting at most EXIT_TIMEOUT_S in all."""
    with _PROVIDERS_LOCK:
        providers = [s.provider for s in _PROVIDERS.values()]
        _PROVIDERS.clear()
    deadline = time.monotonic() + EXIT_TIMEOUT_S
    for provider in providers:
        _bounded(provider.shutdown, max(0.0, deadline - time.monotonic()))


def _bounded(fn: Callable[[], Any], timeout_s: float) -> bool:
    """Run `fn` on a daemon thread and wait at most `timeout_s`; True if it finished (and did not fail)."""
    result: list[bool] = []

    def target() -> None:
        try:
            result.append(fn() is not False)
        except Exception:
            log.debug("OpenTelemetry flush or shutdown failed", exc_info=True)

    thread = threading.Thread(target=target, name="shou-otel-flush", daemon=True)
    thread.start()
    thread.join(timeout_s)
    return bool(result and result[0])
