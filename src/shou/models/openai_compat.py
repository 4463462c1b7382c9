"""Chat Completions over httpx: OpenAI, DeepSeek, Qwen, Ollama, vLLM, llama.cpp and any compatible server.

Streaming reads the SSE body line by line, surfaces text as it comes, and assembles tool-call argument
fragments by their `index` into complete calls. Failures become the `ModelError` tree with messages that
name the setting to change; 429, 5xx and timeouts are retried with backoff first.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from typing import Any

import httpx

from ..config import redact_urls
from ..errors import (
    ModelAuthError,
    ModelError,
    ModelNotFoundError,
    ModelRateLimitError,
    ModelResponseError,
    ModelUnavailableError,
)
from ..messages import Message, ToolCall
from ..usage import Usage
from .base import Completion, ModelEvent, ModelSettings, Retrying, TextChunk, ToolCallChunk
from .runtime import RetryPolicy, parse_retry_after

DEFAULT_TIMEOUT = httpx.Timeout(120.0, connect=10.0)
POOL_LIMITS = httpx.Limits(max_connections=1000, max_keepalive_connections=100)


class OpenAICompatible:
    """A model behind a `/chat/completions` endpoint.

    `key_setting` and `model_setting` name where the user configures the key and the model, so errors
    can tell them exactly what to change (e.g. `DEEPSEEK_API_KEY`).
    """

    def __init__(
        self, model: str, *, base_url: str, api_key: str | None = None, provider: str = "openai",
        stream: bool = True, retry: RetryPolicy | None = None, timeout: httpx.Timeout | float = DEFAULT_TIMEOUT,
        headers: dict[str, str] | None = None, key_setting: str = "SHOU_API_KEY",
        model_setting: str = "--model / SHOU_MODEL", client: httpx.AsyncClient | None = None,
    ) -> None:
        self.model = model
        self.provider = provider
        self.name = f"{provider}:{model}"
        self.base_url = base_url.rstrip("/")
        self.streaming = stream
        self.retry = retry or RetryPolicy()
        self.key_setting = key_setting
        self.model_setting = model_setting
        self._url = self.base_url + "/chat/completions"
        self._where = redact_urls(self.base_url)  # how errors name it: never with credentials in it
        self._headers = {"Content-Type": "application/json", **(headers or {})}
        if api_key:
            self._headers["Authorization"] = f"Bearer {api_key}"
        self._timeout = timeout
        self._client = client
        self._own_client = client is None

    def __repr__(self) -> str:  # never show the key
        return f"OpenAICompatible({self.name!r}, base_url={self._where!r})"

    @property
    def client(self) -> httpx.AsyncClient:
        """The httpx client, made on first use (so building a model does no I/O)."""
        if self._client is None:
            # httpx's default pool (100 connections) would park the 101st concurrent session; these are the
            # openai SDK's limits.
            self._client = httpx.AsyncClient(timeout=self._timeout, limits=POOL_LIMITS)
        return self._client

    async def aclose(self) -> None:
        """Close the connection pool if this model made it."""
        if self._client is not None and self._own_client:
            await self._client.aclose()
            self._client = None

    def request_body(
        self, messages: list[Message], tools: list[dict[str, Any]], settings: ModelSettings | None
    ) -> dict[str, Any]:
        """The JSON body for one request."""
        body: dict[str, Any] = {"model": self.model, "messages": [m.to_wire() for m in messages]}
        if tools:
            body["tools"] = tools
        if self.streaming:
            body["stream"] = True
            body["stream_options"] = {"include_usage": True}
        if settings is not None:
            if settings.temperature is not None:
                body["temperature"] = settings.temperature
            if settings.max_tokens is not None:
                body["max_tokens"] = settings.max_tokens
            if settings.tool_choice is not None and tools:
                body["tool_choice"] = settings.tool_choice
            if settings.parallel_tool_calls is not None and tools:
                body["parallel_tool_calls"] = settings.parallel_tool_calls
            body.update(settings.extra)
        return body

    async def stream(
        self, messages: list[Message], tools: list[dict[str, Any]], settings: ModelSettings | None = None
    ) -> AsyncIterator[ModelEvent | Retrying]:
        """One response, retried on 429/5xx/timeouts until output starts."""
        body = self.request_body(messages, tools, settings)
        retry = 0
        while True:
            started = False
            try:
                async with self.client.stream("POST", self._url, json=body, headers=self._headers) as resp:
                    if resp.status_code >= 400:
                        await resp.aread()
                        raise self._http_error(resp)
                    if self.streaming:
                        async for event in self._read_sse(resp):
                            started = True
                            yield event
                    else:
                        for event in self._read_json(await resp.aread()):
                            started = True
                            yield event
                return
            except ModelError as e:
                error: ModelError = e
            except httpx.TimeoutException as e:
                error = ModelUnavailableError(
                    f"no answer from {self._where} in time ({type(e).__name__}); the server may be overloaded"
                )
            except (httpx.ConnectError, httpx.RemoteProtocolError, httpx.ReadError) as e:
                error = ModelUnavailableError(
                    f"cannot reach {self._where} ({type(e).__name__}: {redact_urls(str(e))}); is the server running "
                    "and the base URL right (--base-url / SHOU_BASE_URL)?"
                )
            # Retrying after output began would duplicate text the user already saw.
            if started or not error.retryable or retry >= self.retry.max_retries:
                if error.retryable and retry:
                    raise type(error)(f"{error} (gave up after {retry + 1} attempts)", status=error.status) from None
                raise error from None
            delay = self.retry.delay(retry, error.retry_after)
            yield Retrying(retry + 1, delay, str(error))
            await asyncio.sleep(delay)
            retry += 1

    def _http_error(self, resp: httpx.Response) -> ModelError:
        status = resp.status_code
        detail = redact_urls(_error_detail(resp))
        where = f"{self._where} answered HTTP {status}: {detail}"
        if status in (401, 403):
            return ModelAuthError(
                f"the provider refused the API key ({where}). Set {self.key_setting} (or SHOU_API_KEY) "
                "to a valid key.", status=status,
            )
        if status == 404:
            return ModelNotFoundError(
                f"model {self.model!r} was not found ({where}). Set {self.model_setting} to a model this "
                "provider serves, and check the base URL.", status=status,
            )
        retry_after = parse_retry_after(resp.headers.get("retry-after"))
        if status == 429:
            return ModelRateLimitError(f"rate limited ({where})", status=status, retry_after=retry_after)
        if status >= 500 or status == 408:
            return ModelUnavailableError(f"provider error ({where})", status=status, retry_after=retry_after)
        return ModelResponseError(f"request rejected ({where})", status=status)

    def _read_json(self, raw: bytes) -> list[ModelEvent]:
        try:
            data = json.loads(raw)
            choice = data["choices"][0]
            wire = dict(choice["message"])
        except (ValueError, KeyError, IndexError, TypeError) as e:
            raise ModelResponseError(f"{self._where} sent a response that is not a chat completion: {e}") from None
        wire.setdefault("role", "assistant")
        wire["tool_calls"] = [_normalise_call(c, i) for i, c in enumerate(wire.get("tool_calls") or ())]
        message = Message.from_wire(wire)
        done = Completion(message, Usage.from_wire(data.get("usage")), choice.get("finish_reason"),
                          data.get("model") or self.model)
        return [TextChunk(message.text), done] if message.text else [done]

    async def _read_sse(self, resp: httpx.Response) -> AsyncIterator[ModelEvent]:
        text_parts: list[str] = []
        # index -> [id, name, argument fragments]; a plain dict beats per-chunk objects on the hot path
        calls: dict[int, list[Any]] = {}
        finish_reason: str | None = None
        usage_wire: dict[str, Any] | None = None
        model_name = self.model
        async for line in resp.aiter_lines():
            if not line.startswith("data:"):
                continue
            payload = line[5:].strip()
            if payload == "[DONE]":
                break
            try:
                chunk = json.loads(payload)
            except ValueError:
                raise ModelResponseError(
                    f"{self._where} sent a stream chunk that is not JSON: {payload[:200]}"
                ) from None
            if "error" in chunk:
                raise ModelUnavailableError(f"{self._where} reported an error mid-stream: {_message_of(chunk)}")
            if chunk.get("usage"):
                usage_wire = chunk["usage"]
            model_name = chunk.get("model") or model_name
            for choice in chunk.get("choices") or ():
                delta = choice.get("delta") or {}
                content = delta.get("content")
                if content:
                    text_parts.append(content)
                    yield TextChunk(content)
                for pos, tc in enumerate(delta.get("tool_calls") or ()):
                    index = tc.get("index", pos)
                    entry = calls.get(index)
                    if entry is None:
                        entry = calls[index] = [None, None, []]
                    if tc.get("id"):
                        entry[0] = tc["id"]
                    fn = tc.get("function") or {}
                    new_name = None
                    if fn.get("name") and not entry[1]:
                        entry[1] = new_name = fn["name"]
                    args = fn.get("arguments")
                    if isinstance(args, dict):  # some servers send parsed arguments
                        args = json.dumps(args)
                    if args:
                        entry[2].append(args)
                    if new_name or args:
                        yield ToolCallChunk(index, new_name, args or "")
                if choice.get("finish_reason"):
                    finish_reason = choice["finish_reason"]
        tool_calls = [
            ToolCall(e[0] or f"call_{i}", e[1] or "", "".join(e[2])) for i, e in sorted(calls.items())
        ]
        message = Message.assistant("".join(text_parts) or None, tool_calls)
        yield Completion(message, Usage.from_wire(usage_wire), finish_reason, model_name)


def _normalise_call(call: dict[str, Any], index: int) -> dict[str, Any]:
    fn = dict(call.get("function") or {})
    if isinstance(fn.get("arguments"), dict):
        fn["arguments"] = json.dumps(fn["arguments"])
    return {"id": call.get("id") or f"call_{index}", "type": "function", "function": fn}


def _message_of(data: Any) -> str:
    if isinstance(data, dict):
        err = data.get("error", data)
        if isinstance(err, dict):
            return str(err.get("message") or err)
        return str(err)
    return str(data)


def _error_detail(resp: httpx.Response) -> str:
    try:
        return _message_of(resp.json())[:300]
    except ValueError:
        return resp.text[:300] or resp.reason_phrase
